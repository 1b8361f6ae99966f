package model

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// TestPathTypeMatrix is the Kubernetes Ingress documentation's table of
// path matches, run through Match for an exact host, a wildcard host and
// rules without a host.
func TestPathTypeMatrix(t *testing.T) {
	type p struct{ typ, path string }
	tests := []struct {
		paths   []p
		request string
		want    int // index into paths, -1 for no match
	}{
		{[]p{{"Prefix", "/"}}, "/anything/at/all", 0},
		{[]p{{"Prefix", "/"}}, "/", 0},
		{[]p{{"Exact", "/foo"}}, "/foo", 0},
		{[]p{{"Exact", "/foo"}}, "/bar", -1},
		{[]p{{"Exact", "/foo"}}, "/foo/", -1},
		{[]p{{"Exact", "/foo/"}}, "/foo", -1},
		{[]p{{"Exact", "/foo/"}}, "/foo/", 0},
		{[]p{{"Prefix", "/foo"}}, "/foo", 0},
		{[]p{{"Prefix", "/foo"}}, "/foo/", 0},
		{[]p{{"Prefix", "/foo/"}}, "/foo", 0},
		{[]p{{"Prefix", "/foo/"}}, "/foo/", 0},
		{[]p{{"Prefix", "/foo"}}, "/foobar", -1},
		{[]p{{"Prefix", "/aaa/bb"}}, "/aaa/bbb", -1},
		{[]p{{"Prefix", "/aaa/bbb"}}, "/aaa/bbb", 0},
		{[]p{{"Prefix", "/aaa/bbb/"}}, "/aaa/bbb", 0},
		{[]p{{"Prefix", "/aaa/bbb"}}, "/aaa/bbb/", 0},
		{[]p{{"Prefix", "/aaa/bbb"}}, "/aaa/bbb/ccc", 0},
		{[]p{{"Prefix", "/aaa/bbb"}}, "/aaa/bbbxyz", -1},
		{[]p{{"Prefix", "/"}, {"Prefix", "/aaa"}}, "/aaa/ccc", 1},
		{[]p{{"Prefix", "/"}, {"Prefix", "/aaa"}, {"Prefix", "/aaa/bbb"}}, "/aaa/bbb", 2},
		{[]p{{"Prefix", "/"}, {"Prefix", "/aaa"}, {"Prefix", "/aaa/bbb"}}, "/aaa/bbb/c", 2},
		{[]p{{"Prefix", "/"}, {"Prefix", "/aaa"}, {"Prefix", "/aaa/bbb"}}, "/ccc", 0},
		{[]p{{"Prefix", "/aaa"}}, "/ccc", -1},
		{[]p{{"Prefix", "/foo"}, {"Exact", "/foo"}}, "/foo", 1},
		{[]p{{"Exact", "/foo"}, {"Prefix", "/foo"}}, "/foo", 0},
		{[]p{{"Exact", "/foo"}, {"Prefix", "/foo"}}, "/foo/x", 1},
		{[]p{{"Prefix", "/foo"}, {"Exact", "/foo/bar"}}, "/foo/bar", 1},
		{[]p{{"Prefix", "/foo/bar"}, {"Exact", "/foo"}}, "/foo/bar/x", 0},
		{[]p{{"ImplementationSpecific", "/foo"}}, "/foo/bar", 0},
		{[]p{{"ImplementationSpecific", "/foo"}}, "/foobar", -1},
		{[]p{{"ImplementationSpecific", ""}}, "/x", 0},
		{[]p{{"", "/foo"}}, "/foo/bar", 0},
		{[]p{{"Prefix", "/foo"}}, "/foo?q=/bar", 0},
		{[]p{{"Exact", "/foo"}}, "/foo?q=1", 0},
		{[]p{{"Prefix", "/Foo"}}, "/foo", -1},
	}
	hosts := []struct{ rule, request string }{
		{"example.com", "example.com"},
		{"*.example.com", "www.example.com"},
		{"", "anything.example.org"},
	}
	for _, h := range hosts {
		for _, tt := range tests {
			var desc []string
			var paths []networkingv1.HTTPIngressPath
			var svcs []*corev1.Service
			for i, x := range tt.paths {
				desc = append(desc, x.typ+":"+x.path)
				paths = append(paths, path(x.path, x.typ, fmt.Sprintf("s%d", i), 80))
				svcs = append(svcs, service("ns", fmt.Sprintf("s%d", i), svcPort("", 80, 8080)))
			}
			name := fmt.Sprintf("host=%q/%s/%s", h.rule, strings.Join(desc, ","), tt.request)
			t.Run(name, func(t *testing.T) {
				d := Build(&Snapshot{
					Ingresses: []*networkingv1.Ingress{ingress("ns", "web", 0, rule(h.rule, paths...))},
					Services:  svcs,
				}, Options{})
				if len(d.Problems) != 0 {
					t.Fatalf("problems: %v", d.Problems)
				}
				r, ok := Match(d, h.request, tt.request)
				if tt.want < 0 {
					if ok {
						t.Fatalf("matched %+v, want no match", r)
					}
					return
				}
				want := fmt.Sprintf("ns_s%d_80", tt.want)
				if !ok || r.Backend != want {
					t.Fatalf("Match = %+v, %t; want backend %s\n%s", r, ok, want, Dump(d))
				}
				if r.Host != h.rule || r.Ingress.Name != "web" {
					t.Fatalf("Match route %+v does not name the rule", r)
				}
			})
		}
	}
}

