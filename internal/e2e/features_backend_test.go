package e2e

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// TestHealthCheck: with check-http, a pod whose /healthz fails is taken
// out by HAProxy's health check and comes back when healthy, with no
// reload; load-balance source pins a client to one pod.
func TestHealthCheck(t *testing.T) {
	e := newEnv(t)
	d := e.startDaemon()
	p := e.pods("hc", 60, 2)
	e.service("app", map[string]string{
		"haproxy.org/check":          "true",
		"haproxy.org/check-http":     "/healthz",
		"haproxy.org/check-interval": "200ms",
		"haproxy.org/timeout-check":  "1s",
		"haproxy.org/pod-maxconn":    "20",
		"haproxy.org/abortonclose":   "true",
	}, p[0], p[1])
	e.ingress("app", nil, rule{host: "hc.test", path: "/", service: "app"})
	d.expect("hc.test", "/", 200, "")
	both := "hc-0,hc-1"
	testenv.Eventually(t, 10*time.Second, func() error {
		if got := strings.Join(d.answering("hc.test", "/", 8), ","); got != both {
			return fmt.Errorf("answering %s, want %s", got, both)
		}
		return nil
	})
	cfg := d.config()
	for _, want := range []string{"option httpchk GET /healthz", "timeout check 1s", "option abortonclose", "maxconn 20"} {
		if !strings.Contains(cfg, want) {
			t.Fatalf("haproxy.cfg lacks %q", want)
		}
	}

	before := d.reloads()
	p[1].SetHealthy(false)
	testenv.Eventually(t, 10*time.Second, func() error {
		if got := strings.Join(d.answering("hc.test", "/", 8), ","); got != "hc-0" {
			return fmt.Errorf("answering %s, want only hc-0 (hc-1 fails its health check)", got)
		}
		return nil
	})
	// Settled: no request reaches the unhealthy pod any more.
	for i := 0; i < 10; i++ {
		if r, err := d.get("hc.test", "/"); err != nil || r.status != 200 || r.header.Get("X-Pod") != "hc-0" {
			t.Fatalf("request %d with hc-1 unhealthy: %v %d %q", i, err, r.status, r.header.Get("X-Pod"))
		}
	}
	p[1].SetHealthy(true)
	testenv.Eventually(t, 10*time.Second, func() error {
		if got := strings.Join(d.answering("hc.test", "/", 8), ","); got != both {
			return fmt.Errorf("answering %s, want %s (hc-1 healthy again)", got, both)
		}
		return nil
	})
	if after := d.reloads(); after != before {
		t.Fatalf("health changes caused %d reloads, want 0", after-before)
	}

	// load-balance source: one client address, one pod.
	e.annotate("Service", "app", map[string]string{"haproxy.org/load-balance": "source"})
	testenv.Eventually(t, 10*time.Second, func() error {
		if !strings.Contains(d.config(), "balance source") {
			return fmt.Errorf("balance source not rendered yet")
		}
		if got := d.answering("hc.test", "/", 10); len(got) != 1 {
			return fmt.Errorf("balance source: answered by %v, want one pod", got)
		}
		return nil
	})
	// hdr(X-User): the same header value, the same pod. The file is written
	// before the reload completes, so poll for the behaviour itself.
	e.annotate("Service", "app", map[string]string{"haproxy.org/load-balance": "hdr(X-User)"})
	testenv.Eventually(t, 10*time.Second, func() error {
		if !strings.Contains(d.config(), "balance hdr(X-User)") {
			return fmt.Errorf("balance hdr(X-User) not rendered yet")
		}
		for _, user := range []string{"alice", "bob", "carol"} {
			seen := map[string]bool{}
			for i := 0; i < 6; i++ {
				r, err := d.getWith("hc.test", "/", map[string]string{"X-User": user})
				if err != nil || r.status != 200 {
					return fmt.Errorf("X-User %s: %v %d", user, err, r.status)
				}
				seen[r.header.Get("X-Pod")] = true
			}
			if len(seen) != 1 {
				return fmt.Errorf("X-User %s answered by %v, want one pod", user, seen)
			}
		}
		return nil
	})
}

