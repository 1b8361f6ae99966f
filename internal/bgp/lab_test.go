package bgp

// The BIRD lab: real BIRD 2 daemons standing in for Calico nodes, each in its
// own network namespace, bridged to an "edge" namespace where Perimeter's
// speaker and route manager run. The edge runs as a child process (this test
// binary, re-executed under `ip netns exec`): a network namespace belongs to
// a thread, and GoBGP's goroutines would not stay on one, so the whole
// process must live in the edge namespace.
//
// Addresses: links in 198.19.64.0/24 (edge 198.19.64.1 on br0, node i at
// 198.19.64.(10+i)), pods in 198.18.64.0/18 (node i's blocks in
// 198.18.(64+i).0/24). With IPv6 (enableIPv6), links in 2001:db8:18:ff::/64
// (edge ::1, node i ::(10+i)) and pods in 2001:db8:18::/64 (node i's /122
// blocks in 2001:db8:18::i00/120). All inside namespaces the tests create.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"text/template"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/perimeter-ingress/perimeter/internal/routes"
	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

const envEdge = "PERIMETER_BGP_TEST_EDGE"

func TestMain(m *testing.M) {
	if spec := os.Getenv(envEdge); spec != "" {
		os.Exit(runEdge(spec))
	}
	os.Exit(m.Run())
}

// edgeSpec configures the edge child process.
type edgeSpec struct {
	Socket            string
	ListenPort        int
	PodCIDRs          []string
	HoldSeconds       int
	StaleTimeout      time.Duration
	KeepRoutesOnExit  bool
	DisableGR         bool
	NodePasswordKey   string
	StaticPeers       []string
	ResyncInterval    time.Duration
	PeerWithNodes     bool
	InitialState      *edgeState
	GracefulRestartTm time.Duration
	BlockSize         int
}

// edgeState is a ClusterState with its secrets in a JSON-friendly form.
type edgeState struct {
	ClusterState
	Passwords map[string]string // SecretRef.String() -> value
}

var labSecret = SecretRef{Namespace: "calico-system", Name: "bgp", Key: "mesh"}

// runEdge is the child process: speaker + route manager in the edge
// namespace, controlled over a unix socket.
func runEdge(specPath string) int {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	fail := func(err error) int { log.Error("edge failed", "err", err); return 1 }
	raw, err := os.ReadFile(specPath)
	if err != nil {
		return fail(err)
	}
	var spec edgeSpec
	if err := json.Unmarshal(raw, &spec); err != nil {
		return fail(err)
	}
	h, err := netlink.NewHandle()
	if err != nil {
		return fail(err)
	}
	rm, err := routes.New(routes.Config{ResyncInterval: spec.ResyncInterval}, h, log, nil)
	if err != nil {
		return fail(err)
	}
	src := newChanSource()
	cfg := Config{
		LocalAS: 64512, RouterID: netip.MustParseAddr("198.19.64.1"), ListenPort: spec.ListenPort,
		PeerWithNodes: spec.PeerWithNodes, HoldTime: time.Duration(spec.HoldSeconds) * time.Second,
		KeepaliveInterval: time.Second, ConnectRetry: time.Second, StaleTimeout: spec.StaleTimeout,
		KeepRoutesOnExit: spec.KeepRoutesOnExit, DisableGracefulRestart: spec.DisableGR,
		GracefulRestartTime: spec.GracefulRestartTm, BlockSize: spec.BlockSize, Source: src,
	}
	if spec.NodePasswordKey != "" {
		ref := labSecret
		cfg.NodePassword = &ref
	}
	for _, c := range spec.PodCIDRs {
		cfg.PodCIDRs = append(cfg.PodCIDRs, netip.MustParsePrefix(c))
	}
	for _, f := range spec.StaticPeers {
		p, err := ParsePeerFlag(f)
		if err != nil {
			return fail(err)
		}
		cfg.Peers = append(cfg.Peers, p)
	}
	sp, err := New(cfg, rm, log, nil)
	if err != nil {
		return fail(err)
	}
	push := func(es edgeState) {
		st := es.ClusterState
		st.Secrets = map[SecretRef]string{}
		for k, v := range es.Passwords {
			r, err := ParseSecretRef(k)
			if err == nil {
				st.Secrets[r] = v
			}
		}
		src.ch <- st
	}
	if spec.InitialState == nil {
		spec.InitialState = &edgeState{}
	}
	push(*spec.InitialState)
	mux := http.NewServeMux()
	mux.Handle("GET /debug/bgp", sp.Handler())
	mux.HandleFunc("POST /state", func(w http.ResponseWriter, r *http.Request) {
		var es edgeState
		if err := json.NewDecoder(r.Body).Decode(&es); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		push(es)
	})
	l, err := net.Listen("unix", spec.Socket)
	if err != nil {
		return fail(err)
	}
	hs := &http.Server{Handler: mux}
	go func() { _ = hs.Serve(l) }()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	err = sp.Run(ctx)
	_ = hs.Close()
	if err != nil {
		return fail(err)
	}
	log.Info("edge exited cleanly")
	return 0
}

