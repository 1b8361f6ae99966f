package e2e

import (
	"fmt"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

var applyFailedLine = regexp.MustCompile(`apply failed.*failures=(\d+) retry_in=(\S+)`)

// TestApplyFailureBackoff: another process holds the https port, so HAProxy
// refuses every full configuration for a reason no object explains. The
// daemon retries after 1 s, 2 s, 4 s..., stays not ready (nothing good was
// ever served), counts the failures on /metrics, its master CLI keeps
// answering, and once the port is free it recovers by itself.
func TestApplyFailureBackoff(t *testing.T) {
	e := newEnv(t)
	pods := e.pods("bo", 53, 1)
	e.service("web", nil, pods[0])
	e.ingress("web", nil, rule{host: "backoff.test", path: "/", service: "web"})
	port := testenv.FreePort(t)
	ln, err := net.Listen("tcp4", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	d := e.launchDaemon(fmt.Sprintf("--https-bind-port=%d", port))

	var waits []string
	testenv.Eventually(t, 90*time.Second, func() error {
		select {
		case <-d.done:
			t.Fatalf("daemon exited: %v\n%s", d.exitErr, tail(d.out.String(), 30))
		default:
		}
		waits = waits[:0]
		for _, m := range applyFailedLine.FindAllStringSubmatch(d.out.String(), -1) {
			waits = append(waits, m[2])
		}
		if len(waits) < 4 {
			return fmt.Errorf("%d failed applies logged, want 4", len(waits))
		}
		return nil
	})
	if want := []string{"1s", "2s", "4s", "8s"}; strings.Join(waits[:4], " ") != strings.Join(want, " ") {
		t.Errorf("retries after %v, want %v", waits[:4], want)
	}
	if err := d.ready(); err == nil {
		t.Error("ready although no full configuration was ever served")
	}
	if v := d.metric(t, "perimeter_apply_failures"); v < 4 {
		t.Errorf("perimeter_apply_failures %v, want >= 4", v)
	}
	d.reloads() // the master CLI answers after the failed reloads

	ln.Close()
	testenv.Eventually(t, 60*time.Second, d.ready)
	d.expect("backoff.test", "/", 200, "bo-0")
	if v := d.metric(t, "perimeter_apply_failures"); v != 0 {
		t.Errorf("perimeter_apply_failures %v after recovery, want 0", v)
	}
	if !strings.Contains(d.out.String(), "apply recovered") {
		t.Error("no log line about the recovery")
	}
}
