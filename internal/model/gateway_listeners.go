package model

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// Gateway listeners map onto what HAProxy already serves: HTTP listeners
// onto the http frontend, HTTPS listeners onto the https frontend (their
// certificates join the Ingress certificates in the crt-list, selected by
// SNI), TLS listeners onto the SNI passthrough frontend in front of it, and
// TCP listeners onto a mode tcp frontend of their own port, like
// --configmap-tcp-services entries. A listener names a port the clients
// use: the http and https frontends accept their bind port and the
// protocol's standard port (80, 443), since the edge's published port is
// often translated in front of it.

// listenerKinds are the route kinds a listener of each protocol takes.
var listenerKinds = map[gwv1.ProtocolType][]gwv1.Kind{
	gwv1.HTTPProtocolType:  {"HTTPRoute", grpcRouteKind},
	gwv1.HTTPSProtocolType: {"HTTPRoute", grpcRouteKind},
	gwv1.TLSProtocolType:   {"TLSRoute"},
	gwv1.TCPProtocolType:   {"TCPRoute"},
}

// Standard ports, accepted for the http and https frontends whatever they
// bind.
const (
	standardHTTPPort  = 80
	standardHTTPSPort = 443
)

// ReasonInvalidCertificateRef is the Event reason of an HTTPS listener's
// certificateRef that cannot be served.
const ReasonInvalidCertificateRef = "InvalidCertificateRef"

func routeKind(k gwv1.Kind) gwv1.RouteGroupKind {
	return gwv1.RouteGroupKind{Group: ptr(gwv1.Group(GatewayGroup)), Kind: k}
}

func gatewayRef(gw *gwv1.Gateway) ObjectRef {
	return ObjectRef{Kind: "Gateway", Namespace: gw.Namespace, Name: gw.Name}
}

// allows reports whether routes of namespace ns may attach to the listener.
func (l *listenerState) allows(b *builder, ns string) bool {
	switch l.from {
	case gwv1.NamespacesFromAll:
		return true
	case gwv1.NamespacesFromSelector:
		return l.selector != nil && l.selector.Matches(labels.Set(b.namespaceLabels(ns)))
	}
	return ns == l.gw.Namespace
}

// programmed reports whether HAProxy serves the listener's routes.
func (l *listenerState) programmed() bool { return l.valid && !l.unresolved && !l.noAddress }

// supports reports whether the listener takes routes of kind k.
func (l *listenerState) supports(k gwv1.Kind) bool {
	return slices.ContainsFunc(l.status.SupportedKinds, func(x gwv1.RouteGroupKind) bool { return x.Kind == k })
}

// namespaceLabels are the labels of namespace ns (nil when unknown).
func (b *builder) namespaceLabels(ns string) map[string]string {
	if b.nsLabels == nil {
		b.nsLabels = make(map[string]map[string]string, len(b.s.Namespaces))
		for _, n := range b.s.Namespaces {
			if n != nil {
				b.nsLabels[n.Name] = n.Labels
			}
		}
	}
	return b.nsLabels[ns]
}

// listenerPort says whether HAProxy serves l's protocol on l's port.
func (b *builder) listenerPort(l *gwv1.Listener) (bool, string) {
	port := int(l.Port)
	switch l.Protocol {
	case gwv1.HTTPProtocolType:
		want := b.o.GatewayHTTPPort
		if want != 0 && port != want && port != standardHTTPPort {
			if msg := b.portProblem(l.Protocol, port); msg != "" {
				return false, msg
			}
		}
	case gwv1.HTTPSProtocolType, gwv1.TLSProtocolType:
		want := b.o.GatewayHTTPSPort
		if want < 0 {
			return false, "HTTPS is not served by this edge"
		}
		if want != 0 && port != want && port != standardHTTPSPort {
			if msg := b.portProblem(l.Protocol, port); msg != "" {
				return false, msg
			}
		}
	case gwv1.TCPProtocolType:
		for _, p := range []int{b.o.GatewayHTTPPort, b.o.GatewayHTTPSPort} {
			if p > 0 && port == p {
				return false, fmt.Sprintf("port %d is served by the HTTP or HTTPS frontend", port)
			}
		}
		if cm := b.s.TCPServices; cm != nil {
			if _, taken := cm.Data[fmt.Sprint(port)]; taken {
				return false, fmt.Sprintf("port %d is taken by ConfigMap %s/%s", port, cm.Namespace, cm.Name)
			}
		}
	}
	return true, ""
}

func portsText(bind, standard int) string {
	if bind == standard {
		return fmt.Sprint(bind)
	}
	return fmt.Sprintf("%d (or %d)", bind, standard)
}