// lab is one test's set of namespaces and processes.
type lab struct {
	t      testing.TB
	id     string
	dir    string
	edge   *edgeProc
	edgeNS *testenv.Netns
	edgeH  *netlink.Handle
	nodes  []*birdNode
	port   int
	ipv6   bool
}

// Lab IPv6 addresses.
const (
	labEdge6 = "2001:db8:18:ff::1"
	labPool6 = "2001:db8:18::/64"
)

// enableIPv6 gives the edge an IPv6 address on br0 and nodes added later
// one on their link, with the IPv6 leak guard in the root namespace. DAD is
// off: the addresses are usable at once.
func (l *lab) enableIPv6() {
	l.t.Helper()
	testenv.GuardRoutes(l.t)
	l.ip("-6", "addr", "add", labEdge6+"/64", "dev", "br0", "nodad")
	l.ipv6 = true
}

// block6 returns node i's j-th IPv6 /122.
func block6(i, j int) string { return fmt.Sprintf("2001:db8:18::%x/122", i*0x100+j*0x40) }

var labCounter atomic.Int32

func requireLab(tb testing.TB) {
	tb.Helper()
	testenv.RequireBird(tb)
}

func newLab(tb testing.TB) *lab {
	tb.Helper()
	requireLab(tb)
	id := fmt.Sprintf("bgp-%d", labCounter.Add(1))
	l := &lab{t: tb, id: id, dir: tb.TempDir(), port: 1790}
	l.edgeNS = testenv.NewNetns(tb, id+"-edge")
	testenv.NewBridge(tb, l.edgeNS, "br0", "198.19.64.1/24")
	var err error
	if l.edgeH, err = l.edgeNS.Netlink(); err != nil {
		tb.Fatal(err)
	}
	return l
}

// ip runs ip(8) inside the edge namespace.
func (l *lab) ip(args ...string) {
	l.t.Helper()
	if _, err := l.edgeNS.Exec(append([]string{"ip"}, args...)...); err != nil {
		l.t.Fatal(err)
	}
}

// birdNode is a BIRD daemon in its own namespace playing a Calico node.
type birdNode struct {
	lab      *lab
	i        int
	name     string
	addr     string
	addr6    string // with enableIPv6
	bird     *testenv.Bird
	settings birdSettings
}

// birdSettings shape a node's bird.conf.
type birdSettings struct {
	Addr, Edge string
	// Addr6 and Edge6 add an IPv6 session (ipv6 channel), over the
	// nodes' IPv6 addresses, exporting the IPv6 static routes.
	Addr6, Edge6 string
	EdgePort     int
	GR           bool
	GRTime       int
	Password     string
	Static       []birdStatic
	RouterIDTag  int
}

// birdSession is one BGP session of a node to the edge.
type birdSession struct {
	Name, Local, Neighbor, Family, Password string
}

// Sessions are the node's sessions: IPv4, and IPv6 when Addr6 is set (the
// IPv6 one without a password, as the tests that use it need none).
func (s birdSettings) Sessions() []birdSession {
	out := []birdSession{{Name: "edge", Local: s.Addr, Neighbor: s.Edge, Family: "ipv4", Password: s.Password}}
	if s.Addr6 != "" {
		out = append(out, birdSession{Name: "edge6", Local: s.Addr6, Neighbor: s.Edge6, Family: "ipv6"})
	}
	return out
}

