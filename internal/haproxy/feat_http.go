package haproxy

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// Backend HTTP features (model/feat_http.go): redirects, CORS, header and
// path rewrites, captures and the backend snippet, rendered as rules of the
// backend section.

// quoteArg writes s as one haproxy.cfg word that HAProxy reads back
// unchanged: inside single quotes nothing is interpreted (no escape, no
// environment variable), and a single quote is closed, escaped and reopened.
func quoteArg(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// literalFormat makes s a log-format string that renders as s itself
// (header values, redirect targets and replacements are log-format in
// HAProxy: %[...] would run sample fetches).
func literalFormat(s string) string {
	return strings.ReplaceAll(s, "%", "%%")
}

// lineSafe is the last check before a value goes into haproxy.cfg inside
// quotes: the model refuses control characters; a line break here would
// start a new directive.
func lineSafe(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}

// httpRules renders the request and response rules of a backend, in the
// order HAProxy evaluates them: redirect, CORS preflight, request rewrites,
// captures; then response headers. It fails on a value the model should
// have refused.
func httpRules(h model.HTTPRules) (string, error) {
	text, _, err := httpRulesMirror(h)
	return text, err
}

// httpRulesMirror is httpRules that also says whether the rules mirror
// requests (mirror.go).
func httpRulesMirror(h model.HTTPRules) (string, bool, error) {
	var lines []string
	add := func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }
	values := append([]string{h.Redirect, h.SetHost, h.CORS.OriginRegex}, h.Captures...)
	for _, r := range h.Rewrites {
		values = append(values, r.Regex, r.To)
	}
	for _, v := range values {
		if !lineSafe(v) {
			return "", false, fmt.Errorf("value %q has a control character", v)
		}
	}
	for _, c := range h.Captures {
		if !safeToken(c) {
			return "", false, fmt.Errorf("capture expression %q is not a bare word", c)
		}
	}

	if h.Status != 0 {
		if h.Status < 200 || h.Status > 599 {
			return "", false, fmt.Errorf("status %d is not an HTTP status", h.Status)
		}
		add("http-request return status %d", h.Status)
	}
	if h.Redirect != "" {
		code := h.RedirectCode
		if code == 0 {
			code = 302
		}
		if strings.Contains(h.Redirect, "://") {
			add("http-request redirect location %s code %d", quoteArg(literalFormat(h.Redirect)), code)
		} else {
			// The request's scheme is kept; the path and query follow the prefix.
			add("http-request redirect prefix %s code %d", quoteArg("%[ssl_fc,iif(https,http)]://"+literalFormat(h.Redirect)), code)
		}
	}

	var corsResponse []string
	cors := h.CORS
	if cors.Enabled {
		switch {
		case cors.AnyOrigin:
			add("http-request set-var(txn.cors_origin) str(*)")
		case cors.OriginRegex != "":
			add("http-request set-var(txn.cors_origin) req.hdr(origin) if { req.hdr(origin) -m reg %s }", quoteArg(cors.OriginRegex))
		case len(cors.Origins) > 0:
			var q []string
			for _, o := range cors.Origins {
				if !lineSafe(o) {
					return "", false, fmt.Errorf("origin %q has a control character", o)
				}
				q = append(q, quoteArg(o))
			}
			add("http-request set-var(txn.cors_origin) req.hdr(origin) if { req.hdr(origin) -m str %s }", strings.Join(q, " "))
		}
		hdrs := corsHeaders(cors)
		if cors.RespondToOptions {
			var parts []string
			for _, x := range hdrs {
				parts = append(parts, "hdr "+x[0]+" "+quoteArg(x[1]))
			}
			add("http-request return status 204 %s if METH_OPTIONS { var(txn.cors_origin) -m found }", strings.Join(parts, " "))
		}
		for _, x := range hdrs {
			corsResponse = append(corsResponse, fmt.Sprintf("http-response set-header %s %s if { var(txn.cors_origin) -m found }", x[0], quoteArg(x[1])))
		}
	}

	if h.SetHost != "" {
		add("http-request set-header Host %s", quoteArg(literalFormat(h.SetHost)))
	}
	for _, x := range h.RequestHeaders {
		v, err := headerFormat(x, model.SampleRequest)
		if err != nil {
			return "", false, fmt.Errorf("request header %q is not valid: %v", x.Name, err)
		}
		add("http-request set-header %s %s", x.Name, quoteArg(v))
	}
	if err := routeRequestHeaders(h.Route, add); err != nil {
		return "", false, err
	}
	for _, r := range h.Rewrites {
		if r.Regex != "" {
			add("http-request replace-path %s %s", quoteArg(r.Regex), quoteArg(literalFormat(r.To)))
		} else {
			add("http-request set-path %s", quoteArg(literalFormat(r.To)))
		}
	}
	// The copy is the request as the rules above made it; a redirect
	// below still mirrors.
	mirrors, err := routeMirrors(h.Route.Mirrors, add)
	if err != nil {
		return "", false, err
	}
	if err := routeRedirect(h.Route.Redirect, add); err != nil {
		return "", false, err
	}
	for i, c := range h.Captures {
		add("http-request capture %s id %d", c, i)
	}
	for _, x := range h.ResponseHeaders {
		v, err := headerFormat(x, model.SampleResponse)
		if err != nil {
			return "", false, fmt.Errorf("response header %q is not valid: %v", x.Name, err)
		}
		add("http-response set-header %s %s", x.Name, quoteArg(v))
	}
	if err := routeResponseHeaders(h.Route, add); err != nil {
		return "", false, err
	}
	lines = append(lines, corsResponse...)
	return strings.Join(lines, "\n"), mirrors, nil
}

