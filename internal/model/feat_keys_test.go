package model

import (
	"slices"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
)

func TestCookiePersistenceNoDynamic(t *testing.T) {
	tests := []struct {
		name     string
		svcAnn   map[string]string
		ings     []*networkingv1.Ingress
		cookie   string
		static   bool
		problems []string
	}{
		{name: "none", ings: []*networkingv1.Ingress{webIngress("a", 0)}},
		{
			name:   "static on the service",
			svcAnn: map[string]string{"haproxy.org/cookie-persistence-no-dynamic": "SERVERID"},
			ings:   []*networkingv1.Ingress{webIngress("a", 0)},
			cookie: "SERVERID", static: true,
		},
		{
			name:   "static on the ingress",
			ings:   []*networkingv1.Ingress{webIngress("a", 0, "haproxy.org/cookie-persistence-no-dynamic=SID")},
			cookie: "SID", static: true,
		},
		{
			name:   "the dynamic cookie wins",
			svcAnn: map[string]string{"haproxy.org/cookie-persistence-no-dynamic": "STATIC"},
			ings:   []*networkingv1.Ingress{webIngress("a", 0, "haproxy.org/cookie-persistence=DYN")},
			cookie: "DYN", problems: []string{"Ingress ns/a AnnotationConflict"},
		},
		{
			name:     "invalid name is ignored",
			ings:     []*networkingv1.Ingress{webIngress("a", 0, "haproxy.org/cookie-persistence-no-dynamic=a;b")},
			problems: []string{"Ingress ns/a InvalidAnnotation"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := canarySnapshot(tt.ings...)
			s.Services[0].Annotations = tt.svcAnn
			d := Build(s, Options{})
			f := backendByName(t, d, "ns_web_80").Features
			if f.Cookie != tt.cookie || f.CookieStatic != tt.static {
				t.Errorf("cookie %q static %v, want %q %v", f.Cookie, f.CookieStatic, tt.cookie, tt.static)
			}
			if got := problemsOf(d); !slices.Equal(got, tt.problems) {
				t.Errorf("problems = %v, want %v", got, tt.problems)
			}
		})
	}
}

func TestStandaloneBackend(t *testing.T) {
	const on = "haproxy.org/standalone-backend=true"
	for _, tt := range []struct {
		name     string
		svcAnn   map[string]string
		ings     []*networkingv1.Ingress
		backends int
	}{
		{"shared", nil, []*networkingv1.Ingress{webIngress("a", 0), webIngress("b", 1)}, 1},
		{"one standalone", nil, []*networkingv1.Ingress{webIngress("a", 0, on), webIngress("b", 1)}, 2},
		{"both standalone, same settings", nil, []*networkingv1.Ingress{webIngress("a", 0, on), webIngress("b", 1, on), webIngress("c", 2)}, 3},
		{"on the service", map[string]string{"haproxy.org/standalone-backend": "true"}, []*networkingv1.Ingress{webIngress("a", 0), webIngress("b", 1)}, 2},
		{"the service says no", map[string]string{"haproxy.org/standalone-backend": "false"}, []*networkingv1.Ingress{webIngress("a", 0, on), webIngress("b", 1, on)}, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := canarySnapshot(tt.ings...)
			s.Services[0].Annotations = tt.svcAnn
			d := Build(s, Options{})
			n := 0
			for _, be := range d.Backends {
				if be.Service == "web" {
					n++
					if len(be.Endpoints) != 1 {
						t.Errorf("backend %s has endpoints %v", be.Name, be.Endpoints)
					}
				}
			}
			if n != tt.backends {
				t.Errorf("%d backends for Service web, want %d\n%s", n, tt.backends, Dump(d))
			}
			if p := problemsOf(d); len(p) != 0 {
				t.Errorf("problems: %v", p)
			}
		})
	}
}
