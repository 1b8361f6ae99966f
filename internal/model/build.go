package model

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// Problem reasons.
const (
	ReasonInvalidHost            = "InvalidHost"
	ReasonInvalidPath            = "InvalidPath"
	ReasonInvalidBackend         = "InvalidBackend"
	ReasonUnsupportedBackend     = "UnsupportedBackend"
	ReasonRuleConflict           = "RuleConflict"
	ReasonDefaultBackendConflict = "DefaultBackendConflict"
	ReasonServiceNotFound        = "ServiceNotFound"
	ReasonPortNotFound           = "PortNotFound"
	ReasonUnsupportedService     = "UnsupportedService"
	ReasonInvalidEndpoint        = "InvalidEndpoint"
	ReasonExternalNameUnresolved = "ExternalNameUnresolved"
	ReasonInvalidAnnotation      = "InvalidAnnotation"
	ReasonInvalidConfigMapKey    = "InvalidConfigMapKey"
	ReasonAnnotationConflict     = "AnnotationConflict"
	ReasonInvalidOption          = "InvalidOption"
)

// Build turns a snapshot into the desired HAProxy state. It never mutates s
// and gives the same result for the same s and o, whatever the order of the
// snapshot's lists.
func Build(s *Snapshot, o Options) *Desired {
	if s == nil {
		s = &Snapshot{}
	}
	b := newBuilder(s, o)
	b.configMap()
	ings := b.servedIngresses()
	for _, ing := range ings {
		b.ingressSettings(ing)
		b.ingressRules(ing)
	}
	b.defaultBackend(ings)
	b.gatewayAPI()
	b.canaries(ings)
	b.gatewaySplits()
	b.secretRefs(ings)
	b.buildMaps()
	b.routeACLMaps()
	b.gatewayWildcards()
	b.passthroughMap()
	b.finishBackends()
	// TCP-service backends need their server-ca and server-crt resolved too.
	b.tcpServices()
	b.gatewayTCPServices()
	b.buildTLS(ings)
	b.features()
	b.finish()
	d := b.d
	d.bySvc = indexBackends(d)
	d.inc = newIngressIndex(b, ings)
	return d
}

type nsName struct{ ns, name string }

// values holds the valid raw values an object sets, by index in settings.
type values map[int]string

// backendState gathers what a backend needs before it is finished.
type backendState struct {
	name string
	// base is the name of the Service port's backend, name without the
	// variant suffix (variants.go).
	base      string
	namespace string
	service   string
	port      networkingv1.ServiceBackendPort
	// users are the Ingresses routing to the backend, oldest first. They
	// all ask for the same Ingress-scope settings (variants.go): the first
	// one's annotations give them.
	users []*networkingv1.Ingress
	// routes are the Gateway API routes routing to the backend.
	routes []ObjectRef
	// http are the filters of the one HTTPRoute rule a backend of its own
	// serves (gateway.go); nil otherwise.
	http *HTTPRules
	// h2c marks a GRPCRoute rule's own backend: HTTP/2 to the pods.
	h2c bool
	// fromFlag marks the --default-backend-service backend.
	fromFlag bool
	// origin is the Ingress whose rule registered the variant, nil when
	// something else did (a default backend, a canary, a Gateway API
	// route): variant names depend on the order of registration
	// (variants.go), which UpdateIngresses must not change.
	origin *networkingv1.Ingress
	// userProblems: problems about the backend were recorded on its users,
	// so one more user would get one more problem.
	userProblems bool
	// passthrough marks the mode tcp backend of an ssl-passthrough host
	// (feat_passthrough.go).
	passthrough bool
}

type routeKey struct {
	host, path string
	typ        PathType
}

type claim struct {
	ing     *networkingv1.Ingress
	backend string
}

