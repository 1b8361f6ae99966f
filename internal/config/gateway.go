package config

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// MaxGatewayAddresses bounds --gateway-addresses: each address may become
// a bind of HAProxy's, and a typo in a CIDR should not make millions.
const MaxGatewayAddresses = 4096

// PortRanges parses --gateway-listener-ports: ports and FROM-TO ranges.
func PortRanges(items []string) ([][2]int, error) {
	var out [][2]int
	for _, it := range items {
		from, to, isRange := strings.Cut(it, "-")
		if !isRange {
			to = from
		}
		f, err1 := strconv.Atoi(from)
		t, err2 := strconv.Atoi(to)
		if err1 != nil || err2 != nil || f < 1 || t > 65535 || f > t {
			return nil, fmt.Errorf("%q: want a port or FROM-TO within 1-65535", it)
		}
		out = append(out, [2]int{f, t})
	}
	return out, nil
}

// AddressPool parses --gateway-addresses: addresses, FROM-TO ranges and
// CIDRs, in the order given (the order Gateways get them), without
// duplicates.
func AddressPool(items []string) ([]netip.Addr, error) {
	var out []netip.Addr
	seen := map[netip.Addr]bool{}
	add := func(a netip.Addr) error {
		a = a.Unmap()
		if seen[a] {
			return nil
		}
		if len(out) == MaxGatewayAddresses {
			return fmt.Errorf("more than %d addresses", MaxGatewayAddresses)
		}
		seen[a] = true
		out = append(out, a)
		return nil
	}
	for _, it := range items {
		var from, to netip.Addr
		if p, err := netip.ParsePrefix(it); err == nil {
			p = p.Masked()
			if a := p.Addr(); a.Zone() != "" || a.IsUnspecified() || a.IsMulticast() {
				return nil, fmt.Errorf("%q: not addresses HAProxy can listen on", it)
			}
			// add stops a prefix too large long before its end.
			for a := p.Addr(); a.IsValid() && p.Contains(a); a = a.Next() {
				if err := add(a); err != nil {
					return nil, err
				}
			}
			continue
		} else if f, t, ok := strings.Cut(it, "-"); ok {
			var err1, err2 error
			from, err1 = netip.ParseAddr(f)
			to, err2 = netip.ParseAddr(t)
			if err := errors.Join(err1, err2); err != nil || from.Is4() != to.Is4() || to.Less(from) {
				return nil, fmt.Errorf("%q: want FROM-TO addresses of one family, FROM first", it)
			}
		} else {
			a, err := netip.ParseAddr(it)
			if err != nil {
				return nil, fmt.Errorf("%q: want an IP address, FROM-TO or a CIDR", it)
			}
			from, to = a, a
		}
		if from.Zone() != "" || from.IsUnspecified() || from.IsMulticast() {
			return nil, fmt.Errorf("%q: not an address HAProxy can listen on", it)
		}
		for a := from; ; a = a.Next() {
			if err := add(a); err != nil {
				return nil, err
			}
			if a == to {
				break
			}
		}
	}
	return out, nil
}