// listenerConflictKey groups listeners that one HAProxy frontend would
// have to tell apart: by hostname on the http frontend and on the TLS
// port (SNI), by port for TCP.
func listenerConflictKey(l *gwv1.Listener, scope string) string {
	host := ""
	if l.Hostname != nil {
		host = strings.ToLower(string(*l.Hostname))
	}
	switch l.Protocol {
	case gwv1.HTTPProtocolType:
		return "http|" + scope + "|" + host
	case gwv1.HTTPSProtocolType, gwv1.TLSProtocolType:
		return "tls|" + scope + "|" + host
	}
	return fmt.Sprintf("tcp|%d", l.Port)
}

// gatewayListeners checks each listener and gives it its status; routes
// attach afterwards to the valid ones.
func (b *builder) gatewayListeners(gw *gwv1.Gateway) []*listenerState {
	var out []*listenerState
	seen := map[string]string{}
	for i := range gw.Spec.Listeners {
		l := &gw.Spec.Listeners[i]
		ls := &listenerState{gw: gw, l: l, status: &gwv1.ListenerStatus{Name: l.Name}, valid: true, from: gwv1.NamespacesFromSame}
		gen := gw.Generation
		accepted := cond(string(gwv1.ListenerConditionAccepted), true, string(gwv1.ListenerReasonAccepted), "", gen)
		resolved := cond(string(gwv1.ListenerConditionResolvedRefs), true, string(gwv1.ListenerReasonResolvedRefs), "", gen)
		conflicted := cond(string(gwv1.ListenerConditionConflicted), false, string(gwv1.ListenerReasonNoConflicts), "", gen)
		reject := func(reason gwv1.ListenerConditionReason, msg string) {
			ls.valid = false
			accepted = cond(string(gwv1.ListenerConditionAccepted), false, string(reason), msg, gen)
		}
		kinds, known := listenerKinds[l.Protocol]
		if !known {
			reject(gwv1.ListenerReasonUnsupportedProtocol, fmt.Sprintf("protocol %s is not served; HTTP, HTTPS, TLS and TCP are", l.Protocol))
		} else if ok, msg := b.listenerPort(l); !ok {
			reject(gwv1.ListenerReasonPortUnavailable, msg)
		}
		if l.Hostname != nil && l.Protocol != gwv1.TCPProtocolType {
			ls.hostname = strings.ToLower(string(*l.Hostname))
		}
		if ls.valid {
			ls.scope, _ = b.listenerScope(gw, l.Protocol, int(l.Port))
		}
		if ga, ok := b.gwAddrs[nsName{gw.Namespace, gw.Name}]; ok && ga.addr == "" {
			ls.noAddress = true
		}
		// Only listeners HAProxy could serve can conflict.
		if ls.valid {
			key := listenerConflictKey(l, ls.scope)
			if other, taken := b.gwSockets[ls.scope]; taken && ls.scope != "" && (other == gwv1.HTTPProtocolType) != (l.Protocol == gwv1.HTTPProtocolType) {
				// One socket cannot speak HTTP and TLS; HTTPS and TLS
				// listeners share one, told apart by SNI.
				ls.valid = false
				conflicted = cond(string(gwv1.ListenerConditionConflicted), true, string(gwv1.ListenerReasonProtocolConflict),
					fmt.Sprintf("%s is served there by %s listener", ls.scope[1:], map[bool]string{true: "a TLS", false: "an " + string(other)}[other == gwv1.TLSProtocolType]), gen)
			} else if first, dup := seen[key]; dup {
				ls.valid = false
				reason, what := gwv1.ListenerReasonHostnameConflict, "hostname"
				if l.Protocol == gwv1.TCPProtocolType {
					reason, what = gwv1.ListenerReasonProtocolConflict, "port"
				}
				conflicted = cond(string(gwv1.ListenerConditionConflicted), true, string(reason),
					fmt.Sprintf("listener %s serves the same %s", first, what), gen)
			} else {
				seen[key] = string(l.Name)
				if ls.scope != "" {
					if b.gwSockets == nil {
						b.gwSockets = map[string]gwv1.ProtocolType{}
					}
					b.gwSockets[ls.scope] = l.Protocol
				}
			}
		}
		for _, k := range kinds {
			ls.status.SupportedKinds = append(ls.status.SupportedKinds, routeKind(k))
		}
		if ar := l.AllowedRoutes; ar != nil {
			if len(ar.Kinds) > 0 {
				var allowed []gwv1.RouteGroupKind
				invalid := false
				for _, k := range ar.Kinds {
					switch {
					case (k.Group == nil || string(*k.Group) == GatewayGroup) && slices.Contains(kinds, k.Kind):
						if !slices.ContainsFunc(allowed, func(x gwv1.RouteGroupKind) bool { return x.Kind == k.Kind }) {
							allowed = append(allowed, routeKind(k.Kind))
						}
					default:
						invalid = true
					}
				}
				ls.status.SupportedKinds = allowed
				if invalid {
					resolved = cond(string(gwv1.ListenerConditionResolvedRefs), false, string(gwv1.ListenerReasonInvalidRouteKinds),
						fmt.Sprintf("%s listeners take %s", l.Protocol, kindList(kinds)), gen)
				}
				if len(allowed) == 0 {
					ls.valid = false
				}
			}
			if ns := ar.Namespaces; ns != nil && ns.From != nil {
				ls.from = *ns.From
				switch *ns.From {
				case gwv1.NamespacesFromAll, gwv1.NamespacesFromSame:
				case gwv1.NamespacesFromSelector:
					sel, err := metav1.LabelSelectorAsSelector(ns.Selector)
					switch {
					case ns.Selector == nil:
						reject(gwv1.ListenerReasonUnsupportedValue, "allowedRoutes.namespaces.from Selector needs a selector")
					case err != nil:
						reject(gwv1.ListenerReasonUnsupportedValue, fmt.Sprintf("allowedRoutes.namespaces.selector: %v", err))
					}
					ls.selector = sel
				default:
					reject(gwv1.ListenerReasonUnsupportedValue, fmt.Sprintf("allowedRoutes.namespaces.from %s is not supported", *ns.From))
				}
			}
		}
		if known {
			if c := b.listenerTLS(gw, ls); c != nil {
				if c.Type == string(gwv1.ListenerConditionAccepted) {
					accepted = *c
					ls.valid = false
					// A TLS mode Perimeter does not serve takes no route
					// kind: the suite checks supportedKinds is empty.
					ls.status.SupportedKinds = nil
				} else {
					resolved = *c
					ls.unresolved = true
				}
			}
		}
		programmed := cond(string(gwv1.ListenerConditionProgrammed), ls.programmed(), string(gwv1.ListenerReasonProgrammed), "", gen)
		if !ls.programmed() {
			programmed.Reason = string(gwv1.ListenerReasonInvalid)
		}
		ls.status.Conditions = []metav1.Condition{accepted, conflicted, programmed, resolved}
		ls.status.SupportedKinds = slices.Clip(ls.status.SupportedKinds)
		if ls.status.SupportedKinds == nil {
			ls.status.SupportedKinds = []gwv1.RouteGroupKind{}
		}
		out = append(out, ls)
	}
	return out
}

