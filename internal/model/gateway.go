package model

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// Gateway API: Gateways of our GatewayClasses and the HTTPRoutes attached to
// them are translated into the same routes, backends and map entries as
// Ingress rules, so a new HTTPRoute host or path is a map change, never a
// reload. Their status is computed here as data (GatewayAPIStatus) and
// written by the kube layer.
//
// Ingress rules claim their host/path keys first; an HTTPRoute match for a
// key an Ingress serves is refused with a RuleConflict Event on the
// HTTPRoute. Among HTTPRoutes the oldest (creation time, then
// namespace/name) wins, as the Gateway API specifies.

// DefaultGatewayController is the GatewayClass spec.controllerName served
// unless --gateway-controller names another.
const DefaultGatewayController = "perimeter.io/gateway-controller"

// GatewayGroup is the API group of the Gateway API kinds.
const GatewayGroup = "gateway.networking.k8s.io"

// GatewayAPIStatus is the status the Gateway API objects the daemon serves
// should have. Conditions carry no LastTransitionTime: the writer keeps the
// time of a condition whose status did not change.
type GatewayAPIStatus struct {
	// Controller is the controllerName served: the writer removes its
	// entries from routes no longer attached to our Gateways.
	Controller string
	// Classes are our GatewayClasses, by name.
	Classes []ClassStatus
	// Gateways are the Gateways of our classes, by namespace/name.
	Gateways []GatewayStatus
	// HTTPRoutes are the HTTPRoutes naming at least one of our Gateways,
	// by namespace/name; Parents holds only our Gateways' entries.
	HTTPRoutes []RouteStatus
	// TLSRoutes and TCPRoutes likewise (gateway_l4.go).
	TLSRoutes, TCPRoutes []RouteStatus
	// GRPCRoutes are the same for GRPCRoutes.
	GRPCRoutes []RouteStatus
}

// ClassStatus is a GatewayClass's wanted conditions.
type ClassStatus struct {
	Name       string
	Conditions []metav1.Condition
}

// GatewayStatus is a Gateway's wanted conditions and listener status.
// With OwnAddress (--gateway-addresses), Address is the Gateway's own
// address, empty when it got none; without, the writer puts the edge's
// published addresses.
type GatewayStatus struct {
	Namespace, Name string
	Conditions      []metav1.Condition
	Listeners       []gwv1.ListenerStatus
	OwnAddress      bool
	Address         string
}

// RouteStatus is a route's wanted parent status for our Gateways.
type RouteStatus struct {
	Namespace, Name string
	Parents         []gwv1.RouteParentStatus
}

// Problem reasons of the Gateway API translation.
const (
	ReasonUnsupportedRouteRule = "UnsupportedRouteRule"
	ReasonRefNotPermitted      = "RefNotPermitted"
)

// listenerState is a Gateway listener and what attaches to it.
type listenerState struct {
	gw     *gwv1.Gateway
	l      *gwv1.Listener
	status *gwv1.ListenerStatus
	valid  bool // routes may attach: Accepted and not Conflicted
	// unresolved: an HTTPS listener's certificateRefs cannot be served; it
	// takes routes but is not programmed.
	unresolved bool
	from       gwv1.FromNamespaces // allowedRoutes.namespaces.from, Same by default
	selector   labels.Selector     // with from Selector
	hostname   string
	// certs are an HTTPS listener's certificates; hosts the hostnames of
	// the routes attached to it, which its certificates serve when it has
	// no hostname (gateway_listeners.go).
	certs []*Certificate
	hosts []string
	// scope names the socket serving the listener's routes: empty for the
	// http frontend's own port on the edge's addresses, else the name of
	// a Gateway bind, the suffix of the host part of its routes' map keys
	// (gateway_ports.go).
	scope string
	// noAddress: the Gateway got no address of --gateway-addresses.
	noAddress bool
}

func httpRouteRef(r *gwv1.HTTPRoute) ObjectRef {
	return ObjectRef{Kind: routeKindOf(r), Namespace: r.Namespace, Name: r.Name}
}

