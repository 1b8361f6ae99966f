package haproxy

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// manyBackends is a Desired with n backends of the same shape and, when
// given, more of their own.
func manyBackends(n int, more ...*model.Backend) *model.Desired {
	var bs []*model.Backend
	for i := range n {
		bs = append(bs, oneBackend(fmt.Sprintf("ns_s%d_80", i), 2, eps(fmt.Sprintf("198.18.%d.%d", i/250, i%250+1))))
	}
	return desired(append(bs, more...)...)
}

// TestSpareBackends: at many backends the configuration declares spares;
// a new backend of their shape is served through one with no reload, its
// endpoints and routes going to the spare's name, while the files hold it
// under its own name; a reload frees the spares.
func TestSpareBackends(t *testing.T) {
	u := newUnitDriver(t, Options{})
	mustApply(t, u.Driver, manyBackends(spareMinBackends))
	if u.cur.spares.count != spareCount || !strings.Contains(readConfig(t, u.Driver), "backend SPARE_1 from perimeter\n") {
		t.Fatalf("no spares declared: %+v", u.cur.spares)
	}
	u.rt.take()
	r0, checks := u.master.count(), u.checker.count()

	nw := oneBackend("ns_new_80", 2, eps("198.18.9.1"))
	res := mustApply(t, u.Driver, manyBackends(spareMinBackends, nw))
	if res.Reloaded || u.master.count() != r0 || u.checker.count() != checks {
		t.Fatalf("a new backend of the spares' shape reloaded or was checked: %+v", res)
	}
	exact := u.rend.mapPath(model.MapExact)
	got := u.rt.take()
	for _, c := range []string{"set server SPARE_1/SRV_1 addr 198.18.9.1 port 8080", "set server SPARE_1/SRV_1 state ready", "add map " + exact + " new.test/ SPARE_1"} {
		if !slices.Contains(got, c) {
			t.Errorf("commands lack %q: %v", c, got)
		}
	}
	if b := readMapFile(t, u.Driver, exact); !strings.Contains(b, "new.test/ ns_new_80\n") {
		t.Errorf("map file does not route new.test/ to ns_new_80")
	}
	if cfg := readConfig(t, u.Driver); !strings.Contains(cfg, "backend ns_new_80 from perimeter\n  server SRV_1 198.18.9.1:8080\n") {
		t.Errorf("haproxy.cfg lacks the new backend under its own name")
	}

	// Its endpoint changes go to the spare too.
	nw2 := oneBackend("ns_new_80", 2, eps("198.18.9.1", "198.18.9.2"))
	mustApply(t, u.Driver, manyBackends(spareMinBackends, nw2))
	if got := u.rt.take(); !slices.Contains(got, "set server SPARE_1/SRV_2 addr 198.18.9.2 port 8080") {
		t.Errorf("endpoint change of a backend on a spare: %v", got)
	}

	// Another shape reloads; afterwards the backend has its own name live.
	odd := oneBackend("ns_odd_80", 2, eps("198.18.9.3"))
	odd.Balance = "leastconn"
	res = mustApply(t, u.Driver, manyBackends(spareMinBackends, nw2, odd))
	if !res.Reloaded || len(u.live) != 0 {
		t.Fatalf("a backend of another shape: %+v, live %v", res, u.live)
	}
	u.rt.take()
	mustApply(t, u.Driver, manyBackends(spareMinBackends, oneBackend("ns_new_80", 2, eps("198.18.9.2")), odd))
	if got := u.rt.take(); !slices.Contains(got, "set server ns_new_80/SRV_1 state maint") {
		t.Errorf("endpoint change after the reload: %v", got)
	}

	// More new backends than spares: one reload for all.
	var burst []*model.Backend
	for i := range spareCount + 1 {
		burst = append(burst, oneBackend(fmt.Sprintf("ns_burst%d_80", i), 2, eps("198.18.9.9")))
	}
	r1 := u.master.count()
	if res := mustApply(t, u.Driver, manyBackends(spareMinBackends, burst...)); !res.Reloaded || u.master.count() != r1+1 {
		t.Fatalf("%d new backends with %d spares: %+v", len(burst), spareCount, res)
	}
}

// TestNoSparesWhenSmall: a small configuration has no spares, so its
// haproxy.cfg is what it always was.
func TestNoSparesWhenSmall(t *testing.T) {
	u := newUnitDriver(t, Options{})
	mustApply(t, u.Driver, manyBackends(3))
	if u.cur.spares.count != 0 || strings.Contains(readConfig(t, u.Driver), sparePrefix) {
		t.Fatalf("spares in a small configuration: %+v", u.cur.spares)
	}
	res := mustApply(t, u.Driver, manyBackends(3, oneBackend("ns_new_80", 2, eps("198.18.9.1"))))
	if !res.Reloaded {
		t.Fatalf("new backend without spares: %+v", res)
	}
}

