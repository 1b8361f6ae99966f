package bgp

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	api "github.com/osrg/gobgp/v3/api"
)

// ReasonNoRouteToEndpoint is the Event reason on a Service whose IPv6
// endpoints no route reaches.
const ReasonNoRouteToEndpoint = "NoRouteToEndpoint"

// reacher is the optional part of Routes that asks the kernel whether an
// address has a usable route (*routes.Manager implements it).
type reacher interface{ Reaches(netip.Addr) bool }

// checkIPv6Endpoints reports, once per Service until it is resolved, IPv6
// endpoints that neither a BGP-learned route nor another kernel route
// reaches: HAProxy would send them requests that fail. The usual cause is a
// dual-stack cluster peered over IPv4 only (no bird6 session). Runs only
// after the startup sweep, when the routes BGP will learn are in place.
func (s *Speaker) checkIPv6Endpoints() {
	s.mu.Lock()
	if !s.swept || s.stopping {
		s.mu.Unlock()
		return
	}
	eps := s.state.Endpoints6
	var best []netip.Prefix
	for p := range s.best {
		if p.Addr().Is6() {
			best = append(best, p)
		}
	}
	sessions6 := 0
	for a, ss := range s.sessions {
		if a.Is6() && ss.state == api.PeerState_ESTABLISHED {
			sessions6++
		}
	}
	s.mu.Unlock()

	rc, _ := s.routes.(reacher)
	now := map[ServiceRef]string{}
	for ref, ips := range eps {
		if s.cfg.ServiceServed != nil && !s.cfg.ServiceServed(ref) {
			continue
		}
		var missing []string
		for _, ip := range ips {
			if slices.ContainsFunc(best, func(p netip.Prefix) bool { return p.Contains(ip) }) || (rc != nil && rc.Reaches(ip)) {
				continue
			}
			missing = append(missing, ip.String())
		}
		if len(missing) == 0 {
			continue
		}
		why := "no IPv6 block covering them is announced and accepted (see `perimeter bgp status`)"
		if sessions6 == 0 {
			why = "BGP has no IPv6 session: peer with the nodes' bird6 over IPv6 (Nodes' projectcalico.org/IPv6Address, an IPv6 BGPPeer)"
		}
		shown := missing
		if len(shown) > 3 {
			shown = append(slices.Clone(shown[:3]), fmt.Sprintf("and %d more", len(missing)-3))
		}
		now[ref] = fmt.Sprintf("IPv6 endpoints %s have no route from this host, so requests to them fail: %s",
			strings.Join(shown, ", "), why)
	}

	s.mu.Lock()
	prev := s.unreachable
	s.unreachable = now
	s.mu.Unlock()
	for ref, msg := range now {
		if prev[ref] == msg {
			continue
		}
		s.log.Warn("IPv6 endpoints unreachable", "namespace", ref.Namespace, "service", ref.Name, "problem", msg)
		if s.cfg.ServiceEvent != nil {
			s.cfg.ServiceEvent(ref, ReasonNoRouteToEndpoint, msg)
		}
	}
	for ref := range prev {
		if _, still := now[ref]; !still {
			s.log.Info("IPv6 endpoints reachable again", "namespace", ref.Namespace, "service", ref.Name)
		}
	}
}
