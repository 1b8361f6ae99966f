package bgp

import (
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/perimeter-ingress/perimeter/internal/routes"
)

func affinity(block, node string) Affinity {
	return Affinity{Block: netip.MustParsePrefix(block), Node: node}
}

func TestBirdRoutesAndPolicy(t *testing.T) {
	t.Parallel()
	l := newLab(t)
	// The administrator's routes in the same table, one of them to a block
	// BGP will announce too: none may change.
	l.ip("route", "add", "198.18.70.0/26", "via", "198.19.64.99", "proto", "static")
	l.ip("route", "add", "203.0.113.0/24", "via", "198.19.64.99")
	l.ip("route", "add", "198.18.65.192/26", "via", "198.19.64.98", "proto", "static")
	foreign := func() string {
		out, _ := l.edgeNS.Exec("ip", "-N", "-4", "route", "show", "table", "all")
		var keep []string
		for _, line := range strings.Split(string(out), "\n") {
			if !strings.Contains(line, "proto 201") {
				keep = append(keep, line)
			}
		}
		return strings.Join(keep, "\n")
	}
	before := foreign()

	n1 := l.addNode(birdSettings{GR: true, GRTime: 20, Password: "s3cret", Static: []birdStatic{
		{Name: "pods", Routes: []string{
			block(1, 0), block(1, 1),
			"198.18.65.192/26", // also the administrator's
			"198.18.66.7/32",   // an address borrowed from node-2's block
			"198.18.128.0/26",  // outside the pod CIDR
			block(2, 1),        // node-2's block (node-1 has the lower router ID)
		}},
		{Name: "extra", Disabled: true, Routes: []string{block(1, 2)}},
	}})
	n2 := l.addNode(birdSettings{GR: true, GRTime: 20, Password: "s3cret", Static: []birdStatic{
		{Name: "pods", Routes: []string{block(2, 0), block(2, 1)}},
	}})
	n1.start()
	n2.start()
	st := ClusterState{
		Nodes: l.nodeState(n1, n2),
		Affinities: []Affinity{
			affinity(block(1, 0), n1.name), affinity(block(1, 1), n1.name), affinity(block(1, 2), n1.name),
			affinity("198.18.65.192/26", n1.name),
			affinity(block(2, 0), n2.name), affinity(block(2, 1), n2.name),
		},
	}
	e := l.startEdge(edgeSpec{PodCIDRs: []string{"198.18.64.0/18"}, PeerWithNodes: true, NodePasswordKey: "mesh",
		InitialState: &edgeState{ClusterState: st, Passwords: map[string]string{labSecret.String(): "s3cret"}}})

	want := map[string]string{
		block(1, 0): n1.addr, block(1, 1): n1.addr, "198.18.66.7/32": n1.addr,
		block(2, 0): n2.addr, block(2, 1): n2.addr,
	}
	l.waitKernel(30*time.Second, want)
	if out, _ := l.edgeNS.Exec("ip", "-N", "route", "show", "proto", "201"); !strings.Contains(out,
		block(1, 0)+" via "+n1.addr+" dev br0") {
		t.Fatalf("ip route show proto 201:\n%s", out)
	}
	stat, err := e.status()
	if err != nil {
		t.Fatal(err)
	}
	rejected := map[string]Reason{}
	for _, r := range stat.Rejected {
		rejected[r.Prefix.String()+" from "+r.Peer.String()] = r.Reason
	}
	if rejected["198.18.128.0/26 from "+n1.addr] != RejectOutsidePools || rejected[block(2, 1)+" from "+n1.addr] != RejectNotOwner {
		t.Fatalf("rejections: %v\n%s", rejected, e.text(t))
	}
	if p := peerStatus(stat, n1.addr); p.State != "Established" || p.Received != 6 || p.Accepted != 4 || p.Rejected != 2 || p.Node != n1.name {
		t.Fatalf("node-1 status %+v", p)
	}
	conflict := false
	for _, r := range stat.Routes {
		if r.Dst.String() == "198.18.65.192/26" && r.State == routes.StateConflict {
			conflict = true
		}
	}
	if !conflict {
		t.Fatalf("route held by the administrator's static route not reported as conflict:\n%s", e.text(t))
	}
	t.Logf("perimeter bgp status:\n%s", e.text(t))

	// An announcement and its withdrawal.
	n1.birdc("enable", "extra")
	want[block(1, 2)] = n1.addr
	l.waitKernel(10*time.Second, want)
	n1.birdc("disable", "extra")
	delete(want, block(1, 2))
	l.waitKernel(10*time.Second, want)

	// node-2's BIRD stops (Cease): its blocks go, and node-1's claim on one
	// of them stays rejected.
	n2.kill(syscall.SIGTERM)
	delete(want, block(2, 0))
	delete(want, block(2, 1))
	l.waitKernel(10*time.Second, want)

	// The edge stops: its routes go, nobody else's.
	if err := e.stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("edge exit: %v", err)
	}
	if got := l.kernel(); len(got) != 0 {
		t.Fatalf("routes left after exit: %v", got)
	}
	if after := foreign(); after != before {
		t.Fatalf("routes not ours changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

func TestBirdGracefulRestart(t *testing.T) {
	t.Parallel()
	l := newLab(t)
	n1 := l.addNode(birdSettings{GR: true, GRTime: 20, Static: []birdStatic{{Name: "pods", Routes: []string{block(1, 0)}}}})
	n1.start()
	e := l.startEdge(edgeSpec{PodCIDRs: []string{"198.18.64.0/18"}, StaticPeers: []string{n1.addr}})
	want := map[string]string{block(1, 0): n1.addr}
	l.waitKernel(30*time.Second, want)

	// BIRD crashes and comes back: the route must never leave the kernel.
	n1.kill(syscall.SIGKILL)
	crashed := time.Now()
	missing := watchMissing(l, block(1, 0))
	for time.Since(crashed) < time.Second {
		time.Sleep(50 * time.Millisecond)
	}
	n1.start()
	eventually(t, 30*time.Second, func() string {
		st, err := e.status()
		if err != nil {
			return err.Error()
		}
		if p := peerStatus(st, n1.addr); p.State != "Established" || p.Accepted != 1 {
			return "session not back: " + p.State
		}
		return ""
	})
	if n := missing(); n > 0 {
		t.Fatalf("route missing in %d samples during a graceful restart", n)
	}

	// BIRD crashes for good: the route goes when its restart time is up.
	n1.settings.GRTime = 4
	n1.kill(syscall.SIGTERM)
	l.waitKernel(10*time.Second, map[string]string{})
	n1.start()
	l.waitKernel(30*time.Second, want)
	n1.kill(syscall.SIGKILL)
	crashed = time.Now()
	l.waitKernel(30*time.Second, map[string]string{})
	held := time.Since(crashed)
	t.Logf("route kept %v after the crash (BIRD's graceful restart time 4s)", held.Round(10*time.Millisecond))
	if held < 3*time.Second {
		t.Fatalf("route removed after %v, before the restart time", held)
	}
}

// watchMissing samples the kernel every 10ms until the returned function is
// called, which reports how many samples lacked dst.
func watchMissing(l *lab, dst string) func() int {
	stop := make(chan struct{})
	result := make(chan int, 1)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				result <- n
				return
			case <-time.After(10 * time.Millisecond):
			}
			if _, ok := l.kernel()[dst]; !ok {
				n++
			}
		}
	}()
	return func() int { close(stop); return <-result }
}

