package model

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// TestTenantLongPath: a path longer than MaxPathLength is refused with an
// Event that does not carry the whole path, so no map line can grow past
// what HAProxy reads in one piece.
func TestTenantLongPath(t *testing.T) {
	svcs := []*corev1.Service{service("victim", "web", svcPort("", 80, 8080)), service("evil", "web", svcPort("", 80, 8080))}
	long := "/" + strings.Repeat("x", 16369) + "victim.example.com/login"
	edge := "/" + strings.Repeat("y", MaxPathLength-1)
	ings := []*networkingv1.Ingress{
		ingress("victim", "web", 1, rule("victim.example.com", path("/login", "Exact", "web", 80))),
		ingress("evil", "web", 2, rule("b.example.com",
			path(long, "Exact", "web", 80), path(long, "Prefix", "web", 80), path(edge, "Exact", "web", 80))),
	}
	d := Build(&Snapshot{Ingresses: ings, Services: svcs}, Options{})
	if got, want := problemsOf(d), []string{"Ingress evil/web InvalidPath"}; !slices.Equal(got, want) {
		t.Fatalf("problems %v, want %v", got, want)
	}
	for _, p := range d.Problems {
		if len(p.Message) > 300 || !strings.Contains(p.Message, "more than 4096") {
			t.Errorf("message %d bytes, want a short one saying the cap: %.200s", len(p.Message), p.Message)
		}
	}
	for name, m := range d.Maps {
		for k, v := range m {
			if len(k)+len(v) > 253+MaxPathLength+256 {
				t.Errorf("map %s: key of %d bytes", name, len(k))
			}
		}
	}
	if _, ok := d.Maps[MapExact]["b.example.com"+edge]; !ok {
		t.Errorf("a path of exactly %d bytes is refused", MaxPathLength)
	}
	if r, ok := Match(d, "victim.example.com", "/login"); !ok || r.Backend != "victim_web_80" {
		t.Fatalf("victim /login: %+v %t", r, ok)
	}
}

