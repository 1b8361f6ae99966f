package bgp

import (
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// IPv6 beside IPv4, as Calico runs it: each node has a second BGP session
// over its IPv6 address carrying its IPv6 blocks (bird6's job in
// calico-node), and the edge installs them with protocol 201 through the
// nodes' IPv6 addresses, under the same import policy.
func TestBirdIPv6RoutesAndPolicy(t *testing.T) {
	t.Parallel()
	l := newLab(t)
	l.enableIPv6()
	// The administrator's IPv6 route in the same table: left alone.
	l.ip("-6", "route", "add", "2001:db8:18:1::/64", "via", "2001:db8:18:ff::99", "proto", "static")

	n1 := l.addNode(birdSettings{GR: true, GRTime: 20, Static: []birdStatic{
		{Name: "pods", Routes: []string{block(1, 0)}},
		{Name: "pods6", IPv6: true, Routes: []string{
			block6(1, 0),
			"2001:db8:18::245/128", // an address borrowed from node-2's block
			"2001:db8:18::300/122", // nobody's block
			"2001:db8:99::/122",    // outside the IPv6 pool
			block6(2, 1),           // node-2's block
		}},
		{Name: "extra6", IPv6: true, Disabled: true, Routes: []string{block6(1, 1)}},
	}})
	n2 := l.addNode(birdSettings{GR: true, GRTime: 20, Static: []birdStatic{
		{Name: "pods6", IPv6: true, Routes: []string{block6(2, 0), block6(2, 1)}},
	}})
	n1.start()
	n2.start()
	st := ClusterState{
		Nodes: l.nodeState(n1, n2),
		Pools: []Pool{{Name: "v4", CIDR: mustPrefix("198.18.64.0/18"), BlockSize: 26},
			{Name: "v6", CIDR: mustPrefix(labPool6), BlockSize: 122}},
		Affinities: []Affinity{
			affinity(block(1, 0), n1.name), affinity(block6(1, 0), n1.name), affinity(block6(1, 1), n1.name),
			affinity(block6(2, 0), n2.name), affinity(block6(2, 1), n2.name),
		},
	}
	e := l.startEdge(edgeSpec{PeerWithNodes: true, InitialState: &edgeState{ClusterState: st}})

	want := map[string]string{
		block(1, 0):  n1.addr,
		block6(1, 0): n1.addr6, "2001:db8:18::245/128": n1.addr6,
		block6(2, 0): n2.addr6, block6(2, 1): n2.addr6,
	}
	l.waitKernel(30*time.Second, want)
	if out, _ := l.edgeNS.Exec("ip", "-6", "route", "show", "proto", "201"); !strings.Contains(out,
		block6(1, 0)+" via "+n1.addr6+" dev br0") {
		t.Fatalf("ip -6 route show proto 201:\n%s", out)
	}
	var stat Status
	eventually(t, 10*time.Second, func() string {
		var err error
		if stat, err = e.status(); err != nil {
			return err.Error()
		}
		if !peerStatus(stat, n1.addr6).EndOfRIB {
			return "no End-of-RIB from node-1's IPv6 session yet"
		}
		return ""
	})
	rejected := map[string]Reason{}
	for _, r := range stat.Rejected {
		rejected[r.Prefix.String()+" from "+r.Peer.String()] = r.Reason
	}
	for k, want := range map[string]Reason{
		"2001:db8:99::/122 from " + n1.addr6:    RejectOutsidePools,
		"2001:db8:18::300/122 from " + n1.addr6: RejectNoAffinity,
		block6(2, 1) + " from " + n1.addr6:      RejectNotOwner,
	} {
		if rejected[k] != want {
			t.Fatalf("rejection of %s = %q, want %q; all: %v\n%s", k, rejected[k], want, rejected, e.text(t))
		}
	}
	// Two sessions per dual-stack node, one per family.
	if p := peerStatus(stat, n1.addr6); p.State != "Established" || p.Family != "ipv6" || p.Node != n1.name ||
		p.Received != 5 || p.Accepted != 2 || p.Rejected != 3 {
		t.Fatalf("node-1 IPv6 session %+v\n%s", p, e.text(t))
	}
	if p := peerStatus(stat, n1.addr); p.State != "Established" || p.Family != "ipv4" || p.Accepted != 1 {
		t.Fatalf("node-1 IPv4 session %+v", p)
	}
	if p := peerStatus(stat, n2.addr6); p.State != "Established" || p.Accepted != 2 {
		t.Fatalf("node-2 IPv6 session %+v", p)
	}
	text := e.text(t)
	for _, s := range []string{n1.addr6 + " ", "ipv6", block6(1, 0), "installed"} {
		if !strings.Contains(text, s) {
			t.Fatalf("perimeter bgp status lacks %q:\n%s", s, text)
		}
	}
	t.Logf("perimeter bgp status:\n%s", text)

	// An announcement and its withdrawal.
	n1.birdc("enable", "extra6")
	want[block6(1, 1)] = n1.addr6
	l.waitKernel(10*time.Second, want)
	n1.birdc("disable", "extra6")
	delete(want, block6(1, 1))
	l.waitKernel(10*time.Second, want)

	// node-2's BIRD stops: its IPv6 blocks go.
	n2.kill(syscall.SIGTERM)
	delete(want, block6(2, 0))
	delete(want, block6(2, 1))
	l.waitKernel(10*time.Second, want)

	// The edge stops: its routes of both families go, the administrator's
	// stays.
	if err := e.stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("edge exit: %v", err)
	}
	if got := l.kernel(); len(got) != 0 {
		t.Fatalf("routes left after exit: %v", got)
	}
	if out, _ := l.edgeNS.Exec("ip", "-6", "route", "show", "2001:db8:18:1::/64"); !strings.Contains(out, "proto static") {
		t.Fatalf("the administrator's IPv6 route is gone: %q", out)
	}
}

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// A calico-node as it runs in a dual-stack cluster: BIRD 1.6's bird with
// confd's IPv4 configuration and bird6 with its IPv6 one, side by side in
// the node, each with a Global peer (BGPPeer) to the edge over its own
// family. bird6 exports the node's /122 block (a blackhole static) and a
// borrowed /128 learned from the kernel (the device route Felix programs
// for a pod holding another node's address); the edge installs both via the
// node's IPv6 address.
func TestCalicoBird6Node(t *testing.T) {
	t.Parallel()
	l := newLab(t)
	l.enableIPv6()
	ns := testenv.NewNetns(t, l.id+"-c1")
	addr, addr6 := "198.19.64.21", "2001:db8:18:ff::21"
	testenv.Veth(t, testenv.VethOptions{NS: l.edgeNS, PeerNS: ns, Name: "vc1", PeerName: "eth0", Master: "br0", PeerAddr: addr + "/24"})
	for _, args := range [][]string{
		{"ip", "-6", "addr", "add", addr6 + "/64", "dev", "eth0", "nodad"},
		// Felix's route to a pod on a borrowed address (proto boot).
		{"ip", "-6", "route", "add", "2001:db8:18::245/128", "dev", "eth0", "proto", "boot"},
	} {
		if _, err := ns.Exec(args...); err != nil {
			t.Fatal(err)
		}
	}
	edge := testenv.CalicoPeer{Address: "198.19.64.1", Port: l.port, AS: 64512}
	conf, err := testenv.CalicoBirdConfig(testenv.CalicoNode{Address: addr, Pools: []string{"198.18.64.0/18"},
		Blocks: []string{block(1, 0)}, Peers: []testenv.CalicoPeer{edge}})
	if err != nil {
		t.Fatal(err)
	}
	edge.Address = labEdge6
	conf6, err := testenv.CalicoBird6Config(testenv.CalicoNode{Address: addr6, RouterID: addr, Pools: []string{labPool6},
		Blocks: []string{block6(1, 0)}, Peers: []testenv.CalicoPeer{edge}})
	if err != nil {
		t.Fatal(err)
	}
	if err := testenv.NewCalicoBird(t, ns, l.dir, "calico-1").Start(conf); err != nil {
		t.Fatal(err)
	}
	b6 := testenv.NewCalicoBird6(t, ns, l.dir, "calico6-1")
	if err := b6.Start(conf6); err != nil {
		t.Fatal(err)
	}

	st := ClusterState{
		Nodes: []Node{{Name: "node-1", PeerAddress: netip.MustParseAddr(addr), PeerAddress6: netip.MustParseAddr(addr6),
			Addresses: []netip.Addr{netip.MustParseAddr(addr), netip.MustParseAddr(addr6)}}},
		Pools: []Pool{{Name: "v4", CIDR: mustPrefix("198.18.64.0/18"), BlockSize: 26},
			{Name: "v6", CIDR: mustPrefix(labPool6), BlockSize: 122}},
		Affinities: []Affinity{affinity(block(1, 0), "node-1"), affinity(block6(1, 0), "node-1"),
			affinity(block6(2, 0), "node-2")},
	}
	e := l.startEdge(edgeSpec{PeerWithNodes: true, InitialState: &edgeState{ClusterState: st}})
	l.waitKernel(30*time.Second, map[string]string{
		block(1, 0): addr, block6(1, 0): addr6, "2001:db8:18::245/128": addr6,
	})
	stat, err := e.status()
	if err != nil {
		t.Fatal(err)
	}
	if p := peerStatus(stat, addr6); p.State != "Established" || p.Family != "ipv6" || p.Accepted != 2 || p.Rejected != 0 {
		t.Fatalf("bird6 session %+v\n%s", p, e.text(t))
	}
	if out, err := b6.Birdc("show", "protocols"); err != nil || !strings.Contains(out, "Established") {
		t.Fatalf("birdc6 show protocols: %v\n%s", err, out)
	}

	// The pod goes (Felix removes its route): the /128 is withdrawn.
	if _, err := ns.Exec("ip", "-6", "route", "del", "2001:db8:18::245/128", "dev", "eth0"); err != nil {
		t.Fatal(err)
	}
	l.waitKernel(15*time.Second, map[string]string{block(1, 0): addr, block6(1, 0): addr6})
	if err := e.stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("edge exit: %v", err)
	}
	if got := l.kernel(); len(got) != 0 {
		t.Fatalf("routes left after exit: %v", got)
	}
}

