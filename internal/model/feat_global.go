package model

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// MaxSyslogServers bounds syslog-server lines; Global stays comparable.
const MaxSyslogServers = 4

// LogSettings are the ConfigMap's logging keys.
type LogSettings struct {
	// Servers are the syslog-server lines; unused entries have no Address.
	Servers [MaxSyslogServers]SyslogServer
	// Format is log-format (one line, printable); empty is HAProxy's httplog.
	Format string
	// FormatTCP is log-format-tcp, the same for the mode tcp frontends
	// (TCP services, ssl-passthrough); empty is HAProxy's tcplog.
	FormatTCP string
	// LogNull is dontlognull=false: zero keeps HAProxy from logging
	// connections that sent nothing.
	LogNull bool
}

// SyslogServer is one syslog-server line.
type SyslogServer struct {
	// Address is an IP literal, or "stdout"/"stderr".
	Address  string
	Port     int // 0: HAProxy's default (514)
	Facility string
	Level    string
	MinLevel string
	Format   string
	Length   int
}

var (
	syslogFacilities = []string{"kern", "user", "mail", "daemon", "auth", "syslog", "lpr", "news", "uucp", "cron", "auth2",
		"ftp", "ntp", "audit", "alert", "cron2", "local0", "local1", "local2", "local3", "local4", "local5", "local6", "local7"}
	syslogLevels  = []string{"emerg", "alert", "crit", "err", "warning", "notice", "info", "debug"}
	syslogFormats = []string{"rfc3164", "rfc5424", "short", "raw", "priority", "timed", "iso", "local"}
)

func globalFeatureSettings() []Setting {
	return []Setting{
		globalSetting(Setting{
			Name: "syslog-server", Scopes: ScopeConfigMap, Example: "address:127.0.0.1, port:5514, facility:local0",
			Doc: "Syslog servers for the traffic log, one per line: comma-separated address (IP, stdout or stderr, required), port, facility (required), level, minlevel, format, length. No line: no traffic log.",
		}, syslogParser(), func(g *Global, v [MaxSyslogServers]SyslogServer) { g.Log.Servers = v }),
		globalSetting(Setting{
			Name: "log-format", Scopes: ScopeConfigMap, Example: "%ci:%cp [%tr] %ft %b/%s %ST %B %hr",
			Doc: "Log format of HTTP traffic (HAProxy log-format, one line); unset: option httplog.",
		}, logFormatParser(), func(g *Global, v string) { g.Log.Format = v }),
		globalSetting(Setting{
			Name: "log-format-tcp", Scopes: ScopeConfigMap, Example: "%ci:%cp [%t] %ft %b/%s %Tw/%Tc/%Tt %B %ts",
			Doc: "Log format of the TCP frontends (TCP services and ssl-passthrough; HAProxy log-format, one line); unset: option tcplog.",
		}, logFormatParser(), func(g *Global, v string) { g.Log.FormatTCP = v }),
		globalSetting(Setting{
			Name: "dontlognull", Scopes: ScopeConfigMap, Default: "true", Example: "false",
			Doc: "Do not log connections that send no data.",
		}, boolParser(), func(g *Global, v bool) { g.Log.LogNull = !v }),
	}
}

func logFormatParser() parser[string] {
	return parser[string]{
		desc: "HAProxy log-format string, one line",
		parse: func(s string) (string, error) {
			if s == "" {
				return "", errors.New("empty")
			}
			if err := checkText(s, maxValueLen); err != nil {
				return "", err
			}
			return s, nil
		},
	}
}

func syslogParser() parser[[MaxSyslogServers]SyslogServer] {
	return parser[[MaxSyslogServers]SyslogServer]{
		desc: "lines of address:IP, port:N, facility:F[, level:L, minlevel:L, format:F, length:N]",
		parse: func(s string) ([MaxSyslogServers]SyslogServer, error) {
			var out [MaxSyslogServers]SyslogServer
			n := 0
			for line := range strings.SplitSeq(s, "\n") {
				line = strings.TrimSpace(line)
				if line == "" {
					continue
				}
				if n == MaxSyslogServers {
					return out, fmt.Errorf("more than %d servers", MaxSyslogServers)
				}
				srv, err := parseSyslogLine(line)
				if err != nil {
					return out, err
				}
				out[n] = srv
				n++
			}
			if n == 0 {
				return out, errors.New("no server")
			}
			return out, nil
		},
	}
}