type birdStatic struct {
	Name     string
	Disabled bool
	IPv6     bool
	Routes   []string
}

var birdConf = template.Must(template.New("bird").Parse(`router id {{.Addr}};
log stderr all;
protocol device { scan time 10; }
{{range .Static}}
protocol static {{.Name}} {
{{- if .Disabled}}
	disabled;
{{- end}}
	{{if .IPv6}}ipv6{{else}}ipv4{{end}};
{{- range .Routes}}
	route {{.}} blackhole;
{{- end}}
}
{{end}}
{{- range .Sessions}}
protocol bgp {{.Name}} {
	local {{.Local}} as 64512;
	neighbor {{.Neighbor}} port {{$.EdgePort}} as 64512;
	hold time 9;
	connect delay time 1;
	connect retry time 1;
	error wait time 1, 2;
{{- if $.GR}}
	graceful restart on;
	graceful restart time {{$.GRTime}};
{{- else}}
	graceful restart off;
{{- end}}
{{- if .Password}}
	password "{{.Password}}";
{{- end}}
	{{.Family}} { import none; export where source = RTS_STATIC; next hop self; };
}
{{- end}}
`))

// addNode creates node-i's namespace and its port on the edge's bridge;
// start runs its BIRD.
func (l *lab) addNode(s birdSettings) *birdNode {
	l.t.Helper()
	i := len(l.nodes) + 1
	n := &birdNode{lab: l, i: i, name: fmt.Sprintf("node-%d", i), addr: fmt.Sprintf("198.19.64.%d", 10+i)}
	s.Addr, s.Edge, s.EdgePort = n.addr, "198.19.64.1", l.port
	if l.ipv6 {
		n.addr6 = fmt.Sprintf("2001:db8:18:ff::%d", 10+i)
		s.Addr6, s.Edge6 = n.addr6, labEdge6
	}
	n.settings = s
	ns := testenv.NewNetns(l.t, fmt.Sprintf("%s-n%d", l.id, i))
	testenv.Veth(l.t, testenv.VethOptions{NS: l.edgeNS, PeerNS: ns, Name: fmt.Sprintf("vn%d", i), PeerName: "eth0",
		Master: "br0", PeerAddr: n.addr + "/24"})
	if l.ipv6 {
		if _, err := ns.Exec("ip", "-6", "addr", "add", n.addr6+"/64", "dev", "eth0", "nodad"); err != nil {
			l.t.Fatal(err)
		}
	}
	n.bird = testenv.NewBird(l.t, ns, l.dir, n.name)
	l.nodes = append(l.nodes, n)
	return n
}

func (n *birdNode) start() {
	t := n.lab.t
	t.Helper()
	var b bytes.Buffer
	if err := birdConf.Execute(&b, n.settings); err != nil {
		t.Fatal(err)
	}
	if err := n.bird.Start(b.String()); err != nil {
		t.Fatal(err)
	}
}

func (n *birdNode) birdc(args ...string) {
	n.lab.t.Helper()
	if _, err := n.bird.Birdc(args...); err != nil {
		n.lab.t.Fatal(err)
	}
}

// kill signals BIRD; SIGTERM makes it send Cease, SIGKILL drops the TCP
// session without a word (as a crash does), SIGSTOP freezes it.
func (n *birdNode) kill(sig syscall.Signal) {
	if sig == syscall.SIGSTOP || sig == syscall.SIGCONT {
		n.bird.Signal(sig)
		return
	}
	n.bird.Stop(sig)
}

// edgeProc is the edge child process.
type edgeProc struct {
	cmd     *exec.Cmd
	socket  string
	logPath string
	exited  chan struct{}
	err     error
	client  *http.Client
}