// routesReaching is fakeRoutes whose kernel reaches the given addresses.
type routesReaching struct {
	*fakeRoutes
	ok []netip.Addr
}

func (r routesReaching) Reaches(ip netip.Addr) bool { return slices.Contains(r.ok, ip) }

// IPv6 endpoints that no route reaches (a dual-stack cluster peered over
// IPv4 only) are reported once per Service, in the log and as an Event,
// and again only after they were reachable or gone in between. Endpoints
// the kernel reaches otherwise are fine.
func TestIPv6EndpointsWithoutRoute(t *testing.T) {
	src := newChanSource()
	cfg := loopbackConfig(t, src)
	cfg.StaleTimeout = 100 * time.Millisecond
	type event struct {
		svc             ServiceRef
		reason, message string
	}
	events := make(chan event, 10)
	cfg.ServiceEvent = func(svc ServiceRef, reason, message string) { events <- event{svc, reason, message} }
	exited := make(chan struct{})
	cfg.OnExit = func() { close(exited) }
	rt := routesReaching{fakeRoutes: newFakeRoutes(), ok: []netip.Addr{netip.MustParseAddr("2001:db8:18:9::1")}}
	s := startSpeaker(t, cfg, rt, nil)

	web := ServiceRef{"shop", "web"}
	st := ClusterState{Endpoints6: map[ServiceRef][]netip.Addr{
		web:                {netip.MustParseAddr("2001:db8:18:1::4a"), netip.MustParseAddr("2001:db8:18:9::1")},
		{"shop", "routed"}: {netip.MustParseAddr("2001:db8:18:9::1")},
	}}
	src.ch <- st
	next := func() event {
		t.Helper()
		select {
		case e := <-events:
			return e
		case <-time.After(10 * time.Second):
			t.Fatal("no Event")
		}
		return event{}
	}
	e := next()
	if e.svc != web || e.reason != ReasonNoRouteToEndpoint || !strings.Contains(e.message, "2001:db8:18:1::4a") ||
		strings.Contains(e.message, "2001:db8:18:9::1") || !strings.Contains(e.message, "no IPv6 session") {
		t.Fatalf("event %+v", e)
	}
	// The same state again: no second Event.
	src.ch <- st
	src.ch <- st
	eventually(t, 5*time.Second, func() string {
		if len(src.ch) > 0 {
			return "state not taken yet"
		}
		return ""
	})
	// The endpoint goes, then comes back: reported again.
	src.ch <- ClusterState{}
	src.ch <- st
	if e := next(); e.svc != web {
		t.Fatalf("event after recurrence %+v", e)
	}
	select {
	case e := <-events:
		t.Fatalf("unexpected event %+v", e)
	default:
	}
	s.Stop(t)
	select {
	case <-exited:
	default:
		t.Fatal("OnExit not called")
	}
}