func parseSyslogLine(line string) (SyslogServer, error) {
	var srv SyslogServer
	for field := range strings.SplitSeq(line, ",") {
		k, v, ok := strings.Cut(field, ":")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || v == "" {
			return srv, fmt.Errorf("%q is not key:value", strings.TrimSpace(field))
		}
		oneOf := func(list []string) (string, error) {
			if slices.Contains(list, v) {
				return v, nil
			}
			return "", fmt.Errorf("%s %q unknown (want one of %s)", k, v, strings.Join(list, ", "))
		}
		var err error
		switch k {
		case "address":
			if v == "stdout" || v == "stderr" {
				srv.Address = v
				break
			}
			a, perr := netip.ParseAddr(v)
			if perr != nil || a.Zone() != "" {
				return srv, fmt.Errorf("address %q is not an IP address, stdout or stderr", v)
			}
			srv.Address = a.String()
		case "port":
			p, perr := strconv.Atoi(v)
			if perr != nil || !allDigits(v) || p < 1 || p > 65535 {
				return srv, fmt.Errorf("port %q is not 1..65535", v)
			}
			srv.Port = p
		case "length":
			l, perr := strconv.Atoi(v)
			if perr != nil || !allDigits(v) || l < 80 || l > 65535 {
				return srv, fmt.Errorf("length %q is not 80..65535", v)
			}
			srv.Length = l
		case "facility":
			srv.Facility, err = oneOf(syslogFacilities)
		case "level":
			srv.Level, err = oneOf(syslogLevels)
		case "minlevel":
			srv.MinLevel, err = oneOf(syslogLevels)
		case "format":
			srv.Format, err = oneOf(syslogFormats)
		default:
			return srv, fmt.Errorf("unknown key %q", k)
		}
		if err != nil {
			return srv, err
		}
	}
	switch {
	case srv.Address == "":
		return srv, errors.New("address is required")
	case srv.Facility == "":
		return srv, errors.New("facility is required")
	case srv.MinLevel != "" && srv.Level == "":
		return srv, errors.New("minlevel needs level")
	case srv.Port != 0 && (srv.Address == "stdout" || srv.Address == "stderr"):
		return srv, errors.New("stdout and stderr take no port")
	}
	return srv, nil
}

// features finishes what the frontend-feature settings need beyond one
// value: the snippet switch and error pages. It runs after the backends,
// TCP-service ones included, are finished.
func (b *builder) features() {
	b.snippetSwitch()
	b.errorPages()
	b.refusedTLSSecrets()
}

// snippetSwitch drops snippets the operator did not enable.
func (b *builder) snippetSwitch() {
	enabled := func(kind string) bool { return slices.Contains(b.o.ConfigSnippets, kind) }
	var cmRef ObjectRef
	if cm := b.s.ConfigMap; cm != nil {
		cmRef = ObjectRef{Kind: "ConfigMap", Namespace: cm.Namespace, Name: cm.Name}
	}
	if b.d.Global.ConfigSnippet != "" && !enabled("global") {
		b.d.Global.ConfigSnippet = ""
		b.problem(cmRef, ReasonSnippetDisabled, "key global-config-snippet ignored: global snippets are off (--config-snippets=global enables them)")
	}
	for _, s := range []struct {
		kind, key string
		v         *string
	}{{"frontend", "frontend-config-snippet", &b.d.Global.FrontendSnippet}, {"stats", "stats-config-snippet", &b.d.Global.StatsSnippet}} {
		if *s.v != "" && !enabled(s.kind) {
			*s.v = ""
			b.problem(cmRef, ReasonSnippetDisabled, "key %s ignored: %s snippets are off (--config-snippets=%s enables them)", s.key, s.kind, s.kind)
		}
	}
	for _, be := range b.d.Backends {
		if len(be.HTTP.Snippet) == 0 {
			continue
		}
		from := b.origin(backendSnippet.index, be)
		if enabled("backend") {
			be.HTTP.SnippetFrom = from
			continue
		}
		be.HTTP.Snippet = nil
		b.problem(from, ReasonSnippetDisabled,
			"backend-config-snippet of backend %s ignored: backend snippets are off (--config-snippets=backend enables them)", be.Name)
	}
}

// Event reasons of the global features: a snippet set while
// --config-snippets leaves its kind off, an error page HAProxy cannot
// serve, a TCP service entry that cannot apply.
const (
	ReasonSnippetDisabled  = "SnippetDisabled"
	ReasonInvalidErrorFile = "InvalidErrorFile"
	ReasonInvalidTCP       = "InvalidTCPService"
)

// dumpGlobalFeatures writes the logging, snippet, error page and TCP
// service parts of d for Dump; nothing when they are at their defaults.
func dumpGlobalFeatures(w *strings.Builder, d *Desired) {
	g := d.Global
	for _, s := range g.Log.Servers {
		if s.Address != "" {
			fmt.Fprintf(w, "  syslog-server %+v\n", s)
		}
	}
	if g.Log.Format != "" {
		fmt.Fprintf(w, "  log-format %q\n", g.Log.Format)
	}
	if g.Log.FormatTCP != "" {
		fmt.Fprintf(w, "  log-format-tcp %q\n", g.Log.FormatTCP)
	}
	if g.Log.LogNull {
		w.WriteString("  dontlognull false\n")
	}
	if g.ConfigSnippet != "" {
		fmt.Fprintf(w, "  global-config-snippet %q\n", g.ConfigSnippet)
	}
	if g.FrontendSnippet != "" {
		fmt.Fprintf(w, "  frontend-config-snippet %q\n", g.FrontendSnippet)
	}
	if g.StatsSnippet != "" {
		fmt.Fprintf(w, "  stats-config-snippet %q\n", g.StatsSnippet)
	}
	for _, p := range d.ErrorPages {
		fmt.Fprintf(w, "  errorfile %d %q\n", p.Code, p.Content)
	}
	for _, t := range d.TCPServices {
		ssl := ""
		if t.SSL {
			ssl = " ssl"
		}
		fmt.Fprintf(w, "  tcp-service %d%s -> %s\n", t.Port, ssl, t.Backend)
		for _, sh := range t.Shares {
			fmt.Fprintf(w, "    share %d -> %s\n", sh.Weight, cmp.Or(sh.Backend, "(refused)"))
		}
	}
}
