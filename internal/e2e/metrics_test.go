package e2e

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// Metrics tests use pods in 198.18.51.0/24.

func scrape(t testing.TB, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s %v", url, resp.Status, err)
	}
	return string(b)
}

// metricValue finds the sample "name{labels} value" in a Prometheus text
// page; labels is the exact label set as printed, or "" for none.
func metricValue(page, name, labels string) (float64, bool) {
	series := name
	if labels != "" {
		series += "{" + labels + "}"
	}
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`)
	m := re.FindStringSubmatch(page)
	if m == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(m[1], 64)
	return v, err == nil
}

// metric reads one unlabelled sample from the daemon's /metrics.
func (d *daemon) metric(t testing.TB, name string) float64 {
	t.Helper()
	v, ok := metricValue(scrape(t, fmt.Sprintf("http://127.0.0.1:%d/metrics", d.ctrlPort)), name, "")
	if !ok {
		t.Fatalf("metric %s missing", name)
	}
	return v
}

// TestMetrics scripts a certificate rotation, an endpoint change and a new
// backend, then reads the figures on /metrics, and HAProxy's own pages.
func TestMetrics(t *testing.T) {
	e := newEnv(t)
	ca := newTestCA(t, "metrics CA")
	pods := e.pods("mx", 51, 2)
	web := e.service("web", nil, pods[0])
	e.tlsSecret("web-tls", ca.issue(t, "metrics.test", "first"))
	e.tlsIngress("web", "metrics.test", "web", "web-tls", nil)
	d, port := e.tlsDaemon("--election-id=perimeter-metrics", "--election-namespace="+e.ns)
	expectSubject(t, port, "metrics.test", "metrics.test/first")

	rotated := ca.issue(t, "metrics.test", "rotated")
	e.tlsSecret("web-tls", rotated)
	expectSubject(t, port, "metrics.test", "metrics.test/rotated")
	web.SetEndpoints(t, endpoints(pods...)...)
	e.service("api", nil, pods[1])
	e.ingress("api", nil, rule{host: "api.metrics.test", path: "/", service: "api"})
	d.expect("api.metrics.test", "/", 200, "mx-1")

	url := fmt.Sprintf("http://127.0.0.1:%d/metrics", d.ctrlPort)
	var page string
	expiry := fmt.Sprintf(`name="%s_web-tls",secret="%s/web-tls"`, e.ns, e.ns)
	checks := []struct {
		name, labels string
		ok           func(float64) bool
		want         string
	}{
		{"perimeter_haproxy_reloads_total", `reason="backends",result="ok"`, func(v float64) bool { return v >= 1 }, ">= 1"},
		{"perimeter_haproxy_reloads_total", `reason="tls",result="failed"`, func(v float64) bool { return v == 0 }, "0"},
		{"perimeter_haproxy_runtime_operations_total", `kind="cert",result="ok"`, func(v float64) bool { return v >= 2 }, ">= 2"},
		{"perimeter_haproxy_runtime_operations_total", `kind="server",result="ok"`, func(v float64) bool { return v >= 1 }, ">= 1"},
		{"perimeter_sync_duration_seconds_count", "", func(v float64) bool { return v >= 3 }, ">= 3"},
		{"perimeter_quarantined_objects", "", func(v float64) bool { return v == 0 }, "0"},
		{"perimeter_config_generation", "", func(v float64) bool { return v >= 3 }, ">= 3"},
		{"perimeter_certificate_expiry_timestamp_seconds", expiry, func(v float64) bool { return int64(v) == rotated.notAfter.Unix() }, strconv.FormatInt(rotated.notAfter.Unix(), 10)},
		{"perimeter_certificate_expiry_timestamp_seconds", `name="default",secret=""`, func(v float64) bool { return v > float64(time.Now().Unix()) }, "in the future"},
		{"perimeter_cache_objects", `kind="ingresses"`, func(v float64) bool { return v == 2 }, "2"},
		{"perimeter_cache_objects", `kind="secrets"`, func(v float64) bool { return v == 1 }, "1"},
		{"perimeter_status_leader", "", func(v float64) bool { return v == 1 }, "1"},
		{"perimeter_ready", "", func(v float64) bool { return v == 1 }, "1"},
		{"go_goroutines", "", func(v float64) bool { return v > 0 }, "> 0"},
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		page = scrape(t, url)
		for _, c := range checks {
			v, ok := metricValue(page, c.name, c.labels)
			if !ok || !c.ok(v) {
				return fmt.Errorf("%s{%s} = %v (present %t), want %s", c.name, c.labels, v, ok, c.want)
			}
		}
		return nil
	})
	for _, l := range strings.Split(page, "\n") {
		if strings.HasPrefix(l, "perimeter_haproxy_") && !strings.HasSuffix(l, " 0") {
			t.Log(l)
		}
	}

	// HAProxy's own exporter and stats page.
	stats := fmt.Sprintf("http://127.0.0.1:%d", d.statsPort)
	if p := scrape(t, stats+"/metrics"); !strings.Contains(p, "haproxy_process_") {
		t.Fatal("HAProxy's /metrics has no haproxy_process_ series")
	}
	if p := scrape(t, stats+"/stats;csv"); !strings.Contains(p, e.ns+"_web_80") {
		t.Fatalf("HAProxy's /stats does not list the backend:\n%s", tail(p, 5))
	}
}
