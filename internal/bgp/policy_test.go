package bgp

import (
	"fmt"
	"net/netip"
	"testing"

	api "github.com/osrg/gobgp/v3/api"
	"google.golang.org/protobuf/encoding/prototext"
)

var (
	nodeA = Node{Name: "node-a", PeerAddress: netip.MustParseAddr("198.19.64.2"),
		Addresses: []netip.Addr{netip.MustParseAddr("198.19.64.2"), netip.MustParseAddr("198.19.65.2")}}
	nodeB = Node{Name: "node-b", PeerAddress: netip.MustParseAddr("198.19.64.3")}
	pools = []Pool{
		{Name: "default", CIDR: netip.MustParsePrefix("198.18.64.0/20"), BlockSize: 26},
		{Name: "small-blocks", CIDR: netip.MustParsePrefix("198.18.96.0/20"), BlockSize: 28},
	}
	affinities = []Affinity{
		{Block: netip.MustParsePrefix("198.18.64.0/26"), Node: "node-a"},
		{Block: netip.MustParsePrefix("198.18.64.64/26"), Node: "node-b"},
		{Block: netip.MustParsePrefix("198.18.96.0/28"), Node: "node-a"},
		{Block: netip.MustParsePrefix("198.18.65.0/26"), Node: "node-gone"},
	}
)

func TestPolicyDecide(t *testing.T) {
	a, a2, b := "198.19.64.2", "198.19.65.2", "198.19.64.3"
	owned := NewPolicy(pools, affinities, []Node{nodeA, nodeB})
	open := NewPolicy(pools, nil, []Node{nodeA, nodeB})
	none := NewPolicy(nil, nil, nil)
	withCIDR := func(n Node, c string) Node { n.PodCIDRs = []netip.Prefix{netip.MustParsePrefix(c)}; return n }
	hostLocal := NewPolicy(pools, []Affinity{}, []Node{withCIDR(nodeA, "198.18.72.0/24"), withCIDR(nodeB, "198.18.200.0/24")})
	for _, tc := range []struct {
		name    string
		pol     *Policy
		prefix  string
		nextHop string
		want    Reason
	}{
		{"own block", owned, "198.18.64.0/26", a, Accepted},
		{"own block via the owner's other address", owned, "198.18.64.0/26", a2, Accepted},
		{"other node's block", owned, "198.18.64.64/26", a, RejectNotOwner},
		{"block announced by its owner", owned, "198.18.64.64/26", b, Accepted},
		{"part of an owned block", owned, "198.18.64.16/28", a, Accepted},
		{"part of an owned block from another node", owned, "198.18.64.16/28", b, RejectNotOwner},
		{"borrowed /32 from a non-owner", owned, "198.18.64.5/32", b, Accepted},
		{"/32 in a block nobody owns", owned, "198.18.70.1/32", b, Accepted},
		{"/32 whose next hop is no node", owned, "198.18.64.5/32", "203.0.113.99", RejectHostNotNode},
		{"/32 without ownership data, next hop no node", open, "198.18.64.5/32", "203.0.113.99", RejectHostNotNode},
		{"/32 while no node is known", NewPolicy(pools, nil, nil), "198.18.64.5/32", "203.0.113.99", Accepted},
		{"block without affinity", owned, "198.18.66.0/26", a, RejectNoAffinity},
		{"block whose owner has no known address", owned, "198.18.65.0/26", a, RejectNotOwner},
		{"small-block pool", owned, "198.18.96.0/28", a, Accepted},
		{"small-block pool, /26 is shorter than its blocks", owned, "198.18.96.0/26", a, RejectShorter},
		{"shorter than the block size", owned, "198.18.64.0/25", a, RejectShorter},
		{"whole pool", owned, "198.18.64.0/20", a, RejectShorter},
		{"outside the pools", owned, "198.18.128.0/26", a, RejectOutsidePools},
		{"covering the pools", owned, "198.18.0.0/16", a, RejectOutsidePools},
		{"default route", owned, "0.0.0.0/0", a, RejectOutsidePools},
		{"IPv6 outside the (IPv4) pools", owned, "2001:db8::/64", a, RejectOutsidePools},
		{"no ownership data: any block", open, "198.18.64.64/26", a, Accepted},
		{"no ownership data: any /32", open, "198.18.79.255/32", a, Accepted},
		{"no ownership data: still not shorter", open, "198.18.64.0/25", a, RejectShorter},
		{"no ownership data: still inside pools", open, "198.18.80.0/26", a, RejectOutsidePools},
		{"no pools at all", none, "198.18.64.0/26", a, RejectOutsidePools},
		// host-local IPAM: the Node's podCIDR, shorter than the pool's
		// blocks and without affinity, even outside the pools.
		{"podCIDR from its node", hostLocal, "198.18.72.0/24", a, Accepted},
		{"podCIDR from its node's other address", hostLocal, "198.18.72.0/24", a2, Accepted},
		{"podCIDR from another node", hostLocal, "198.18.72.0/24", b, RejectNotOwner},
		{"podCIDR outside the pools", hostLocal, "198.18.200.0/24", b, Accepted},
		{"podCIDR outside the pools from another node", hostLocal, "198.18.200.0/24", a, RejectNotOwner},
		{"covering a podCIDR", hostLocal, "198.18.72.0/23", a, RejectShorter},
	} {
		v := tc.pol.Decide(netip.MustParsePrefix(tc.prefix), netip.MustParseAddr(tc.nextHop))
		if v.Reason != tc.want || v.Accept != (tc.want == Accepted) {
			t.Errorf("%s: Decide(%s via %s) = %+v, want %s", tc.name, tc.prefix, tc.nextHop, v, tc.want)
		}
	}
	if v := owned.Decide(netip.MustParsePrefix("198.18.64.64/26"), netip.MustParseAddr(a)); v.Owner != "node-b" {
		t.Errorf("owner of a rejected block = %q, want node-b", v.Owner)
	}
}

