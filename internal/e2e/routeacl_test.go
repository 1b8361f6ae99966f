package e2e

import (
	"testing"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// Route-acl tests use pods in 198.18.93.0/24.

const routeACLKey = "haproxy.org/route-acl"

// TestRouteACL: two Ingresses route the same host and path, one to a
// Service with route-acl: requests with the header reach that Service, the
// others the plain one. A new host for the conditional Service needs no
// reload; an invalid route-acl is reported on the Service and leaves only
// its routes out.
func TestRouteACL(t *testing.T) {
	e := newEnv(t)
	pods := e.pods("racl", 93, 2)
	e.service("svc-a", nil, pods[0])
	e.service("svc-b", map[string]string{routeACLKey: "req.hdr(x-canary) -m str yes"}, pods[1])
	e.ingress("plain", nil, rule{host: "acl.example", path: "/", service: "svc-a"})
	e.ingress("cond", nil, rule{host: "acl.example", path: "/", service: "svc-b"})
	d := e.startDaemon()
	canary := map[string]string{"X-Canary": "yes"}
	d.expectWith("acl.example", "/", canary, 200, "racl-1")
	d.expect("acl.example", "/", 200, "racl-0")
	d.expectWith("acl.example", "/", map[string]string{"X-Canary": "no"}, 200, "racl-0")
	if ev := e.events("Ingress", "cond"); len(ev) != 0 {
		for _, x := range ev {
			if x.Reason == model.ReasonRuleConflict {
				t.Fatalf("conditional route reported as a conflict: %s", x.Message)
			}
		}
	}

	// A second host for svc-b: map entries only. Without the header no
	// route matches it, so the built-in 404 answers.
	before := d.reloads()
	e.ingress("cond-2", nil, rule{host: "acl2.example", path: "/", service: "svc-b"})
	d.expectWith("acl2.example", "/", canary, 200, "racl-1")
	d.expect("acl2.example", "/", 404, "")
	if after := d.reloads(); after != before {
		t.Fatalf("a new host for a known condition reloaded HAProxy %d times", after-before)
	}

	// An invalid condition: an Event on the Service, its routes left out,
	// svc-a still serves every request of the shared host.
	e.annotate("Service", "svc-b", map[string]string{routeACLKey: "env(HOME) -m found"})
	e.event("Service", "svc-b", model.ReasonInvalidAnnotation)
	d.expectWith("acl.example", "/", canary, 200, "racl-0")
	d.expect("acl.example", "/", 200, "racl-0")
	d.expectWith("acl2.example", "/", canary, 404, "")
}
