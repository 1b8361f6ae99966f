package bgp

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http/httptest"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	api "github.com/osrg/gobgp/v3/api"
	"github.com/osrg/gobgp/v3/pkg/apiutil"
	"github.com/osrg/gobgp/v3/pkg/packet/bgp"
	"github.com/osrg/gobgp/v3/pkg/server"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/perimeter-ingress/perimeter/internal/routes"
)

// These tests run two or three GoBGP speakers on loopback addresses
// (127.0.0.1 is Perimeter, 127.0.0.2 and .3 play nodes): no root needed.

func testLog(tb testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", tb.Name())
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// fakeRoutes records what the speaker asks of the kernel side.
type fakeRoutes struct {
	mu      sync.Mutex
	set     map[netip.Prefix]netip.Addr
	stale   map[netip.Prefix]bool
	swept   chan int
	flushed int
}

func newFakeRoutes(stale ...string) *fakeRoutes {
	f := &fakeRoutes{set: map[netip.Prefix]netip.Addr{}, stale: map[netip.Prefix]bool{}, swept: make(chan int, 1)}
	for _, s := range stale {
		f.stale[netip.MustParsePrefix(s)] = true
	}
	return f
}

func (f *fakeRoutes) Adopt() (int, error) { f.mu.Lock(); defer f.mu.Unlock(); return len(f.stale), nil }
func (f *fakeRoutes) Set(dst netip.Prefix, nh netip.Addr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.set[dst] = nh
	delete(f.stale, dst)
}
func (f *fakeRoutes) Delete(dst netip.Prefix) { f.mu.Lock(); defer f.mu.Unlock(); delete(f.set, dst) }
func (f *fakeRoutes) Sweep() int {
	f.mu.Lock()
	n := len(f.stale)
	clear(f.stale)
	f.mu.Unlock()
	f.swept <- n
	return n
}
func (f *fakeRoutes) Run(ctx context.Context) error { <-ctx.Done(); return nil }
func (f *fakeRoutes) Flush() (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(f.set)
	clear(f.set)
	f.flushed++
	return n, nil
}
func (f *fakeRoutes) Routes() []routes.Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []routes.Status
	for d, nh := range f.set {
		out = append(out, routes.Status{Dst: d, NextHop: nh, Gateway: nh, State: routes.StateInstalled})
	}
	for d := range f.stale {
		out = append(out, routes.Status{Dst: d, State: routes.StateStale})
	}
	return out
}
func (f *fakeRoutes) snapshot() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	keys := slices.SortedFunc(maps.Keys(f.set), comparePrefix)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s via %s\n", k, f.set[k])
	}
	return b.String()
}

// chanSource hands the speaker whatever the test sends.
type chanSource struct{ ch chan ClusterState }

func newChanSource() *chanSource { return &chanSource{ch: make(chan ClusterState, 4)} }

func (c *chanSource) Run(ctx context.Context, update func(ClusterState)) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case st := <-c.ch:
			update(st)
		}
	}
}