func cond(typ string, ok bool, reason, msg string, gen int64) metav1.Condition {
	st := metav1.ConditionTrue
	if !ok {
		st = metav1.ConditionFalse
	}
	return metav1.Condition{Type: typ, Status: st, Reason: reason, Message: msg, ObservedGeneration: gen}
}

// gatewayAPI translates the Gateway API objects: our classes, their
// Gateways' listeners, then the HTTPRoutes attached to them, oldest first.
// It runs after the Ingress rules, which therefore keep every key they hold.
func (b *builder) gatewayAPI() {
	s := b.s
	if len(s.GatewayClasses) == 0 {
		return
	}
	controller := b.o.GatewayController
	if controller == "" {
		controller = DefaultGatewayController
	}
	st := &b.d.GatewayAPI
	st.Controller = controller
	ours := map[string]*gwv1.GatewayClass{}
	for _, gc := range s.GatewayClasses {
		if gc == nil || string(gc.Spec.ControllerName) != controller {
			continue
		}
		ours[gc.Name] = gc
		st.Classes = append(st.Classes, ClassStatus{Name: gc.Name, Conditions: []metav1.Condition{
			cond(string(gwv1.GatewayClassConditionStatusAccepted), true, string(gwv1.GatewayClassReasonAccepted), "Served by "+controller, gc.Generation),
		}})
	}
	if len(ours) == 0 {
		return
	}
	var gws []*gwv1.Gateway
	for _, gw := range s.Gateways {
		if gw == nil || ours[string(gw.Spec.GatewayClassName)] == nil || !namespaceAllowed(gw.Namespace, b.o) {
			continue
		}
		gws = append(gws, gw)
	}
	// The oldest Gateway wins a socket another one would use for
	// another protocol.
	slices.SortStableFunc(gws, func(x, y *gwv1.Gateway) int { return olderMeta(&x.ObjectMeta, &y.ObjectMeta) })
	b.gatewayTCPPorts(gws)
	b.assignGatewayAddresses(gws)
	listeners := map[nsName][]*listenerState{}
	for _, gw := range gws {
		ls := b.gatewayListeners(gw)
		listeners[nsName{gw.Namespace, gw.Name}] = ls
		b.gwListeners = append(b.gwListeners, ls...)
	}
	routes := slices.Clone(s.HTTPRoutes)
	routes = slices.DeleteFunc(routes, func(r *gwv1.HTTPRoute) bool { return r == nil || !namespaceAllowed(r.Namespace, b.o) })
	slices.SortFunc(routes, func(x, y *gwv1.HTTPRoute) int {
		if c := x.CreationTimestamp.Time.Compare(y.CreationTimestamp.Time); c != 0 {
			return c
		}
		if c := cmp.Compare(x.Namespace, y.Namespace); c != 0 {
			return c
		}
		return cmp.Compare(x.Name, y.Name)
	})
	claims := map[routeKey]ObjectRef{}
	for _, r := range routes {
		b.httpRoute(r, listeners, claims, controller)
	}
	for _, r := range b.grpcRoutes() {
		b.httpRoute(r, listeners, claims, controller)
	}
	b.gatewayL4Routes(listeners, controller)
	for _, gw := range s.Gateways {
		ls, ok := listeners[nsName{gw.Namespace, gw.Name}]
		if !ok {
			continue
		}
		gs := gatewayStatus(gw, ls)
		b.gatewayAddressStatus(gw, &gs)
		st.Gateways = append(st.Gateways, gs)
	}
	b.gatewayBinds()
	slices.SortFunc(st.Classes, func(x, y ClassStatus) int { return cmp.Compare(x.Name, y.Name) })
	slices.SortFunc(st.Gateways, func(x, y GatewayStatus) int {
		return cmp.Or(cmp.Compare(x.Namespace, y.Namespace), cmp.Compare(x.Name, y.Name))
	})
	slices.SortFunc(st.HTTPRoutes, func(x, y RouteStatus) int {
		return cmp.Or(cmp.Compare(x.Namespace, y.Namespace), cmp.Compare(x.Name, y.Name))
	})
	slices.SortFunc(st.GRPCRoutes, func(x, y RouteStatus) int {
		return cmp.Or(cmp.Compare(x.Namespace, y.Namespace), cmp.Compare(x.Name, y.Name))
	})
}

