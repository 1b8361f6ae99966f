package haproxy

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

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
	var lines []string
	add := func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }
	for _, v := range append([]string{h.Redirect, h.RewriteRegex, h.RewriteTo, h.SetHost, h.CORS.OriginRegex}, h.Captures...) {
		if !lineSafe(v) {
			return "", fmt.Errorf("value %q has a control character", v)
		}
	}
	for _, c := range h.Captures {
		if !safeToken(c) {
			return "", fmt.Errorf("capture expression %q is not a bare word", c)
		}
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
					return "", fmt.Errorf("origin %q has a control character", o)
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
		if !safeToken(x.Name) || !lineSafe(x.Value) {
			return "", fmt.Errorf("request header %q is not valid", x.Name)
		}
		add("http-request set-header %s %s", x.Name, quoteArg(literalFormat(x.Value)))
	}
	switch {
	case h.RewriteTo != "" && h.RewriteRegex != "":
		add("http-request replace-path %s %s", quoteArg(h.RewriteRegex), quoteArg(literalFormat(h.RewriteTo)))
	case h.RewriteTo != "":
		add("http-request set-path %s", quoteArg(literalFormat(h.RewriteTo)))
	}
	for i, c := range h.Captures {
		add("http-request capture %s id %d", c, i)
	}
	for _, x := range h.ResponseHeaders {
		if !safeToken(x.Name) || !lineSafe(x.Value) {
			return "", fmt.Errorf("response header %q is not valid", x.Name)
		}
		add("http-response set-header %s %s", x.Name, quoteArg(literalFormat(x.Value)))
	}
	lines = append(lines, corsResponse...)
	return strings.Join(lines, "\n"), nil
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

// errorPage is an error page as HAProxy loads it: a file named by its
// content, so a changed page is a new file and never changes under a
// running HAProxy.
type errorPage struct {
	code    int
	file    string // base name in the errorfiles directory
	content string
}

func errorPageOf(p model.ErrorPage) errorPage {
	sum := sha256.Sum256([]byte(p.Content))
	return errorPage{code: p.Code, file: fmt.Sprintf("%d-%s.http", p.Code, hex.EncodeToString(sum[:6])), content: p.Content}
}

// extras are the parts of the head (global, defaults, frontends) that the
// frontend features add; a change needs a reload.
type extras struct {
	errorPages []errorPage
	tcp        []model.TCPService
	// captures is how many request-capture slots the http frontend
	// declares, captureLen their length.
	captures, captureLen int
}

// key identifies e for the render cache and the reload decision. It prints
// every field, so a field added later counts without anyone updating it.
func (e extras) key() string { return fmt.Sprintf("%+v", e) }

func (r renderer) errorFilesDir() string {
	return filepath.Join(filepath.Dir(r.mapsDir), errorsDirName)
}

// featureSpec fills the frontend-feature part of spec from b; it reports
// and returns false when the backend must be left out.
func featureSpec(spec *backendSpec, b *model.Backend, reject func(string, ...any)) bool {
	if b.TCP {
		spec.TCP = true
		spec.ForwardedFor = false
		return true
	}
	rules, err := httpRules(b.HTTP)
	if err != nil {
		reject("backend %s: %v; its rules are left out", b.Name, err)
		rules = ""
	}
	spec.Rules = rules
	for _, l := range b.HTTP.Snippet {
		if !lineSafe(l) {
			reject("backend %s: snippet line %q has a control character; the snippet is left out", b.Name, l)
			return true
		}
	}
	spec.Snippet = strings.Join(b.HTTP.Snippet, "\n")
	return true
}

