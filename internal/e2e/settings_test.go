package e2e

import (
	"strings"
	"testing"
)

// TestAnnotationScopeEvents: annotations of ours that no setting reads
// where they are set get a Warning Event on their own object, a value of
// another controller under the shared ingress.kubernetes.io/ prefix does
// not close the backend, and timeout-server on a Service is its backend's
// own; the Ingress keeps being served throughout.
func TestAnnotationScopeEvents(t *testing.T) {
	e := newEnv(t)
	d := e.startDaemon()
	p := e.pods("scope", 172, 1)
	e.service("app", map[string]string{
		"haproxy.org/ssl-redirect":   "true", // Ingress and ConfigMap only
		"haproxy.org/timeout-server": "5s",
	}, p[0])
	e.ingress("app", map[string]string{
		"haproxy.org/timeout-tunnel":      "5s",        // ConfigMap only
		"haproxy.org/load-balanse":        "leastconn", // misspelt
		"ingress.kubernetes.io/auth-type": "basic",     // ingress-nginx's value
		// Snippets are off: the Event goes to this Ingress.
		"haproxy.org/backend-config-snippet": "http-response set-header X-Snippet yes",
	}, rule{host: "scope.test", path: "/", service: "app"})
	d.expect("scope.test", "/", 200, "scope-0")

	for _, c := range []struct{ kind, reason, text string }{
		{"Ingress", "AnnotationScope", "haproxy.org/timeout-tunnel"},
		{"Ingress", "UnknownAnnotation", "haproxy.org/load-balanse"},
		{"Ingress", "ForeignAnnotation", "ingress.kubernetes.io/auth-type"},
		{"Service", "AnnotationScope", "haproxy.org/ssl-redirect"},
		{"Ingress", "SnippetDisabled", "backend-config-snippet"},
	} {
		ev := e.event(c.kind, "app", c.reason)
		if ev.Type != "Warning" || !strings.Contains(ev.Message, c.text) {
			t.Errorf("%s Event on %s: type %s message %q, want a Warning naming %s", c.reason, c.kind, ev.Type, ev.Message, c.text)
		}
	}
	cfg := d.config()
	i := strings.Index(cfg, "\nbackend "+e.ns+"_app_")
	if i < 0 || !strings.Contains(cfg[i:], "timeout server 5s") {
		t.Errorf("the Service's backend lacks timeout server 5s:\n%s", cfg)
	}
	if strings.Contains(cfg, "timeout tunnel 5s") {
		t.Errorf("the Ingress's ConfigMap-only timeout-tunnel was applied")
	}
	// Still served by the pod, not denied by the foreign auth-type.
	d.expect("scope.test", "/", 200, "scope-0")
}

// TestSnippetRejectedOnItsIngress: a backend snippet HAProxy rejects is
// reported on the Ingress that set it, not on the Service it shares.
func TestSnippetRejectedOnItsIngress(t *testing.T) {
	e := newEnv(t)
	d := e.startDaemon("--config-snippets=backend")
	p := e.pods("snipo", 173, 1)
	e.service("shared", nil, p[0])
	e.ingress("tenant", map[string]string{"haproxy.org/backend-config-snippet": "http-response no-such-action x"},
		rule{host: "snipo.test", path: "/", service: "shared"})
	d.expect("snipo.test", "/", 200, "snipo-0")
	ev := e.event("Ingress", "tenant", "ConfigRejected")
	if !strings.Contains(ev.Message, "snippet") {
		t.Errorf("event message %q does not name the snippet", ev.Message)
	}
}