func freePort(tb testing.TB, addr string) int {
	tb.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

type runningSpeaker struct {
	*Speaker
	done chan error
	stop context.CancelFunc
}

func startSpeaker(tb testing.TB, cfg Config, rt Routes, reg prometheus.Registerer) *runningSpeaker {
	tb.Helper()
	s, err := New(cfg, rt, testLog(tb), reg)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rs := &runningSpeaker{Speaker: s, done: make(chan error, 1), stop: cancel}
	go func() { rs.done <- s.Run(ctx) }()
	tb.Cleanup(func() { rs.Stop(tb) })
	// GoBGP's StartBgp writes package-level variables that every server
	// reads while processing paths, so tests start the fake nodes first
	// and the speaker last, and wait for it here (one server per process,
	// as in production, has no such issue).
	bgpServer(s)
	return rs
}

// Stop ends Run and waits for it (idempotent).
func (rs *runningSpeaker) Stop(tb testing.TB) {
	rs.stop()
	select {
	case err, ok := <-rs.done:
		if ok && err != nil {
			tb.Errorf("speaker Run: %v", err)
		}
		if ok {
			close(rs.done)
		}
	case <-time.After(15 * time.Second):
		tb.Errorf("speaker did not stop within 15s")
	}
}

// fakeNode is a GoBGP speaker standing in for a node's BIRD: it connects to
// Perimeter and announces what the test adds.
type fakeNode struct {
	addr string
	srv  *server.BgpServer
}

func startFakeNode(tb testing.TB, addr string, speakerPort int) *fakeNode {
	tb.Helper()
	srv := server.NewBgpServer(server.LoggerOption(newGoBGPLogger(testLog(tb).With("node", addr))))
	go srv.Serve()
	ctx := context.Background()
	if err := srv.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{Asn: 64512, RouterId: addr, ListenPort: -1}}); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = srv.StopBgp(context.Background(), &api.StopBgpRequest{}) })
	err := srv.AddPeer(ctx, &api.AddPeerRequest{Peer: &api.Peer{
		Conf:      &api.PeerConf{NeighborAddress: "127.0.0.1", PeerAsn: 64512},
		Transport: &api.Transport{LocalAddress: addr, RemotePort: uint32(speakerPort)},
		Timers:    &api.Timers{Config: &api.TimersConfig{ConnectRetry: 1, HoldTime: 9, KeepaliveInterval: 3}},
		AfiSafis: []*api.AfiSafi{{Config: &api.AfiSafiConfig{Family: ipv4Unicast, Enabled: true},
			MpGracefulRestart: &api.MpGracefulRestart{Config: &api.MpGracefulRestartConfig{Enabled: true}}}},
		GracefulRestart: &api.GracefulRestart{Enabled: true, RestartTime: 30},
	}})
	if err != nil {
		tb.Fatal(err)
	}
	return &fakeNode{addr: addr, srv: srv}
}

func (n *fakeNode) path(prefix, nextHop string, withdraw bool) *api.Path {
	p := netip.MustParsePrefix(prefix)
	nlri := bgp.NewIPAddrPrefix(uint8(p.Bits()), p.Addr().String())
	attrs := []bgp.PathAttributeInterface{
		bgp.NewPathAttributeOrigin(bgp.BGP_ORIGIN_ATTR_TYPE_IGP),
		bgp.NewPathAttributeNextHop(nextHop),
	}
	ap, err := apiutil.NewPath(nlri, withdraw, attrs, time.Now())
	if err != nil {
		panic(err)
	}
	return ap
}

func (n *fakeNode) announce(tb testing.TB, prefix, nextHop string) {
	tb.Helper()
	if _, err := n.srv.AddPath(context.Background(), &api.AddPathRequest{Path: n.path(prefix, nextHop, false)}); err != nil {
		tb.Fatal(err)
	}
}

func (n *fakeNode) withdraw(tb testing.TB, prefix, nextHop string) {
	tb.Helper()
	if err := n.srv.DeletePath(context.Background(), &api.DeletePathRequest{Path: n.path(prefix, nextHop, true)}); err != nil {
		tb.Fatal(err)
	}
}

// eventually polls cond until it returns "" or the deadline passes.
func eventually(tb testing.TB, timeout time.Duration, cond func() string) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		msg := cond()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("after %s: %s", timeout, msg)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func loopbackConfig(tb testing.TB, src Source) Config {
	return Config{
		LocalAS: 64512, RouterID: netip.MustParseAddr("127.0.0.1"), ListenAddress: netip.MustParseAddr("127.0.0.1"),
		ListenPort: freePort(tb, "127.0.0.1"), PeerWithNodes: true,
		HoldTime: 3 * time.Second, KeepaliveInterval: time.Second, ConnectRetry: time.Second,
		StaleTimeout: time.Minute, Source: src,
	}
}

func loopNode(name, addr string) Node {
	a := netip.MustParseAddr(addr)
	return Node{Name: name, PeerAddress: a, Addresses: []netip.Addr{a}}
}

func aff(block, node string) Affinity {
	return Affinity{Block: netip.MustParsePrefix(block), Node: node}
}

