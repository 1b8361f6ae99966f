package model

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// TLSRoutes and TCPRoutes. A TLSRoute attached to a TLS listener passes the
// connections whose SNI is one of its hostnames through to its Service, by
// the same map and mode tcp backends as the ssl-passthrough annotation: a
// new hostname is a map entry, with no reload. A TCPRoute attached to a
// TCP listener is that listener port's backend, served by a mode tcp
// frontend of the port like a --configmap-tcp-services entry; several
// weighted backendRefs split the port's connections by weight in that
// frontend, so a weight change is a reload.
//
// Ingresses win, as for HTTPRoutes: a host an Ingress passes through and a
// port the tcp-services ConfigMap serves stay theirs. Among routes the
// oldest (creation time, then namespace/name) wins a host or a port.

// l4Route is what TLSRoutes and TCPRoutes have in common.
type l4Route struct {
	kind      gwv1.Kind
	meta      *metav1.ObjectMeta
	parents   []gwv1.ParentReference
	hostnames []gwv1.Hostname
	rules     [][]gwv1.BackendRef
}

func (r l4Route) ref() ObjectRef {
	return ObjectRef{Kind: string(r.kind), Namespace: r.meta.Namespace, Name: r.meta.Name}
}

// gwTCPPort is a TCP listener port's backends: refs with their weights,
// where a ref with no base does not resolve and its share is refused.
type gwTCPPort struct {
	route ObjectRef
	refs  []routeRef
}

func olderMeta(x, y *metav1.ObjectMeta) int {
	if c := x.CreationTimestamp.Time.Compare(y.CreationTimestamp.Time); c != 0 {
		return c
	}
	return cmp.Or(cmp.Compare(x.Namespace, y.Namespace), cmp.Compare(x.Name, y.Name))
}

// gatewayL4Routes attaches the TLSRoutes and TCPRoutes, oldest first.
func (b *builder) gatewayL4Routes(listeners map[nsName][]*listenerState, controller string) {
	var routes []l4Route
	for _, r := range b.s.TLSRoutes {
		if r == nil || !namespaceAllowed(r.Namespace, b.o) {
			continue
		}
		l := l4Route{kind: "TLSRoute", meta: &r.ObjectMeta, parents: r.Spec.ParentRefs, hostnames: r.Spec.Hostnames}
		for _, rule := range r.Spec.Rules {
			l.rules = append(l.rules, rule.BackendRefs)
		}
		routes = append(routes, l)
	}
	for _, r := range b.s.TCPRoutes {
		if r == nil || !namespaceAllowed(r.Namespace, b.o) {
			continue
		}
		l := l4Route{kind: "TCPRoute", meta: &r.ObjectMeta, parents: r.Spec.ParentRefs}
		for _, rule := range r.Spec.Rules {
			l.rules = append(l.rules, rule.BackendRefs)
		}
		routes = append(routes, l)
	}
	slices.SortFunc(routes, func(x, y l4Route) int { return olderMeta(x.meta, y.meta) })
	st := &b.d.GatewayAPI
	for _, r := range routes {
		rs, ok := b.l4Route(r, listeners, controller)
		if !ok {
			continue
		}
		if r.kind == "TLSRoute" {
			st.TLSRoutes = append(st.TLSRoutes, rs)
		} else {
			st.TCPRoutes = append(st.TCPRoutes, rs)
		}
	}
	byName := func(x, y RouteStatus) int {
		return cmp.Or(cmp.Compare(x.Namespace, y.Namespace), cmp.Compare(x.Name, y.Name))
	}
	slices.SortFunc(st.TLSRoutes, byName)
	slices.SortFunc(st.TCPRoutes, byName)
}

