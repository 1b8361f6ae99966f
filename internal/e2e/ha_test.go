package e2e

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/perimeter-ingress/perimeter/internal/syngate"
	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

const haHost = "ha.example"

// haClients is the client's concurrency in the load tests (connection per
// request, keep-alive).
const haFresh, haKeepAlive, haClients = 4, 2, 6

// haSetup starts two edges serving one Ingress and waits until the router
// forwards the announce address to both.
func haSetup(t testing.TB) *haLab {
	e := newEnv(t)
	l := newHALab(e, 2)
	pods := l.pods("ha", 2)
	e.service("web", nil, pods...)
	e.ingress("web", nil, rule{host: haHost, path: "/", service: "web"})
	for _, ed := range l.edges {
		ed.start()
	}
	l.waitNextHops(30*time.Second, l.edges...)
	return l
}

// TestHAEdgesShareTheAddress: both edges announce; the router spreads the
// client's flows over both; the status says why; the Ingress status lists
// the announce address; an Ingress change is served by both.
func TestHAEdgesShareTheAddress(t *testing.T) {
	l := haSetup(t)
	e := l.e
	if got, err := l.birdRoutes(); err != nil || !slices.Equal(got, l.addrs(l.edges...)) {
		t.Fatalf("BIRD routes %s via %v (%v), want both edges", haAnnounce, got, err)
	}
	// Only the announce address, with the operator's community.
	if out, err := l.bird.Birdc("show", "route", "all"); err != nil || strings.Count(out, "/32") != 1 ||
		!strings.Contains(out, haAnnounce+"/32") || !strings.Contains(out, "BGP.community: (64601,10)") {
		t.Fatalf("BIRD's table: %v\n%s", err, out)
	}
	before := []int{l.edges[0].requests(), l.edges[1].requests()}
	load := l.startLoad(haHost, 4, 0)
	load.waitSent(t, 400)
	sent, failed, errs := load.finish()
	if failed > 0 {
		t.Fatalf("%d of %d requests failed: %v", failed, sent, errs)
	}
	var per []int
	for i, ed := range l.edges {
		n := ed.requests() - before[i]
		per = append(per, n)
		if n <= 0 {
			t.Errorf("edge %d took no flow (%d requests sent)", i, sent)
		}
	}
	t.Logf("%d requests from one client: %v per edge", sent, per)

	for _, ed := range l.edges {
		st, err := ed.upstream()
		if err != nil {
			t.Fatal(err)
		}
		if !st.Announced || st.Reason != "serving" || len(st.Peers) != 1 || st.Peers[0].State != "Established" {
			t.Fatalf("edge %d upstream status: %+v", ed.i, st)
		}
	}
	// `perimeter bgp status`, run on the edge.
	out, err := l.edges[0].ns.Exec(perimeterBinary(t), "bgp", "status", "--config=/dev/null", "--controller-port="+strconv.Itoa(haCtrlPort))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "Upstream peers: AS "+haEdgeAS) || !strings.Contains(out, haAnnounce+"/32") ||
		!strings.Contains(out, "announced since") || !strings.Contains(out, "Established") {
		t.Fatalf("perimeter bgp status:\n%s", out)
	}

	// Ingress status: the announce address, not an edge's.
	testenv.Eventually(t, 20*time.Second, func() error {
		ing, err := e.c.Admin.NetworkingV1().Ingresses(e.ns).Get(context.Background(), "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		var ips []string
		for _, x := range ing.Status.LoadBalancer.Ingress {
			ips = append(ips, x.IP)
		}
		if !slices.Equal(ips, []string{haAnnounce}) {
			return fmt.Errorf("Ingress status %v, want [%s]", ips, haAnnounce)
		}
		return nil
	})

	// A new Ingress is served by both edges.
	pods := l.pods("ha-new", 1)
	e.service("new", nil, pods...)
	e.ingress("new", nil, rule{host: "new.example", path: "/", service: "new"})
	for _, ed := range l.edges {
		testenv.Eventually(t, 20*time.Second, func() error { return ed.serves("new.example") })
	}
}

