package model

import (
	"maps"
	"slices"

	networkingv1 "k8s.io/api/networking/v1"
)

// SSL passthrough: the hosts of an Ingress (or of the rules whose Service
// asks for it) are not terminated by HAProxy. A TCP frontend on the HTTPS
// port reads the SNI of the ClientHello, looks it up in MapSSLPassthrough
// and forwards the TLS stream untouched to a mode tcp backend of the
// Service port, whose pods terminate TLS with their own certificate. Every
// other SNI goes on to the terminating https frontend. The map changes at
// run time, so a new passthrough host for a backend that exists needs no
// reload.

// MapSSLPassthrough maps a TLS server name (a host, or "*.domain" for a
// wildcard rule) to its passthrough backend; a TLS listener's socket of
// its own (gateway_ports.go) follows the name as "@<scope>".
const MapSSLPassthrough = "ssl-passthrough"

// PassthroughReject is the MapSSLPassthrough value that closes the
// connection: the hosts of a TLSRoute whose backend cannot be resolved,
// which the Gateway API wants refused rather than handed to the
// terminating frontend. Upper case, so no backend name can be it.
const PassthroughReject = "REJECT"

// PassthroughSuffix ends the name of the mode tcp backend of a Service
// port that is passed through: "<namespace>_<service>_<port>" + suffix. The
// four '_'-separated parts cannot collide with an HTTP backend's three.
const PassthroughSuffix = "_passthrough"

// ReasonInvalidPassthrough is the Event reason for a passthrough rule that
// cannot apply.
const ReasonInvalidPassthrough = "InvalidPassthrough"

// ReasonPassthroughHost warns an Ingress that HTTPS for one of its hosts is
// passed through by another rule.
const ReasonPassthroughHost = "PassthroughHost"

var sslPassthrough = newHandle(boolParser())

func passthroughSettings() []Setting {
	return []Setting{sslPassthrough.register(Setting{
		Name: "ssl-passthrough", Example: "true", Default: "false", Scopes: ScopeConfigMap | ScopeIngress | ScopeService,
		Doc: "Pass TLS through to the pods, which terminate it with their own certificate: HTTPS connections are routed by SNI to a mode tcp backend of the rule's Service port, " +
			"without reading the requests (paths, HTTP annotations and plain-HTTP routing do not apply to these hosts). On a Service: the rules routing to it. " +
			"A new passthrough host is a map entry at run time; a new passthrough backend, and the first passthrough host, reload.",
	}, TargetTLS)}
}

// passthrough reports whether a rule of ing routing to Service svc of ns is
// passed through: the Service's annotation, else the Ingress's, else the
// ConfigMap's.
func (b *builder) passthrough(ing *networkingv1.Ingress, svc string) bool {
	if s := b.services[nsName{ing.Namespace, svc}]; s != nil {
		if on, ok := sslPassthrough.get(b.serviceSettings(s)); ok {
			return on
		}
	}
	if on, ok := sslPassthrough.get(b.ingValues[ing]); ok {
		return on
	}
	on, _ := sslPassthrough.get(b.cmValues)
	return on
}