// l4Route attaches r to the listeners its parentRefs name and serves it;
// ok is false when it names no Gateway of ours.
func (b *builder) l4Route(r l4Route, listeners map[nsName][]*listenerState, controller string) (RouteStatus, bool) {
	gen := r.meta.Generation
	var routeHosts []string
	for _, h := range r.hostnames {
		routeHosts = append(routeHosts, strings.ToLower(string(h)))
	}
	if len(routeHosts) == 0 {
		routeHosts = []string{""}
	}
	var parents []gwv1.RouteParentStatus
	var matched []*listenerState
	var hosts []string
	for _, pr := range r.parents {
		ls, ours := parentListeners(pr, r.meta.Namespace, listeners)
		if !ours {
			continue
		}
		ps := gwv1.RouteParentStatus{ParentRef: pr, ControllerName: gwv1.GatewayController(controller)}
		reason, msg := string(gwv1.RouteReasonNoMatchingParent), "no listener matches sectionName/port"
		n := 0
		for _, l := range ls {
			if !l.selectedBy(pr) {
				continue
			}
			if !l.valid || !l.allows(b, r.meta.Namespace) || !l.supports(r.kind) {
				if reason == string(gwv1.RouteReasonNoMatchingParent) {
					reason, msg = string(gwv1.RouteReasonNotAllowedByListeners), "the listeners do not allow this route"
				}
				continue
			}
			if r.kind == "TLSRoute" {
				var lh []string
				for _, h := range routeHosts {
					if x, ok := hostIntersection(l.hostname, h); ok && x != "" {
						lh = append(lh, x)
					}
				}
				if len(lh) == 0 {
					reason, msg = string(gwv1.RouteReasonNoMatchingListenerHostname), "no hostname matches a listener's"
					if l.hostname == "" && len(r.hostnames) == 0 {
						msg = "TLS is passed through by SNI: the route or the listener must name a hostname"
					}
					continue
				}
				// A listener of a Gateway without its address takes
				// routes without serving them; the scope keeps a
				// listener's hosts on its own socket (gateway_ports.go).
				if l.programmed() {
					for _, h := range lh {
						hosts = append(hosts, h+l.scope)
					}
				}
			}
			l.status.AttachedRoutes++
			matched = append(matched, l)
			n++
		}
		if n == 0 {
			ps.Conditions = []metav1.Condition{cond(string(gwv1.RouteConditionAccepted), false, reason, msg, gen)}
		} else {
			ps.Conditions = []metav1.Condition{cond(string(gwv1.RouteConditionAccepted), true, string(gwv1.RouteReasonAccepted), "", gen)}
		}
		parents = append(parents, ps)
	}
	if len(parents) == 0 {
		return RouteStatus{}, false
	}
	resolved := cond(string(gwv1.RouteConditionResolvedRefs), true, string(gwv1.RouteReasonResolvedRefs), "", gen)
	if len(matched) > 0 {
		refs, rr, why := b.l4Backends(r)
		switch {
		case why != "":
			b.problem(r.ref(), ReasonUnsupportedRouteRule, "%s; the route is not served", why)
			for i := range parents {
				if parents[i].Conditions[0].Status == metav1.ConditionTrue {
					parents[i].Conditions[0] = cond(string(gwv1.RouteConditionAccepted), false, string(gwv1.RouteReasonUnsupportedValue), why, gen)
				}
			}
		case r.kind == "TLSRoute" && rr != nil:
			resolved = *rr
			b.tlsRouteHosts(r, nil, hosts)
		case r.kind == "TLSRoute":
			b.tlsRouteHosts(r, &refs[0], hosts)
		default:
			if rr != nil {
				resolved = *rr
			}
			// With no backendRef that resolves, nothing listens on the
			// port: its connections are refused.
			if slices.ContainsFunc(refs, func(x routeRef) bool { return x.base != "" }) {
				b.tcpRoutePorts(r, refs, matched)
			}
		}
	}
	for i := range parents {
		parents[i].Conditions = append(parents[i].Conditions, resolved)
	}
	return RouteStatus{Namespace: r.meta.Namespace, Name: r.meta.Name, Parents: parents}, true
}