// TestHAGracefulStopAndHandOver: a stop under load closes the SYN gate,
// lets the connections finish, withdraws and drains: no request fails,
// keep-alive or new, from SIGTERM until HAProxy has stopped; the edge comes
// back and takes flows again; a rolling hand-over restart of both edges
// keeps the address routed to both the whole time (read from the router's
// kernel and from BIRD) and fails no request.
func TestHAGracefulStopAndHandOver(t *testing.T) {
	l := haSetup(t)
	ed0, ed1 := l.edges[0], l.edges[1]

	g := haGraceful(t, l)
	t.Log(g)
	if g.stopFailed > 0 {
		t.Fatalf("%d requests failed across a graceful stop (SIGTERM until the edge's HAProxy stopped and it started again): %v", g.stopFailed, g.errs)
	}
	if g.returnFailed > haClients {
		t.Fatalf("%d requests failed when the edge came back, more than the %d in flight at the rehash: %v", g.returnFailed, haClients, g.errs)
	}
	if g.delayed > 0 && (g.slowest < 900*time.Millisecond || g.slowest > 4*time.Second) {
		t.Fatalf("the slowest request of the drain took %s: want about a SYN retransmission (1 s, or 3 s for a second one)", g.slowest)
	}
	before := ed0.requests()
	load := l.startLoad(haHost, 4, 0)
	load.waitSent(t, load.sent.Load()+300)
	load.finish()
	if ed0.requests() <= before {
		t.Fatalf("edge 0 takes no flow after it came back")
	}

	// Rolling hand-over restart.
	rf, rs, gaps := haRolling(t, l)
	t.Logf("rolling hand-over restart under load: %d requests, %d failed; the next daemon's session was up %s after the signal", rs, rf, l.takeover)
	if len(gaps) > 0 {
		t.Fatalf("the address was withdrawn during the hand-over: %v", gaps)
	}
	if rf > 0 {
		t.Fatalf("%d of %d requests failed across the rolling hand-over", rf, rs)
	}
	// The daemon alone crashes: HAProxy keeps serving, the next daemon
	// adopts it and the router keeps the route.
	cf, cs, cgaps := haDaemonCrash(t, l)
	t.Logf("daemon killed, HAProxy alive, under load: %d requests, %d failed", cs, cf)
	if len(cgaps) > 0 || cf > 0 {
		t.Fatalf("a daemon crash with HAProxy alive: %d failed, withdrawn: %v", cf, cgaps)
	}
	for _, ed := range []*haEdge{ed0, ed1} {
		if !strings.Contains(ed.d.out.String(), "adopting haproxy") {
			t.Errorf("edge %d did not adopt its HAProxy", ed.i)
		}
		st, err := ed.upstream()
		if err != nil || !st.Restarting || !st.Announced {
			t.Errorf("edge %d after the hand-over: %+v %v", ed.i, st, err)
		}
	}
}

// gracefulFigures is what a graceful stop of one edge, and its return,
// cost the client.
type gracefulFigures struct {
	sent int64
	// stopFailed: failed from the load's start through SIGTERM, the
	// withdrawal, HAProxy's stop, until the edge starts again.
	stopFailed int
	// returnFailed: failed after the edge started again, when the router
	// rehashes onto it (flows that move there are reset by it).
	returnFailed int
	// withdrawn and stopped: from SIGTERM to the router dropping the edge,
	// and to the daemon's exit (HAProxy stopped).
	withdrawn, stopped time.Duration
	// delayed requests started during the stop took longer than
	// slowAfter (a SYN dropped by the gate); slowest is the longest.
	delayed int
	slowest time.Duration
	errs    []string
}

func (g gracefulFigures) String() string {
	return fmt.Sprintf("graceful stop under load: %d requests; %d failed from SIGTERM until the edge started again, %d failed when it came back; "+
		"withdrawn %s after SIGTERM, HAProxy stopped after %s; %d requests delayed by the SYN gate, the slowest %s",
		g.sent, g.stopFailed, g.returnFailed, g.withdrawn.Round(time.Millisecond), g.stopped.Round(time.Millisecond), g.delayed, g.slowest.Round(time.Millisecond))
}

