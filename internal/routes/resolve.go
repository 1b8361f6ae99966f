package routes

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// resolved is where a BGP next hop is reached: an on-link gateway and link.
type resolved struct {
	gw        netip.Addr
	link      int
	recursive bool
	err       error
}

// resolve finds how the kernel reaches nextHop. The kernel refuses a gateway
// that is not on-link ("Nexthop has invalid gateway"), so a next hop behind a
// router (a peer or route reflector in another subnet) is replaced by the
// gateway of the kernel's own route to it. A next hop reachable only through
// one of our own routes is refused: that would make pod routes depend on pod
// routes. Called with mu held; results are cached until the next full pass.
func (m *Manager) resolve(nextHop netip.Addr) (resolved, error) {
	if r, ok := m.nextHops[nextHop]; ok {
		return r, r.err
	}
	r := m.lookup(nextHop)
	m.nextHops[nextHop] = r
	return r, r.err
}

func (m *Manager) lookup(nextHop netip.Addr) resolved {
	if !nextHop.IsValid() || nextHop.Is4In6() || nextHop.IsUnspecified() || nextHop.IsMulticast() {
		return resolved{err: fmt.Errorf("next hop %v is not a usable unicast address", nextHop)}
	}
	if nextHop.IsLinkLocalUnicast() && nextHop.Is6() {
		// Which link it is on is not in the address; nodes announce their
		// global address as next hop.
		return resolved{err: fmt.Errorf("next hop %v is link-local: a global address is needed", nextHop)}
	}
	// FIBMatch returns the table entry that matched (with its protocol and
	// type) rather than a route cloned for this one address.
	rs, err := m.nl.RouteGetWithOptions(net.IP(nextHop.AsSlice()), &netlink.RouteGetOptions{FIBMatch: true})
	if err != nil {
		return resolved{err: fmt.Errorf("no route to next hop %s: %w", nextHop, err)}
	}
	if len(rs) == 0 {
		return resolved{err: fmt.Errorf("no route to next hop %s", nextHop)}
	}
	r := rs[0]
	if r.Dst == nil || r.Dst.IP.IsUnspecified() {
		// A next hop only the default route covers is no node of ours:
		// following it would send pod traffic out through the uplink.
		return resolved{err: fmt.Errorf("next hop %s is reached only through the default route", nextHop)}
	}
	if int(r.Protocol) == m.cfg.Protocol {
		return resolved{err: fmt.Errorf("next hop %s is reached only through a BGP-learned route (%v)", nextHop, r.Dst)}
	}
	switch r.Type {
	case unix.RTN_UNICAST:
	case unix.RTN_LOCAL:
		return resolved{err: fmt.Errorf("next hop %s is one of this host's own addresses", nextHop)}
	default:
		return resolved{err: fmt.Errorf("next hop %s is behind a route of type %d (unreachable, blackhole or prohibit)", nextHop, r.Type)}
	}
	gw, link := r.Gw, r.LinkIndex
	if gw == nil && len(r.MultiPath) > 0 {
		gw, link = r.MultiPath[0].Gw, r.MultiPath[0].LinkIndex
	}
	if link == 0 {
		return resolved{err: fmt.Errorf("route to next hop %s has no output link", nextHop)}
	}
	if gw == nil || gw.IsUnspecified() {
		return resolved{gw: nextHop, link: link}
	}
	g, ok := netip.AddrFromSlice(gw)
	if !ok {
		return resolved{err: errors.New("kernel returned a malformed gateway")}
	}
	return resolved{gw: g.Unmap(), link: link, recursive: true}
}

// Reaches reports whether the kernel has a usable route to ip: a specific
// one (not only the default route, which would send pod traffic out through
// the uplink), neither unreachable, blackhole nor prohibit.
func (m *Manager) Reaches(ip netip.Addr) bool {
	rs, err := m.nl.RouteGetWithOptions(net.IP(ip.AsSlice()), &netlink.RouteGetOptions{FIBMatch: true})
	if err != nil || len(rs) == 0 {
		return false
	}
	r := rs[0]
	if r.Dst == nil || r.Dst.IP.IsUnspecified() {
		return false
	}
	return r.Type == unix.RTN_UNICAST || r.Type == unix.RTN_LOCAL
}
