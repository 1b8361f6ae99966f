package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/perimeter-ingress/perimeter/internal/model"
	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// Canary tests use pods in 198.18.90.0/24.

const (
	canaryService = model.ExtensionPrefix + "canary-service"
	canaryWeight  = model.ExtensionPrefix + "canary-weight"
)

// canaryShare sends n requests and counts those the canary pod answered;
// every request must get 200 from one of the two pods.
func (d *daemon) canaryShare(host, mainPod, canaryPod string, n int) (int, error) {
	hits := 0
	for range n {
		r, err := d.get(host, "/")
		if err != nil {
			return 0, err
		}
		pod := r.header.Get("X-Pod")
		switch {
		case r.status != 200:
			return 0, fmt.Errorf("status %d (body %q)", r.status, r.body)
		case pod == canaryPod:
			hits++
		case pod != mainPod:
			return 0, fmt.Errorf("answered by %q, want %s or %s", pod, mainPod, canaryPod)
		}
	}
	return hits, nil
}

// expectShare polls until a sample of 100 requests lands in [lo, hi] on the
// canary (the new weight is applied), then measures n requests and checks
// their share against [nlo, nhi].
func (d *daemon) expectShare(host, mainPod, canaryPod string, lo, hi, n, nlo, nhi int) int {
	d.t.Helper()
	testenv.Eventually(d.t, 15*time.Second, func() error {
		hits, err := d.canaryShare(host, mainPod, canaryPod, 100)
		if err != nil {
			return err
		}
		if hits < lo || hits > hi {
			return fmt.Errorf("%d of 100 requests reached the canary, want %d..%d", hits, lo, hi)
		}
		return nil
	})
	hits, err := d.canaryShare(host, mainPod, canaryPod, n)
	if err != nil {
		d.t.Fatal(err)
	}
	if hits < nlo || hits > nhi {
		d.t.Fatalf("%d of %d requests reached the canary, want %d..%d", hits, n, nlo, nhi)
	}
	return hits
}

// TestCanary: perimeter.io/canary-weight splits a host's traffic between
// its Service and the canary Service; adding the canary (its Service being
// a backend already) and changing the weight (including to 0) apply
// through the Runtime API without a reload.
func TestCanary(t *testing.T) {
	e := newEnv(t)
	pods := e.pods("canary", 90, 2)
	e.service("web", nil, pods[0])
	e.service("web-canary", nil, pods[1])
	e.ingress("canary", nil, rule{host: "canary.example", path: "/", service: "web"})
	// The canary Service is routed already, so its backend exists.
	e.ingress("canary-direct", nil, rule{host: "direct.example", path: "/", service: "web-canary"})
	// The same annotations with another prefix are not ours: no split.
	e.service("other", nil, pods[0])
	e.ingress("not-ours", map[string]string{"haproxy.org/canary-service": "web-canary", "haproxy.org/canary-weight": "100"},
		rule{host: "other.example", path: "/", service: "other"})
	d := e.startDaemon()
	d.expect("canary.example", "/", 200, "canary-0")
	d.expect("direct.example", "/", 200, "canary-1")
	d.expect("other.example", "/", 200, "canary-0")
	if n, err := d.canaryShare("other.example", "canary-0", "canary-1", 50); err != nil || n != 0 {
		t.Fatalf("haproxy.org/canary-* must not split: %d of 50 reached the canary (%v)", n, err)
	}

	// 90/10 over 400 requests: 40 expected, sd 6.
	before := d.reloads()
	e.annotate("Ingress", "canary", map[string]string{canaryService: "web-canary", canaryWeight: "10"})
	hits := d.expectShare("canary.example", "canary-0", "canary-1", 1, 30, 400, 16, 68)
	t.Logf("weight 10: %d of 400 requests reached the canary", hits)

	e.annotate("Ingress", "canary", map[string]string{canaryWeight: "50"})
	hits = d.expectShare("canary.example", "canary-0", "canary-1", 30, 70, 400, 150, 250)
	t.Logf("weight 50: %d of 400 requests reached the canary", hits)

	e.annotate("Ingress", "canary", map[string]string{canaryWeight: "0"})
	d.expectShare("canary.example", "canary-0", "canary-1", 0, 0, 400, 0, 0)

	e.annotate("Ingress", "canary", map[string]string{canaryWeight: "100"})
	d.expectShare("canary.example", "canary-0", "canary-1", 100, 100, 100, 100, 100)
	if after := d.reloads(); after != before {
		t.Fatalf("weight changes reloaded HAProxy %d times", after-before)
	}

	// An invalid weight is reported and falls back to 0.
	e.annotate("Ingress", "canary", map[string]string{canaryWeight: "150"})
	e.event("Ingress", "canary", model.ReasonInvalidAnnotation)
	d.expectShare("canary.example", "canary-0", "canary-1", 0, 0, 100, 0, 0)
}