// haGraceful stops edge 0 with SIGTERM under load (keep-alive and new
// connections), then starts it again.
func haGraceful(t testing.TB, l *haLab) gracefulFigures {
	ed0, ed1 := l.edges[0], l.edges[1]
	loadStart := time.Now()
	load := l.startLoad(haHost, haFresh, haKeepAlive)
	defer load.finish()
	load.waitSent(t, 300)
	w := l.watchRoutes()
	defer w.finish()
	var g gracefulFigures
	start := time.Now()
	ed0.signal(syscall.SIGTERM)
	ed0.waitExit(30 * time.Second)
	exited := time.Now()
	g.stopped = exited.Sub(start)
	if g.stopped < haDrain {
		t.Fatalf("edge 0 stopped %s after SIGTERM, before the %s drain", g.stopped, haDrain)
	}
	if pids := haproxyPIDs(ed0.runtimeDir); len(pids) > 0 {
		t.Fatalf("edge 0's HAProxy still runs after its daemon stopped: %v", pids)
	}
	w.mu.Lock()
	at := firstWithout(w.changes, ed0.addr)
	w.mu.Unlock()
	if at.IsZero() || at.After(exited) {
		t.Fatalf("edge 0 stopped without being withdrawn first")
	}
	g.withdrawn = at.Sub(start)
	out := ed0.d.out.String()
	gate := strings.Index(out, "SYN gate closed")
	wd := strings.Index(out, "withdrawing the ingress addresses")
	if gate < 0 || wd < gate || !strings.Contains(out[gate:], "SYN gate opened") {
		t.Fatalf("want the SYN gate closed before the withdrawal and opened at the end:\n%s", tail(out, 40))
	}
	l.waitNextHops(5*time.Second, ed1)
	load.waitSent(t, load.sent.Load()+300)
	restart := time.Now()
	g.stopFailed = load.failuresBetween(loadStart, restart)
	g.delayed, g.slowest = load.slowBetween(start, exited)
	ed0.start()
	l.waitNextHops(30*time.Second, ed0, ed1)
	load.waitSent(t, load.sent.Load()+300)
	var failed int64
	g.sent, failed, g.errs = load.finish()
	g.returnFailed = int(failed) - g.stopFailed
	return g
}

// haDaemonCrash SIGKILLs edge 0's daemon only and starts it again at once.
func haDaemonCrash(t testing.TB, l *haLab) (failed, sent int64, gaps []string) {
	return haRestartEach(t, l, l.edges[:1], syscall.SIGKILL)
}

// haRolling hand-over restarts each edge in turn under load and returns
// the times either edge was missing from the router's route or BIRD's.
func haRolling(t testing.TB, l *haLab) (failed, sent int64, gaps []string) {
	return haRestartEach(t, l, l.edges, syscall.SIGUSR1)
}

// haRestartEach ends each edge's daemon with sig, then starts it again,
// under load, recording any moment the router lacked an edge.
func haRestartEach(t testing.TB, l *haLab, edges []*haEdge, sig syscall.Signal) (failed, sent int64, gaps []string) {
	load := l.startLoad(haHost, haFresh, haKeepAlive)
	defer load.finish()
	load.waitSent(t, load.sent.Load()+300)
	w := l.watchRoutes()
	birdStop := make(chan struct{})
	birdDone := make(chan []string)
	go func() {
		var bad []string
		for {
			select {
			case <-birdStop:
				birdDone <- bad
				return
			case <-time.After(50 * time.Millisecond):
			}
			if via, err := l.birdRoutes(); err == nil && !slices.Equal(via, l.addrs(l.edges...)) {
				bad = append(bad, fmt.Sprintf("%s BIRD: %v", time.Now().Format("15:04:05.000"), via))
			}
		}
	}()
	l.takeover = 0
	for _, ed := range edges {
		signalled := time.Now()
		ed.signal(sig)
		ed.waitExit(30 * time.Second)
		if sig == syscall.SIGUSR1 && ed.d.exitErr != nil {
			t.Fatalf("edge %d hand-over exit: %v", ed.i, ed.d.exitErr)
		}
		// A hand-over keeps taking new connections.
		if sig == syscall.SIGUSR1 && (strings.Contains(ed.d.out.String(), "SYN gate closed") || len(ed.gateClosed(t)) > 0) {
			t.Fatalf("edge %d closed its SYN gate on a hand-over restart", ed.i)
		}
		ed.start()
		testenv.Eventually(t, 30*time.Second, func() error {
			st, err := ed.upstream()
			if err != nil {
				return err
			}
			if len(st.Peers) == 0 || st.Peers[0].State != "Established" || !st.Announced {
				return fmt.Errorf("edge %d upstream: %+v", ed.i, st)
			}
			// How long the router held the route on graceful restart.
			l.takeover = max(l.takeover, st.Peers[0].Since.Sub(signalled))
			return nil
		})
		load.waitSent(t, load.sent.Load()+300)
	}
	close(birdStop)
	gaps = <-birdDone
	for _, c := range w.finish() {
		if !slices.Equal(c.hops, l.addrs(l.edges...)) {
			gaps = append(gaps, fmt.Sprintf("%s kernel: %v", c.at.Format("15:04:05.000"), c.hops))
		}
	}
	sent, failed, errs := load.finish()
	if failed > 0 {
		t.Logf("failures: %v", errs)
	}
	return failed, sent, gaps
}