func ptr[T any](v T) *T { return &v }

// parentListeners are the listeners of the Gateway of ours a route's
// parentRef names (its namespace defaulting to the route's), and whether
// there is one.
func parentListeners(pr gwv1.ParentReference, routeNS string, listeners map[nsName][]*listenerState) ([]*listenerState, bool) {
	if pr.Group != nil && string(*pr.Group) != GatewayGroup || pr.Kind != nil && *pr.Kind != "Gateway" {
		return nil, false
	}
	ns := routeNS
	if pr.Namespace != nil {
		ns = string(*pr.Namespace)
	}
	ls, ours := listeners[nsName{ns, string(pr.Name)}]
	return ls, ours
}

// selectedBy: a parentRef's sectionName and port, when set, pick the
// listener.
func (l *listenerState) selectedBy(pr gwv1.ParentReference) bool {
	return (pr.SectionName == nil || *pr.SectionName == l.l.Name) && (pr.Port == nil || *pr.Port == l.l.Port)
}

// http500 is what a rule without a usable backend answers.
const http500 = 500

func gatewayStatus(gw *gwv1.Gateway, ls []*listenerState) GatewayStatus {
	gen := gw.Generation
	valid := 0
	out := GatewayStatus{Namespace: gw.Namespace, Name: gw.Name}
	for _, l := range ls {
		// A listener of a Gateway without an address is valid: the
		// Gateway's conditions say what is missing (gateway_ports.go).
		if l.valid && !l.unresolved {
			valid++
		}
		out.Listeners = append(out.Listeners, *l.status)
	}
	accepted := cond(string(gwv1.GatewayConditionAccepted), true, string(gwv1.GatewayReasonAccepted), "", gen)
	programmed := cond(string(gwv1.GatewayConditionProgrammed), true, string(gwv1.GatewayReasonProgrammed), "", gen)
	if valid < len(ls) {
		accepted = cond(string(gwv1.GatewayConditionAccepted), valid > 0, string(gwv1.GatewayReasonListenersNotValid),
			fmt.Sprintf("%d of %d listeners are not valid", len(ls)-valid, len(ls)), gen)
	}
	if valid == 0 {
		programmed = cond(string(gwv1.GatewayConditionProgrammed), false, string(gwv1.GatewayReasonInvalid), "no valid listener", gen)
	}
	out.Conditions = []metav1.Condition{accepted, programmed}
	return out
}

// hostIntersection is the host a route hostname and a listener hostname
// both match ("" = any host), or false when they match none in common.
func hostIntersection(listener, route string) (string, bool) {
	switch {
	case listener == "":
		return route, true
	case route == "":
		return listener, true
	case listener == route:
		return route, true
	case strings.HasPrefix(listener, "*.") && hostMatchesWildcard(route, listener):
		return route, true
	case strings.HasPrefix(route, "*.") && hostMatchesWildcard(listener, route):
		return listener, true
	}
	return "", false
}

// hostMatchesWildcard: "*.example.com" matches "a.example.com" and
// "a.b.example.com" (and the narrower "*.a.example.com"), never
// "example.com".
func hostMatchesWildcard(h, wildcard string) bool {
	suffix := wildcard[1:] // ".example.com"
	return strings.HasSuffix(h, suffix) && len(h) > len(suffix)
}

