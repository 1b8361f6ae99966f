package config

import (
	"net/netip"
	"slices"
	"testing"
)

func TestPortRanges(t *testing.T) {
	got, err := PortRanges([]string{"8080", "9000-9010"})
	if err != nil || !slices.Equal(got, [][2]int{{8080, 8080}, {9000, 9010}}) {
		t.Errorf("got %v, %v", got, err)
	}
	for _, bad := range []string{"0", "65536", "9010-9000", "80-", "http"} {
		if _, err := PortRanges([]string{bad}); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestAddressPool(t *testing.T) {
	got, err := AddressPool([]string{"198.51.100.81-198.51.100.83", "198.51.100.82", "203.0.113.0/31", "2001:db8::1"})
	want := []netip.Addr{netip.MustParseAddr("198.51.100.81"), netip.MustParseAddr("198.51.100.82"), netip.MustParseAddr("198.51.100.83"),
		netip.MustParseAddr("203.0.113.0"), netip.MustParseAddr("203.0.113.1"), netip.MustParseAddr("2001:db8::1")}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("got %v, %v; want %v", got, err, want)
	}
	// A prefix too large stops at the cap instead of enumerating it.
	for _, bad := range []string{"2001:db8::/64", "198.51.100.9-198.51.100.1", "198.51.100.1-2001:db8::1", "0.0.0.0", "gw.example.com"} {
		if _, err := AddressPool([]string{bad}); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