func kindList(ks []gwv1.Kind) string {
	s := make([]string, len(ks))
	for i, k := range ks {
		s[i] = string(k)
	}
	return strings.Join(s, ", ")
}

// listenerTLS checks the tls section of HTTPS and TLS listeners and loads
// an HTTPS listener's certificates. It returns the condition that makes
// the listener invalid (Accepted=False or ResolvedRefs=False), or nil.
func (b *builder) listenerTLS(gw *gwv1.Gateway, ls *listenerState) *metav1.Condition {
	l, gen := ls.l, gw.Generation
	mode := gwv1.TLSModeTerminate
	if l.TLS != nil && l.TLS.Mode != nil {
		mode = *l.TLS.Mode
	}
	unsupported := func(msg string) *metav1.Condition {
		c := cond(string(gwv1.ListenerConditionAccepted), false, string(gwv1.ListenerReasonUnsupportedValue), msg, gen)
		return &c
	}
	switch l.Protocol {
	case gwv1.TLSProtocolType:
		if mode != gwv1.TLSModePassthrough {
			return unsupported("TLS listeners are served in mode Passthrough only")
		}
		return nil
	case gwv1.HTTPSProtocolType:
		if mode != gwv1.TLSModeTerminate {
			return unsupported("HTTPS listeners terminate TLS: tls.mode must be Terminate")
		}
	default:
		return nil
	}
	invalid := func(reason gwv1.ListenerConditionReason, format string, args ...any) *metav1.Condition {
		msg := fmt.Sprintf(format, args...)
		b.problem(gatewayRef(gw), string(reason), "listener %s: %s", l.Name, msg)
		c := cond(string(gwv1.ListenerConditionResolvedRefs), false, string(reason), msg, gen)
		return &c
	}
	if l.TLS == nil || len(l.TLS.CertificateRefs) == 0 {
		return invalid(gwv1.ListenerReasonInvalidCertificateRef, "an HTTPS listener needs tls.certificateRefs")
	}
	if b.gwTLS == nil {
		b.gwTLS = &tlsBuilder{b: b, pending: map[string]bool{}, certs: map[string]certResult{}}
		for _, p := range b.s.PendingSecrets {
			b.gwTLS.pending[p] = true
		}
	}
	t := b.gwTLS
	for _, ref := range l.TLS.CertificateRefs {
		if ref.Group != nil && *ref.Group != "" || ref.Kind != nil && *ref.Kind != "Secret" {
			return invalid(gwv1.ListenerReasonInvalidCertificateRef, "certificateRef %s: only Secrets are supported", ref.Name)
		}
		ns := gw.Namespace
		if ref.Namespace != nil {
			ns = string(*ref.Namespace)
		}
		if ns != gw.Namespace && !b.referenceGranted(gw.Namespace, "Gateway", ns, "", "Secret", string(ref.Name)) {
			return invalid(gwv1.ListenerReasonRefNotPermitted, "no ReferenceGrant in %s allows Gateways of %s to use Secret %s", ns, gw.Namespace, ref.Name)
		}
		k := nsName{ns, string(ref.Name)}
		r := t.loadCert(k)
		if why := b.s.RefusedSecrets[ns+"/"+string(ref.Name)]; why != "" {
			return invalid(gwv1.ListenerReasonInvalidCertificateRef, "Secret %s/%s is not read: %s", ns, ref.Name, why)
		}
		switch {
		case r.missing && t.pending[ns+"/"+string(ref.Name)]:
			// Still loading: served once it is.
		case r.err != nil:
			return invalid(gwv1.ListenerReasonInvalidCertificateRef, "%v", r.err)
		default:
			ls.certs = append(ls.certs, r.cert)
		}
	}
	return nil
}

