package model

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// HTTPRoute filters: header modifiers (set, add, remove), URLRewrite
// (hostname, full path, prefix), RequestRedirect (scheme, hostname,
// port, path, status code) and RequestMirror become rules of the rule's
// own backend.

// RouteFilters are the HTTPRoute filters HTTPRules has no field for.
type RouteFilters struct {
	AddRequestHeaders     []Header
	RemoveRequestHeaders  []string
	AddResponseHeaders    []Header
	RemoveResponseHeaders []string
	// Redirect answers with a Location built from the request: path and
	// query as they are after Rewrites.
	Redirect RouteRedirect
	// Mirrors are the RequestMirror filters whose backend resolved, in
	// the rule's order.
	Mirrors []RouteMirror
}

// RouteMirror sends a copy of Num in Den requests, as they are after the
// request header changes and Rewrites, to one server of Backend.
// HAProxy 2.6 has no mirroring of its own: the daemon's Lua action sends
// the copy (haproxy/lua/mirror.lua).
type RouteMirror struct {
	Backend  string
	Num, Den int
}

// RouteRedirect is a RequestRedirect: Scheme and Host "" keep the
// request's, Port 0 writes none.
type RouteRedirect struct {
	Set          bool
	Scheme, Host string
	Port         int
	Code         int
}

var redirectCodes = []int{301, 302, 303, 307, 308}

// routeFilters translates a rule's filters into the HTTP rules of its own
// backend; why explains a filter that cannot be served. Values are
// literal: no sample expressions.
func (b *builder) routeFilters(filters []gwv1.HTTPRouteFilter, matches []gwv1.HTTPRouteMatch) (*HTTPRules, string) {
	if len(filters) == 0 {
		return nil, ""
	}
	h := &HTTPRules{}
	for _, f := range filters {
		var why string
		switch f.Type {
		case gwv1.HTTPRouteFilterRequestHeaderModifier:
			h.RequestHeaders, h.Route.AddRequestHeaders, h.Route.RemoveRequestHeaders, why = headerModifier(f.RequestHeaderModifier, "RequestHeaderModifier")
		case gwv1.HTTPRouteFilterResponseHeaderModifier:
			h.ResponseHeaders, h.Route.AddResponseHeaders, h.Route.RemoveResponseHeaders, why = headerModifier(f.ResponseHeaderModifier, "ResponseHeaderModifier")
		case gwv1.HTTPRouteFilterRequestRedirect:
			why = b.routeRedirect(f.RequestRedirect, matches, h)
		case gwv1.HTTPRouteFilterURLRewrite:
			why = urlRewrite(f.URLRewrite, matches, h)
		case gwv1.HTTPRouteFilterRequestMirror:
			// The backend is resolved once the rule is known to be
			// served (routeMirrors).
			if _, _, why = mirrorFraction(f.RequestMirror); why == "" {
				why = mirrorRef(f.RequestMirror.BackendRef)
			}
		default:
			why = fmt.Sprintf("filter %s is not supported", f.Type)
		}
		if why != "" {
			return nil, why
		}
	}
	if h.Route.Redirect.Set && (h.SetHost != "" || len(h.RequestHeaders)+len(h.Route.AddRequestHeaders)+len(h.Route.RemoveRequestHeaders) > 0) {
		return nil, "RequestRedirect cannot be combined with URLRewrite hostname or request header changes"
	}
	return h, ""
}

// mirrorFraction is the share of requests a RequestMirror copies: all of
// them unless percent or fraction says.
func mirrorFraction(m *gwv1.HTTPRequestMirrorFilter) (num, den int, why string) {
	if m == nil {
		return 0, 0, "RequestMirror: no settings"
	}
	num, den = 1, 1
	switch {
	case m.Percent != nil && m.Fraction != nil:
		return 0, 0, "RequestMirror: percent and fraction are exclusive"
	case m.Percent != nil:
		num, den = int(*m.Percent), 100
	case m.Fraction != nil:
		num, den = int(m.Fraction.Numerator), 100
		if m.Fraction.Denominator != nil {
			den = int(*m.Fraction.Denominator)
		}
	}
	if den < 1 || num < 0 || num > den {
		return 0, 0, "RequestMirror: the share of requests must be between 0 and 1"
	}
	return num, den, ""
}

