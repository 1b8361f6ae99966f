package model

import (
	"cmp"
	"net/netip"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// finishBackends resolves every registered backend's Service, endpoints and
// settings, and records the problems on the Ingresses that route to it.
func (b *builder) finishBackends() {
	names := make([]string, 0, len(b.backends))
	for name := range b.backends {
		names = append(names, name)
	}
	slices.Sort(names)
	b.d.Backends = make([]*Backend, 0, len(names))
	for _, name := range names {
		b.d.Backends = append(b.d.Backends, b.finishBackend(b.backends[name]))
	}
}

func (b *builder) finishBackend(st *backendState) *Backend {
	draft := backendDraft{Backend: Backend{
		Name:      st.name,
		Namespace: st.namespace,
		Service:   st.service,
		Port:      portString(st.port),
	}}
	svc := b.services[nsName{st.namespace, st.service}]
	b.applyBackendSettings(&draft, st, svc)
	if st.http != nil {
		// A Gateway API rule's own backend: its filters are its rules.
		draft.HTTP = *st.http
	}
	if (st.h2c || routeH2C(st, svc)) && !draft.TLS.SSL {
		draft.TLS.Proto = "h2"
	}
	b.finishFeatures(&draft, st)

	// A backend whose Service or port is missing keeps its routes: HAProxy
	// answers 503 for them rather than letting the request fall through to
	// some other rule or the default backend.
	draft.endpointsFrom = endpointSource{port: st.port, serversIncrement: draft.serversIncrement}
	if st.passthrough {
		b.passthroughBackend(&draft, st)
	}
	switch reason := b.resolveEndpoints(&draft.Backend, svc); reason {
	case ReasonServiceNotFound:
		if st.service == "" {
			// A Gateway API redirect rule: no Service to serve.
			break
		}
		b.userProblem(st, ReasonServiceNotFound, "Service %s/%s not found; backend %s has no servers", st.namespace, st.service, st.name)
	case ReasonUnsupportedService:
		b.userProblem(st, ReasonUnsupportedService, "Service %s/%s is of type ExternalName (%q), which --disable-service-external-name turns off; backend %s has no servers",
			st.namespace, st.service, svc.Spec.ExternalName, st.name)
	case ReasonPortNotFound:
		b.userProblem(st, ReasonPortNotFound, "Service %s/%s has no TCP port %s; backend %s has no servers",
			st.namespace, st.service, draft.Port, st.name)
	}
	be := draft.Backend
	return &be
}

// resolveEndpoints sets be's Endpoints and Slots from svc and the snapshot's
// slices; it is the one place both Build and RefreshEndpoints compute them.
// It returns the reason the backend has no servers because of its Service
// ("" when the Service port exists); the caller reports it.
func (b *builder) resolveEndpoints(be *Backend, svc *corev1.Service) (reason string) {
	be.Endpoints = nil
	switch {
	case svc == nil:
		reason = ReasonServiceNotFound
	case svc.Spec.Type == corev1.ServiceTypeExternalName && b.o.DisableExternalName:
		reason = ReasonUnsupportedService
	case svc.Spec.Type == corev1.ServiceTypeExternalName:
		if port, ok := externalNamePort(svc, be.endpointsFrom.port); ok {
			be.Endpoints = b.externalNameEndpoints(svc, port)
		} else {
			reason = ReasonPortNotFound
		}
	default:
		if sp, ok := servicePort(svc, be.endpointsFrom.port); ok {
			be.Endpoints = b.endpoints(svc, sp)
		} else {
			reason = ReasonPortNotFound
		}
	}
	be.Slots = slotsFor(len(be.Endpoints), be.endpointsFrom.serversIncrement)
	if be.endpointsFrom.failClosed {
		be.Endpoints = nil
	}
	return reason
}

// slotsFor is the number of server slots for n endpoints. With an
// increment (servers-increment), slots come in blocks of that size, as the
// HAProxy Kubernetes Ingress Controller allocates them. Without one they
// are sized to need: n plus a quarter (at least one) free for scale-up,
// rounded up to a multiple of 4, so a backend costs HAProxy memory and file
// descriptors in proportion to its endpoints, and growing from n to 2n
// takes about three reloads. Every slot of a checked server holds a file
// descriptor, so the fixed 42 per backend of the peer made 1,000 backends
// need 42,000 of them.
func slotsFor(n, increment int) int {
	if increment >= 1 {
		return max(increment, (n+increment-1)/increment*increment)
	}
	return (n + max(1, n/4) + 3) / 4 * 4
}

func portString(p networkingv1.ServiceBackendPort) string {
	if p.Name != "" {
		return p.Name
	}
	return strconv.Itoa(int(p.Number))
}

// userProblem records a backend problem on every Ingress that routes to it,
// or on the Service when the flag's default backend is the only user.
func (b *builder) userProblem(st *backendState, reason, format string, args ...any) {
	st.userProblems = true
	for _, ing := range st.users {
		b.problem(ingressRef(ing), reason, format, args...)
	}
	for _, r := range st.routes {
		b.problem(r, reason, format, args...)
	}
	if st.fromFlag {
		b.problem(serviceRef(st.namespace, st.service), reason, format, args...)
	}
}

// externalNamePort is the port HAProxy connects to on the addresses of an
// ExternalName Service: the Service port's number, as a client of the
// Service's DNS name would use; a Service that declares no ports takes the
// number the Ingress names.
func externalNamePort(svc *corev1.Service, p networkingv1.ServiceBackendPort) (int, bool) {
	if sp, ok := servicePort(svc, p); ok {
		return int(sp.Port), true
	}
	if len(svc.Spec.Ports) == 0 && p.Name == "" && p.Number >= 1 && p.Number <= 65535 {
		return int(p.Number), true
	}
	return 0, false
}

// externalNameEndpoints turns the resolver's addresses for svc's DNS name
// into endpoints, through the same address checks as EndpointSlices: a DNS
// name can resolve to loopback or metadata addresses as easily as a slice
// can list them (CVE-2021-25740). A name not looked up yet has no servers
// and no problem; the resolver's first answer refreshes it.
func (b *builder) externalNameEndpoints(svc *corev1.Service, port int) []Endpoint {
	name := svc.Spec.ExternalName
	r, ok := b.s.ExternalNames[ExternalNameKey(name)]
	if !ok {
		return nil
	}
	if r.Err != "" {
		b.problem(serviceRef(svc.Namespace, svc.Name), ReasonExternalNameUnresolved,
			"ExternalName %q does not resolve (%s); its backends have no servers", name, r.Err)
		return nil
	}
	addrs := make([]netip.Addr, 0, len(r.Addrs))
	for _, a := range r.Addrs {
		a = a.Unmap().WithZone("")
		if why := b.refusedEndpoint(a); why != "" {
			b.problem(serviceRef(svc.Namespace, svc.Name), ReasonInvalidEndpoint,
				"ExternalName %q resolves to %s, which is %s; it is not used", name, a, why)
			continue
		}
		addrs = append(addrs, a)
	}
	if len(addrs) == 0 {
		return nil
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	addrs = slices.Compact(addrs)
	out := make([]Endpoint, len(addrs))
	for i, a := range addrs {
		out[i] = Endpoint{Address: a.String(), Port: port}
	}
	return out
}

// servicePort finds the Service port an Ingress names, by name or number.
func servicePort(svc *corev1.Service, p networkingv1.ServiceBackendPort) (corev1.ServicePort, bool) {
	for _, sp := range svc.Spec.Ports {
		if !isTCP(sp.Protocol) {
			continue
		}
		if p.Name != "" && sp.Name == p.Name || p.Name == "" && sp.Port == p.Number {
			return sp, true
		}
	}
	return corev1.ServicePort{}, false
}

// endpoints lists the addresses serving a Service port: the slice port with
// the Service port's name gives the target port. Ready endpoints serve;
// terminating ones that still serve are kept as draining so their current
// requests finish.
func (b *builder) endpoints(svc *corev1.Service, sp corev1.ServicePort) []Endpoint {
	type parsed struct {
		addr netip.Addr
		ep   Endpoint
	}
	sls := b.slices[nsName{svc.Namespace, svc.Name}]
	n := 0
	for _, sl := range sls {
		n += len(sl.Endpoints)
	}
	if n == 0 {
		return nil
	}
	found := make([]parsed, 0, n)
	for _, sl := range sls {
		var family func(netip.Addr) bool
		switch sl.AddressType {
		case discoveryv1.AddressTypeIPv4:
			family = netip.Addr.Is4
		case discoveryv1.AddressTypeIPv6:
			family = netip.Addr.Is6
		default:
			continue
		}
		port, ok := slicePort(sl, sp)
		if !ok {
			continue
		}
		for _, ep := range sl.Endpoints {
			draining, serve := endpointState(ep.Conditions)
			if !serve || len(ep.Addresses) == 0 {
				continue
			}
			// The addresses of one endpoint are fungible; kube-proxy uses
			// the first, and so do we.
			addr, err := netip.ParseAddr(ep.Addresses[0])
			if err != nil || !family(addr) || addr.Zone() != "" {
				b.problem(ObjectRef{Kind: kindEndpointSlice, Namespace: sl.Namespace, Name: sl.Name}, ReasonInvalidEndpoint,
					"address %q is not a plain %s address; the endpoint is ignored", ep.Addresses[0], sl.AddressType)
				continue
			}
			if why := b.refusedEndpoint(addr); why != "" {
				b.problem(serviceRef(svc.Namespace, svc.Name), ReasonInvalidEndpoint,
					"endpoint address %s is %s; it is not used (the Service's other endpoints still serve)", addr, why)
				continue
			}
			// netip refuses non-canonical IPv4 (leading zeros), so a parsed
			// IPv4 string is already canonical and need not be rebuilt.
			text := ep.Addresses[0]
			if !addr.Is4() {
				text = addr.String()
			}
			found = append(found, parsed{addr, Endpoint{Address: text, Port: port, Draining: draining}})
		}
	}
	if len(found) == 0 {
		return nil
	}
	slices.SortFunc(found, func(x, y parsed) int {
		if c := x.addr.Compare(y.addr); c != 0 {
			return c
		}
		if c := cmp.Compare(x.ep.Port, y.ep.Port); c != 0 {
			return c
		}
		// Ready before draining, so the duplicate dropped below is the
		// draining one when two slices disagree during a handover.
		switch {
		case x.ep.Draining == y.ep.Draining:
			return 0
		case y.ep.Draining:
			return -1
		}
		return 1
	})
	out := make([]Endpoint, 0, len(found))
	for i, f := range found {
		if i > 0 && f.addr == found[i-1].addr && f.ep.Port == found[i-1].ep.Port {
			continue
		}
		out = append(out, f.ep)
	}
	return out
}

const kindEndpointSlice = "EndpointSlice"

// slicePort finds the slice port for a Service port: same name, same
// protocol.
func slicePort(sl *discoveryv1.EndpointSlice, sp corev1.ServicePort) (int, bool) {
	for _, p := range sl.Ports {
		name := ""
		if p.Name != nil {
			name = *p.Name
		}
		proto := corev1.ProtocolTCP
		if p.Protocol != nil {
			proto = *p.Protocol
		}
		if name != sp.Name || !isTCP(proto) || p.Port == nil {
			continue
		}
		if n := int(*p.Port); n >= 1 && n <= 65535 {
			return n, true
		}
	}
	return 0, false
}

// endpointState reads an endpoint's conditions with the API's nil
// defaults: ready nil is true, serving nil is true, terminating nil is false.
func endpointState(c discoveryv1.EndpointConditions) (draining, serve bool) {
	if c.Ready == nil || *c.Ready {
		return false, true
	}
	terminating := c.Terminating != nil && *c.Terminating
	serving := c.Serving == nil || *c.Serving
	if terminating && serving {
		return true, true
	}
	return false, false
}

// thisNetwork is 0.0.0.0/8: as a destination, Linux treats it as this host.
var thisNetwork = netip.MustParsePrefix("0.0.0.0/8")

// refusedEndpoint says why HAProxy must never connect to addr, or "": an
// EndpointSlice writer could otherwise point a backend at the edge itself
// (the daemon's and HAProxy's local ports, a request loop through HAProxy)
// or at a link-local service such as cloud metadata (169.254.169.254).
func (b *builder) refusedEndpoint(addr netip.Addr) string {
	a := addr.Unmap()
	switch {
	case a.IsLoopback():
		return "a loopback address"
	case a.IsUnspecified() || a.Is4() && thisNetwork.Contains(a):
		return "an unspecified address"
	case a.IsLinkLocalUnicast():
		return "a link-local address"
	case a.IsMulticast() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "a multicast or broadcast address"
	case slices.Contains(b.o.LocalAddresses, a):
		return "an address of the edge host itself"
	}
	return ""
}