func (l *lab) startEdge(spec edgeSpec) *edgeProc {
	t := l.t
	t.Helper()
	n := 0
	if l.edge != nil {
		n = 1
	}
	spec.Socket = filepath.Join(l.dir, fmt.Sprintf("edge%d.sock", n))
	spec.ListenPort = l.port
	if spec.HoldSeconds == 0 {
		spec.HoldSeconds = 9
	}
	if spec.StaleTimeout == 0 {
		spec.StaleTimeout = time.Minute
	}
	raw, _ := json.Marshal(spec)
	specPath := filepath.Join(l.dir, fmt.Sprintf("edge%d.json", n))
	if err := os.WriteFile(specPath, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	e := &edgeProc{socket: spec.Socket, logPath: filepath.Join(l.dir, "edge.log"), exited: make(chan struct{})}
	logf, err := os.OpenFile(e.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	e.cmd = l.edgeNS.Command(context.Background(), exe)
	e.cmd.Env = append(os.Environ(), envEdge+"="+specPath)
	e.cmd.Stdout, e.cmd.Stderr = logf, logf
	e.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := e.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { e.err = e.cmd.Wait(); logf.Close(); close(e.exited) }()
	t.Cleanup(func() {
		e.stop(t, syscall.SIGKILL)
		if t.Failed() {
			if b, err := os.ReadFile(e.logPath); err == nil {
				t.Logf("edge log (tail):\n%s", tail(b, 60))
			}
		}
	})
	e.client = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", e.socket)
		}}}
	eventually(t, 10*time.Second, func() string {
		select {
		case <-e.exited:
			t.Fatalf("edge exited at start: %v", e.err)
		default:
		}
		if _, err := e.status(); err != nil {
			return "edge not answering: " + err.Error()
		}
		return ""
	})
	l.edge = e
	return e
}

// stop signals the edge and waits for it to exit.
func (e *edgeProc) stop(t testing.TB, sig syscall.Signal) error {
	select {
	case <-e.exited:
		return e.err
	default:
	}
	_ = e.cmd.Process.Signal(sig)
	select {
	case <-e.exited:
	case <-time.After(20 * time.Second):
		t.Errorf("edge did not exit on %v", sig)
		_ = e.cmd.Process.Kill()
		<-e.exited
	}
	return e.err
}

func (e *edgeProc) status() (Status, error) {
	var st Status
	resp, err := e.client.Get("http://edge/debug/bgp?format=json")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return st, fmt.Errorf("status %s: %s", resp.Status, b)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

func (e *edgeProc) text(t testing.TB) string {
	resp, err := e.client.Get("http://edge/debug/bgp")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// kernel returns the edge's routes with our protocol: "dst via gw".
func (l *lab) kernel() map[string]string {
	l.t.Helper()
	rs, err := l.edgeH.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Protocol: routes.DefaultProtocol},
		netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		l.t.Fatal(err)
	}
	out := map[string]string{}
	for _, r := range rs {
		out[r.Dst.String()] = r.Gw.String()
	}
	return out
}

func (l *lab) showRoutes() string {
	out, _ := l.edgeNS.Exec("ip", "route", "show", "table", "all")
	return out
}

// waitKernel polls until the routes with our protocol are exactly want.
func (l *lab) waitKernel(timeout time.Duration, want map[string]string) {
	l.t.Helper()
	eventually(l.t, timeout, func() string {
		got := l.kernel()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Sprintf("edge routes (proto 201) = %v\nwant %v\n%s", got, want, l.showRoutes())
		}
		return ""
	})
}

func (l *lab) nodeState(nodes ...*birdNode) []Node {
	var out []Node
	for _, n := range nodes {
		a := netip.MustParseAddr(n.addr)
		node := Node{Name: n.name, PeerAddress: a, Addresses: []netip.Addr{a}}
		if n.addr6 != "" {
			node.PeerAddress6 = netip.MustParseAddr(n.addr6)
			node.Addresses = append(node.Addresses, node.PeerAddress6)
		}
		out = append(out, node)
	}
	return out
}

func tail(b []byte, n int) string {
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// block returns node i's j-th /26.
func block(i, j int) string { return fmt.Sprintf("198.18.%d.%d/26", 64+i, 64*j) }

func peerStatus(st Status, addr string) PeerStatus {
	for _, p := range st.Peers {
		if p.Address.String() == addr {
			return p
		}
	}
	return PeerStatus{}
}
