package model

import (
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// sharedSnapshot is Service ns/web with two endpoints, routed by ings.
func sharedSnapshot(ings ...*networkingv1.Ingress) *Snapshot {
	return &Snapshot{
		Ingresses: ings,
		Services:  []*corev1.Service{service("ns", "web", svcPort("", 80, 8080))},
		EndpointSlices: []*discoveryv1.EndpointSlice{
			endpointSlice("ns", "web", "web-1", discoveryv1.AddressTypeIPv4, "", 8080,
				endpoint("198.18.1.1", "ready"), endpoint("198.18.1.2", "ready")),
		},
	}
}

// routedBackend is the backend serving host "/" in d.
func routedBackend(t *testing.T, d *Desired, host string) *Backend {
	t.Helper()
	r, ok := Match(d, host, "/")
	if !ok {
		t.Fatalf("%s / is not routed:\n%s", host, Dump(d))
	}
	return backendByName(t, d, r.Backend)
}

func TestVariants(t *testing.T) {
	app := webIngress("app", 0, "haproxy.org/load-balance=source")
	same := webIngress("same", 1, "haproxy.org/load-balance=source")
	other := webIngress("other", 2, "haproxy.org/load-balance=leastconn")
	none := webIngress("none", 3)
	d := Build(sharedSnapshot(app, same, other, none), Options{})

	a, s, o, n := routedBackend(t, d, "app.example"), routedBackend(t, d, "same.example"),
		routedBackend(t, d, "other.example"), routedBackend(t, d, "none.example")
	if a.Name != "ns_web_80" || s != a {
		t.Errorf("app and same ask for the same settings: backends %s and %s, want both ns_web_80", a.Name, s.Name)
	}
	if o == a || n == a || n == o {
		t.Errorf("other and none need variants of their own: app %s other %s none %s", a.Name, o.Name, n.Name)
	}
	for _, x := range []struct {
		b       *Backend
		balance string
	}{{a, "source"}, {o, "leastconn"}, {n, "roundrobin"}} {
		if x.b.Balance != x.balance {
			t.Errorf("%s balance %s, want %s", x.b.Name, x.b.Balance, x.balance)
		}
		if !strings.HasPrefix(x.b.Name, "ns_web_80") || len(x.b.Endpoints) != 2 || x.b.Service != "web" {
			t.Errorf("variant %s: service %s, %d endpoints; want a variant of ns/web with both endpoints", x.b.Name, x.b.Service, len(x.b.Endpoints))
		}
	}
	if len(d.Backends) != 3 {
		t.Errorf("%d backends, want 3", len(d.Backends))
	}
	if len(d.Problems) != 0 {
		t.Errorf("problems %v, want none: differing settings are no conflict", problemsOf(d))
	}

	// A variant's name depends on its settings alone: removing another
	// variant or reordering the snapshot renames nothing.
	d2 := Build(sharedSnapshot(none, other, app), Options{})
	if got := routedBackend(t, d2, "other.example").Name; got != o.Name {
		t.Errorf("other's variant renamed from %s to %s when same left", o.Name, got)
	}
	if got := routedBackend(t, d2, "none.example").Name; got != n.Name {
		t.Errorf("none's variant renamed from %s to %s", n.Name, got)
	}
	// Without app (the oldest), the next oldest takes the plain name.
	d3 := Build(sharedSnapshot(other, none), Options{})
	if got := routedBackend(t, d3, "other.example").Name; got != "ns_web_80" {
		t.Errorf("other alone is served by %s, want ns_web_80", got)
	}
}

func TestVariantsServiceAndConfigMapApplyToAll(t *testing.T) {
	s := sharedSnapshot(
		webIngress("a", 0, "haproxy.org/load-balance=source"),
		webIngress("b", 1, "haproxy.org/load-balance=leastconn", "haproxy.org/pod-maxconn=5"),
		// The Service sets pod-maxconn: c's value changes nothing, so c
		// shares a's variant.
		webIngress("c", 2, "haproxy.org/load-balance=source", "haproxy.org/pod-maxconn=9"),
	)
	s.Services[0].Annotations = map[string]string{"haproxy.org/pod-maxconn": "50"}
	s.ConfigMap = configMap("timeout-check=3s")
	d := Build(s, Options{})
	a, b, c := routedBackend(t, d, "a.example"), routedBackend(t, d, "b.example"), routedBackend(t, d, "c.example")
	if c != a || b == a {
		t.Errorf("backends a=%s b=%s c=%s; want c on a's, b on its own", a.Name, b.Name, c.Name)
	}
	for _, x := range []*Backend{a, b} {
		if x.Features.PodMaxconn != 50 || x.Features.TimeoutCheck.Seconds() != 3 {
			t.Errorf("%s: pod-maxconn %d timeout-check %s; want the Service's 50 and the ConfigMap's 3s", x.Name, x.Features.PodMaxconn, x.Features.TimeoutCheck)
		}
	}
}

// TestVariantNameGrammar: with the longest names the API allows, every
// variant name is still one the renderer accepts, and distinct.
func TestVariantNameGrammar(t *testing.T) {
	long := func(c string) string { return strings.Repeat(c, 63) }
	ns, svc, port := long("n"), long("s"), long("p")
	var ings []*networkingv1.Ingress
	for i := range 4 {
		ings = append(ings, withAnnotations(ingress(ns, fmt.Sprintf("i%d", i), i, rule(fmt.Sprintf("h%d.example", i), path("/", "Prefix", svc, port))),
			fmt.Sprintf("haproxy.org/pod-maxconn=%d", i+1)))
	}
	d := Build(&Snapshot{Ingresses: ings, Services: []*corev1.Service{service(ns, svc, svcPort(port, 80, 8080))}}, Options{})
	nameRE := regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,199}$`)
	seen := map[string]bool{}
	for _, b := range d.Backends {
		if !nameRE.MatchString(b.Name) || seen[b.Name] {
			t.Errorf("backend name %q (%d characters) is not valid or not unique", b.Name, len(b.Name))
		}
		seen[b.Name] = true
	}
	if len(seen) != 4 {
		t.Errorf("%d backends, want 4 variants:\n%s", len(seen), Dump(d))
	}
}

func TestVariantsRefreshEndpoints(t *testing.T) {
	s := sharedSnapshot(webIngress("a", 0), webIngress("b", 1, "haproxy.org/load-balance=leastconn"))
	prev := Build(s, Options{})
	s2 := *s
	s2.EndpointSlices = []*discoveryv1.EndpointSlice{
		endpointSlice("ns", "web", "web-1", discoveryv1.AddressTypeIPv4, "", 8080, endpoint("198.18.1.3", "ready")),
	}
	got := RefreshEndpoints(prev, &s2, Options{}, map[ServiceKey]bool{{"ns", "web"}: true})
	want := Build(&s2, Options{})
	if Dump(got) != Dump(want) {
		t.Fatalf("RefreshEndpoints differs from Build:\n%s", lineDiff(Dump(want), Dump(got)))
	}
	for _, b := range got.Backends {
		if len(b.Endpoints) != 1 || b.Endpoints[0].Address != "198.18.1.3" {
			t.Errorf("variant %s endpoints %v, want the new one", b.Name, b.Endpoints)
		}
	}
	if len(got.Backends) != 2 {
		t.Errorf("%d backends, want 2 variants", len(got.Backends))
	}
}

// TestFailClosedPerIngress puts one invalid key at a time on Ingress
// hostile, which shares Service ns/web with Ingress app: an invalid
// security key closes hostile's routes only, any other invalid key is
// dropped; app's backend and problems stay what they are without hostile.
func TestFailClosedPerIngress(t *testing.T) {
	app := webIngress("app", 0, "haproxy.org/check-http=/healthz")
	alone := Build(sharedSnapshot(app), Options{})
	appAlone := routedBackend(t, alone, "app.example")
	tests := []struct {
		ann  string
		deny int // 0: the key is dropped, hostile served like app
	}{
		// Valid keys naming a Secret that does not exist.
		{"haproxy.org/auth-type=basic-auth && haproxy.org/auth-secret=nope", denyUnavailable},
		{"haproxy.org/auth-type=basic-auth", denyUnavailable},
		{"haproxy.org/allow-list=1.2.3.4 acl pwn", denyForbidden},
		{"haproxy.org/whitelist=10.0.0.0/33", denyForbidden},
		{"haproxy.org/deny-list=nope", denyForbidden},
		{"haproxy.org/src-ip-header=X Real", denyForbidden},
		{"haproxy.org/auth-type=digest", denyUnavailable},
		{"haproxy.org/auth-secret=../x", denyUnavailable},
		{"haproxy.org/auth-realm=x # y", denyUnavailable},
		{"haproxy.org/rate-limit-requests=-5", denyUnavailable},
		{"haproxy.org/rate-limit-period=soon", denyUnavailable},
		{"haproxy.org/rate-limit-size=10g", denyUnavailable},
		{"haproxy.org/rate-limit-status-code=999", denyUnavailable},
		{"haproxy.org/rate-limit-whitelist=everyone", denyUnavailable},
		{"haproxy.org/load-balance=fastest", 0},
		{"haproxy.org/cookie-persistence=a\"b", 0},
		{"haproxy.org/pod-maxconn=-1", 0},
		{"haproxy.org/request-capture=req.hdr(cookie),debug", 0},
		{"haproxy.org/request-set-header=X-Env %[env(HOME)]", 0},
		{"haproxy.org/response-set-header=X-Be %[be_conn(other)]", 0},
		{"haproxy.org/set-host=evil.test\n  server x 203.0.113.9:80", 0},
	}
	for _, tt := range tests {
		t.Run(tt.ann, func(t *testing.T) {
			hostile := withAnnotations(ingress("ns", "hostile", 5, rule("evil.test", path("/", "Prefix", "web", 80))),
				append([]string{"haproxy.org/check-http=/healthz"}, strings.Split(tt.ann, " && ")...)...)
			d := Build(sharedSnapshot(app, hostile), Options{})
			a, h := routedBackend(t, d, "app.example"), routedBackend(t, d, "evil.test")
			if !reflect.DeepEqual(a, appAlone) {
				t.Errorf("app's backend changed:\n%s", lineDiff(Dump(alone), Dump(d)))
			}
			if h.Features.Deny != tt.deny {
				t.Errorf("hostile's backend %s denies with %d, want %d", h.Name, h.Features.Deny, tt.deny)
			}
			if tt.deny == 0 && h != a {
				t.Errorf("hostile's invalid key was not simply dropped: backend %s, app's %s", h.Name, a.Name)
			}
			probs := problemsOf(d)
			if len(probs) == 0 || slices.ContainsFunc(probs, func(p string) bool { return !strings.HasPrefix(p, "Ingress ns/hostile ") }) {
				t.Errorf("problems %v, want only on Ingress ns/hostile", probs)
			}
		})
	}
}