// httpRoute attaches r to its parents and claims its rules for the hosts
// the attached listeners allow.
func (b *builder) httpRoute(r *gwv1.HTTPRoute, listeners map[nsName][]*listenerState, claims map[routeKey]ObjectRef, controller string) {
	ref := httpRouteRef(r)
	gen := r.Generation
	var parents []gwv1.RouteParentStatus
	hosts := map[string]bool{}
	var routeHosts []string
	for _, h := range r.Spec.Hostnames {
		routeHosts = append(routeHosts, strings.ToLower(string(h)))
	}
	if len(routeHosts) == 0 {
		routeHosts = []string{""}
	}
	var attached []*gwv1.RouteParentStatus
	for _, pr := range r.Spec.ParentRefs {
		ls, ours := parentListeners(pr, r.Namespace, listeners)
		if !ours {
			continue
		}
		ps := gwv1.RouteParentStatus{ParentRef: pr, ControllerName: gwv1.GatewayController(controller)}
		reason, msg := string(gwv1.RouteReasonNoMatchingParent), "no listener matches sectionName/port"
		var matched []*listenerState
		for _, l := range ls {
			if !l.selectedBy(pr) {
				continue
			}
			if !l.valid || !l.allows(b, r.Namespace) || !l.supports(gwv1.Kind(routeKindOf(r))) {
				if reason == string(gwv1.RouteReasonNoMatchingParent) {
					reason, msg = string(gwv1.RouteReasonNotAllowedByListeners), "the listeners do not allow this route"
				}
				continue
			}
			var lh []string
			for _, h := range routeHosts {
				if x, ok := hostIntersection(l.hostname, h); ok {
					lh = append(lh, x)
				}
			}
			if len(lh) == 0 {
				reason, msg = string(gwv1.RouteReasonNoMatchingListenerHostname), "no hostname matches a listener's"
				continue
			}
			// A listener whose certificate cannot be served takes routes
			// (and counts them) without serving them.
			if l.programmed() {
				for _, h := range lh {
					hosts[h+l.scope] = true
				}
				l.hosts = append(l.hosts, lh...)
			}
			matched = append(matched, l)
		}
		if len(matched) == 0 {
			ps.Conditions = []metav1.Condition{cond(string(gwv1.RouteConditionAccepted), false, reason, msg, gen)}
		} else {
			for _, l := range matched {
				l.status.AttachedRoutes++
			}
			ps.Conditions = []metav1.Condition{cond(string(gwv1.RouteConditionAccepted), true, string(gwv1.RouteReasonAccepted), "", gen)}
		}
		parents = append(parents, ps)
	}
	if len(parents) == 0 {
		return
	}
	for i := range parents {
		if parents[i].Conditions[0].Status == metav1.ConditionTrue {
			attached = append(attached, &parents[i])
		}
	}
	resolved := cond(string(gwv1.RouteConditionResolvedRefs), true, string(gwv1.RouteReasonResolvedRefs), "", gen)
	var unsupported []string
	if len(attached) > 0 {
		hostList := sortedHosts(hosts)
		for i, rule := range r.Spec.Rules {
			refs, http, rr, why := b.routeBackend(r, rule)
			if why != "" {
				unsupported = append(unsupported, fmt.Sprintf("rules[%d]: %s", i, why))
				b.problem(ref, ReasonUnsupportedRouteRule, "rules[%d]: %s; the rule is ignored", i, why)
				continue
			}
			// A rule without backendRefs answers 500 by itself, before any
			// mirror would run.
			if rr == nil && http != nil && http.Status == 0 {
				if mrr := b.routeMirrors(r, rule.Filters, http); mrr != nil && resolved.Status == metav1.ConditionTrue {
					resolved = *mrr
				}
			}
			if rr != nil {
				if resolved.Status == metav1.ConditionTrue {
					resolved = *rr
				}
				// The spec: requests the rule matches get a 500 answer,
				// rather than falling through to other rules.
				refs, http = nil, &HTTPRules{Status: http500}
			}
			b.routeRule(r, i, rule, hostList, refs, http, claims)
		}
	}
	for _, p := range attached {
		if len(unsupported) > 0 && len(unsupported) == len(r.Spec.Rules) {
			p.Conditions[0] = cond(string(gwv1.RouteConditionAccepted), false, string(gwv1.RouteReasonUnsupportedValue), strings.Join(unsupported, "; "), gen)
		} else if len(unsupported) > 0 {
			p.Conditions = append(p.Conditions, cond(string(gwv1.RouteConditionPartiallyInvalid), true, string(gwv1.RouteReasonUnsupportedValue), strings.Join(unsupported, "; "), gen))
		}
	}
	for i := range parents {
		parents[i].Conditions = append(parents[i].Conditions, resolved)
	}
	rs := RouteStatus{Namespace: r.Namespace, Name: r.Name, Parents: parents}
	if routeKindOf(r) == grpcRouteKind {
		b.d.GatewayAPI.GRPCRoutes = append(b.d.GatewayAPI.GRPCRoutes, rs)
	} else {
		b.d.GatewayAPI.HTTPRoutes = append(b.d.GatewayAPI.HTTPRoutes, rs)
	}
}