// l4Backends resolves the Service backendRefs of non-zero weight of an L4
// route: one for a TLSRoute, one or more for a TCPRoute. A ref that does
// not resolve keeps its weight but no base, and rr is the
// ResolvedRefs=False condition of the first such ref. A TLSRoute with an
// unresolved ref gets no refs.
func (b *builder) l4Backends(r l4Route) (refs []routeRef, rr *metav1.Condition, why string) {
	var brs []gwv1.BackendRef
	for _, rule := range r.rules {
		for _, br := range rule {
			if br.Weight == nil || *br.Weight > 0 {
				brs = append(brs, br)
			}
		}
	}
	switch {
	case r.kind == "TLSRoute" && len(brs) != 1:
		return nil, nil, "a TLSRoute is served with exactly one backendRef of non-zero weight"
	case len(brs) == 0:
		return nil, nil, "a TCPRoute is served with at least one backendRef of non-zero weight"
	}
	for _, br := range brs {
		be, c, why := b.l4Backend(r, br.BackendObjectReference)
		if why != "" {
			return nil, nil, why
		}
		if c != nil && rr == nil {
			rr = c
		}
		be.weight = 1
		if br.Weight != nil {
			be.weight = *br.Weight
		}
		// The same Service port twice is one share of both weights.
		if i := slices.IndexFunc(refs, func(x routeRef) bool { return be.base != "" && x.base == be.base }); i >= 0 {
			refs[i].weight += be.weight
			continue
		}
		refs = append(refs, be)
	}
	if r.kind == "TLSRoute" && rr != nil {
		return nil, rr, ""
	}
	return refs, rr, ""
}

// l4Backend resolves one Service backendRef of an L4 route.
func (b *builder) l4Backend(r l4Route, br gwv1.BackendObjectReference) (be routeRef, rr *metav1.Condition, why string) {
	ns, gen := r.meta.Namespace, r.meta.Generation
	if br.Namespace != nil {
		ns = string(*br.Namespace)
	}
	fail := func(reason gwv1.RouteConditionReason, msg string) (routeRef, *metav1.Condition, string) {
		c := cond(string(gwv1.RouteConditionResolvedRefs), false, string(reason), msg, gen)
		b.problem(r.ref(), string(reason), "backendRef %s/%s: %s", ns, br.Name, msg)
		return routeRef{}, &c, ""
	}
	switch {
	case br.Group != nil && *br.Group != "" || br.Kind != nil && *br.Kind != "Service":
		return fail(gwv1.RouteReasonInvalidKind, "backendRefs must be Services")
	case ns != r.meta.Namespace && !b.referenceGranted(r.meta.Namespace, string(r.kind), ns, "", "Service", string(br.Name)):
		return fail(gwv1.RouteReasonRefNotPermitted, fmt.Sprintf("no ReferenceGrant in %s allows %ss of %s to reach Service %s", ns, r.kind, r.meta.Namespace, br.Name))
	case br.Port == nil:
		return be, nil, "backendRef names no port"
	case b.services[nsName{ns, string(br.Name)}] == nil:
		return fail(gwv1.RouteReasonBackendNotFound, fmt.Sprintf("Service %s/%s not found", ns, br.Name))
	}
	p := fmt.Sprint(*br.Port)
	if !validBackendName(ns, string(br.Name), p) {
		return be, nil, "backendRef Service name must be a DNS label"
	}
	return routeRef{base: ns + "_" + string(br.Name) + "_" + p, ns: ns, svc: string(br.Name), port: int32(*br.Port)}, nil, ""
}