func wantRoutes(rt *fakeRoutes, want string) func() string {
	return func() string {
		if got := rt.snapshot(); got != want {
			return fmt.Sprintf("routes:\n%s\nwant:\n%s", got, want)
		}
		return ""
	}
}

// bgpServer waits until Run has started GoBGP.
func bgpServer(s *Speaker) *server.BgpServer {
	for {
		s.mu.Lock()
		srv := s.srv
		s.mu.Unlock()
		if srv != nil {
			return srv
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// gobgpRIB lists GoBGP's global RIB: what passed GoBGP's own import policy,
// independent of the speaker's second check.
func gobgpRIB(s *Speaker) string {
	rib := map[netip.Prefix]netip.Addr{}
	_ = bgpServer(s).ListPath(context.Background(), &api.ListPathRequest{TableType: api.TableType_GLOBAL, Family: ipv4Unicast},
		func(d *api.Destination) {
			for _, p := range d.Paths {
				if pfx, nh, err := pathPrefixNextHop(p); err == nil {
					rib[pfx] = nh
				}
			}
		})
	var b strings.Builder
	for _, k := range slices.SortedFunc(maps.Keys(rib), comparePrefix) {
		fmt.Fprintf(&b, "%s via %s\n", k, rib[k])
	}
	return b.String()
}

func TestPolicyMatchesGoBGP(t *testing.T) {
	src := newChanSource()
	cfg := loopbackConfig(t, src)
	rt := newFakeRoutes()
	reg := prometheus.NewRegistry()
	a := startFakeNode(t, "127.0.0.2", cfg.ListenPort)
	b := startFakeNode(t, "127.0.0.3", cfg.ListenPort)
	s := startSpeaker(t, cfg, rt, reg)
	nodeB := loopNode("node-b", "127.0.0.3")
	nodeB.PodCIDRs = []netip.Prefix{netip.MustParsePrefix("198.18.72.0/24")} // host-local IPAM
	st := ClusterState{
		Nodes: []Node{loopNode("node-a", "127.0.0.2"), nodeB},
		Pools: []Pool{{Name: "default", CIDR: netip.MustParsePrefix("198.18.64.0/20"), BlockSize: 26}},
		Affinities: []Affinity{
			aff("198.18.64.0/26", "node-a"),
			aff("198.18.64.64/26", "node-b"),
		},
	}
	src.ch <- st
	a.announce(t, "198.18.64.0/26", "127.0.0.2")   // own block
	a.announce(t, "198.18.64.64/26", "127.0.0.2")  // node-b's block
	a.announce(t, "198.18.64.130/32", "127.0.0.2") // borrowed address
	a.announce(t, "198.18.200.0/26", "127.0.0.2")  // outside the pool
	a.announce(t, "198.18.64.0/24", "127.0.0.2")   // shorter than a block
	a.announce(t, "198.18.66.0/26", "127.0.0.2")   // nobody's block
	b.announce(t, "198.18.64.64/26", "127.0.0.3")  // own block
	b.announce(t, "198.18.65.0/26", "127.0.0.2")   // nobody's, with node-a as next hop
	b.announce(t, "198.18.72.0/24", "127.0.0.3")   // its podCIDR
	a.announce(t, "198.18.72.0/24", "127.0.0.2")   // node-b's podCIDR

	want := "198.18.64.0/26 via 127.0.0.2\n198.18.64.64/26 via 127.0.0.3\n198.18.64.130/32 via 127.0.0.2\n198.18.72.0/24 via 127.0.0.3\n"
	eventually(t, 20*time.Second, wantRoutes(rt, want))
	if got := gobgpRIB(s.Speaker); got != want {
		t.Fatalf("GoBGP's RIB (its own policy) differs from Decide:\n%s\nwant:\n%s", got, want)
	}
	eventually(t, 5*time.Second, func() string {
		if v := testutil.ToFloat64(s.m.rejected.WithLabelValues("127.0.0.2")); v != 5 {
			return fmt.Sprintf("rejected from node-a = %v, want 5", v)
		}
		if v := testutil.ToFloat64(s.m.rejectedTotal.WithLabelValues("127.0.0.2", string(RejectNotOwner))); v != 2 {
			return fmt.Sprintf("rejected_total{reason=not-owner} = %v", v)
		}
		return ""
	})

	// The block changes hands and a new one is assigned: GoBGP re-evaluates
	// what it already has (soft reset in), nothing is re-sent.
	st.Affinities = []Affinity{
		aff("198.18.64.0/26", "node-a"),
		aff("198.18.64.64/26", "node-a"),
		aff("198.18.66.0/26", "node-a"),
	}
	src.ch <- st
	want = "198.18.64.0/26 via 127.0.0.2\n198.18.64.64/26 via 127.0.0.2\n198.18.64.130/32 via 127.0.0.2\n198.18.66.0/26 via 127.0.0.2\n198.18.72.0/24 via 127.0.0.3\n"
	eventually(t, 10*time.Second, wantRoutes(rt, want))
	if got := gobgpRIB(s.Speaker); got != want {
		t.Fatalf("GoBGP's RIB after the policy change:\n%s\nwant:\n%s", got, want)
	}

	// Without ownership data, any block inside the pools goes.
	st.Affinities = nil
	src.ch <- st
	eventually(t, 10*time.Second, func() string {
		if got := gobgpRIB(s.Speaker); !strings.Contains(got, "198.18.65.0/26 via 127.0.0.2") {
			return "198.18.65.0/26 not accepted without affinities:\n" + got
		}
		return ""
	})

	// Withdrawal.
	a.withdraw(t, "198.18.64.130/32", "127.0.0.2")
	eventually(t, 10*time.Second, func() string {
		if strings.Contains(rt.snapshot(), "198.18.64.130/32") {
			return "withdrawn /32 still routed"
		}
		return ""
	})

	// Status and its HTTP form.
	stat := s.Status()
	if len(stat.Peers) != 2 || stat.Peers[0].State != "Established" || stat.Peers[0].Node != "node-a" ||
		stat.Peers[0].Received != 6 || stat.Peers[0].Accepted != 3 || stat.Peers[0].Rejected != 3 {
		t.Fatalf("status peers: %+v", stat.Peers)
	}
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/debug/bgp", nil))
	body := rec.Body.String()
	for _, want := range []string{"127.0.0.2", "node-a", "Established", "198.18.64.0/26", "198.18.200.0/26", string(RejectOutsidePools)} {
		if !strings.Contains(body, want) {
			t.Errorf("/debug/bgp lacks %q:\n%s", want, body)
		}
	}
	rec = httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/debug/bgp?format=json", nil))
	if !strings.Contains(rec.Body.String(), `"state": "Established"`) {
		t.Errorf("JSON status:\n%s", rec.Body.String())
	}

	// Exit: Cease to peers, routes flushed.
	s.Stop(t)
	if rt.flushed != 1 || rt.snapshot() != "" {
		t.Fatalf("after exit: flushed %d times, routes %q", rt.flushed, rt.snapshot())
	}
}

func TestNodePeersFollowNodes(t *testing.T) {
	src := newChanSource()
	cfg := loopbackConfig(t, src)
	cfg.NodeSelector = "bgp!=off"
	cfg.NodePassword = &SecretRef{Namespace: "calico-system", Name: "bgp", Key: "mesh"}
	cfg.Peers = []Peer{{Address: netip.MustParseAddr("127.0.0.9"), AS: 64600}}
	s := startSpeaker(t, cfg, newFakeRoutes(), nil)

	peers := func() string {
		var out []string
		_ = bgpServer(s.Speaker).ListPeer(context.Background(), &api.ListPeerRequest{}, func(p *api.Peer) {
			out = append(out, fmt.Sprintf("%s/%d/%v", p.Conf.NeighborAddress, p.Conf.PeerAsn, p.Conf.AuthPassword != ""))
		})
		slices.Sort(out)
		return strings.Join(out, " ")
	}
	waitPeers := func(want string) {
		t.Helper()
		eventually(t, 5*time.Second, func() string {
			if got := peers(); got != want {
				return fmt.Sprintf("GoBGP peers %q, want %q", got, want)
			}
			return ""
		})
	}

	secrets := map[SecretRef]string{*cfg.NodePassword: "s3cret"}
	n1 := loopNode("node-1", "127.0.0.2")
	n2 := loopNode("node-2", "127.0.0.3")
	n2.AS = 64513
	off := loopNode("node-off", "127.0.0.4")
	off.Labels = map[string]string{"bgp": "off"}
	self := loopNode("edge", "127.0.0.1")
	src.ch <- ClusterState{Nodes: []Node{n1, n2, off, self}, Secrets: secrets}
	waitPeers("127.0.0.2/64512/true 127.0.0.3/64513/true 127.0.0.9/64600/false")

	// A node leaves, another joins: no restart.
	n5 := loopNode("node-5", "127.0.0.5")
	src.ch <- ClusterState{Nodes: []Node{n2, n5}, Secrets: secrets}
	waitPeers("127.0.0.3/64513/true 127.0.0.5/64512/true 127.0.0.9/64600/false")

	// A node's AS changes: the peer is re-created.
	n5.AS = 64555
	src.ch <- ClusterState{Nodes: []Node{n2, n5}, Secrets: secrets}
	waitPeers("127.0.0.3/64513/true 127.0.0.5/64555/true 127.0.0.9/64600/false")

	// The password Secret disappears: node peers wait for it.
	src.ch <- ClusterState{Nodes: []Node{n2, n5}}
	waitPeers("127.0.0.9/64600/false")
	stat := s.Status()
	if len(stat.Peers) != 3 || !strings.Contains(stat.Peers[0].Problem, "calico-system/bgp/mesh") {
		t.Fatalf("status: %+v", stat.Peers)
	}
}

func TestEndOfRIBEndsStaleWait(t *testing.T) {
	src := newChanSource()
	cfg := loopbackConfig(t, src)
	cfg.PodCIDRs = []netip.Prefix{netip.MustParsePrefix("198.18.64.0/20")}
	// From a previous run: one route the node still announces, one not.
	rt := newFakeRoutes("198.18.64.0/26", "198.18.64.64/26")
	a := startFakeNode(t, "127.0.0.2", cfg.ListenPort)
	s := startSpeaker(t, cfg, rt, nil)
	src.ch <- ClusterState{Nodes: []Node{loopNode("node-a", "127.0.0.2")}}
	a.announce(t, "198.18.64.0/26", "127.0.0.2")
	select {
	case n := <-rt.swept:
		if n != 1 {
			t.Fatalf("swept %d stale routes, want 1", n)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("no sweep after End-of-RIB; status %+v", s.Status().Peers)
	}
	if got := rt.snapshot(); got != "198.18.64.0/26 via 127.0.0.2\n" {
		t.Fatalf("routes after sweep:\n%s", got)
	}
	if !s.Status().StaleSwept || !s.Status().Peers[0].EndOfRIB {
		t.Fatalf("status: %+v", s.Status())
	}
}

func TestKeepRoutesOnExit(t *testing.T) {
	src := newChanSource()
	cfg := loopbackConfig(t, src)
	cfg.PodCIDRs = []netip.Prefix{netip.MustParsePrefix("198.18.64.0/20")}
	cfg.KeepRoutesOnExit = true
	rt := newFakeRoutes()
	a := startFakeNode(t, "127.0.0.2", cfg.ListenPort)
	s := startSpeaker(t, cfg, rt, nil)
	src.ch <- ClusterState{Nodes: []Node{loopNode("node-a", "127.0.0.2")}}
	a.announce(t, "198.18.64.0/26", "127.0.0.2")
	eventually(t, 20*time.Second, wantRoutes(rt, "198.18.64.0/26 via 127.0.0.2\n"))
	s.Stop(t)
	// The session's teardown must not have withdrawn the route either.
	if got := rt.snapshot(); got != "198.18.64.0/26 via 127.0.0.2\n" || rt.flushed != 0 {
		t.Fatalf("after exit with KeepRoutesOnExit: %q, flushed %d", got, rt.flushed)
	}
}

func TestPassivePeers(t *testing.T) {
	src := newChanSource()
	cfg := loopbackConfig(t, src)
	cfg.PeerWithNodes = false
	cfg.PassivePeers = []PassivePeer{{Prefix: netip.MustParsePrefix("127.0.0.0/29"), AS: 64512}}
	cfg.PodCIDRs = []netip.Prefix{netip.MustParsePrefix("198.18.64.0/20")}
	rt := newFakeRoutes()
	n := startFakeNode(t, "127.0.0.5", cfg.ListenPort)
	// Outside the prefix: refused.
	stranger := startFakeNode(t, "127.0.0.9", cfg.ListenPort)
	s := startSpeaker(t, cfg, rt, nil)
	src.ch <- ClusterState{}
	n.announce(t, "198.18.64.0/26", "127.0.0.5")
	stranger.announce(t, "198.18.64.64/26", "127.0.0.9")
	eventually(t, 20*time.Second, wantRoutes(rt, "198.18.64.0/26 via 127.0.0.5\n"))
	p := s.Status().Peers
	if len(p) != 1 || p[0].Kind != kindPassive || p[0].State != "Established" || p[0].Accepted != 1 {
		t.Fatalf("status %+v", p)
	}
	// A refusal has no event to wait for: watch for two connect retries.
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if got := rt.snapshot(); got != "198.18.64.0/26 via 127.0.0.5\n" {
			t.Fatalf("a peer outside the passive prefix got routes in:\n%s", got)
		}
	}
	if p := s.Status().Peers; len(p) != 1 {
		t.Fatalf("peers: %+v", p)
	}
}

func TestMaxPrefixes(t *testing.T) {
	src := newChanSource()
	cfg := loopbackConfig(t, src)
	cfg.MaxPrefixes = 2
	cfg.MaxPrefixesRestart = time.Second
	cfg.PodCIDRs = []netip.Prefix{netip.MustParsePrefix("198.18.64.0/20")}
	rt := newFakeRoutes()
	n := startFakeNode(t, "127.0.0.2", cfg.ListenPort)
	s := startSpeaker(t, cfg, rt, nil)
	src.ch <- ClusterState{Nodes: []Node{loopNode("node-a", "127.0.0.2")}}
	n.announce(t, "198.18.64.0/26", "127.0.0.2")
	n.announce(t, "198.18.64.64/26", "127.0.0.2")
	eventually(t, 20*time.Second, wantRoutes(rt, "198.18.64.0/26 via 127.0.0.2\n198.18.64.64/26 via 127.0.0.2\n"))
	// Rejected routes do not count (an eBGP node re-announces the whole
	// cluster's blocks).
	n.announce(t, "198.18.200.0/26", "127.0.0.2")
	n.announce(t, "198.18.200.64/26", "127.0.0.2")
	eventually(t, 10*time.Second, func() string {
		p := s.Status().Peers
		if len(p) != 1 || p[0].State != "Established" || p[0].Received != 4 || p[0].Rejected != 2 {
			return fmt.Sprintf("peers %+v", p)
		}
		return ""
	})
	n.announce(t, "198.18.64.128/26", "127.0.0.2")
	// The peer is disconnected and its routes go with the session.
	eventually(t, 10*time.Second, func() string {
		p := s.Status().Peers
		if len(p) != 1 || p[0].State == "Established" || !strings.Contains(p[0].Problem, "more than 2 prefixes") || rt.snapshot() != "" {
			return fmt.Sprintf("peers %+v, routes %q", p, rt.snapshot())
		}
		return ""
	})
	if v := testutil.ToFloat64(s.m.maxPrefixes.WithLabelValues("127.0.0.2")); v != 1 {
		t.Fatalf("max_prefixes_exceeded_total = %v", v)
	}
	// After the penalty it comes back, and is dropped again.
	eventually(t, 20*time.Second, func() string {
		if v := testutil.ToFloat64(s.m.maxPrefixes.WithLabelValues("127.0.0.2")); v < 2 {
			return "peer not re-admitted and dropped again"
		}
		return ""
	})
}

// Over eBGP every node announces a borrowed address with itself as next hop:
// the path from the node running the pod (EndpointSlice nodeName) wins,
// whichever the tie-break would pick, and follows the pod.
func TestBorrowedAddressPrefersHost(t *testing.T) {
	src := newChanSource()
	cfg := loopbackConfig(t, src)
	rt := newFakeRoutes()
	a := startFakeNode(t, "127.0.0.2", cfg.ListenPort)
	b := startFakeNode(t, "127.0.0.3", cfg.ListenPort)
	startSpeaker(t, cfg, rt, nil)
	pod := netip.MustParseAddr("198.18.64.130") // in node-c's block
	st := ClusterState{
		Nodes: []Node{loopNode("node-a", "127.0.0.2"), loopNode("node-b", "127.0.0.3"), loopNode("node-c", "127.0.0.4")},
		Pools: []Pool{{Name: "default", CIDR: netip.MustParsePrefix("198.18.64.0/20"), BlockSize: 26}},
		Affinities: []Affinity{aff("198.18.64.0/26", "node-a"), aff("198.18.64.64/26", "node-b"),
			aff("198.18.64.128/26", "node-c")},
		Hosts: map[netip.Addr]string{
			netip.MustParseAddr("198.18.64.10"): "node-a", // in its own block: not announced as a /32
			pod:                                 "node-a",
		},
	}
	src.ch <- st
	a.announce(t, "198.18.64.130/32", "127.0.0.2")
	b.announce(t, "198.18.64.130/32", "127.0.0.3")
	eventually(t, 20*time.Second, wantRoutes(rt, "198.18.64.130/32 via 127.0.0.2\n"))

	st.Hosts = map[netip.Addr]string{pod: "node-b"}
	src.ch <- st
	eventually(t, 20*time.Second, wantRoutes(rt, "198.18.64.130/32 via 127.0.0.3\n"))
	st.Hosts = map[netip.Addr]string{pod: "node-a"}
	src.ch <- st
	eventually(t, 20*time.Second, wantRoutes(rt, "198.18.64.130/32 via 127.0.0.2\n"))
}

// A trust-next-hop peer (a switch forwarding to the nodes) is the next hop of
// the blocks it announces: GoBGP's policy accepts them from it, and only
// from it.
func TestTrustNextHopPeer(t *testing.T) {
	src := newChanSource()
	cfg := loopbackConfig(t, src)
	cfg.PeerWithNodes = false
	cfg.Peers = []Peer{{Address: netip.MustParseAddr("127.0.0.4"), TrustNextHop: true}, {Address: netip.MustParseAddr("127.0.0.5")}}
	rt := newFakeRoutes()
	tor := startFakeNode(t, "127.0.0.4", cfg.ListenPort)
	other := startFakeNode(t, "127.0.0.5", cfg.ListenPort)
	s := startSpeaker(t, cfg, rt, nil)
	src.ch <- ClusterState{
		Nodes:      []Node{loopNode("node-a", "127.0.0.2")},
		Pools:      []Pool{{Name: "default", CIDR: netip.MustParsePrefix("198.18.64.0/20"), BlockSize: 26}},
		Affinities: []Affinity{aff("198.18.64.0/26", "node-a")},
	}
	tor.announce(t, "198.18.64.0/26", "127.0.0.4")
	tor.announce(t, "198.18.200.0/26", "127.0.0.4") // outside the pools: still refused
	other.announce(t, "198.18.64.64/26", "127.0.0.5")
	eventually(t, 20*time.Second, wantRoutes(rt, "198.18.64.0/26 via 127.0.0.4\n"))
	if got := gobgpRIB(s.Speaker); got != "198.18.64.0/26 via 127.0.0.4\n" {
		t.Fatalf("GoBGP's RIB:\n%s", got)
	}
	eventually(t, 10*time.Second, func() string {
		st := s.Status()
		if len(st.Rejected) != 2 {
			return fmt.Sprintf("rejected %+v", st.Rejected)
		}
		return ""
	})
}
