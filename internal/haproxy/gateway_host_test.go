package haproxy

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// A Gateway API wildcard whose suffix has a label count the frontends look
// up already is a map change; a new label count reloads, once; a wildcard
// map entry that does not name its own suffix is dropped.
func TestGatewayWildcardTiers(t *testing.T) {
	u := newUnitDriver(t, Options{})
	want := desired(oneBackend("ns_a_80", 2, eps("198.18.0.1")))
	want.Maps[model.MapGatewayWildcard] = map[string]string{"example.com": "*.example.com"}
	want.Maps[model.MapPrefix] = map[string]string{"*.example.com/": "ns_a_80"}
	mustApply(t, u.Driver, want)
	u.rt.take()
	r0 := u.master.count()

	next := func(k, v string) {
		want.Maps[model.MapGatewayWildcard] = maps.Clone(want.Maps[model.MapGatewayWildcard])
		want.Maps[model.MapGatewayWildcard][k] = v
		want.Maps[model.MapPrefix] = maps.Clone(want.Maps[model.MapPrefix])
		want.Maps[model.MapPrefix][v+"/"] = "ns_a_80"
	}
	next("example.org", "*.example.org")
	res := mustApply(t, u.Driver, want)
	if res.Reloaded || u.master.count() != r0 {
		t.Fatalf("a wildcard of a known label count reloaded: %+v", res)
	}
	cmd := "add map " + u.rend.mapPath(model.MapGatewayWildcard) + " example.org *.example.org"
	if got := u.rt.take(); !slices.Contains(got, cmd) {
		t.Fatalf("commands %q, want %q among them", got, cmd)
	}

	next("apps.example.org", "*.apps.example.org")
	res = mustApply(t, u.Driver, want)
	if !res.Reloaded || !strings.Contains(res.Reason, "wildcard label counts [2]->[3 2]") {
		t.Fatalf("a new label count: %+v, want a reload for it", res)
	}
	if cfg := readConfig(t, u.Driver); !strings.Contains(cfg, "field(-1,.,3),map_str("+u.rend.mapPath(model.MapGatewayWildcard)+")") {
		t.Fatalf("no lookup of three labels in:\n%s", cfg)
	}

	next("example.net", "*.example.org")
	res = mustApply(t, u.Driver, want)
	if !slices.ContainsFunc(res.Dropped, func(p model.Problem) bool { return strings.Contains(p.Message, `"example.net"`) }) {
		t.Fatalf("a wildcard entry for another suffix was not dropped: %+v", res.Dropped)
	}
}