type builder struct {
	s *Snapshot
	o Options
	d *Desired
	// routes are d.Routes while they are made; finish sorts them.
	routes []Route

	services map[nsName]*corev1.Service
	slices   map[nsName][]*discoveryv1.EndpointSlice

	cmValues  values
	ingValues map[*networkingv1.Ingress]values
	svcValues map[*corev1.Service]values

	backends map[string]*backendState
	// variants finds a backend by Service port and Ingress-scope settings
	// (variants.go).
	variants map[variantID]*backendState
	// gwSplits are the weighted HTTPRoute rules' canary entries, by the
	// rule's own backend (gateway.go).
	gwSplits map[string]routeSplit
	// gwConds are the conditional HTTPRoute matches, gwMatches their
	// conditions by backend, gwCondClaims the host, path and conditions
	// each route claimed (gateway_match.go).
	gwConds      []gwCondRoute
	gwMatches    map[string]*RequestMatch
	gwCondClaims map[string]ObjectRef
	// variantKeys caches variantKey by Ingress and Service.
	variantKeys map[ingService]string
	claims      map[routeKey]claim
	// hostOwners is the namespace of the oldest Ingress routing each host
	// (wildcards included, "" never).
	hostOwners map[string]string
	// nsDefaults are the namespaces' own default backends: the oldest
	// spec.defaultBackend of each namespace.
	nsDefaults map[string]string
	// secrets indexes the snapshot's Secrets once (secret).
	secrets map[nsName]*corev1.Secret
	// passthroughHosts are the ssl-passthrough hosts and their backends;
	// httpHosts the first Ingress routing each host over HTTP.
	passthroughHosts map[string]passthroughClaim
	httpHosts        map[string]*networkingv1.Ingress
	// nsLabels indexes the snapshot's Namespaces' labels once; gwTLS
	// loads the HTTPS listeners' Secrets; gwListeners are the listeners of
	// our Gateways (gateway_listeners.go).
	nsLabels    map[string]map[string]string
	gwTLS       *tlsBuilder
	gwListeners []*listenerState
	// gwAddrs are the Gateways' own addresses, gwTCPPorts the ports of
	// TCP listeners with a Gateway naming each (gateway_ports.go).
	gwAddrs    map[nsName]gwAddress
	gwTCPPorts map[int]string
	// gwSockets are the protocols of the Gateway binds, by scope.
	gwSockets map[string]gwv1.ProtocolType
	// gwTCP are the TCP listener ports' backends (gateway_l4.go).
	gwTCP map[int]gwTCPPort
	// sel is the class selector of servedIngresses.
	sel *classSelector
	// inRule is the Ingress whose rules are being claimed, nil outside
	// ingressRules.
	inRule *networkingv1.Ingress
}

func newBuilder(s *Snapshot, o Options) *builder {
	b := &builder{
		s: s,
		o: o,
		d: &Desired{
			Maps: map[string]map[string]string{
				MapExact:  {},
				MapPrefix: {},
			},
		},
		services:  make(map[nsName]*corev1.Service, len(s.Services)),
		slices:    make(map[nsName][]*discoveryv1.EndpointSlice, len(s.EndpointSlices)),
		ingValues: map[*networkingv1.Ingress]values{},
		svcValues: map[*corev1.Service]values{},
		backends:  make(map[string]*backendState, len(s.Ingresses)),
		variants:  make(map[variantID]*backendState, len(s.Ingresses)),
		claims:    make(map[routeKey]claim, len(s.Ingresses)),

		hostOwners: map[string]string{},
		nsDefaults: map[string]string{},
	}
	// Services and slices are not filtered by namespace: only Ingresses
	// reach them, always in their own namespace, which was filtered; the
	// one other way in is --default-backend-service, which the operator
	// named explicitly.
	for _, svc := range s.Services {
		if svc != nil {
			b.services[nsName{svc.Namespace, svc.Name}] = svc
		}
	}
	for _, sl := range s.EndpointSlices {
		if k, ok := sliceService(sl); ok {
			b.slices[k] = append(b.slices[k], sl)
		}
	}
	return b
}

// sliceService names the Service an EndpointSlice belongs to.
func sliceService(sl *discoveryv1.EndpointSlice) (nsName, bool) {
	if sl == nil {
		return nsName{}, false
	}
	name := sl.Labels[discoveryv1.LabelServiceName]
	if name == "" {
		return nsName{}, false
	}
	return nsName{sl.Namespace, name}, true
}

