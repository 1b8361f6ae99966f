package e2e

import (
	"strings"
	"testing"
)

// Even with backend snippets enabled, a tenant's snippet cannot make HAProxy
// serve a file (the daemon's kubeconfig): the directive is refused for that
// Service alone, with an Event, and the victim sharing the edge sees
// nothing. Were it to get through, HAProxy could not read the file anyway
// (haproxy's sandbox, tested in internal/haproxy).
func TestTenantSnippetCannotReadKubeconfig(t *testing.T) {
	e := newEnv(t)
	d := e.startDaemon("--config-snippets=backend")
	pod := feEchoPod(t, "sbx-0", 83, 10)
	e.service("victim", nil, pod.Pod)
	e.ingress("victim", nil, rule{host: "victim.example", path: "/", service: "victim"})
	d.feExpect("GET", "victim.example", "/", nil, 200, func(r response) error { return feHeader(r, "X-Pod", "sbx-0") })
	loop := startRequestLoop(d.httpPort, "victim.example")
	defer loop.finish()
	waitSent(t, loop, 30)

	e.service("thief", map[string]string{
		"haproxy.org/backend-config-snippet": "http-request return status 200 content-type text/plain file " + e.c.DaemonKubeconfig,
	}, pod.Pod)
	e.ingress("thief", nil, rule{host: "thief.example", path: "/", service: "thief"})
	ev := e.event("Service", "thief", "InvalidAnnotation")
	if !strings.Contains(ev.Message, "backend-config-snippet") || !strings.Contains(ev.Message, "file") {
		t.Fatalf("event message %q does not name the snippet and the refused word", ev.Message)
	}
	d.feExpect("GET", "thief.example", "/", nil, 200, func(r response) error {
		if strings.Contains(r.body, "client-certificate") || strings.Contains(r.body, "apiVersion") {
			t.Fatalf("the kubeconfig was served:\n%s", r.body)
		}
		return feHeader(r, "X-Pod", "sbx-0")
	})
	waitSent(t, loop, loop.sent.Load()+30)
	sent, failed, errs := loop.finish()
	t.Logf("victim under load meanwhile: %d requests, %d failed", sent, failed)
	if failed != 0 {
		t.Fatalf("victim lost %d of %d requests: %v", failed, sent, errs)
	}
}