// TestStickySessions: a cookie-persistence client stays on its pod while
// endpoints change and across a reload.
func TestStickySessions(t *testing.T) {
	e := newEnv(t)
	d := e.startDaemon()
	p := e.pods("st", 61, 4)
	svc := e.service("app", map[string]string{"haproxy.org/cookie-persistence": "PMSTICK"}, p[0], p[1], p[2])
	e.ingress("app", nil, rule{host: "sticky.test", path: "/", service: "app"})
	r := d.expectWith("sticky.test", "/", nil, 200, "")
	var cookie *http.Cookie
	for _, c := range (&http.Response{Header: r.header}).Cookies() {
		if c.Name == "PMSTICK" {
			cookie = c
		}
	}
	if cookie == nil || cookie.Value == "" {
		t.Fatalf("no PMSTICK cookie in %v", r.header)
	}
	pod := r.header.Get("X-Pod")
	t.Logf("pinned to %s by cookie %s=%s", pod, cookie.Name, cookie.Value)
	stays := func(when string) {
		t.Helper()
		for i := 0; i < 12; i++ {
			r, err := d.getWith("sticky.test", "/", map[string]string{"Cookie": cookie.Name + "=" + cookie.Value})
			if err != nil || r.status != 200 {
				t.Fatalf("%s: request %d: %v %d", when, i, err, r.status)
			}
			if got := r.header.Get("X-Pod"); got != pod {
				t.Fatalf("%s: request %d answered by %s, want %s", when, i, got, pod)
			}
		}
	}
	stays("3 pods")
	// Without the cookie, requests spread.
	if got := d.answering("sticky.test", "/", 9); len(got) != 3 {
		t.Fatalf("without cookie: answered by %v, want 3 pods", got)
	}

	// Endpoint churn that moves the pinned pod to another server slot: it
	// leaves (a new pod takes its slot), then comes back in a free one.
	var pinned *testenv.Pod
	var others []*testenv.Pod
	for _, x := range p[:3] {
		if x.Name == pod {
			pinned = x
		} else {
			others = append(others, x)
		}
	}
	slotBefore := d.slotOf(pinned.IP.String())
	svc.SetEndpoints(t, endpoints(append(others, p[3])...)...)
	testenv.Eventually(t, 10*time.Second, func() error {
		if got := d.answering("sticky.test", "/", 12); len(got) != 3 || slices.Contains(got, pod) {
			return fmt.Errorf("answering %v, want 3 pods without %s", got, pod)
		}
		return nil
	})
	svc.SetEndpoints(t, endpoints(p...)...)
	testenv.Eventually(t, 10*time.Second, func() error {
		if got := d.answering("sticky.test", "/", 16); len(got) != 4 {
			return fmt.Errorf("answering %v, want 4 pods", got)
		}
		return nil
	})
	// haproxy.cfg gets server addresses changed at runtime once changes
	// pause.
	testenv.Eventually(t, 20*time.Second, func() error {
		if after := d.slotOf(pinned.IP.String()); after == slotBefore || after == "" {
			return fmt.Errorf("pinned pod in slot %q before and %q after the churn; want another slot", slotBefore, after)
		}
		return nil
	})
	stays("after its pod moved to another slot")

	// A reload (a structural change elsewhere in the backend).
	before := d.reloads()
	e.annotate("Service", "app", map[string]string{"haproxy.org/timeout-check": "3s"})
	testenv.Eventually(t, 10*time.Second, func() error {
		if d.reloads() == before {
			return fmt.Errorf("no reload yet")
		}
		return nil
	})
	stays("after a reload")
}

// TestAccessControl: allow-list, deny-list (and their old names), IPv6
// entries, src-ip-header, scopes, and an invalid list failing closed.
func TestAccessControl(t *testing.T) {
	e := newEnv(t)
	d := e.startDaemon()
	p := e.pods("ac", 62, 2)
	e.service("app", nil, p[0])
	e.service("other", nil, p[1])
	e.ingress("app", map[string]string{"haproxy.org/allow-list": "127.0.0.1, 2001:db8::/32"},
		rule{host: "acl.test", path: "/", service: "app"})
	e.ingress("other", map[string]string{"haproxy.org/whitelist": "203.0.113.0/24 2001:db8::1"},
		rule{host: "other.test", path: "/", service: "other"})
	d.expect("acl.test", "/", 200, "ac-0")
	d.expect("other.test", "/", 403, "")

	// deny-list wins for listed clients.
	e.annotate("Ingress", "app", map[string]string{"haproxy.org/blacklist": "127.0.0.0/8"})
	d.expect("acl.test", "/", 403, "")
	e.annotate("Ingress", "app", map[string]string{"haproxy.org/blacklist": "", "haproxy.org/deny-list": "::1, 198.51.100.0/24"})
	d.expect("acl.test", "/", 200, "ac-0")

	// src-ip-header: the header's address is the client for the lists.
	e.annotate("Ingress", "other", map[string]string{"haproxy.org/src-ip-header": "X-Real-IP"})
	r := d.expectWith("other.test", "/", map[string]string{"X-Real-IP": "203.0.113.9"}, 200, "ac-1")
	if xff := r.header.Get("X-Seen-Forwarded-For"); xff != "203.0.113.9" {
		t.Fatalf("pod saw X-Forwarded-For %q, want the src-ip-header address 203.0.113.9", xff)
	}
	d.expectWith("other.test", "/", map[string]string{"X-Real-IP": "198.51.100.9"}, 403, "")
	d.expectWith("other.test", "/", nil, 403, "")

	// Service scope beats Ingress scope.
	e.annotate("Service", "other", map[string]string{"haproxy.org/allow-list": "198.51.100.0/24"})
	d.expectWith("other.test", "/", map[string]string{"X-Real-IP": "198.51.100.9"}, 200, "ac-1")

	// An invalid list fails closed, with an Event.
	before := d.reloads()
	e.annotate("Ingress", "app", map[string]string{"haproxy.org/allow-list": "127.0.0.1, not-an-ip"})
	ev := e.event("Ingress", "app", "InvalidAnnotation")
	if !strings.Contains(ev.Message, "allow-list") || !strings.Contains(ev.Message, "fail closed") {
		t.Fatalf("event %q does not name the key and the fail-closed answer", ev.Message)
	}
	d.expect("acl.test", "/", 403, "")
	if d.reloads() == before {
		t.Fatal("access-list change applied without a reload?")
	}
	if strings.Contains(d.config(), "not-an-ip") {
		t.Fatal("invalid value reached haproxy.cfg")
	}
}

