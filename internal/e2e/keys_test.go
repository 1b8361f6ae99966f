package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
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

// TestLogFormatTCP: a TCP service's connections are logged in the
// log-format-tcp format, HTTP requests still in log-format.
func TestLogFormatTCP(t *testing.T) {
	e := newEnv(t)
	logs := feSyslog(t)
	port := testenv.FreePort(t)
	e.configMap("cm", map[string]string{
		"syslog-server":  "address:127.0.0.1, port:" + strconv.Itoa(logs.port) + ", facility:local0",
		"log-format":     "perimeter-http %ST %b",
		"log-format-tcp": "perimeter-tcp %ft %b",
	})
	e.configMap("tcp", map[string]string{strconv.Itoa(port): e.ns + "/raw:80"})
	pod := feEchoPod(t, "lt-0", 98, 30)
	e.service("raw", nil, pod.Pod)
	e.ingress("raw", nil, rule{host: "raw.keys.test", path: "/", service: "raw"})
	d := e.startDaemon("--configmap="+e.ns+"/cm", "--configmap-tcp-services="+e.ns+"/tcp")

	testenv.Eventually(t, 15*time.Second, func() error {
		conn, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), 2*time.Second)
		if err != nil {
			return err
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(conn, "GET / HTTP/1.0\r\nHost: raw\r\n\r\n"); err != nil {
			return err
		}
		b, err := io.ReadAll(conn)
		if err != nil || !strings.Contains(string(b), "X-Pod: lt-0") {
			return fmt.Errorf("TCP service answer %q, %v", b, err)
		}
		return nil
	})
	logs.expect(t, fmt.Sprintf("perimeter-tcp tcp_%d tcp%d_%s_raw_80", port, port, e.ns))
	d.feExpect("GET", "raw.keys.test", "/", nil, 200, nil)
	logs.expect(t, "perimeter-http 200 "+e.ns+"_raw_80")
}

// TestFrontendAndStatsSnippets: with --config-snippets=frontend,stats the
// operator's frontend-config-snippet acts on every host and
// stats-config-snippet on the stats page; a frontend snippet HAProxy
// rejects keeps the previous global settings and blocks nothing else.
func TestFrontendAndStatsSnippets(t *testing.T) {
	e := newEnv(t)
	e.configMap("cm", map[string]string{
		"frontend-config-snippet": "http-response set-header X-Edge-Snippet on",
		"stats-config-snippet":    "stats show-desc perimeter-e2e-stats",
	})
	d := e.startDaemon("--configmap="+e.ns+"/cm", "--config-snippets=frontend,stats")
	pod := feEchoPod(t, "fs-0", 98, 40)
	e.service("fs", nil, pod.Pod)
	e.ingress("one", nil, rule{host: "one.keys.test", path: "/", service: "fs"})
	snippet := func(r response) error { return feHeader(r, "X-Edge-Snippet", "on") }
	d.feExpect("GET", "one.keys.test", "/", nil, 200, snippet)
	testenv.Eventually(t, 15*time.Second, func() error {
		resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/stats", d.statsPort))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if !strings.Contains(string(b), "perimeter-e2e-stats") {
			return fmt.Errorf("stats page (status %d) lacks the snippet's description", resp.StatusCode)
		}
		return nil
	})

	e.configMap("cm", map[string]string{"frontend-config-snippet": "http-request no-such-action"})
	e.ingress("two", nil, rule{host: "two.keys.test", path: "/", service: "fs"})
	d.feExpect("GET", "two.keys.test", "/", nil, 200, snippet)
	d.feExpect("GET", "one.keys.test", "/", nil, 200, snippet)
}

// TestStandaloneBackend: an Ingress with standalone-backend gets a backend
// of its own on a shared Service, and both Ingresses are served.
func TestStandaloneBackend(t *testing.T) {
	e := newEnv(t)
	d := e.startDaemon()
	pod := feEchoPod(t, "sa-0", 98, 60)
	e.service("shared", nil, pod.Pod)
	e.ingress("plain", nil, rule{host: "plain.keys.test", path: "/", service: "shared"})
	e.ingress("own", map[string]string{"haproxy.org/standalone-backend": "true"}, rule{host: "own.keys.test", path: "/", service: "shared"})
	d.feExpect("GET", "plain.keys.test", "/", nil, 200, nil)
	d.feExpect("GET", "own.keys.test", "/", nil, 200, nil)
	prefix := "backend " + e.ns + "_shared_80"
	testenv.Eventually(t, 15*time.Second, func() error {
		cfg, err := os.ReadFile(filepath.Join(d.configDir, "haproxy.cfg"))
		if err != nil {
			return err
		}
		n := 0
		for _, l := range strings.Split(string(cfg), "\n") {
			if strings.HasPrefix(l, prefix) {
				n++
			}
		}
		if n != 2 {
			return fmt.Errorf("%d backends for the shared Service, want 2 (one standalone)", n)
		}
		return nil
	})
}
