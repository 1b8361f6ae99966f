package haproxy

import (
	"testing"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

func routeACLDesired() *model.Desired {
	d := desired(oneBackend("ns_a_80", 2, eps("198.18.0.1")), oneBackend("ns_b_80", 2, eps("198.18.0.2")))
	d.RouteACLs = []model.RouteACL{{Backend: "ns_b_80", Condition: "{ req.hdr(x-canary) -m str yes }"}}
	d.Maps[model.MapRouteACLPrefix] = map[string]string{"a.test/": ",ns_b_80,", "a.test/api/": model.RouteACLShadow}
	d.Maps[model.MapRouteACLExact] = map[string]string{"a.test/api": model.RouteACLShadow}
	return d
}

// Every condition the model renders goes through haproxy -c, with its
// maps.
func TestRouteACLHAProxyAccepts(t *testing.T) {
	r := goldenRenderer(Options{DisableIPv6: true})
	d := routeACLDesired()
	conds := []string{
		"req.hdr(x-canary) -m str yes",
		"req.cook(beta)",
		"src -m ip 198.18.0.0/15 203.0.113.7",
		"req.hdr_cnt(via) -m int gt 1",
		"req.hdr(x-v) -m len 1:8",
		"req.hdr(user-agent),lower -m reg ^curl/",
		"url_param(v) -m beg 2 3",
	}
	d.RouteACLs = nil
	for i, c := range conds {
		be := oneBackend("ns_c"+string(rune('a'+i))+"_80", 1, nil)
		d.Backends = append(d.Backends, be)
		cond := setting(t, c)
		d.RouteACLs = append(d.RouteACLs, model.RouteACL{Backend: be.Name, Condition: cond})
	}
	st, problems := desiredState(d)
	if len(problems) != 0 {
		t.Fatal(problems)
	}
	if len(st.extras.routeACLs) != len(conds) {
		t.Fatalf("%d conditions kept, want %d", len(st.extras.routeACLs), len(conds))
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

// setting renders a route-acl value the way the model does.
func setting(t *testing.T, v string) string {
	t.Helper()
	c, err := model.RouteACLCondition(v)
	if err != nil {
		t.Fatalf("route-acl %q: %v", v, err)
	}
	return c
}

// The driver checks again what reaches haproxy.cfg and the maps.
func TestRouteACLDriverChecks(t *testing.T) {
	for c, ok := range map[string]bool{
		"{ req.hdr(x) -m str yes }":                     true,
		"{ req.hdr(x) -m str yes } || { src -m found }": false,
		"{ req.hdr(x) -m str a#b }":                     false,
		"{ req.hdr(x) -m str a\nb }":                    false,
		"req.hdr(x) -m str yes":                         false,
		"{  }":                                          false,
	} {
		if conditionOK(c) != ok {
			t.Errorf("conditionOK(%q) = %v", c, !ok)
		}
	}
	d := routeACLDesired()
	d.Maps[model.MapRouteACLExact]["b.test/"] = ",ns_missing_80,"
	d.Maps[model.MapRouteACLExact]["c.test/"] = "ns_b_80"
	d.RouteACLs = append(d.RouteACLs, model.RouteACL{Backend: "ns_a_80", Condition: "{ src -m found } || { always_true }"})
	st, problems := desiredState(d)
	if len(problems) != 3 {
		t.Errorf("problems %v, want 3", problems)
	}
	if _, ok := st.maps[model.MapRouteACLExact]["b.test/"]; ok {
		t.Error("a value naming a missing backend was kept")
	}
	if _, ok := st.maps[model.MapRouteACLExact]["c.test/"]; ok {
		t.Error("a value that is not a list was kept")
	}
	if len(st.extras.routeACLs) != 1 || st.extras.routeACLs[0].Backend != "ns_b_80" {
		t.Errorf("conditions kept: %+v", st.extras.routeACLs)
	}
}