func TestPolicyIgnoresUnusable(t *testing.T) {
	p := NewPolicy([]Pool{
		{CIDR: netip.MustParsePrefix("2001:db8::/48"), BlockSize: 40},  // block larger than pool
		{CIDR: netip.MustParsePrefix("2001:db8::/48"), BlockSize: 129}, // longer than an address
		{CIDR: netip.MustParsePrefix("198.18.64.0/24"), BlockSize: 20}, // block larger than pool
		{CIDR: netip.MustParsePrefix("198.18.65.0/24"), BlockSize: 26},
		{CIDR: netip.MustParsePrefix("198.18.65.0/24"), BlockSize: 26},
	}, []Affinity{{Block: netip.MustParsePrefix("198.18.65.0/26")}}, nil)
	if len(p.Pools()) != 1 || len(p.owners) != 0 || !p.OwnershipKnown() {
		t.Fatalf("pools %v owners %v", p.Pools(), p.owners)
	}
}

// The compiled GoBGP policy is checked against Decide end to end (two GoBGP
// speakers) in TestPolicyMatchesGoBGP; here its shape is pinned down.
func TestPolicyCompile(t *testing.T) {
	req := NewPolicy(pools, affinities, []Node{nodeA, nodeB}).gobgp()
	if len(req.Policies) != 1 || req.Policies[0].Name != importPolicyName {
		t.Fatalf("policies: %v", prototext.Format(req))
	}
	stmts := req.Policies[0].Statements
	// pod-hosts, node-a, node-b (node-gone has no address).
	if len(stmts) != 3 {
		t.Fatalf("want 3 statements, got:\n%s", prototext.Format(req))
	}
	sets := map[string]*api.DefinedSet{}
	for _, d := range req.DefinedSets {
		sets[d.Name] = d
	}
	a := sets[stmts[1].Conditions.PrefixSet.Name]
	if a == nil || len(a.Prefixes) != 2 || a.Prefixes[0].IpPrefix != "198.18.64.0/26" || a.Prefixes[0].MaskLengthMin != 26 ||
		a.Prefixes[0].MaskLengthMax != 31 || a.Prefixes[1].IpPrefix != "198.18.96.0/28" || a.Prefixes[1].MaskLengthMin != 28 {
		t.Fatalf("node-a's prefix set:\n%s", prototext.Format(req))
	}
	if nh := stmts[1].Conditions.NextHopInList; len(nh) != 2 || nh[0] != "198.19.64.2/32" || nh[1] != "198.19.65.2/32" {
		t.Fatalf("node-a's next hops: %v", nh)
	}
	open := NewPolicy(pools, nil, nil).gobgp()
	if n := len(open.Policies[0].Statements); n != 2 {
		t.Fatalf("without affinities want pod-hosts and pod-blocks, got:\n%s", prototext.Format(open))
	}
	if n := len(NewPolicy(nil, nil, nil).gobgp().Policies[0].Statements); n != 0 {
		t.Fatalf("no pools: %d statements", n)
	}
}

