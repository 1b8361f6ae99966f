package model

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// HTTPRules are the per-backend request and response rules set by the
// frontend annotations of the HAProxy Kubernetes Ingress Controller. Every
// string was checked by its parser: no control character, no newline; the
// renderer still quotes each value as one word.
type HTTPRules struct {
	// Redirect is request-redirect: "host", "host:port" or an absolute
	// http(s) URL; empty means no redirect.
	Redirect     string
	RedirectCode int
	// Status, when not 0, answers every request with this status and asks
	// no pod: a Gateway API rule whose backendRefs cannot be resolved
	// answers 500.
	Status int
	// Rewrites are path-rewrite's lines, applied in order.
	Rewrites []PathRewrite
	// SetHost is set-host: the Host header sent to the pods.
	SetHost         string
	RequestHeaders  []Header
	ResponseHeaders []Header
	// Captures are request-capture sample expressions, logged with %hr.
	Captures   []string
	CaptureLen int
	CORS       CORS
	// Snippet is backend-config-snippet, one directive per line; empty
	// unless --config-snippets enables "backend".
	Snippet []string
	// SnippetFrom is the object whose annotation (or the ConfigMap) set
	// Snippet: Events about the snippet go to it.
	SnippetFrom ObjectRef
	// Route are the HTTPRoute filters no annotation has
	// (gateway_filters.go).
	Route RouteFilters
}

// Header is one header to set: a token name and a value of printable
// characters.
type Header struct {
	Name, Value string
	// Format is Value as an HAProxy log-format string: literal text with
	// '%' doubled, and the %[...] sample expressions of Value, each one
	// from the allow-list (sample.go).
	Format string
}

// CORS is the cors-* settings of a backend.
type CORS struct {
	Enabled bool
	// AnyOrigin answers "*"; otherwise the request's Origin is echoed when
	// it is one of Origins or matches OriginRegex.
	AnyOrigin   bool
	Origins     []string
	OriginRegex string
	// Methods and Headers are "*" or a list.
	Methods          []string
	Headers          []string
	Credentials      bool
	MaxAge           time.Duration
	RespondToOptions bool
}

// Limits on list settings, so one annotation cannot make haproxy.cfg huge.
const (
	maxHeaderLines  = 32
	maxValueLen     = 1024
	maxCaptures     = 16
	maxSnippetLines = 200
	maxSnippetBytes = 64 << 10
)