func (b *builder) problem(obj ObjectRef, reason, format string, args ...any) {
	b.d.Problems = append(b.d.Problems, Problem{Object: obj, Reason: reason, Message: fmt.Sprintf(format, args...)})
}

func ingressRef(ing *networkingv1.Ingress) ObjectRef {
	return ObjectRef{Kind: "Ingress", Namespace: ing.Namespace, Name: ing.Name}
}

func serviceRef(ns, name string) ObjectRef {
	return ObjectRef{Kind: "Service", Namespace: ns, Name: name}
}

// olderIngress orders Ingresses by age, then namespace/name: the order in
// which they claim rules, so the oldest wins every conflict.
func olderIngress(a, b *networkingv1.Ingress) int {
	if c := a.CreationTimestamp.Time.Compare(b.CreationTimestamp.Time); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	return cmp.Compare(a.Name, b.Name)
}

// servedIngresses filters the snapshot's Ingresses by namespace and class
// and returns them oldest first.
func (b *builder) servedIngresses() []*networkingv1.Ingress {
	sel := newClassSelector(b.s.IngressClasses, b.o)
	b.sel = sel
	var out []*networkingv1.Ingress
	for _, ing := range b.s.Ingresses {
		if ing == nil || !namespaceAllowed(ing.Namespace, b.o) || !sel.serves(ing) {
			continue
		}
		out = append(out, ing)
	}
	slices.SortFunc(out, olderIngress)
	b.d.Served = make([]ObjectRef, 0, len(out))
	for _, ing := range out {
		b.d.Served = append(b.d.Served, ingressRef(ing))
	}
	return out
}

// ingressRules claims the Ingress's rules and registers their backends.
// A host belongs to the namespace of the oldest Ingress that routes it;
// rules of other namespaces for that host are refused, unless the operator
// allows sharing hosts across namespaces.
func (b *builder) ingressRules(ing *networkingv1.Ingress) {
	b.inRule = ing
	defer func() { b.inRule = nil }()
	ref := ingressRef(ing)
	for _, rule := range ing.Spec.Rules {
		if rule.Host != "" {
			if err := checkHost(rule.Host); err != nil {
				b.problem(ref, ReasonInvalidHost, "host %q: %v; the rule is ignored", rule.Host, err)
				continue
			}
		}
		if rule.HTTP == nil {
			continue
		}
		if owner, ok := b.hostOwners[rule.Host]; ok && rule.Host != "" && owner != ing.Namespace && !b.o.AllowCrossNamespaceHosts {
			b.problem(ref, ReasonRuleConflict, "host %q is taken by another namespace; the rules for it are ignored", rule.Host)
			continue
		}
		for _, p := range rule.HTTP.Paths {
			path, typ, err := servedPath(p.Path, p.PathType)
			if err != nil {
				b.problem(ref, ReasonInvalidPath, "host %q path %q: %v; the path is ignored", rule.Host, shortPath(p.Path), err)
				continue
			}
			name, port, ok := b.backendName(ref, p.Backend)
			if !ok {
				continue
			}
			if b.passthrough(ing, p.Backend.Service.Name) {
				b.passthroughRule(ing, rule.Host, name, p.Backend.Service.Name, port)
				continue
			}
			if cond, set, ok := b.routeACL(ing.Namespace, p.Backend.Service.Name); ok {
				b.condRoute(ing, rule.Host, path, typ, name, p.Backend.Service.Name, port, cond)
				continue
			} else if set {
				b.problem(ref, ReasonInvalidRouteACL, "host %q path %q: Service %s has an invalid route-acl; the rule is left out",
					rule.Host, shortPath(path), p.Backend.Service.Name)
				continue
			}
			key := routeKey{rule.Host, path, typ}
			if c, taken := b.claims[key]; taken {
				switch {
				case c.ing.Namespace != ing.Namespace:
					b.problem(ref, ReasonRuleConflict, "host %q path %q (%s) is already served by another namespace; this rule is ignored",
						rule.Host, path, typ)
				case c.ing != ing:
					b.problem(ref, ReasonRuleConflict, "host %q path %q (%s) is already served by older Ingress %s; this rule is ignored",
						rule.Host, path, typ, c.ing.Name)
				case c.backend != name:
					b.problem(ref, ReasonRuleConflict, "host %q path %q (%s) appears twice with different backends; the first (%s) is used",
						rule.Host, path, typ, c.backend)
				}
				continue
			}
			b.claims[key] = claim{ing: ing, backend: name}
			if _, ok := b.httpHosts[rule.Host]; !ok {
				if b.httpHosts == nil {
					b.httpHosts = map[string]*networkingv1.Ingress{}
				}
				b.httpHosts[rule.Host] = ing
			}
			if _, ok := b.hostOwners[rule.Host]; !ok && rule.Host != "" {
				b.hostOwners[rule.Host] = ing.Namespace
			}
			name = b.useBackend(name, ing.Namespace, p.Backend.Service.Name, port, ing).name
			b.routes = append(b.routes, Route{Ingress: ref, Host: rule.Host, Path: path, PathType: typ, Backend: name})
		}
	}
}

