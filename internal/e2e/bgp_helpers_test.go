package e2e

// The BGP test bed: "nodes" are network namespaces linked to the root
// namespace (where the daemon runs) by a veth pair, each running Debian's
// BIRD 2 configured as Calico's would be: it exports the node's /26 block
// (a blackhole static route, as Calico's BIRD does) with next hop self. Pods
// sit behind their node with a /32 route in the node only: the root
// namespace learns the blocks from the daemon's speaker or not at all.
//
// Addresses: links in 198.19.110.0/24, node i's block 198.18.110.(64*i)/26,
// anything out of the daemon's pod CIDR (198.18.110.0/24) in 198.18.111.0/24.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
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
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/perimeter-ingress/perimeter/internal/bgp"
	"github.com/perimeter-ingress/perimeter/internal/routes"
	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

const (
	bgpLinkRange = "198.19.110.0/24"
	bgpPodCIDR   = "198.18.110.0/24"
	bgpRouterID  = "198.19.110.254"
	bgpAS        = "64512"
)

// bgpBlocks is where every route of these tests falls.
var bgpBlocks = netip.MustParsePrefix("198.18.110.0/23")

// bgpLab is one test's nodes and the port the daemon's speaker listens on.
type bgpLab struct {
	e     *env
	dir   string
	port  int
	nodes []*birdNode
}

// birdNode is a namespace with a BIRD playing calico-node.
type birdNode struct {
	lab     *bgpLab
	i       int
	ns      *testenv.Netns
	link    *testenv.VethPair
	addr    string // node side of the link: the BGP peer and next hop
	edge    string // root side: BIRD's neighbor
	block   string
	exports []string
	bird    *testenv.Bird
}

func requireBIRD(t testing.TB) {
	t.Helper()
	testenv.RequireBird(t)
}

// newBGPLab creates n nodes; their BIRDs are not started yet (start).
func newBGPLab(e *env, n int) *bgpLab {
	t := e.t
	t.Helper()
	requireBIRD(t)
	l := &bgpLab{e: e, dir: shortTempDir(t), port: testenv.FreePort(t)}
	// Whatever a test leaves, our routes go with it.
	t.Cleanup(func() {
		for dst := range kernelRoutes(t) {
			_ = exec.Command("ip", "route", "del", dst, "proto", strconv.Itoa(routes.DefaultProtocol)).Run()
		}
	})
	for i := 0; i < n; i++ {
		node := &birdNode{lab: l, i: i, block: fmt.Sprintf("198.18.110.%d/26", 64*i)}
		node.ns = testenv.NewNetns(t, fmt.Sprintf("bgp-n%d", i))
		if err := node.ns.Sysctl("net/ipv4/ip_forward", "1"); err != nil {
			t.Fatal(err)
		}
		node.link = testenv.Veth(t, testenv.VethOptions{NS: nil, PeerNS: node.ns, LinkRange: bgpLinkRange})
		node.addr, node.edge = node.link.PeerAddr.Addr().String(), node.link.Addr.Addr().String()
		node.exports = []string{node.block}
		node.bird = testenv.NewBird(t, node.ns, l.dir, fmt.Sprintf("n%d", i))
		l.nodes = append(l.nodes, node)
	}
	return l
}

// peerFlags are the daemon's static peers, one per node.
func (l *bgpLab) peerFlags() []string {
	var out []string
	for _, n := range l.nodes {
		out = append(out, "--bgp-peer="+n.addr+",as="+bgpAS)
	}
	return out
}

// daemonFlags turn the speaker on; peers come from peerFlags or Nodes.
func (l *bgpLab) daemonFlags(extra ...string) []string {
	return append([]string{
		"--bgp-local-as=" + bgpAS,
		"--bgp-router-id=" + bgpRouterID,
		"--bgp-listen-port=" + strconv.Itoa(l.port),
		"--pod-cidr=" + bgpPodCIDR,
		"--bgp-hold-time=6s",
	}, extra...)
}

// Calico's BIRD template values for timers and graceful restart, with a
// short hold time.
var birdConfig = template.Must(template.New("bird").Parse(`router id {{.Addr}};
log stderr all;
protocol device { scan time 10; }
protocol static blocks {
	ipv4;
{{- range .Exports}}
	route {{.}} blackhole;
{{- end}}
}
protocol bgp perimeter {
	local {{.Addr}} as 64512;
	neighbor {{.Edge}} port {{.Port}} as 64512;
	hold time 6;
	keepalive time 2;
	connect delay time 2;
	connect retry time 5;
	error wait time 5, 30;
	graceful restart on;
	ipv4 { import none; export where source = RTS_STATIC; next hop self; };
}
`))

