package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
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

// TestEndpointChangeSurvivesRestartAndReload: an endpoint change goes out
// through the Runtime API alone and haproxy.cfg is written later, off the
// hot path; the file still holds it in time for an HAProxy restarted at
// once, for a reload, and after a pause.
func TestEndpointChangeSurvivesRestartAndReload(t *testing.T) {
	e := newEnv(t)
	d := e.startDaemon()
	pods := e.pods("rt", 71, 3)
	app := e.service("rt", nil, pods[0])
	e.ingress("rt", nil, rule{host: "runtime.path", path: "/", service: "rt"})
	d.expect("runtime.path", "/", 200, "rt-0")
	serving := func(want string) {
		t.Helper()
		testenv.Eventually(t, 20*time.Second, func() error {
			if got := strings.Join(d.answering("runtime.path", "/", 8), ","); got != want {
				return fmt.Errorf("answering %s, want %s", got, want)
			}
			return nil
		})
	}

	// Killed right after a runtime change: the restarted HAProxy loads the
	// file, which must already hold the change.
	r0 := d.reloads()
	app.SetEndpoints(t, endpoints(pods[1:]...)...)
	serving("rt-1,rt-2")
	if r := d.reloads(); r != r0 {
		t.Fatalf("HAProxy reloaded %d times for an endpoint change", r-r0)
	}
	old := haproxyPIDs(d.runtimeDir)
	if len(old) == 0 {
		t.Fatal("no HAProxy process found")
	}
	for _, pid := range old {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	testenv.Eventually(t, 20*time.Second, func() error {
		if now := haproxyPIDs(d.runtimeDir); len(now) == 0 || now[0] == old[0] {
			return fmt.Errorf("HAProxy not restarted yet (pids %v)", now)
		}
		return nil
	})
	serving("rt-1,rt-2")

	// A reload right after a runtime change keeps it.
	r1 := d.reloads()
	app.SetEndpoints(t, endpoints(pods[0], pods[1])...)
	serving("rt-0,rt-1")
	other := e.pods("rt-other", 72, 1)
	e.service("rt-other", nil, other[0])
	e.ingress("rt-other", nil, rule{host: "other.runtime.path", path: "/", service: "rt-other"})
	d.expect("other.runtime.path", "/", 200, "rt-other-0")
	if r := d.reloads(); r <= r1 {
		t.Fatalf("a new Service did not reload HAProxy (reloads %d -> %d)", r1, r)
	}
	serving("rt-0,rt-1")

	// After a pause the file holds the runtime state by itself.
	app.SetEndpoints(t, endpoints(pods[2])...)
	serving("rt-2")
	cfgPath := filepath.Join(d.configDir, "haproxy.cfg")
	testenv.Eventually(t, 20*time.Second, func() error {
		b, err := os.ReadFile(cfgPath)
		if err != nil {
			return err
		}
		cfg := string(b)
		if !strings.Contains(cfg, pods[2].IP.String()+":") || strings.Contains(cfg, pods[0].IP.String()+":") || strings.Contains(cfg, pods[1].IP.String()+":") {
			return fmt.Errorf("haproxy.cfg does not hold only %s's address yet", pods[2].Name)
		}
		return nil
	})
}
