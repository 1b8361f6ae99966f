package haproxy

import (
	"context"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// TestIntegrationHandOverAdopt: a driver that hands over leaves HAProxy
// serving; the next driver on the same directories adopts that master,
// reloads it with its own state and, when stopped, stops it.
func TestIntegrationHandOverAdopt(t *testing.T) {
	log := testLogger(t)
	same := sameDirs(t)
	h1 := startHAProxy(t, log, same)
	a, b := upstream(t, "A"), upstream(t, "B")
	applyOK(t, h1.d, routes([]*model.Backend{backendOf("ns_a_80", 2, a)}, map[string]string{}, map[string]string{"a.test/": "ns_a_80"}))
	master := masterPID(t, h1.d)

	h1.d.HandOver()
	if err := h1.stop(); err != nil {
		t.Fatal(err)
	}
	if !alive(master) {
		t.Fatal("HAProxy stopped although the driver handed over")
	}
	t.Cleanup(func() { _ = syscall.Kill(master, syscall.SIGKILL) })
	if _, body, err := get(h1.http4, "a.test", "/"); err != nil || body != "A" {
		t.Fatalf("a.test with no driver running: %q %v", body, err)
	}

	h2 := startHAProxy(t, log, same)
	if got := masterPID(t, h2.d); got != master {
		t.Fatalf("master %d, want the adopted %d", got, master)
	}
	if h2.d.Serving() {
		t.Fatal("serving before the first Apply: the adopted HAProxy runs the previous driver's configuration")
	}
	r0 := reloads(t, h2.d)
	res := applyOK(t, h2.d, routes([]*model.Backend{backendOf("ns_b_80", 2, b)}, map[string]string{}, map[string]string{"b.test/": "ns_b_80"}))
	if !res.Reloaded || !h2.d.Serving() {
		t.Fatalf("first Apply after adoption: %+v, serving %v", res, h2.d.Serving())
	}
	if r := reloads(t, h2.d); r != r0+1 {
		t.Fatalf("reloads %d -> %d, want one", r0, r)
	}
	if _, body, err := get(h2.http4, "b.test", "/"); err != nil || body != "B" {
		t.Fatalf("b.test after adoption: %q %v", body, err)
	}
	// A plain stop takes the adopted HAProxy with it.
	if err := h2.stop(); err != nil {
		t.Fatal(err)
	}
	if alive(master) {
		t.Fatal("adopted master survived the stop")
	}
	if left := h2.d.ourProcesses(); len(left) > 0 {
		t.Fatalf("processes left: %v", left)
	}
}

// TestIntegrationUnhealthyMasterReplaced: a master left behind that does
// not answer is not adopted but stopped, and a new one started.
func TestIntegrationUnhealthyMasterReplaced(t *testing.T) {
	log := testLogger(t)
	same := sameDirs(t, func(o *Options) { o.StopTimeout = time.Second })
	h1 := startHAProxy(t, log, same)
	master := masterPID(t, h1.d)
	h1.d.HandOver()
	if err := h1.stop(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(master, syscall.SIGKILL) })
	// A hung master: it holds its socket but answers nothing.
	if err := syscall.Kill(master, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	h2 := startHAProxy(t, log, same)
	if got := masterPID(t, h2.d); got == master {
		t.Fatal("the hung master was adopted")
	}
	if alive(master) {
		t.Fatal("the hung master was not stopped")
	}
}

func masterPID(t testing.TB, d *Driver) int {
	t.Helper()
	var pid int
	eventually(t, 10*time.Second, func() error {
		pl, err := d.master.ShowProc(context.Background())
		pid = pl.MasterPID
		return err
	})
	return pid
}

// sameDirs returns an option setter that gives every driver of a test the
// same config and runtime directories and the same HTTP port, as a restarted
// daemon has; more setters may follow.
func sameDirs(t *testing.T, more ...func(*Options)) func(*Options) {
	dir := t.TempDir()
	var port int
	return func(o *Options) {
		o.ConfigDir, o.RuntimeDir = filepath.Join(dir, "etc"), filepath.Join(dir, "run")
		if port == 0 {
			port = o.HTTPBindPort
		}
		o.HTTPBindPort = port
		for _, f := range more {
			f(o)
		}
	}
}