func frontendFeatureSettings() []Setting {
	const ingScopes = ScopeConfigMap | ScopeIngress
	return []Setting{
		backendSetting(Setting{
			Name: "request-redirect", Scopes: ingScopes, Example: "example.com:8443",
			Doc: "Redirect every request to this host (host or host:port, path and query kept) or to this absolute http(s) URL.",
		}, redirectParser(), func(b *backendDraft, v string) { b.HTTP.Redirect = v }),
		backendSetting(Setting{
			Name: "request-redirect-code", Scopes: ingScopes, Default: "302", Example: "301",
			Doc: "Status code of request-redirect.",
		}, redirectCodeParser(), func(b *backendDraft, v int) { b.HTTP.RedirectCode = v }),
		backendSetting(Setting{
			Name: "path-rewrite", Scopes: ingScopes, Example: `/foo/(.*) /\1`,
			Doc: "Rewrite the path sent to the pods: one path replaces every path; a regex and a replacement (\\1 back-references) rewrite matching paths. Several such rules, one per line (at most " + fmt.Sprint(maxPathRewrites) + "), apply in order, each to the path the previous one left. The query string is kept.",
		}, pathRewriteParser(), func(b *backendDraft, v []PathRewrite) { b.HTTP.Rewrites = v }),
		backendSetting(Setting{
			Name: "set-host", Scopes: ingScopes, Example: "example.local",
			Doc: "Host header sent to the pods (after routing).",
		}, hostPortParser(), func(b *backendDraft, v string) { b.HTTP.SetHost = v }),
		backendSetting(Setting{
			Name: "request-set-header", Scopes: ingScopes, Example: "Ingress-ID abcd123",
			Doc: "Headers set on requests to the pods: one \"Name value\" per line. The value is literal except %[...], a sample expression evaluated per request (e.g. %[src] or %[req.hdr(host),lower]; only the fetches and converters listed below), and %%, a literal %.",
		}, headerLinesParser(SampleRequest), func(b *backendDraft, v []Header) { b.HTTP.RequestHeaders = v }),
		backendSetting(Setting{
			Name: "response-set-header", Scopes: ingScopes, Example: `Cache-Control "no-store,no-cache,private"`,
			Doc: "Headers set on responses to clients: one \"Name value\" per line. The value is literal except %[...], a sample expression evaluated per response (e.g. %[status] or %[res.hdr(content-type)]; only the fetches and converters listed below), and %%, a literal %.",
		}, headerLinesParser(SampleResponse), func(b *backendDraft, v []Header) { b.HTTP.ResponseHeaders = v }),
		backendSetting(Setting{
			Name: "request-capture", Scopes: ingScopes, Example: "cookie(my-cookie)",
			Doc: "Sample expressions captured into the traffic log (%hr), one per line, e.g. hdr(User-Agent); only the fetches and converters listed below.",
		}, captureParser(), func(b *backendDraft, v []string) { b.HTTP.Captures = v }),
		backendSetting(Setting{
			Name: "request-capture-len", Scopes: ingScopes, Default: "128", Example: "350",
			Doc: "Characters kept of each request-capture field.",
		}, intRange(1, 8192), func(b *backendDraft, v int) { b.HTTP.CaptureLen = v }),

		backendSetting(Setting{
			Name: "cors-enable", Scopes: ingScopes, Default: "false", Example: "true",
			Doc: "Add CORS headers to responses.",
		}, boolParser(), func(b *backendDraft, v bool) { b.HTTP.CORS.Enabled = v }),
		backendSetting(Setting{
			Name: "cors-allow-origin", Scopes: ingScopes, Default: "*", Example: "https://a.example, https://b.example",
			Doc: "Allowed origins: *, a comma-separated list of origins, or a regex starting with ^; a matching request Origin is echoed in Access-Control-Allow-Origin.",
		}, originParser(), func(b *backendDraft, v CORS) {
			b.HTTP.CORS.AnyOrigin, b.HTTP.CORS.Origins, b.HTTP.CORS.OriginRegex = v.AnyOrigin, v.Origins, v.OriginRegex
		}),
		backendSetting(Setting{
			Name: "cors-allow-methods", Scopes: ingScopes, Default: "*", Example: "GET, POST",
			Doc: "Access-Control-Allow-Methods: * or a comma-separated list of methods.",
		}, tokenListParser("method", isMethod), func(b *backendDraft, v []string) { b.HTTP.CORS.Methods = v }),
		backendSetting(Setting{
			Name: "cors-allow-headers", Scopes: ingScopes, Default: "*", Example: "X-Custom-Header, Upgrade-Insecure-Requests",
			Doc: "Access-Control-Allow-Headers: * or a comma-separated list of header names.",
		}, tokenListParser("header name", func(s string) bool { return validHeaderName(s) == nil }), func(b *backendDraft, v []string) { b.HTTP.CORS.Headers = v }),
		backendSetting(Setting{
			Name: "cors-allow-credentials", Scopes: ingScopes, Default: "false", Example: "true",
			Doc: "Send Access-Control-Allow-Credentials: true.",
		}, boolParser(), func(b *backendDraft, v bool) { b.HTTP.CORS.Credentials = v }),
		backendSetting(Setting{
			Name: "cors-max-age", Scopes: ingScopes, Default: "5s", Example: "1m",
			Doc: "Access-Control-Max-Age: how long browsers may cache a preflight answer (whole seconds).",
		}, durationParser(), func(b *backendDraft, v time.Duration) { b.HTTP.CORS.MaxAge = v }),
		backendSetting(Setting{
			Name: "cors-respond-to-options", Scopes: ingScopes, Default: "false", Example: "true",
			Doc: "Answer preflight OPTIONS requests with 204 and the CORS headers from HAProxy instead of the pods.",
		}, boolParser(), func(b *backendDraft, v bool) { b.HTTP.CORS.RespondToOptions = v }),

		backendSnippet.registerBackend(Setting{
			Name: "backend-config-snippet", Scopes: backendScopes, Example: "http-send-name-header x-dst-server",
			Doc: "Raw HAProxy directives added to the backend, one per line. Ignored unless --config-snippets enables backend. Only request/response rules, ACLs and tuning directives are allowed (acl, http-request, http-response, http-after-response, tcp-request, tcp-response, http-check, option, timeout, compression, http-reuse, http-send-name-header, retries, retry-on, hash-type, balance, fullconn, hash-balance-factor, max-keep-alive-queue, unique-id-format, unique-id-header), and none that names a file, changes maps or ACLs, or runs Lua or a service. A snippet HAProxy rejects is dropped from its backend alone, with an Event.",
		}, func(b *backendDraft, v []string) { b.HTTP.Snippet = v }),
		globalSetting(Setting{
			Name: "global-config-snippet", Scopes: ScopeConfigMap, Example: "tune.bufsize 32768",
			Doc: "Raw HAProxy directives added to the global section, one per line. Ignored unless --config-snippets enables global.",
		}, snippetParser(nil), func(g *Global, v []string) { g.ConfigSnippet = strings.Join(v, "\n") }),
	}
}

