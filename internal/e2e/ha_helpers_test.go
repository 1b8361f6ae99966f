package e2e

// The high-availability test bed (docs/ha.md): a router namespace running
// Debian's BIRD 2 with ECMP into its kernel, several edge namespaces each
// running the daemon and its HAProxy against the shared test API server,
// a cluster namespace holding the pods, and a client namespace behind the
// router that sends to the announce address.
//
//	client 203.0.113.1 -- 203.0.113.0 router --(198.19.120.0/24)-- edge i --(198.19.121.0/24)-- cluster -- pods 198.18.122.0/24
//
// The announce address is 198.19.130.10 on every edge's lo.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"text/template"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/perimeter-ingress/perimeter/internal/bgp"
	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

const (
	haAnnounce   = "198.19.130.10"
	haRouterAS   = "64500"
	haEdgeAS     = "64601"
	haUpRange    = "198.19.120.0/24"
	haPodRange   = "198.19.121.0/24"
	haPodLinks   = "198.19.122.0/24"
	haPodSubnet  = "198.18.122.0/24"
	haHoldTime   = 3 * time.Second
	haRestart    = 15 * time.Second
	haDrain      = 2 * time.Second
	haCtrlPort   = 10254
	haHTTPPort   = 80
	haRouterAddr = "203.0.113.0"
	haClientAddr = "203.0.113.1"
)

type haLab struct {
	e       *env
	dir     string
	router  *testenv.Netns
	bird    *testenv.Bird
	client  *testenv.Netns
	cluster *testenv.Netns
	edges   []*haEdge
	podSeq  int
	frr     *frrRouter // nil: the router runs BIRD
	// takeover is the longest a restarted edge took to have its session
	// up again after the signal (the last haRestartEach).
	takeover time.Duration
}

type haEdge struct {
	lab        *haLab
	i          int
	ns         *testenv.Netns
	up         *testenv.VethPair // NS router, PeerNS edge
	addr       string            // the edge's address towards the router
	runtimeDir string
	configDir  string
	ctrl       *http.Client
	d          *edgeDaemon
}

// edgeDaemon is one run of the daemon in an edge namespace.
type edgeDaemon struct {
	cmd     *exec.Cmd
	out     *syncBuffer
	done    chan struct{}
	exitErr error
}

func newHALab(e *env, edges int) *haLab { return newHALabRouter(e, edges, "bird") }

// newHALabRouter builds the test bed with BIRD or FRR ("frr") as the router.
func newHALabRouter(e *env, edges int, router string) *haLab {
	t := e.t
	t.Helper()
	if router == "frr" {
		requireFRR(t)
	} else {
		requireBIRD(t)
	}
	l := &haLab{e: e, dir: shortTempDir(t)}
	l.router = testenv.NewNetns(t, "ha-router")
	for k, v := range map[string]string{
		"net/ipv4/ip_forward": "1",
		// Flows from one client spread by port.
		"net/ipv4/fib_multipath_hash_policy": "1",
		// A draining edge still answers the flows it has: its replies
		// come from a path the router no longer routes to.
		"net/ipv4/conf/all/rp_filter":     "0",
		"net/ipv4/conf/default/rp_filter": "0",
	} {
		if err := l.router.Sysctl(k, v); err != nil {
			t.Fatal(err)
		}
	}
	l.client = testenv.NewNetns(t, "ha-client")
	testenv.Veth(t, testenv.VethOptions{NS: l.router, PeerNS: l.client, Addr: haRouterAddr + "/31", PeerAddr: haClientAddr + "/31"})
	l.exec(l.client, "ip", "route", "add", "default", "via", haRouterAddr)

	l.cluster = testenv.NewNetns(t, "ha-cluster")
	if err := l.cluster.Sysctl("net/ipv4/ip_forward", "1"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < edges; i++ {
		ed := &haEdge{lab: l, i: i, runtimeDir: shortTempDir(t), configDir: t.TempDir()}
		ed.ns = testenv.NewNetns(t, fmt.Sprintf("ha-edge%d", i))
		ed.up = testenv.Veth(t, testenv.VethOptions{NS: l.router, PeerNS: ed.ns, LinkRange: haUpRange})
		ed.addr = ed.up.PeerAddr.Addr().String()
		pl := testenv.Veth(t, testenv.VethOptions{NS: l.cluster, PeerNS: ed.ns, LinkRange: haPodRange})
		l.exec(ed.ns, "ip", "route", "add", "default", "via", ed.up.Addr.Addr().String())
		l.exec(ed.ns, "ip", "route", "add", haPodSubnet, "via", pl.Addr.Addr().String())
		ed.ctrl = &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, DialContext: nsDialer(ed.ns)}}
		forwardInto(t, ed.ns, e.c.Host)
		l.edges = append(l.edges, ed)
		t.Cleanup(func() {
			ed.stopDaemon(syscall.SIGKILL)
			for _, pid := range haproxyPIDs(ed.runtimeDir) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		})
	}
	if router == "frr" {
		l.frr = l.startFRR()
		return l
	}
	l.bird = testenv.NewBird(t, l.router, l.dir, "router")
	if err := l.bird.Start(l.birdConfig()); err != nil {
		t.Fatal(err)
	}
	return l
}

