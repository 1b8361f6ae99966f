package model

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// HTTPRoute matches on method, headers, query parameters and path regular
// expressions ride on the conditional routes of route-acl
// (feat_routeacl.go): each such match gets a backend of its own whose
// condition the frontend tests when the request's host and path lead to
// it. Hosts and paths stay in the map files; the condition (method, header
// and parameter names, values quoted by the renderer) is in the frontend,
// so a new or changed condition reloads.
//
// Precedence is the Gateway API's: for the requests of a host and path
// key, the conditional backends listed are the matches that beat the
// plain route the main maps would choose (Exact path, then the longest
// prefix, then method, header count, query parameter count, the oldest
// route, rule and match order), and the frontend tries them in that
// order (the order of RouteACLs).

// RequestMatch is the part of an HTTPRoute match the maps cannot hold.
type RequestMatch struct {
	// Method is an HTTP method in upper case, or "".
	Method  string
	Headers []ValueMatch
	Query   []ValueMatch
	// PathRegex is an anchored regular expression the path must match.
	PathRegex string
	// RandomBelow, when not 0, takes the request when rand(100) is below
	// it: a share of a weighted rule (gateway_weights.go).
	RandomBelow int
}

// ValueMatch is a header or query parameter condition: Name is a header
// name (ValidHeaderName) or a query parameter name (ValidQueryParamName);
// Value is literal text, or an anchored regular expression when Regex.
type ValueMatch struct {
	Name, Value string
	Regex       bool
}

// Limits of a match the frontend can test in one use_backend line:
// HAProxy 2.6 reads at most 64 words a line.
const (
	maxMatchConditions = 6
	maxMatchValue      = 256
)

// httpMethods are the methods the Gateway API allows in a match.
var httpMethods = []string{"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"}

// ValidQueryParamName reports whether a query parameter name can be read
// by HAProxy's urlp() fetch as a bare word.
func ValidQueryParamName(s string) bool {
	if s == "" || len(s) > 256 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-._~", c) >= 0) {
			return false
		}
	}
	return true
}

// ValidMatchValue reports whether a literal header or parameter value can
// be quoted into a condition: printable text, not a lone brace (HAProxy
// reads "{" and "}" as the bounds of a condition even when quoted).
func ValidMatchValue(s string) bool {
	return s != "" && s != "{" && s != "}" && checkText(s, maxMatchValue) == nil
}

// Conditions counts the tests of m.
func (m *RequestMatch) Conditions() int {
	n := len(m.Headers) + len(m.Query)
	if m.Method != "" {
		n++
	}
	if m.PathRegex != "" {
		n++
	}
	return n
}

// anchorRegex makes a Gateway API regular expression match the whole
// value, as Envoy-based implementations do.
func anchorRegex(re string) string { return "^(?:" + re + ")$" }

// requestMatch translates the non-path part of m; why explains a match
// that cannot be served. nil without error: a plain path match.
func requestMatch(m gwv1.HTTPRouteMatch) (*RequestMatch, string) {
	rm := &RequestMatch{}
	if m.Path != nil && m.Path.Type != nil && *m.Path.Type == gwv1.PathMatchRegularExpression {
		if m.Path.Value == nil {
			return nil, "RegularExpression path without a value"
		}
		re := anchorRegex(*m.Path.Value)
		if err := checkRegex(re); err != nil {
			return nil, fmt.Sprintf("path %v", err)
		}
		rm.PathRegex = re
	}
	if m.Method != nil {
		meth := string(*m.Method)
		if !slices.Contains(httpMethods, meth) {
			return nil, fmt.Sprintf("method %q is not supported", meth)
		}
		rm.Method = meth
	}
	seen := map[string]bool{}
	for _, h := range m.Headers {
		name := string(h.Name)
		if err := validHeaderName(name); err != nil {
			return nil, err.Error()
		}
		// The first match of a name counts, as the Gateway API specifies.
		if seen[strings.ToLower(name)] {
			continue
		}
		seen[strings.ToLower(name)] = true
		vm, why := valueMatch(name, h.Value, h.Type != nil && *h.Type == gwv1.HeaderMatchRegularExpression)
		if why != "" {
			return nil, "header " + why
		}
		rm.Headers = append(rm.Headers, vm)
	}
	seen = map[string]bool{}
	for _, q := range m.QueryParams {
		name := string(q.Name)
		if !ValidQueryParamName(name) {
			return nil, fmt.Sprintf("query parameter name %q: only letters, digits and -._~ are supported", name)
		}
		if seen[name] {
			continue
		}
		seen[name] = true
		vm, why := valueMatch(name, q.Value, q.Type != nil && *q.Type == gwv1.QueryParamMatchRegularExpression)
		if why != "" {
			return nil, "query parameter " + why
		}
		rm.Query = append(rm.Query, vm)
	}
	switch n := rm.Conditions(); {
	case n == 0:
		return nil, ""
	case n > maxMatchConditions:
		return nil, fmt.Sprintf("a match with more than %d method, header, query parameter and path regex conditions is not supported", maxMatchConditions)
	}
	return rm, ""
}