// checkText refuses what must never reach haproxy.cfg inside one value:
// control characters (newlines included), DEL and invalid UTF-8.
func checkText(s string, max int) error {
	// Quotes and '%' take up to four characters once escaped, and HAProxy
	// refuses lines longer than 2048.
	if n := len(s) + 3*strings.Count(s, "'") + strings.Count(s, "%"); n > max {
		return fmt.Errorf("longer than %d characters (quotes and %% count more than one)", max)
	}
	if !utf8.ValidString(s) {
		return errors.New("not valid UTF-8")
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("control character %q not allowed", r)
		}
	}
	return nil
}

// checkWord is checkText for a value written as one bare word: printable
// ASCII without blanks, quotes or backslashes.
func checkWord(s string, max int) error {
	if s == "" {
		return errors.New("empty")
	}
	if len(s) > max {
		return fmt.Errorf("longer than %d characters", max)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || c == '"' || c == '\'' || c == '\\' {
			return fmt.Errorf("character %q not allowed", c)
		}
	}
	return nil
}

// parseHostPort accepts a DNS name or an IP address with an optional port.
func parseHostPort(s string) (string, error) {
	host, port := s, ""
	if h, p, ok := strings.Cut(s, ":"); ok {
		host, port = h, p
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 || !allDigits(port) {
			return "", fmt.Errorf("port %q is not 1..65535", port)
		}
	}
	if err := checkDNSName(strings.ToLower(host)); err != nil {
		return "", fmt.Errorf("host %q: %v", host, err)
	}
	return s, nil
}

func hostPortParser() parser[string] {
	return parser[string]{desc: "host or host:port", parse: parseHostPort}
}

func redirectParser() parser[string] {
	return parser[string]{
		desc: "host, host:port or http(s) URL",
		parse: func(s string) (string, error) {
			if !strings.Contains(s, "://") {
				return parseHostPort(s)
			}
			if err := checkWord(s, maxValueLen); err != nil {
				return "", err
			}
			u, err := url.Parse(s)
			if err != nil {
				return "", errors.New("not a URL")
			}
			if u.Scheme != "http" && u.Scheme != "https" {
				return "", errors.New("scheme must be http or https")
			}
			if u.User != nil || u.Fragment != "" || strings.Contains(s, "#") {
				return "", errors.New("user info and fragments are not allowed")
			}
			if _, err := parseHostPort(u.Host); err != nil {
				return "", err
			}
			if u.Path != "" {
				if err := checkPath(u.EscapedPath()); err != nil {
					return "", fmt.Errorf("path: %v", err)
				}
			}
			return s, nil
		},
	}
}

func redirectCodeParser() parser[int] {
	codes := []int{301, 302, 303, 307, 308}
	return parser[int]{
		desc: "301|302|303|307|308",
		parse: func(s string) (int, error) {
			n, err := strconv.Atoi(s)
			if err == nil && allDigits(s) {
				for _, c := range codes {
					if n == c {
						return n, nil
					}
				}
			}
			return 0, errors.New("not a redirect code (want 301, 302, 303, 307 or 308)")
		},
	}
}

// PathRewrite is one path-rewrite rule: with a Regex the path is replaced
// where it matches (replace-path, \1 back-references), without one the
// whole path becomes To.
type PathRewrite struct{ Regex, To string }

// maxPathRewrites bounds the rules of one path-rewrite value: each is a
// regex HAProxy runs on every request of the backend.
const maxPathRewrites = 16

