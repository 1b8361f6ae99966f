package haproxy

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

func canaryDesired(weight string) *model.Desired {
	d := desired(oneBackend("ns_a_80", 2, eps("198.18.0.1")), oneBackend("ns_canary_80", 2, eps("198.18.0.2")))
	delete(d.Maps[model.MapExact], "canary.test/")
	delete(d.Maps[model.MapPrefix], "canary.test/")
	if weight != "" {
		d.Maps[model.MapCanaryBackend] = map[string]string{"ns_a_80": "ns_canary_80"}
		d.Maps[model.MapCanaryWeight] = map[string]string{"ns_a_80": weight}
	}
	return d
}

// TestCanaryAtRuntime: the first canary, a weight change and the removal
// of a canary whose backend exists are map changes only.
func TestCanaryAtRuntime(t *testing.T) {
	u := newUnitDriver(t, Options{})
	mustApply(t, u.Driver, canaryDesired(""))
	cfg := readConfig(t, u.Driver)
	wm, bm := u.rend.mapPath(model.MapCanaryWeight), u.rend.mapPath(model.MapCanaryBackend)
	for _, line := range []string{
		"http-request set-var(txn.canary_weight) var(txn.backend),map_str_int(" + wm + ",0) if { var(txn.backend) -m found }\n",
		"http-request set-var(txn.backend) var(txn.backend),map_str(" + bm + ") if { var(txn.canary_weight) -m int gt 0 } { rand(100),sub(txn.canary_weight) -m int lt 0 }\n",
	} {
		if !strings.Contains(cfg, line) {
			t.Fatalf("config lacks %q:\n%s", line, cfg)
		}
	}
	for _, p := range []string{wm, bm} {
		if b, err := os.ReadFile(p); err != nil || len(b) != 0 {
			t.Fatalf("map %s must exist empty from the start: %q %v", p, b, err)
		}
	}
	u.rt.take()
	reloads := u.master.count()

	for _, step := range []struct {
		weight string
		cmds   []string
	}{
		{"10", []string{"add map " + bm + " ns_a_80 ns_canary_80", "add map " + wm + " ns_a_80 10"}},
		{"50", []string{"set map " + wm + " ns_a_80 50"}},
		{"0", []string{"set map " + wm + " ns_a_80 0"}},
		{"", []string{"del map " + bm + " ns_a_80", "del map " + wm + " ns_a_80"}},
	} {
		res := mustApply(t, u.Driver, canaryDesired(step.weight))
		if got := u.rt.take(); !reflect.DeepEqual(got, step.cmds) {
			t.Fatalf("weight %q: commands %q, want %q", step.weight, got, step.cmds)
		}
		if res.Reloaded || u.master.count() != reloads {
			t.Fatalf("weight %q reloaded: %+v", step.weight, res)
		}
		want := ""
		if step.weight != "" {
			want = "ns_a_80 " + step.weight + "\n"
		}
		if b := readMapFile(t, u.Driver, wm); b != want {
			t.Fatalf("weight map file %q, want %q", b, want)
		}
	}
}

// TestCanaryMapValues: the driver keeps only weights 0..100 and canary
// backends that exist.
func TestCanaryMapValues(t *testing.T) {
	d := canaryDesired("10")
	d.Maps[model.MapCanaryWeight]["ns_b_80"] = "101"
	d.Maps[model.MapCanaryWeight]["ns_c_80"] = "5 x"
	d.Maps[model.MapCanaryBackend]["ns_b_80"] = "ns_gone_80"
	st, problems := desiredState(d)
	if len(problems) != 3 {
		t.Fatalf("problems %v, want 3", problems)
	}
	if !reflect.DeepEqual(st.maps[model.MapCanaryWeight], map[string]string{"ns_a_80": "10"}) ||
		!reflect.DeepEqual(st.maps[model.MapCanaryBackend], map[string]string{"ns_a_80": "ns_canary_80"}) {
		t.Fatalf("maps %v", st.maps)
	}
}

// TestCanaryHAProxyAccepts renders a canary and checks it with haproxy -c.
func TestCanaryHAProxyAccepts(t *testing.T) {
	r := goldenRenderer(Options{DisableIPv6: true})
	st, problems := desiredState(canaryDesired("10"))
	if len(problems) != 0 {
		t.Fatal(problems)
	}
	withSlots(emptyState(), st)
	cfg, err := r.config(st, nil)
	if err != nil {
		t.Fatal(err)
	}
	maps := map[string]string{}
	for _, name := range mapNames {
		maps[name] = string(mapFile(st.maps[name]))
	}
	haproxyCheck(t, cfg, maps)
}