// A silent peer (BIRD frozen, TCP session open) is dropped at the hold
// time. With graceful restart on both sides GoBGP treats the hold-timer
// expiry as a restart and keeps the routes for the restart time the peer
// announced as well: a frozen node blackholes its blocks for hold + restart
// time (Calico's BIRD announces 120s). That is the price of hitless node
// restarts; DisableGracefulRestart trades it back.
func TestBirdHoldTimerExpiry(t *testing.T) {
	requireLab(t)
	t.Parallel()
	for _, tc := range []struct {
		name     string
		gr       bool
		min, max time.Duration
	}{
		{"graceful restart off", false, 2 * time.Second, 6 * time.Second},
		{"graceful restart on", true, 6 * time.Second, 15 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := newLab(t)
			n1 := l.addNode(birdSettings{GR: tc.gr, GRTime: 4, Static: []birdStatic{{Name: "pods", Routes: []string{block(1, 0)}}}})
			n1.start()
			e := l.startEdge(edgeSpec{PodCIDRs: []string{"198.18.64.0/18"}, StaticPeers: []string{n1.addr}, HoldSeconds: 3,
				DisableGR: !tc.gr})
			l.waitKernel(30*time.Second, map[string]string{block(1, 0): n1.addr})

			n1.kill(syscall.SIGSTOP)
			t.Cleanup(func() { n1.kill(syscall.SIGCONT) })
			frozen := time.Now()
			l.waitKernel(30*time.Second, map[string]string{})
			gone := time.Since(frozen)
			t.Logf("silent peer's routes removed after %v (hold time 3s, restart time 4s, graceful restart %v)",
				gone.Round(10*time.Millisecond), tc.gr)
			if gone < tc.min || gone > tc.max {
				t.Fatalf("routes removed after %v, want between %v and %v", gone, tc.min, tc.max)
			}
			st, err := e.status()
			if err != nil {
				t.Fatal(err)
			}
			if p := peerStatus(st, n1.addr); p.State == "Established" {
				t.Fatalf("peer still established: %+v", p)
			}
		})
	}
}