// pathRewriteParser reads path-rewrite as the HAProxy Kubernetes Ingress
// Controller does: one rule per line, blank lines ignored.
func pathRewriteParser() parser[[]PathRewrite] {
	return parser[[]PathRewrite]{
		desc: "path, or regex and replacement separated by a space; several rules one per line",
		parse: func(s string) ([]PathRewrite, error) {
			var out []PathRewrite
			lines := strings.Split(s, "\n")
			for i, line := range lines {
				if strings.TrimSpace(line) == "" {
					continue
				}
				r, err := parsePathRewrite(line)
				if err != nil {
					if len(lines) > 1 {
						return nil, fmt.Errorf("line %d: %w", i+1, err)
					}
					return nil, err
				}
				out = append(out, r)
			}
			switch {
			case len(out) == 0:
				return nil, errors.New("want a path, or a regex and a replacement")
			case len(out) > maxPathRewrites:
				return nil, fmt.Errorf("%d rules, at most %d", len(out), maxPathRewrites)
			}
			return out, nil
		},
	}
}

func parsePathRewrite(line string) (PathRewrite, error) {
	f := strings.Fields(line)
	switch len(f) {
	case 1:
		if err := checkPath(f[0]); err != nil {
			return PathRewrite{}, err
		}
		return PathRewrite{To: f[0]}, nil
	case 2:
		if err := checkRegex(f[0]); err != nil {
			return PathRewrite{}, err
		}
		if err := checkReplacement(f[1]); err != nil {
			return PathRewrite{}, err
		}
		return PathRewrite{Regex: f[0], To: f[1]}, nil
	}
	return PathRewrite{}, errors.New("want a path, or a regex and a replacement")
}

// checkRegex keeps a regex to one bare word that Go's RE2 also compiles: a
// sanity check of what HAProxy's PCRE2 will get (`haproxy -c` has the last
// word).
func checkRegex(re string) error {
	if strings.ContainsAny(re, "'\"") {
		return errors.New("quotes are not allowed in a regex")
	}
	for i := 0; i < len(re); i++ {
		if c := re[i]; c <= ' ' || c >= 0x7f {
			return fmt.Errorf("character %q not allowed in a regex", c)
		}
	}
	if len(re) > maxValueLen {
		return fmt.Errorf("regex longer than %d characters", maxValueLen)
	}
	if _, err := regexp.Compile(re); err != nil {
		return fmt.Errorf("regex does not compile: %v", err)
	}
	return nil
}

// checkReplacement accepts a path replacement: path characters and \N
// back-references.
func checkReplacement(r string) error {
	if !strings.HasPrefix(r, "/") && !strings.HasPrefix(r, `\`) {
		return errors.New("replacement must start with '/' or a back-reference")
	}
	for i := 0; i < len(r); i++ {
		c := r[i]
		switch {
		case c == '\\':
			if i+1 >= len(r) || r[i+1] < '0' || r[i+1] > '9' {
				return errors.New(`'\' must start a back-reference \0..\9`)
			}
			i++
		case !pathByte[c] || c == '\'':
			return fmt.Errorf("character %q not allowed in a replacement", c)
		}
	}
	if len(r) > maxValueLen {
		return fmt.Errorf("replacement longer than %d characters", maxValueLen)
	}
	return nil
}

// headerLinesParser reads "Name value" lines; a value in double quotes loses
// them, as the HAProxy Kubernetes Ingress Controller's examples write it.
// %[...] in a value is a sample expression checked for ctx.
func headerLinesParser(ctx SampleContext) parser[[]Header] {
	return parser[[]Header]{
		desc: `"Name value" lines`,
		parse: func(s string) ([]Header, error) {
			var out []Header
			for l := range strings.SplitSeq(s, "\n") {
				l = strings.TrimSpace(l)
				if l == "" {
					continue
				}
				name, value, _ := strings.Cut(l, " ")
				if err := validHeaderName(name); err != nil {
					return nil, err
				}
				value = strings.TrimSpace(value)
				if len(value) >= 2 && value[0] == '"' && value[len(value)-1] == '"' {
					value = value[1 : len(value)-1]
				}
				if value == "" {
					return nil, fmt.Errorf("header %s has no value", name)
				}
				if err := checkText(value, maxValueLen); err != nil {
					return nil, fmt.Errorf("header %s: %v", name, err)
				}
				format, _, err := parseHeaderFormat(value, ctx)
				if err != nil {
					return nil, fmt.Errorf("header %s: %v", name, err)
				}
				out = append(out, Header{Name: name, Value: value, Format: format})
			}
			if len(out) == 0 {
				return nil, errors.New("no header")
			}
			if len(out) > maxHeaderLines {
				return nil, fmt.Errorf("more than %d headers", maxHeaderLines)
			}
			return out, nil
		},
	}
}