// A trusted peer (trust-next-hop) is the next hop of what it announces.
func TestPolicyTrustedPeer(t *testing.T) {
	tor := netip.MustParseAddr("198.19.64.254")
	pol := NewPolicy(pools, affinities, []Node{nodeA, nodeB}).WithTrusted([]netip.Prefix{netip.PrefixFrom(tor, 32)})
	for _, tc := range []struct {
		peer   netip.Addr
		prefix string
		want   Reason
	}{
		{tor, "198.18.64.64/26", Accepted},
		{tor, "198.18.64.5/32", Accepted},
		{tor, "198.18.66.0/26", Accepted},
		{tor, "198.18.64.0/25", RejectShorter},
		{tor, "198.18.128.0/26", RejectOutsidePools},
		{netip.MustParseAddr("198.19.64.2"), "198.18.64.64/26", RejectNotOwner},
	} {
		v := pol.DecideFrom(tc.peer, netip.MustParsePrefix(tc.prefix), tor)
		if v.Reason != tc.want {
			t.Errorf("%s from %s via %s: %+v, want %s", tc.prefix, tc.peer, tor, v, tc.want)
		}
	}
	req := pol.gobgp()
	if st := req.Policies[0].Statements[0]; st.Name != "trusted" || st.Conditions.NeighborSet == nil {
		t.Fatalf("first statement:\n%s", prototext.Format(req))
	}
}