func valueMatch(name, value string, regex bool) (ValueMatch, string) {
	if regex {
		re := anchorRegex(value)
		if err := checkRegex(re); err != nil {
			return ValueMatch{}, fmt.Sprintf("%s: %v", name, err)
		}
		return ValueMatch{Name: name, Value: re, Regex: true}, ""
	}
	if !ValidMatchValue(value) {
		return ValueMatch{}, fmt.Sprintf("%s: the value must be printable text of 1 to %d characters, not a lone brace", name, maxMatchValue)
	}
	return ValueMatch{Name: name, Value: value}, ""
}

// signature identifies a match's conditions: two matches of the same host
// and path with the same signature conflict.
func (m *RequestMatch) signature() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\x00%s\x00%d", m.Method, m.PathRegex, m.RandomBelow)
	for _, v := range m.Headers {
		fmt.Fprintf(&b, "\x00h%s=%t:%s", strings.ToLower(v.Name), v.Regex, v.Value)
	}
	for _, v := range m.Query {
		fmt.Fprintf(&b, "\x00q%s=%t:%s", v.Name, v.Regex, v.Value)
	}
	return b.String()
}

// gwCondRoute is one host and path of a conditional HTTPRoute match.
type gwCondRoute struct {
	route   Route
	match   *RequestMatch
	order   int // position among all conditional matches: route age, rule, match
	backend string
}

// matchEntry is a route (plain or conditional) as seen from one lookup
// key's host part, ordered by the Gateway API's precedence.
type matchEntry struct {
	exact   bool
	path    string
	method  bool
	headers int
	query   int
	cond    bool
	order   int
	backend string
}

func (e matchEntry) compare(o matchEntry) int {
	return cmp.Or(
		-boolCmp(e.exact, o.exact),
		-cmp.Compare(len(e.path), len(o.path)),
		-boolCmp(e.method, o.method),
		-cmp.Compare(e.headers, o.headers),
		-cmp.Compare(e.query, o.query),
		-boolCmp(e.cond, o.cond),
		cmp.Compare(e.order, o.order),
	)
}

