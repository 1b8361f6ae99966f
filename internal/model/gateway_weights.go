package model

import (
	"fmt"

	networkingv1 "k8s.io/api/networking/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// A rule with three or more weighted backendRefs: the first backend is the
// rule's plain route; each other one gets a backend of its own as a
// conditional route of the same host and path whose condition is a draw
// of rand(100). The frontend tries them in order, each with a fresh draw,
// so backend k is taken with its share of what the ones before it left:
// weight k / (the weights of k and of the backends after it, the first
// included). Shares are rounded to a percent; a new weight is a new
// condition, so it reloads (two backends use the canary maps instead, a
// map change).

// maxWeightedRefs bounds the backendRefs of one rule: each one past the
// first is a frontend rule.
const maxWeightedRefs = 8

// weightedRoute routes one host and path of a rule with more than two
// weighted backends.
func (b *builder) weightedRoute(r *gwv1.HTTPRoute, i int, key routeKey, refs []routeRef) {
	ref := httpRouteRef(r)
	first := b.ruleBackend(r, i, -1, refs[:1], nil)
	b.routes = append(b.routes, Route{Ingress: ref, Host: key.host, Path: key.path, PathType: key.typ, Backend: first.name})
	left := 0
	for _, x := range refs {
		left += int(x.weight)
	}
	// The later backends are tried first, in order; the first one takes
	// what they leave.
	for k := 1; k < len(refs); k++ {
		x := refs[k]
		below := (int(x.weight)*100 + left/2) / left
		left -= int(x.weight)
		if below == 0 {
			continue
		}
		id := variantID{base: x.base, key: fmt.Sprintf("\x00%s#%d#weight%d", ref, i, k)}
		st := b.variants[id]
		if st == nil {
			st = &backendState{name: b.variantName(id), base: x.base, namespace: x.ns, service: x.svc,
				port: networkingv1.ServiceBackendPort{Number: x.port}, h2c: routeKindOf(r) == grpcRouteKind}
			b.backends[st.name] = st
			b.variants[id] = st
			st.routes = append(st.routes, ref)
		}
		m := &RequestMatch{RandomBelow: below}
		if b.gwMatches == nil {
			b.gwCondClaims, b.gwMatches = map[string]ObjectRef{}, map[string]*RequestMatch{}
		}
		b.gwMatches[st.name] = m
		b.condRouteFor(ref, key.host, key.path, key.typ, m, st.name)
	}
}
