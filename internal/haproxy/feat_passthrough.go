package haproxy

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/haproxytech/client-native/v6/config-parser/params"
	"github.com/haproxytech/client-native/v6/config-parser/types"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// SSL passthrough (model/feat_passthrough.go). While at least one host is
// passed through, a mode tcp frontend "ssl" holds the HTTPS addresses: it
// waits for the ClientHello, looks its server name up in the passthrough
// map (exact, then "*.domain") and forwards the stream to the host's mode
// tcp backend; every other connection goes through the PASSTHROUGH_OFFLOAD
// backend to the https frontend, which then listens on a Unix socket and
// learns the client's address from the PROXY protocol header the backend
// sends. The map is loaded by the ssl frontend, so more passthrough hosts
// are map entries through the Runtime API; turning passthrough on or off
// changes the frontends, a reload.
//
// Gateway TLS listeners on sockets of their own (gateway_binds.go) are
// bound here too, under their scope's name, which follows the server name
// in the lookups; a server name with '@' is not looked up, so no client
// reaches a scope's entries from another socket. What such a socket does
// not pass through is refused, or, when HTTPS listeners share it, handed
// to the https frontend through a socket and backend of its own.

const (
	// passthroughFrontend and offloadBackend are upper case, so no model
	// name can collide with them.
	passthroughFrontend = "ssl"
	offloadBackend      = "PASSTHROUGH_OFFLOAD"
	offloadSocketName   = "https-offload.sock"
	// aclOffloadScope matches the Gateway binds whose HTTPS listeners
	// sit behind the ssl frontend.
	aclOffloadScope = "PM_OFFLOAD_SCOPE"
	// helloWait bounds how long a connection may take to send its
	// ClientHello before it is handed to the https frontend as is.
	helloWait = "5s"
)

// passthroughOn reports whether st passes hosts through: then the ssl
// frontend owns the HTTPS addresses.
func (r renderer) passthroughOn(st *state) bool {
	return r.httpsOn(st) && st.tls.head.passthrough
}

// offloadSocket is the https frontend's address while passthrough is on.
func (r renderer) offloadSocket() string {
	return filepath.Join(filepath.Dir(r.adminSock), offloadSocketName)
}

// offloadBinds is the https frontend's bind while passthrough is on: the
// socket only HAProxy (and root) may connect to, with the PROXY header
// mandatory, so the address it carries is always the ssl frontend's.
func (r renderer) offloadBinds() []types.Bind {
	return []types.Bind{{Path: "unix@" + r.offloadSocket(), Params: []params.BindOption{
		&params.BindOptionValue{Name: "mode", Value: "600"},
		&params.BindOptionWord{Name: "accept-proxy"},
	}}}
}

// offloadGatewaySocket is the https frontend's socket for the i-th bind
// of offloadedGatewayBinds.
func (r renderer) offloadGatewaySocket(i int) string {
	return filepath.Join(filepath.Dir(r.adminSock), fmt.Sprintf("https-offload-%d.sock", i+1))
}

// offloadGatewayBackend is the backend to offloadGatewaySocket(i).
func offloadGatewayBackend(i int) string { return fmt.Sprintf("%s_%d", offloadBackend, i+1) }

// offloadGatewayBinds are the https frontend's sockets for the Gateway
// binds whose HTTPS listeners sit behind the ssl frontend: named after
// the scope, so that routing scopes their requests as on a bind of the
// address itself.
func (r renderer) offloadGatewayBinds(gw []model.GatewayBind, opts []params.BindOption) []types.Bind {
	var out []types.Bind
	for i, b := range offloadedGatewayBinds(gw) {
		ps := []params.BindOption{
			&params.BindOptionValue{Name: "name", Value: b.Name},
			&params.BindOptionValue{Name: "mode", Value: "600"},
			&params.BindOptionWord{Name: "accept-proxy"},
		}
		out = append(out, types.Bind{Path: "unix@" + r.offloadGatewaySocket(i), Params: append(ps, opts...)})
	}
	return out
}

