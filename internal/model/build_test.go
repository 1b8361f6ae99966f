package model

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

func TestRuleConflicts(t *testing.T) {
	svcs := []*corev1.Service{
		service("a", "svc", svcPort("", 80, 8080)), service("b", "svc", svcPort("", 80, 8080)),
		service("a", "svc2", svcPort("", 80, 8080)),
	}
	tests := []struct {
		name     string
		ings     []*networkingv1.Ingress
		request  string
		want     string
		problems []string
	}{
		{
			name: "oldest wins",
			ings: []*networkingv1.Ingress{
				ingress("b", "new", 5, rule("x.example", path("/api", "Prefix", "svc", 80))),
				ingress("a", "old", 1, rule("x.example", path("/api/", "Prefix", "svc", 80))),
			},
			request:  "/api",
			want:     "a_svc_80",
			problems: []string{"Ingress b/new RuleConflict"},
		},
		{
			name: "same age: namespace/name decides",
			ings: []*networkingv1.Ingress{
				ingress("b", "x", 1, rule("x.example", path("/api", "Prefix", "svc", 80))),
				ingress("a", "x", 1, rule("x.example", path("/api", "Prefix", "svc", 80))),
			},
			request:  "/api",
			want:     "a_svc_80",
			problems: []string{"Ingress b/x RuleConflict"},
		},
		{
			name: "different types do not conflict",
			ings: []*networkingv1.Ingress{
				ingress("a", "prefix", 1, rule("x.example", path("/api", "Prefix", "svc", 80))),
				ingress("a", "exact", 5, rule("x.example", path("/api", "Exact", "svc2", 80))),
			},
			request: "/api",
			want:    "a_svc2_80", // Exact owns the exact key though it is younger
		},
		{
			name: "shared host merges within a namespace",
			ings: []*networkingv1.Ingress{
				ingress("a", "api", 1, rule("x.example", path("/api", "Prefix", "svc", 80))),
				ingress("a", "web", 5, rule("x.example", path("/", "Prefix", "svc2", 80))),
			},
			request: "/web",
			want:    "a_svc2_80",
		},
		{
			name: "another namespace cannot add rules to a host",
			ings: []*networkingv1.Ingress{
				ingress("a", "api", 1, rule("x.example", path("/api", "Prefix", "svc", 80))),
				ingress("b", "web", 5, rule("x.example", path("/", "Prefix", "svc", 80), path("/api", "Exact", "svc", 80))),
			},
			request:  "/api",
			want:     "a_svc_80",
			problems: []string{"Ingress b/web RuleConflict"},
		},
		{
			name: "duplicate rule within one Ingress, different backends",
			ings: []*networkingv1.Ingress{
				ingress("a", "dup", 1,
					rule("x.example", path("/api", "Prefix", "svc", 80)),
					rule("x.example", path("/api", "Prefix", "svc", 81))),
			},
			request: "/api",
			want:    "a_svc_80",
			// The losing rule's backend is never built, so its missing port
			// is not reported.
			problems: []string{"Ingress a/dup RuleConflict"},
		},
		{
			name: "duplicate rule within one Ingress, same backend",
			ings: []*networkingv1.Ingress{
				ingress("a", "dup", 1,
					rule("x.example", path("/api", "Prefix", "svc", 80)),
					rule("x.example", path("/api", "ImplementationSpecific", "svc", 80))),
			},
			request: "/api",
			want:    "a_svc_80",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Build(&Snapshot{Ingresses: tt.ings, Services: svcs}, Options{})
			r, ok := Match(d, "x.example", tt.request)
			if !ok || r.Backend != tt.want {
				t.Fatalf("Match = %+v, %t; want %s\n%s", r, ok, tt.want, Dump(d))
			}
			if got := problemsOf(d); !slices.Equal(got, tt.problems) {
				t.Fatalf("problems %v, want %v", got, tt.problems)
			}
			if len(d.Served) != len(tt.ings) {
				t.Fatalf("a conflict loser is still served (status): served %v", d.Served)
			}
		})
	}
}