func (l *haLab) exec(ns *testenv.Netns, args ...string) {
	l.e.t.Helper()
	if _, err := ns.Exec(args...); err != nil {
		l.e.t.Fatal(err)
	}
}

// routerBird is the router's configuration, as docs/ha.md shows it: one
// passive eBGP session per edge, only the announce addresses imported,
// nothing exported, ECMP into the kernel.
var routerBird = template.Must(template.New("router").Parse(`router id {{.RouterID}};
log stderr all;
protocol device { scan time 10; }
protocol kernel {
	merge paths on;
	ipv4 { import none; export where source = RTS_BGP; };
}
filter edge_in {
	if net ~ [ {{.Announce}} ] then accept;
	reject;
}
template bgp edges {
	local as {{.RouterAS}};
	passive on;
	hold time {{.Hold}};
	error wait time 1,10;
	graceful restart on;
	ipv4 { import filter edge_in; export none; };
}
{{- range .Edges}}
protocol bgp edge{{.I}} from edges {
	neighbor {{.Addr}} as {{$.EdgeAS}};
	source address {{.Router}};
}
{{- end}}
`))

func (l *haLab) birdConfig() string {
	type edge struct {
		I            int
		Addr, Router string
	}
	var edges []edge
	for _, ed := range l.edges {
		edges = append(edges, edge{I: ed.i, Addr: ed.addr, Router: ed.up.Addr.Addr().String()})
	}
	var b bytes.Buffer
	if err := routerBird.Execute(&b, map[string]any{"RouterID": haRouterAddr, "RouterAS": haRouterAS, "EdgeAS": haEdgeAS,
		"Announce": haAnnounce + "/32", "Hold": int(haHoldTime.Seconds()), "Edges": edges}); err != nil {
		l.e.t.Fatal(err)
	}
	return b.String()
}

// nsDialer dials from inside ns.
func nsDialer(ns *testenv.Netns) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := ns.Do(func() error {
			var err error
			c, err = (&net.Dialer{Timeout: 3 * time.Second}).DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
}

// forwardInto makes the API server (on the root namespace's loopback)
// reachable at the same address inside ns, so the daemon's kubeconfig and
// the server certificate work unchanged.
func forwardInto(t testing.TB, ns *testenv.Netns, host string) {
	t.Helper()
	hostport := strings.TrimPrefix(host, "https://")
	var ln net.Listener
	if err := ns.Do(func() error {
		var err error
		ln, err = net.Listen("tcp", hostport)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				u, err := net.DialTimeout("tcp", hostport, 3*time.Second)
				if err != nil {
					return
				}
				defer u.Close()
				go func() { _, _ = io.Copy(u, c); u.(*net.TCPConn).CloseWrite() }()
				_, _ = io.Copy(c, u)
			}()
		}
	}()
}