// TestHAFailures: HAProxy killed while its daemon lives is withdrawn and
// re-announced; a crash (daemon and HAProxy killed) costs the requests in
// flight until the restarted daemon's session tells the router; a frozen
// edge is withdrawn within the hold time.
func TestHAFailures(t *testing.T) {
	l := haSetup(t)

	down, back := haKillHAProxy(t, l, l.edges[1])
	t.Logf("HAProxy killed: withdrawn after %s, announced again after %s", down, back)
	// Every announce and withdraw is an Event on the election Lease.
	testenv.Eventually(t, 20*time.Second, func() error {
		list, err := l.e.c.Admin.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		seen := map[string]bool{}
		for _, ev := range list.Items {
			if ev.InvolvedObject.Kind == "Lease" && ev.InvolvedObject.Name == "perimeter-"+l.e.ns {
				seen[ev.Reason] = true
				if ev.Reason == "Withdrawn" && !strings.Contains(ev.Message, "haproxy-down") && !strings.Contains(ev.Message, "binds-not-answering") {
					return fmt.Errorf("withdrawn Event without the reason: %q", ev.Message)
				}
			}
		}
		if !seen["Announced"] || !seen["Withdrawn"] {
			return fmt.Errorf("Events on the Lease: %v", seen)
		}
		return nil
	})

	gr := haCrash(t, l)
	t.Logf("crash under load, graceful restart on: %d of %d requests failed, the last %s after the kill (the restarted daemon took over: withdrawn after %s)",
		gr.failed, gr.sent, gr.outage, gr.withdrawn)
	plain := haCrash(t, l, "--bgp-upstream-restart-time=0")
	t.Logf("crash under load, graceful restart off: %d of %d requests failed, the last %s after the kill; the router dropped the edge after %s",
		plain.failed, plain.sent, plain.outage, plain.withdrawn)
	if plain.withdrawn <= 0 || plain.withdrawn > time.Second {
		t.Fatalf("without graceful restart the router should drop a crashed edge when its session closes, took %s", plain.withdrawn)
	}

	haKillWhileDraining(t, l)

	frozen := haFreeze(t, l)
	t.Logf("freeze: withdrawn %s after SIGSTOP (hold time %s)", frozen, haHoldTime)
	if frozen > haHoldTime+time.Second {
		t.Fatalf("a frozen edge stayed routed %s, more than the %s hold time", frozen, haHoldTime)
	}
	// An Ingress change after all this is served by both.
	pods := l.pods("ha-after", 1)
	l.e.service("after", nil, pods...)
	l.e.ingress("after", nil, rule{host: "after.example", path: "/", service: "after"})
	for _, ed := range l.edges {
		testenv.Eventually(t, 20*time.Second, func() error { return ed.serves("after.example") })
	}
}