func TestDefaultBackend(t *testing.T) {
	svcs := []*corev1.Service{
		service("a", "one", svcPort("http", 80, 8080)),
		service("b", "two", svcPort("http", 80, 8080)),
		service("sys", "fallback", svcPort("", 8080, 8080), svcPort("", 9090, 9090)),
		service("sys", "udp", corev1.ServicePort{Port: 53, Protocol: corev1.ProtocolUDP}),
	}
	old := withDefault(ingress("b", "old", 1), "two", "http")
	young := withDefault(ingress("a", "young", 9), "one", 80)
	tests := []struct {
		name     string
		ings     []*networkingv1.Ingress
		flag     string
		want     string
		source   string
		problems []string
	}{
		{"oldest Ingress wins", []*networkingv1.Ingress{young, old}, "", "b_two_http", "b/old",
			[]string{"Ingress a/young DefaultBackendConflict"}},
		{"the flag beats every Ingress", []*networkingv1.Ingress{young, old}, "sys/fallback", "sys_fallback_8080", "", nil},
		{"flag, first port", nil, "sys/fallback", "sys_fallback_8080", "", nil},
		{"none", nil, "", "", "", nil},
		{"flag names a missing Service", nil, "sys/missing", "", "", []string{"Service sys/missing ServiceNotFound"}},
		{"flag names a Service without TCP port", nil, "sys/udp", "", "", []string{"Service sys/udp PortNotFound"}},
		// Logged only: a flag has no object to attach an Event to.
		{"flag malformed", nil, "fallback", "", "", []string{"Flag  InvalidOption"}},
		{"resource backend", []*networkingv1.Ingress{func() *networkingv1.Ingress {
			ing := ingress("a", "res", 1)
			ing.Spec.DefaultBackend = &networkingv1.IngressBackend{}
			return ing
		}()}, "", "", "", []string{"Ingress a/res UnsupportedBackend"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Build(&Snapshot{Ingresses: tt.ings, Services: svcs}, Options{DefaultBackendService: tt.flag})
			if d.DefaultBackend != tt.want {
				t.Fatalf("DefaultBackend %q, want %q", d.DefaultBackend, tt.want)
			}
			src := ""
			if d.DefaultSource != (ObjectRef{}) {
				src = d.DefaultSource.Namespace + "/" + d.DefaultSource.Name
			}
			if src != tt.source {
				t.Fatalf("DefaultSource %q, want %q", src, tt.source)
			}
			if got := problemsOf(d); !slices.Equal(got, tt.problems) {
				t.Fatalf("problems %v, want %v", got, tt.problems)
			}
			if tt.want != "" {
				backendByName(t, d, tt.want)
			}
		})
	}
}

func TestEndpoints(t *testing.T) {
	svc := service("ns", "web", svcPort("http", 80, 8080), svcPort("admin", 81, 9090))
	sliceA := endpointSlice("ns", "web", "web-a", discoveryv1.AddressTypeIPv4, "http", 8080,
		endpoint("198.18.0.3", "ready"),
		endpoint("198.18.0.1", "nil"),
		endpoint("198.18.0.10", "draining"),
		endpoint("198.18.0.11", "terminated"),
		endpoint("198.18.0.12", "notready"),
		endpoint("198.18.0.2", "ready"),
	)
	// A second slice repeats one endpoint as draining during a handover,
	// and adds a new one.
	sliceB := endpointSlice("ns", "web", "web-b", discoveryv1.AddressTypeIPv4, "http", 8080,
		endpoint("198.18.0.2", "draining"),
		endpoint("198.18.0.4", "ready"),
	)
	sliceV6 := endpointSlice("ns", "web", "web-v6", discoveryv1.AddressTypeIPv6, "http", 8080,
		endpoint("2001:db8::1", "ready"),
	)
	sliceFQDN := endpointSlice("ns", "web", "web-fqdn", discoveryv1.AddressTypeFQDN, "http", 8080,
		endpoint("pod.example", "ready"),
	)
	sliceAdmin := endpointSlice("ns", "web", "web-admin", discoveryv1.AddressTypeIPv4, "admin", 9090,
		endpoint("198.18.0.1", "ready"),
	)
	sliceOther := endpointSlice("ns", "other", "other", discoveryv1.AddressTypeIPv4, "http", 8080,
		endpoint("198.18.9.9", "ready"),
	)
	sliceBad := endpointSlice("ns", "web", "web-bad", discoveryv1.AddressTypeIPv4, "http", 8080,
		endpoint("2001:db8::2", "ready"),
	)
	ing := ingress("ns", "web", 0, rule("x.example",
		path("/", "Prefix", "web", "http"),
		path("/admin", "Prefix", "web", 81),
	))
	d := Build(&Snapshot{
		Ingresses:      []*networkingv1.Ingress{ing},
		Services:       []*corev1.Service{svc},
		EndpointSlices: []*discoveryv1.EndpointSlice{sliceA, sliceB, sliceV6, sliceFQDN, sliceAdmin, sliceOther, sliceBad},
	}, Options{})

	want := []Endpoint{
		{Address: "198.18.0.1", Port: 8080},
		{Address: "198.18.0.2", Port: 8080},
		{Address: "198.18.0.3", Port: 8080},
		{Address: "198.18.0.4", Port: 8080},
		{Address: "198.18.0.10", Port: 8080, Draining: true},
		{Address: "2001:db8::1", Port: 8080},
	}
	if got := backendByName(t, d, "ns_web_http").Endpoints; !reflect.DeepEqual(got, want) {
		t.Errorf("http endpoints\n got %v\nwant %v", got, want)
	}
	if got := backendByName(t, d, "ns_web_81").Endpoints; !reflect.DeepEqual(got, []Endpoint{{Address: "198.18.0.1", Port: 9090}}) {
		t.Errorf("admin endpoints (port 81 by number, targetPort through the slice port name): %v", got)
	}
	if got := problemsOf(d); !slices.Equal(got, []string{"EndpointSlice ns/web-bad InvalidEndpoint"}) {
		t.Errorf("problems %v", got)
	}
}

