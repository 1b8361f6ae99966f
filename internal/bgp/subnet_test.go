package bgp

import (
	"net/netip"
	"testing"
)

func TestOnLocalSubnet(t *testing.T) {
	// Loopback's 127.0.0.0/8 is on every host; 203.0.113.0/24 is
	// documentation space no test host interface carries.
	if !onLocalSubnet(netip.MustParseAddr("127.0.0.2")) {
		t.Error("127.0.0.2 should be on the loopback subnet")
	}
	if onLocalSubnet(netip.MustParseAddr("203.0.113.77")) {
		t.Error("203.0.113.77 should not be on a local subnet")
	}
}
