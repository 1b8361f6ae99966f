package haproxy

import (
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"runtime"
	"testing"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// BenchmarkDriverHeap is what the driver holds for n backends of ten
// endpoints each once the configuration is written (the state, the
// checks' memo, the render cache and what the writer knows of the files),
// on top of the model's Desired: the driver's share of the daemon's RSS.
func BenchmarkDriverHeap(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("backends=%d", n), func(b *testing.B) {
			want := heapDesired(n)
			var held uint64
			for b.Loop() {
				before := liveHeap()
				u := newUnitDriver(b, Options{})
				u.log = slog.New(slog.NewTextHandler(io.Discard, nil))
				applyOK(b, u.Driver, want)
				u.mu.Lock()
				if err := u.flushConfig(); err != nil {
					b.Fatal(err)
				}
				u.mu.Unlock()
				held = liveHeap() - before
				runtime.KeepAlive(u)
			}
			b.ReportMetric(float64(held)/1e6, "held-MB")
		})
	}
}

// heapDesired is n backends of ten endpoints with one host each, as the
// model makes them.
func heapDesired(n int) *model.Desired {
	want := routes(nil, map[string]string{}, map[string]string{})
	for i := range n {
		name := fmt.Sprintf("bench_s%d_80", i)
		eps := make([]model.Endpoint, 10)
		for j := range eps {
			k := i*10 + j + 1
			a := netip.AddrFrom4([4]byte{198, 18 + byte(k>>16), byte(k >> 8), byte(k)})
			eps[j] = model.Endpoint{Address: a.String(), Port: 9090}
		}
		want.Backends = append(want.Backends, backendOf(name, 10, eps...))
		want.Maps[model.MapPrefix][fmt.Sprintf("s%d.test/", i)] = name
	}
	return want
}

func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