// mirrorRef refuses the rule of a mirror backendRef no backend can be
// named after, as routeBackend does for the rule's own backendRefs.
func mirrorRef(br gwv1.BackendObjectReference) string {
	if br.Port == nil {
		return "RequestMirror: backendRef names no port"
	}
	if !validBackendName(string(br.Name), fmt.Sprint(*br.Port)) {
		return "RequestMirror: backendRef Service name must be a DNS label"
	}
	return ""
}

// routeMirrors gives a served rule's RequestMirror filters their backends.
// A backendRef that cannot be used drops its mirror, not the rule, as the
// Gateway API asks: rr then says why.
func (b *builder) routeMirrors(r *gwv1.HTTPRoute, filters []gwv1.HTTPRouteFilter, h *HTTPRules) (rr *metav1.Condition) {
	for _, f := range filters {
		if f.Type != gwv1.HTTPRouteFilterRequestMirror {
			continue
		}
		num, den, why := mirrorFraction(f.RequestMirror)
		if why != "" {
			continue
		}
		ref, c, why := b.serviceRef(r, f.RequestMirror.BackendRef)
		if why != "" {
			// mirrorRef refused the rule already.
			continue
		}
		if c != nil {
			if rr == nil {
				rr = c
			}
			continue
		}
		st := b.useBackend(ref.base, ref.ns, ref.svc, networkingv1.ServiceBackendPort{Number: ref.port}, nil)
		if rk := httpRouteRef(r); !slices.Contains(st.routes, rk) {
			st.routes = append(st.routes, rk)
		}
		h.Route.Mirrors = append(h.Route.Mirrors, RouteMirror{Backend: st.name, Num: num, Den: den})
	}
	return rr
}

func headerModifier(m *gwv1.HTTPHeaderFilter, what string) (set, add []Header, remove []string, why string) {
	if m == nil {
		return nil, nil, nil, what + ": no settings"
	}
	headers := func(list []gwv1.HTTPHeader) ([]Header, string) {
		var out []Header
		for _, x := range list {
			if err := validHeaderName(string(x.Name)); err != nil {
				return nil, fmt.Sprintf("%s: %v", what, err)
			}
			if err := checkText(x.Value, maxValueLen); err != nil || x.Value == "" {
				return nil, fmt.Sprintf("%s: header %s: the value must be printable text", what, x.Name)
			}
			out = append(out, Header{Name: string(x.Name), Value: x.Value, Format: strings.ReplaceAll(x.Value, "%", "%%")})
		}
		return out, ""
	}
	if set, why = headers(m.Set); why != "" {
		return nil, nil, nil, why
	}
	if add, why = headers(m.Add); why != "" {
		return nil, nil, nil, why
	}
	for _, n := range m.Remove {
		if err := validHeaderName(n); err != nil {
			return nil, nil, nil, fmt.Sprintf("%s: %v", what, err)
		}
		remove = append(remove, n)
	}
	return set, add, remove, ""
}

// matchedPrefix is the one PathPrefix the rule's matches share, for
// ReplacePrefixMatch.
func matchedPrefix(matches []gwv1.HTTPRouteMatch) (string, bool) {
	prefix := ""
	for i, m := range matches {
		p := "/"
		if m.Path != nil {
			if m.Path.Type != nil && *m.Path.Type != gwv1.PathMatchPathPrefix {
				return "", false
			}
			if m.Path.Value != nil {
				p = *m.Path.Value
			}
		}
		if checkPath(p) != nil {
			return "", false
		}
		p = strings.TrimRight(p, "/")
		if i > 0 && p != prefix {
			return "", false
		}
		prefix = p
	}
	return prefix, true
}

// pathModifier adds the path rewrite of a URLRewrite or RequestRedirect.
func pathModifier(pm *gwv1.HTTPPathModifier, matches []gwv1.HTTPRouteMatch, what string, h *HTTPRules) string {
	switch pm.Type {
	case gwv1.FullPathHTTPPathModifier:
		if pm.ReplaceFullPath == nil || checkPath(*pm.ReplaceFullPath) != nil || strings.ContainsAny(*pm.ReplaceFullPath, `\'"`) {
			return what + ": replaceFullPath must be a path"
		}
		h.Rewrites = append(h.Rewrites, PathRewrite{To: *pm.ReplaceFullPath})
	case gwv1.PrefixMatchHTTPPathModifier:
		if pm.ReplacePrefixMatch == nil || checkPath(*pm.ReplacePrefixMatch) != nil || strings.ContainsAny(*pm.ReplacePrefixMatch, `\'"`) {
			return what + ": replacePrefixMatch must be a path"
		}
		prefix, ok := matchedPrefix(matches)
		if !ok {
			return what + ": replacePrefixMatch needs PathPrefix matches with one prefix"
		}
		to := strings.TrimRight(*pm.ReplacePrefixMatch, "/")
		quoted := regexp.QuoteMeta(prefix)
		if prefix != "" {
			// The prefix alone becomes the replacement, "/" for an empty one.
			whole := to
			if whole == "" {
				whole = "/"
			}
			h.Rewrites = append(h.Rewrites, PathRewrite{Regex: "^" + quoted + "$", To: whole})
		}
		if prefix != "" || to != "" {
			h.Rewrites = append(h.Rewrites, PathRewrite{Regex: "^" + quoted + "(/.*)$", To: to + `\1`})
		}
	default:
		return fmt.Sprintf("%s: path modifier %s is not supported", what, pm.Type)
	}
	return ""
}