// featureExtras collects the head parts of want: error pages with a code
// HAProxy knows, TCP services whose backend exists, capture slots.
func featureExtras(want *model.Desired, st *state, reject func(string, ...any)) extras {
	var e extras
	for _, p := range want.ErrorPages {
		if !slices.Contains(model.ErrorFileCodes, p.Code) {
			reject("error page for status %d: HAProxy has no such error; ignored", p.Code)
			continue
		}
		e.errorPages = append(e.errorPages, errorPageOf(p))
	}
	ports := map[int]bool{}
	for _, t := range want.TCPServices {
		b := st.backends[t.Backend]
		switch {
		case t.Port < 1 || t.Port > 65535 || ports[t.Port]:
			reject("TCP service port %d is not valid or appears twice; ignored", t.Port)
		case b == nil || !b.spec.TCP:
			reject("TCP service port %d: backend %q is not a TCP backend; ignored", t.Port, t.Backend)
		case t.SSL && (want.TLS.Default == nil || !safePEM(want.TLS.Default.PEM)):
			reject("TCP service port %d: TLS termination needs the default certificate, which is missing; the port is not served", t.Port)
		default:
			ports[t.Port] = true
			e.tcp = append(e.tcp, t)
		}
	}
	for _, b := range want.Backends {
		if b == nil || b.TCP || st.backends[b.Name] == nil {
			continue
		}
		if n := len(b.HTTP.Captures); n > 0 {
			e.captures = max(e.captures, n)
			e.captureLen = max(e.captureLen, b.HTTP.CaptureLen, 1)
		}
	}
	return e
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

// insertLines puts lines (indented) right after the line header of text;
// text is returned unchanged when header is missing.
func insertLines(text, header string, lines []string) string {
	if len(lines) == 0 {
		return text
	}
	i := strings.Index(text, header+"\n")
	if i < 0 || (i > 0 && text[i-1] != '\n') {
		return text
	}
	i += len(header) + 1
	var b strings.Builder
	b.WriteString(text[:i])
	for _, l := range lines {
		b.WriteString("  ")
		b.WriteString(l)
		b.WriteByte('\n')
	}
	b.WriteString(text[i:])
	return b.String()
}

// headFeatures adds to the rendered head what the features need: log
// targets and the global snippet in global, logging and error pages in
// defaults, capture slots in the http frontend, and the TCP frontends.
func (r renderer) headFeatures(text string, st *state) string {
	g := st.global
	logging := false
	var globalLines, defaultsLines []string
	for _, s := range g.Log.Servers {
		if s.Address == "" {
			continue
		}
		if l, ok := syslogLine(s); ok {
			globalLines = append(globalLines, l)
			logging = true
		}
	}
	if g.ConfigSnippet != "" && lineSafe(strings.ReplaceAll(g.ConfigSnippet, "\n", " ")) {
		globalLines = append(globalLines, strings.Split(g.ConfigSnippet, "\n")...)
	}
	if logging {
		defaultsLines = append(defaultsLines, "log global")
		if g.Log.Format != "" && lineSafe(g.Log.Format) {
			defaultsLines = append(defaultsLines, "log-format "+quoteArg(g.Log.Format))
		} else {
			defaultsLines = append(defaultsLines, "option httplog")
		}
		if !g.Log.LogNull {
			defaultsLines = append(defaultsLines, "option dontlognull")
		}
	}
	for _, p := range st.extras.errorPages {
		defaultsLines = append(defaultsLines, fmt.Sprintf("errorfile %d %s", p.code, filepath.Join(r.errorFilesDir(), p.file)))
	}
	text = insertLines(text, "global", globalLines)
	text = insertLines(text, "defaults "+defaultsName, defaultsLines)
	var capture []string
	for range st.extras.captures {
		capture = append(capture, fmt.Sprintf("declare capture request len %d", st.extras.captureLen))
	}
	text = insertLines(text, "frontend http from "+defaultsName, capture)

	var b strings.Builder
	b.WriteString(text)
	for _, t := range st.extras.tcp {
		fmt.Fprintf(&b, "\nfrontend tcp_%d from %s\n  mode tcp\n", t.Port, defaultsName)
		for _, h := range r.tcpHosts {
			fmt.Fprintf(&b, "  bind %s%s\n", net.JoinHostPort(h, strconv.Itoa(t.Port)), r.tcpBindTLS(t))
		}
		if logging {
			b.WriteString("  option tcplog\n")
		}
		fmt.Fprintf(&b, "  default_backend %s\n", t.Backend)
	}
	return b.String()
}

// syslogLine renders one syslog-server as a global log directive.
func syslogLine(s model.SyslogServer) (string, bool) {
	target := s.Address
	switch {
	case s.Address == "stdout" || s.Address == "stderr":
	case net.ParseIP(s.Address) == nil:
		return "", false
	case s.Port != 0:
		target = net.JoinHostPort(s.Address, strconv.Itoa(s.Port))
	case strings.Contains(s.Address, ":"):
		target = "[" + s.Address + "]"
	}
	parts := []string{"log", target}
	if s.Length > 0 {
		parts = append(parts, "len", strconv.Itoa(s.Length))
	}
	if s.Format != "" {
		parts = append(parts, "format", s.Format)
	}
	parts = append(parts, s.Facility)
	if s.Level != "" {
		parts = append(parts, s.Level)
		if s.MinLevel != "" {
			parts = append(parts, s.MinLevel)
		}
	}
	l := strings.Join(parts, " ")
	return l, safeWords(l)
}

// tcpHosts are the addresses TCP services listen on: the daemon's IPv4
// and IPv6 bind addresses, whatever --disable-http says.
func tcpHosts(o Options) []string {
	var out []string
	if !o.DisableIPv4 {
		out = append(out, o.IPv4BindAddress)
	}
	if !o.DisableIPv6 {
		out = append(out, o.IPv6BindAddress)
	}
	return out
}