// backendName checks an Ingress backend and names the HAProxy backend for
// it: "<namespace>_<service>_<port as written>".
func (b *builder) backendName(ref ObjectRef, be networkingv1.IngressBackend) (string, networkingv1.ServiceBackendPort, bool) {
	svc := be.Service
	if svc == nil {
		b.problem(ref, ReasonUnsupportedBackend, "resource backends are not supported; only Service backends")
		return "", networkingv1.ServiceBackendPort{}, false
	}
	var port string
	switch {
	case svc.Port.Name != "":
		port = svc.Port.Name
	case svc.Port.Number > 0:
		port = strconv.Itoa(int(svc.Port.Number))
	default:
		b.problem(ref, ReasonInvalidBackend, "backend Service %q names no port", svc.Name)
		return "", networkingv1.ServiceBackendPort{}, false
	}
	name := ref.Namespace + "_" + svc.Name + "_" + port
	if !validBackendName(ref.Namespace, svc.Name, port) {
		b.problem(ref, ReasonInvalidBackend, "backend Service %q port %q: names must be DNS labels ([a-z0-9-], at most 63)", svc.Name, port)
		return "", networkingv1.ServiceBackendPort{}, false
	}
	return name, svc.Port, true
}

// validBackendName keeps each part a DNS label ([a-z0-9-], at most 63),
// so the parts join with '_' without ambiguity and the name goes into
// haproxy.cfg unquoted.
func validBackendName(parts ...string) bool {
	for _, p := range parts {
		if checkDNSLabel(p) != nil {
			return false
		}
	}
	return true
}

// useBackend registers that ing (nil for the flag's default backend) routes
// to the Service port whose backend is named base, and returns the backend
// variant that serves ing with its own Ingress-scope settings.
func (b *builder) useBackend(base, ns, svc string, port networkingv1.ServiceBackendPort, ing *networkingv1.Ingress) *backendState {
	id := variantID{base: base, key: b.variantKey(ns, svc, ing)}
	st := b.variants[id]
	if st == nil {
		st = &backendState{name: b.variantName(id), base: base, namespace: ns, service: svc, port: port, origin: b.inRule}
		b.backends[st.name] = st
		b.variants[id] = st
	}
	// Ingresses are processed one at a time, oldest first, so a repeat is
	// always the last one added.
	if ing != nil && (len(st.users) == 0 || st.users[len(st.users)-1] != ing) {
		st.users = append(st.users, ing)
	}
	return st
}

