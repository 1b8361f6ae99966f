package haproxy

import (
	"context"
	"fmt"
	"maps"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

func eps(addrs ...string) []model.Endpoint {
	var out []model.Endpoint
	for _, a := range addrs {
		out = append(out, model.Endpoint{Address: a, Port: 8080})
	}
	return out
}

func slotAddrs(s []slot) []string {
	var out []string
	for _, x := range s {
		out = append(out, x.Addr)
	}
	return out
}

func TestAssignSlots(t *testing.T) {
	s := assignSlots(nil, eps("198.18.0.1", "198.18.0.2"), 4)
	if got, want := slotAddrs(s), []string{"198.18.0.1", "198.18.0.2", "", ""}; !reflect.DeepEqual(got, want) {
		t.Fatalf("initial: %v, want %v", got, want)
	}
	// .1 leaves, .3 and .4 arrive: .2 keeps slot 2, .3 takes the freed slot 1.
	s = assignSlots(s, eps("198.18.0.2", "198.18.0.3", "198.18.0.4"), 4)
	if got, want := slotAddrs(s), []string{"198.18.0.3", "198.18.0.2", "198.18.0.4", ""}; !reflect.DeepEqual(got, want) {
		t.Fatalf("churn: %v, want %v", got, want)
	}
	// More endpoints than slots: the extra ones wait for a reload.
	s = assignSlots(s, eps("198.18.0.2", "198.18.0.3", "198.18.0.4", "198.18.0.5", "198.18.0.6"), 4)
	if got, want := slotAddrs(s), []string{"198.18.0.3", "198.18.0.2", "198.18.0.4", "198.18.0.5"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("overflow: %v, want %v", got, want)
	}
	// Growing keeps everything in place.
	s = assignSlots(s, eps("198.18.0.2", "198.18.0.3", "198.18.0.4", "198.18.0.5", "198.18.0.6"), 6)
	if got, want := slotAddrs(s), []string{"198.18.0.3", "198.18.0.2", "198.18.0.4", "198.18.0.5", "198.18.0.6", ""}; !reflect.DeepEqual(got, want) {
		t.Fatalf("grow: %v, want %v", got, want)
	}
	// Shrinking moves endpoints beyond the new size down.
	s = assignSlots(s, eps("198.18.0.6"), 2)
	if got, want := slotAddrs(s), []string{"198.18.0.6", ""}; !reflect.DeepEqual(got, want) {
		t.Fatalf("shrink: %v, want %v", got, want)
	}
}

func oneBackend(name string, slots int, e []model.Endpoint) *model.Backend {
	return &model.Backend{Name: name, Namespace: "ns", Service: strings.Split(name, "_")[1], Port: "80", Slots: slots, Endpoints: e}
}

func desired(backends ...*model.Backend) *model.Desired {
	d := &model.Desired{Maps: map[string]map[string]string{model.MapExact: {}, model.MapPrefix: {}}}
	for _, b := range backends {
		d.Backends = append(d.Backends, b)
		host := strings.Split(b.Name, "_")[1] + ".test"
		d.Maps[model.MapExact][host+"/"] = b.Name
		d.Maps[model.MapPrefix][host+"/"] = b.Name
	}
	return d
}

func mustApply(t *testing.T, d *Driver, want *model.Desired) Result {
	t.Helper()
	res, err := d.Apply(context.Background(), want)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	return res
}

// readConfig reads haproxy.cfg as HAProxy would load it: with what a
// runtime change left for later written.
func readConfig(t *testing.T, d *Driver) string {
	t.Helper()
	d.flushLocked()
	return readConfigFile(t, d)
}

// readMapFile reads a map file as HAProxy would load it: with what a
// runtime change left for later written.
func readMapFile(t *testing.T, d *Driver, path string) string {
	t.Helper()
	d.flushLocked()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// readConfigFile reads haproxy.cfg as it is on disk now.
func readConfigFile(t *testing.T, d *Driver) string {
	t.Helper()
	b, err := os.ReadFile(d.paths.config)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestApplyEndpointsAtRuntime(t *testing.T) {
	u := newUnitDriver(t, Options{})
	res := mustApply(t, u.Driver, desired(oneBackend("ns_a_80", 4, eps("198.18.0.1", "198.18.0.2"))))
	if !res.Reloaded || u.master.count() != 1 || !u.Serving() {
		t.Fatalf("first apply: %+v, reloads %d, serving %v", res, u.master.count(), u.Serving())
	}
	u.rt.take()

	res = mustApply(t, u.Driver, desired(oneBackend("ns_a_80", 4, []model.Endpoint{
		{Address: "198.18.0.2", Port: 8080, Draining: true}, {Address: "198.18.0.3", Port: 8080}, {Address: "198.18.0.4", Port: 9090},
	})))
	if res.Reloaded || u.master.count() != 1 {
		t.Fatalf("endpoint change reloaded: %+v", res)
	}
	want := []string{
		"set server ns_a_80/SRV_1 addr 198.18.0.3 port 8080",
		"set server ns_a_80/SRV_1 state ready",
		"set server ns_a_80/SRV_2 state drain",
		"set server ns_a_80/SRV_3 addr 198.18.0.4 port 9090",
		"set server ns_a_80/SRV_3 state ready",
	}
	if got := u.rt.take(); !reflect.DeepEqual(got, want) {
		t.Fatalf("commands:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if res.RuntimeOps != len(want) {
		t.Errorf("RuntimeOps = %d, want %d", res.RuntimeOps, len(want))
	}
	// haproxy.cfg is not rewritten on the hot path; it is written before
	// the next reload (or start, or after a pause).
	if cfg := readConfigFile(t, u.Driver); !strings.Contains(cfg, "server SRV_1 198.18.0.1:8080\n") || !u.cfgStale {
		t.Errorf("config on disk rewritten by a runtime change (stale %v):\n%s", u.cfgStale, cfg)
	}
	if err := u.reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	cfg := readConfig(t, u.Driver)
	for _, line := range []string{"server SRV_1 198.18.0.3:8080\n", "server SRV_2 198.18.0.2:8080 disabled\n", "server SRV_3 198.18.0.4:9090\n", "server SRV_4 127.0.0.1:1 disabled\n"} {
		if !strings.Contains(cfg, line) {
			t.Errorf("config on disk before the reload lacks %q:\n%s", line, cfg)
		}
	}

	// Same again: nothing to do.
	res = mustApply(t, u.Driver, desired(oneBackend("ns_a_80", 4, []model.Endpoint{
		{Address: "198.18.0.2", Port: 8080, Draining: true}, {Address: "198.18.0.3", Port: 8080}, {Address: "198.18.0.4", Port: 9090},
	})))
	if res.RuntimeOps != 0 || res.Reloaded || len(u.rt.take()) != 0 {
		t.Fatalf("unchanged apply did something: %+v", res)
	}

	// Scale to zero: slots go to maintenance.
	mustApply(t, u.Driver, desired(oneBackend("ns_a_80", 4, nil)))
	want = []string{"set server ns_a_80/SRV_1 state maint", "set server ns_a_80/SRV_2 state maint", "set server ns_a_80/SRV_3 state maint"}
	if got := u.rt.take(); !reflect.DeepEqual(got, want) {
		t.Fatalf("scale to zero: %v", got)
	}
}

func TestApplyMapsAtRuntime(t *testing.T) {
	u := newUnitDriver(t, Options{})
	a, b := oneBackend("ns_a_80", 2, nil), oneBackend("ns_b_80", 2, nil)
	mustApply(t, u.Driver, desired(a, b))
	u.rt.take()

	want := desired(a, b)
	want.Maps[model.MapExact]["x.test/new"] = "ns_a_80"
	want.Maps[model.MapExact]["a.test/"] = "ns_b_80"
	delete(want.Maps[model.MapPrefix], "b.test/")
	res := mustApply(t, u.Driver, want)
	exact, prefix := u.rend.mapPath(model.MapExact), u.rend.mapPath(model.MapPrefix)
	wantCmds := []string{
		"set map " + exact + " a.test/ ns_b_80",
		"add map " + exact + " x.test/new ns_a_80",
		"del map " + prefix + " b.test/",
	}
	if got := u.rt.take(); !reflect.DeepEqual(got, wantCmds) || res.Reloaded {
		t.Fatalf("commands %v (reloaded %v), want %v", got, res.Reloaded, wantCmds)
	}
	// Like haproxy.cfg, the map files are written off the hot path, and
	// before the next reload or start.
	if b2, _ := os.ReadFile(exact); strings.Contains(string(b2), "x.test/new") || !u.mapsStale {
		t.Errorf("map file rewritten by a runtime change (stale %v):\n%s", u.mapsStale, b2)
	}
	if b2 := readMapFile(t, u.Driver, exact); !strings.Contains(b2, "x.test/new ns_a_80\n") || !strings.Contains(b2, "a.test/ ns_b_80\n") {
		t.Fatalf("map file not updated:\n%s", b2)
	}

	// A large change goes out as one atomic replacement. A Desired is
	// read-only once applied: the change comes in a new map.
	want.Maps[model.MapExact] = maps.Clone(want.Maps[model.MapExact])
	for i := range bulkMapOps + 1 {
		want.Maps[model.MapExact][fmt.Sprintf("h%d.test/", i)] = "ns_a_80"
	}
	mustApply(t, u.Driver, want)
	got := u.rt.take()
	if got[0] != "prepare map "+exact || got[len(got)-1] != "commit map @7 "+exact || len(got) != len(want.Maps[model.MapExact])+2 {
		t.Fatalf("bulk replacement: %d commands, first %q, last %q", len(got), got[0], got[len(got)-1])
	}
	if !slices.Contains(got, "add map @7 "+exact+" h5.test/ ns_a_80") {
		t.Fatalf("bulk replacement lacks an entry: %v", got[:5])
	}
}

func TestApplyStructuralChangeReloadsOnce(t *testing.T) {
	u := newUnitDriver(t, Options{})
	a := oneBackend("ns_a_80", 2, eps("198.18.0.1"))
	mustApply(t, u.Driver, desired(a))
	r0 := u.master.count()
	res := mustApply(t, u.Driver, desired(a, oneBackend("ns_b_80", 2, eps("198.18.0.2"))))
	if !res.Reloaded || u.master.count() != r0+1 {
		t.Fatalf("new backend: %+v, reloads %d -> %d", res, r0, u.master.count())
	}
	if !strings.Contains(res.Reason, "backend added: ns_b_80") {
		t.Errorf("reason %q", res.Reason)
	}
	// Growing the slots is structural too, and keeps the slot order.
	a2 := oneBackend("ns_a_80", 4, eps("198.18.0.1", "198.18.0.5", "198.18.0.6"))
	res = mustApply(t, u.Driver, desired(a2, oneBackend("ns_b_80", 2, eps("198.18.0.2"))))
	if !res.Reloaded || !strings.Contains(res.Reason, "slots 2->4") {
		t.Fatalf("slot growth: %+v", res)
	}
	if cfg := readConfig(t, u.Driver); !strings.Contains(cfg, "server SRV_1 198.18.0.1:8080\n  server SRV_2 198.18.0.5:8080\n  server SRV_3 198.18.0.6:8080\n") {
		t.Fatalf("config after growth:\n%s", cfg)
	}
}

func TestApplyCoalescesReloads(t *testing.T) {
	u := newUnitDriver(t, Options{MinReloadInterval: time.Minute})
	a := oneBackend("ns_a_80", 2, eps("198.18.0.1"))
	mustApply(t, u.Driver, desired(a))
	u.rt.take()
	r0 := u.master.count()

	u.clock.t = u.clock.t.Add(10 * time.Second)
	a2 := oneBackend("ns_a_80", 2, eps("198.18.0.1", "198.18.0.9"))
	want := desired(a2, oneBackend("ns_b_80", 2, eps("198.18.0.2")))
	want.Maps[model.MapExact]["shared.test/"] = "ns_a_80"
	res := mustApply(t, u.Driver, want)
	if res.Reloaded || u.master.count() != r0 {
		t.Fatalf("reload not deferred: %+v", res)
	}
	if res.RetryAfter != 50*time.Second {
		t.Errorf("RetryAfter = %s, want 50s", res.RetryAfter)
	}
	got := u.rt.take()
	exact := u.rend.mapPath(model.MapExact)
	wantCmds := []string{
		"set server ns_a_80/SRV_2 addr 198.18.0.9 port 8080",
		"set server ns_a_80/SRV_2 state ready",
		"add map " + exact + " shared.test/ ns_a_80",
	}
	if !reflect.DeepEqual(got, wantCmds) {
		t.Fatalf("runtime subset:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantCmds, "\n"))
	}
	// The files hold what runs: no map entry for the backend that is not there yet.
	if b, _ := os.ReadFile(exact); strings.Contains(string(b), "ns_b_80") {
		t.Fatalf("map file names a backend haproxy does not have:\n%s", b)
	}

	u.clock.t = u.clock.t.Add(50 * time.Second)
	res = mustApply(t, u.Driver, want)
	if !res.Reloaded || u.master.count() != r0+1 || res.RetryAfter != 0 {
		t.Fatalf("deferred reload: %+v", res)
	}
	if b, _ := os.ReadFile(exact); !strings.Contains(string(b), "b.test/ ns_b_80") {
		t.Fatalf("map file after reload:\n%s", b)
	}
}

func TestApplyRuntimeFailureReloads(t *testing.T) {
	u := newUnitDriver(t, Options{})
	mustApply(t, u.Driver, desired(oneBackend("ns_a_80", 2, eps("198.18.0.1"))))
	r0 := u.master.count()
	u.rt.failOn = "SRV_2"
	res := mustApply(t, u.Driver, desired(oneBackend("ns_a_80", 2, eps("198.18.0.1", "198.18.0.2"))))
	if !res.Reloaded || u.master.count() != r0+1 || !strings.Contains(res.Reason, "No such server") {
		t.Fatalf("fallback: %+v", res)
	}
	if cfg := readConfig(t, u.Driver); !strings.Contains(cfg, "server SRV_2 198.18.0.2:8080\n") {
		t.Fatalf("the reload must load the new slots:\n%s", cfg)
	}
}

func TestApplyFailedReloadIsReported(t *testing.T) {
	u := newUnitDriver(t, Options{})
	mustApply(t, u.Driver, desired(oneBackend("ns_a_80", 2, nil)))
	u.master.failNext = true
	if _, err := u.Apply(context.Background(), desired(oneBackend("ns_a_80", 2, nil), oneBackend("ns_b_80", 2, nil))); err == nil {
		t.Fatal("a failed reload must be an error")
	}
	// The next Apply retries the reload even though the files are current.
	res := mustApply(t, u.Driver, desired(oneBackend("ns_a_80", 2, nil), oneBackend("ns_b_80", 2, nil)))
	if !res.Reloaded {
		t.Fatalf("retry: %+v", res)
	}
}

func TestApplyQuarantine(t *testing.T) {
	u := newUnitDriver(t, Options{})
	a := oneBackend("ns_a_80", 2, eps("198.18.0.1"))
	a.Balance = "roundrobin"
	mustApply(t, u.Driver, desired(a))

	bad := oneBackend("ns_bad_80", 2, eps("198.18.0.7"))
	bad.Balance = "bogus"
	good := oneBackend("ns_good_80", 2, eps("198.18.0.8"))
	res := mustApply(t, u.Driver, desired(a, bad, good))
	if !res.Reloaded || len(res.Quarantined) != 1 {
		t.Fatalf("quarantine: %+v", res)
	}
	p := res.Quarantined[0]
	if p.Reason != "ConfigRejected" || p.Object != (model.ObjectRef{Kind: "Service", Namespace: "ns", Name: "bad"}) || !strings.Contains(p.Message, "balance only supports") {
		t.Fatalf("problem: %+v", p)
	}
	cfg := readConfig(t, u.Driver)
	if strings.Contains(cfg, "bogus") || !strings.Contains(cfg, "backend ns_good_80") || !strings.Contains(cfg, "backend ns_bad_80 from perimeter\n\n") {
		t.Fatalf("config after quarantine:\n%s", cfg)
	}

	// The same version again: quarantined without another check or reload.
	calls, reloads := u.checker.count(), u.master.count()
	res = mustApply(t, u.Driver, desired(a, bad, good))
	if res.Reloaded || u.checker.count() != calls || u.master.count() != reloads || len(res.Quarantined) != 1 {
		t.Fatalf("known rejection: %+v (checks %d->%d)", res, calls, u.checker.count())
	}

	// An existing backend turning bad keeps its last good version, and
	// still gets its endpoint changes at runtime.
	u.rt.take()
	a2 := oneBackend("ns_a_80", 2, eps("198.18.0.1", "198.18.0.3"))
	a2.Balance = "bogus"
	res = mustApply(t, u.Driver, desired(a2, bad, good))
	if res.Reloaded || len(res.Quarantined) != 2 {
		t.Fatalf("existing backend: %+v", res)
	}
	cfg = readConfig(t, u.Driver)
	if !strings.Contains(cfg, "backend ns_a_80 from perimeter\n  balance roundrobin\n  server SRV_1 198.18.0.1:8080\n  server SRV_2 198.18.0.3:8080\n") {
		t.Fatalf("last good version not kept:\n%s", cfg)
	}
	if got := u.rt.take(); !slices.Contains(got, "set server ns_a_80/SRV_2 addr 198.18.0.3 port 8080") {
		t.Fatalf("endpoint change of a quarantined backend: %v", got)
	}

	// Fixed: the backend loads.
	bad.Balance = "leastconn"
	res = mustApply(t, u.Driver, desired(a, bad, good))
	if !res.Reloaded || len(res.Quarantined) != 0 || !strings.Contains(readConfig(t, u.Driver), "balance leastconn") {
		t.Fatalf("fixed backend: %+v", res)
	}
}

func TestApplyBeforeRun(t *testing.T) {
	u := newUnitDriver(t, Options{})
	u.running.Store(false)
	res := mustApply(t, u.Driver, desired(oneBackend("ns_a_80", 2, eps("198.18.0.1"))))
	if res.Reloaded || u.master.count() != 0 || !strings.Contains(res.Reason, "not running") {
		t.Fatalf("apply before run: %+v", res)
	}
	if !strings.Contains(readConfig(t, u.Driver), "server SRV_1 198.18.0.1:8080") {
		t.Fatal("files not written")
	}
}

func TestDesiredStateRejects(t *testing.T) {
	want := &model.Desired{
		Backends: []*model.Backend{
			{Name: "ns_ok_80", Namespace: "ns", Service: "ok", Slots: 1, Endpoints: []model.Endpoint{{Address: "198.18.0.1", Port: 80}, {Address: "not-an-ip", Port: 80}}},
			{Name: "Bad Name", Namespace: "ns", Service: "bad"},
			{Name: "ns_bal_80", Namespace: "ns", Service: "bal", Balance: "roundrobin\n  server evil 1.2.3.4:80"},
		},
		Maps: map[string]map[string]string{
			model.MapExact: {"ok.test/": "ns_ok_80", "evil.test/a b": "ns_ok_80", "x.test/;del": "ns_ok_80", "y.test/": "ns_missing_80"},
		},
		Routes:         model.NewRouteList([]model.Route{{Ingress: model.ObjectRef{Kind: "Ingress", Namespace: "ns", Name: "ing"}, Host: "evil.test", Path: "/a b"}}),
		DefaultBackend: "ns_missing_80",
	}
	st, problems := desiredState(want)
	if len(st.backends) != 2 || st.backends["ns_bal_80"].spec.Balance != "" || len(st.backends["ns_ok_80"].endpoints) != 1 {
		t.Fatalf("backends: %+v", st.backends)
	}
	if !reflect.DeepEqual(st.maps[model.MapExact], map[string]string{"ok.test/": "ns_ok_80"}) || st.defaultBackend != "" {
		t.Fatalf("maps %v default %q", st.maps, st.defaultBackend)
	}
	if len(problems) != 7 {
		t.Fatalf("%d problems: %+v", len(problems), problems)
	}
	found := false
	for _, p := range problems {
		if p.Object.Kind == "Ingress" && p.Object.Name == "ing" {
			found = true
		}
	}
	if !found {
		t.Errorf("the bad key is not blamed on its Ingress: %+v", problems)
	}
}

// TestApplySlotsShrinkWithoutReload: a backend whose endpoints shrink so
// that the model sizes it fewer slots keeps the slots it has, at run time;
// growing past them reloads.
func TestApplySlotsShrinkWithoutReload(t *testing.T) {
	u := newUnitDriver(t, Options{})
	mustApply(t, u.Driver, desired(oneBackend("ns_a_80", 8, eps("198.18.0.1", "198.18.0.2", "198.18.0.3", "198.18.0.4", "198.18.0.5"))))
	u.rt.take()
	res := mustApply(t, u.Driver, desired(oneBackend("ns_a_80", 4, eps("198.18.0.1"))))
	if res.Reloaded || u.master.count() != 1 {
		t.Fatalf("shrink to fewer slots reloaded: %+v", res)
	}
	if n := strings.Count(readConfig(t, u.Driver), "server SRV_"); n != 8 {
		t.Errorf("config has %d server slots after the shrink, want the 8 it had", n)
	}
	res = mustApply(t, u.Driver, desired(oneBackend("ns_a_80", 12, eps("198.18.0.1", "198.18.0.2", "198.18.0.3", "198.18.0.4", "198.18.0.5", "198.18.0.6", "198.18.0.7", "198.18.0.8", "198.18.0.9"))))
	if !res.Reloaded || res.ReloadReason != ReloadSlots {
		t.Fatalf("growth past the slots: %+v, want a %s reload", res, ReloadSlots)
	}
}

// TestDesiredStateMemo: reusing the checked endpoint lists gives what a
// fresh desiredState gives, problems included; a changed list is checked
// again, even when it is changed in place.
func TestDesiredStateMemo(t *testing.T) {
	a := oneBackend("ns_a_80", 4, eps("198.18.0.1", "198.18.0.2"))
	bad := oneBackend("ns_b_80", 4, []model.Endpoint{{Address: "198.18.0.3", Port: 8080}, {Address: "not-an-ip", Port: 8080}})
	want := desired(a, bad)
	var memo checkMemo
	for i := range 2 {
		got, gotProblems := desiredStateMemo(want, &memo, nil, nil)
		fresh, freshProblems := desiredState(want)
		if !reflect.DeepEqual(got.backends, fresh.backends) || !reflect.DeepEqual(gotProblems, freshProblems) {
			t.Fatalf("pass %d: memoized state %v / %v, fresh %v / %v", i, got.backends, gotProblems, fresh.backends, freshProblems)
		}
		if len(gotProblems) != 1 {
			t.Fatalf("pass %d: problems %v, want the bad endpoint's", i, gotProblems)
		}
	}
	a.Endpoints[0] = model.Endpoint{Address: "198.18.0.9", Port: 8080}
	a.Endpoints = a.Endpoints[:1]
	got, _ := desiredStateMemo(want, &memo, nil, nil)
	if eps := got.backends["ns_a_80"].endpoints; len(eps) != 1 || eps[0].Address != "198.18.0.9" {
		t.Fatalf("replaced endpoints: %v", eps)
	}
	if len(memo.backends) != 2 {
		t.Errorf("memo holds %d backends, want the 2 of the last call", len(memo.backends))
	}
}

// TestUnchangedBackendReused: a backend the model hands over as the same
// pointer keeps its entry (no check, no slot assignment, no commands), the
// maps handed over unchanged are not checked again, and the result is what
// a driver that never saw the earlier Desired writes.
func TestUnchangedBackendReused(t *testing.T) {
	u := newUnitDriver(t, Options{})
	a, b := oneBackend("ns_a_80", 2, eps("198.18.0.1")), oneBackend("ns_b_80", 2, eps("198.18.0.2"))
	first := desired(a, b)
	mustApply(t, u.Driver, first)
	entryA, exact := u.cur.backends["ns_a_80"], u.cur.maps[model.MapExact]
	u.rt.take()

	b2 := oneBackend("ns_b_80", 2, eps("198.18.0.3"))
	next := &model.Desired{Backends: []*model.Backend{a, b2}, Maps: first.Maps}
	res := mustApply(t, u.Driver, next)
	if res.Reloaded {
		t.Fatalf("endpoint change reloaded: %+v", res)
	}
	want := []string{"set server ns_b_80/SRV_1 addr 198.18.0.3 port 8080", "set server ns_b_80/SRV_1 state ready"}
	if got := u.rt.take(); !reflect.DeepEqual(got, want) {
		t.Fatalf("commands %v, want %v", got, want)
	}
	if u.cur.backends["ns_a_80"] != entryA {
		t.Error("the unchanged backend got a new entry")
	}
	if !sameMap(u.cur.maps[model.MapExact], exact) {
		t.Error("the unchanged map was checked and copied again")
	}

	fresh := newUnitDriver(t, Options{})
	mustApply(t, fresh.Driver, next)
	norm := func(d *unitDriver) string {
		return strings.NewReplacer(d.opts.ConfigDir, "CONFIG", d.opts.RuntimeDir, "RUN").Replace(readConfig(t, d.Driver))
	}
	if got, want := norm(u), norm(fresh); got != want {
		t.Fatalf("config after reuse:\n%s\nwant:\n%s", got, want)
	}
	// A new Backend for the same name is checked again.
	a2 := *a
	a2.Endpoints = eps("198.18.0.4")
	mustApply(t, u.Driver, &model.Desired{Backends: []*model.Backend{&a2, b2}, Maps: first.Maps})
	if u.cur.backends["ns_a_80"] == entryA || !slices.Contains(u.rt.take(), "set server ns_a_80/SRV_1 addr 198.18.0.4 port 8080") {
		t.Error("a changed backend was taken for unchanged")
	}
}

// TestDesiredStateQuickPath: with the same backends in the same order and
// one changed, desiredStateMemo looks at the changed one only, and gives
// what a fresh desiredState gives, problems included and in order.
func TestDesiredStateQuickPath(t *testing.T) {
	a := oneBackend("ns_a_80", 4, eps("198.18.0.1"))
	bad := oneBackend("ns_b_80", 4, []model.Endpoint{{Address: "198.18.0.3", Port: 8080}, {Address: "not-an-ip", Port: 8080}})
	c := oneBackend("ns_c_80", 4, eps("198.18.0.4"))
	c2 := oneBackend("ns_c_80", 4, eps("198.18.0.5"))
	badC := oneBackend("ns_c_80", 4, []model.Endpoint{{Address: "198.18.0.5", Port: 8080}, {Address: "not-an-ip", Port: 8080}})
	goodB := oneBackend("ns_b_80", 4, eps("198.18.0.3"))
	for _, tc := range []struct {
		name  string
		extra *model.Backend
		// at is the index changed, to
		at    int
		to    *model.Backend
		quick bool
	}{
		{"same backends", nil, 2, c2, true},
		{"a changed backend gets a problem", nil, 2, badC, true},
		{"a changed backend loses its problem", nil, 1, goodB, true},
		{"one left out", &model.Backend{Name: "Not Valid", Namespace: "ns", Service: "x"}, 2, c2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first := desired(a, bad, c)
			if tc.extra != nil {
				first.Backends = append(first.Backends, tc.extra)
			}
			var memo checkMemo
			st, _ := desiredStateMemo(first, &memo, nil, nil)
			index := reflect.ValueOf(memo.backends).UnsafePointer()

			next := &model.Desired{Backends: slices.Clone(first.Backends), Maps: first.Maps}
			next.Backends[tc.at] = tc.to
			got, gotProblems := desiredStateMemo(next, &memo, st, nil)
			fresh, freshProblems := desiredState(next)
			if !reflect.DeepEqual(got.backends, fresh.backends) || !reflect.DeepEqual(got.maps, fresh.maps) || !reflect.DeepEqual(gotProblems, freshProblems) {
				t.Fatalf("memoized %v / %v, fresh %v / %v", got.backends, gotProblems, fresh.backends, freshProblems)
			}
			if got.backends["ns_a_80"] != st.backends["ns_a_80"] || got.backends[tc.to.Name].endpoints[0].Address != tc.to.Endpoints[0].Address {
				t.Fatal("unchanged entry not reused, or changed one not made afresh")
			}
			// And once more from there: what the quick path left in the
			// memo serves the next change as well.
			again := &model.Desired{Backends: slices.Clone(next.Backends), Maps: next.Maps}
			again.Backends[0] = oneBackend("ns_a_80", 4, eps("198.18.0.9"))
			got2, gotProblems2 := desiredStateMemo(again, &memo, got, nil)
			fresh2, freshProblems2 := desiredState(again)
			if !reflect.DeepEqual(got2.backends, fresh2.backends) || !reflect.DeepEqual(gotProblems2, freshProblems2) {
				t.Fatalf("second change: memoized %v / %v, fresh %v / %v", got2.backends, gotProblems2, fresh2.backends, freshProblems2)
			}
			if quick := reflect.ValueOf(memo.backends).UnsafePointer() == index; quick != tc.quick {
				t.Errorf("quick path taken: %v, want %v", quick, tc.quick)
			}
		})
	}
}

// TestApplyQuickMatchesFull: a random run of endpoint, slot, check,
// capture and balance changes (some refused by haproxy -c) gives, Apply by Apply, the same commands, reloads and state as a
// driver that always takes the long way (its memo no longer names the
// state it made); the quick way reuses indexes rather than copying them, and
// keeps the descriptor budget's count right, across the limit and back.
func TestApplyQuickMatchesFull(t *testing.T) {
	const runs, steps = 4, 120
	reused, checksOff, quarantined := 0, 0, 0
	for seed := range int64(runs) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			rnd := rand.New(rand.NewSource(seed))
			// 16 checked slots fit next to minMaxconn connections.
			o := Options{FDLimit: fdReserve + 2*minMaxconn + 16}
			quick, full := newUnitDriver(t, o), newUnitDriver(t, o)
			const n = 12
			backends := make([]*model.Backend, n)
			for i := range backends {
				backends[i] = oneBackend(fmt.Sprintf("ns_b%d_80", i), 2, eps(fmt.Sprintf("198.18.%d.1", i)))
			}
			want := desired(backends...)
			seen := map[unsafe.Pointer]bool{}
			for step := range steps {
				next := *want
				next.Backends = slices.Clone(want.Backends)
				// Now and then the very same Desired again, as the loop's
				// pass after a start hands over: the quick path must go on
				// from what that Apply leaves.
				same := step > 0 && rnd.Intn(5) == 0
				changes := 1 + rnd.Intn(2)
				if same {
					changes = 0
				}
				for range changes {
					i := rnd.Intn(n)
					b := *next.Backends[i]
					switch r := rnd.Intn(10); {
					case r < 5: // endpoints come and go, some draining
						b.Endpoints = nil
						for k := range rnd.Intn(5) {
							b.Endpoints = append(b.Endpoints, model.Endpoint{Address: fmt.Sprintf("198.18.%d.%d", i, 1+rnd.Intn(6)), Port: 8080, Draining: k == 0 && rnd.Intn(3) == 0})
						}
					case r < 7:
						b.Check = !b.Check
					case r < 8 && rnd.Intn(2) == 0:
						b.Slots = 1 + rnd.Intn(4)
					case r < 8: // the frontend's capture slots follow
						b.HTTP.Captures = []string{"req.hdr(host)", "req.hdr(x-id)"}[:rnd.Intn(3)]
						b.HTTP.CaptureLen = 16 * rnd.Intn(3)
					case b.Balance == "":
						b.Balance = "bogus" // refused by haproxy -c: quarantined
					default:
						b.Balance = ""
					}
					next.Backends[i] = &b
				}
				if !same {
					want = &next
				}
				full.memo.target = nil
				rq, rf := mustApply(t, quick.Driver, want), mustApply(t, full.Driver, want)
				if rq.Reloaded != rf.Reloaded || rq.RuntimeOps != rf.RuntimeOps || !reflect.DeepEqual(rq.Dropped, rf.Dropped) {
					t.Fatalf("step %d: quick %+v, full %+v", step, rq, rf)
				}
				if cq, cf := quick.rt.take(), full.rt.take(); !reflect.DeepEqual(cq, cf) {
					t.Fatalf("step %d: commands quick %v, full %v", step, cq, cf)
				}
				qs, fs := quick.cur, full.cur
				if qs.base != nil {
					t.Fatalf("step %d: the applied state keeps its predecessor alive", step)
				}
				if !reflect.DeepEqual(qs.backends, fs.backends) || !reflect.DeepEqual(qs.maps, fs.maps) || qs.global != fs.global || !reflect.DeepEqual(qs.extras, fs.extras) {
					for name, b := range fs.backends {
						if !reflect.DeepEqual(qs.backends[name], b) {
							t.Errorf("step %d: backend %s quick %+v, full %+v", step, name, qs.backends[name], b)
						}
					}
					t.Fatalf("step %d: states differ: global quick %+v, full %+v; extras quick %+v, full %+v", step, qs.global, fs.global, qs.extras, fs.extras)
				}
				if qs.checkedOK && !qs.rewritten { // a new quarantine changes entries after the count
					sum := 0
					for _, b := range qs.backends {
						sum += checkedOf(b)
					}
					if qs.checked != sum {
						t.Fatalf("step %d: checked slots kept as %d, counted %d", step, qs.checked, sum)
					}
				}
				if quick.fdNote != "" {
					checksOff++
				}
				if p := reflect.ValueOf(qs.backends).UnsafePointer(); seen[p] {
					reused++
					if len(quick.rejected) > 0 {
						quarantined++
					}
				} else {
					seen[p] = true
				}
			}
			// The drivers differ in their directories alone.
			cq := strings.ReplaceAll(readConfig(t, quick.Driver), filepath.Dir(quick.opts.ConfigDir), "DIR")
			cf := strings.ReplaceAll(readConfig(t, full.Driver), filepath.Dir(full.opts.ConfigDir), "DIR")
			if cq != cf {
				t.Errorf("haproxy.cfg differs:\nquick:\n%s\nfull:\n%s", cq, cf)
			}
		})
	}
	t.Logf("of %d applies, %d reused an index (%d with a backend quarantined), %d had the checks off", runs*steps, reused, quarantined, checksOff)
	if reused == 0 || quarantined == 0 || checksOff == 0 || checksOff == runs*steps {
		t.Error("the runs missed a case")
	}
}

// TestApplyNoChangeKeepsQuickPath: an Apply that changes nothing (the
// loop's pass right after a start does that) leaves the driver where the
// next endpoint change checks the one backend it changes, not all of them.
func TestApplyNoChangeKeepsQuickPath(t *testing.T) {
	u := newUnitDriver(t, Options{})
	var backends []*model.Backend
	for i := range 4 {
		backends = append(backends, oneBackend(fmt.Sprintf("ns_b%d_80", i), 2, eps(fmt.Sprintf("198.18.%d.1", i))))
	}
	want := desired(backends...)
	mustApply(t, u.Driver, want)
	if res := mustApply(t, u.Driver, want); res.RuntimeOps > 0 || res.Reloaded {
		t.Fatalf("the same Desired again: %+v", res)
	}
	if u.memo.target != u.cur {
		t.Fatal("after an Apply without change the memo does not start from the applied state")
	}
	next := *want
	next.Backends = slices.Clone(want.Backends)
	b := *next.Backends[2]
	b.Endpoints = eps("198.18.2.2")
	next.Backends[2] = &b
	if res := mustApply(t, u.Driver, &next); res.Reloaded || res.RuntimeOps == 0 {
		t.Fatalf("endpoint change: %+v", res)
	}
	// Made from its predecessor by changing one backend (reuseBackends),
	// the applied state took over the predecessor's index.
	if u.cur.oldIndex == nil || !slices.Equal(u.cur.oldStale, []string{b.Name}) {
		t.Fatalf("the endpoint change did not take the quick path: changed %v", u.cur.oldStale)
	}
}

// TestApplyMapChangesMatchFull applies random map changes twice: once with
// the model's MapChanges (only the named keys checked, diffed and written
// later), once without (every entry compared). Both must send the same
// commands, report the same problems and end with the same maps on disk;
// stale or foreign MapChanges must be ignored.
func TestApplyMapChangesMatchFull(t *testing.T) {
	const runs, steps = 4, 150
	delta := 0
	for seed := range int64(runs) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			rnd := rand.New(rand.NewSource(seed))
			quick, full := newUnitDriver(t, Options{}), newUnitDriver(t, Options{})
			const n = 6
			backends := make([]*model.Backend, n)
			for i := range backends {
				backends[i] = oneBackend(fmt.Sprintf("ns_b%d_80", i), 2, eps(fmt.Sprintf("198.18.%d.1", i)))
			}
			want := desired(backends...)
			want.Maps[model.MapHostOwner] = map[string]string{"b0.test": "@ns"}
			mustApply(t, quick.Driver, want)
			mustApply(t, full.Driver, want)
			var older *model.Desired
			names := []string{model.MapExact, model.MapPrefix, model.MapHostOwner}
			for step := range steps {
				next := *want
				next.Maps = maps.Clone(want.Maps)
				next.MapChanges = map[string]model.MapChange{}
				touched := map[string]map[string]bool{}
				for range 1 + rnd.Intn(3) {
					name := names[rnd.Intn(len(names))]
					if touched[name] == nil {
						touched[name] = map[string]bool{}
						next.Maps[name] = maps.Clone(want.Maps[name])
					}
					m := next.Maps[name]
					k := fmt.Sprintf("h%d.test/", rnd.Intn(12))
					if name == model.MapHostOwner {
						k = strings.TrimSuffix(k, "/")
					}
					v := fmt.Sprintf("ns_b%d_80", rnd.Intn(n))
					r := rnd.Intn(30)
					switch {
					case r < 12:
						delete(m, k)
					case r == 12:
						v = "ns_missing_80" // refused: no such backend
					case r == 13:
						k = "bad key" // refused: not one token
					case name == model.MapHostOwner:
						v = "@ns"
					}
					if r >= 12 {
						m[k] = v
					}
					touched[name][k] = true
					if rnd.Intn(3) == 0 {
						// Refused entries go again, so that maps pass
						// whole now and then.
						for k, v := range m {
							if k == "bad key" || v == "ns_missing_80" {
								delete(m, k)
								touched[name][k] = true
							}
						}
					}
				}
				for name, keys := range touched {
					next.MapChanges[name] = model.MapChange{From: want.Maps[name], To: next.Maps[name], Keys: slices.Sorted(maps.Keys(keys))}
				}
				if rnd.Intn(8) == 0 {
					// An endpoint change next to the map change.
					next.Backends = slices.Clone(want.Backends)
					i := rnd.Intn(n)
					b := *next.Backends[i]
					b.Endpoints = eps(fmt.Sprintf("198.18.%d.%d", i, 1+rnd.Intn(4)))
					next.Backends[i] = &b
				}
				if older != nil && rnd.Intn(10) == 0 {
					// A change described from a result the driver never
					// saw: to be ignored.
					for name, c := range next.MapChanges {
						c.From = older.Maps[name]
						next.MapChanges[name] = c
					}
				}
				plain := next
				plain.MapChanges = nil
				rq, rf := mustApply(t, quick.Driver, &next), mustApply(t, full.Driver, &plain)
				older, want = want, &next
				if rq.Reloaded || rf.Reloaded {
					t.Fatalf("step %d: a map change reloaded: quick %+v, full %+v", step, rq, rf)
				}
				// A whole map's problems come in the order of its entries.
				byMessage := func(a, b model.Problem) int { return strings.Compare(a.Message, b.Message) }
				slices.SortFunc(rq.Dropped, byMessage)
				slices.SortFunc(rf.Dropped, byMessage)
				if rq.RuntimeOps != rf.RuntimeOps || !reflect.DeepEqual(rq.Dropped, rf.Dropped) {
					t.Fatalf("step %d: quick %+v, full %+v", step, rq, rf)
				}
				// The drivers differ in their directories alone.
				cq := strings.ReplaceAll(strings.Join(quick.rt.take(), "\n"), quick.opts.ConfigDir, "DIR")
				cf := strings.ReplaceAll(strings.Join(full.rt.take(), "\n"), full.opts.ConfigDir, "DIR")
				if cq != cf {
					t.Fatalf("step %d: commands quick:\n%s\nfull:\n%s", step, cq, cf)
				}
				if len(quick.cur.mapChanges) > 0 {
					delta++
				}
				for _, name := range mapNames {
					if !maps.Equal(quick.cur.maps[name], full.cur.maps[name]) {
						t.Fatalf("step %d: map %s quick %v, full %v", step, name, quick.cur.maps[name], full.cur.maps[name])
					}
				}
				if rnd.Intn(4) == 0 || step == steps-1 {
					for _, name := range mapNames {
						mq := readMapFile(t, quick.Driver, quick.rend.mapPath(name))
						if mf := readMapFile(t, full.Driver, full.rend.mapPath(name)); mq != mf {
							t.Fatalf("step %d: map file %s quick:\n%s\nfull:\n%s", step, name, mq, mf)
						}
						if want := string(mapFile(full.cur.maps[name])); mq != want {
							t.Fatalf("step %d: map file %s:\n%s\nwant:\n%s", step, name, mq, want)
						}
					}
				}
			}
		})
	}
	t.Logf("%d of %d applies took a map change as described", delta, runs*steps)
	if delta < runs*steps/4 {
		t.Errorf("only %d of %d applies took a map change as described", delta, runs*steps)
	}
}

