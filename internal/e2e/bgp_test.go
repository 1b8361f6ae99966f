package e2e

import (
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/perimeter-ingress/perimeter/internal/routes"
	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// Issue 3's "Done when" on the real stack: the daemon (root namespace) peers
// with three BIRD nodes, learns their blocks and HAProxy reaches the pods
// behind them through those routes alone.

var checkedService = map[string]string{"haproxy.org/check": "true", "haproxy.org/check-interval": "300ms"}

func TestBGPRoutesCarryIngressTraffic(t *testing.T) {
	e := newEnv(t)
	l := newBGPLab(e, 3)
	// Node 0 also exports a prefix outside the pod CIDR, which must never
	// reach the kernel.
	outside := "198.18.111.0/26"
	l.nodes[0].exports = append(l.nodes[0].exports, outside)
	for _, n := range l.nodes {
		n.start()
	}
	pods := []*testenv.Pod{l.nodes[0].pod("bgp-a", 0), l.nodes[1].pod("bgp-b", 0), l.nodes[2].pod("bgp-c", 0)}
	if got := kernelRoutes(t); len(got) != 0 {
		t.Fatalf("routes with protocol %d before the daemon started: %v", routes.DefaultProtocol, got)
	}
	e.service("web", checkedService, pods...)
	e.ingress("web", nil, rule{host: "bgp.example", path: "/", service: "web"})
	d := e.startDaemon(l.daemonFlags(l.peerFlags()...)...)

	d.waitPeers(30*time.Second, l.nodes...)
	waitRoutes(t, 10*time.Second, routesVia(l.nodes...))
	out, err := exec.Command("ip", "route", "show", "proto", strconv.Itoa(routes.DefaultProtocol)).CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range l.nodes {
		if want := n.block + " via " + n.addr; !strings.Contains(string(out), want) {
			t.Errorf("ip route show proto %d lacks %q:\n%s", routes.DefaultProtocol, want, out)
		}
	}
	d.answeredBy("bgp.example", 20*time.Second, pods...)

	// The out-of-CIDR prefix was received and rejected, not installed.
	testenv.Eventually(t, 10*time.Second, func() error {
		st, err := d.bgpStatus()
		if err != nil {
			return err
		}
		for _, r := range st.Rejected {
			if r.Prefix.String() == outside && r.Peer.String() == l.nodes[0].addr {
				return nil
			}
		}
		return errorf("%s not listed as rejected: %+v", outside, st.Rejected)
	})
	if _, ok := kernelRoutes(t)[outside]; ok {
		t.Fatalf("%s, outside --pod-cidr=%s, reached the kernel", outside, bgpPodCIDR)
	}

	// Node 2 shuts down: its route goes, requests fail over to the others.
	l.nodes[2].stop(syscall.SIGTERM)
	waitRoutes(t, 15*time.Second, routesVia(l.nodes[0], l.nodes[1]))
	d.steady("bgp.example", 30, 20*time.Second, pods[2])

	// It comes back: so do its route and its pod's share of requests.
	l.nodes[2].start()
	waitRoutes(t, 30*time.Second, routesVia(l.nodes...))
	d.answeredBy("bgp.example", 20*time.Second, pods[2])
	if _, ok := kernelRoutes(t)[outside]; ok {
		t.Fatalf("%s reached the kernel", outside)
	}
}

func TestBGPPeersFollowNodes(t *testing.T) {
	e := newEnv(t)
	l := newBGPLab(e, 2)
	for _, n := range l.nodes {
		n.start()
	}
	pod := l.nodes[1].pod("bgp-node-b", 0)
	e.service("web", checkedService, pod)
	e.ingress("web", nil, rule{host: "nodes.example", path: "/", service: "web"})
	// Calico's CRDs are absent from the test cluster: the daemon must run
	// on Nodes and --pod-cidr alone, with the packaged RBAC.
	d := e.startDaemon(l.daemonFlags("--bgp-peers-from-nodes")...)
	d.waitPeers(10 * time.Second)

	n0, n1 := nodeName(t, 0), nodeName(t, 1)
	l.nodes[0].nodeObject(n0)
	d.waitPeers(30*time.Second, l.nodes[0])
	waitRoutes(t, 10*time.Second, routesVia(l.nodes[0]))

	l.nodes[1].nodeObject(n1)
	d.waitPeers(30*time.Second, l.nodes...)
	waitRoutes(t, 10*time.Second, routesVia(l.nodes...))
	d.expect("nodes.example", "/", http.StatusOK, pod.Name)

	st, err := d.bgpStatus()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range st.Peers {
		if p.Kind != "node" || (p.Node != n0 && p.Node != n1) {
			t.Errorf("peer %s: kind %q node %q, want a node peer of %s or %s", p.Address, p.Kind, p.Node, n0, n1)
		}
	}

	// Node 1 leaves the cluster: its peer and route go, with no restart.
	pid := d.cmd.Process.Pid
	l.deleteNode(n1)
	d.waitPeers(15*time.Second, l.nodes[0])
	waitRoutes(t, 10*time.Second, routesVia(l.nodes[0]))
	l.deleteNode(n0)
	d.waitPeers(15 * time.Second)
	waitRoutes(t, 10*time.Second, map[string]string{})
	if d.cmd.Process.Pid != pid || d.ready() != nil {
		t.Fatal("the daemon restarted or is not ready")
	}
}

func TestBGPStatusAndRoutesFlush(t *testing.T) {
	e := newEnv(t)
	l := newBGPLab(e, 2)
	for _, n := range l.nodes {
		n.start()
	}
	d := e.startDaemon(l.daemonFlags(append(l.peerFlags(), "--bgp-keep-routes-on-exit")...)...)
	d.waitPeers(30*time.Second, l.nodes...)
	waitRoutes(t, 10*time.Second, routesVia(l.nodes...))

	out, err := runCLI(t, "bgp", "status", "--controller-port="+strconv.Itoa(d.ctrlPort))
	if err != nil {
		t.Fatalf("perimeter bgp status: %v\n%s", err, out)
	}
	t.Logf("perimeter bgp status:\n%s", out)
	for _, want := range []string{"local AS " + bgpAS, bgpPodCIDR} {
		if !strings.Contains(out, want) {
			t.Errorf("bgp status lacks %q", want)
		}
	}
	lines := strings.Split(out, "\n")
	for _, n := range l.nodes {
		if !hasLine(lines, n.addr, "Established") {
			t.Errorf("bgp status: no line with peer %s Established", n.addr)
		}
		if !hasLine(lines, n.block, n.addr) {
			t.Errorf("bgp status: no line with route %s via %s", n.block, n.addr)
		}
	}

	// A route that is not ours, to the same place: flush must leave it.
	foreign := "198.18.111.64/26"
	if out, err := exec.Command("ip", "route", "add", foreign, "via", l.nodes[0].addr, "proto", "static").CombinedOutput(); err != nil {
		t.Fatalf("ip route add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "route", "del", foreign, "proto", "static").Run() })

	// Stopped with --bgp-keep-routes-on-exit, the daemon leaves its routes.
	d.stop()
	if d.exitErr != nil {
		t.Fatalf("daemon exit: %v", d.exitErr)
	}
	if got := kernelRoutes(t); !mapsEqual(got, routesVia(l.nodes...)) {
		t.Fatalf("routes after a stop with --bgp-keep-routes-on-exit: %v", got)
	}
	out, err = runCLI(t, "routes", "flush")
	if err != nil {
		t.Fatalf("perimeter routes flush: %v\n%s", err, out)
	}
	if !strings.Contains(out, "removed 2 routes") {
		t.Errorf("routes flush said %q, want it to count 2 routes", out)
	}
	if got := kernelRoutes(t); len(got) != 0 {
		t.Fatalf("routes after flush: %v", got)
	}
	shown, err := exec.Command("ip", "route", "show", foreign).CombinedOutput()
	if err != nil || !strings.Contains(string(shown), "via "+l.nodes[0].addr) {
		t.Fatalf("flush removed a route that is not ours (%s): %v %s", foreign, err, shown)
	}
}

func hasLine(lines []string, words ...string) bool {
	for _, line := range lines {
		f := strings.Fields(line)
		all := true
		for _, w := range words {
			found := false
			for _, x := range f {
				if x == w {
					found = true
				}
			}
			all = all && found
		}
		if all {
			return true
		}
	}
	return false
}

// TestBGPHandOverRestart restarts the daemon while a client sends requests
// to BGP-routed pods through HAProxy: SIGUSR1 leaves HAProxy and the routes,
// the next daemon adopts both, and a node that left meanwhile loses its
// route once the remaining peers sent End-of-RIB.
func TestBGPHandOverRestart(t *testing.T) {
	e := newEnv(t)
	l := newBGPLab(e, 3)
	for _, n := range l.nodes {
		n.start()
	}
	pods := []*testenv.Pod{l.nodes[0].pod("bgp-ho-a", 0), l.nodes[1].pod("bgp-ho-b", 0)}
	e.service("web", checkedService, pods...)
	e.ingress("web", nil, rule{host: "handover.example", path: "/", service: "web"})
	names := []string{nodeName(t, 0), nodeName(t, 1), nodeName(t, 2)}
	for i, n := range l.nodes {
		n.nodeObject(names[i])
	}

	// Both daemons share the runtime and config directories and the
	// ports clients use.
	runtimeDir := shortTempDir(t)
	t.Cleanup(func() {
		for _, pid := range haproxyPIDs(runtimeDir) {
			if alive(pid) {
				t.Errorf("HAProxy process %d outlived the daemons", pid)
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	configDir := t.TempDir()
	httpPort := testenv.FreePort(t)
	flags := l.daemonFlags("--bgp-peers-from-nodes",
		"--runtime-dir="+runtimeDir, "--config-dir="+configDir, "--http-bind-port="+strconv.Itoa(httpPort))
	d1 := e.startDaemon(flags...)
	d1.httpPort = httpPort
	d1.waitPeers(30*time.Second, l.nodes...)
	waitRoutes(t, 10*time.Second, routesVia(l.nodes...))
	d1.answeredBy("handover.example", 20*time.Second, pods...)
	master := haproxyMaster(t, runtimeDir)

	loop := startRequestLoop(httpPort, "handover.example")
	defer loop.finish()
	waitSent(t, loop, 50)

	// Hand over: the daemon exits, HAProxy and the routes stay.
	if err := d1.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d1.done:
	case <-time.After(30 * time.Second):
		t.Fatal("daemon did not exit on SIGUSR1")
	}
	if d1.exitErr != nil {
		t.Fatalf("daemon exit on SIGUSR1: %v\n%s", d1.exitErr, tail(d1.out.String(), 30))
	}
	if !alive(master) {
		t.Fatal("HAProxy stopped with the daemon on SIGUSR1")
	}
	if got := kernelRoutes(t); !mapsEqual(got, routesVia(l.nodes...)) {
		t.Fatalf("routes after the hand-over exit: %v", got)
	}
	// While no daemon runs, node 2 goes away; its route is now stale.
	l.nodes[2].stop(syscall.SIGTERM)
	l.deleteNode(names[2])
	sentBefore := loop.sent.Load()
	waitSent(t, loop, sentBefore+50)

	d2 := e.startDaemon(flags...)
	d2.httpPort = httpPort
	if got := haproxyMaster(t, runtimeDir); got != master {
		t.Fatalf("HAProxy master %d replaced by %d: not adopted", master, got)
	}
	if !strings.Contains(d2.out.String(), "adopting haproxy") {
		t.Errorf("the new daemon did not say it adopted HAProxy")
	}
	d2.waitPeers(60*time.Second, l.nodes[0], l.nodes[1])
	waitRoutes(t, 30*time.Second, routesVia(l.nodes[0], l.nodes[1]))
	// The status flag and the log line are written one after the other:
	// poll for both.
	testenv.Eventually(t, 10*time.Second, func() error {
		st, err := d2.bgpStatus()
		if err != nil {
			return err
		}
		if !st.StaleSwept || !strings.Contains(d2.out.String(), "all peers sent End-of-RIB") {
			return fmt.Errorf("stale route not swept after End-of-RIB (swept %v)", st.StaleSwept)
		}
		return nil
	})
	sentBefore = loop.sent.Load()
	waitSent(t, loop, sentBefore+50)
	sent, failed, errs := loop.finish()
	t.Logf("hand-over restart: %d requests, %d failed", sent, failed)
	if failed > 0 {
		t.Fatalf("%d of %d requests failed across the hand-over restart: %v", failed, sent, errs)
	}
	d2.answeredBy("handover.example", 10*time.Second, pods...)

	// SIGTERM is a stop: HAProxy goes with the daemon (the harness checks
	// for leftovers; runtimeDir's cleanup too).
	d2.stop()
	if alive(master) {
		t.Fatalf("adopted HAProxy %d survived SIGTERM", master)
	}
}

// haproxyMaster reads the master pid the daemon recorded.
func haproxyMaster(t testing.TB, runtimeDir string) int {
	t.Helper()
	var pid int
	testenv.Eventually(t, 10*time.Second, func() error {
		b, err := readFile(filepath.Join(runtimeDir, "haproxy.pid"))
		if err != nil {
			return err
		}
		pid, err = strconv.Atoi(strings.TrimSpace(b))
		return err
	})
	return pid
}

func waitSent(t testing.TB, l *requestLoop, n int64) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, func() error {
		if got := l.sent.Load(); got < n {
			return errorf("%d requests sent, waiting for %d", got, n)
		}
		return nil
	})
}
