package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// Tests of single keys use pods in 198.18.98.0/24.

// TestClientStrictSNI: with client-strict-sni, a client whose SNI matches
// no certificate is refused during the handshake instead of getting the
// default certificate; hosts with a certificate are served as before.
func TestClientStrictSNI(t *testing.T) {
	e := newEnv(t)
	ca := newTestCA(t, "Strict CA")
	web := feEchoPod(t, "strict-0", 98, 50)
	e.service("web", nil, web.Pod)
	e.tlsSecret("web-tls", ca.issue(t, "strict.keys.test", "edge"))
	e.tlsIngress("web", "strict.keys.test", "web", "web-tls", nil)
	e.configMap("perimeter", map[string]string{"client-strict-sni": "true"})
	_, port := e.tlsDaemon("--configmap=" + e.ns + "/perimeter")

	testenv.Eventually(t, 15*time.Second, func() error {
		a, err := httpsGet(port, "strict.keys.test", "strict.keys.test", "/", nil)
		if err != nil {
			return err
		}
		if a.status != 200 || a.pod != "strict-0" || a.subject != "strict.keys.test/edge" {
			return fmt.Errorf("status %d pod %q certificate %q", a.status, a.pod, a.subject)
		}
		return nil
	})
	for _, sni := range []string{"other.keys.test", ""} {
		if subject, err := servedSubject(port, sni); err == nil {
			t.Errorf("SNI %q: served %q, want the handshake refused", sni, subject)
		}
	}
}

// TestCookiePersistenceNoDynamic: the cookie names the server slot, and a
// client presenting it stays on that slot's pod.
func TestCookiePersistenceNoDynamic(t *testing.T) {
	e := newEnv(t)
	d := e.startDaemon()
	p := e.pods("nd", 98, 3)
	e.service("app", map[string]string{"haproxy.org/cookie-persistence-no-dynamic": "PMSTATIC"}, p[0], p[1], p[2])
	e.ingress("app", nil, rule{host: "static.keys.test", path: "/", service: "app"})
	r := d.expectWith("static.keys.test", "/", nil, 200, "")
	var value string
	for _, c := range (&http.Response{Header: r.header}).Cookies() {
		if c.Name == "PMSTATIC" {
			value = c.Value
		}
	}
	if !strings.HasPrefix(value, "SRV_") {
		t.Fatalf("cookie PMSTATIC = %q, want a server slot name; headers %v", value, r.header)
	}
	pod := r.header.Get("X-Pod")
	for i := 0; i < 12; i++ {
		r, err := d.getWith("static.keys.test", "/", map[string]string{"Cookie": "PMSTATIC=" + value})
		if err != nil || r.status != 200 {
			t.Fatalf("request %d: %v %d", i, err, r.status)
		}
		if got := r.header.Get("X-Pod"); got != pod {
			t.Fatalf("request %d with %s answered by %s, want %s", i, value, got, pod)
		}
	}
	if got := d.answering("static.keys.test", "/", 9); len(got) != 3 {
		t.Fatalf("without cookie: answered by %v, want 3 pods", got)
	}
}
