package model

import (
	"slices"
	"strings"
)

// Gateway API wildcard hostnames. A Listener or route hostname
// "*.example.com" matches one or more leading labels ("a.example.com",
// "a.b.example.com"); an Ingress host "*.example.com" matches exactly one.
// Both are stored under the host key "*.example.com", which the frontend
// tries with the first label of the request's host replaced: that serves
// the one-label case of both. For more labels, MapGatewayWildcard names the
// Gateway API wildcard hosts by their suffix, and the frontend tries, for
// each label count of those suffixes (longest first, so the most specific
// wildcard wins), the request host's last labels in that map: a fixed
// number of tree lookups per request, never a scan over the hosts. A new
// wildcard whose suffix has a label count some other one already has is a
// map change; a new label count adds lookup rules to the frontends (a
// reload).

// ReasonWildcardShared: a Gateway API route's wildcard host is also an
// Ingress's; it keeps the Ingress meaning (exactly one label).
const ReasonWildcardShared = "WildcardShared"

// gatewayWildcards fills MapGatewayWildcard from the served routes and
// passed-through hosts. A
// wildcard host an Ingress routes too is left out, with a problem on the
// Gateway API routes using it: the map is per host, and an Ingress's
// wildcard must keep matching a single label.
func (b *builder) gatewayWildcards() {
	ingress := map[string]bool{}
	users := map[string][]ObjectRef{}
	for _, rs := range [][]Route{b.routes, b.d.CondRoutes} {
		for _, r := range rs {
			// A route of a Gateway bind of its own has the bind's scope
			// after the host (gateway_ports.go); the frontend's tiers add
			// it back from the path, so the map names the bare host.
			host, _ := splitScope(r.Host)
			if !strings.HasPrefix(host, "*.") {
				continue
			}
			switch r.Ingress.Kind {
			case "HTTPRoute", grpcRouteKind:
				if !slices.Contains(users[host], r.Ingress) {
					users[host] = append(users[host], r.Ingress)
				}
			default:
				ingress[host] = true
			}
		}
	}
	// TLSRoute hostnames are passed through by SNI, with the same lookup.
	for key, c := range b.passthroughHosts {
		// As for routes, the map names the bare host; the ssl frontend
		// adds the scope after the lookup.
		h, _ := splitScope(key)
		switch {
		case !strings.HasPrefix(h, "*."):
		case c.ing != nil:
			ingress[h] = true
		case !slices.Contains(users[h], c.route):
			users[h] = append(users[h], c.route)
		}
	}
	if len(users) == 0 {
		return
	}
	m := make(map[string]string, len(users))
	for h, refs := range users {
		if ingress[h] {
			for _, ref := range refs {
				b.problem(ref, ReasonWildcardShared, "host %q is also an Ingress's: it matches a single label in place of \"*\", as there", h)
			}
			continue
		}
		m[h[2:]] = h
	}
	if len(m) > 0 {
		b.d.Maps[MapGatewayWildcard] = m
	}
}

// WildcardDepths are the label counts of the keys of a MapGatewayWildcard,
// largest first: the order in which the frontend tries them.
func WildcardDepths(m map[string]string) []int {
	var out []int
	for k := range m {
		if n := strings.Count(k, ".") + 1; !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	slices.Reverse(out)
	return out
}

// lastLabels is the last n labels of h, or h when it has no more (HAProxy's
// field(-1,.,n)).
func lastLabels(h string, n int) string {
	i := len(h)
	for ; n > 0; n-- {
		i = strings.LastIndexByte(h[:i], '.')
		if i < 0 {
			return h
		}
	}
	return h[i+1:]
}