func captureParser() parser[[]string] {
	return parser[[]string]{
		desc: "sample expressions, one per line",
		parse: func(s string) ([]string, error) {
			var out []string
			for l := range strings.SplitSeq(s, "\n") {
				l = strings.TrimSpace(l)
				if l == "" {
					continue
				}
				if err := checkSample(l, SampleRequest); err != nil {
					return nil, err
				}
				out = append(out, l)
			}
			if len(out) == 0 {
				return nil, errors.New("no expression")
			}
			if len(out) > maxCaptures {
				return nil, fmt.Errorf("more than %d expressions", maxCaptures)
			}
			return out, nil
		},
	}
}

func originParser() parser[CORS] {
	return parser[CORS]{
		desc: "*, origins (scheme://host[:port]) separated by commas, or a regex starting with ^",
		parse: func(s string) (CORS, error) {
			if len(s) > maxValueLen {
				return CORS{}, fmt.Errorf("longer than %d characters", maxValueLen)
			}
			switch {
			case s == "*":
				return CORS{AnyOrigin: true}, nil
			case strings.HasPrefix(s, "^"):
				if err := checkRegex(s); err != nil {
					return CORS{}, err
				}
				return CORS{OriginRegex: s}, nil
			}
			var out []string
			for o := range strings.SplitSeq(s, ",") {
				o = strings.TrimSpace(o)
				if err := checkOrigin(o); err != nil {
					return CORS{}, err
				}
				out = append(out, o)
			}
			if len(out) > maxHeaderLines {
				return CORS{}, fmt.Errorf("more than %d origins", maxHeaderLines)
			}
			return CORS{Origins: out}, nil
		},
	}
}

// checkOrigin accepts an origin as browsers send it: scheme://host[:port].
func checkOrigin(o string) error {
	scheme, rest, ok := strings.Cut(o, "://")
	if !ok || scheme != "http" && scheme != "https" {
		return fmt.Errorf("origin %q: want http(s)://host[:port]", o)
	}
	if _, err := parseHostPort(rest); err != nil {
		return fmt.Errorf("origin %q: %v", o, err)
	}
	return nil
}

func isMethod(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z') {
			return false
		}
	}
	return true
}

// tokenListParser accepts "*" or a comma-separated list of tokens.
func tokenListParser(what string, ok func(string) bool) parser[[]string] {
	return parser[[]string]{
		desc: "* or a comma-separated list of " + what + "s",
		parse: func(s string) ([]string, error) {
			if len(s) > maxValueLen {
				return nil, fmt.Errorf("longer than %d characters", maxValueLen)
			}
			if s == "*" {
				return []string{"*"}, nil
			}
			var out []string
			for t := range strings.SplitSeq(s, ",") {
				t = strings.TrimSpace(t)
				if !ok(t) {
					return nil, fmt.Errorf("%q is not a %s", t, what)
				}
				out = append(out, t)
			}
			if len(out) > maxHeaderLines {
				return nil, fmt.Errorf("more than %d entries", maxHeaderLines)
			}
			return out, nil
		},
	}
}

// sectionKeywords start a new section in haproxy.cfg whatever the
// indentation: a snippet line starting with one would escape its section.
var sectionKeywords = map[string]bool{
	"global": true, "defaults": true, "frontend": true, "backend": true, "listen": true,
	"peers": true, "userlist": true, "resolvers": true, "program": true, "cache": true,
	"ring": true, "mailers": true, "http-errors": true, "fcgi-app": true, "log-forward": true,
	"crt-store": true, "traces": true, "acme": true,
}

// backendSnippetDirectives are the directives a backend snippet may use:
// it is written by whoever can annotate an Ingress or a Service, so it gets
// request and response rules, ACLs and tuning, and nothing that names a
// file, changes another backend's maps, runs code or reads the environment
// (snippetArgsRefused). The global snippet is the operator's (ConfigMap).
var backendSnippetDirectives = map[string]bool{
	"acl": true, "http-request": true, "http-response": true, "http-after-response": true,
	"tcp-request": true, "tcp-response": true, "http-check": true, "option": true, "timeout": true,
	"compression": true, "http-reuse": true, "http-send-name-header": true, "retries": true,
	"retry-on": true, "hash-type": true, "balance": true, "fullconn": true, "hash-balance-factor": true,
	"max-keep-alive-queue": true, "unique-id-format": true, "unique-id-header": true,
}

// snippetArgsRefused are words that reach outside the backend: files
// (HAProxy runs unable to read the daemon's, this says why early), other
// backends' maps and ACLs, Lua, services. (HAProxy's environment holds only
// PATH and what the operator's global snippet sets, so env() reveals nothing.)
var snippetArgsRefused = []string{
	"file", "lf-file", "errorfile", "errorfiles", "errorloc", "ca-file", "crt", "crl-file",
	"set-map", "del-map", "add-acl", "del-acl", "lua", "use-service",
}