func TestServiceProblems(t *testing.T) {
	ext := service("ns", "ext")
	ext.Spec.Type = corev1.ServiceTypeExternalName
	ext.Spec.ExternalName = "db.example"
	ing := ingress("ns", "web", 0, rule("x.example",
		path("/missing", "Prefix", "missing", 80),
		path("/port", "Prefix", "web", 99),
		path("/name", "Prefix", "web", "nope"),
		path("/ext", "Prefix", "ext", 80),
		path("/", "Prefix", "web", 80),
	))
	d := Build(&Snapshot{
		Ingresses: []*networkingv1.Ingress{withDefault(ing, "web", 80)},
		Services:  []*corev1.Service{service("ns", "web", svcPort("", 80, 8080)), ext},
	}, Options{DisableExternalName: true})
	want := []string{
		"Ingress ns/web PortNotFound", "Ingress ns/web PortNotFound",
		"Ingress ns/web ServiceNotFound", "Ingress ns/web UnsupportedService",
	}
	if got := problemsOf(d); !slices.Equal(got, want) {
		t.Fatalf("problems %v, want %v", got, want)
	}
	// The broken routes stay: they lead to an empty backend (HAProxy's
	// 503), never to the catch-all rule or the default backend.
	for p, be := range map[string]string{
		"/missing/x": "ns_missing_80", "/port": "ns_web_99", "/name": "ns_web_nope", "/ext": "ns_ext_80", "/other": "ns_web_80",
	} {
		r, ok := Match(d, "x.example", p)
		if !ok || r.Backend != be {
			t.Errorf("%s -> %s, want %s", p, r.Backend, be)
		}
		if b := backendByName(t, d, be); len(b.Endpoints) != 0 || b.Slots != 4 {
			t.Errorf("backend %s: %d endpoints, %d slots", be, len(b.Endpoints), b.Slots)
		}
	}
}

func TestBackendNames(t *testing.T) {
	ing := ingress("ns", "web", 0, rule("x.example",
		path("/a", "Prefix", "web", "http"),
		path("/b", "Prefix", "web", 80),
		path("/c", "Prefix", "Web_X", 80),
		path("/d", "Prefix", "web", 0),
	))
	ing.Spec.Rules[0].HTTP.Paths = append(ing.Spec.Rules[0].HTTP.Paths,
		networkingv1.HTTPIngressPath{Path: "/e", Backend: networkingv1.IngressBackend{Resource: nil}})
	d := Build(&Snapshot{Ingresses: []*networkingv1.Ingress{ing}, Services: []*corev1.Service{
		service("ns", "web", svcPort("http", 80, 8080)),
	}}, Options{})
	var names []string
	for _, b := range d.Backends {
		names = append(names, b.Name)
		if b.Port != map[string]string{"ns_web_http": "http", "ns_web_80": "80"}[b.Name] {
			t.Errorf("backend %s port %q", b.Name, b.Port)
		}
	}
	// Two spellings of one Service port are two backends, as in the HAProxy
	// Kubernetes Ingress Controller.
	if !slices.Equal(names, []string{"ns_web_80", "ns_web_http"}) {
		t.Errorf("backends %v", names)
	}
	want := []string{"Ingress ns/web InvalidBackend", "Ingress ns/web InvalidBackend", "Ingress ns/web UnsupportedBackend"}
	if got := problemsOf(d); !slices.Equal(got, want) {
		t.Errorf("problems %v, want %v", got, want)
	}
}