// TestFirstConfigUnchecked: while HAProxy runs the empty start-up
// configuration, the first full one is loaded without `haproxy -c`; one
// HAProxy refuses is then checked, and only what it blames is held back.
func TestFirstConfigUnchecked(t *testing.T) {
	u := newUnitDriver(t, Options{})
	u.loadedGen = u.emptyGen // as Run leaves it once HAProxy is ready
	res := mustApply(t, u.Driver, desired(oneBackend("ns_a_80", 2, eps("198.18.0.1"))))
	if !res.Reloaded || u.checker.count() != 0 || u.master.count() != 1 {
		t.Fatalf("first configuration: %+v, %d checks, %d reloads; want one reload and no check", res, u.checker.count(), u.master.count())
	}
	// From now on HAProxy serves something: every reload is checked.
	res = mustApply(t, u.Driver, desired(oneBackend("ns_a_80", 2, eps("198.18.0.1")), oneBackend("ns_b_80", 2, eps("198.18.0.2"))))
	if !res.Reloaded || u.checker.count() != 1 {
		t.Fatalf("second configuration: %+v, %d checks; want one", res, u.checker.count())
	}

	u = newUnitDriver(t, Options{})
	u.loadedGen = u.emptyGen
	u.master.failNext = true // HAProxy refuses ns_bad_80, as the checker does
	bad := oneBackend("ns_bad_80", 2, eps("198.18.0.7"))
	bad.Balance = "bogus"
	res = mustApply(t, u.Driver, desired(bad, oneBackend("ns_good_80", 2, eps("198.18.0.8"))))
	if !res.Reloaded || len(res.Quarantined) != 1 || res.Quarantined[0].Object.Name != "bad" || u.checker.count() == 0 || u.master.count() != 2 {
		t.Fatalf("refused first configuration: %+v, %d checks, %d reloads", res, u.checker.count(), u.master.count())
	}
	if cfg := readConfig(t, u.Driver); strings.Contains(cfg, "bogus") || !strings.Contains(cfg, "backend ns_good_80") {
		t.Fatalf("config after the checked reload:\n%s", cfg)
	}
}
