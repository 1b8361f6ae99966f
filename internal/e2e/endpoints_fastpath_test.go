package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// TestEndpointFastPath: a change to EndpointSlices alone is computed from the
// previous model result instead of a full rebuild, reaches HAProxy without a
// reload, and a later change to anything else still rebuilds everything.
func TestEndpointFastPath(t *testing.T) {
	e := newEnv(t)
	d := e.startDaemon()
	pods := e.pods("fp", 70, 3)
	app := e.service("fp", nil, pods[0])
	e.ingress("fp", nil, rule{host: "fast.path", path: "/", service: "fp"})
	d.expect("fast.path", "/", 200, "fp-0")

	refreshed := func() int { return strings.Count(d.out.String(), "endpoints refreshed") }
	before, r0 := refreshed(), d.reloads()
	app.SetEndpoints(t, endpoints(pods[1:]...)...)
	testenv.Eventually(t, 5*time.Second, func() error {
		if got := strings.Join(d.answering("fast.path", "/", 8), ","); got != "fp-1,fp-2" {
			return fmt.Errorf("answering %s, want fp-1,fp-2", got)
		}
		return nil
	})
	if refreshed() <= before {
		t.Fatalf("the endpoint change went through a full build; daemon output:\n%s", d.out.String())
	}
	if r := d.reloads(); r != r0 {
		t.Fatalf("HAProxy reloaded %d times for an endpoint change", r-r0)
	}

	// A new Ingress after the fast path is built in full: its route is
	// served by the current endpoints.
	e.ingress("fp-other", nil, rule{host: "other.path", path: "/", service: "fp"})
	testenv.Eventually(t, 5*time.Second, func() error {
		if got := strings.Join(d.answering("other.path", "/", 8), ","); got != "fp-1,fp-2" {
			return fmt.Errorf("other.path answering %s, want fp-1,fp-2", got)
		}
		return nil
	})
}
