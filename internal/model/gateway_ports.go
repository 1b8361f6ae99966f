package model

import (
	"cmp"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// HTTP, HTTPS and TLS listeners beyond the frontends' own ports, and
// Gateways with addresses of their own.
//
// The http and https frontends bind, besides their own port on the edge's
// addresses, one socket per (address, port) a Gateway's HTTP or HTTPS
// listener needs: a port of --gateway-listener-ports on the edge's
// addresses, or on the Gateway's own address (--gateway-addresses) the
// frontend's port or one of --gateway-listener-ports. Each such bind
// is named after its scope, "@<address>:<port>" ("@:<port>" on the edge's
// addresses), and the frontend inserts the name of the socket a request
// came in on between the host and the path of its map lookups. The routes
// of a listener with a scope are written under the same keys, so they are
// served on that socket only, and a new host or path on it is a map
// change like any other; only a new bind reloads. Clients cannot forge a
// scope: a Host header with '@' or '/' is refused by the frontend, and a
// path starts with '/'.
//
// TLS listeners get sockets the same way, bound by the SNI passthrough
// frontend, which appends the socket's name to the server name it looks
// up: a TLSRoute's hostnames are passed through under "<host>@<scope>"
// keys, on that socket only. A server name with '@' is never looked up.
// HTTPS and TLS listeners may share a socket: what no TLSRoute takes goes
// on to the https frontend by a socket of its own, named after the same
// scope; on a socket with TLS listeners only it is refused.

// GatewayBind is a listening socket of the http frontend for Gateway
// listeners.
type GatewayBind struct {
	// Name is the scope of the routes it serves.
	Name string
	// Address is the Gateway's own address; empty for the edge's bind
	// addresses.
	Address string
	Port    int
	// TLS: a bind of the https frontend, for HTTPS listeners.
	TLS bool
	// Passthrough: a bind of the SNI passthrough frontend, for TLS
	// listeners; with TLS as well, what it does not pass through goes on
	// to the https frontend under the same name.
	Passthrough bool
}

// scopeOf names the bind of port on addr ("" = the edge's addresses).
func scopeOf(addr string, port int) string {
	return "@" + net.JoinHostPort(addr, fmt.Sprint(port))
}

// splitScope splits the host part of a route key into the host and the
// scope ("a.example.com@:8080" -> "a.example.com", "@:8080").
func splitScope(h string) (host, scope string) {
	if i := strings.IndexByte(h, '@'); i >= 0 {
		return h[:i], h[i:]
	}
	return h, ""
}

// ListenerPortAllowed reports whether --gateway-listener-ports lists p.
func (o Options) ListenerPortAllowed(p int) bool {
	return slices.ContainsFunc(o.GatewayListenerPorts, func(r PortRange) bool { return p >= r.From && p <= r.To })
}

// portProblem says why an HTTP or HTTPS listener may not open port p
// (not its frontend's port nor the protocol's standard one), or "".
func (b *builder) portProblem(proto gwv1.ProtocolType, p int) string {
	own, std, other, otherStd := b.o.GatewayHTTPPort, standardHTTPPort, b.o.GatewayHTTPSPort, standardHTTPSPort
	if proto != gwv1.HTTPProtocolType {
		own, std, other, otherStd = other, otherStd, own, std
	}
	switch {
	case len(b.o.GatewayListenerPorts) == 0:
		return fmt.Sprintf("%s is served on port %s", proto, portsText(own, std))
	case !b.o.ListenerPortAllowed(p):
		return fmt.Sprintf("%s is served on port %s and the ports --gateway-listener-ports lists", proto, portsText(own, std))
	case other >= 0 && (p == other || p == otherStd):
		return fmt.Sprintf("port %d is the %s frontend's", p, map[bool]string{true: "HTTP", false: "HTTPS"}[proto != gwv1.HTTPProtocolType])
	case slices.Contains(b.o.ReservedPorts, p):
		return fmt.Sprintf("port %d serves the edge's statistics or health checks", p)
	}
	if cm := b.s.TCPServices; cm != nil {
		if _, taken := cm.Data[fmt.Sprint(p)]; taken {
			return fmt.Sprintf("port %d is taken by ConfigMap %s/%s", p, cm.Namespace, cm.Name)
		}
	}
	if gw, taken := b.gwTCPPorts[p]; taken {
		return fmt.Sprintf("port %d is served by a TCP listener of Gateway %s", p, gw)
	}
	return ""
}

// listenerScope is the scope of an HTTP, HTTPS or TLS listener of gw on
// port p, and the port its bind listens on: the protocol's standard port
// is its frontend's port, as for the edge's own binds.
func (b *builder) listenerScope(gw *gwv1.Gateway, proto gwv1.ProtocolType, p int) (string, int) {
	want, std := b.o.GatewayHTTPPort, standardHTTPPort
	switch proto {
	case gwv1.HTTPProtocolType:
	case gwv1.HTTPSProtocolType, gwv1.TLSProtocolType:
		want, std = b.o.GatewayHTTPSPort, standardHTTPSPort
	default:
		return "", p
	}
	if want <= 0 {
		// The frontend is not served (or its port is not known): nothing
		// to bind.
		return "", p
	}
	if p == std {
		p = want
	}
	addr := b.gwAddrs[nsName{gw.Namespace, gw.Name}].addr
	if addr == "" && p == want {
		return "", p
	}
	return scopeOf(addr, p), p
}

// gatewayTCPPorts notes the ports TCP listeners of our Gateways name:
// an HTTP or HTTPS listener may not open them.
func (b *builder) gatewayTCPPorts(gws []*gwv1.Gateway) {
	for _, gw := range gws {
		for _, l := range gw.Spec.Listeners {
			if l.Protocol != gwv1.TCPProtocolType {
				continue
			}
			if b.gwTCPPorts == nil {
				b.gwTCPPorts = map[int]string{}
			}
			if _, ok := b.gwTCPPorts[int(l.Port)]; !ok {
				b.gwTCPPorts[int(l.Port)] = gw.Namespace + "/" + gw.Name
			}
		}
	}
}

// gwAddress is what a Gateway got of --gateway-addresses: an address, or
// the Gateway condition that says why not.
type gwAddress struct {
	addr string
	cond *metav1.Condition
}

// assignGatewayAddresses gives each Gateway without a TCP listener an
// address of the pool, the oldest Gateways first: the one spec.addresses
// asks for, else the one its status already names (so an address stays
// with its Gateway when an older one goes), else the first free one.
func (b *builder) assignGatewayAddresses(gws []*gwv1.Gateway) {
	if len(b.o.GatewayAddresses) == 0 {
		return
	}
	pool := map[netip.Addr]bool{}
	for _, a := range b.o.GatewayAddresses {
		pool[a.Unmap()] = true
	}
	b.gwAddrs = map[nsName]gwAddress{}
	// The TCP frontends are bound on the edge's addresses only: a Gateway
	// with a TCP listener keeps them, so that its status never names an
	// address one of its listeners does not answer on.
	byAge := slices.DeleteFunc(slices.Clone(gws), func(gw *gwv1.Gateway) bool {
		if !slices.ContainsFunc(gw.Spec.Listeners, func(l gwv1.Listener) bool { return l.Protocol == gwv1.TCPProtocolType }) {
			return false
		}
		if len(gw.Spec.Addresses) > 0 {
			c := cond(string(gwv1.GatewayConditionProgrammed), false, string(gwv1.GatewayReasonAddressNotUsable),
				"a Gateway with a TCP listener is served on the edge's own addresses, not on --gateway-addresses", gw.Generation)
			b.gwAddrs[nsName{gw.Namespace, gw.Name}] = gwAddress{cond: &c}
		}
		return true
	})
	slices.SortStableFunc(byAge, func(x, y *gwv1.Gateway) int { return olderMeta(&x.ObjectMeta, &y.ObjectMeta) })
	taken := map[netip.Addr]nsName{}
	give := func(gw *gwv1.Gateway, a netip.Addr) {
		k := nsName{gw.Namespace, gw.Name}
		taken[a] = k
		b.gwAddrs[k] = gwAddress{addr: a.String()}
	}
	// Requested addresses first: a Gateway that asks for an address gets
	// it even from an older Gateway that merely holds it.
	for _, gw := range byAge {
		if len(gw.Spec.Addresses) == 0 {
			continue
		}
		k, gen := nsName{gw.Namespace, gw.Name}, gw.Generation
		var want []netip.Addr
		for _, sa := range gw.Spec.Addresses {
			a, err := netip.ParseAddr(sa.Value)
			if sa.Type != nil && *sa.Type != gwv1.IPAddressType || err != nil {
				c := cond(string(gwv1.GatewayConditionAccepted), false, string(gwv1.GatewayReasonUnsupportedAddress),
					fmt.Sprintf("address %q: only IPAddress addresses are supported", sa.Value), gen)
				b.gwAddrs[k] = gwAddress{cond: &c}
				want = nil
				break
			}
			want = append(want, a.Unmap())
		}
		if _, failed := b.gwAddrs[k]; failed {
			continue
		}
		got := false
		for _, a := range want {
			if _, used := taken[a]; pool[a] && !used {
				give(gw, a)
				got = true
				break
			}
		}
		if !got {
			c := cond(string(gwv1.GatewayConditionProgrammed), false, string(gwv1.GatewayReasonAddressNotUsable),
				"the addresses asked for are not free addresses of --gateway-addresses", gen)
			b.gwAddrs[k] = gwAddress{cond: &c}
		}
	}
	for _, gw := range byAge {
		k := nsName{gw.Namespace, gw.Name}
		if _, done := b.gwAddrs[k]; done {
			continue
		}
		for _, sa := range gw.Status.Addresses {
			a, err := netip.ParseAddr(sa.Value)
			if err != nil {
				continue
			}
			if _, used := taken[a.Unmap()]; pool[a.Unmap()] && !used {
				give(gw, a.Unmap())
				break
			}
		}
	}
	for _, gw := range byAge {
		k := nsName{gw.Namespace, gw.Name}
		if _, done := b.gwAddrs[k]; done {
			continue
		}
		for _, a := range b.o.GatewayAddresses {
			if _, used := taken[a.Unmap()]; !used {
				give(gw, a.Unmap())
				break
			}
		}
		if _, done := b.gwAddrs[k]; !done {
			c := cond(string(gwv1.GatewayConditionProgrammed), false, string(gwv1.GatewayReasonAddressNotAssigned),
				fmt.Sprintf("all %d addresses of --gateway-addresses are taken by older Gateways", len(b.o.GatewayAddresses)), gw.Generation)
			b.gwAddrs[k] = gwAddress{cond: &c}
		}
	}
}

// gatewayAddressStatus puts a Gateway's address, or why it has none,
// into its status.
func (b *builder) gatewayAddressStatus(gw *gwv1.Gateway, st *GatewayStatus) {
	ga, ok := b.gwAddrs[nsName{gw.Namespace, gw.Name}]
	if !ok {
		return
	}
	st.OwnAddress, st.Address = true, ga.addr
	if ga.cond == nil {
		return
	}
	b.problem(gatewayRef(gw), ga.cond.Reason, "%s", ga.cond.Message)
	for i, c := range st.Conditions {
		if c.Type == ga.cond.Type {
			st.Conditions[i] = *ga.cond
		}
	}
	if ga.cond.Type == string(gwv1.GatewayConditionAccepted) {
		for i, c := range st.Conditions {
			if c.Type == string(gwv1.GatewayConditionProgrammed) {
				st.Conditions[i] = cond(c.Type, false, string(gwv1.GatewayReasonInvalid), "the Gateway is not accepted", gw.Generation)
			}
		}
	}
}

// gatewayBinds lists the binds the programmed HTTP, HTTPS and TLS
// listeners with a scope need: one per scope, for every listener on it.
func (b *builder) gatewayBinds() {
	at := map[string]int{}
	for _, ls := range b.gwListeners {
		if ls.scope == "" || !ls.programmed() {
			continue
		}
		i, seen := at[ls.scope]
		if !seen {
			_, port := b.listenerScope(ls.gw, ls.l.Protocol, int(ls.l.Port))
			i = len(b.d.GatewayBinds)
			at[ls.scope] = i
			b.d.GatewayBinds = append(b.d.GatewayBinds, GatewayBind{
				Name: ls.scope, Address: b.gwAddrs[nsName{ls.gw.Namespace, ls.gw.Name}].addr, Port: port,
			})
		}
		switch ls.l.Protocol {
		case gwv1.HTTPSProtocolType:
			b.d.GatewayBinds[i].TLS = true
		case gwv1.TLSProtocolType:
			b.d.GatewayBinds[i].Passthrough = true
		}
	}
	slices.SortFunc(b.d.GatewayBinds, func(x, y GatewayBind) int { return cmp.Compare(x.Name, y.Name) })
}
