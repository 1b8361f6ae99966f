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