func TestHostPrecedence(t *testing.T) {
	ing := withDefault(ingress("ns", "web", 0,
		rule("a.example.com", path("/api", "Prefix", "exact-host", 80)),
		rule("*.example.com", path("/", "Prefix", "wildcard", 80)),
		rule("", path("/", "Prefix", "no-host", 80)),
	), "default", 80)
	d := Build(&Snapshot{Ingresses: []*networkingv1.Ingress{ing}}, Options{})
	tests := []struct{ host, path, want string }{
		{"a.example.com", "/api/v1", "ns_exact-host_80"},
		{"A.Example.COM:8443", "/api", "ns_exact-host_80"},
		{"a.example.com", "/other", "ns_wildcard_80"}, // falls through to the wildcard
		{"b.example.com", "/api", "ns_wildcard_80"},
		{"x.a.example.com", "/", "ns_no-host_80"}, // a wildcard covers one label only
		{"example.com", "/", "ns_no-host_80"},     // and not the bare domain
		{"other.org", "/x", "ns_no-host_80"},
		{"", "/x", "ns_no-host_80"},
		{"[2001:db8::1]:80", "/x", "ns_no-host_80"},
	}
	for _, tt := range tests {
		r, ok := Match(d, tt.host, tt.path)
		if !ok || r.Backend != tt.want {
			t.Errorf("Match(%q, %q) = %s, %t; want %s", tt.host, tt.path, r.Backend, ok, tt.want)
		}
	}

	// Without the hostless rule, unmatched requests reach the default
	// backend, and without that nothing matches (HAProxy's 404).
	ing.Spec.Rules = ing.Spec.Rules[:2]
	d = Build(&Snapshot{Ingresses: []*networkingv1.Ingress{ing}}, Options{})
	r, ok := Match(d, "other.org", "/")
	if !ok || r.Backend != "ns_default_80" || r.Ingress.Name != "web" || r.Path != "" {
		t.Errorf("unmatched request: %+v, %t; want the default backend from Ingress ns/web", r, ok)
	}
	ing.Spec.DefaultBackend = nil
	d = Build(&Snapshot{Ingresses: []*networkingv1.Ingress{ing}}, Options{})
	if r, ok := Match(d, "other.org", "/"); ok {
		t.Errorf("unmatched request without default backend matched %+v", r)
	}
}

func TestMapEncoding(t *testing.T) {
	ing := ingress("ns", "web", 0,
		rule("foo.bar", path("/api", "Prefix", "api", 80), path("/", "Prefix", "root", 80), path("/x", "Exact", "x", 80)),
		rule("*.example.com", path("/w/", "Prefix", "w", "http")),
		rule("", path("/api", "Exact", "noh", 80), path("/api", "Prefix", "nohp", 80)),
	)
	d := Build(&Snapshot{Ingresses: []*networkingv1.Ingress{ing}}, Options{})
	want := map[string]map[string]string{
		MapExact: {
			"foo.bar/api":     "ns_api_80",
			"foo.bar/x":       "ns_x_80",
			"*.example.com/w": "ns_w_http",
			"/api":            "ns_noh_80",
			"@ns/api":         "ns_noh_80",
		},
		MapPrefix: {
			"foo.bar/api/":     "ns_api_80",
			"foo.bar/":         "ns_root_80",
			"*.example.com/w/": "ns_w_http",
			"/api/":            "ns_nohp_80",
			"@ns/api/":         "ns_nohp_80",
		},
		MapHostOwner: {
			"foo.bar":       "@ns",
			"*.example.com": "@ns",
		},
	}
	for name, m := range want {
		got := d.Maps[name]
		if len(got) != len(m) {
			t.Errorf("map %s = %v, want %v", name, got, m)
			continue
		}
		for k, v := range m {
			if got[k] != v {
				t.Errorf("map %s[%q] = %q, want %q", name, k, got[k], v)
			}
		}
	}
}