// TestTenantHostTakeover: the first namespace to route a host owns it;
// other namespaces cannot add rules to it, catch its unmatched paths with
// host-less or wildcard rules, nor with spec.defaultBackend.
func TestTenantHostTakeover(t *testing.T) {
	svcs := []*corev1.Service{
		service("victim", "web", svcPort("", 80, 8080)), service("victim", "fallback", svcPort("", 80, 8080)),
		service("evil", "web", svcPort("", 80, 8080)), service("sys", "fallback", svcPort("", 80, 8080)),
	}
	victim := ingress("victim", "shop", 1,
		rule("shop.example.com", path("/app", "Prefix", "web", 80)),
		rule("", path("/own", "Prefix", "web", 80)))
	attack := withDefault(ingress("evil", "grab", 5,
		rule("shop.example.com", path("/", "Exact", "web", 80), path("/login", "Prefix", "web", 80)),
		rule("", path("/", "Prefix", "web", 80)),
		rule("*.com", path("/", "Prefix", "web", 80)),
		rule("*.example.com", path("/", "Prefix", "web", 80)),
		rule("evil.example.com", path("/", "Prefix", "web", 80))), "web", 80)
	ings := []*networkingv1.Ingress{attack, victim}

	type req struct{ host, path, want string }
	for _, c := range []struct {
		name     string
		opts     Options
		reqs     []req
		problems []string
	}{
		{
			name: "operator default",
			opts: Options{DefaultBackendService: "sys/fallback"},
			reqs: []req{
				{"shop.example.com", "/app/x", "victim_web_80"},
				{"shop.example.com", "/", "sys_fallback_80"},
				{"shop.example.com", "/login", "sys_fallback_80"},
				{"shop.example.com", "/own/x", "victim_web_80"}, // the owner's own host-less rule
				{"SHOP.example.com.", "/app", "victim_web_80"},
				{"evil.example.com", "/x", "evil_web_80"},
				{"unknown.example.com", "/x", "evil_web_80"}, // unowned: wildcard
				{"unknown.org", "/x", "evil_web_80"},         // unowned: host-less
				{"shop.example.com/app", "/internal", ""},    // refused, HAProxy answers 400
			},
			problems: []string{"Ingress evil/grab RuleConflict"},
		},
		{
			name: "tenant default",
			reqs: []req{
				{"shop.example.com", "/", ""}, // the global default is evil's: 404 instead
				{"shop.example.com", "/app", "victim_web_80"},
				{"unknown.org", "/", "evil_web_80"},
			},
			problems: []string{"Ingress evil/grab RuleConflict"},
		},
		{
			name: "sharing allowed",
			opts: Options{AllowCrossNamespaceHosts: true},
			reqs: []req{
				{"shop.example.com", "/", "evil_web_80"},
				{"shop.example.com", "/login/x", "evil_web_80"},
				{"shop.example.com", "/app", "victim_web_80"},
			},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := Build(&Snapshot{Ingresses: ings, Services: svcs}, c.opts)
			for _, r := range c.reqs {
				got, ok := Match(d, r.host, r.path)
				if !ok {
					got.Backend = ""
				}
				if got.Backend != r.want {
					t.Errorf("%s%s -> %q, want %q\n%s", r.host, r.path, got.Backend, r.want, Dump(d))
				}
			}
			var ps []string
			for _, p := range problemsOf(d) {
				if strings.HasSuffix(p, "RuleConflict") {
					ps = append(ps, p)
				}
			}
			if !slices.Equal(slices.Compact(ps), c.problems) {
				t.Errorf("problems %v, want %v", problemsOf(d), c.problems)
			}
			for _, p := range d.Problems {
				if p.Object.Namespace == "evil" && strings.Contains(p.Message, "victim") {
					t.Errorf("Event names the other tenant: %s", p.Message)
				}
			}
		})
	}

	// The victim's own spec.defaultBackend answers its unmatched paths.
	withOwn := withDefault(ingress("victim", "shop", 1, victim.Spec.Rules...), "fallback", 80)
	d := Build(&Snapshot{Ingresses: []*networkingv1.Ingress{attack, withOwn}, Services: svcs}, Options{DefaultBackendService: "sys/fallback"})
	for _, r := range []req{{"shop.example.com", "/x", "victim_fallback_80"}, {"unknown.net", "/nothing", "evil_web_80"}} {
		if got, _ := Match(d, r.host, r.path); got.Backend != r.want {
			t.Errorf("%s%s -> %q, want %q", r.host, r.path, got.Backend, r.want)
		}
	}
	if got, _ := Match(d, "shop.example.com", "/x"); got.Ingress != ingressRef(withOwn) || got.PathType != "" {
		t.Errorf("namespace default answers as %+v, want the default backend of Ingress victim/shop", got)
	}
	if d.DefaultBackend != "sys_fallback_80" {
		t.Errorf("default backend %q, want the operator's", d.DefaultBackend)
	}
}

// TestTenantEventWording: Events on a tenant's objects never name another
// namespace's objects.
func TestTenantEventWording(t *testing.T) {
	svcs := []*corev1.Service{service("victim", "web", svcPort("", 80, 8080)), service("evil", "web", svcPort("", 80, 8080))}
	ings := []*networkingv1.Ingress{
		withDefault(ingress("victim", "secret-name", 1, rule("", path("/x", "Prefix", "web", 80)), rule("v.example.com", path("/", "Prefix", "web", 80))), "web", 80),
		withDefault(ingress("evil", "grab", 2, rule("", path("/x", "Prefix", "web", 80)), rule("v.example.com", path("/", "Prefix", "web", 80))), "web", 80),
	}
	for _, o := range []Options{{}, {AllowCrossNamespaceHosts: true}} {
		d := Build(&Snapshot{Ingresses: ings, Services: svcs}, o)
		n := 0
		for _, p := range d.Problems {
			if p.Object.Namespace != "evil" {
				continue
			}
			n++
			if strings.Contains(p.Message, "victim") || strings.Contains(p.Message, "secret-name") {
				t.Errorf("Event on evil names victim's objects: %s", p.Message)
			}
		}
		if n < 2 {
			t.Errorf("want Events on the attacker, got %v", problemsOf(d))
		}
	}
}

