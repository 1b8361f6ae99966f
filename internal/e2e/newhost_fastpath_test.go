package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// TestNewHostSurvivesRestartAndReload: a new host on a Service other
// Ingresses already route to goes out through the Runtime API alone and its
// map files are written later, off the hot path; the files still hold it in
// time for an HAProxy restarted at once, for a reload, and after a pause.
func TestNewHostSurvivesRestartAndReload(t *testing.T) {
	e := newEnv(t)
	d := e.startDaemon()
	pods := e.pods("nh", 76, 1)
	e.service("nh", nil, pods[0])
	e.ingress("nh", nil, rule{host: "first.host", path: "/", service: "nh"})
	d.expect("first.host", "/", 200, "nh-0")

	// Killed right after a new host went live: the restarted HAProxy
	// loads the map files, which must already hold it.
	updated := func() int { return strings.Count(d.out.String(), "ingresses updated") }
	r0, u0 := d.reloads(), updated()
	e.ingress("nh-second", nil, rule{host: "second.host", path: "/", service: "nh"})
	d.expect("second.host", "/", 200, "nh-0")
	if r := d.reloads(); r != r0 {
		t.Fatalf("HAProxy reloaded %d times for a new host on an existing Service", r-r0)
	}
	if updated() <= u0 {
		t.Fatalf("the new host went through a full build; daemon output:\n%s", d.out.String())
	}
	d.killHAProxy()
	d.expect("second.host", "/", 200, "nh-0")

	// A reload right after a new host keeps it.
	r1 := d.reloads()
	e.ingress("nh-third", nil, rule{host: "third.host", path: "/", service: "nh"})
	d.expect("third.host", "/", 200, "nh-0")
	other := e.pods("nh-other", 77, 1)
	e.service("nh-other", nil, other[0])
	e.ingress("nh-other", nil, rule{host: "other.host", path: "/", service: "nh-other"})
	d.expect("other.host", "/", 200, "nh-other-0")
	if r := d.reloads(); r <= r1 {
		t.Fatalf("a new Service did not reload HAProxy (reloads %d -> %d)", r1, r)
	}
	d.expect("third.host", "/", 200, "nh-0")

	// After a pause the map file holds the new host by itself.
	e.ingress("nh-fourth", nil, rule{host: "fourth.host", path: "/", service: "nh"})
	d.expect("fourth.host", "/", 200, "nh-0")
	mapPath := filepath.Join(d.configDir, "maps", "path-prefix.map")
	testenv.Eventually(t, 20*time.Second, func() error {
		b, err := os.ReadFile(mapPath)
		if err != nil {
			return err
		}
		if !strings.Contains(string(b), "fourth.host/ ") {
			return fmt.Errorf("path-prefix.map does not hold fourth.host yet")
		}
		return nil
	})
}
