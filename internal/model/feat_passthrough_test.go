package model

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
)

func TestSSLPassthrough(t *testing.T) {
	const on = "haproxy.org/ssl-passthrough=true"
	tests := []struct {
		name     string
		cm       []string
		opts     Options
		svcAnn   map[string]string
		ings     []*networkingv1.Ingress
		sni      map[string]string // MapSSLPassthrough; nil: none
		routes   []string          // hosts of the HTTP routes
		failed   bool              // the passthrough backend gets no servers
		problems []string
	}{
		{
			name:   "off by default",
			ings:   []*networkingv1.Ingress{webIngress("a", 0)},
			routes: []string{"a.example"},
		},
		{
			name: "ingress annotation",
			ings: []*networkingv1.Ingress{webIngress("a", 0, on)},
			sni:  map[string]string{"a.example": "ns_web_80_passthrough"},
		},
		{
			name:   "service annotation wins over the ingress",
			svcAnn: map[string]string{"haproxy.org/ssl-passthrough": "false"},
			ings:   []*networkingv1.Ingress{webIngress("a", 0, on)},
			routes: []string{"a.example"},
		},
		{
			name:   "service annotation alone",
			svcAnn: map[string]string{"haproxy.org/ssl-passthrough": "true"},
			ings:   []*networkingv1.Ingress{webIngress("a", 0), webIngress("b", 1)},
			sni:    map[string]string{"a.example": "ns_web_80_passthrough", "b.example": "ns_web_80_passthrough"},
		},
		{
			name: "configmap",
			cm:   []string{"ssl-passthrough=true"},
			ings: []*networkingv1.Ingress{webIngress("a", 0)},
			sni:  map[string]string{"a.example": "ns_web_80_passthrough"},
		},
		{
			name:     "invalid value is ignored",
			ings:     []*networkingv1.Ingress{webIngress("a", 0, "haproxy.org/ssl-passthrough=maybe")},
			routes:   []string{"a.example"},
			problems: []string{"Ingress ns/a InvalidAnnotation"},
		},
		{
			name: "rule without host",
			ings: []*networkingv1.Ingress{withAnnotations(ingress("ns", "a", 0,
				rule("", path("/", "Prefix", "web", 80))), on)},
			problems: []string{"Ingress ns/a InvalidPassthrough"},
		},
		{
			name: "wildcard host",
			ings: []*networkingv1.Ingress{withAnnotations(ingress("ns", "a", 0,
				rule("*.apps.example", path("/", "Prefix", "web", 80))), on)},
			sni: map[string]string{"*.apps.example": "ns_web_80_passthrough"},
		},
		{
			name: "terminated rules for a passed-through host are told",
			ings: []*networkingv1.Ingress{
				withAnnotations(ingress("ns", "a", 0, rule("x.example", path("/", "Prefix", "web", 80))), on),
				ingress("ns", "b", 1, rule("x.example", path("/api", "Prefix", "web", 80))),
			},
			sni:      map[string]string{"x.example": "ns_web_80_passthrough"},
			routes:   []string{"x.example"},
			problems: []string{"Ingress ns/b PassthroughHost"},
		},
		{
			name: "a younger Ingress cannot pass through a host an older one terminates",
			ings: []*networkingv1.Ingress{
				ingress("ns", "a", 0, rule("x.example", path("/", "Prefix", "web", 80))),
				withAnnotations(ingress("ns", "b", 1, rule("x.example", path("/", "Prefix", "web", 8443))), on),
			},
			routes:   []string{"x.example"},
			problems: []string{"Ingress ns/b RuleConflict"},
		},
		{
			name: "another namespace cannot pass through a host, even when hosts are shared",
			opts: Options{AllowCrossNamespaceHosts: true},
			ings: []*networkingv1.Ingress{
				withAnnotations(ingress("ns", "a", 0, rule("x.example", path("/", "Prefix", "web", 80))), on),
				withAnnotations(ingress("other", "b", 1, rule("x.example", path("/", "Prefix", "web", 80))), on),
			},
			sni:      map[string]string{"x.example": "ns_web_80_passthrough"},
			problems: []string{"Ingress other/b RuleConflict"},
		},
		{
			name: "two passthrough backends for one host: the oldest wins",
			ings: []*networkingv1.Ingress{
				withAnnotations(ingress("ns", "a", 0, rule("x.example", path("/", "Prefix", "web", 80))), on),
				withAnnotations(ingress("ns", "b", 1, rule("x.example", path("/", "Prefix", "web", 8443))), on),
			},
			sni:      map[string]string{"x.example": "ns_web_80_passthrough"},
			problems: []string{"Ingress ns/b RuleConflict"},
		},
		{
			name:   "server TLS settings do not wrap the client's TLS",
			svcAnn: map[string]string{"haproxy.org/server-ssl": "true"},
			ings:   []*networkingv1.Ingress{webIngress("a", 0, on)},
			sni:    map[string]string{"a.example": "ns_web_80_passthrough"},
		},
		{
			name:     "an allow-list cannot apply: fail closed",
			ings:     []*networkingv1.Ingress{webIngress("a", 0, on, "haproxy.org/allow-list=10.0.0.0/8")},
			sni:      map[string]string{"a.example": "ns_web_80_passthrough"},
			failed:   true,
			problems: []string{"Ingress ns/a InvalidPassthrough"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := canarySnapshot(tt.ings...)
			s.Services[0] = service("ns", "web", svcPort("http", 80, 8080), svcPort("https", 8443, 8443))
			s.Services[0].Annotations = tt.svcAnn
			if tt.cm != nil {
				s.ConfigMap = configMap(tt.cm...)
			}
			d := Build(s, tt.opts)
			if got := d.Maps[MapSSLPassthrough]; !maps.Equal(got, tt.sni) || (got == nil) != (tt.sni == nil) {
				t.Errorf("passthrough map = %v, want %v", got, tt.sni)
			}
			var hosts []string
			for _, r := range d.Routes.Slice() {
				hosts = append(hosts, r.Host)
			}
			if hosts = slices.Compact(hosts); !slices.Equal(hosts, tt.routes) {
				t.Errorf("route hosts = %v, want %v", hosts, tt.routes)
			}
			for _, name := range slices.Sorted(maps.Values(tt.sni)) {
				be := backendByName(t, d, name)
				if !be.TCP || be.TLS.SSL {
					t.Errorf("backend %s: TCP = %v, server SSL = %v", name, be.TCP, be.TLS.SSL)
				}
				if got := len(be.Endpoints) == 0; got != tt.failed {
					t.Errorf("backend %s: no endpoints = %v, want %v", name, got, tt.failed)
				}
			}
			if got := problemsOf(d); !slices.Equal(got, tt.problems) {
				t.Errorf("problems = %v, want %v\n%v", got, tt.problems, d.Problems)
			}
		})
	}
}

