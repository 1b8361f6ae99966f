package model

import (
	"fmt"
	"strings"
	"time"
)

// Connection modes of http-connection-mode, as HAProxy names its options.
const (
	ConnKeepAlive   = "http-keep-alive"
	ConnServerClose = "http-server-close"
	ConnClose       = "httpclose"
)

// ConnectionSettings are the ConfigMap's keys about how connections end
// and when a request is logged; they go to the defaults section.
type ConnectionSettings struct {
	// Mode is http-connection-mode: ConnServerClose or ConnClose; ""
	// is HAProxy's default, ConnKeepAlive.
	Mode string
	// TimeoutClientFin and TimeoutServerFin bound how long a silent client
	// (server) keeps a half-closed connection; zero: timeout client
	// (server) or tunnel apply.
	TimeoutClientFin time.Duration
	TimeoutServerFin time.Duration
	// LogASAP logs a request when the response headers arrive instead of
	// after the last byte (option logasap).
	LogASAP bool
}

func connectionSettings() []Setting {
	mode := func(s string) string {
		if s == ConnKeepAlive {
			return ""
		}
		return s
	}
	return []Setting{
		// The two booleans come first: the table is applied in order, so
		// http-connection-mode, when set, has the last word.
		globalSetting(Setting{
			Name: "http-server-close", Scopes: ScopeConfigMap, Example: "true",
			Doc: "Deprecated, use http-connection-mode: true is http-server-close (http-connection-mode wins when both are set).",
		}, boolParser(), func(g *Global, v bool) {
			if v {
				g.Connection.Mode = ConnServerClose
			}
		}),
		globalSetting(Setting{
			Name: "http-keep-alive", Scopes: ScopeConfigMap, Example: "true",
			Doc: "Deprecated, use http-connection-mode: true is http-keep-alive, and wins over http-server-close (http-connection-mode wins over both).",
		}, boolParser(), func(g *Global, v bool) {
			if v {
				g.Connection.Mode = ""
			}
		}),
		globalSetting(Setting{
			Name: "http-connection-mode", Scopes: ScopeConfigMap, Example: ConnServerClose,
			Doc: "How HAProxy handles HTTP connections: http-keep-alive (unset: keeps client and server connections open between requests), " +
				"http-server-close (closes the server connection after each response, keeps the client's), httpclose (closes both after each response).",
		}, enumParser(ConnKeepAlive, ConnServerClose, ConnClose), func(g *Global, v string) { g.Connection.Mode = mode(v) }),
		globalSetting(Setting{
			Name: "timeout-client-fin", Scopes: ScopeConfigMap, Example: "5s",
			Doc: "Inactivity timeout on the client side of a half-closed connection: how long HAProxy waits for the client to send or acknowledge data once one direction is shut (unset: timeout-client, or timeout-tunnel in a tunnel).",
		}, durationParser(), func(g *Global, v time.Duration) { g.Connection.TimeoutClientFin = v }),
		globalSetting(Setting{
			Name: "timeout-server-fin", Scopes: ScopeConfigMap, Example: "5s",
			Doc: "Inactivity timeout on the server side of a half-closed connection: how long HAProxy waits for the server to send or acknowledge data once one direction is shut, e.g. a silent server behind a WebSocket the client half-closed (unset: timeout-server, or timeout-tunnel in a tunnel).",
		}, durationParser(), func(g *Global, v time.Duration) { g.Connection.TimeoutServerFin = v }),
		globalSetting(Setting{
			Name: "logasap", Scopes: ScopeConfigMap, Default: "false", Example: "true",
			Doc: "Log a request as soon as the response headers arrive, not after its last byte: long downloads show up at once, with the total time and size prefixed by +.",
		}, boolParser(), func(g *Global, v bool) { g.Connection.LogASAP = v }),
	}
}

// dumpConnection writes the connection settings that differ from HAProxy's
// defaults.
func dumpConnection(w *strings.Builder, c ConnectionSettings) {
	if c.Mode != "" {
		fmt.Fprintf(w, "  http-connection-mode %s\n", c.Mode)
	}
	if c.TimeoutClientFin != 0 {
		fmt.Fprintf(w, "  timeout-client-fin %s\n", dur(c.TimeoutClientFin))
	}
	if c.TimeoutServerFin != 0 {
		fmt.Fprintf(w, "  timeout-server-fin %s\n", dur(c.TimeoutServerFin))
	}
	if c.LogASAP {
		w.WriteString("  logasap true\n")
	}
}