// gatewayCertificates adds the HTTPS listeners' certificates to the
// crt-list after the Ingress ones, which keep the hosts they serve. A
// listener's certificate serves its hostname or, without one, the
// hostnames of the routes attached to it (never an empty SNI filter, as
// for Ingresses) and, in place of the generated default certificate, the
// names no other certificate serves: the Gateway's owner, unlike an
// Ingress's, is trusted with the whole edge.
func (t *tlsBuilder) gatewayCertificates() {
	b := t.b
	if b.gwTLS != nil {
		t.refs = append(t.refs, b.gwTLS.refs...)
	}
	if len(b.gwListeners) == 0 {
		return
	}
	served := map[string]string{} // host -> certificate
	byName := map[string]*Certificate{}
	for _, c := range b.d.TLS.Certificates {
		byName[c.Name] = c
		for _, h := range c.Hosts {
			served[h] = c.Name
		}
	}
	// The oldest Gateway wins a host, whatever the snapshot's order.
	listeners := slices.Clone(b.gwListeners)
	slices.SortStableFunc(listeners, func(x, y *listenerState) int { return olderMeta(&x.gw.ObjectMeta, &y.gw.ObjectMeta) })
	for _, ls := range listeners {
		if !ls.programmed() || ls.l.Protocol != gwv1.HTTPSProtocolType || len(ls.certs) == 0 {
			continue
		}
		ref := gatewayRef(ls.gw)
		hosts := []string{ls.hostname}
		if ls.hostname == "" {
			hosts = slices.Compact(slices.Sorted(slices.Values(ls.hosts)))
			hosts = slices.DeleteFunc(hosts, func(h string) bool { return h == "" })
			// A listener for every hostname also answers the names no
			// certificate is for, unless the operator chose the default
			// certificate (ConfigMap ssl-certificate or
			// --default-ssl-certificate).
			if d := b.d.TLS.Default; d == nil || d.Secret == (ObjectRef{}) {
				c := *ls.certs[0]
				c.Name = DefaultCertificateName
				c.Hosts = nil
				c.Ingresses = []ObjectRef{ref}
				b.d.TLS.Default = &c
			}
		}
		if len(hosts) == 0 {
			continue
		}
		for _, cert := range ls.certs {
			c := byName[cert.Name]
			if c == nil {
				cp := *cert
				cp.Hosts = nil
				c = &cp
				byName[c.Name] = c
				b.d.TLS.Certificates = append(b.d.TLS.Certificates, c)
			}
			for _, h := range hosts {
				if err := checkHost(h); err != nil {
					continue
				}
				if o, taken := served[h]; taken && o != c.Name {
					b.problem(ref, ReasonTLSHostConflict, "listener %s: host %q is served with certificate %s already; Secret %s/%s is not used for it",
						ls.l.Name, h, o, cert.Secret.Namespace, cert.Secret.Name)
					continue
				}
				served[h] = c.Name
				if !slices.Contains(c.Hosts, h) {
					c.Hosts = append(c.Hosts, h)
				}
			}
			if !slices.Contains(c.Ingresses, ref) {
				c.Ingresses = append(c.Ingresses, ref)
			}
		}
	}
	b.d.TLS.Certificates = slices.DeleteFunc(b.d.TLS.Certificates, func(c *Certificate) bool { return len(c.Hosts) == 0 })
	for _, c := range b.d.TLS.Certificates {
		slices.Sort(c.Hosts)
	}
	slices.SortFunc(b.d.TLS.Certificates, func(x, y *Certificate) int { return strings.Compare(x.Name, y.Name) })
}
