package model

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// route-acl (a Service annotation of the HAProxy Kubernetes Ingress
// Controller): every route to the Service applies only when the request
// matches the condition; otherwise routing goes on as if the route did not
// exist (another route for the same host and path, a shorter one, the
// default backend). Two Ingresses with the same host and path, one to a
// Service with route-acl, make a header or cookie canary.
//
// Hosts and paths stay in map files: the conditional routes fill two maps
// keyed like MapExact and MapPrefix whose values list the conditional
// backends of the key. Each conditional backend gets one frontend rule
// (the condition is its Service's, so it is the same for all its routes):
// a new host or path for such a Service is a map entry, a new or changed
// condition a reload.

// Map names of the conditional routes: key (as in MapExact / MapPrefix) ->
// RouteACLValue of the conditional backends, or RouteACLShadow.
const (
	MapRouteACLExact  = "route-acl-exact"
	MapRouteACLPrefix = "route-acl-prefix"
)

// RouteACLShadow is the value of a key that a plain route serves more
// precisely than a shorter conditional prefix: the lookup stops there, so
// a conditional route never beats a longer plain one.
const RouteACLShadow = "-"

// ReasonInvalidRouteACL is the Event reason for routes not installed
// because their Service's route-acl is invalid.
const ReasonInvalidRouteACL = "InvalidRouteACL"

// RouteACL is the condition of one conditional backend.
type RouteACL struct {
	Backend string
	// Condition is the rendered anonymous ACL: "{ <fetch> -m <method>
	// [<pattern>...] }", checked token by token.
	Condition string
	// Match, when set, is an HTTPRoute match's condition instead, rendered
	// (values quoted) by the renderer.
	Match *RequestMatch
}

// RouteACLValue is the map value listing the conditional backends of a
// key, in the order they are tried: ",a,b,", so a frontend rule finds its
// backend with "-m sub ,<backend>,".
func RouteACLValue(backends []string) string {
	return "," + strings.Join(backends, ",") + ","
}

// Limits of a route-acl value.
const (
	maxRouteACLPatterns = 16
	maxRouteACLPattern  = 256
)

// routeACLMethods are the -m match methods route-acl accepts.
var routeACLMethods = []string{"str", "beg", "end", "sub", "found", "len", "int", "ip", "reg"}

var routeACLHandle = newHandle(parser[string]{
	desc:  "ACL condition: sample fetch [-m method] [pattern...]",
	parse: parseRouteACL,
})

func routeACLSettings() []Setting {
	return []Setting{routeACLHandle.register(Setting{
		Name: "route-acl", Example: "req.hdr(x-canary) -m str yes", Scopes: ScopeService, Target: TargetRouteACL,
		Doc: "Condition that every route (host and path) to the Service needs: when a request does not match it, routing goes on as if the route " +
			"did not exist (another Ingress's route for the same host and path, a shorter path, the default backend). Such a route does not conflict " +
			"with a plain route for the same host and path: it is tried first. Form: a sample fetch of the request (as in set-header values), then " +
			"optionally -m str|beg|end|sub|found|len|int|ip|reg (default: str with patterns, found without), then the patterns, separated by spaces. " +
			"A new host or path for the Service changes at run time; a new or changed condition reloads. An invalid value leaves the Service's routes out.",
	}, TargetRouteACL)}
}

