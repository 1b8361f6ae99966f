package model

import (
	"fmt"
	"slices"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// benchSnapshot has n Ingresses, each with its own host, two paths, an
// annotation, a Service and an EndpointSlice of three endpoints.
func benchSnapshot(n int) *Snapshot {
	s := &Snapshot{ConfigMap: configMap("servers-increment=10", "timeout-client=50s")}
	for i := range n {
		ns, name := fmt.Sprintf("ns-%d", i%50), fmt.Sprintf("app-%d", i)
		ing := withAnnotations(ingress(ns, name, i, rule(name+".example.com",
			path("/", "Prefix", name, "http"),
			path("/api/v1", "Exact", name, "http"),
		)), "haproxy.org/load-balance=leastconn")
		s.Ingresses = append(s.Ingresses, ing)
		s.Services = append(s.Services, service(ns, name, svcPort("http", 80, 8080)))
		s.EndpointSlices = append(s.EndpointSlices, endpointSlice(ns, name, name+"-abcde", discoveryv1.AddressTypeIPv4, "http", 8080,
			endpoint(fmt.Sprintf("198.18.%d.%d", i/250, i%250+1), "ready"),
			endpoint(fmt.Sprintf("198.19.%d.%d", i/250, i%250+1), "ready"),
			endpoint(fmt.Sprintf("198.18.%d.%d", 200+i/250, i%250+1), "draining"),
		))
	}
	return s
}

func BenchmarkBuild(b *testing.B) {
	for _, n := range []int{100, 1000, 5000, 10000} {
		b.Run(fmt.Sprintf("ingresses=%d", n), func(b *testing.B) {
			s := benchSnapshot(n)
			b.ReportAllocs()
			for b.Loop() {
				d := Build(s, Options{})
				if len(d.Backends) != n {
					b.Fatalf("%d backends, want %d", len(d.Backends), n)
				}
			}
		})
	}
}

// TestBenchSnapshot keeps the benchmark's input honest: every Ingress is
// served with both routes and three endpoints, and nothing is a problem.
func TestBenchSnapshot(t *testing.T) {
	d := Build(benchSnapshot(300), Options{})
	if len(d.Problems) != 0 || d.Routes.Len() != 600 || len(d.Backends) != 300 {
		t.Fatalf("%d problems, %d routes, %d backends", len(d.Problems), d.Routes.Len(), len(d.Backends))
	}
	for _, be := range d.Backends {
		if len(be.Endpoints) != 3 || be.Balance != "leastconn" || be.Slots != 10 {
			t.Fatalf("backend %+v", be)
		}
	}
}

// BenchmarkRefreshEndpoints is the endpoint-only path: one Service's slice
// changes among n.
func BenchmarkRefreshEndpoints(b *testing.B) {
	for _, n := range []int{100, 1000, 5000} {
		b.Run(fmt.Sprintf("ingresses=%d", n), func(b *testing.B) {
			s := benchSnapshot(n)
			prev := Build(s, Options{})
			s2 := cloneSnapshot(s)
			k := ServiceKey{"ns-7", "app-7"}
			sliceMutations[0].do(s2, k)
			changed := map[ServiceKey]bool{k: true}
			b.ReportAllocs()
			for b.Loop() {
				d := RefreshEndpoints(prev, s2, Options{}, changed)
				if len(d.Backends) != n {
					b.Fatalf("%d backends, want %d", len(d.Backends), n)
				}
			}
		})
	}
}

// BenchmarkUpdateIngresses is the new-host path: one plain Ingress with a
// new host on an existing Service among n, added to the previous result
// and deleted again, so every round takes the incremental path.
func BenchmarkUpdateIngresses(b *testing.B) {
	for _, n := range []int{1000, 5000, 10000} {
		b.Run(fmt.Sprintf("ingresses=%d", n), func(b *testing.B) {
			s := plainSnapshot(n)
			prev := Build(s, Options{})
			s2 := *s
			s2.Ingresses = append(slices.Clone(s.Ingresses), ingress("ns-7", "new", n+1, rule("new.example.com", path("/", "Prefix", "app-7", "http"))))
			b.ReportAllocs()
			for b.Loop() {
				added := updateIngresses(prev, &s2, Options{})
				if added == nil || len(added.Served) != n+1 {
					b.Fatal("adding took a full Build")
				}
				if prev = updateIngresses(added, s, Options{}); prev == nil {
					b.Fatal("deleting took a full Build")
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(2*b.N), "ns/update")
		})
	}
}

// BenchmarkUpdateNewService is the new-backend path: a new Service, its
// EndpointSlice and a plain Ingress to it among n, applied as the daemon
// tells them (TryUpdate with a lookup) to the previous result. Each round
// starts from a fresh Build's result, outside the timer, since the result
// adds the backend; ns/build is what that Build took.
func BenchmarkUpdateNewService(b *testing.B) {
	for _, n := range []int{1000, 5000, 10000} {
		b.Run(fmt.Sprintf("ingresses=%d", n), func(b *testing.B) {
			s := plainSnapshot(n)
			s2 := *s
			svc := service("ns-7", "fresh", svcPort("http", 80, 8080))
			ing := ingress("ns-7", "fresh", n+1, rule("fresh.example.com", path("/", "Prefix", "fresh", "http")))
			s2.Services = append(slices.Clone(s.Services), svc)
			s2.EndpointSlices = append(slices.Clone(s.EndpointSlices), endpointSlice("ns-7", "fresh", "fresh-abcde", discoveryv1.AddressTypeIPv4, "http", 8080,
				endpoint("198.18.42.1", "ready"), endpoint("198.18.42.2", "ready")))
			s2.Ingresses = append(slices.Clone(s.Ingresses), ing)
			// Indexed as the daemon's caches are: a look-up costs the
			// Services asked for.
			byKey := map[ServiceKey]*Snapshot{}
			part := func(k ServiceKey) *Snapshot {
				if byKey[k] == nil {
					byKey[k] = &Snapshot{}
				}
				return byKey[k]
			}
			for _, svc := range s2.Services {
				p := part(ServiceKey{svc.Namespace, svc.Name})
				p.Services = append(p.Services, svc)
			}
			for _, sl := range s2.EndpointSlices {
				k, _ := sliceService(sl)
				p := part(ServiceKey{k.ns, k.name})
				p.EndpointSlices = append(p.EndpointSlices, sl)
			}
			c := Change{
				Ingresses: map[ObjectRef]*networkingv1.Ingress{ingressRef(ing): ing},
				Services:  map[ServiceKey]bool{{"ns-7", "fresh"}: true},
				Lookup: func(keys map[ServiceKey]bool) *Snapshot {
					out := &Snapshot{}
					for k := range keys {
						if p := byKey[k]; p != nil {
							out.Services = append(out.Services, p.Services...)
							out.EndpointSlices = append(out.EndpointSlices, p.EndpointSlices...)
						}
					}
					return out
				},
			}
			b.ReportAllocs()
			var spent, built time.Duration
			for b.Loop() {
				b.StopTimer()
				start := time.Now()
				prev := Build(s, Options{})
				built += time.Since(start)
				b.StartTimer()
				start = time.Now()
				d, ok := TryUpdate(prev, c, Options{})
				spent += time.Since(start)
				if !ok || len(d.Backends) != n+1 {
					b.Fatal("the new Service took a full Build")
				}
			}
			b.ReportMetric(float64(spent.Nanoseconds())/float64(b.N), "ns/update")
			// What the same change cost before: a Build of the whole
			// snapshot (the previous result's, one Service short).
			b.ReportMetric(float64(built.Nanoseconds())/float64(b.N), "ns/build")
		})
	}
}

// BenchmarkTryUpdateNewHost is the new-host path as the daemon takes it:
// told of one new plain Ingress to a Service port already served, then of
// its deletion, TryUpdate applies each to the previous result. What it
// allocates is what the garbage collector pays for at every new host.
// With prepared, the loop's Prepare runs between changes, as the daemon
// does: ns/update is the time a change waits, Prepare's copies excluded
// (they are made while none waits; B/op counts them).
func BenchmarkTryUpdateNewHost(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		for _, prepared := range []bool{false, true} {
			b.Run(fmt.Sprintf("ingresses=%d/prepared=%v", n, prepared), func(b *testing.B) {
				prev := Build(plainSnapshot(n), Options{})
				ing := ingress("ns-7", "new", n+1, rule("new.example.com", path("/", "Prefix", "app-7", "http")))
				ref := ingressRef(ing)
				var waited time.Duration
				update := func(d *Desired, to *networkingv1.Ingress) *Desired {
					start := time.Now()
					next, ok := TryUpdate(d, Change{Ingresses: map[ObjectRef]*networkingv1.Ingress{ref: to}}, Options{})
					waited += time.Since(start)
					if !ok {
						b.Fatal("the update took a full Build")
					}
					if prepared {
						Prepare(next)
					}
					return next
				}
				b.ReportAllocs()
				for b.Loop() {
					added := update(prev, ing)
					if len(added.Served) != n+1 {
						b.Fatalf("%d Ingresses served, want %d", len(added.Served), n+1)
					}
					prev = update(added, nil)
				}
				b.ReportMetric(float64(waited.Nanoseconds())/float64(2*b.N), "ns/update")
			})
		}
	}
}