// pods starts n pods behind the cluster namespace.
func (l *haLab) pods(prefix string, n int) []*testenv.Pod {
	var out []*testenv.Pod
	for i := 0; i < n; i++ {
		l.podSeq++
		out = append(out, testenv.StartPod(l.e.t, testenv.PodOptions{
			Name: fmt.Sprintf("%s-%d", prefix, i), IP: fmt.Sprintf("198.18.122.%d", 9+l.podSeq),
			Parent: l.cluster, LinkRange: haPodLinks,
		}))
	}
	return out
}

func (ed *haEdge) flags(extra ...string) []string {
	e := ed.lab.e
	return append([]string{
		"--external",
		"--config=/dev/null",
		"--kubeconfig=" + e.c.DaemonKubeconfig,
		"--program=/usr/sbin/haproxy",
		"--config-dir=" + ed.configDir,
		"--runtime-dir=" + ed.runtimeDir,
		"--http-bind-port=" + strconv.Itoa(haHTTPPort),
		"--https-bind-port=443",
		"--election-id=perimeter-" + e.ns,
		// Not the wildcard: HAProxy binds the announce address itself.
		"--ipv4-bind-address=" + ed.addr,
		"--disable-ipv6",
		"--healthz-bind-port=0",
		"--controller-port=" + strconv.Itoa(haCtrlPort),
		"--namespace-whitelist=" + e.ns,
		"--sync-period=100ms",
		"--log=debug",
		"--bgp-local-as=" + haEdgeAS,
		"--bgp-router-id=" + ed.addr,
		"--bgp-listen-port=1179",
		"--bgp-upstream-peer=" + ed.up.Addr.Addr().String() + ",as=" + haRouterAS,
		"--announce-address=" + haAnnounce,
		"--bgp-upstream-hold-time=" + haHoldTime.String(),
		"--bgp-upstream-restart-time=" + haRestart.String(),
		"--shutdown-drain=" + haDrain.String(),
		"--bgp-upstream-community=64601:10",
	}, extra...)
}

// start runs the daemon in the edge namespace and waits for /readyz.
func (ed *haEdge) start(extra ...string) {
	t := ed.lab.e.t
	t.Helper()
	d := &edgeDaemon{out: &syncBuffer{}, done: make(chan struct{})}
	d.cmd = ed.ns.Command(context.Background(), append([]string{perimeterBinary(t)}, ed.flags(extra...)...)...)
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	// `ip netns exec` execs the daemon: signals reach it directly.
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.exitErr = d.cmd.Wait(); close(d.done) }()
	prev := ed.d
	ed.d = d
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("edge %d daemon output:\n%s", ed.i, tail(d.out.String(), 40))
		}
	})
	_ = prev
	testenv.Eventually(t, 60*time.Second, func() error {
		select {
		case <-d.done:
			t.Fatalf("edge %d daemon exited: %v\n%s", ed.i, d.exitErr, tail(d.out.String(), 40))
		default:
		}
		return ed.get("/readyz", nil)
	})
}

func (ed *haEdge) get(path string, v any) error {
	resp, err := ed.ctrl.Get(fmt.Sprintf("http://127.0.0.1:%d%s", haCtrlPort, path))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", path, resp.Status)
	}
	if v != nil {
		return json.NewDecoder(resp.Body).Decode(v)
	}
	return nil
}

func (ed *haEdge) upstream() (bgp.UpstreamStatus, error) {
	var st bgp.UpstreamStatus
	err := ed.get("/debug/bgp/upstream?format=json", &st)
	return st, err
}

// signal sends sig to the daemon.
func (ed *haEdge) signal(sig syscall.Signal) {
	if ed.d != nil {
		_ = ed.d.cmd.Process.Signal(sig)
	}
}

// stopDaemon signals the daemon and waits for it to exit.
func (ed *haEdge) stopDaemon(sig syscall.Signal) {
	d := ed.d
	if d == nil {
		return
	}
	select {
	case <-d.done:
		return
	default:
	}
	_ = d.cmd.Process.Signal(sig)
	if sig == syscall.SIGSTOP {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGCONT)
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.done
		ed.lab.e.t.Errorf("edge %d daemon did not stop within 30s of %v", ed.i, sig)
	}
}