// backendSnippet is backend-config-snippet, whose origin Events name.
var backendSnippet = newHandle(snippetParser(backendSnippetDirectives))

// snippetParser accepts raw directives, one per line. It cannot judge them
// (`haproxy -c` does); it keeps each line inside its section: no control
// character, no section keyword, no conditional block (.if). With allowed
// set, only those directives, and none of snippetArgsRefused.
func snippetParser(allowed map[string]bool) parser[[]string] {
	return parser[[]string]{
		desc: "HAProxy directives, one per line",
		parse: func(s string) ([]string, error) {
			if len(s) > maxSnippetBytes {
				return nil, fmt.Errorf("longer than %d bytes", maxSnippetBytes)
			}
			var out []string
			for l := range strings.SplitSeq(s, "\n") {
				l = strings.TrimSpace(strings.ReplaceAll(l, "\t", " "))
				if l == "" {
					continue
				}
				if err := checkText(l, maxValueLen); err != nil {
					return nil, err
				}
				first := strings.ToLower(strings.Fields(l)[0])
				if sectionKeywords[first] {
					return nil, fmt.Errorf("line %q would start a new section", l)
				}
				if strings.HasPrefix(first, ".") {
					return nil, fmt.Errorf("line %q: conditional blocks are not allowed", l)
				}
				if allowed != nil {
					if !allowed[first] {
						return nil, fmt.Errorf("directive %q is not allowed in a backend snippet", first)
					}
					lower := strings.ToLower(l)
					for _, w := range snippetArgsRefused {
						for _, f := range strings.FieldsFunc(lower, func(r rune) bool { return r == ' ' || r == '(' || r == ',' || r == ')' }) {
							// "lua.<name>" runs a registered Lua action, the
							// daemon's own mirror among them: a snippet
							// naming another backend there would mirror
							// past the ReferenceGrants.
							if f == w || w == "lua" && strings.HasPrefix(f, "lua.") {
								return nil, fmt.Errorf("line %q: %q is not allowed in a backend snippet", l, w)
							}
						}
					}
				}
				out = append(out, l)
			}
			if len(out) == 0 {
				return nil, errors.New("no directive")
			}
			if len(out) > maxSnippetLines {
				return nil, fmt.Errorf("more than %d lines", maxSnippetLines)
			}
			return out, nil
		},
	}
}

// dumpHTTPRules writes a backend's frontend-feature rules for Dump.
func dumpHTTPRules(w *strings.Builder, b *Backend) {
	h := b.HTTP
	if b.TCP {
		w.WriteString("  mode tcp\n")
	}
	if h.Status != 0 {
		fmt.Fprintf(w, "  answer status %d\n", h.Status)
	}
	if h.Redirect != "" {
		fmt.Fprintf(w, "  request-redirect %q code %d\n", h.Redirect, h.RedirectCode)
	}
	for _, r := range h.Rewrites {
		fmt.Fprintf(w, "  path-rewrite %q %q\n", r.Regex, r.To)
	}
	if h.SetHost != "" {
		fmt.Fprintf(w, "  set-host %q\n", h.SetHost)
	}
	for _, x := range h.RequestHeaders {
		fmt.Fprintf(w, "  request-set-header %s %q\n", x.Name, x.Value)
	}
	for _, x := range h.ResponseHeaders {
		fmt.Fprintf(w, "  response-set-header %s %q\n", x.Name, x.Value)
	}
	dumpRouteFilters(w, h.Route)
	for _, c := range h.Captures {
		fmt.Fprintf(w, "  request-capture %q len %d\n", c, h.CaptureLen)
	}
	if c := h.CORS; c.Enabled {
		fmt.Fprintf(w, "  cors any-origin=%t origins=%q regex=%q methods=%q headers=%q credentials=%t max-age=%s respond-to-options=%t\n",
			c.AnyOrigin, c.Origins, c.OriginRegex, c.Methods, c.Headers, c.Credentials, dur(c.MaxAge), c.RespondToOptions)
	}
	for _, l := range h.Snippet {
		fmt.Fprintf(w, "  snippet %q\n", l)
	}
	if h.SnippetFrom != (ObjectRef{}) {
		fmt.Fprintf(w, "  snippet-from %s\n", h.SnippetFrom)
	}
}