// A passthrough backend stays a TCP backend, and stays closed, when its
// endpoints are refreshed without a Build.
func TestSSLPassthroughRefresh(t *testing.T) {
	for _, tt := range []struct {
		ann  []string
		want int
	}{
		{[]string{"haproxy.org/ssl-passthrough=true"}, 1},
		{[]string{"haproxy.org/ssl-passthrough=true", "haproxy.org/allow-list=10.0.0.0/8"}, 0},
	} {
		s := canarySnapshot(webIngress("a", 0, tt.ann...))
		d := Build(s, Options{})
		r := RefreshEndpoints(d, s, Options{}, map[ServiceKey]bool{{Namespace: "ns", Name: "web"}: true})
		be := backendByName(t, r, "ns_web_80_passthrough")
		if !be.TCP || len(be.Endpoints) != tt.want {
			t.Errorf("%v: refreshed passthrough backend: TCP=%v endpoints=%v, want %d", tt.ann, be.TCP, be.Endpoints, tt.want)
		}
	}
}

// Passthrough Ingresses with their own backend settings get their own
// variant of the passthrough backend, as HTTP routes do.
func TestSSLPassthroughVariants(t *testing.T) {
	s := canarySnapshot(
		webIngress("a", 0, "haproxy.org/ssl-passthrough=true"),
		webIngress("b", 1, "haproxy.org/ssl-passthrough=true", "haproxy.org/check-interval=5s"),
	)
	d := Build(s, Options{})
	m := d.Maps[MapSSLPassthrough]
	if m["a.example"] != "ns_web_80_passthrough" || !strings.HasPrefix(m["b.example"], "ns_web_80_passthrough__") {
		t.Fatalf("passthrough map = %v, want a variant for b", m)
	}
	for _, name := range m {
		if be := backendByName(t, d, name); !be.TCP || len(be.Endpoints) != 1 {
			t.Errorf("backend %s: TCP=%v endpoints=%v", name, be.TCP, be.Endpoints)
		}
	}
	if be := backendByName(t, d, m["b.example"]); be.CheckInterval != 5*time.Second {
		t.Errorf("b's variant check-interval = %v, want 5s", be.CheckInterval)
	}
	if p := problemsOf(d); len(p) != 0 {
		t.Errorf("problems: %v", p)
	}
}
