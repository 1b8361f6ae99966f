package haproxy

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// Global features (model/feat_global.go): logging and the global snippet,
// and how the frontend features are added to the rendered head.

// extras are the parts of the head (global, defaults, frontends) that the
// frontend features add; a change needs a reload.
type extras struct {
	errorPages []errorPage
	tcp        []model.TCPService
	// captures is how many request-capture slots the http frontend
	// declares, captureLen their length.
	captures, captureLen int
	// routeACLs are the conditional backends' frontend rules
	// (feat_routeacl.go).
	routeACLs []model.RouteACL
	// wildcardDepths are the label counts of the Gateway API wildcard
	// suffixes, one lookup tier each (gatewayWildcardActions).
	wildcardDepths []int
	// gwBinds are the http frontend's binds for Gateway listeners
	// (gateway_binds.go).
	gwBinds []model.GatewayBind
	// mirror loads the mirroring script (mirror.go).
	mirror bool
}

// key identifies e for the render cache and the reload decision. It prints
// every field, so a field added later counts without anyone updating it.
func (e extras) key() string { return fmt.Sprintf("%+v", e) }

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
	if st.extras.mirror {
		globalLines = append(globalLines, "lua-load "+r.mirrorLuaPath())
	}
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
	// The operator's frontend snippets come first in their sections, so
	// the routing rules below still decide the backend.
	if s := g.FrontendSnippet; s != "" && lineSafe(strings.ReplaceAll(s, "\n", " ")) {
		text = insertLines(text, "frontend http from "+defaultsName, strings.Split(s, "\n"))
		text = insertLines(text, "frontend https from "+defaultsName, strings.Split(s, "\n"))
	}
	if s := g.StatsSnippet; s != "" && lineSafe(strings.ReplaceAll(s, "\n", " ")) {
		text = insertLines(text, "frontend stats from "+defaultsName, strings.Split(s, "\n"))
	}

	var b strings.Builder
	b.WriteString(text)
	for _, t := range st.extras.tcp {
		fmt.Fprintf(&b, "\nfrontend tcp_%d from %s\n  mode tcp\n", t.Port, defaultsName)
		for _, h := range r.tcpHosts {
			fmt.Fprintf(&b, "  bind %s%s\n", net.JoinHostPort(h, strconv.Itoa(t.Port)), r.tcpBindTLS(t))
		}
		b.WriteString(r.tcpLogLine(g, logging))
		b.WriteString(tcpBackendLines(t))
	}
	if r.passthroughOn(st) {
		b.WriteString(r.passthroughSections(st, logging))
	}
	return b.String()
}

// tcpBackendLines route a TCP service's connections. Weighted shares
// draw one number below the sum of the weights per connection and map
// consecutive ranges to the shares in order: use_backend rules take the
// first matching range, and a refused share's range is rejected before
// them.
func tcpBackendLines(t model.TCPService) string {
	if len(t.Shares) < 2 {
		return fmt.Sprintf("  default_backend %s\n", t.Backend)
	}
	total := 0
	for _, sh := range t.Shares {
		total += sh.Weight
	}
	var rules, refuse strings.Builder
	fmt.Fprintf(&refuse, "  tcp-request content set-var(sess.tcp_share) rand(%d)\n", total)
	lo := 0
	for _, sh := range t.Shares {
		hi := lo + sh.Weight
		switch {
		case sh.Backend == "":
			fmt.Fprintf(&refuse, "  tcp-request content reject if { var(sess.tcp_share) -m int ge %d } { var(sess.tcp_share) -m int lt %d }\n", lo, hi)
		case sh.Backend != t.Backend:
			fmt.Fprintf(&rules, "  use_backend %s if { var(sess.tcp_share) -m int lt %d }\n", sh.Backend, hi)
		}
		lo = hi
	}
	return refuse.String() + rules.String() + fmt.Sprintf("  default_backend %s\n", t.Backend)
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

// tcpLogLine is how a mode tcp frontend logs when logging is on: the
// log-format-tcp line, else option tcplog (the defaults' HTTP format does
// not apply to TCP).
func (r renderer) tcpLogLine(g model.Global, logging bool) string {
	switch {
	case !logging:
		return ""
	case g.Log.FormatTCP != "" && lineSafe(g.Log.FormatTCP):
		return "  log-format " + quoteArg(g.Log.FormatTCP) + "\n"
	}
	return "  option tcplog\n"
}
