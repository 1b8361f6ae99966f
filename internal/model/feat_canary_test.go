package model

import (
	"maps"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

func canarySnapshot(ings ...*networkingv1.Ingress) *Snapshot {
	return &Snapshot{
		Ingresses: ings,
		Services: []*corev1.Service{
			service("ns", "web", svcPort("http", 80, 8080)),
			service("ns", "web-canary", svcPort("http", 80, 8080), svcPort("alt", 81, 8081)),
		},
		EndpointSlices: []*discoveryv1.EndpointSlice{
			endpointSlice("ns", "web", "web-1", discoveryv1.AddressTypeIPv4, "http", 8080, endpoint("198.18.1.1", "ready")),
			endpointSlice("ns", "web-canary", "web-canary-1", discoveryv1.AddressTypeIPv4, "http", 8080, endpoint("198.18.1.2", "ready")),
		},
	}
}

func TestCanary(t *testing.T) {
	const (
		svc    = ExtensionPrefix + "canary-service"
		port   = ExtensionPrefix + "canary-service-port"
		weight = ExtensionPrefix + "canary-weight"
	)
	tests := []struct {
		name     string
		ings     []*networkingv1.Ingress
		backend  map[string]string // canary-backend map; nil: no canary maps
		weight   map[string]string
		problems []string
	}{
		{
			name:    "weight",
			ings:    []*networkingv1.Ingress{webIngress("a", 0, svc+"=web-canary", weight+"=10")},
			backend: map[string]string{"ns_web_80": "ns_web-canary_80"},
			weight:  map[string]string{"ns_web_80": "10"},
		},
		{
			name:    "default weight is 0, explicit port",
			ings:    []*networkingv1.Ingress{webIngress("a", 0, svc+"=web-canary", port+"=81")},
			backend: map[string]string{"ns_web_80": "ns_web-canary_81"},
			weight:  map[string]string{"ns_web_80": "0"},
		},
		{
			name:     "other prefixes are not read, and are reported",
			ings:     []*networkingv1.Ingress{webIngress("a", 0, "haproxy.org/canary-service=web-canary", "haproxy.org/canary-weight=10")},
			problems: []string{"Ingress ns/a UnknownAnnotation"},
		},
		{
			name:     "invalid weight falls back to 0",
			ings:     []*networkingv1.Ingress{webIngress("a", 0, svc+"=web-canary", weight+"=101")},
			backend:  map[string]string{"ns_web_80": "ns_web-canary_80"},
			weight:   map[string]string{"ns_web_80": "0"},
			problems: []string{"Ingress ns/a InvalidAnnotation"},
		},
		{
			name:     "invalid service",
			ings:     []*networkingv1.Ingress{webIngress("a", 0, svc+"=Web Canary", weight+"=10")},
			problems: []string{"Ingress ns/a InvalidAnnotation", "Ingress ns/a InvalidCanary"},
		},
		{
			name:     "weight without service",
			ings:     []*networkingv1.Ingress{webIngress("a", 0, weight+"=10")},
			problems: []string{"Ingress ns/a InvalidCanary"},
		},
		{
			name:     "own service",
			ings:     []*networkingv1.Ingress{webIngress("a", 0, svc+"=web", weight+"=10")},
			problems: []string{"Ingress ns/a InvalidCanary"},
		},
		{
			name:     "missing service keeps the split, with no servers",
			ings:     []*networkingv1.Ingress{webIngress("a", 0, svc+"=gone", weight+"=10")},
			backend:  map[string]string{"ns_web_80": "ns_gone_80"},
			weight:   map[string]string{"ns_web_80": "10"},
			problems: []string{"Ingress ns/a ServiceNotFound"},
		},
		{
			name: "oldest Ingress wins, the others are told",
			ings: []*networkingv1.Ingress{
				webIngress("a", 0),
				webIngress("b", 1, svc+"=web-canary", weight+"=20"),
				webIngress("c", 2, svc+"=web-canary", weight+"=30"),
			},
			backend:  map[string]string{"ns_web_80": "ns_web-canary_80"},
			weight:   map[string]string{"ns_web_80": "20"},
			problems: []string{"Ingress ns/a CanaryShared", "Ingress ns/c AnnotationConflict"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Build(canarySnapshot(tt.ings...), Options{})
			if got := d.Maps[MapCanaryBackend]; !maps.Equal(got, tt.backend) || (tt.backend == nil) != (got == nil) {
				t.Errorf("canary-backend map %v, want %v", got, tt.backend)
			}
			if got := d.Maps[MapCanaryWeight]; !maps.Equal(got, tt.weight) {
				t.Errorf("canary-weight map %v, want %v", got, tt.weight)
			}
			got := problemsOf(d)
			slices.Sort(got)
			got = slices.Compact(got)
			if !slices.Equal(got, tt.problems) {
				t.Errorf("problems %q, want %q\n%s", got, tt.problems, Dump(d))
			}
			for main, c := range tt.backend {
				be := backendByName(t, d, c)
				if c == "ns_web-canary_80" && (len(be.Endpoints) != 1 || be.Endpoints[0].Address != "198.18.1.2") {
					t.Errorf("canary backend endpoints %v", be.Endpoints)
				}
				// Routes keep the main backend; Match says so.
				r, ok := Match(d, "a.example", "/x")
				if ok && r.Backend != main {
					t.Errorf("route to %s, want the main backend %s", r.Backend, main)
				}
				name, w, ok := Canary(d, main)
				if !ok || name != c || w < 0 || w > MaxCanaryWeight {
					t.Errorf("Canary(%s) = %s %d %t", main, name, w, ok)
				}
			}
		})
	}
}

// TestCanaryInheritsIngressSettings: the canary backend takes the
// Ingress-scope settings of the Ingresses routing to the main backend, so a
// split never bypasses an older Ingress's access control.
func TestCanaryInheritsIngressSettings(t *testing.T) {
	d := Build(canarySnapshot(
		webIngress("a", 0, "haproxy.org/allow-list=198.51.100.0/24", "haproxy.org/load-balance=leastconn",
			ExtensionPrefix+"canary-service=web-canary", ExtensionPrefix+"canary-weight=50"),
		webIngress("b", 1),
	), Options{})
	main, c := backendByName(t, d, "ns_web_80"), backendByName(t, d, "ns_web-canary_80")
	if c.Balance != "leastconn" || c.Features.AllowList != main.Features.AllowList || main.Features.AllowList == "" {
		t.Fatalf("canary backend balance %q allow-list %q; main %q %q", c.Balance, c.Features.AllowList, main.Balance, main.Features.AllowList)
	}
	// b asks for other settings: its own variant, which a's canary does
	// not split.
	r, ok := Match(d, "b.example", "/")
	if !ok || r.Backend == "ns_web_80" {
		t.Fatalf("b routes to %q, want its own variant", r.Backend)
	}
	if cb, _, ok := Canary(d, r.Backend); ok {
		t.Errorf("b's backend %s has canary %s", r.Backend, cb)
	}
}