// passthroughSections renders the ssl frontend and the offload backends.
func (r renderer) passthroughSections(st *state, logging bool) string {
	var b strings.Builder
	m := r.mapPath(model.MapSSLPassthrough)
	fmt.Fprintf(&b, "\nfrontend %s from %s\n  mode tcp\n", passthroughFrontend, defaultsName)
	gwBinds := r.gatewayBinds(st.extras.gwBinds, sniGatewayBind, nil)
	for _, bind := range append(slices.Clone(r.httpsBinds), gwBinds...) {
		line := bind.Path
		for _, p := range bind.Params {
			line += " " + p.String()
		}
		fmt.Fprintf(&b, "  bind %s\n", line)
	}
	if src := st.global.ProxyProtocol; src != "" && validCIDRList(src) {
		pats := src.Prefixes()
		for len(pats) > 0 {
			n := min(len(pats), aclChunk)
			fmt.Fprintf(&b, "  acl %s src %s\n", aclProxySource, strings.Join(pats[:n], " "))
			pats = pats[n:]
		}
		fmt.Fprintf(&b, "  tcp-request connection expect-proxy layer4 if %s\n", aclProxySource)
	}
	b.WriteString(r.tcpLogLine(st.global, logging))
	found := "{ var(sess.passthrough) -m found }"
	fmt.Fprintf(&b, "  tcp-request inspect-delay %s\n", helloWait)
	// '@' starts a scope in the map keys: such a name is no host.
	b.WriteString("  tcp-request content set-var(sess.sni) req.ssl_sni,lower if { req.ssl_hello_type 1 } !{ req.ssl_sni -m sub @ }\n")
	scope := ""
	if len(gwBinds) > 0 {
		b.WriteString("  tcp-request content set-var(sess.scope) so_name if { so_name -m found }\n")
		scope = ",concat(,sess.scope)"
	}
	fmt.Fprintf(&b, "  tcp-request content set-var(sess.passthrough) var(sess.sni)%s,map_str(%s) if { var(sess.sni) -m found }\n", scope, m)
	fmt.Fprintf(&b, "  tcp-request content set-var(sess.passthrough) var(sess.sni),regsub(^[^.]*,*)%s,map_str(%s) if { var(sess.sni) -m found } !%s\n", scope, m, found)
	// TLSRoute wildcards of more labels (feat_gateway_host.go): the
	// wildcard map gives the wildcard host, the passthrough map its backend.
	for _, n := range st.extras.wildcardDepths {
		fmt.Fprintf(&b, "  tcp-request content set-var(sess.passthrough) var(sess.sni),regsub(^[^.]*,*),field(-1,.,%d),map_str(%s)%s,map_str(%s) if { var(sess.sni) -m found } !%s\n",
			n, r.mapPath(model.MapGatewayWildcard), scope, m, found)
	}
	fmt.Fprintf(&b, "  tcp-request content reject if { var(sess.passthrough) -m str %s }\n", model.PassthroughReject)
	offloaded := offloadedGatewayBinds(st.extras.gwBinds)
	if len(gwBinds) > 0 {
		// A Gateway socket answers for its own listeners only: what its
		// TLSRoutes do not take is closed, as the Gateway API asks, unless
		// its HTTPS listeners terminate it.
		cond := "!" + found + " { so_name -m found }"
		if len(offloaded) > 0 {
			names := make([]string, len(offloaded))
			for i, ob := range offloaded {
				names[i] = ob.Name
			}
			// In chunks: HAProxy takes a bounded number of words a line.
			for len(names) > 0 {
				n := min(len(names), aclChunk)
				fmt.Fprintf(&b, "  acl %s so_name -m str %s\n", aclOffloadScope, strings.Join(names[:n], " "))
				names = names[n:]
			}
			cond += " !" + aclOffloadScope
		}
		fmt.Fprintf(&b, "  tcp-request content reject if %s\n", cond)
	}
	fmt.Fprintf(&b, "  use_backend %%[var(sess.passthrough)] if %s\n", found)
	for i, ob := range offloaded {
		fmt.Fprintf(&b, "  use_backend %s if { so_name -m str %s }\n", offloadGatewayBackend(i), ob.Name)
	}
	fmt.Fprintf(&b, "  default_backend %s\n", offloadBackend)
	fmt.Fprintf(&b, "\nbackend %s from %s\n  mode tcp\n", offloadBackend, defaultsName)
	fmt.Fprintf(&b, "  server https unix@%s send-proxy-v2\n", r.offloadSocket())
	for i := range offloaded {
		fmt.Fprintf(&b, "\nbackend %s from %s\n  mode tcp\n", offloadGatewayBackend(i), defaultsName)
		fmt.Fprintf(&b, "  server https unix@%s send-proxy-v2\n", r.offloadGatewaySocket(i))
	}
	return b.String()
}