// TestBasicAuth: no credentials and a wrong password get 401 with the
// realm; the right one reaches the pod; a missing Secret fails closed.
func TestBasicAuth(t *testing.T) {
	e := newEnv(t)
	d := e.startDaemon()
	p := e.pods("au", 63, 1)
	e.service("app", nil, p[0])
	e.secret("users", map[string]string{"alice": cryptHash(t, "wonderland") + "\n", "bob": cryptHash(t, "builder")})
	e.ingress("app", map[string]string{
		"haproxy.org/auth-type":   "basic-auth",
		"haproxy.org/auth-secret": "users",
		"haproxy.org/auth-realm":  "Perimeter Test",
	}, rule{host: "auth.test", path: "/", service: "app"})
	basic := func(user, pass string) map[string]string {
		req, _ := http.NewRequest("GET", "/", nil)
		req.SetBasicAuth(user, pass)
		return map[string]string{"Authorization": req.Header.Get("Authorization")}
	}
	r := d.expectWith("auth.test", "/", nil, 401, "")
	if got := r.header.Get("WWW-Authenticate"); got != `Basic realm="Perimeter Test"` {
		t.Fatalf("WWW-Authenticate %q, want Basic realm=\"Perimeter Test\"", got)
	}
	d.expectWith("auth.test", "/", basic("alice", "wonderland"), 200, "au-0")
	d.expectWith("auth.test", "/", basic("bob", "builder"), 200, "au-0")
	for _, c := range [][2]string{{"alice", "wrong"}, {"mallory", "wonderland"}, {"bob", "wonderland"}} {
		r, err := d.getWith("auth.test", "/", basic(c[0], c[1]))
		if err != nil || r.status != 401 {
			t.Fatalf("%s/%s: %v status %d, want 401", c[0], c[1], err, r.status)
		}
	}

	// A password change in the Secret applies.
	e.secret("users", map[string]string{"alice": cryptHash(t, "looking-glass")})
	d.expectWith("auth.test", "/", basic("alice", "looking-glass"), 200, "au-0")
	d.expectWith("auth.test", "/", basic("bob", "builder"), 401, "")

	// A missing Secret: 503 and an Event, never open.
	e.annotate("Ingress", "app", map[string]string{"haproxy.org/auth-secret": "nobody"})
	e.event("Ingress", "app", "AuthSecretNotFound")
	d.expectWith("auth.test", "/", basic("alice", "looking-glass"), 503, "")
	d.expectWith("auth.test", "/", nil, 503, "")
}

// TestRateLimit: requests over rate-limit-requests within the period get
// rate-limit-status-code; whitelisted clients are not limited; an invalid
// value fails closed.
func TestRateLimit(t *testing.T) {
	e := newEnv(t)
	d := e.startDaemon()
	p := e.pods("rl", 64, 2)
	e.service("app", nil, p[0])
	e.service("free", nil, p[1])
	limit := map[string]string{
		"haproxy.org/rate-limit-requests":    "5",
		"haproxy.org/rate-limit-period":      "1m",
		"haproxy.org/rate-limit-status-code": "429",
	}
	e.ingress("app", limit, rule{host: "rl.test", path: "/", service: "app"})
	free := map[string]string{"haproxy.org/rate-limit-whitelist": "127.0.0.0/8"}
	for k, v := range limit {
		free[k] = v
	}
	e.ingress("free", free, rule{host: "free.test", path: "/", service: "free"})
	// Once free.test answers, HAProxy runs the configuration with both
	// backends (a reload would reset the counters). expect then stops at
	// the first 200: request 1 of 5.
	d.expect("free.test", "/", 200, "rl-1")
	d.expect("rl.test", "/", 200, "rl-0")
	before := d.reloads()
	var got []int
	for i := 0; i < 8; i++ {
		r, err := d.get("rl.test", "/")
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, r.status)
	}
	want := []int{200, 200, 200, 200, 429, 429, 429, 429}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("statuses %v, want %v", got, want)
	}
	for i := 0; i < 12; i++ {
		if r, err := d.get("free.test", "/"); err != nil || r.status != 200 {
			t.Fatalf("whitelisted request %d: %v %d", i, err, r.status)
		}
	}
	if after := d.reloads(); after != before {
		t.Fatalf("%d reloads while counting, want 0 (a reload resets the counters)", after-before)
	}

	e.annotate("Ingress", "free", map[string]string{"haproxy.org/rate-limit-requests": "lots"})
	e.event("Ingress", "free", "InvalidAnnotation")
	d.expect("free.test", "/", 503, "")
}