// defaultBackend picks the backend for requests no rule matches:
// --default-backend-service when set (a tenant never overrides the
// operator), else the oldest Ingress spec.defaultBackend, else none. Each
// namespace's oldest spec.defaultBackend is also that namespace's own
// default: the hosts it owns fall back to it (buildMaps).
func (b *builder) defaultBackend(ings []*networkingv1.Ingress) {
	var winner *networkingv1.Ingress
	nsWinner := map[string]*networkingv1.Ingress{}
	for _, ing := range ings {
		db := ing.Spec.DefaultBackend
		if db == nil {
			continue
		}
		ref := ingressRef(ing)
		name, port, ok := b.backendName(ref, *db)
		if !ok {
			continue
		}
		if older := nsWinner[ing.Namespace]; older != nil {
			b.problem(ref, ReasonDefaultBackendConflict, "spec.defaultBackend ignored: older Ingress %s sets this namespace's default backend (%s)",
				older.Name, b.nsDefaults[ing.Namespace])
			continue
		}
		nsWinner[ing.Namespace] = ing
		if b.d.NamespaceDefaults == nil {
			b.d.NamespaceDefaults = map[string]ObjectRef{}
		}
		b.d.NamespaceDefaults[ing.Namespace] = ref
		name = b.useBackend(name, ing.Namespace, db.Service.Name, port, ing).name
		b.nsDefaults[ing.Namespace] = name
		if b.o.DefaultBackendService != "" {
			continue
		}
		if winner != nil {
			if !b.o.AllowCrossNamespaceHosts {
				b.problem(ref, ReasonDefaultBackendConflict, "spec.defaultBackend answers only for the hosts of this namespace: another namespace sets the default backend for other requests")
			}
			continue
		}
		winner = ing
		b.d.DefaultBackend = name
		b.d.DefaultSource = ref
	}
	if b.o.DefaultBackendService == "" {
		return
	}
	// No object to attach an Event to: the problem is only logged.
	flagRef := ObjectRef{Kind: "Flag"}
	ns, name, ok := strings.Cut(b.o.DefaultBackendService, "/")
	if !ok || checkDNSLabel(ns) != nil || checkDNSLabel(name) != nil {
		b.problem(flagRef, ReasonInvalidOption, "--default-backend-service=%q: want NAMESPACE/NAME; the built-in 404 answers unmatched requests",
			b.o.DefaultBackendService)
		return
	}
	svc := b.services[nsName{ns, name}]
	if svc == nil {
		b.problem(serviceRef(ns, name), ReasonServiceNotFound, "--default-backend-service %s/%s: Service not found; the built-in 404 answers unmatched requests", ns, name)
		return
	}
	sp, ok := firstTCPPort(svc)
	if !ok {
		b.problem(serviceRef(ns, name), ReasonPortNotFound, "--default-backend-service %s/%s: Service has no TCP port; the built-in 404 answers unmatched requests", ns, name)
		return
	}
	port := networkingv1.ServiceBackendPort{Number: sp.Port}
	bname := ns + "_" + name + "_" + strconv.Itoa(int(sp.Port))
	st := b.useBackend(bname, ns, name, port, nil)
	st.fromFlag = true
	b.d.DefaultBackend = st.name
}

func isTCP(p corev1.Protocol) bool { return p == "" || p == corev1.ProtocolTCP }

func firstTCPPort(svc *corev1.Service) (corev1.ServicePort, bool) {
	for _, sp := range svc.Spec.Ports {
		if isTCP(sp.Protocol) {
			return sp, true
		}
	}
	return corev1.ServicePort{}, false
}

// secretRefs lists the TLS Secrets that served Ingresses name, so the kube
// layer watches only those.
func (b *builder) secretRefs(ings []*networkingv1.Ingress) {
	for _, ing := range ings {
		for _, tls := range ing.Spec.TLS {
			if tls.SecretName != "" {
				b.d.SecretRefs = append(b.d.SecretRefs, ing.Namespace+"/"+tls.SecretName)
			}
		}
	}
	slices.Sort(b.d.SecretRefs)
	b.d.SecretRefs = slices.Compact(b.d.SecretRefs)
}