// TestLiveCommands: only server commands and path map values are renamed.
func TestLiveCommands(t *testing.T) {
	u := newUnitDriver(t, Options{})
	u.live = map[string]string{"ns_a_80": "SPARE_2"}
	exact, weight := u.rend.mapPath(model.MapExact), u.rend.mapPath(model.MapCanaryWeight)
	in := []string{
		"set server ns_a_80/SRV_1 addr 198.18.0.1 port 80",
		"set server ns_b_80/SRV_1 state ready",
		"add map " + exact + " a.test/ ns_a_80",
		"add map @3 " + exact + " a.test/ ns_a_80",
		"del map " + exact + " ns_a_80",
		"set map " + weight + " ns_a_80 ns_a_80",
	}
	want := []string{
		"set server SPARE_2/SRV_1 addr 198.18.0.1 port 80",
		"set server ns_b_80/SRV_1 state ready",
		"add map " + exact + " a.test/ SPARE_2",
		"add map @3 " + exact + " a.test/ SPARE_2",
		"del map " + exact + " ns_a_80",
		"set map " + weight + " ns_a_80 ns_a_80",
	}
	if got := u.liveCommands(in); !slices.Equal(got, want) {
		t.Fatalf("got %q\nwant %q", got, want)
	}
}

// TestIntegrationSpareBackend: on a real HAProxy, a new backend served
// through a spare answers at once without a reload, and keeps answering
// under its own name after the next reload, which loads the files.
func TestIntegrationSpareBackend(t *testing.T) {
	h := startHAProxy(t, testLogger(t), nil)
	applyOK(t, h.d, benchDesired(spareMinBackends))
	r0 := reloads(t, h.d)

	withNew := func(e model.Endpoint) *model.Desired {
		want := benchDesired(spareMinBackends)
		want.Backends = append(want.Backends, backendOf("ns_new_80", 8, e))
		want.Maps[model.MapPrefix]["new.test/"] = "ns_new_80"
		return want
	}
	if res := applyOK(t, h.d, withNew(upstream(t, "NEW"))); res.Reloaded || reloads(t, h.d) != r0 {
		t.Fatalf("new backend reloaded: %+v", res)
	}
	if code, body, err := get(h.http4, "new.test", "/"); err != nil || body != "NEW" {
		t.Fatalf("new.test through a spare: %d %q %v", code, body, err)
	}

	if err := h.d.reloadForTest(t.Context()); err != nil {
		t.Fatal(err)
	}
	if code, body, err := get(h.http4, "new.test", "/"); err != nil || body != "NEW" {
		t.Fatalf("new.test after the reload: %d %q %v", code, body, err)
	}
	// Its endpoints now change under its own name.
	if res := applyOK(t, h.d, withNew(upstream(t, "NEW2"))); res.Reloaded {
		t.Fatalf("endpoint change reloaded: %+v", res)
	}
	if code, body, err := get(h.http4, "new.test", "/"); err != nil || body != "NEW2" {
		t.Fatalf("new.test after an endpoint change: %d %q %v", code, body, err)
	}
}

// TestSparesGivenBack: once half the spares are taken, a reload gives
// them back after a pause in new backends, not before.
func TestSparesGivenBack(t *testing.T) {
	u := newUnitDriver(t, Options{})
	mustApply(t, u.Driver, manyBackends(spareMinBackends))
	var added []*model.Backend
	for i := range spareCount / 2 {
		added = append(added, oneBackend(fmt.Sprintf("ns_new%d_80", i), 2, eps("198.18.9.1")))
	}
	want := manyBackends(spareMinBackends, added...)
	r0 := u.master.count()
	res := mustApply(t, u.Driver, want)
	if res.Reloaded || len(u.live) != spareCount/2 || res.RetryAfter != spareRefreshDelay {
		t.Fatalf("taking half the spares: %+v, live %d", res, len(u.live))
	}
	u.clock.t = u.clock.t.Add(spareRefreshDelay / 2)
	if res := mustApply(t, u.Driver, want); res.Reloaded || res.RetryAfter != spareRefreshDelay/2 {
		t.Fatalf("before the pause is over: %+v", res)
	}
	u.clock.t = u.clock.t.Add(spareRefreshDelay / 2)
	res = mustApply(t, u.Driver, want)
	if !res.Reloaded || res.ReloadReason != ReloadBackends || u.master.count() != r0+1 || len(u.live) != 0 || res.RetryAfter != 0 {
		t.Fatalf("after the pause: %+v, live %d", res, len(u.live))
	}
}

// TestSpareWithinMaxConfigSize: a spare is not taken when the backend
// could push haproxy.cfg past MaxConfigSize; the reload path checks it.
func TestSpareWithinMaxConfigSize(t *testing.T) {
	for _, tc := range []struct {
		name   string
		margin int
		spare  bool
	}{{"room", 1 << 20, true}, {"no room", 150, false}} {
		t.Run(tc.name, func(t *testing.T) {
			u := newUnitDriver(t, Options{})
			mustApply(t, u.Driver, manyBackends(spareMinBackends))
			u.opts.MaxConfigSize = u.cache.size + tc.margin
			res := mustApply(t, u.Driver, manyBackends(spareMinBackends, oneBackend("ns_new_80", 2, eps("198.18.9.1"))))
			if res.Reloaded == tc.spare || (len(u.live) == 1) != tc.spare {
				t.Fatalf("reloaded %v, live %v; want a spare: %v", res.Reloaded, u.live, tc.spare)
			}
		})
	}
}
