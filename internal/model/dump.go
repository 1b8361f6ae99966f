package model

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Dump renders d as stable, line-oriented text, for the model's golden files
// and for debugging. Names, keys and addresses in d were validated by Build
// and Problem messages quote what they took from objects, so every entry is
// one line.
func Dump(d *Desired) string {
	var w strings.Builder
	g := d.Global
	w.WriteString("global\n")
	for _, f := range []struct {
		name string
		set  bool
		val  string
	}{
		{"maxconn", g.Maxconn != 0, fmt.Sprint(g.Maxconn)},
		{"nbthread", g.Nbthread != 0, fmt.Sprint(g.Nbthread)},
		{"hard-stop-after", g.HardStopAfter != 0, dur(g.HardStopAfter)},
		{"ssl-redirect", g.SSLRedirect, "true"},
		{"timeout-client", g.TimeoutClient != 0, dur(g.TimeoutClient)},
		{"timeout-connect", g.TimeoutConnect != 0, dur(g.TimeoutConnect)},
		{"timeout-server", g.TimeoutServer != 0, dur(g.TimeoutServer)},
		{"timeout-http-request", g.TimeoutHTTPRequest != 0, dur(g.TimeoutHTTPRequest)},
		{"timeout-http-keep-alive", g.TimeoutHTTPKeepAlive != 0, dur(g.TimeoutHTTPKeepAlive)},
		{"timeout-queue", g.TimeoutQueue != 0, dur(g.TimeoutQueue)},
		{"timeout-tunnel", g.TimeoutTunnel != 0, dur(g.TimeoutTunnel)},
	} {
		if f.set {
			fmt.Fprintf(&w, "  %s %s\n", f.name, f.val)
		}
	}
	dumpGlobalFeatures(&w, d)
	dumpConnection(&w, d.Global.Connection)
	if d.Global.ProxyProtocol != "" {
		fmt.Fprintf(&w, "  proxy-protocol %s\n", d.Global.ProxyProtocol)
	}

	w.WriteString("\ndefault-backend ")
	switch {
	case d.DefaultBackend == "":
		w.WriteString("none (built-in 404)\n")
	case d.DefaultSource != ObjectRef{}:
		fmt.Fprintf(&w, "%s from %s\n", d.DefaultBackend, d.DefaultSource.String())
	default:
		fmt.Fprintf(&w, "%s from --default-backend-service\n", d.DefaultBackend)
	}

	for _, b := range d.Backends {
		fmt.Fprintf(&w, "\nbackend %s service=%s/%s port=%s\n", b.Name, b.Namespace, b.Service, b.Port)
		fmt.Fprintf(&w, "  balance=%s check=%t check-interval=%s forwarded-for=%t slots=%d\n",
			b.Balance, b.Check, dur(b.CheckInterval), b.ForwardedFor, b.Slots)
		dumpHTTPRules(&w, b)
		dumpBackendFeatures(&w, b)
		for _, e := range b.Endpoints {
			addr := e.Address
			if strings.Contains(addr, ":") {
				addr = "[" + addr + "]"
			}
			fmt.Fprintf(&w, "  server %s:%d", addr, e.Port)
			if e.Draining {
				w.WriteString(" draining")
			}
			w.WriteString("\n")
		}
	}

	names := make([]string, 0, len(d.Maps))
	for name := range d.Maps {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		m := d.Maps[name]
		fmt.Fprintf(&w, "\nmap %s\n", name)
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(&w, "  %s %s\n", k, m[k])
		}
	}

	w.WriteString("\nroutes\n")
	for r := range d.Routes.All() {
		host := r.Host
		if host == "" {
			host = "(any)"
		}
		fmt.Fprintf(&w, "  %s %s %s -> %s (%s)\n", host, r.Path, r.PathType, r.Backend, r.Ingress.String())
	}

	w.WriteString("\nserved\n")
	for _, ref := range d.Served {
		fmt.Fprintf(&w, "  %s\n", ref.String())
	}

	w.WriteString("\nsecrets\n")
	for _, ref := range d.SecretRefs {
		fmt.Fprintf(&w, "  %s\n", ref)
	}

	dumpTLS(&w, d)
	dumpGatewayAPI(&w, d)

	w.WriteString("\nproblems\n")
	for _, p := range d.Problems {
		fmt.Fprintf(&w, "  %s %s: %s\n", p.Object, p.Reason, p.Message)
	}
	return w.String()
}

func dur(d time.Duration) string {
	if d == 0 {
		return "default"
	}
	return d.String()
}