// routeMapEntries writes routes into the MapExact and MapPrefix entries.
// Exact routes go first so that an Exact rule owns its key in MapExact
// even when a Prefix rule for the same path is older.
func routeMapEntries(routes []Route, exact, prefix map[string]string) {
	for _, r := range routes {
		if r.PathType == PathExact {
			exact[r.Host+r.Path] = r.Backend
		}
	}
	for _, r := range routes {
		if r.PathType != PathPrefix {
			continue
		}
		if r.Path == "/" {
			prefix[r.Host+"/"] = r.Backend
			continue
		}
		if _, owned := exact[r.Host+r.Path]; !owned {
			exact[r.Host+r.Path] = r.Backend
		}
		prefix[r.Host+r.Path+"/"] = r.Backend
	}
}

// buildMaps writes the routes into the lookup maps the HAProxy frontend
// uses.
func (b *builder) buildMaps() {
	exact := make(map[string]string, len(b.routes))
	prefix := make(map[string]string, len(b.routes))
	b.d.Maps[MapExact], b.d.Maps[MapPrefix] = exact, prefix
	routeMapEntries(b.routes, exact, prefix)
	if !b.o.AllowCrossNamespaceHosts {
		b.ownerMaps(exact, prefix)
	}
}

// ownerMaps keep the requests for a host within its owner's namespace: the
// host-owner map names each routed host's namespace as "@<namespace>",
// and every namespace's host-less rules are repeated under keys
// "@<namespace>/path", which the frontend looks up instead of the plain
// host-less keys for a host that has an owner. An owner namespace's hosts
// then fall back to its own default backend, or to the operator's, never to
// another namespace's.
func (b *builder) ownerMaps(exact, prefix map[string]string) {
	if len(b.hostOwners) == 0 {
		return
	}
	owners := make(map[string]string, len(b.hostOwners))
	for h, ns := range b.hostOwners {
		owners[h] = "@" + ns
	}
	b.d.Maps[MapHostOwner] = owners
	for _, r := range b.routes {
		// A scoped host-less route ("@<scope>") is looked up with its
		// scope after the owner: "@<namespace>@<scope>/path".
		if host, _ := splitScope(r.Host); host != "" {
			continue
		}
		key := "@" + r.Ingress.Namespace + r.Host + r.Path
		switch {
		case r.PathType == PathExact:
			exact[key] = r.Backend
		case r.Path == "/":
			prefix[key] = r.Backend
		default:
			if _, taken := exact[key]; !taken {
				exact[key] = r.Backend
			}
			prefix[key+"/"] = r.Backend
		}
	}
	for _, ns := range slices.Sorted(maps.Values(b.hostOwners)) {
		key := "@" + ns + "/"
		if _, ok := prefix[key]; ok {
			continue
		}
		switch {
		case b.nsDefaults[ns] != "":
			prefix[key] = b.nsDefaults[ns]
		case b.d.DefaultSource.Namespace != "" && b.d.DefaultSource.Namespace != ns:
			// The global default is another namespace's backend.
			prefix[key] = BackendNotFound
		}
	}
}

// finish sorts everything that is a list, so output never depends on map
// iteration or snapshot order.
func (b *builder) finish() {
	d := b.d
	slices.SortFunc(b.routes, compareRoutes)
	d.Routes = NewRouteList(b.routes)
	slices.SortFunc(d.Served, compareRefs)
	slices.SortFunc(d.Problems, func(x, y Problem) int {
		if c := compareRefs(x.Object, y.Object); c != 0 {
			return c
		}
		if c := cmp.Compare(x.Reason, y.Reason); c != 0 {
			return c
		}
		return cmp.Compare(x.Message, y.Message)
	})
	d.Problems = slices.Compact(d.Problems)
}

func compareRefs(a, b ObjectRef) int {
	if c := cmp.Compare(a.Kind, b.Kind); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	return cmp.Compare(a.Name, b.Name)
}

// compareRoutes orders routes by host, path and type (unique among served
// routes, which Match relies on), then Ingress.
func compareRoutes(a, b Route) int {
	if c := cmp.Compare(a.Host, b.Host); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Path, b.Path); c != 0 {
		return c
	}
	if c := cmp.Compare(a.PathType, b.PathType); c != 0 {
		return c
	}
	return compareRefs(a.Ingress, b.Ingress)
}
