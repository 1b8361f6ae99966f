package model

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

func TestPathRewriteLines(t *testing.T) {
	p := pathRewriteParser()
	for raw, want := range map[string][]PathRewrite{
		"/new":                                {{To: "/new"}},
		`/foo/(.*) /\1`:                       {{Regex: "/foo/(.*)", To: `/\1`}},
		"^/a/(.*)$ /b/\\1\n\n  ^/b/x$ /c  \n": {{Regex: "^/a/(.*)$", To: `/b/\1`}, {Regex: "^/b/x$", To: "/c"}},
		"^/old$ /new\n/always":                {{Regex: "^/old$", To: "/new"}, {To: "/always"}},
	} {
		got, err := p.parse(raw)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%q: %v %v, want %v", raw, got, err, want)
		}
	}
	for raw, msg := range map[string]string{
		"":                         "want a path",
		"\n \n":                    "want a path",
		"^/a$ /b\n^/c$ /d /e":      "line 2: want a path, or a regex",
		"^/a$ /b\n(unclosed /x":    "line 2: regex does not compile",
		"^/a$ /b\n^/c$ relative":   "line 2: replacement must start",
		strings.Repeat("/x\n", 17): "17 rules, at most 16",
	} {
		if _, err := p.parse(raw); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%q: error %v, want %q", raw, err, msg)
		}
	}
}

// TestPathRewriteTenantLines: every line's regex is held to the safe
// subset on an Ingress; one unsafe line refuses the whole value.
func TestPathRewriteTenantLines(t *testing.T) {
	svc := []*corev1.Service{service("ns", "web", svcPort("", 80, 8080))}
	ing := webIngress("a", 1, "haproxy.org/path-rewrite=^/a/(.*)$ /\\1\n(a+)+$ /x")
	d := Build(&Snapshot{Ingresses: []*networkingv1.Ingress{ing}, Services: svc}, Options{})
	if n := countReason(d.Problems, ReasonUnsafeRegex); n != 1 {
		t.Errorf("%d UnsafeRegex problems, want 1: %v", n, d.Problems)
	}
	if r := backendByName(t, d, "ns_web_80").HTTP.Rewrites; len(r) != 0 {
		t.Errorf("rules kept from a value with an unsafe line: %v", r)
	}
	ing = webIngress("a", 1, "haproxy.org/path-rewrite=^/a/(.*)$ /\\1\n^/b$ /c")
	d = Build(&Snapshot{Ingresses: []*networkingv1.Ingress{ing}, Services: svc}, Options{})
	want := []PathRewrite{{Regex: "^/a/(.*)$", To: `/\1`}, {Regex: "^/b$", To: "/c"}}
	if got := backendByName(t, d, "ns_web_80").HTTP.Rewrites; len(d.Problems) != 0 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("rules %v problems %v, want %v", got, d.Problems, want)
	}
}
