package e2e

import (
	"bufio"
	"context"
	"crypto/sha1"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// limitsTenants is one daemon serving two namespaces: a victim whose host
// is under load for the whole test, and an attacker.
type limitsTenants struct {
	t                testing.TB
	victim, attacker *env
	d                *daemon
	victimPod        *testenv.Pod
	load             *requestLoop
}

// newLimitsTenants starts the daemon on both namespaces, the victim's pod,
// Service and Ingress for victim.test, and a request loop on it. A
// non-nil cm is the controller ConfigMap (in the victim's namespace).
func newLimitsTenants(t *testing.T, subnet int, cm map[string]string, flags ...string) *limitsTenants {
	t.Helper()
	v := newEnv(t)
	a := &env{t: t, c: v.c, ns: v.c.Namespace(t)}
	if cm != nil {
		v.configMap("perimeter", cm)
		flags = append(flags, "--configmap="+v.ns+"/perimeter")
	}
	d := v.startDaemon(append([]string{"--namespace-whitelist=" + a.ns}, flags...)...)
	vp := v.pods("victim", subnet, 1)
	v.service("web", nil, vp[0])
	v.ingress("web", nil, rule{host: "victim.test", path: "/", service: "web"})
	d.expect("victim.test", "/", 200, "victim-0")
	ap := a.pods("attacker", subnet+1, 1)
	a.service("web", nil, ap[0])
	tn := &limitsTenants{t: t, victim: v, attacker: a, d: d, victimPod: vp[0], load: startRequestLoop(d.httpPort, "victim.test")}
	t.Cleanup(func() { tn.load.finish() })
	return tn
}

// victimUnharmed stops the load and checks that no victim request failed.
func (tn *limitsTenants) victimUnharmed() {
	tn.t.Helper()
	sent, failed, errs := tn.load.finish()
	tn.t.Logf("victim load: %d requests, %d failed", sent, failed)
	if failed > 0 || sent < 20 {
		tn.t.Fatalf("victim: %d of %d requests failed: %v", failed, sent, errs)
	}
	tn.d.expect("victim.test", "/", 200, "victim-0")
}

// backendSection is the text of one backend of haproxy.cfg, "" if absent.
func backendSection(cfg, name string) string {
	_, rest, ok := strings.Cut(cfg, "\nbackend "+name+" ")
	if !ok {
		return ""
	}
	if i := strings.Index(rest, "\n\n"); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

func basicAuth(user, pass string) map[string]string {
	req, _ := http.NewRequest("GET", "/", nil)
	req.SetBasicAuth(user, pass)
	return map[string]string{"Authorization": req.Header.Get("Authorization")}
}

// TestTenantForeignSecrets: an attacker naming the victim's Secrets in
// auth-secret and server-crt gets CrossNamespaceSecret Events, its backend
// fails closed (auth) or drops the setting (server-crt), HAProxy never
// gets the victim's users or certificate, and the Events name no key of
// the victim's Secret.
func TestTenantForeignSecrets(t *testing.T) {
	tn := newLimitsTenants(t, 231, nil)
	v, a, d := tn.victim, tn.attacker, tn.d
	v.secret("users", map[string]string{"victim-admin": cryptHash(t, "secret")})
	a.annotate("Service", "web", map[string]string{"haproxy.org/server-crt": v.ns + "/users"})
	a.ingress("web", map[string]string{
		"haproxy.org/auth-type":   "basic-auth",
		"haproxy.org/auth-secret": v.ns + "/users",
	}, rule{host: "attacker.test", path: "/", service: "web"})

	for _, ev := range []struct{ kind, key string }{{"Ingress", "auth-secret"}, {"Service", "server-crt"}} {
		e := a.event(ev.kind, "web", "CrossNamespaceSecret")
		if !strings.Contains(e.Message, ev.key) || strings.Contains(e.Message, "victim-admin") {
			t.Errorf("%s Event: %q", ev.kind, e.Message)
		}
	}
	d.expectWith("attacker.test", "/", basicAuth("victim-admin", "secret"), 503, "")
	d.expectWith("attacker.test", "/", nil, 503, "")
	cfg := d.config()
	be := backendSection(cfg, a.ns+"_web_80")
	if strings.Contains(cfg, "victim-admin") || be == "" || strings.Contains(be, " crt ") || strings.Contains(be, " ssl") {
		t.Errorf("haproxy.cfg holds the victim's users or a client certificate:\n%s", cfg)
	}
	list, err := v.c.Admin.CoreV1().Events(a.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range list.Items {
		if strings.Contains(e.Message, "victim-admin") {
			t.Errorf("Event %s names the victim's key: %s", e.Reason, e.Message)
		}
	}
	// Its own namespace, the same Secret name: served.
	a.secret("users", map[string]string{"alice": cryptHash(t, "wonderland")})
	a.annotate("Ingress", "web", map[string]string{"haproxy.org/auth-secret": "users"})
	d.expectWith("attacker.test", "/", basicAuth("alice", "wonderland"), 200, "attacker-0")
	tn.victimUnharmed()
}

// TestTenantExpensiveHash: an attacker's auth Secret with a hash of a
// billion sha-crypt rounds (and one with bcrypt cost 31) is refused with
// an Event; Basic-auth requests against it answer at once and never reach
// crypt(3); the victim keeps being served.
func TestTenantExpensiveHash(t *testing.T) {
	tn := newLimitsTenants(t, 233, nil)
	a, d := tn.attacker, tn.d
	const huge = "$6$rounds=999999999$saltsalt$Zx0G1Yx0iZ0jQHfl3b0h6V6Mc8o7UwZtm7q4Rj3rz9kqfG5Hq0lVZ1ZnUeT8j0dE5sN1F8M9P6l3Y2p4u6K7a."
	const bcrypt31 = "$2b$31$abcdefghijklmnopqrstuuH2yIr6dS8iH8aQ4bWJ0qv1xYzE0u0fW"
	a.secret("users", map[string]string{"admin": huge, "root": bcrypt31})
	a.ingress("web", map[string]string{
		"haproxy.org/auth-type":   "basic-auth",
		"haproxy.org/auth-secret": "users",
	}, rule{host: "attacker.test", path: "/", service: "web"})
	e := a.event("Ingress", "web", "InvalidAuthSecret")
	t.Logf("Event: %s", e.Message)
	testenv.Eventually(t, 15*time.Second, func() error {
		list, err := a.c.Admin.CoreV1().Events(a.ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		var msgs []string
		for _, ev := range list.Items {
			msgs = append(msgs, ev.Message)
		}
		all := strings.Join(msgs, "\n")
		for _, want := range []string{"rounds=999999999 above 5000", "bcrypt cost 31 above 12"} {
			if !strings.Contains(all, want) {
				return fmt.Errorf("no Event says %q among:\n%s", want, all)
			}
		}
		return nil
	})
	d.expectWith("attacker.test", "/", nil, 503, "")
	if cfg := d.config(); strings.Contains(cfg, "rounds=999999999") || strings.Contains(cfg, "$2b$31$") {
		t.Fatalf("haproxy.cfg holds the expensive hashes")
	}
	start := time.Now()
	for i := range 20 {
		r, err := d.getWith("attacker.test", "/", basicAuth("admin", fmt.Sprintf("guess-%d", i)))
		if err != nil || r.status != 503 {
			t.Fatalf("request %d: %v status %d, want 503", i, err, r.status)
		}
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("20 Basic-auth requests took %s", took)
	}
	tn.victimUnharmed()
}

// TestTenantRegex: backtracking regexes in path-rewrite and
// cors-allow-origin are refused with UnsafeRegex Events and never reach
// HAProxy; hostile paths and Origins then cost nothing; a safe rewrite
// works.
func TestTenantRegex(t *testing.T) {
	tn := newLimitsTenants(t, 235, nil)
	a, d := tn.attacker, tn.d
	a.ingress("web", map[string]string{
		"haproxy.org/path-rewrite":      "(a+)+$ /x",
		"haproxy.org/cors-enable":       "true",
		"haproxy.org/cors-allow-origin": "^(a+)+$",
	}, rule{host: "attacker.test", path: "/", service: "web"})
	testenv.Eventually(t, 15*time.Second, func() error {
		list, err := a.c.Admin.CoreV1().Events(a.ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		var msgs []string
		for _, ev := range list.Items {
			if ev.Reason == "UnsafeRegex" && ev.InvolvedObject.Kind == "Ingress" && ev.InvolvedObject.Name == "web" {
				msgs = append(msgs, ev.Message)
			}
		}
		all := strings.Join(msgs, "\n")
		if !strings.Contains(all, "path-rewrite") || !strings.Contains(all, "cors-allow-origin") {
			return fmt.Errorf("want UnsafeRegex Events for path-rewrite and cors-allow-origin, have %q", all)
		}
		return nil
	})
	d.expect("attacker.test", "/", 200, "attacker-0")
	if cfg := d.config(); strings.Contains(cfg, "(a+)+") {
		t.Fatalf("haproxy.cfg holds the unsafe regex")
	}
	evil := "/" + strings.Repeat("a", 4000) + "!"
	start := time.Now()
	for range 50 {
		r, err := d.getWith("attacker.test", evil, map[string]string{"Origin": strings.Repeat("a", 4000) + "!"})
		if err != nil || r.status != 200 {
			t.Fatalf("hostile request: %v status %d", err, r.status)
		}
	}
	t.Logf("50 hostile requests in %s", time.Since(start))

	// A regex of the safe subset is applied.
	a.annotate("Ingress", "web", map[string]string{"haproxy.org/path-rewrite": `^/api/([^/]+)/(.*)$ /\2`})
	testenv.Eventually(t, 10*time.Second, func() error {
		if !strings.Contains(d.config(), `^/api/([^/]+)/(.*)$`) {
			return fmt.Errorf("safe rewrite not rendered")
		}
		return nil
	})
	tn.victimUnharmed()
}

// TestTenantLimits: rate-limit-size above 1m is refused (fail closed, with
// an Event); hard-stop-after and mworker-max-reloads are set; an attacker
// growing haproxy.cfg past --max-config-size is kept at its last good
// version with a ConfigTooLarge Event while the victim's own changes keep
// applying.
func TestTenantLimits(t *testing.T) {
	tn := newLimitsTenants(t, 237, nil, "--max-config-size=40000")
	v, a, d := tn.victim, tn.attacker, tn.d
	cfg := d.config()
	for _, want := range []string{"hard-stop-after 30m", "mworker-max-reloads 50"} {
		if !strings.Contains(cfg, want) {
			t.Errorf("haproxy.cfg lacks %q", want)
		}
	}

	a.ingress("web", map[string]string{
		"haproxy.org/rate-limit-requests": "10",
		"haproxy.org/src-ip-header":       "X-Real-IP",
		"haproxy.org/rate-limit-size":     "100m",
	}, rule{host: "attacker.test", path: "/", service: "web"})
	e := a.event("Ingress", "web", "InvalidAnnotation")
	if !strings.Contains(e.Message, "rate-limit-size") {
		t.Errorf("Event %q does not name rate-limit-size", e.Message)
	}
	d.expect("attacker.test", "/", 503, "")
	if strings.Contains(d.config(), "size 100000000") {
		t.Fatal("a 100m stick table was rendered")
	}
	a.annotate("Ingress", "web", map[string]string{"haproxy.org/rate-limit-size": "", "haproxy.org/rate-limit-requests": "", "haproxy.org/src-ip-header": ""})
	d.expect("attacker.test", "/", 200, "attacker-0")

	// 2 x 4096 networks on the attacker's Service: about 100 kB of acl
	// lines, over the 40 kB budget.
	var nets []string
	for i := range 4096 {
		nets = append(nets, fmt.Sprintf("10.%d.%d.0/24", i/256, i%256))
	}
	a.annotate("Service", "web", map[string]string{
		"haproxy.org/deny-list":  strings.Join(nets, ","),
		"haproxy.org/allow-list": strings.Join(nets, ",") + ",127.0.0.0/8",
	})
	ev := a.event("Service", "web", "ConfigTooLarge")
	t.Logf("Event: %s", ev.Message)
	if strings.Contains(d.config(), "10.15.255.0/24") {
		t.Fatal("the attacker's lists were rendered over the budget")
	}
	d.expect("attacker.test", "/", 200, "attacker-0")

	// The victim's own change, a new backend, still applies.
	v.service("web2", nil, tn.victimPod)
	v.ingress("web-v2", nil, rule{host: "victim.test", path: "/v2", service: "web2"})
	d.expect("victim.test", "/v2", 200, "victim-0")
	tn.victimUnharmed()
}

// TestTenantSecretWatchCap: an attacker naming more Secrets than its
// namespace may have watched gets SecretNotWatched Events; the Secrets it
// may have cost one watch, not one each; the victim's Secrets, referenced
// afterwards, are still watched and served.
func TestTenantSecretWatchCap(t *testing.T) {
	httpsPort := testenv.FreePort(t)
	tn := newLimitsTenants(t, 239, nil, "--max-watched-secrets-per-namespace=10", "--max-watched-secrets=20", "--https-bind-port="+strconv.Itoa(httpsPort))
	v, a, d := tn.victim, tn.attacker, tn.d
	ing := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: "flood", Namespace: a.ns}}
	pt := networkingv1.PathTypePrefix
	for i := range 12 {
		host := fmt.Sprintf("h%d.attacker.test", i)
		ing.Spec.TLS = append(ing.Spec.TLS, networkingv1.IngressTLS{Hosts: []string{host}, SecretName: fmt.Sprintf("missing-%02d", i)})
		ing.Spec.Rules = append(ing.Spec.Rules, networkingv1.IngressRule{Host: host, IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
			Paths: []networkingv1.HTTPIngressPath{{Path: "/", PathType: &pt, Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{
				Name: "web", Port: networkingv1.ServiceBackendPort{Number: 80}}}}}}}})
	}
	if _, err := a.c.Admin.NetworkingV1().Ingresses(a.ns).Create(context.Background(), ing, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e := a.event("Ingress", "flood", "SecretNotWatched")
	if !strings.Contains(e.Message, "max-watched-secrets-per-namespace") || strings.Contains(e.Message, v.ns) {
		t.Errorf("Event %q does not name the cap, or names the victim", e.Message)
	}
	// Its hosts are still routed (redirected to HTTPS, as spec.tls asks).
	d.expect("h0.attacker.test", "/", 302, "")
	metrics := fmt.Sprintf("http://127.0.0.1:%d/metrics", d.ctrlPort)
	testenv.Eventually(t, 10*time.Second, func() error {
		page := scrape(t, metrics)
		refs, _ := metricValue(page, "perimeter_cache_objects", `kind="secrets"`)
		watches, _ := metricValue(page, "perimeter_cache_objects", `kind="secret_watches"`)
		if refs != 10 || watches != 1 {
			return fmt.Errorf("%v Secrets in %v watches, want 10 in 1", refs, watches)
		}
		return nil
	})

	// The victim references a Secret after the flood: watched, served.
	v.secret("users", map[string]string{"alice": cryptHash(t, "wonderland")})
	v.service("private", nil, tn.victimPod)
	v.ingress("private", map[string]string{
		"haproxy.org/auth-type":   "basic-auth",
		"haproxy.org/auth-secret": "users",
	}, rule{host: "private.victim.test", path: "/", service: "private"})
	d.expectWith("private.victim.test", "/", basicAuth("alice", "wonderland"), 200, "victim-0")
	d.expectWith("private.victim.test", "/", nil, 401, "")

	// One of the attacker's watched Secrets appears: it is read through the
	// namespace watch and served; one over the cap stays unread.
	a.tlsSecret("missing-00", selfSigned(t, "h0.attacker.test", "attacker"))
	a.tlsSecret("missing-11", selfSigned(t, "h11.attacker.test", "attacker"))
	testenv.Eventually(t, 10*time.Second, func() error {
		if got, err := servedSubject(httpsPort, "h0.attacker.test"); err != nil || got != "h0.attacker.test/attacker" {
			return fmt.Errorf("h0.attacker.test served %q (%v)", got, err)
		}
		return nil
	})
	if got, err := servedSubject(httpsPort, "h11.attacker.test"); err != nil || got == "h11.attacker.test/attacker" {
		t.Errorf("h11.attacker.test, over the cap, served %q (%v)", got, err)
	}
	tn.victimUnharmed()
}

// tunnelPod answers an Upgrade request with 101 and then echoes, like a
// WebSocket server; other requests get its name.
func tunnelPod(t *testing.T, name, ip string) *testenv.Pod {
	return testenv.StartPod(t, testenv.PodOptions{Name: name, IP: ip, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") == "" {
			w.Header().Set("X-Pod", name)
			_, _ = w.Write([]byte(name))
			return
		}
		conn, buf, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		sum := sha1.Sum([]byte(r.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
		_, _ = buf.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " +
			base64.StdEncoding.EncodeToString(sum[:]) + "\r\n\r\n")
		if buf.Flush() == nil {
			_, _ = io.Copy(conn, buf)
		}
	})})
}