// parseRouteACL checks a route-acl value and renders it as an anonymous
// ACL. Every token is checked: the fetch against the sample allow-list,
// the patterns as bare words HAProxy cannot read as anything else.
func parseRouteACL(s string) (string, error) {
	f := strings.Fields(s)
	if len(f) == 0 {
		return "", errors.New("empty condition")
	}
	fetch := f[0]
	if err := checkSample(fetch, SampleRequest); err != nil {
		return "", err
	}
	rest := f[1:]
	method := ""
	if len(rest) > 0 && rest[0] == "-m" {
		if len(rest) < 2 {
			return "", errors.New("-m without a match method")
		}
		method = rest[1]
		if !slices.Contains(routeACLMethods, method) {
			return "", fmt.Errorf("match method %q is not allowed (allowed: %s)", method, strings.Join(routeACLMethods, ", "))
		}
		rest = rest[2:]
	}
	switch {
	case method == "" && len(rest) == 0:
		method = "found"
	case method == "":
		method = "str"
	case method == "found" && len(rest) > 0:
		return "", errors.New("-m found takes no pattern")
	case method != "found" && len(rest) == 0:
		return "", fmt.Errorf("-m %s needs at least one pattern", method)
	}
	if len(rest) > maxRouteACLPatterns {
		return "", fmt.Errorf("more than %d patterns", maxRouteACLPatterns)
	}
	for i, p := range rest {
		if err := checkRouteACLPattern(method, p, i == 0); err != nil {
			return "", fmt.Errorf("pattern %q: %v", p, err)
		}
	}
	return "{ " + strings.Join(append([]string{fetch, "-m", method}, rest...), " ") + " }", nil
}

var intOperators = []string{"eq", "ne", "lt", "le", "gt", "ge"}