func boolCmp(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// matchesPath reports whether a route of path p (type exact or prefix)
// takes the request path x.
func (e matchEntry) matchesPath(x string) bool {
	if e.exact {
		return x == e.path
	}
	return e.path == "/" || x == e.path || strings.HasPrefix(x, e.path+"/")
}

// condRouteFor registers a conditional match of an HTTPRoute.
func (b *builder) condRouteFor(ref ObjectRef, host, path string, typ PathType, m *RequestMatch, backend string) {
	b.gwConds = append(b.gwConds, gwCondRoute{
		route: Route{Ingress: ref, Host: host, Path: path, PathType: typ, Backend: backend},
		match: m, order: len(b.gwConds), backend: backend,
	})
	b.d.CondRoutes = append(b.d.CondRoutes, Route{Ingress: ref, Host: host, Path: path, PathType: typ, Backend: backend})
}

// keyHosts are the host parts of the lookup keys of a route's host.
func (b *builder) keyHosts(r Route) []string {
	hosts := []string{r.Host}
	if host, scope := splitScope(r.Host); host == "" && !b.o.AllowCrossNamespaceHosts {
		hosts = append(hosts, "@"+r.Ingress.Namespace+scope)
	}
	return hosts
}

// gatewayCondLists returns, by conditional-map key (exact and prefix),
// the conditional HTTPRoute backends that beat the plain route of that
// key, and adds the conditions to RouteACLs in precedence order.
func (b *builder) gatewayCondLists() (exact, prefix map[string][]string) {
	exact, prefix = map[string][]string{}, map[string][]string{}
	if len(b.gwConds) == 0 {
		return exact, prefix
	}
	byHost := map[string][]matchEntry{}
	for _, r := range b.routes {
		for _, h := range b.keyHosts(r) {
			byHost[h] = append(byHost[h], matchEntry{exact: r.PathType == PathExact, path: r.Path, order: -1, backend: r.Backend})
		}
	}
	entryOf := map[string]matchEntry{}
	for _, c := range b.gwConds {
		e := matchEntry{exact: c.route.PathType == PathExact, path: c.route.Path, method: c.match.Method != "",
			headers: len(c.match.Headers), query: len(c.match.Query), cond: true, order: c.order, backend: c.backend}
		entryOf[c.backend] = e
		for _, h := range b.keyHosts(c.route) {
			byHost[h] = append(byHost[h], e)
		}
	}
	for h, entries := range byHost {
		slices.SortStableFunc(entries, matchEntry.compare)
		list := func(x string, exactKey bool) []string {
			var out []string
			for _, e := range entries {
				if e.exact && !exactKey || !e.matchesPath(x) {
					continue
				}
				if !e.cond {
					break
				}
				if !slices.Contains(out, e.backend) {
					out = append(out, e.backend)
				}
			}
			return out
		}
		for _, e := range entries {
			if !e.cond {
				continue
			}
			switch {
			case e.exact:
				exact[h+e.path] = list(e.path, true)
			case e.path == "/":
				prefix[h+"/"] = list("/", false)
			default:
				exact[h+e.path] = list(e.path, true)
				prefix[h+e.path+"/"] = list(e.path, false)
			}
		}
	}
	var gw []matchEntry
	for _, e := range entryOf {
		gw = append(gw, e)
	}
	slices.SortFunc(gw, matchEntry.compare)
	for _, e := range gw {
		b.d.RouteACLs = append(b.d.RouteACLs, RouteACL{Backend: e.backend, Match: b.gwMatches[e.backend]})
	}
	return exact, prefix
}

// condRouteClaim routes a conditional match on one host and path. An
// Ingress rule for the same key wins, as over plain matches; among
// HTTPRoutes only a match with the same conditions conflicts, and the
// oldest wins.
func (b *builder) condRouteClaim(r *gwv1.HTTPRoute, i, mi int, key routeKey, rm *RequestMatch, refs []routeRef, http *HTTPRules) {
	ref := httpRouteRef(r)
	if c, taken := b.claims[key]; taken {
		b.problem(ref, ReasonRuleConflict, "host %q path %q (%s) is served by Ingress %s/%s, which wins over HTTPRoutes; this match is ignored",
			key.host, key.path, key.typ, c.ing.Namespace, c.ing.Name)
		return
	}
	sig := fmt.Sprintf("%s\x00%s\x00%s\x00%s", key.host, key.path, key.typ, rm.signature())
	if c, taken := b.gwCondClaims[sig]; taken {
		if c != ref {
			b.problem(ref, ReasonRuleConflict, "host %q path %q (%s) with the same conditions is already served by older %s; this match is ignored",
				key.host, key.path, key.typ, c)
		}
		return
	}
	if b.gwCondClaims == nil {
		b.gwCondClaims, b.gwMatches = map[string]ObjectRef{}, map[string]*RequestMatch{}
	}
	b.gwCondClaims[sig] = ref
	if host, _ := splitScope(key.host); host != "" {
		if _, ok := b.hostOwners[host]; !ok {
			b.hostOwners[host] = r.Namespace
		}
	}
	st := b.ruleBackend(r, i, mi, refs, http)
	b.gwMatches[st.name] = rm
	b.condRouteFor(ref, key.host, key.path, key.typ, rm, st.name)
}

// dumpRouteMatches writes the HTTPRoute match conditions in the order the
// frontend tries them.
func dumpRouteMatches(w *strings.Builder, d *Desired) {
	for _, a := range d.RouteACLs {
		m := a.Match
		if m == nil {
			continue
		}
		fmt.Fprintf(w, "  match %s:", a.Backend)
		if m.Method != "" {
			fmt.Fprintf(w, " method=%s", m.Method)
		}
		if m.PathRegex != "" {
			fmt.Fprintf(w, " path~%q", m.PathRegex)
		}
		if m.RandomBelow != 0 {
			fmt.Fprintf(w, " rand(100)<%d", m.RandomBelow)
		}
		for _, h := range m.Headers {
			fmt.Fprintf(w, " header %s%s%q", h.Name, matchOp(h.Regex), h.Value)
		}
		for _, q := range m.Query {
			fmt.Fprintf(w, " query %s%s%q", q.Name, matchOp(q.Regex), q.Value)
		}
		w.WriteString("\n")
	}
}

func matchOp(regex bool) string {
	if regex {
		return "~"
	}
	return "="
}
