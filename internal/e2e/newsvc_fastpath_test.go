package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

// addedBackendLine is the sync loop's line for a pass that added a backend
// to the previous result.
var addedBackendLine = regexp.MustCompile(`ingresses updated.*backends=1\b`)

// TestNewServiceWithoutBuild: at a size where the configuration has spare
// backends, a new Service, its EndpointSlice and an Ingress to it are
// served without a full build of the model and without a reload: the
// model adds the backend to its previous result, and the backend takes a
// spare at run time.
func TestNewServiceWithoutBuild(t *testing.T) {
	// Just above the size from which a configuration has spares.
	const n = 520
	e := newEnv(t)
	ctx := context.Background()
	startScalePods(t)
	if err := e.scaleObjects(ctx, 0, n, 1); err != nil {
		t.Fatal(err)
	}
	d := e.startDaemonWithin(2 * time.Minute)
	d.served("s0.test", time.Minute)
	d.served(fmt.Sprintf("s%d.test", n-1), time.Minute)
	// The status writer's first pass is over before the clock starts.
	d.statusPass(t, n, 2*time.Minute)

	built := func() int { return strings.Count(d.out.String(), "model built") }
	r0, b0, mark := d.reloads(), built(), len(d.out.String())
	if _, err := e.scaleService(ctx, n, 1); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	d.served(fmt.Sprintf("s%d.test", n), 30*time.Second)
	t.Logf("a new Service + Ingress served %v after the Ingress was written", time.Since(start).Round(time.Millisecond))
	if r := d.reloads(); r != r0 {
		t.Fatalf("HAProxy reloaded %d times for a new Service", r-r0)
	}
	if b := built(); b != b0 {
		t.Fatalf("the new Service went through %d full builds; daemon output:\n%s", b-b0, tail(d.out.String(), 40))
	}
	if !addedBackendLine.MatchString(d.out.String()[mark:]) {
		t.Fatalf("no pass added the backend to the previous result; daemon output:\n%s", tail(d.out.String(), 40))
	}
	// Older hosts are still served.
	d.served("s1.test", 10*time.Second)
}
