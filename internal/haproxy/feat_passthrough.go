package haproxy

import (
	"fmt"
	"path/filepath"
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

const (
	// passthroughFrontend and offloadBackend are upper case, so no model
	// name can collide with them.
	passthroughFrontend = "ssl"
	offloadBackend      = "PASSTHROUGH_OFFLOAD"
	offloadSocketName   = "https-offload.sock"
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

// passthroughSections renders the ssl frontend and the offload backend.
func (r renderer) passthroughSections(st *state, logging bool) string {
	var b strings.Builder
	m := r.mapPath(model.MapSSLPassthrough)
	fmt.Fprintf(&b, "\nfrontend %s from %s\n  mode tcp\n", passthroughFrontend, defaultsName)
	for _, bind := range r.httpsBinds {
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
	b.WriteString("  tcp-request content set-var(sess.sni) req.ssl_sni,lower if { req.ssl_hello_type 1 }\n")
	fmt.Fprintf(&b, "  tcp-request content set-var(sess.passthrough) var(sess.sni),map_str(%s) if { var(sess.sni) -m found }\n", m)
	fmt.Fprintf(&b, "  tcp-request content set-var(sess.passthrough) var(sess.sni),regsub(^[^.]*,*),map_str(%s) if { var(sess.sni) -m found } !%s\n", m, found)
	// TLSRoute wildcards of more labels (feat_gateway_host.go): the
	// wildcard map gives the wildcard host, the passthrough map its backend.
	for _, n := range st.extras.wildcardDepths {
		fmt.Fprintf(&b, "  tcp-request content set-var(sess.passthrough) var(sess.sni),regsub(^[^.]*,*),field(-1,.,%d),map_str(%s),map_str(%s) if { var(sess.sni) -m found } !%s\n",
			n, r.mapPath(model.MapGatewayWildcard), m, found)
	}
	fmt.Fprintf(&b, "  tcp-request content reject if { var(sess.passthrough) -m str %s }\n", model.PassthroughReject)
	fmt.Fprintf(&b, "  use_backend %%[var(sess.passthrough)] if %s\n", found)
	fmt.Fprintf(&b, "  default_backend %s\n", offloadBackend)
	fmt.Fprintf(&b, "\nbackend %s from %s\n  mode tcp\n", offloadBackend, defaultsName)
	fmt.Fprintf(&b, "  server https unix@%s send-proxy-v2\n", r.offloadSocket())
	return b.String()
}
