package routes

import (
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// BenchmarkInstall1000 writes 1,000 /28 blocks (198.18.64.0/18 holds 1,024)
// through one on-link gateway, then withdraws them.
func BenchmarkInstall1000(b *testing.B) {
	n := newTestNS(b)
	m := newManager(b, n, nil)
	blocks := make([]netip.Prefix, 1000)
	base := netip.MustParseAddr("198.18.64.0").As4()
	for i := range blocks {
		a := base
		v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
		v += uint32(i) * 16
		blocks[i] = netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), 28)
	}
	gw := netip.MustParseAddr("198.19.96.2")
	var install, withdraw time.Duration
	for b.Loop() {
		start := time.Now()
		for _, p := range blocks {
			m.Set(p, gw)
		}
		install += time.Since(start)
		if got := len(n.ours(b)); got != len(blocks) {
			b.Fatalf("%d routes in the kernel, want %d", got, len(blocks))
		}
		start = time.Now()
		for _, p := range blocks {
			m.Delete(p)
		}
		withdraw += time.Since(start)
	}
	b.ReportMetric(float64(install.Milliseconds())/float64(b.N), "ms/1000-installs")
	b.ReportMetric(float64(install.Microseconds())/float64(b.N*len(blocks)), "µs/route")
	b.ReportMetric(float64(withdraw.Milliseconds())/float64(b.N), "ms/1000-withdraws")
}

// BenchmarkInstall1000IPv6 is BenchmarkInstall1000 with 1,000 IPv6 /122
// blocks (Calico's default) through one on-link IPv6 gateway.
func BenchmarkInstall1000IPv6(b *testing.B) {
	n := newTestNS(b)
	testenv.GuardRoutes(b)
	ip(b, "-n", n.name, "-6", "addr", "add", "2001:db8:18:96::1/64", "dev", "rt0", "nodad")
	m := newManager(b, n, nil)
	blocks := make([]netip.Prefix, 1000)
	for i := range blocks {
		a := netip.MustParseAddr("2001:db8:18::").As16()
		a[14], a[15] = byte(i*64>>8), byte(i*64)
		blocks[i] = netip.PrefixFrom(netip.AddrFrom16(a), 122)
	}
	gw := netip.MustParseAddr("2001:db8:18:96::2")
	count := func() int {
		rs, err := n.h.RouteListFiltered(netlink.FAMILY_V6, &netlink.Route{Protocol: DefaultProtocol}, netlink.RT_FILTER_PROTOCOL)
		if err != nil {
			b.Fatal(err)
		}
		return len(rs)
	}
	var install, withdraw time.Duration
	for b.Loop() {
		start := time.Now()
		for _, p := range blocks {
			m.Set(p, gw)
		}
		install += time.Since(start)
		if got := count(); got != len(blocks) {
			b.Fatalf("%d routes in the kernel, want %d", got, len(blocks))
		}
		start = time.Now()
		for _, p := range blocks {
			m.Delete(p)
		}
		withdraw += time.Since(start)
	}
	b.ReportMetric(float64(install.Milliseconds())/float64(b.N), "ms/1000-installs")
	b.ReportMetric(float64(install.Microseconds())/float64(b.N*len(blocks)), "µs/route")
	b.ReportMetric(float64(withdraw.Milliseconds())/float64(b.N), "ms/1000-withdraws")
}
