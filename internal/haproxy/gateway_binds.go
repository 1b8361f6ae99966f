package haproxy

import (
	"net"
	"net/netip"
	"regexp"
	"strconv"

	"github.com/haproxytech/client-native/v6/config-parser/params"
	httpactions "github.com/haproxytech/client-native/v6/config-parser/parsers/http/actions"
	"github.com/haproxytech/client-native/v6/config-parser/types"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// Gateway binds (model/gateway_ports.go): sockets of the http and https
// frontends for Gateway HTTP and HTTPS listeners on another port than the
// frontend's, or on a Gateway's own address, and of the SNI passthrough
// frontend for TLS listeners there. Each is named after its scope, which
// the frontend puts into the lookup keys of the requests it accepts
// (routingActions) and after the server names it passes through
// (passthroughSections), so a listener serves its own routes only. With
// ssl-passthrough, the https frontend's own binds sit behind the
// passthrough frontend, and so do the Gateway binds with TLS listeners:
// the https frontend then listens for those on sockets of their own,
// named after the same scopes. The other HTTPS Gateway binds do not.

// gatewayBindName is a scope as the model makes it: "@", an address
// (IPv6 in brackets) or nothing, ":" and a port.
var gatewayBindName = regexp.MustCompile(`^@(\[[0-9a-f:.]+\]|[0-9.]*):[0-9]{1,5}$`)

// gatewayBinds keeps the binds of want that are well formed.
func gatewayBinds(want []model.GatewayBind, reject func(string, ...any)) []model.GatewayBind {
	var out []model.GatewayBind
	seen := map[string]bool{}
	for _, b := range want {
		_, err := netip.ParseAddr(b.Address)
		switch {
		case !gatewayBindName.MatchString(b.Name) || seen[b.Name] || b.Port < 1 || b.Port > 65535 || b.Address != "" && err != nil:
			reject("Gateway bind %q (address %q, port %d) is not valid; ignored", b.Name, b.Address, b.Port)
		default:
			seen[b.Name] = true
			out = append(out, b)
		}
	}
	return out
}

// gatewayBinds renders the binds of gw that want picks: on the edge's
// addresses, as the frontends' own, or on the Gateway's address. A
// Gateway's address is bound transparent (IP_FREEBIND when HAProxy may not
// use IP_TRANSPARENT), so that an address not (yet) routed to the host
// keeps the configuration loadable. Each gets the frontend's options opts.
func (r renderer) gatewayBinds(gw []model.GatewayBind, want func(model.GatewayBind) bool, opts []params.BindOption) []types.Bind {
	var out []types.Bind
	for _, b := range gw {
		if !want(b) {
			continue
		}
		name := &params.BindOptionValue{Name: "name", Value: b.Name}
		if b.Address == "" {
			for _, eb := range bindsFor(r.bindAddrs, b.Port) {
				eb.Params = append(append(eb.Params, name), opts...)
				out = append(out, eb)
			}
			continue
		}
		ps := []params.BindOption{name, &params.BindOptionWord{Name: "transparent"}}
		if a, _ := netip.ParseAddr(b.Address); a.Is6() {
			ps = append(ps, &params.BindOptionWord{Name: "v6only"})
		}
		out = append(out, types.Bind{Path: net.JoinHostPort(b.Address, strconv.Itoa(b.Port)), Params: append(ps, opts...)})
	}
	return out
}

// outsideGatewayBinds keeps the ssl-redirect answers (an Ingress
// annotation's) off the Gateway binds, whose routes are the Gateway's
// alone.
func outsideGatewayBinds(acts []types.Action) []types.Action {
	out := make([]types.Action, len(acts))
	for i, a := range acts {
		if rd, ok := a.(*httpactions.Redirect); ok && rd.Cond == "if" {
			cp := *rd
			cp.CondTest += " !{ so_name -m found }"
			a = &cp
		}
		out[i] = a
	}
	return out
}

// httpGatewayBind: a bind of the http frontend, for HTTP listeners.
func httpGatewayBind(b model.GatewayBind) bool { return !b.TLS && !b.Passthrough }

// sniGatewayBind: a bind of the SNI passthrough frontend, for TLS
// listeners.
func sniGatewayBind(b model.GatewayBind) bool { return b.Passthrough }

// offloadedGatewayBind: a bind the SNI passthrough frontend hands to the
// https frontend what it does not pass through, for HTTPS listeners
// beside TLS ones.
func offloadedGatewayBind(b model.GatewayBind) bool { return b.TLS && b.Passthrough }

// offloadedGatewayBinds are the binds of gw the SNI passthrough frontend
// offloads; their place in this list numbers their sockets and backends.
func offloadedGatewayBinds(gw []model.GatewayBind) []model.GatewayBind {
	var out []model.GatewayBind
	for _, b := range gw {
		if offloadedGatewayBind(b) {
			out = append(out, b)
		}
	}
	return out
}