func sortedHosts(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for h := range m {
		out = append(out, h)
	}
	slices.Sort(out)
	return out
}

// routeRef is a resolved Service backendRef of a rule.
type routeRef struct {
	base, ns, svc string
	port          int32
	weight        int32
}

// routeBackend checks what this version serves of a rule: path matches, no
// filter, and one Service backend or two with weights. why explains an
// unsupported rule; rr is a ResolvedRefs=False condition for a backend
// that cannot be used.
func (b *builder) routeBackend(r *gwv1.HTTPRoute, rule gwv1.HTTPRouteRule) (refs []routeRef, http *HTTPRules, rr *metav1.Condition, why string) {
	http, why = b.routeFilters(rule.Filters, rule.Matches)
	if why != "" {
		return nil, nil, nil, why
	}
	if routeKindOf(r) == grpcRouteKind && slices.ContainsFunc(rule.Filters, func(f gwv1.HTTPRouteFilter) bool {
		return f.Type == gwv1.HTTPRouteFilterRequestMirror
	}) {
		// The mirror's copy is HTTP/1.1; a gRPC call needs HTTP/2.
		return nil, nil, nil, "filter RequestMirror is not supported"
	}
	conditional := false
	for _, m := range rule.Matches {
		rm, why := requestMatch(m)
		if why != "" {
			return nil, nil, nil, why
		}
		conditional = conditional || rm != nil
	}
	var brs []gwv1.HTTPBackendRef
	for _, br := range rule.BackendRefs {
		if br.Weight == nil || *br.Weight > 0 {
			brs = append(brs, br)
		}
	}
	if len(brs) == 0 && http != nil && http.Route.Redirect.Set {
		// The redirect answers: no backend is asked.
		return nil, http, nil, ""
	}
	if len(brs) == 0 {
		// No backend (or only weight 0): the spec wants a 500 answer.
		return nil, &HTTPRules{Status: http500}, nil, ""
	}
	if len(brs) > maxWeightedRefs {
		return nil, nil, nil, fmt.Sprintf("1 to %d backendRefs with a non-zero weight are supported", maxWeightedRefs)
	}
	for _, hbr := range brs {
		if len(hbr.Filters) > 0 {
			return nil, nil, nil, "backendRef filters are not supported"
		}
		ref, c, why := b.serviceRef(r, hbr.BackendObjectReference)
		if c != nil || why != "" {
			return nil, nil, c, why
		}
		if hbr.Weight != nil {
			ref.weight = *hbr.Weight
		}
		refs = append(refs, ref)
	}
	if conditional && len(refs) > 1 {
		// The split acts on the backend the maps choose; a conditional
		// match's backend is chosen by its condition.
		return nil, nil, nil, "weighted backendRefs with method, header, query parameter or RegularExpression path matches are not supported"
	}
	if http != nil && len(refs) > 1 {
		return nil, nil, nil, "filters with two weighted backendRefs are not supported"
	}
	return refs, http, nil, ""
}