func checkRouteACLPattern(method, p string, first bool) error {
	if len(p) > maxRouteACLPattern {
		return fmt.Errorf("longer than %d characters", maxRouteACLPattern)
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c <= ' ' || c >= 0x7f || strings.IndexByte(`"'#{}\`, c) >= 0 {
			return fmt.Errorf("character %q not allowed", c)
		}
	}
	if strings.HasPrefix(p, "-") && method != "int" && method != "len" {
		// HAProxy would read it as a flag.
		return errors.New("must not start with '-'")
	}
	switch method {
	case "int", "len":
		if first && slices.Contains(intOperators, p) {
			return nil
		}
		if !intRangeRE(p) {
			return errors.New("want an integer, a range a:b, or eq|ne|lt|le|gt|ge then an integer")
		}
	case "ip":
		if _, err := netip.ParsePrefix(p); err == nil {
			return nil
		}
		if _, err := netip.ParseAddr(p); err != nil {
			return errors.New("want an IP address or a CIDR")
		}
	case "reg":
		return checkRegex(p)
	}
	return nil
}

// intRangeRE accepts "n", "-n", "n:m", "n:" and ":m".
func intRangeRE(p string) bool {
	lo, hi, isRange := strings.Cut(p, ":")
	num := func(s string, empty bool) bool {
		s = strings.TrimPrefix(s, "-")
		if s == "" {
			return empty
		}
		return len(s) <= 18 && allDigits(s)
	}
	if !isRange {
		return num(lo, false)
	}
	return (lo != "" || hi != "") && num(lo, true) && num(hi, true)
}

// routeACL is the condition of the routes to Service ns/svc: set reports
// whether the Service has a route-acl, ok whether it is valid.
func (b *builder) routeACL(ns, svc string) (cond string, set, ok bool) {
	s := b.services[nsName{ns, svc}]
	if s == nil {
		return "", false, false
	}
	v := b.serviceSettings(s)
	if cond, ok := routeACLHandle.get(v); ok {
		return cond, true, true
	}
	return "", hasRouteACL(s), false
}

// hasRouteACL reports whether svc sets route-acl, valid or not: an invalid
// value is not kept with the Service's values, yet its routes must stay
// out rather than turn into plain routes.
func hasRouteACL(svc *corev1.Service) bool {
	for _, key := range routeACLHandle.setting().annotations {
		if _, ok := svc.Annotations[key]; ok {
			return true
		}
	}
	return false
}

// condRoute registers a rule to a Service with route-acl: it never claims
// the host and path, so it neither loses nor wins against a plain rule.
func (b *builder) condRoute(ing *networkingv1.Ingress, host, path string, typ PathType, name, svc string, port networkingv1.ServiceBackendPort, cond string) {
	ref := ingressRef(ing)
	st := b.useBackend(name, ing.Namespace, svc, port, ing)
	for _, r := range b.d.CondRoutes {
		if r.Host == host && r.Path == path && r.PathType == typ && r.Backend == st.name {
			return
		}
	}
	if _, ok := b.hostOwners[host]; !ok && host != "" {
		b.hostOwners[host] = ing.Namespace
	}
	if _, ok := b.httpHosts[host]; !ok {
		if b.httpHosts == nil {
			b.httpHosts = map[string]*networkingv1.Ingress{}
		}
		b.httpHosts[host] = ing
	}
	b.d.CondRoutes = append(b.d.CondRoutes, Route{Ingress: ref, Host: host, Path: path, PathType: typ, Backend: st.name})
	if !slices.ContainsFunc(b.d.RouteACLs, func(a RouteACL) bool { return a.Backend == st.name }) {
		b.d.RouteACLs = append(b.d.RouteACLs, RouteACL{Backend: st.name, Condition: cond})
	}
}

// routeACLMaps fills the conditional maps from CondRoutes (oldest Ingress
// first, so a key lists its backends in that order) and shadows the plain
// keys longer than a conditional prefix.
func (b *builder) routeACLMaps() {
	if len(b.d.CondRoutes) == 0 {
		return
	}
	gwExact, gwPrefix := b.gatewayCondLists()
	lists := map[string][]string{}
	exactKeys, prefixKeys := map[string]bool{}, map[string]bool{}
	add := func(key, be string, exact bool) {
		if !slices.Contains(lists[key+"\x00"+boolKey(exact)], be) {
			lists[key+"\x00"+boolKey(exact)] = append(lists[key+"\x00"+boolKey(exact)], be)
		}
		if exact {
			exactKeys[key] = true
		} else {
			prefixKeys[key] = true
		}
	}
	for _, r := range b.d.CondRoutes {
		if r.Ingress.Kind != "Ingress" {
			continue
		}
		hosts := []string{r.Host}
		if r.Host == "" && !b.o.AllowCrossNamespaceHosts {
			// The hosts a namespace owns look host-less rules up under
			// "@<namespace>" (ownerMaps).
			hosts = append(hosts, "@"+r.Ingress.Namespace)
		}
		for _, h := range hosts {
			switch {
			case r.PathType == PathExact:
				add(h+r.Path, r.Backend, true)
			case r.Path == "/":
				add(h+"/", r.Backend, false)
			default:
				add(h+r.Path, r.Backend, true)
				add(h+r.Path+"/", r.Backend, false)
			}
		}
	}
	for k := range gwExact {
		exactKeys[k] = true
	}
	for k := range gwPrefix {
		prefixKeys[k] = true
	}
	value := func(l []string) string {
		if len(l) == 0 {
			return RouteACLShadow
		}
		return RouteACLValue(l)
	}
	exact, prefix := map[string]string{}, map[string]string{}
	for k := range exactKeys {
		exact[k] = value(append(lists[k+"\x00"+boolKey(true)], gwExact[k]...))
	}
	for k := range prefixKeys {
		prefix[k] = value(append(lists[k+"\x00"+boolKey(false)], gwPrefix[k]...))
	}
	// A plain key longer than a conditional prefix wins over it in the main
	// maps; the same key in the conditional maps stops their lookup there.
	for _, pair := range []struct {
		plain, cond map[string]string
		exact       bool
	}{{b.d.Maps[MapExact], exact, true}, {b.d.Maps[MapPrefix], prefix, false}} {
		for k := range pair.plain {
			if _, ok := pair.cond[k]; ok {
				continue
			}
			for p := range prefixKeys {
				_, gw := gwPrefix[p]
				// A plain exact key beats an HTTPRoute's prefix of the
				// same length ("/").
				if (len(k) > len(p) || pair.exact && gw && len(k) == len(p)) && strings.HasPrefix(k, p) {
					pair.cond[k] = RouteACLShadow
					break
				}
			}
		}
	}
	b.d.Maps[MapRouteACLExact], b.d.Maps[MapRouteACLPrefix] = exact, prefix
}

func boolKey(v bool) string {
	if v {
		return "e"
	}
	return "p"
}

// RouteACLCondition is the anonymous ACL a route-acl value renders to, for
// `perimeter explain` and tests.
func RouteACLCondition(v string) (string, error) { return parseRouteACL(v) }
