package bgp

import (
	"net"
	"net/netip"
)

// onLocalSubnet reports whether addr is inside a subnet of one of the
// host's interfaces. Calico nodes announce their blocks with themselves as
// next hop, so an edge host outside the nodes' subnet gets next hops the
// kernel will not accept as on-link: worth a warning when a peer is added.
func onLocalSubnet(addr netip.Addr) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return true // cannot tell: do not warn
	}
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		p, err := netip.ParsePrefix(n.String())
		if err != nil {
			continue
		}
		if p.Bits() < p.Addr().BitLen() && p.Masked().Contains(addr) {
			return true
		}
	}
	return false
}