func TestSlots(t *testing.T) {
	for _, tt := range []struct {
		increment string
		n, want   int
	}{
		// Unset: sized to need, a quarter (at least one) free, multiples of 4.
		{"", 0, 4}, {"", 3, 4}, {"", 4, 8}, {"", 10, 12}, {"", 12, 16}, {"", 13, 16}, {"", 17, 24}, {"", 100, 128},
		// Set: blocks of the increment, as the peer allocates them.
		{"42", 0, 42}, {"42", 43, 84}, {"10", 0, 10}, {"10", 10, 10}, {"10", 11, 20}, {"1", 5, 5},
	} {
		var eps []discoveryv1.Endpoint
		for i := range tt.n {
			eps = append(eps, endpoint(fmt.Sprintf("198.18.1.%d", i+1), "ready"))
		}
		cm := configMap()
		if tt.increment != "" {
			cm = configMap("servers-increment=" + tt.increment)
		}
		d := Build(&Snapshot{
			Ingresses:      []*networkingv1.Ingress{ingress("ns", "web", 0, rule("", path("/", "Prefix", "web", 80)))},
			Services:       []*corev1.Service{service("ns", "web", svcPort("", 80, 8080))},
			EndpointSlices: []*discoveryv1.EndpointSlice{endpointSlice("ns", "web", "web", discoveryv1.AddressTypeIPv4, "", 8080, eps...)},
			ConfigMap:      cm,
		}, Options{})
		if got := d.Backends[0].Slots; got != tt.want || len(d.Backends[0].Endpoints) != tt.n {
			t.Errorf("increment %q, %d endpoints: %d slots, want %d", tt.increment, tt.n, got, tt.want)
		}
	}
}

// TestDeterministic builds the same objects in shuffled orders: the result
// must not change, and the snapshot must not be touched.
func TestDeterministic(t *testing.T) {
	s, o := loadCase(t, "testdata/conflicts.yaml")
	before := Dump(Build(s, o))
	frozen := deepCopySnapshot(s)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 20 {
		c := deepCopySnapshot(s)
		rng.Shuffle(len(c.Ingresses), func(i, j int) { c.Ingresses[i], c.Ingresses[j] = c.Ingresses[j], c.Ingresses[i] })
		rng.Shuffle(len(c.Services), func(i, j int) { c.Services[i], c.Services[j] = c.Services[j], c.Services[i] })
		rng.Shuffle(len(c.EndpointSlices), func(i, j int) {
			c.EndpointSlices[i], c.EndpointSlices[j] = c.EndpointSlices[j], c.EndpointSlices[i]
		})
		rng.Shuffle(len(c.IngressClasses), func(i, j int) {
			c.IngressClasses[i], c.IngressClasses[j] = c.IngressClasses[j], c.IngressClasses[i]
		})
		if got := Dump(Build(c, o)); got != before {
			t.Fatalf("shuffle %d changed the result:\n%s\nwant:\n%s", i, got, before)
		}
	}
	if !reflect.DeepEqual(s, frozen) {
		t.Fatal("Build mutated the snapshot")
	}
}

func deepCopySnapshot(s *Snapshot) *Snapshot {
	c := &Snapshot{}
	for _, x := range s.Ingresses {
		c.Ingresses = append(c.Ingresses, x.DeepCopy())
	}
	for _, x := range s.IngressClasses {
		c.IngressClasses = append(c.IngressClasses, x.DeepCopy())
	}
	for _, x := range s.Services {
		c.Services = append(c.Services, x.DeepCopy())
	}
	for _, x := range s.EndpointSlices {
		c.EndpointSlices = append(c.EndpointSlices, x.DeepCopy())
	}
	for _, x := range s.Secrets {
		c.Secrets = append(c.Secrets, x.DeepCopy())
	}
	c.ConfigMap = s.ConfigMap.DeepCopy()
	return c
}

func TestNilSnapshot(t *testing.T) {
	d := Build(nil, Options{})
	if d.Maps[MapExact] == nil || d.Maps[MapPrefix] == nil || d.DefaultBackend != "" || len(d.Problems) != 0 {
		t.Fatalf("empty snapshot: %+v", d)
	}
	if _, ok := Match(d, "x", "/"); ok {
		t.Fatal("empty model matched")
	}
}