func urlRewrite(u *gwv1.HTTPURLRewriteFilter, matches []gwv1.HTTPRouteMatch, h *HTTPRules) string {
	if u == nil {
		return "URLRewrite: no settings"
	}
	if u.Hostname != nil {
		host := strings.ToLower(string(*u.Hostname))
		if _, err := parseHostPort(host); err != nil {
			return fmt.Sprintf("URLRewrite: %v", err)
		}
		h.SetHost = host
	}
	if u.Path != nil {
		return pathModifier(u.Path, matches, "URLRewrite", h)
	}
	return ""
}

// routeRedirect serves a RequestRedirect. Without a port, the port is the
// scheme's default when the scheme is set, else the listener's, as the
// Gateway API specifies; a scheme's default port is not written.
func (b *builder) routeRedirect(rd *gwv1.HTTPRequestRedirectFilter, matches []gwv1.HTTPRouteMatch, h *HTTPRules) string {
	if rd == nil {
		return "RequestRedirect: no settings"
	}
	r := RouteRedirect{Set: true, Code: 302}
	if rd.StatusCode != nil {
		r.Code = *rd.StatusCode
		valid := false
		for _, c := range redirectCodes {
			valid = valid || c == r.Code
		}
		if !valid {
			return fmt.Sprintf("RequestRedirect: status code %d is not supported", r.Code)
		}
	}
	if rd.Scheme != nil {
		r.Scheme = strings.ToLower(*rd.Scheme)
		if r.Scheme != "http" && r.Scheme != "https" {
			return fmt.Sprintf("RequestRedirect: scheme %q is not supported", *rd.Scheme)
		}
	}
	if rd.Hostname != nil {
		r.Host = strings.ToLower(string(*rd.Hostname))
		if err := checkHost(r.Host); err != nil || strings.HasPrefix(r.Host, "*") {
			return fmt.Sprintf("RequestRedirect: hostname %q is not valid", r.Host)
		}
	}
	switch {
	case rd.Port != nil:
		r.Port = int(*rd.Port)
	case rd.Scheme == nil && b.o.GatewayHTTPPort != 0:
		r.Port = b.o.GatewayHTTPPort
	}
	if r.Port == 80 && r.Scheme != "https" || r.Port == 443 && r.Scheme == "https" {
		r.Port = 0
	}
	if rd.Path != nil {
		if why := pathModifier(rd.Path, matches, "RequestRedirect", h); why != "" {
			return why
		}
	}
	h.Route.Redirect = r
	return ""
}

func dumpRouteFilters(w *strings.Builder, f RouteFilters) {
	for _, x := range f.AddRequestHeaders {
		fmt.Fprintf(w, "  request-add-header %s %q\n", x.Name, x.Value)
	}
	for _, n := range f.RemoveRequestHeaders {
		fmt.Fprintf(w, "  request-remove-header %s\n", n)
	}
	for _, x := range f.AddResponseHeaders {
		fmt.Fprintf(w, "  response-add-header %s %q\n", x.Name, x.Value)
	}
	for _, n := range f.RemoveResponseHeaders {
		fmt.Fprintf(w, "  response-remove-header %s\n", n)
	}
	for _, m := range f.Mirrors {
		fmt.Fprintf(w, "  request-mirror %s %d/%d\n", m.Backend, m.Num, m.Den)
	}
	if r := f.Redirect; r.Set {
		fmt.Fprintf(w, "  route-redirect scheme=%q host=%q port=%s code %d\n", r.Scheme, r.Host, strconv.Itoa(r.Port), r.Code)
	}
}