// headerFormat is the log-format string of a header value: the model's
// Format (literal text and allow-listed %[...] expressions), checked once
// more, or the literal Value.
func headerFormat(x model.Header, ctx model.SampleContext) (string, error) {
	if !safeToken(x.Name) || !lineSafe(x.Value) || !lineSafe(x.Format) {
		return "", errors.New("name or value not safe in haproxy.cfg")
	}
	if x.Format == "" {
		return literalFormat(x.Value), nil
	}
	if err := model.CheckHeaderFormat(x.Format, ctx); err != nil {
		return "", err
	}
	return x.Format, nil
}

// corsHeaders are the CORS response headers as name, value (a log-format
// string).
func corsHeaders(c model.CORS) [][2]string {
	origin := "%[var(txn.cors_origin)]"
	out := [][2]string{{"Access-Control-Allow-Origin", origin}}
	if !c.AnyOrigin {
		out = append(out, [2]string{"Vary", "Origin"})
	}
	if len(c.Methods) > 0 {
		out = append(out, [2]string{"Access-Control-Allow-Methods", strings.Join(c.Methods, ", ")})
	}
	if len(c.Headers) > 0 {
		out = append(out, [2]string{"Access-Control-Allow-Headers", strings.Join(c.Headers, ", ")})
	}
	if c.Credentials {
		out = append(out, [2]string{"Access-Control-Allow-Credentials", "true"})
	}
	if c.MaxAge > 0 {
		out = append(out, [2]string{"Access-Control-Max-Age", strconv.FormatInt(int64(c.MaxAge/time.Second), 10)})
	}
	return out
}

// featureSpec fills the frontend-feature part of spec from b; it reports
// and returns false when the backend must be left out.
func featureSpec(spec *backendSpec, b *model.Backend, reject func(string, ...any)) bool {
	if b.TCP {
		spec.TCP = true
		spec.ForwardedFor = false
		return true
	}
	rules, mirrors, err := httpRulesMirror(b.HTTP)
	if err != nil {
		reject("backend %s: %v; its rules are left out", b.Name, err)
		rules, mirrors = "", false
	}
	spec.Rules, spec.Mirror = rules, mirrors
	for _, l := range b.HTTP.Snippet {
		if !lineSafe(l) {
			reject("backend %s: snippet line %q has a control character; the snippet is left out", b.Name, l)
			return true
		}
	}
	spec.Snippet = strings.Join(b.HTTP.Snippet, "\n")
	if spec.Snippet != "" {
		spec.SnippetFrom = b.HTTP.SnippetFrom
	}
	return true
}

// withBackendFeatures appends the feature rules and the snippet to a
// rendered backend section.
func withBackendFeatures(text string, spec backendSpec) string {
	if spec.Rules == "" && spec.Snippet == "" {
		return text
	}
	var b strings.Builder
	b.WriteString(text)
	if !strings.HasSuffix(text, "\n") {
		b.WriteByte('\n')
	}
	for _, block := range []string{spec.Rules, spec.Snippet} {
		if block == "" {
			continue
		}
		for l := range strings.SplitSeq(block, "\n") {
			b.WriteString("  ")
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	return b.String()
}