// start runs the node's BIRD and waits until it answers on its socket.
func (n *birdNode) start() {
	t := n.lab.e.t
	t.Helper()
	var b bytes.Buffer
	if err := birdConfig.Execute(&b, map[string]any{
		"Addr": n.addr, "Edge": n.edge, "Port": n.lab.port, "Exports": n.exports,
	}); err != nil {
		t.Fatal(err)
	}
	if err := n.bird.Start(b.String()); err != nil {
		t.Fatalf("node %d: %v", n.i, err)
	}
}

// stop signals BIRD and waits for it to exit: SIGTERM sends Cease to its
// peers (a node shut down), SIGKILL just drops the sessions.
func (n *birdNode) stop(sig syscall.Signal) { n.bird.Stop(sig) }

// pod starts an HTTP pod on the node's block (host offset 10+j), with its
// /32 route in the node namespace only.
func (n *birdNode) pod(name string, j int) *testenv.Pod {
	n.lab.e.t.Helper()
	base := netip.MustParsePrefix(n.block).Addr().As4()
	return testenv.StartPod(n.lab.e.t, testenv.PodOptions{
		Name:      name,
		IP:        netip.AddrFrom4([4]byte{base[0], base[1], base[2], base[3] + byte(10+j)}).String(),
		Parent:    n.ns,
		LinkRange: bgpLinkRange,
	})
}

// nodeObject creates a Node for n, annotated as calico-node does, and
// deletes it when the test ends.
func (n *birdNode) nodeObject(name string) {
	t := n.lab.e.t
	t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{
		"projectcalico.org/IPv4Address": n.addr + "/24",
		"projectcalico.org/ASNumber":    bgpAS,
	}}}
	nodes := n.lab.e.c.Admin.CoreV1().Nodes()
	if _, err := nodes.Create(context.Background(), node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nodes.Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

func (l *bgpLab) deleteNode(name string) {
	l.e.t.Helper()
	if err := l.e.c.Admin.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		l.e.t.Fatal(err)
	}
}

// nodeName is unique per test process, since Nodes are cluster-wide.
func nodeName(t testing.TB, i int) string {
	return fmt.Sprintf("pm-%d-%s-n%d", os.Getpid(), strings.ToLower(sanitize(t.Name())), i)
}

func sanitize(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		}
	}
	out := b.String()
	if len(out) > 40 {
		out = out[len(out)-40:]
	}
	return out
}

// kernelRoutes are the root namespace's main-table routes with the daemon's
// protocol inside this file's ranges: destination -> gateway.
func kernelRoutes(t testing.TB) map[string]string { return routesWithin(t, bgpBlocks) }

// routesWithin are the daemon's main-table routes inside within.
func routesWithin(t testing.TB, within netip.Prefix) map[string]string {
	t.Helper()
	rs, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Protocol: routes.DefaultProtocol},
		netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		t.Fatalf("list routes: %v", err)
	}
	out := map[string]string{}
	for _, r := range rs {
		if r.Dst == nil {
			continue
		}
		p, err := netip.ParsePrefix(r.Dst.String())
		if err != nil || !within.Overlaps(p) {
			continue
		}
		out[p.String()] = r.Gw.String()
	}
	return out
}

// waitRoutes polls until the daemon's routes are exactly want.
func waitRoutes(t testing.TB, timeout time.Duration, want map[string]string) {
	t.Helper()
	waitRoutesWithin(t, timeout, bgpBlocks, want)
}