func TestBirdMarkAndSweep(t *testing.T) {
	t.Parallel()
	l := newLab(t)
	n1 := l.addNode(birdSettings{GR: true, GRTime: 20, Static: []birdStatic{
		{Name: "pods", Routes: []string{block(1, 0)}},
		{Name: "gone", Routes: []string{block(1, 1)}},
	}})
	n1.start()
	spec := edgeSpec{PodCIDRs: []string{"198.18.64.0/18"}, StaticPeers: []string{n1.addr}, KeepRoutesOnExit: true,
		StaleTimeout: 2 * time.Minute}
	e := l.startEdge(spec)
	want := map[string]string{block(1, 0): n1.addr, block(1, 1): n1.addr}
	l.waitKernel(30*time.Second, want)

	// Restart with KeepRoutesOnExit: the routes outlive the process.
	if err := e.stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("edge exit: %v", err)
	}
	if got := l.kernel(); len(got) != 2 {
		t.Fatalf("routes after exit with KeepRoutesOnExit: %v", got)
	}
	// While the edge is away one block is withdrawn.
	n1.birdc("disable", "gone")

	missing := watchMissing(l, block(1, 0))
	started := time.Now()
	e = l.startEdge(spec)
	st, err := e.status()
	if err != nil {
		t.Fatal(err)
	}
	if st.StaleSwept {
		t.Fatalf("swept before any End-of-RIB")
	}
	l.waitKernel(30*time.Second, map[string]string{block(1, 0): n1.addr})
	swept := time.Since(started)
	if n := missing(); n > 0 {
		t.Fatalf("re-announced route missing in %d samples during the restart", n)
	}
	if swept > time.Minute {
		t.Fatalf("stale route removed only after %v: by the timeout, not End-of-RIB", swept)
	}
	st, _ = e.status()
	if !st.StaleSwept || !peerStatus(st, n1.addr).EndOfRIB {
		t.Fatalf("status after sweep: %+v", st)
	}
	t.Logf("stale route swept %v after start (End-of-RIB)", swept.Round(10*time.Millisecond))
}