// openTunnel upgrades a connection through HAProxy and checks it echoes.
func openTunnel(port int, host string) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 5*time.Second)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET /ws HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", host)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err == nil && resp.StatusCode != http.StatusSwitchingProtocols {
		err = fmt.Errorf("upgrade: %s", resp.Status)
	}
	if err == nil {
		err = echoes(c, br)
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

func echoes(c net.Conn, br *bufio.Reader) error {
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	line, err := br.ReadString('\n')
	if err == nil && line != "ping\n" {
		err = fmt.Errorf("echo %q", line)
	}
	return err
}

// TestTenantLimitsReloadStorm: an attacker forcing one reload after
// another while holding a WebSocket on every worker generation cannot pile
// up old workers: mworker-max-reloads (3 here, 50 by default) stops those
// that survived more reloads, while the victim loses no request.
func TestTenantLimitsReloadStorm(t *testing.T) {
	tn := newLimitsTenants(t, 241, map[string]string{"mworker-max-reloads": "3"})
	a, d := tn.attacker, tn.d
	testenv.Eventually(t, 10*time.Second, func() error {
		if !strings.Contains(d.config(), "mworker-max-reloads 3") {
			return fmt.Errorf("mworker-max-reloads 3 not rendered")
		}
		return nil
	})
	ws := tunnelPod(t, "ws", "198.18.242.20")
	a.service("ws", nil, ws)
	a.ingress("ws", nil, rule{host: "ws.attacker.test", path: "/", service: "ws"})
	d.expect("ws.attacker.test", "/", 200, "ws")

	const storm = 10
	var tunnels []net.Conn
	t.Cleanup(func() {
		for _, c := range tunnels {
			c.Close()
		}
	})
	for i := range storm {
		c, err := openTunnel(d.httpPort, "ws.attacker.test")
		if err != nil {
			t.Fatalf("tunnel %d: %v", i, err)
		}
		tunnels = append(tunnels, c)
		before := d.reloads()
		a.annotate("Ingress", "ws", map[string]string{"haproxy.org/timeout-check": fmt.Sprintf("%ds", i+1)})
		testenv.Eventually(t, 15*time.Second, func() error {
			if n := d.reloads(); n <= before {
				return fmt.Errorf("reload %d not done (%d reloads)", i, n)
			}
			return nil
		})
	}
	// Master, current worker and at most 3 old ones.
	testenv.Eventually(t, 15*time.Second, func() error {
		if n := len(haproxyPIDs(d.runtimeDir)); n > 5 {
			return fmt.Errorf("%d HAProxy processes after %d reloads with a tunnel each, want at most 5", n, storm)
		}
		return nil
	})
	// The newest tunnel, on a worker within the limit, still works.
	last := tunnels[len(tunnels)-1]
	_ = last.SetDeadline(time.Now().Add(5 * time.Second))
	if err := echoes(last, bufio.NewReader(last)); err != nil {
		t.Errorf("newest tunnel: %v", err)
	}
	tn.victimUnharmed()
}
