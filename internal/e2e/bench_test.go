package e2e

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// BenchmarkEndpointConvergence measures, on the real stack, the time from an
// EndpointSlice write to HAProxy routing requests to the new endpoint, over
// 100 changes, and counts the reloads during that churn (want 0).
func BenchmarkEndpointConvergence(b *testing.B) {
	e := newEnv(b)
	d := e.startDaemon()
	pods := e.pods("bench", 30, 2)
	svc := e.service("app", nil, pods[0])
	e.ingress("app", nil, rule{host: "bench.test", path: "/", service: "app"})
	d.expect("bench.test", "/", 200, pods[0].Name)

	const changes = 100
	for i := 0; i < b.N; i++ {
		before := d.reloads()
		var took, api []time.Duration
		for c := 0; c < changes; c++ {
			next := pods[(c+1)%2]
			start, acked := svc.WriteEndpointsAcked(b, next.Endpoint())
			api = append(api, acked.Sub(start))
			// Poll nearly as fast as requests go: the figure includes one
			// request's round trip, which is what a client would see.
			testenv.ConvergeEvery(b, 10*time.Second, servedPoll, func() error {
				r, err := d.get("bench.test", "/")
				if err != nil {
					return err
				}
				if r.header.Get("X-Pod") != next.Name {
					return fmt.Errorf("still %q", r.header.Get("X-Pod"))
				}
				return nil
			})
			took = append(took, time.Since(start))
		}
		reloads := d.reloads() - before
		qa, qr := quantiles(api), quantiles(less(took, api))
		p := report(b, took, reloads)
		fmt.Printf("endpoint write -> routed, %d changes: p50 %v, p90 %v, p99 %v, max %v; HAProxy reloads during churn: %d; of which the API server's answer to the write: p50 %v, p99 %v; and from that answer to routed: p50 %v, p99 %v\n",
			changes, p(0.5), p(0.9), p(0.99), took[len(took)-1], reloads, qa(0.5), qa(0.99), qr(0.5), qr(0.99))
	}
}

// BenchmarkNewHostConvergence: a new Ingress host on an existing Service is a
// map change, served without a reload.
func BenchmarkNewHostConvergence(b *testing.B) {
	e := newEnv(b)
	d := e.startDaemon()
	pods := e.pods("host", 31, 1)
	e.service("app", nil, pods[0])
	e.ingress("warm", nil, rule{host: "warm.test", path: "/", service: "app"})
	d.expect("warm.test", "/", 200, pods[0].Name)

	const hosts = 50
	for i := 0; i < b.N; i++ {
		before := d.reloads()
		var took []time.Duration
		for h := 0; h < hosts; h++ {
			host := fmt.Sprintf("h%d-%d.test", i, h)
			start := time.Now()
			e.ingress(fmt.Sprintf("h%d-%d", i, h), nil, rule{host: host, path: "/", service: "app"})
			testenv.ConvergeEvery(b, 10*time.Second, servedPoll, func() error {
				r, err := d.get(host, "/")
				if err != nil {
					return err
				}
				if r.status != 200 {
					return fmt.Errorf("status %d", r.status)
				}
				return nil
			})
			took = append(took, time.Since(start))
		}
		reloads := d.reloads() - before
		p := report(b, took, reloads)
		fmt.Printf("new host on an existing Service -> routed, %d Ingresses: p50 %v, p90 %v, max %v; reloads: %d\n",
			hosts, p(0.5), p(0.9), took[len(took)-1], reloads)
	}
}

// report sorts the samples, reports p50/p90/p99 and the reload count as
// benchmark metrics and returns the quantile function for the summary line.
func report(b *testing.B, took []time.Duration, reloads int) func(float64) time.Duration {
	slices.Sort(took)
	p := func(q float64) time.Duration { return took[int(q*float64(len(took)-1))] }
	b.ReportMetric(float64(p(0.5).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(p(0.9).Microseconds())/1000, "p90-ms")
	b.ReportMetric(float64(p(0.99).Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(reloads), "reloads")
	return p
}
