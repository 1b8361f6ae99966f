package haproxy

import (
	"fmt"
	"strings"
	"testing"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

func TestRouteMirrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		in     []model.RouteMirror
		want   string
		mirror bool
		err    bool
	}{
		{"whole", []model.RouteMirror{{Backend: "app_shadow_80", Num: 1, Den: 1}}, "http-request lua.perimeter-mirror app_shadow_80", true, false},
		{"share", []model.RouteMirror{{Backend: "app_shadow_80", Num: 25, Den: 50}}, "http-request lua.perimeter-mirror app_shadow_80 if { rand(50) lt 25 }", true, false},
		{"none", []model.RouteMirror{{Backend: "app_shadow_80", Num: 0, Den: 100}}, "", false, false},
		{"two", []model.RouteMirror{{Backend: "a_b_1", Num: 1, Den: 1}, {Backend: "c_d_2", Num: 3, Den: 4}},
			"http-request lua.perimeter-mirror a_b_1\nhttp-request lua.perimeter-mirror c_d_2 if { rand(4) lt 3 }", true, false},
		{"name with a blank", []model.RouteMirror{{Backend: "a b", Num: 1, Den: 1}}, "", false, true},
		{"name with a line break", []model.RouteMirror{{Backend: "a\nglobal", Num: 1, Den: 1}}, "", false, true},
		{"name with a condition", []model.RouteMirror{{Backend: "a if TRUE", Num: 1, Den: 1}}, "", false, true},
		{"empty name", []model.RouteMirror{{Num: 1, Den: 1}}, "", false, true},
		{"above 1", []model.RouteMirror{{Backend: "a", Num: 3, Den: 2}}, "", false, true},
		{"no denominator", []model.RouteMirror{{Backend: "a", Num: 0, Den: 0}}, "", false, true},
		{"negative", []model.RouteMirror{{Backend: "a", Num: -1, Den: 2}}, "", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var lines []string
			mirror, err := routeMirrors(tc.in, func(f string, args ...any) { lines = append(lines, fmt.Sprintf(f, args...)) })
			if (err != nil) != tc.err {
				t.Fatalf("err = %v, want error %t", err, tc.err)
			}
			if tc.err {
				return
			}
			if got := strings.Join(lines, "\n"); got != tc.want || mirror != tc.mirror {
				t.Errorf("got %q (mirror %t), want %q (mirror %t)", got, mirror, tc.want, tc.mirror)
			}
		})
	}
}

// A backend whose mirror is refused keeps no rules, and so does not ask
// for the script either.
func TestMirrorRulesRefused(t *testing.T) {
	h := model.HTTPRules{Route: model.RouteFilters{Mirrors: []model.RouteMirror{{Backend: "x\ny", Num: 1, Den: 1}}}}
	var spec backendSpec
	var rejected []string
	featureSpec(&spec, &model.Backend{Name: "app_web_80", HTTP: h}, func(f string, args ...any) { rejected = append(rejected, fmt.Sprintf(f, args...)) })
	if spec.Rules != "" || spec.Mirror || len(rejected) != 1 {
		t.Errorf("rules %q, mirror %t, rejected %q", spec.Rules, spec.Mirror, rejected)
	}
	h.Route.Mirrors[0].Backend = "app_shadow_80"
	rejected = nil
	featureSpec(&spec, &model.Backend{Name: "app_web_80", HTTP: h}, func(f string, args ...any) { rejected = append(rejected, fmt.Sprintf(f, args...)) })
	if !spec.Mirror || !strings.Contains(spec.Rules, "lua.perimeter-mirror app_shadow_80") || len(rejected) != 0 {
		t.Errorf("rules %q, mirror %t, rejected %q", spec.Rules, spec.Mirror, rejected)
	}
}

// TestMirrorCountFollowsChanges: whether the script is loaded follows
// backends that start and stop mirroring through quick desiredStates (only
// the changed backends looked at), as a fresh desiredState says.
func TestMirrorCountFollowsChanges(t *testing.T) {
	shadow := oneBackend("ns_shadow_80", 2, eps("198.18.0.9"))
	mirroring := func(b *model.Backend) *model.Backend {
		c := *b
		c.HTTP.Route.Mirrors = []model.RouteMirror{{Backend: shadow.Name, Num: 1, Den: 1}}
		return &c
	}
	a, b := oneBackend("ns_a_80", 2, eps("198.18.0.1")), oneBackend("ns_b_80", 2, eps("198.18.0.2"))
	steps := []struct {
		backends []*model.Backend
		mirror   bool
	}{
		{[]*model.Backend{a, b, shadow}, false},
		{[]*model.Backend{mirroring(a), b, shadow}, true},
		{[]*model.Backend{mirroring(a), mirroring(b), shadow}, true},
		{[]*model.Backend{a, mirroring(b), shadow}, true},
		{[]*model.Backend{a, oneBackend("ns_b_80", 2, eps("198.18.0.3")), shadow}, false},
	}
	var memo checkMemo
	var from *state
	for i, s := range steps {
		want := desired(s.backends...)
		st, _ := desiredStateMemo(want, &memo, from, nil)
		if i > 0 && st.base != from {
			t.Fatalf("step %d: not a quick desiredState", i)
		}
		fresh, _ := desiredState(want)
		if st.extras.mirror != s.mirror || fresh.extras.mirror != s.mirror {
			t.Fatalf("step %d: mirror %t (fresh %t), want %t", i, st.extras.mirror, fresh.extras.mirror, s.mirror)
		}
		from = st
	}
}