// tlsRouteHosts passes hosts (each with its listener's scope) through to
// the route's backend, where no Ingress and no older route does already;
// with no backend (be nil: its backendRef does not resolve) their
// connections are refused.
func (b *builder) tlsRouteHosts(r l4Route, be *routeRef, hosts []string) {
	ref := r.ref()
	base := PassthroughReject
	if be != nil {
		base = be.base + PassthroughSuffix
	}
	slices.Sort(hosts)
	for _, key := range slices.Compact(hosts) {
		host, _ := splitScope(key)
		if err := checkHost(host); err != nil {
			b.problem(ref, ReasonInvalidHost, "hostname %q: %v; it is ignored", host, err)
			continue
		}
		if owner, ok := b.hostOwners[host]; ok && owner != ref.Namespace {
			b.problem(ref, ReasonRuleConflict, "host %q is taken by another namespace; it is not passed through", host)
			continue
		}
		if c, taken := b.passthroughHosts[key]; taken {
			if c.base != base {
				b.problem(ref, ReasonRuleConflict, "host %q is passed through to %s by %s already; this route is not used for it", host, c.backend, c.owner())
			}
			continue
		}
		if b.passthroughHosts == nil {
			b.passthroughHosts = map[string]passthroughClaim{}
		}
		if _, ok := b.hostOwners[host]; !ok {
			b.hostOwners[host] = ref.Namespace
		}
		if be == nil {
			b.passthroughHosts[key] = passthroughClaim{claim: claim{backend: PassthroughReject}, base: base, route: ref}
			continue
		}
		st := b.useBackend(be.base+PassthroughSuffix, be.ns, be.svc, networkingv1.ServiceBackendPort{Number: be.port}, nil)
		st.passthrough = true
		if !slices.Contains(st.routes, ref) {
			st.routes = append(st.routes, ref)
		}
		b.passthroughHosts[key] = passthroughClaim{claim: claim{backend: st.name}, base: st.base, route: ref}
	}
}

// tcpRoutePorts makes the route the backend of its TCP listeners' ports
// that no older route serves.
func (b *builder) tcpRoutePorts(r l4Route, refs []routeRef, matched []*listenerState) {
	ref := r.ref()
	if b.gwTCP == nil {
		b.gwTCP = map[int]gwTCPPort{}
	}
	for _, l := range matched {
		port := int(l.l.Port)
		if c, taken := b.gwTCP[port]; taken {
			if c.route != ref {
				b.problem(ref, ReasonRuleConflict, "port %d is served by older %s; this route is not used for it", port, c.route)
			}
			continue
		}
		b.gwTCP[port] = gwTCPPort{route: ref, refs: refs}
	}
}

// gatewayTCPServices adds the TCP listener ports' frontends and backends,
// after the tcp-services ConfigMap's (whose ports listeners cannot take).
func (b *builder) gatewayTCPServices() {
	if len(b.gwTCP) == 0 {
		return
	}
	for _, port := range slices.Sorted(maps.Keys(b.gwTCP)) {
		c := b.gwTCP[port]
		t := TCPService{Port: port}
		for _, ref := range c.refs {
			if ref.base == "" {
				t.Shares = append(t.Shares, TCPShare{Weight: int(ref.weight)})
				continue
			}
			name := fmt.Sprintf("tcp%d_%s_%s_%d", port, ref.ns, ref.svc, ref.port)
			be := b.finishBackend(&backendState{name: name, base: ref.base, namespace: ref.ns, service: ref.svc,
				port: networkingv1.ServiceBackendPort{Number: ref.port}, routes: []ObjectRef{c.route}})
			be.TCP = true
			be.HTTP = HTTPRules{}
			b.d.Backends = append(b.d.Backends, be)
			t.Backend = name
			t.Shares = append(t.Shares, TCPShare{Backend: name, Weight: int(ref.weight)})
		}
		if len(t.Shares) == 1 {
			t.Shares = nil
		}
		b.d.TCPServices = append(b.d.TCPServices, t)
	}
	slices.SortFunc(b.d.Backends, func(x, y *Backend) int { return strings.Compare(x.Name, y.Name) })
	slices.SortFunc(b.d.TCPServices, func(x, y TCPService) int { return x.Port - y.Port })
}