// TestProxyProtocol: the frontend accepts PROXY from the allowed sources
// only, the address it carries is the client for access lists and
// X-Forwarded-For, and send-proxy-protocol passes it on to pods (v1, v2).
func TestProxyProtocol(t *testing.T) {
	e := newEnv(t)
	e.configMap("perimeter", map[string]string{"proxy-protocol": "127.0.0.2/32, 2001:db8::/32"})
	d := e.startDaemon("--configmap=" + e.ns + "/perimeter")
	plain := e.pods("pp", 65, 1)
	pp := startProxyPod(t, "pp-proxy", "198.18.66.10")
	e.service("plain", map[string]string{"haproxy.org/allow-list": "203.0.113.0/24"}, plain[0])
	e.service("proxied", map[string]string{"haproxy.org/send-proxy-protocol": "proxy-v1"}, pp.Pod)
	e.ingress("pp", nil,
		rule{host: "plain.test", path: "/", service: "plain"},
		rule{host: "proxied.test", path: "/", service: "proxied"})

	// 127.0.0.1 is not an allowed PROXY source: plain HTTP works, and the
	// allow-list sees 127.0.0.1.
	d.expect("plain.test", "/", 403, "")
	// 127.0.0.2 must send PROXY; the address in it is the client.
	testenv.Eventually(t, 10*time.Second, func() error {
		resp, body, err := d.rawRequest("127.0.0.2", "plain.test", "/", proxyV1("203.0.113.7", "127.0.0.1", 40000, 80))
		if err != nil {
			return err
		}
		if resp.StatusCode != 200 || body != "pp-0" {
			return fmt.Errorf("via PROXY from 203.0.113.7: %d %q", resp.StatusCode, body)
		}
		if xff := resp.Header.Get("X-Seen-Forwarded-For"); xff != "203.0.113.7" {
			return fmt.Errorf("pod saw X-Forwarded-For %q, want 203.0.113.7", xff)
		}
		return nil
	})
	// Without the header, an allowed source is refused.
	if resp, _, err := d.rawRequest("127.0.0.2", "plain.test", "/", nil); err == nil && resp.StatusCode == 200 {
		t.Fatal("plain HTTP from a PROXY source was served")
	}

	// send-proxy-protocol: the pod reads the client address from PROXY.
	for _, v := range []struct{ annotation, version string }{{"proxy-v1", "1"}, {"proxy-v2", "2"}} {
		e.annotate("Service", "proxied", map[string]string{"haproxy.org/send-proxy-protocol": v.annotation})
		testenv.Eventually(t, 10*time.Second, func() error {
			r, err := d.get("proxied.test", "/")
			if err != nil {
				return err
			}
			if r.status != 200 || r.header.Get("X-Proxy-Version") != v.version || r.header.Get("X-Proxy-Source") != "127.0.0.1" {
				return fmt.Errorf("%s: status %d, pod saw PROXY v%q from %q", v.annotation, r.status, r.header.Get("X-Proxy-Version"), r.header.Get("X-Proxy-Source"))
			}
			return nil
		})
		resp, _, err := d.rawRequest("127.0.0.2", "proxied.test", "/", proxyV1("203.0.113.8", "127.0.0.1", 40001, 80))
		if err != nil || resp.StatusCode != 200 || resp.Header.Get("X-Proxy-Source") != "203.0.113.8" {
			t.Fatalf("%s: PROXY in from 203.0.113.8, pod saw %v (err %v)", v.annotation, resp, err)
		}
	}
}

// slotOf names the server slot that holds ip in haproxy.cfg ("" if none).
func (d *daemon) slotOf(ip string) string {
	d.t.Helper()
	m := regexp.MustCompile(`(?m)^\s+server (SRV_\d+) ` + regexp.QuoteMeta(ip) + `:`).FindStringSubmatch(d.config())
	if m == nil {
		return ""
	}
	return m[1]
}