// haKillWhileDraining kills edge 0's daemon and HAProxy while it drains,
// its SYN gate closed: the next daemon opens the gate it left, announces,
// and takes flows again.
func haKillWhileDraining(t testing.TB, l *haLab) {
	ed0 := l.edges[0]
	logBefore := len(ed0.d.out.String())
	ed0.signal(syscall.SIGTERM)
	testenv.Eventually(t, 10*time.Second, func() error {
		if !strings.Contains(ed0.d.out.String()[logBefore:], "SYN gate closed") {
			return fmt.Errorf("edge 0 has not closed its SYN gate")
		}
		return nil
	})
	ed0.signal(syscall.SIGKILL)
	for _, pid := range haproxyPIDs(ed0.runtimeDir) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	ed0.waitExit(10 * time.Second)
	left := ed0.gateClosed(t)
	if len(left) == 0 {
		t.Fatalf("no SYN gate left by the daemon killed while draining:\n%s", tail(ed0.d.out.String(), 20))
	}
	start := time.Now()
	ed0.start()
	ready := time.Since(start)
	if closed := ed0.gateClosed(t); len(closed) > 0 {
		t.Fatalf("the SYN gate a killed daemon left is still closed on %v", closed)
	}
	if !strings.Contains(ed0.d.out.String(), "SYN gate left by an earlier run opened") {
		t.Fatalf("the next daemon did not say it opened the gate:\n%s", tail(ed0.d.out.String(), 40))
	}
	l.waitNextHops(60*time.Second, l.edges...)
	t.Logf("killed while draining: gate left closed on %v; the next daemon opened it, was ready after %s, routed again after %s",
		left, ready.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	before := ed0.requests()
	load := l.startLoad(haHost, haFresh, 0)
	load.waitSent(t, 300)
	load.finish()
	if ed0.requests() <= before {
		t.Fatalf("edge 0 takes no flow after the killed drain")
	}
}

// gateClosed lists the edge's interfaces whose SYN gate is closed.
func (ed *haEdge) gateClosed(t testing.TB) []string {
	t.Helper()
	var closed []string
	if err := ed.ns.Do(func() (err error) {
		closed, err = syngate.Closed()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return closed
}

// haKillHAProxy kills the edge's HAProxy (master and workers): the daemon
// withdraws before it has HAProxy back, then announces again.
func haKillHAProxy(t testing.TB, l *haLab, ed *haEdge) (down, back time.Duration) {
	w := l.watchRoutes()
	start := time.Now()
	logBefore := len(ed.d.out.String())
	for _, pid := range haproxyPIDs(ed.runtimeDir) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	l.waitNextHops(30*time.Second, l.edges...)
	// Back: wait until a change brought it back after it was gone.
	testenv.Eventually(t, 30*time.Second, func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		gone := false
		for _, c := range w.changes {
			if !slices.Contains(c.hops, ed.addr) {
				gone = true
			} else if gone {
				return nil
			}
		}
		return fmt.Errorf("edge %d not withdrawn and back yet", ed.i)
	})
	changes := w.finish()
	at := firstWithout(changes, ed.addr)
	down = at.Sub(start)
	for _, c := range changes {
		if c.at.After(at) && slices.Contains(c.hops, ed.addr) {
			back = c.at.Sub(start)
			break
		}
	}
	out := ed.d.out.String()[logBefore:]
	wd := strings.Index(out, "withdrawing the ingress addresses")
	hs := strings.Index(out, "haproxy started")
	if wd < 0 || hs < 0 || wd > hs {
		t.Fatalf("want a withdrawal before HAProxy is started again (withdraw at %d, start at %d):\n%s", wd, hs, tail(out, 30))
	}
	if !strings.Contains(out[wd:], "reason=haproxy-down") && !strings.Contains(out[wd:], "reason=binds-not-answering") {
		t.Errorf("withdrawal reason:\n%s", tail(out, 30))
	}
	return down, back
}

// crashFigures is what a crash of one edge costs.
type crashFigures struct {
	sent, failed int64
	// outage is from the kill to the last failed request; withdrawn from
	// the kill to the router dropping the edge (0: it never did, the
	// restarted daemon took over the kept route).
	outage, withdrawn time.Duration
}

// haCrash kills edge 0's daemon and HAProxy under load and restarts the
// daemon at once, as systemd would (its RestartSec comes on top). With
// graceful restart off (restartTime 0) the router withdraws when the
// session closes; with it on, the router keeps the route until the
// restarted daemon's session says it kept no forwarding state.
func haCrash(t testing.TB, l *haLab, extra ...string) crashFigures {
	ed0, ed1 := l.edges[0], l.edges[1]
	if len(extra) > 0 {
		ed0.stopDaemon(syscall.SIGTERM)
		ed0.start(extra...)
		l.waitNextHops(30*time.Second, ed0, ed1)
	}
	load := l.startLoad(haHost, haFresh, haKeepAlive)
	defer load.finish()
	load.waitSent(t, load.sent.Load()+300)
	w := l.watchRoutes()
	start := time.Now()
	ed0.signal(syscall.SIGKILL)
	for _, pid := range haproxyPIDs(ed0.runtimeDir) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	ed0.waitExit(10 * time.Second)
	if len(extra) > 0 {
		// Without graceful restart the router drops the edge on its own.
		l.waitNextHops(10*time.Second, ed1)
	}
	ed0.start(extra...)
	l.waitNextHops(60*time.Second, ed0, ed1)
	load.waitSent(t, load.sent.Load()+300)
	var f crashFigures
	f.sent, f.failed, _ = load.finish()
	if at := firstWithout(w.finish(), ed0.addr); !at.IsZero() {
		f.withdrawn = at.Sub(start)
	}
	load.mu.Lock()
	if n := len(load.failedAt); n > 0 {
		f.outage = load.failedAt[n-1].Sub(start)
	}
	load.mu.Unlock()
	return f
}

// haFreeze stops edge 1's daemon and HAProxy with SIGSTOP and measures how
// long the router keeps forwarding to it; then thaws it.
func haFreeze(t testing.TB, l *haLab) time.Duration {
	ed1 := l.edges[1]
	pids := append([]int{ed1.d.cmd.Process.Pid}, haproxyPIDs(ed1.runtimeDir)...)
	start := time.Now()
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGSTOP)
	}
	took := l.waitNextHops(haHoldTime+5*time.Second, l.edges[0])
	_ = start
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGCONT)
	}
	l.waitNextHops(60*time.Second, l.edges...)
	return took
}
