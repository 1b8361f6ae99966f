package routes

import (
	"net/netip"
	"testing"
	"time"
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