// waitExit waits for the daemon to exit (after a signal sent elsewhere).
func (ed *haEdge) waitExit(timeout time.Duration) {
	t := ed.lab.e.t
	t.Helper()
	select {
	case <-ed.d.done:
	case <-time.After(timeout):
		t.Fatalf("edge %d daemon still running after %s", ed.i, timeout)
	}
}

// nextHops are the gateways the router's kernel forwards the announce
// address to.
func (l *haLab) nextHops() ([]string, error) {
	h, err := l.router.Netlink()
	if err != nil {
		return nil, err
	}
	rs, err := h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Dst: &net.IPNet{IP: net.ParseIP(haAnnounce).To4(), Mask: net.CIDRMask(32, 32)}},
		netlink.RT_FILTER_DST)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range rs {
		if r.Gw != nil {
			out = append(out, r.Gw.String())
		}
		for _, nh := range r.MultiPath {
			out = append(out, nh.Gw.String())
		}
	}
	slices.Sort(out)
	return out, nil
}

func (l *haLab) addrs(edges ...*haEdge) []string {
	var out []string
	for _, ed := range edges {
		out = append(out, ed.addr)
	}
	slices.Sort(out)
	return out
}

// waitNextHops polls until the router forwards to exactly these edges.
func (l *haLab) waitNextHops(timeout time.Duration, edges ...*haEdge) time.Duration {
	t := l.e.t
	t.Helper()
	start := time.Now()
	want := l.addrs(edges...)
	var got []string
	err := testenv.Poll(context.Background(), timeout, func() error {
		var err error
		if got, err = l.nextHops(); err != nil {
			return err
		}
		if !slices.Equal(got, want) {
			return fmt.Errorf("router forwards %s to %v, want %v", haAnnounce, got, want)
		}
		return nil
	})
	if err != nil && l.frr != nil {
		out, _ := l.frr.vtysh("show bgp summary")
		rt, _ := l.frr.vtysh("show ip route")
		t.Fatalf("%v\n%s\n%s", err, out, rt)
	}
	if err != nil {
		out, _ := l.bird.Birdc("show", "protocols", "all")
		rt, _ := l.bird.Birdc("show", "route", "all", "filtered")
		t.Fatalf("%v\n%s\n%s", err, out, rt)
	}
	return time.Since(start)
}

// birdRoutes reads from BIRD which edges the announce address is routed
// to (the best path and its ECMP siblings).
func (l *haLab) birdRoutes() ([]string, error) {
	if l.frr != nil {
		return l.frr.routes()
	}
	out, err := l.bird.Birdc("show", "route", "for", haAnnounce)
	if err != nil {
		return nil, err
	}
	var via []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		for i := 0; i+1 < len(f); i++ {
			if f[i] == "via" {
				via = append(via, f[i+1])
			}
		}
	}
	slices.Sort(via)
	return slices.Compact(via), nil
}

// routeWatch samples the router's kernel route every few milliseconds and
// records every change with its time.
type routeWatch struct {
	mu      sync.Mutex
	changes []routeChange
	stop    chan struct{}
	done    chan struct{}
}

type routeChange struct {
	at   time.Time
	hops []string
}

