package bgp

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	api "github.com/osrg/gobgp/v3/api"
)

// Pool is a pod CIDR split into blocks (a Calico IPPool, or one from the
// configuration).
type Pool struct {
	Name      string       `json:"name"`
	CIDR      netip.Prefix `json:"cidr"`
	BlockSize int          `json:"blockSize"`
	// Encapsulation is Calico's vxlanMode/ipipMode ("vxlan", "ipip" or
	// ""), kept for warnings and status.
	Encapsulation string `json:"encapsulation,omitempty"`
	// DisableBGPExport: Calico announces none of the pool's routes.
	DisableBGPExport bool `json:"disableBGPExport,omitempty"`
}

// Affinity says which node owns a block (a confirmed Calico BlockAffinity).
type Affinity struct {
	Block netip.Prefix `json:"block"`
	Node  string       `json:"node"`
}

// Node is a cluster node as BGP sees it.
type Node struct {
	Name string `json:"name"`
	// PeerAddress is Calico's BGP address (projectcalico.org/IPv4Address)
	// or the IPv4 InternalIP.
	PeerAddress netip.Addr `json:"peerAddress"`
	// PeerAddress6 is the address of the node's IPv6 BIRD (bird6):
	// projectcalico.org/IPv6Address or the IPv6 InternalIP; invalid when
	// the node has none.
	PeerAddress6 netip.Addr `json:"peerAddress6,omitzero"`
	// Addresses are all the node's addresses, of both families; a block's
	// next hop must be one of its owner's.
	Addresses []netip.Addr `json:"addresses"`
	// AS from projectcalico.org/ASNumber; 0 means the cluster AS.
	AS     uint32            `json:"as,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
	// PodCIDRs are the node's spec.podCIDRs (both families). With host-local IPAM
	// Calico announces each as the node's one block, and no
	// BlockAffinity exists.
	PodCIDRs []netip.Prefix `json:"podCIDRs,omitempty"`
}

// Reason explains a policy verdict.
type Reason string

// Verdicts of the import policy.
const (
	Accepted           Reason = "accepted"
	RejectOutsidePools Reason = "outside-pod-cidrs"
	RejectShorter      Reason = "shorter-than-block"
	RejectNoAffinity   Reason = "no-block-affinity"
	RejectNotOwner     Reason = "next-hop-not-owner"
	RejectHostNotNode  Reason = "host-route-next-hop-not-a-node"
)

// Verdict is the import decision for one path.
type Verdict struct {
	Accept bool
	Reason Reason
	// Owner is the node that owns the block, when known.
	Owner string
}

// Policy is the import policy: which (prefix, next hop) pairs become routes.
//
//   - Only prefixes inside a pool, from the pool's block size up to a host
//     route (/32, /128). IPv4 and IPv6 follow the same rules, each with
//     its own pools, blocks and node addresses: an IPv6 block's next hop
//     must be an IPv6 address of its owner.
//   - Host routes (/32s, /128s) inside a pool need a next hop that is a node's address (any
//     node's: Calico announces a borrowed address, an IP from another
//     node's block, as a /32 from the node running the pod, so by design
//     it does not come from the block's owner). A /32 beats its block, so
//     without this any peer could pull one pod's traffic anywhere. While
//     no node address is known (static peers, no Node objects) they are
//     accepted like blocks.
//   - When block affinities are known, a block (or anything longer than
//     the block size but shorter than /32) is accepted only when its next
//     hop is an address of the node owning the block. Checking the next
//     hop rather than the session makes this hold with route reflectors
//     too, and it is what matters: traffic for the block goes to its owner.
//     A block without a confirmed affinity is rejected.
//   - When affinities are unknown (no Calico CRDs), any block inside a pool
//     is accepted.
//   - A prefix inside a Node's spec.podCIDRs (host-local IPAM: Calico
//     announces the podCIDR itself, whatever the pool's block size) is
//     owned by that Node, inside a pool or not: the controller manager
//     assigned it, which is as authoritative as a BlockAffinity.
//   - Paths from trusted peers (trust-next-hop: a top-of-rack switch that
//     is the next hop of everything it announces) need only be inside a
//     pool and at least a block long.
//
// The same rules are compiled into a GoBGP global import policy (default
// reject), so that best-path selection only ever sees acceptable paths; Decide
// is used on received paths for counting and logging rejections, and as a
// second check before a path reaches the kernel.
type Policy struct {
	pools []Pool
	// owners is nil when affinities are unknown.
	owners    []Affinity
	nodeAddrs map[string][]netip.Addr
	// podCIDRs are the Nodes' spec.podCIDRs, as affinities.
	podCIDRs []Affinity
	// trusted are the peers whose next hops are not checked.
	trusted []netip.Prefix
	// hosted are borrowed pod addresses by the node running the pod: its
	// path is preferred over other nodes' re-announcements.
	hosted map[string][]netip.Addr
}

// NewPolicy builds the policy. affinities nil means "unknown" (no ownership
// check); an empty non-nil slice means "known, and no block is owned".
func NewPolicy(pools []Pool, affinities []Affinity, nodes []Node) *Policy {
	p := &Policy{nodeAddrs: map[string][]netip.Addr{}}
	seen := map[Pool]bool{}
	for _, pl := range pools {
		if !pl.CIDR.IsValid() || pl.CIDR.Addr().Is4In6() || pl.BlockSize < pl.CIDR.Bits() || pl.BlockSize > pl.CIDR.Addr().BitLen() {
			continue
		}
		pl.CIDR = pl.CIDR.Masked()
		k := Pool{CIDR: pl.CIDR, BlockSize: pl.BlockSize}
		if seen[k] {
			continue
		}
		seen[k] = true
		p.pools = append(p.pools, pl)
	}
	slices.SortFunc(p.pools, func(a, b Pool) int {
		return cmp.Or(comparePrefix(a.CIDR, b.CIDR), cmp.Compare(a.BlockSize, b.BlockSize))
	})
	if affinities != nil {
		p.owners = make([]Affinity, 0, len(affinities))
		for _, a := range affinities {
			if a.Block.IsValid() && !a.Block.Addr().Is4In6() && a.Node != "" {
				a.Block = a.Block.Masked()
				p.owners = append(p.owners, a)
			}
		}
		slices.SortFunc(p.owners, func(a, b Affinity) int {
			return cmp.Or(comparePrefix(a.Block, b.Block), cmp.Compare(a.Node, b.Node))
		})
		p.owners = slices.Compact(p.owners)
	}
	for _, n := range nodes {
		var addrs []netip.Addr
		for _, a := range append([]netip.Addr{n.PeerAddress, n.PeerAddress6}, n.Addresses...) {
			if a.IsValid() && !a.IsUnspecified() && !slices.Contains(addrs, a) {
				addrs = append(addrs, a)
			}
		}
		if len(addrs) > 0 {
			slices.SortFunc(addrs, netip.Addr.Compare)
			p.nodeAddrs[n.Name] = addrs
		}
		for _, c := range n.PodCIDRs {
			if c.IsValid() && c.Bits() < c.Addr().BitLen() {
				p.podCIDRs = append(p.podCIDRs, Affinity{Block: c.Masked(), Node: n.Name})
			}
		}
	}
	slices.SortFunc(p.podCIDRs, func(a, b Affinity) int {
		return cmp.Or(comparePrefix(a.Block, b.Block), cmp.Compare(a.Node, b.Node))
	})
	p.podCIDRs = slices.Compact(p.podCIDRs)
	return p
}

// WithTrusted returns the policy with these peers' next hops trusted.
func (p *Policy) WithTrusted(peers []netip.Prefix) *Policy {
	q := *p
	q.trusted = nil
	for _, t := range peers {
		if t.IsValid() {
			q.trusted = append(q.trusted, t.Masked())
		}
	}
	slices.SortFunc(q.trusted, comparePrefix)
	q.trusted = slices.Compact(q.trusted)
	return &q
}

// WithHosts returns the policy preferring, for each borrowed pod address
// (inside a pool, not inside a block of the node running the pod), the path
// from the node running the pod: over eBGP every node announces it, each
// with itself as next hop, and any of them would do, at the cost of an extra
// hop.
func (p *Policy) WithHosts(hosts map[netip.Addr]string) *Policy {
	q := *p
	q.hosted = map[string][]netip.Addr{}
	for ip, node := range hosts {
		if _, ok := p.nodeAddrs[node]; !ok || !ip.IsValid() || !p.inPool(ip) {
			continue
		}
		if p.ownerOf(netip.PrefixFrom(ip, ip.BitLen())) == node {
			continue // inside its node's own block: announced as the block
		}
		q.hosted[node] = append(q.hosted[node], ip)
	}
	for _, ips := range q.hosted {
		slices.SortFunc(ips, netip.Addr.Compare)
	}
	return &q
}

// HostOf is the node running the borrowed pod address ip, if known.
func (p *Policy) HostOf(ip netip.Addr) string {
	for n, ips := range p.hosted {
		if _, ok := slices.BinarySearchFunc(ips, ip, netip.Addr.Compare); ok {
			return n
		}
	}
	return ""
}

func (p *Policy) inPool(ip netip.Addr) bool {
	for _, pl := range p.pools {
		if pl.CIDR.Contains(ip) {
			return true
		}
	}
	return false
}

// Trusted reports whether peer's next hops are trusted.
func (p *Policy) Trusted(peer netip.Addr) bool {
	for _, t := range p.trusted {
		if t.Contains(peer.Unmap()) {
			return true
		}
	}
	return false
}

// podCIDROwner is the Node whose spec.podCIDRs hold prefix (and how long
// that podCIDR is), if any.
func (p *Policy) podCIDROwner(prefix netip.Prefix) (Affinity, bool) {
	for _, a := range p.podCIDRs {
		if prefix.Bits() >= a.Block.Bits() && prefix.Bits() < prefix.Addr().BitLen() && a.Block.Contains(prefix.Addr()) {
			return a, true
		}
	}
	return Affinity{}, false
}

// OwnershipKnown reports whether blocks are checked against affinities.
func (p *Policy) OwnershipKnown() bool { return p.owners != nil }

// Pools returns the pools the policy accepts prefixes from.
func (p *Policy) Pools() []Pool { return slices.Clone(p.pools) }

// Decide is the import decision for prefix announced with nextHop by an
// untrusted peer.
func (p *Policy) Decide(prefix netip.Prefix, nextHop netip.Addr) Verdict {
	return p.DecideFrom(netip.Addr{}, prefix, nextHop)
}

// DecideFrom is the import decision for prefix announced with nextHop by
// peer.
func (p *Policy) DecideFrom(peer netip.Addr, prefix netip.Prefix, nextHop netip.Addr) Verdict {
	prefix = netip.PrefixFrom(prefix.Addr().Unmap(), prefix.Bits()-unmapBits(prefix)).Masked()
	host := prefix.Bits() == prefix.Addr().BitLen()
	trusted := peer.IsValid() && p.Trusted(peer)
	if a, ok := p.podCIDROwner(prefix); ok {
		if trusted || slices.Contains(p.nodeAddrs[a.Node], nextHop.Unmap()) {
			return Verdict{Accept: true, Reason: Accepted, Owner: a.Node}
		}
		return Verdict{Reason: RejectNotOwner, Owner: a.Node}
	}
	// Like GoBGP's prefix sets, only the most specific pool containing the
	// prefix counts (Calico does not allow overlapping pools anyway).
	inPool, longEnough, best := false, false, -1
	for _, pl := range p.pools {
		if prefix.Bits() >= pl.CIDR.Bits() && pl.CIDR.Contains(prefix.Addr()) && pl.CIDR.Bits() >= best {
			if pl.CIDR.Bits() > best {
				longEnough = false
			}
			best, inPool = pl.CIDR.Bits(), true
			longEnough = longEnough || prefix.Bits() >= pl.BlockSize
		}
	}
	switch {
	case !inPool:
		return Verdict{Reason: RejectOutsidePools}
	case !longEnough:
		return Verdict{Reason: RejectShorter}
	case trusted:
		return Verdict{Accept: true, Reason: Accepted, Owner: p.ownerOf(prefix)}
	case host && len(p.nodeAddrs) > 0 && !p.isNodeAddr(nextHop):
		return Verdict{Reason: RejectHostNotNode, Owner: p.ownerOf(prefix)}
	case host || p.owners == nil:
		return Verdict{Accept: true, Reason: Accepted, Owner: p.ownerOf(prefix)}
	}
	owner := ""
	for _, a := range p.owners {
		if prefix.Bits() >= a.Block.Bits() && a.Block.Contains(prefix.Addr()) {
			owner = a.Node
			if slices.Contains(p.nodeAddrs[a.Node], nextHop.Unmap()) {
				return Verdict{Accept: true, Reason: Accepted, Owner: a.Node}
			}
		}
	}
	if owner == "" {
		return Verdict{Reason: RejectNoAffinity}
	}
	return Verdict{Reason: RejectNotOwner, Owner: owner}
}

// unmapBits is how much shorter prefix is once an IPv4-mapped IPv6
// address is unmapped.
func unmapBits(prefix netip.Prefix) int {
	if prefix.Addr().Is4In6() {
		return 96
	}
	return 0
}

func (p *Policy) isNodeAddr(a netip.Addr) bool {
	a = a.Unmap()
	for _, addrs := range p.nodeAddrs {
		if slices.Contains(addrs, a) {
			return true
		}
	}
	return false
}

// nodeNextHops are every node address as a GoBGP next-hop list.
func (p *Policy) nodeNextHops() []string {
	var out []string
	for n := range p.nodeAddrs {
		out = append(out, p.nextHopsOf(n)...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func (p *Policy) ownerOf(prefix netip.Prefix) string {
	for _, a := range append(slices.Clip(p.owners), p.podCIDRs...) {
		if prefix.Bits() >= a.Block.Bits() && a.Block.Contains(prefix.Addr()) {
			return a.Node
		}
	}
	return ""
}

// importPolicyName is the one GoBGP policy the speaker maintains.
const importPolicyName = "perimeter-import"

// gobgp compiles the policy into GoBGP defined sets and statements. The
// statements are alternatives (any match accepts); the global import
// assignment's default action rejects the rest.
func (p *Policy) gobgp() *api.SetPoliciesRequest {
	b := &policyBuilder{req: &api.SetPoliciesRequest{}}
	accept := &api.Actions{RouteAction: api.RouteAction_ACCEPT}
	if len(p.trusted) > 0 {
		var prefixes []*api.Prefix
		for _, pl := range p.pools {
			prefixes = append(prefixes, rangeOf(pl.CIDR, pl.BlockSize, pl.CIDR.Addr().BitLen()))
		}
		for _, a := range p.podCIDRs {
			prefixes = append(prefixes, rangeOf(a.Block, a.Block.Bits(), a.Block.Addr().BitLen()-1))
		}
		if len(prefixes) > 0 {
			var peers []string
			for _, t := range p.trusted {
				peers = append(peers, t.String())
			}
			b.req.DefinedSets = append(b.req.DefinedSets, &api.DefinedSet{
				DefinedType: api.DefinedType_NEIGHBOR, Name: "trusted-peers", List: peers})
			b.statements("trusted-prefixes", "trusted", prefixes, nil, accept, "trusted-peers")
		}
	}
	p.podCIDRStatements(b, accept)
	if len(p.pools) > 0 {
		var hosts, blocks []*api.Prefix
		for i, pl := range p.pools {
			bits := pl.CIDR.Addr().BitLen()
			if i == 0 || p.pools[i-1].CIDR != pl.CIDR {
				hosts = append(hosts, rangeOf(pl.CIDR, bits, bits))
			}
			blocks = append(blocks, rangeOf(pl.CIDR, pl.BlockSize, bits))
		}
		p.hostedStatements(b)
		b.statements("pod-hosts", "pod-hosts", hosts, p.nodeNextHops(), accept, "")
		if p.owners == nil {
			b.statements("pod-blocks", "pod-blocks", blocks, nil, accept, "")
		} else {
			p.ownerStatements(b, accept)
		}
	}
	b.req.Policies = []*api.Policy{{Name: importPolicyName, Statements: b.stmts}}
	return b.req
}

// policyBuilder collects GoBGP defined sets and statements.
type policyBuilder struct {
	req   *api.SetPoliciesRequest
	stmts []*api.Statement
}

// statements adds a statement accepting prefixes (with a next hop in
// nextHops, from a neighbour in neighborSet, when given). GoBGP's prefix
// sets hold one address family each, so IPv6 prefixes get a set and a
// statement of their own, named with "-v6".
func (b *policyBuilder) statements(setName, stmtName string, prefixes []*api.Prefix, nextHops []string,
	actions *api.Actions, neighborSet string) {
	var v4, v6 []*api.Prefix
	for _, x := range prefixes {
		if strings.Contains(x.IpPrefix, ":") {
			v6 = append(v6, x)
		} else {
			v4 = append(v4, x)
		}
	}
	for _, f := range []struct {
		suffix   string
		prefixes []*api.Prefix
	}{{"", v4}, {"-v6", v6}} {
		if len(f.prefixes) == 0 {
			continue
		}
		set := setName + f.suffix
		b.req.DefinedSets = append(b.req.DefinedSets, &api.DefinedSet{
			DefinedType: api.DefinedType_PREFIX, Name: set, Prefixes: f.prefixes})
		c := &api.Conditions{PrefixSet: &api.MatchSet{Type: api.MatchSet_ANY, Name: set}, NextHopInList: nextHops}
		if neighborSet != "" {
			c.NeighborSet = &api.MatchSet{Type: api.MatchSet_ANY, Name: neighborSet}
		}
		b.stmts = append(b.stmts, &api.Statement{Name: stmtName + f.suffix, Actions: actions, Conditions: c})
	}
}

// rangeOf is a GoBGP prefix-set entry: prefixes inside p from /min to /max.
func rangeOf(p netip.Prefix, min, max int) *api.Prefix {
	return &api.Prefix{IpPrefix: p.String(), MaskLengthMin: uint32(min), MaskLengthMax: uint32(max)}
}

// preferredLocalPref is the LOCAL_PREF given to the path of a borrowed pod
// address from the node running the pod (others get the default, 100).
const preferredLocalPref = 200

// hostedStatements make one statement per node running pods on borrowed
// addresses: those host routes via the node are accepted with a higher
// LOCAL_PREF, ahead of the general pod-hosts statement.
func (p *Policy) hostedStatements(b *policyBuilder) {
	var nodes []string
	for n := range p.hosted {
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)
	for i, n := range nodes {
		var set []*api.Prefix
		for _, ip := range p.hosted[n] {
			set = append(set, rangeOf(netip.PrefixFrom(ip, ip.BitLen()), ip.BitLen(), ip.BitLen()))
		}
		b.statements(fmt.Sprintf("node-%d-pods", i), fmt.Sprintf("hosted-%d", i), set, p.nextHopsOf(n),
			&api.Actions{RouteAction: api.RouteAction_ACCEPT, LocalPref: &api.LocalPrefAction{Value: preferredLocalPref}}, "")
	}
}

// podCIDRStatements makes one statement per Node with spec.podCIDRs: those
// (from their own length to one bit short of a host route) with a next hop
// among its addresses.
func (p *Policy) podCIDRStatements(b *policyBuilder, accept *api.Actions) {
	byNode := map[string][]*api.Prefix{}
	var nodes []string
	for _, a := range p.podCIDRs {
		if _, ok := p.nodeAddrs[a.Node]; !ok {
			continue
		}
		if _, ok := byNode[a.Node]; !ok {
			nodes = append(nodes, a.Node)
		}
		byNode[a.Node] = append(byNode[a.Node], rangeOf(a.Block, a.Block.Bits(), a.Block.Addr().BitLen()-1))
	}
	p.nodeStatements(b, byNode, nodes, "node-%d-podcidrs", "podcidr-%d", accept)
}

func (p *Policy) nextHopsOf(node string) []string {
	var nh []string
	for _, a := range p.nodeAddrs[node] {
		nh = append(nh, netip.PrefixFrom(a, a.BitLen()).String())
	}
	return nh
}

// ownerStatements makes one statement per owning node: its blocks (from the
// block length to one bit short of a host route, restricted to the pools)
// with a next hop among its addresses.
func (p *Policy) ownerStatements(b *policyBuilder, accept *api.Actions) {
	byNode := map[string][]*api.Prefix{}
	var nodes []string
	for _, a := range p.owners {
		bits := a.Block.Addr().BitLen()
		if _, ok := p.nodeAddrs[a.Node]; !ok || a.Block.Bits() == bits {
			continue
		}
		// Only the part of a block inside a pool and at least as long as
		// the pool's block size is acceptable, as in Decide.
		minLen := -1
		for _, pl := range p.pools {
			if a.Block.Bits() >= pl.CIDR.Bits() && pl.CIDR.Contains(a.Block.Addr()) {
				if minLen == -1 || pl.BlockSize < minLen {
					minLen = pl.BlockSize
				}
			}
		}
		if minLen == -1 || minLen > bits-1 {
			continue
		}
		if _, ok := byNode[a.Node]; !ok {
			nodes = append(nodes, a.Node)
		}
		byNode[a.Node] = append(byNode[a.Node], rangeOf(a.Block, max(minLen, a.Block.Bits()), bits-1))
	}
	p.nodeStatements(b, byNode, nodes, "node-%d-blocks", "node-%d", accept)
}

// nodeStatements makes one statement per node (in name order): the node's
// prefixes, with a next hop among its addresses.
func (p *Policy) nodeStatements(b *policyBuilder, byNode map[string][]*api.Prefix, nodes []string, setName, stmtName string,
	accept *api.Actions) {
	slices.Sort(nodes)
	for i, n := range nodes {
		b.statements(fmt.Sprintf(setName, i), fmt.Sprintf(stmtName, i), byNode[n], p.nextHopsOf(n), accept, "")
	}
}

func comparePrefix(a, b netip.Prefix) int {
	return cmp.Or(a.Addr().Compare(b.Addr()), cmp.Compare(a.Bits(), b.Bits()))
}