// passthroughRule claims host for the passthrough backend of the Service
// port a path of ing names. Paths do not apply: the first path of the
// oldest Ingress gives the host its backend.
func (b *builder) passthroughRule(ing *networkingv1.Ingress, host, name, svc string, port networkingv1.ServiceBackendPort) {
	ref := ingressRef(ing)
	if host == "" {
		b.problem(ref, ReasonInvalidPassthrough, "ssl-passthrough routes by TLS server name: a rule without host cannot be passed through; the path is ignored")
		return
	}
	// Passthrough takes every HTTPS connection for the host: only from the
	// host's owner namespace (whatever --allow-cross-namespace-hosts says),
	// and not away from an older Ingress that routes the host over HTTP.
	if owner, ok := b.hostOwners[host]; ok && owner != ing.Namespace {
		b.problem(ref, ReasonRuleConflict, "host %q is taken by another namespace; ssl-passthrough for it is ignored", host)
		return
	}
	if first := b.httpHosts[host]; first != nil && first != ing {
		b.problem(ref, ReasonRuleConflict, "host %q is served by older Ingress %s with TLS terminated by HAProxy; ssl-passthrough for it is ignored",
			host, first.Name)
		return
	}
	if c, taken := b.passthroughHosts[host]; taken {
		if c.base != name+PassthroughSuffix {
			b.problem(ref, ReasonRuleConflict, "host %q is passed through to %s by Ingress %s/%s already; this path (Service %s) is ignored",
				host, c.backend, c.ing.Namespace, c.ing.Name, svc)
		}
		return
	}
	if b.passthroughHosts == nil {
		b.passthroughHosts = map[string]passthroughClaim{}
	}
	if _, ok := b.hostOwners[host]; !ok {
		b.hostOwners[host] = ing.Namespace
	}
	// The Ingress's own variant of the passthrough backend, as for its
	// HTTP routes (variants.go).
	st := b.useBackend(name+PassthroughSuffix, ing.Namespace, svc, port, ing)
	st.passthrough = true
	b.passthroughHosts[host] = passthroughClaim{claim: claim{ing: ing, backend: st.name}, base: st.base}
}

// passthroughClaim is the Ingress passing a host through, with its backend
// variant and that variant's base name.
type passthroughClaim struct {
	claim
	base string
	// route is the TLSRoute passing the host through, when no Ingress
	// does (gateway_l4.go).
	route ObjectRef
}

// owner names the object passing the host through.
func (c passthroughClaim) owner() string {
	if c.ing == nil {
		return c.route.String()
	}
	return "Ingress " + c.ing.Namespace + "/" + c.ing.Name
}

// passthroughMap fills MapSSLPassthrough and tells the Ingresses with
// terminated rules for a passed-through host that HTTPS does not reach them.
func (b *builder) passthroughMap() {
	if len(b.passthroughHosts) == 0 {
		return
	}
	m := make(map[string]string, len(b.passthroughHosts))
	for host, c := range b.passthroughHosts {
		m[host] = c.backend
	}
	b.d.Maps[MapSSLPassthrough] = m
	told := map[ObjectRef]bool{}
	for _, r := range b.routes {
		c, ok := b.passthroughHosts[r.Host]
		if !ok || r.Host == "" || told[r.Ingress] {
			continue
		}
		told[r.Ingress] = true
		b.problem(r.Ingress, ReasonPassthroughHost, "host %q is passed through by %s: HTTPS connections for it reach %s, the rules of this %s serve it on plain HTTP only",
			r.Host, c.owner(), c.backend, r.Ingress.Kind)
	}
}

// passthroughBackend makes d the mode tcp backend of a passed-through
// Service port. HTTP settings cannot apply to a stream HAProxy does not
// decrypt; the security ones (access lists, authentication, rate limiting)
// must not silently stop applying, so such a backend gets no servers. The
// pods terminate the client's TLS: server TLS settings would wrap it in a
// second layer.
func (b *builder) passthroughBackend(d *backendDraft, st *backendState) {
	d.TCP = true
	d.HTTP = HTTPRules{}
	d.TLS = BackendTLS{}
	f := d.Features
	var refused []string
	for _, x := range []struct {
		set  bool
		name string
	}{
		{f.AllowList != "", "allow-list"}, {f.DenyList != "", "deny-list"},
		{f.AuthRealm != "" || d.feat.authType != "", "auth-type"},
		{f.RateLimit.Requests != 0, "rate-limit-requests"}, {f.Deny != 0, "an invalid security setting"},
	} {
		if x.set {
			refused = append(refused, x.name)
		}
	}
	if len(refused) == 0 {
		return
	}
	d.endpointsFrom.failClosed = true
	b.userProblem(st, ReasonInvalidPassthrough, "ssl-passthrough: %v cannot apply to a TLS stream HAProxy does not decrypt; backend %s gets no servers (fail closed)",
		refused, st.name)
}

// PassthroughHosts are the passed-through hosts of d, sorted.
func PassthroughHosts(d *Desired) []string {
	return slices.Sorted(maps.Keys(d.Maps[MapSSLPassthrough]))
}
