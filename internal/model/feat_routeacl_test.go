package model

import (
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

func TestParseRouteACL(t *testing.T) {
	valid := map[string]string{
		"req.hdr(x-canary) -m str yes":        "{ req.hdr(x-canary) -m str yes }",
		"req.hdr(x-canary) yes":               "{ req.hdr(x-canary) -m str yes }",
		"req.cook(beta)":                      "{ req.cook(beta) -m found }",
		"req.cook(beta) -m found":             "{ req.cook(beta) -m found }",
		"  url_param(v)   -m beg  2 3  ":      "{ url_param(v) -m beg 2 3 }",
		"req.hdr(x-v),lower -m sub beta":      "{ req.hdr(x-v),lower -m sub beta }",
		"src -m ip 198.18.0.0/15 203.0.113.7": "{ src -m ip 198.18.0.0/15 203.0.113.7 }",
		"req.hdr_cnt(via) -m int gt 1":        "{ req.hdr_cnt(via) -m int gt 1 }",
		"req.hdr(x-v) -m len 1:8":             "{ req.hdr(x-v) -m len 1:8 }",
		"req.hdr(user-agent) -m reg ^curl/":   "{ req.hdr(user-agent) -m reg ^curl/ }",
	}
	for in, want := range valid {
		got, err := parseRouteACL(in)
		if err != nil || got != want {
			t.Errorf("parseRouteACL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	invalid := []string{
		"",
		"env(HOME) -m found",        // not in the allow-list
		"var(txn.backend) -m str x", // reads HAProxy state
		"req.hdr(x) -m dom x",       // method not allowed
		"req.hdr(x) -m",             // method missing
		"req.hdr(x) -m str",         // pattern missing
		"req.hdr(x) -m found yes",   // found takes none
		"req.hdr(x) -m str a } || { src -m found", // braces
		"req.hdr(x) -m str a#b",                   // comment
		`req.hdr(x) -m str "a"`,                   // quotes
		"req.hdr(x) -m str -i",                    // a flag
		"req.hdr(x) -m int abc",                   // not an int
		"src -m ip 203.0.113.300",                 // not an address
		"req.hdr(x) -m reg (",                     // regex does not compile
	}
	for _, in := range invalid {
		if got, err := parseRouteACL(in); err == nil {
			t.Errorf("parseRouteACL(%q) = %q, want an error", in, got)
		}
	}
	if got, err := parseRouteACL(strings.Repeat("req.hdr(x) ", 1) + strings.Repeat("a ", maxRouteACLPatterns+1)); err == nil {
		t.Errorf("too many patterns accepted: %q", got)
	}
}

func routeACLSnapshot(acl string, ings ...*networkingv1.Ingress) *Snapshot {
	beta := service("ns", "beta", svcPort("http", 80, 8080))
	if acl != "" {
		beta.Annotations = map[string]string{"haproxy.org/route-acl": acl}
	}
	return &Snapshot{
		Ingresses: ings,
		Services:  []*corev1.Service{service("ns", "web", svcPort("http", 80, 8080)), beta},
	}
}

func TestRouteACL(t *testing.T) {
	plain := ingress("ns", "a", 0, rule("a.example.com",
		path("/", "Prefix", "web", 80), path("/api", "Prefix", "web", 80), path("/x", "Exact", "web", 80)))
	cond := ingress("ns", "b", 1, rule("a.example.com", path("/", "Prefix", "beta", 80)),
		rule("", path("/beta", "Exact", "beta", 80)))
	d := Build(routeACLSnapshot("req.hdr(x-canary) -m str yes", plain, cond), Options{})
	if p := problemsOf(d); len(p) > 0 {
		t.Fatalf("problems: %v", p)
	}
	if !slices.Equal(d.RouteACLs, []RouteACL{{Backend: "ns_beta_80", Condition: "{ req.hdr(x-canary) -m str yes }"}}) {
		t.Errorf("RouteACLs = %+v", d.RouteACLs)
	}
	// The plain routes keep their keys.
	if be := d.Maps[MapPrefix]["a.example.com/"]; be != "ns_web_80" {
		t.Errorf("path-prefix a.example.com/ = %q", be)
	}
	wantExact := map[string]string{
		"a.example.com/api": RouteACLShadow, // longer plain keys stop the lookup
		"a.example.com/x":   RouteACLShadow,
		"/beta":             ",ns_beta_80,",
		"@ns/beta":          ",ns_beta_80,", // owned hosts look host-less rules up there
	}
	wantPrefix := map[string]string{
		"a.example.com/":     ",ns_beta_80,",
		"a.example.com/api/": RouteACLShadow,
	}
	if got := d.Maps[MapRouteACLExact]; !maps.Equal(got, wantExact) {
		t.Errorf("route-acl-exact = %v, want %v", got, wantExact)
	}
	if got := d.Maps[MapRouteACLPrefix]; !maps.Equal(got, wantPrefix) {
		t.Errorf("route-acl-prefix = %v, want %v", got, wantPrefix)
	}
	if len(d.CondRoutes) != 2 || d.Routes.Len() != 3 {
		t.Errorf("routes: %d conditional, %d plain", len(d.CondRoutes), d.Routes.Len())
	}
}

// Several conditional routes on one host and path are tried oldest
// Ingress first.
func TestRouteACLOrder(t *testing.T) {
	s := routeACLSnapshot("req.hdr(x-canary) -m str yes",
		ingress("ns", "new", 2, rule("a.example.com", path("/", "Prefix", "gamma", 80))),
		ingress("ns", "old", 1, rule("a.example.com", path("/", "Prefix", "beta", 80))))
	gamma := service("ns", "gamma", svcPort("http", 80, 8080))
	gamma.Annotations = map[string]string{"haproxy.org/route-acl": "req.cook(gamma)"}
	s.Services = append(s.Services, gamma)
	d := Build(s, Options{})
	if got := d.Maps[MapRouteACLPrefix]["a.example.com/"]; got != ",ns_beta_80,ns_gamma_80," {
		t.Errorf("route-acl-prefix a.example.com/ = %q", got)
	}
	var order []string
	for _, a := range d.RouteACLs {
		order = append(order, a.Backend)
	}
	if !slices.Equal(order, []string{"ns_beta_80", "ns_gamma_80"}) {
		t.Errorf("rule order %v", order)
	}
}

// An invalid route-acl leaves the Service's routes out, with an Event on the
// Service and on the Ingress; other Services' routes are unaffected.
func TestRouteACLInvalid(t *testing.T) {
	plain := ingress("ns", "a", 0, rule("a.example.com", path("/", "Prefix", "web", 80)))
	cond := ingress("ns", "b", 1, rule("a.example.com", path("/", "Prefix", "beta", 80)), rule("b.example.com", path("/", "Prefix", "beta", 80)))
	d := Build(routeACLSnapshot("env(HOME) -m found", plain, cond), Options{})
	want := []string{"Ingress ns/b InvalidRouteACL", "Service ns/beta InvalidAnnotation"}
	if got := slices.Compact(problemsOf(d)); !slices.Equal(got, want) {
		t.Errorf("problems %v, want %v", got, want)
	}
	for _, p := range d.Problems {
		if p.Reason == ReasonInvalidAnnotation && !strings.Contains(p.Message, "left out") {
			t.Errorf("message %q does not say the routes are left out", p.Message)
		}
	}
	if len(d.CondRoutes) != 0 || len(d.RouteACLs) != 0 || len(d.Maps[MapRouteACLPrefix]) != 0 {
		t.Errorf("conditional routes installed: %+v %+v", d.CondRoutes, d.RouteACLs)
	}
	if _, ok := d.Maps[MapPrefix]["b.example.com/"]; ok {
		t.Error("the route of an invalid route-acl became a plain route")
	}
	if r, ok := Match(d, "a.example.com", "/"); !ok || r.Backend != "ns_web_80" {
		t.Errorf("plain route: %+v %v", r, ok)
	}
}
