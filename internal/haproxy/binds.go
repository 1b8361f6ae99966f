package haproxy

import (
	"net"
	"net/netip"
	"strconv"

	"github.com/haproxytech/client-native/v6/config-parser/params"
	"github.com/haproxytech/client-native/v6/config-parser/types"
)

// bindsFor lists the addresses a frontend on port listens on: the bind
// address of each enabled family and, when that is not the wildcard, the
// announce addresses of the family (which are on lo, see ha.md).
func bindsFor(o Options, port int) []types.Bind {
	p := strconv.Itoa(port)
	var out []types.Bind
	v6 := func(addr string) types.Bind {
		return types.Bind{Path: net.JoinHostPort(addr, p), Params: []params.BindOption{&params.BindOptionWord{Name: "v6only"}}}
	}
	if !o.DisableIPv4 {
		out = append(out, types.Bind{Path: net.JoinHostPort(o.IPv4BindAddress, p)})
	}
	if !o.DisableIPv6 {
		out = append(out, v6(o.IPv6BindAddress))
	}
	for _, s := range o.AnnounceAddresses {
		a, err := netip.ParseAddr(s)
		if err != nil {
			continue
		}
		switch {
		case a.Is4() && !o.DisableIPv4 && o.IPv4BindAddress != "0.0.0.0" && o.IPv4BindAddress != a.String():
			out = append(out, types.Bind{Path: net.JoinHostPort(a.String(), p)})
		case a.Is6() && !o.DisableIPv6 && o.IPv6BindAddress != "::" && o.IPv6BindAddress != a.String():
			out = append(out, v6(a.String()))
		}
	}
	return out
}