func TestHostAndPathValidation(t *testing.T) {
	tests := []struct {
		host, path, typ string
		reason          string // "" when the rule is served
		served          string // the Route.Path when served
	}{
		{"example.com", "/a", "Prefix", "", "/a"},
		{"a-b.c0.example", "/a/", "Prefix", "", "/a"},
		{"*.example.com", "/a//", "ImplementationSpecific", ReasonInvalidPath, ""},
		{"example.com", "/a/", "Exact", "", "/a/"},
		{"example.com", "/", "Prefix", "", "/"},
		{"example.com", "/~user/a-b_c.d!$&()*+,;=:@%2A", "Exact", "", "/~user/a-b_c.d!$&()*+,;=:@%2A"},
		{"Example.com", "/", "Prefix", ReasonInvalidHost, ""},
		{"example.com.", "/", "Prefix", ReasonInvalidHost, ""},
		{"ex ample.com", "/", "Prefix", ReasonInvalidHost, ""},
		{"example.com:80", "/", "Prefix", ReasonInvalidHost, ""},
		{"203.0.113.1", "/", "Prefix", ReasonInvalidHost, ""},
		{"*.", "/", "Prefix", ReasonInvalidHost, ""},
		{"foo.*.com", "/", "Prefix", ReasonInvalidHost, ""},
		{"*", "/", "Prefix", ReasonInvalidHost, ""},
		{"-a.com", "/", "Prefix", ReasonInvalidHost, ""},
		{strings.Repeat("a", 64) + ".com", "/", "Prefix", ReasonInvalidHost, ""},
		{"example.com", "a", "Prefix", ReasonInvalidPath, ""},
		{"example.com", "/a b", "Prefix", ReasonInvalidPath, ""},
		{"example.com", "/a\tb", "Exact", ReasonInvalidPath, ""},
		{"example.com", "/a\nb", "Exact", ReasonInvalidPath, ""},
		{"example.com", "/a#b", "Prefix", ReasonInvalidPath, ""},
		{"example.com", "/a?b", "Prefix", ReasonInvalidPath, ""},
		{"example.com", `/a"b`, "Prefix", ReasonInvalidPath, ""},
		{"example.com", "/a'b", "Prefix", ReasonInvalidPath, ""},
		{"example.com", `/a\b`, "Prefix", ReasonInvalidPath, ""},
		{"example.com", "/a%zz", "Prefix", ReasonInvalidPath, ""},
		{"example.com", "/a%2Fb", "Prefix", ReasonInvalidPath, ""},
		{"example.com", "/a/../b", "Prefix", ReasonInvalidPath, ""},
		{"example.com", "/a/.", "Prefix", ReasonInvalidPath, ""},
		{"example.com", "/é", "Prefix", ReasonInvalidPath, ""},
		{"example.com", "/a", "Regex", ReasonInvalidPath, ""},
		{"example.com", "", "Exact", ReasonInvalidPath, ""},
	}
	for _, tt := range tests {
		t.Run(tt.host+" "+tt.path, func(t *testing.T) {
			ing := ingress("ns", "web", 0,
				rule(tt.host, path(tt.path, tt.typ, "svc", 80)),
				rule("other.example", path("/", "Prefix", "other", 80)))
			d := Build(&Snapshot{Ingresses: []*networkingv1.Ingress{ing}, Services: []*corev1.Service{
				service("ns", "svc", svcPort("", 80, 8080)), service("ns", "other", svcPort("", 80, 8080)),
			}}, Options{})
			if tt.reason == "" {
				if len(d.Problems) != 0 || d.Routes.Len() != 2 {
					t.Fatalf("want served, got problems %v routes %v", d.Problems, d.Routes.Slice())
				}
				for _, r := range d.Routes.Slice() {
					if r.Host == tt.host && r.Path != tt.served {
						t.Fatalf("route path %q, want %q", r.Path, tt.served)
					}
				}
				return
			}
			if got := problemsOf(d); len(got) != 1 || got[0] != "Ingress ns/web "+tt.reason {
				t.Fatalf("problems %v, want one %s", got, tt.reason)
			}
			// The bad rule is skipped, the rest of the Ingress is served.
			if d.Routes.Len() != 1 || d.Routes.Slice()[0].Host != "other.example" {
				t.Fatalf("routes %v, want only other.example", d.Routes.Slice())
			}
		})
	}
}