// TestTenantEndpointAddresses: endpoints at the edge itself, link-local,
// unspecified or multicast addresses are refused with an Event on the
// Service; its other endpoints keep serving.
func TestTenantEndpointAddresses(t *testing.T) {
	ings := []*networkingv1.Ingress{ingress("ns", "web", 1, rule("a.example", path("/", "Prefix", "web", 80)))}
	svcs := []*corev1.Service{service("ns", "web", svcPort("http", 80, 8080))}
	v4 := endpointSlice("ns", "web", "web-4", discoveryv1.AddressTypeIPv4, "http", 8080,
		endpoint("198.18.0.1", "ready"), endpoint("127.0.0.1", "ready"), endpoint("169.254.169.254", "ready"),
		endpoint("0.0.0.0", "ready"), endpoint("0.1.2.3", "ready"), endpoint("224.0.1.1", "ready"),
		endpoint("255.255.255.255", "ready"), endpoint("203.0.113.7", "ready"))
	v6 := endpointSlice("ns", "web", "web-6", discoveryv1.AddressTypeIPv6, "http", 8080,
		endpoint("::1", "ready"), endpoint("fe80::1", "ready"), endpoint("::", "ready"), endpoint("ff05::1", "ready"),
		endpoint("::ffff:127.0.0.1", "ready"), endpoint("2001:db8::1", "ready"))
	o := Options{LocalAddresses: []netip.Addr{netip.MustParseAddr("203.0.113.7")}}
	s := &Snapshot{Ingresses: ings, Services: svcs, EndpointSlices: []*discoveryv1.EndpointSlice{v4, v6}}
	d := Build(s, o)
	var got []string
	for _, e := range backendByName(t, d, "ns_web_80").Endpoints {
		got = append(got, e.Address)
	}
	if want := []string{"198.18.0.1", "2001:db8::1"}; !slices.Equal(got, want) {
		t.Fatalf("endpoints %v, want %v", got, want)
	}
	n := 0
	for _, p := range d.Problems {
		if p.Object != serviceRef("ns", "web") || p.Reason != ReasonInvalidEndpoint {
			t.Errorf("unexpected problem %+v", p)
			continue
		}
		n++
	}
	if n != 12 {
		t.Errorf("%d InvalidEndpoint Events, want 12: %v", n, problemsOf(d))
	}
	// The endpoint refresh path reaches the same result.
	prev := Build(&Snapshot{Ingresses: ings, Services: svcs}, o)
	r := RefreshEndpoints(prev, s, o, map[ServiceKey]bool{{"ns", "web"}: true})
	if len(r.Problems) != len(d.Problems) || len(backendByName(t, r, "ns_web_80").Endpoints) != 2 {
		t.Errorf("RefreshEndpoints: %v", problemsOf(r))
	}
}

// TestTenantRequestQuirks: Match, like the HAProxy frontend, routes a
// trailing-dot host like the host and refuses a '/' in the host.
func TestTenantRequestQuirks(t *testing.T) {
	svcs := []*corev1.Service{service("ns", "app", svcPort("", 80, 8080)), service("ns", "root", svcPort("", 80, 8080))}
	ings := []*networkingv1.Ingress{ingress("ns", "web", 1, rule("shop.example.com",
		path("/app", "Prefix", "app", 80), path("/", "Prefix", "root", 80)))}
	d := Build(&Snapshot{Ingresses: ings, Services: svcs}, Options{})
	for _, c := range []struct{ host, path, want string }{
		{"shop.example.com.", "/app/x", "ns_app_80"},
		{"shop.example.com.:80", "/app", "ns_app_80"},
		{"shop.example.com/app", "/internal", ""},
		{"shop.example.com@x", "/", ""},
	} {
		r, ok := Match(d, c.host, c.path)
		if !ok {
			r.Backend = ""
		}
		if r.Backend != c.want {
			t.Errorf("%s%s -> %q, want %q", c.host, c.path, r.Backend, c.want)
		}
	}
}