func (l *haLab) watchRoutes() *routeWatch {
	w := &routeWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		var last []string
		first := true
		for {
			hops, err := l.nextHops()
			if err == nil && (first || !slices.Equal(hops, last)) {
				w.mu.Lock()
				w.changes = append(w.changes, routeChange{at: time.Now(), hops: hops})
				w.mu.Unlock()
				last, first = hops, false
			}
			select {
			case <-w.stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	return w
}

func (w *routeWatch) finish() []routeChange {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.changes)
}

// firstWithout is when the route first lacked addr (zero: never).
func firstWithout(changes []routeChange, addr string) time.Time {
	for _, c := range changes {
		if !slices.Contains(c.hops, addr) {
			return c.at
		}
	}
	return time.Time{}
}

// clientLoad sends requests from the client namespace to the announce
// address: one connection per request, or keep-alive connections.
type clientLoad struct {
	sent, failed atomic.Int64
	mu           sync.Mutex
	errs         []string
	failedAt     []time.Time
	// slow are the requests that took longer than slowAfter: those
	// whose SYN a draining edge's gate dropped wait for its retransmission.
	slow []slowRequest
	stop chan struct{}
	wg   sync.WaitGroup
}

type slowRequest struct {
	at   time.Time
	took time.Duration
}

// slowAfter is well above a request's time here (milliseconds) and
// below the 1 s a client kernel waits before it sends a SYN again.
const slowAfter = 500 * time.Millisecond

// failuresBetween counts the failed requests that ended in [from, to).
func (cl *clientLoad) failuresBetween(from, to time.Time) int {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	n := 0
	for _, at := range cl.failedAt {
		if !at.Before(from) && at.Before(to) {
			n++
		}
	}
	return n
}

// slowBetween returns how many requests started in [from, to) were slow,
// and the slowest.
func (cl *clientLoad) slowBetween(from, to time.Time) (n int, slowest time.Duration) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	for _, r := range cl.slow {
		if !r.at.Before(from) && r.at.Before(to) {
			n++
			slowest = max(slowest, r.took)
		}
	}
	return n, slowest
}

func (l *haLab) startLoad(host string, fresh, keepAlive int) *clientLoad {
	cl := &clientLoad{stop: make(chan struct{})}
	run := func(c *http.Client) {
		defer cl.wg.Done()
		for {
			select {
			case <-cl.stop:
				return
			default:
			}
			req, _ := http.NewRequest(http.MethodGet, "http://"+haAnnounce+"/", nil)
			req.Host = host
			cl.sent.Add(1)
			began := time.Now()
			resp, err := c.Do(req)
			var why string
			if err != nil {
				why = err.Error()
			} else {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					why = resp.Status
				}
			}
			if took := time.Since(began); took > slowAfter {
				cl.mu.Lock()
				cl.slow = append(cl.slow, slowRequest{began, took})
				cl.mu.Unlock()
			}
			if why != "" {
				cl.failed.Add(1)
				cl.mu.Lock()
				cl.failedAt = append(cl.failedAt, time.Now())
				if len(cl.errs) < 5 {
					cl.errs = append(cl.errs, time.Now().Format("15:04:05.000 ")+why)
				}
				cl.mu.Unlock()
			}
		}
	}
	for i := 0; i < fresh+keepAlive; i++ {
		tr := &http.Transport{DialContext: nsDialer(l.client), DisableKeepAlives: i < fresh}
		cl.wg.Add(1)
		go run(&http.Client{Timeout: 5 * time.Second, Transport: tr})
	}
	return cl
}

func (cl *clientLoad) finish() (sent, failed int64, errs []string) {
	select {
	case <-cl.stop:
	default:
		close(cl.stop)
	}
	cl.wg.Wait()
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.sent.Load(), cl.failed.Load(), slices.Clone(cl.errs)
}

func (cl *clientLoad) waitSent(t testing.TB, n int64) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, func() error {
		if got := cl.sent.Load(); got < n {
			return fmt.Errorf("%d requests sent, waiting for %d", got, n)
		}
		return nil
	})
}

// requests is how many HTTP requests the edge's HAProxy took (CumReq of
// its current worker, over the stats socket).
func (ed *haEdge) requests() int {
	c, err := net.DialTimeout("unix", filepath.Join(ed.runtimeDir, "admin.sock"), time.Second)
	if err != nil {
		return -1
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	_, _ = c.Write([]byte("show info\n"))
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CumReq: "); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return -1
}

// serves checks, from inside the edge, that its own HAProxy answers host.
func (ed *haEdge) serves(host string) error {
	c := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, DialContext: nsDialer(ed.ns)}}
	req, _ := http.NewRequest(http.MethodGet, "http://"+haAnnounce+"/", nil)
	req.Host = host
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("edge %d: %s: %s", ed.i, host, resp.Status)
	}
	return nil
}
