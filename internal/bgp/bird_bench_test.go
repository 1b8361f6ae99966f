package bgp

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/perimeter-ingress/perimeter/internal/routes"
)

// routeEvents subscribes to route changes in the edge namespace and returns
// a channel of (dst, added) for routes with our protocol.
type routeEvent struct {
	dst   string
	added bool
	at    time.Time
}

func (l *lab) routeEvents(tb testing.TB) <-chan routeEvent {
	tb.Helper()
	raw := make(chan netlink.RouteUpdate, 8192)
	done := make(chan struct{})
	tb.Cleanup(func() { close(done) })
	ns := l.edgeNS.Handle()
	err := netlink.RouteSubscribeWithOptions(raw, done, netlink.RouteSubscribeOptions{
		Namespace: &ns, ReceiveBufferSize: 8 << 20, ReceiveBufferForceSize: true,
		ErrorCallback: func(err error) {
			select {
			case <-done: // closing the socket at cleanup fails the pending read
			default:
				tb.Errorf("route subscription: %v", err)
			}
		},
	})
	if err != nil {
		tb.Fatal(err)
	}
	out := make(chan routeEvent, 8192)
	go func() {
		defer close(out)
		for u := range raw {
			if int(u.Protocol) != routes.DefaultProtocol || u.Dst == nil {
				continue
			}
			out <- routeEvent{dst: u.Dst.String(), added: u.Type == unix.RTM_NEWROUTE, at: time.Now()}
		}
	}()
	return out
}

func waitEvent(tb testing.TB, ev <-chan routeEvent, dst string, added bool) time.Time {
	tb.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case e := <-ev:
			if e.dst == dst && e.added == added {
				return e.at
			}
		case <-timeout:
			tb.Fatalf("no route event for %s (added=%v)", dst, added)
		}
	}
}

func percentile(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(p*float64(len(s)-1)+0.5)]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// BenchmarkBirdAnnounceToKernel times `birdc enable` of a static protocol
// in a node's BIRD until the route is in the edge's kernel (and `birdc
// disable` until it is gone), over 20 runs. The figures include birdc's own
// round trip, reported separately as birdc-ms.
func BenchmarkBirdAnnounceToKernel(b *testing.B) {
	l := newLab(b)
	n1 := l.addNode(birdSettings{Static: []birdStatic{
		{Name: "pods", Routes: []string{block(1, 0)}},
		{Name: "extra", Disabled: true, Routes: []string{block(1, 1)}},
	}})
	n1.start()
	l.startEdge(edgeSpec{PodCIDRs: []string{"198.18.64.0/18"}, StaticPeers: []string{n1.addr}})
	l.waitKernel(30*time.Second, map[string]string{block(1, 0): n1.addr})
	ev := l.routeEvents(b)
	var add, del, cli []time.Duration
	for range b.N {
		for range 20 {
			start := time.Now()
			n1.birdc("enable", "extra")
			add = append(add, waitEvent(b, ev, block(1, 1), true).Sub(start))
			start = time.Now()
			n1.birdc("disable", "extra")
			del = append(del, waitEvent(b, ev, block(1, 1), false).Sub(start))
			start = time.Now()
			n1.birdc("show", "status")
			cli = append(cli, time.Since(start))
		}
	}
	b.ReportMetric(ms(percentile(add, 0.5)), "announce-p50-ms")
	b.ReportMetric(ms(percentile(add, 0.9)), "announce-p90-ms")
	b.ReportMetric(ms(percentile(del, 0.5)), "withdraw-p50-ms")
	b.ReportMetric(ms(percentile(del, 0.9)), "withdraw-p90-ms")
	b.ReportMetric(ms(percentile(cli, 0.5)), "birdc-p50-ms")
}

// BenchmarkBird1000Blocks times a node announcing 1,000 /28 blocks at once
// until all are in the edge's kernel, and their withdrawal.
func BenchmarkBird1000Blocks(b *testing.B) {
	l := newLab(b)
	var many []string
	base := netip.MustParseAddr("198.18.64.0").As4()
	for i := range 1000 {
		v := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3]) + uint32(i)*16
		many = append(many, fmt.Sprintf("%d.%d.%d.%d/28", byte(v>>24), byte(v>>16), byte(v>>8), byte(v)))
	}
	n1 := l.addNode(birdSettings{Static: []birdStatic{
		{Name: "pods", Routes: []string{"198.18.127.240/28"}},
		{Name: "many", Disabled: true, Routes: many},
	}})
	n1.start()
	l.startEdge(edgeSpec{PodCIDRs: []string{"198.18.64.0/18"}, BlockSize: 28, StaticPeers: []string{n1.addr}})
	l.waitKernel(30*time.Second, map[string]string{"198.18.127.240/28": n1.addr})
	ev := l.routeEvents(b)
	count := func(added bool, start time.Time) time.Duration {
		seen := map[string]bool{}
		timeout := time.After(60 * time.Second)
		var last time.Time
		for len(seen) < len(many) {
			select {
			case e := <-ev:
				if e.added == added {
					seen[e.dst] = true
					last = e.at
				}
			case <-timeout:
				b.Fatalf("only %d of %d route events", len(seen), len(many))
			}
		}
		return last.Sub(start)
	}
	var add, del time.Duration
	for range b.N {
		start := time.Now()
		n1.birdc("enable", "many")
		add += count(true, start)
		if got := len(l.kernel()); got != len(many)+1 {
			b.Fatalf("%d routes in the kernel, want %d", got, len(many)+1)
		}
		start = time.Now()
		n1.birdc("disable", "many")
		del += count(false, start)
	}
	b.ReportMetric(ms(add)/float64(b.N), "install-1000-ms")
	b.ReportMetric(ms(del)/float64(b.N), "withdraw-1000-ms")
}