// serviceRef resolves a backendRef to a Service port (weight 1). rr is a
// ResolvedRefs=False condition for a reference that cannot be used, why
// the reason a rule naming it cannot be served.
func (b *builder) serviceRef(r *gwv1.HTTPRoute, br gwv1.BackendObjectReference) (ref routeRef, rr *metav1.Condition, why string) {
	gen := r.Generation
	if br.Group != nil && *br.Group != "" || br.Kind != nil && *br.Kind != "Service" {
		c := cond(string(gwv1.RouteConditionResolvedRefs), false, string(gwv1.RouteReasonInvalidKind), "backendRefs must be Services", gen)
		return ref, &c, ""
	}
	ns := r.Namespace
	if br.Namespace != nil {
		ns = string(*br.Namespace)
	}
	if ns != r.Namespace && !b.referenceGranted(r.Namespace, routeKindOf(r), ns, "", "Service", string(br.Name)) {
		c := cond(string(gwv1.RouteConditionResolvedRefs), false, string(gwv1.RouteReasonRefNotPermitted),
			fmt.Sprintf("no ReferenceGrant in %s allows %ss of %s to reach Service %s", ns, routeKindOf(r), r.Namespace, br.Name), gen)
		b.problem(httpRouteRef(r), ReasonRefNotPermitted, "backendRef Service %s/%s: %s", ns, br.Name, c.Message)
		return ref, &c, ""
	}
	if br.Port == nil {
		return ref, nil, "backendRef names no port"
	}
	if b.services[nsName{ns, string(br.Name)}] == nil {
		c := cond(string(gwv1.RouteConditionResolvedRefs), false, string(gwv1.RouteReasonBackendNotFound),
			fmt.Sprintf("Service %s/%s not found", ns, br.Name), gen)
		return ref, &c, ""
	}
	p := fmt.Sprint(*br.Port)
	if !validBackendName(ns, string(br.Name), p) {
		return ref, nil, "backendRef Service name must be a DNS label"
	}
	return routeRef{base: ns + "_" + string(br.Name) + "_" + p, ns: ns, svc: string(br.Name), port: int32(*br.Port), weight: 1}, nil, ""
}

// routeSplit is a weighted rule's share for its second backend, in the
// canary maps (feat_canary.go) of the rule's own backend.
type routeSplit struct {
	canary string
	weight int
}

// ruleBackend is the backend a rule routes to. A rule with two weighted
// backends gets a backend of its own for the first, whose canary maps send
// the second its share of requests (rounded to a percent), so that the
// split touches no other rule routing to the same Service.
//
// match >= 0 asks for the backend of that conditional match of the rule:
// always a backend of its own, since the frontend tests the condition by
// backend.
func (b *builder) ruleBackend(r *gwv1.HTTPRoute, i, match int, refs []routeRef, http *HTTPRules) *backendState {
	ref := httpRouteRef(r)
	// A redirect rule has a backend without servers, named after no
	// Service port (port 0 never is one).
	main := routeRef{base: r.Namespace + "_redirect_0", ns: r.Namespace}
	if http != nil && http.Status != 0 {
		main.base = r.Namespace + "_status_0"
	}
	if len(refs) > 0 {
		main = refs[0]
	}
	var st *backendState
	// A GRPCRoute's backend speaks h2c: never the Service's shared one.
	grpc := routeKindOf(r) == grpcRouteKind
	if len(refs) == 1 && http == nil && match < 0 && !grpc {
		st = b.useBackend(main.base, main.ns, main.svc, networkingv1.ServiceBackendPort{Number: main.port}, nil)
	} else {
		key := fmt.Sprintf("\x00%s#%d", ref, i)
		if match >= 0 {
			key += fmt.Sprintf("#%d", match)
		}
		id := variantID{base: main.base, key: key}
		if st = b.variants[id]; st == nil {
			st = &backendState{name: b.variantName(id), base: main.base, namespace: main.ns, service: main.svc,
				port: networkingv1.ServiceBackendPort{Number: main.port}}
			b.backends[st.name] = st
			b.variants[id] = st
		}
		st.http = http
		st.h2c = grpc
	}
	if len(refs) == 2 {
		second := refs[1]
		var cst *backendState
		if grpc {
			// The second backend speaks h2c too, so it is the rule's own
			// like the first.
			id := variantID{base: second.base, key: fmt.Sprintf("\x00%s#%d#weight1", ref, i)}
			if cst = b.variants[id]; cst == nil {
				cst = &backendState{name: b.variantName(id), base: second.base, namespace: second.ns, service: second.svc,
					port: networkingv1.ServiceBackendPort{Number: second.port}, h2c: true}
				b.backends[cst.name] = cst
				b.variants[id] = cst
			}
		} else {
			cst = b.useBackend(second.base, second.ns, second.svc, networkingv1.ServiceBackendPort{Number: second.port}, nil)
		}
		if !slices.Contains(cst.routes, ref) {
			cst.routes = append(cst.routes, ref)
		}
		total := int(main.weight) + int(second.weight)
		if b.gwSplits == nil {
			b.gwSplits = map[string]routeSplit{}
		}
		b.gwSplits[st.name] = routeSplit{canary: cst.name, weight: (int(second.weight)*MaxCanaryWeight + total/2) / total}
	}
	if !slices.Contains(st.routes, ref) {
		st.routes = append(st.routes, ref)
	}
	return st
}