func waitRoutesWithin(t testing.TB, timeout time.Duration, within netip.Prefix, want map[string]string) {
	t.Helper()
	testenv.Eventually(t, timeout, func() error {
		if got := routesWithin(t, within); !mapsEqual(got, want) {
			out, _ := exec.Command("ip", "-N", "route", "show", "proto", strconv.Itoa(routes.DefaultProtocol)).CombinedOutput()
			return fmt.Errorf("routes with protocol %d: %v, want %v\n%s", routes.DefaultProtocol, got, want, out)
		}
		return nil
	})
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// routesVia is the expected kernel state for these nodes: block -> node.
func routesVia(nodes ...*birdNode) map[string]string {
	out := map[string]string{}
	for _, n := range nodes {
		out[n.block] = n.addr
	}
	return out
}

// bgpStatus reads the speaker's status from the daemon's controller port.
func (d *daemon) bgpStatus() (bgp.Status, error) {
	var st bgp.Status
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/debug/bgp?format=json", d.ctrlPort))
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("/debug/bgp: %s", resp.Status)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// waitPeers polls until the speaker's peers are exactly these nodes, all
// Established.
func (d *daemon) waitPeers(timeout time.Duration, nodes ...*birdNode) {
	d.t.Helper()
	testenv.Eventually(d.t, timeout, func() error {
		st, err := d.bgpStatus()
		if err != nil {
			return err
		}
		var want, got []string
		for _, n := range nodes {
			want = append(want, n.addr+" Established")
		}
		for _, p := range st.Peers {
			got = append(got, p.Address.String()+" "+p.State)
		}
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			return fmt.Errorf("peers %v, want %v", got, want)
		}
		return nil
	})
}

// runCLI runs the daemon binary with a subcommand and returns its output.
func runCLI(t testing.TB, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command(perimeterBinary(t), args...).CombinedOutput()
	return string(out), err
}

// answeredBy polls until every pod has answered host/ at least once.
func (d *daemon) answeredBy(host string, timeout time.Duration, pods ...*testenv.Pod) {
	d.t.Helper()
	seen := map[string]bool{}
	testenv.Eventually(d.t, timeout, func() error {
		r, err := d.get(host, "/")
		if err == nil && r.status == http.StatusOK {
			seen[r.header.Get("X-Pod")] = true
		}
		var missing []string
		for _, p := range pods {
			if !seen[p.Name] {
				missing = append(missing, p.Name)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("pods not reached yet: %v (last: %v %v)", missing, r.status, err)
		}
		return nil
	})
}

// steady polls until n requests in a row succeed, none answered by a pod in
// avoid.
func (d *daemon) steady(host string, n int, timeout time.Duration, avoid ...*testenv.Pod) {
	d.t.Helper()
	ok := 0
	testenv.Eventually(d.t, timeout, func() error {
		for ok < n {
			r, err := d.get(host, "/")
			switch {
			case err != nil:
				ok = 0
				return err
			case r.status != http.StatusOK:
				ok = 0
				return fmt.Errorf("status %d from %q", r.status, r.header.Get("X-Pod"))
			case slices.ContainsFunc(avoid, func(p *testenv.Pod) bool { return p.Name == r.header.Get("X-Pod") }):
				ok = 0
				return fmt.Errorf("answered by %s, which should be out", r.header.Get("X-Pod"))
			}
			ok++
		}
		return nil
	})
}

// requestLoop sends requests through HAProxy, one connection each, until
// stopped, and counts the failures.
type requestLoop struct {
	tally
	stop chan struct{}
	done chan struct{}
}

// tally counts a load loop's requests and failures, keeping the first few
// reasons for the test's message.
type tally struct {
	sent, failed atomic.Int64
	mu           sync.Mutex
	firstErrors  []string
}

func (c *tally) fail(why string) {
	c.failed.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.firstErrors) < 5 {
		c.firstErrors = append(c.firstErrors, time.Now().Format("15:04:05.000 ")+why)
	}
}

// reasons are the first failures' reasons.
func (c *tally) reasons() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.firstErrors)
}

func startRequestLoop(port int, host string) *requestLoop {
	l := &requestLoop{stop: make(chan struct{}), done: make(chan struct{})}
	cl := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	go func() {
		defer close(l.done)
		for {
			select {
			case <-l.stop:
				return
			default:
			}
			req, _ := http.NewRequest(http.MethodGet, "http://"+net.JoinHostPort("127.0.0.1", strconv.Itoa(port))+"/", nil)
			req.Host = host
			l.sent.Add(1)
			resp, err := cl.Do(req)
			var why string
			if err != nil {
				why = err.Error()
			} else {
				if resp.StatusCode != http.StatusOK {
					why = resp.Status
				}
				resp.Body.Close()
			}
			if why != "" {
				l.fail(why)
			}
		}
	}()
	return l
}

func (l *requestLoop) finish() (sent, failed int64, errs []string) {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.done
	return l.sent.Load(), l.failed.Load(), l.reasons()
}

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }

func readFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	return string(b), err
}