// IPv6 (Calico's bird6): the same rules with IPv6 pools (/122 blocks),
// affinities, node addresses and /128 host routes, side by side with IPv4.
func TestPolicyDecideIPv6(t *testing.T) {
	a4, a6, b6 := "198.19.64.2", "2001:db8:19::2", "2001:db8:19::3"
	nA := Node{Name: "node-a", PeerAddress: netip.MustParseAddr(a4), PeerAddress6: netip.MustParseAddr(a6),
		Addresses: []netip.Addr{netip.MustParseAddr(a4), netip.MustParseAddr(a6)}}
	nB := Node{Name: "node-b", PeerAddress6: netip.MustParseAddr(b6),
		PodCIDRs: []netip.Prefix{netip.MustParsePrefix("2001:db8:18:f::/64")}}
	dual := append([]Pool{{Name: "v6", CIDR: netip.MustParsePrefix("2001:db8:18::/48"), BlockSize: 122}}, pools...)
	affs := append([]Affinity{
		{Block: netip.MustParsePrefix("2001:db8:18::/122"), Node: "node-a"},
		{Block: netip.MustParsePrefix("2001:db8:18::40/122"), Node: "node-b"},
	}, affinities...)
	owned := NewPolicy(dual, affs, []Node{nA, nB})
	open := NewPolicy(dual, nil, []Node{nA, nB})
	for _, tc := range []struct {
		name    string
		p       *Policy
		prefix  string
		nextHop string
		want    Reason
	}{
		{"own block via its IPv6 address", owned, "2001:db8:18::/122", a6, Accepted},
		{"other node's block", owned, "2001:db8:18::40/122", a6, RejectNotOwner},
		{"block via its owner", owned, "2001:db8:18::40/122", b6, Accepted},
		{"block without affinity", owned, "2001:db8:18::80/122", a6, RejectNoAffinity},
		{"shorter than a /122 block", owned, "2001:db8:18::/120", a6, RejectShorter},
		{"whole pool", owned, "2001:db8:18::/48", a6, RejectShorter},
		{"outside the IPv6 pool", owned, "2001:db8:99::/122", a6, RejectOutsidePools},
		{"default route", owned, "::/0", a6, RejectOutsidePools},
		{"borrowed /128 via a node", owned, "2001:db8:18::45/128", a6, Accepted},
		{"/128 via no node", owned, "2001:db8:18::45/128", "2001:db8:19::99", RejectHostNotNode},
		{"no ownership data: any block", open, "2001:db8:18::80/122", "2001:db8:19::99", Accepted},
		{"no ownership data: still not shorter", open, "2001:db8:18::/121", a6, RejectShorter},
		{"IPv6 podCIDR from its node", owned, "2001:db8:18:f::/64", b6, Accepted},
		{"IPv6 podCIDR from another node", owned, "2001:db8:18:f::/64", a6, RejectNotOwner},
		{"IPv4 still works beside it", owned, "198.18.64.0/26", a4, Accepted},
		{"IPv4 block is not inside an IPv6 pool", NewPolicy(dual[:1], affs, []Node{nA}), "198.18.64.0/26", a4, RejectOutsidePools},
	} {
		v := tc.p.Decide(netip.MustParsePrefix(tc.prefix), netip.MustParseAddr(tc.nextHop))
		if v.Reason != tc.want || v.Accept != (tc.want == Accepted) {
			t.Errorf("%s: Decide(%s via %s) = %+v, want %s", tc.name, tc.prefix, tc.nextHop, v, tc.want)
		}
	}
	// Borrowed addresses of either family prefer the node running the pod.
	hosted := owned.WithHosts(map[netip.Addr]string{netip.MustParseAddr("2001:db8:18::45"): "node-a"})
	if h := hosted.HostOf(netip.MustParseAddr("2001:db8:18::45")); h != "node-a" {
		t.Errorf("HostOf borrowed IPv6 address = %q", h)
	}

	// GoBGP's prefix sets hold one family each: every IPv6 prefix is in a
	// "-v6" set of its own statement, host routes and blocks with IPv6
	// lengths, next hops as /128s.
	req := hosted.gobgp()
	sets := map[string]*api.DefinedSet{}
	for _, d := range req.DefinedSets {
		sets[d.Name] = d
		v6 := 0
		for _, p := range d.Prefixes {
			if netip.MustParsePrefix(p.IpPrefix).Addr().Is6() {
				v6++
			}
		}
		if v6 != 0 && v6 != len(d.Prefixes) {
			t.Errorf("set %s mixes families:\n%s", d.Name, prototext.Format(d))
		}
	}
	stmts := map[string]*api.Statement{}
	for _, st := range req.Policies[0].Statements {
		stmts[st.Name] = st
	}
	for name, want := range map[string]string{
		"pod-hosts-v6": "2001:db8:18::/48 128-128",
		"node-0-v6":    "2001:db8:18::/122 122-127",
		"node-1-v6":    "2001:db8:18::40/122 122-127",
		"podcidr-0-v6": "2001:db8:18:f::/64 64-127",
		"hosted-0-v6":  "2001:db8:18::45/128 128-128",
		"node-0":       "198.18.64.0/26 26-31",
	} {
		st := stmts[name]
		if st == nil {
			t.Errorf("no statement %s:\n%s", name, prototext.Format(req))
			continue
		}
		set := sets[st.Conditions.PrefixSet.Name]
		p := set.GetPrefixes()[0]
		if got := fmt.Sprintf("%s %d-%d", p.IpPrefix, p.MaskLengthMin, p.MaskLengthMax); got != want {
			t.Errorf("statement %s: first prefix %s, want %s", name, got, want)
		}
	}
	if nh := stmts["node-0-v6"].GetConditions().GetNextHopInList(); len(nh) != 2 || nh[0] != a4+"/32" || nh[1] != a6+"/128" {
		t.Errorf("node-a's next hops: %v", nh)
	}
}