// gatewaySplits adds the weighted rules' backends to the canary maps.
func (b *builder) gatewaySplits() {
	if len(b.gwSplits) == 0 {
		return
	}
	backend, weight := b.d.Maps[MapCanaryBackend], b.d.Maps[MapCanaryWeight]
	if backend == nil {
		backend, weight = map[string]string{}, map[string]string{}
		b.d.Maps[MapCanaryBackend], b.d.Maps[MapCanaryWeight] = backend, weight
	}
	for name, sp := range b.gwSplits {
		backend[name] = sp.canary
		weight[name] = strconv.Itoa(sp.weight)
	}
}

// referenceGranted: does a ReferenceGrant in toNS allow objects of kind
// fromKind in fromNS to reference the object (toGroup, toKind, name)?
func (b *builder) referenceGranted(fromNS, fromKind, toNS, toGroup, toKind, name string) bool {
	for _, g := range b.s.ReferenceGrants {
		if g == nil || g.Namespace != toNS {
			continue
		}
		from := slices.ContainsFunc(g.Spec.From, func(f gwv1.ReferenceGrantFrom) bool {
			return string(f.Group) == GatewayGroup && string(f.Kind) == fromKind && string(f.Namespace) == fromNS
		})
		to := slices.ContainsFunc(g.Spec.To, func(t gwv1.ReferenceGrantTo) bool {
			return string(t.Group) == toGroup && string(t.Kind) == toKind && (t.Name == nil || string(*t.Name) == name)
		})
		if from && to {
			return true
		}
	}
	return false
}

// routeRule claims a rule's paths on every host and routes them to the
// backend, like an Ingress rule.
func (b *builder) routeRule(r *gwv1.HTTPRoute, i int, rule gwv1.HTTPRouteRule, hosts []string, refs []routeRef, http *HTTPRules, claims map[routeKey]ObjectRef) {
	ref := httpRouteRef(r)
	matches := rule.Matches
	if len(matches) == 0 {
		matches = []gwv1.HTTPRouteMatch{{}}
	}
	for mi, m := range matches {
		raw, pt := "/", networkingv1.PathTypePrefix
		rm, _ := requestMatch(m)
		if m.Path != nil && (rm == nil || rm.PathRegex == "") {
			if m.Path.Value != nil {
				raw = *m.Path.Value
			}
			if m.Path.Type != nil && *m.Path.Type == gwv1.PathMatchExact {
				pt = networkingv1.PathTypeExact
			}
		}
		path, typ, err := servedPath(raw, &pt)
		if err != nil {
			b.problem(ref, ReasonInvalidPath, "rules[%d] path %q: %v; the match is ignored", i, shortPath(raw), err)
			continue
		}
		for _, scoped := range hosts {
			host, _ := splitScope(scoped)
			if host != "" {
				if err := checkHost(host); err != nil {
					b.problem(ref, ReasonInvalidHost, "hostname %q: %v; it is ignored", host, err)
					continue
				}
				if owner, ok := b.hostOwners[host]; ok && owner != r.Namespace && !b.o.AllowCrossNamespaceHosts {
					b.problem(ref, ReasonRuleConflict, "host %q is taken by another namespace; the rules for it are ignored", host)
					continue
				}
			}
			// The scope joins the host in the key: a route of a listener
			// with a scope is another key than the same host and path on
			// the http port, and never an Ingress's.
			key := routeKey{scoped, path, typ}
			if rm != nil {
				b.condRouteClaim(r, i, mi, key, rm, refs, http)
				continue
			}
			if c, taken := b.claims[key]; taken {
				b.problem(ref, ReasonRuleConflict, "host %q path %q (%s) is served by Ingress %s/%s, which wins over HTTPRoutes; this match is ignored",
					host, path, typ, c.ing.Namespace, c.ing.Name)
				continue
			}
			if c, taken := claims[key]; taken {
				if c != ref {
					b.problem(ref, ReasonRuleConflict, "host %q path %q (%s) is already served by older %s; this match is ignored", host, path, typ, c)
				}
				continue
			}
			claims[key] = ref
			if _, ok := b.hostOwners[host]; !ok && host != "" {
				b.hostOwners[host] = r.Namespace
			}
			if len(refs) > 2 {
				b.weightedRoute(r, i, key, refs)
				continue
			}
			st := b.ruleBackend(r, i, -1, refs, http)
			b.routes = append(b.routes, Route{Ingress: ref, Host: scoped, Path: path, PathType: typ, Backend: st.name})
		}
	}
}

// dumpGatewayAPI writes the Gateway API status for the golden files.
func dumpGatewayAPI(w *strings.Builder, d *Desired) {
	g := d.GatewayAPI
	if len(g.Classes) == 0 {
		return
	}
	conds := func(indent string, cs []metav1.Condition) {
		for _, c := range cs {
			fmt.Fprintf(w, "%s%s=%s %s", indent, c.Type, c.Status, c.Reason)
			if c.Message != "" {
				fmt.Fprintf(w, " %q", c.Message)
			}
			w.WriteString("\n")
		}
	}
	w.WriteString("\ngateway-api\n")
	for _, c := range g.Classes {
		fmt.Fprintf(w, "  GatewayClass %s\n", c.Name)
		conds("    ", c.Conditions)
	}
	for _, gw := range g.Gateways {
		fmt.Fprintf(w, "  Gateway %s/%s\n", gw.Namespace, gw.Name)
		if gw.Address != "" {
			fmt.Fprintf(w, "    address %s\n", gw.Address)
		}
		conds("    ", gw.Conditions)
		for _, l := range gw.Listeners {
			var kinds []string
			for _, k := range l.SupportedKinds {
				kinds = append(kinds, string(k.Kind))
			}
			fmt.Fprintf(w, "    listener %s attachedRoutes=%d kinds=%s\n", l.Name, l.AttachedRoutes, strings.Join(kinds, ","))
			conds("      ", l.Conditions)
		}
	}
	for _, gb := range d.GatewayBinds {
		fmt.Fprintf(w, "  bind %s port %d", gb.Name, gb.Port)
		if gb.Address != "" {
			fmt.Fprintf(w, " address %s", gb.Address)
		}
		if gb.TLS {
			w.WriteString(" tls")
		}
		if gb.Passthrough {
			w.WriteString(" passthrough")
		}
		w.WriteString("\n")
	}
	dumpRouteMatches(w, d)
	for _, x := range []struct {
		kind   string
		routes []RouteStatus
	}{{"HTTPRoute", g.HTTPRoutes}, {grpcRouteKind, g.GRPCRoutes}, {"TLSRoute", g.TLSRoutes}, {"TCPRoute", g.TCPRoutes}} {
		for _, r := range x.routes {
			fmt.Fprintf(w, "  %s %s/%s\n", x.kind, r.Namespace, r.Name)
			for _, p := range r.Parents {
				ns := r.Namespace
				if p.ParentRef.Namespace != nil {
					ns = string(*p.ParentRef.Namespace)
				}
				section := ""
				if p.ParentRef.SectionName != nil {
					section = "#" + string(*p.ParentRef.SectionName)
				}
				fmt.Fprintf(w, "    parent %s/%s%s\n", ns, p.ParentRef.Name, section)
				conds("      ", p.Conditions)
			}
		}
	}
}
