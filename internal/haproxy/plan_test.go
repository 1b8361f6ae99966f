package haproxy

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// With --disable-http the https frontend loads the routing maps: a new host
// on an existing backend goes live at once through map commands.
func TestDisableHTTPMapChangeGoesLive(t *testing.T) {
	u := newUnitDriver(t, Options{DisableHTTP: true, HTTPSBindPort: 443})
	want := desired(oneBackend("ns_a_80", 2, eps("198.18.0.1")))
	want.TLS.Default = &model.Certificate{Name: model.DefaultCertificateName, PEM: testPEM(t, "default")}
	mustApply(t, u.Driver, want)
	u.rt.take()
	r0 := u.master.count()

	want.Maps[model.MapExact] = maps.Clone(want.Maps[model.MapExact])
	want.Maps[model.MapExact]["new.test/"] = "ns_a_80"
	res := mustApply(t, u.Driver, want)
	if res.Reloaded || u.master.count() != r0 {
		t.Fatalf("a new host on an existing backend reloaded: %+v", res)
	}
	cmd := "add map " + u.rend.mapPath(model.MapExact) + " new.test/ ns_a_80"
	if got := u.rt.take(); !slices.Contains(got, cmd) {
		t.Fatalf("commands %q, want %q among them", got, cmd)
	}
	if b := readMapFile(t, u.Driver, u.rend.mapPath(model.MapExact)); !strings.Contains(b, "new.test/ ns_a_80\n") {
		t.Fatalf("map file %q lacks the new host", b)
	}
}

// A reload that follows a failed file write brings the live HAProxy back in
// line with the files: it is a recovery, not a start.
func TestReloadAfterFailedWriteIsRecovery(t *testing.T) {
	u := newUnitDriver(t, Options{})
	want := desired(oneBackend("ns_a_80", 2, eps("198.18.0.1")))
	mustApply(t, u.Driver, want)

	// The maps directory turns into a file: every map write fails.
	mapsDir := u.paths.mapsDir
	if err := os.Rename(mapsDir, mapsDir+".away"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(mapsDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// A new backend: a reload, which writes every file first.
	want.Backends = append(want.Backends, oneBackend("ns_b_80", 2, eps("198.18.0.2")))
	want.Maps[model.MapExact] = maps.Clone(want.Maps[model.MapExact])
	want.Maps[model.MapExact]["new.test/"] = "ns_b_80"
	if _, err := u.Apply(t.Context(), want); err == nil {
		t.Fatal("Apply with an unwritable maps directory succeeded")
	}
	if err := os.Remove(mapsDir); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(mapsDir+".away", mapsDir); err != nil {
		t.Fatal(err)
	}
	res := mustApply(t, u.Driver, want)
	if !res.Reloaded || res.ReloadReason != ReloadRecovery {
		t.Fatalf("after a failed write: reloaded %v reason %q, want a %s reload", res.Reloaded, res.ReloadReason, ReloadRecovery)
	}
	if _, err := os.Stat(filepath.Join(mapsDir, model.MapExact+".map")); err != nil {
		t.Fatal(err)
	}
}

// TestPlan is the reload decision as one table: (old, new) -> reload or
// not, its reason, and the Runtime API commands otherwise.
func TestPlan(t *testing.T) {
	const (
		exact    = "/maps/path-exact.map"
		redirect = "/maps/ssl-redirect.map"
	)
	base := func() *model.Desired {
		d := desired(oneBackend("ns_a_80", 2, eps("198.18.0.1")), oneBackend("ns_b_80", 2, eps("198.18.0.2")))
		d.TLS.Default = &model.Certificate{Name: model.DefaultCertificateName, PEM: []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")}
		return d
	}
	many := func(d *model.Desired) {
		for i := range bulkMapOps + 1 {
			d.Maps[model.MapExact][fmt.Sprintf("h%d.test/", i)] = "ns_a_80"
		}
	}
	cases := []struct {
		name   string
		opts   Options
		noCur  bool // nothing written yet
		behind bool // the live HAProxy fell behind the files
		change func(*model.Desired)
		reason string // "" for no reload
		cmds   []string
		bulk   []string
	}{
		{name: "no change", change: func(*model.Desired) {}},
		{name: "endpoint added", change: func(d *model.Desired) {
			d.Backends[0].Endpoints = eps("198.18.0.1", "198.18.0.3")
		}, cmds: []string{"set server ns_a_80/SRV_2 addr 198.18.0.3 port 8080", "set server ns_a_80/SRV_2 state ready"}},
		{name: "endpoint draining", change: func(d *model.Desired) {
			d.Backends[0].Endpoints[0].Draining = true
		}, cmds: []string{"set server ns_a_80/SRV_1 state drain"}},
		{name: "endpoint removed", change: func(d *model.Desired) {
			d.Backends[0].Endpoints = nil
		}, cmds: []string{"set server ns_a_80/SRV_1 state maint"}},
		{name: "new host on an existing backend", change: func(d *model.Desired) {
			d.Maps[model.MapExact]["new.test/"] = "ns_b_80"
		}, cmds: []string{"add map " + exact + " new.test/ ns_b_80"}},
		{name: "route moved and removed", change: func(d *model.Desired) {
			d.Maps[model.MapExact]["a.test/"] = "ns_b_80"
			delete(d.Maps[model.MapExact], "b.test/")
		}, cmds: []string{"del map " + exact + " b.test/", "set map " + exact + " a.test/ ns_b_80"}},
		{name: "new host, http disabled: the https frontend loads the map", opts: Options{DisableHTTP: true}, change: func(d *model.Desired) {
			d.Maps[model.MapExact]["new.test/"] = "ns_b_80"
		}, cmds: []string{"add map " + exact + " new.test/ ns_b_80"}},
		{name: "many routes: one bulk replacement", change: many, bulk: []string{model.MapExact}},
		{name: "canary weight", change: func(d *model.Desired) {
			d.Maps[model.MapCanaryBackend] = map[string]string{"ns_a_80": "ns_b_80"}
			d.Maps[model.MapCanaryWeight] = map[string]string{"ns_a_80": "10"}
		}, cmds: []string{"add map /maps/canary-backend.map ns_a_80 ns_b_80", "add map /maps/canary-weight.map ns_a_80 10"}},
		{name: "route-acl condition added", change: func(d *model.Desired) {
			d.RouteACLs = []model.RouteACL{{Backend: "ns_b_80", Condition: "{ req.hdr(x-canary) -m str yes }"}}
			d.Maps[model.MapRouteACLPrefix] = map[string]string{"a.test/": ",ns_b_80,"}
		}, reason: ReloadFrontend},
		{name: "route-acl host added for an existing condition", change: func(d *model.Desired) {
			d.Maps[model.MapRouteACLPrefix] = map[string]string{"new.test/": ",ns_b_80,"}
		}, cmds: []string{"add map /maps/route-acl-prefix.map new.test/ ,ns_b_80,"}},
		{name: "ssl-redirect", change: func(d *model.Desired) {
			d.Maps[model.MapSSLRedirect] = map[string]string{"a.test": "308"}
		}, cmds: []string{"add map " + redirect + " a.test 308"}},
		{name: "ssl-redirect, http disabled: no frontend loads it", opts: Options{DisableHTTP: true}, change: func(d *model.Desired) {
			d.Maps[model.MapSSLRedirect] = map[string]string{"a.test": "308"}
		}},
		{name: "ssl-redirect, https not served: no frontend loads it", opts: Options{HTTPSBindPort: -1}, change: func(d *model.Desired) {
			d.Maps[model.MapSSLRedirect] = map[string]string{"a.test": "308"}
		}},
		{name: "backend added", change: func(d *model.Desired) {
			d.Backends = append(d.Backends, oneBackend("ns_c_80", 1, nil))
		}, reason: ReloadBackends},
		{name: "backend removed", change: func(d *model.Desired) {
			d.Backends = d.Backends[:1]
			delete(d.Maps[model.MapExact], "b.test/")
			delete(d.Maps[model.MapPrefix], "b.test/")
		}, reason: ReloadBackends},
		{name: "backend key", change: func(d *model.Desired) { d.Backends[1].Balance = "leastconn" }, reason: ReloadBackends},
		{name: "more slots", change: func(d *model.Desired) { d.Backends[1].Slots = 4 }, reason: ReloadSlots},
		{name: "more slots and a backend key: backends", change: func(d *model.Desired) {
			d.Backends[0].Slots = 4
			d.Backends[1].Balance = "leastconn"
		}, reason: ReloadBackends},
		{name: "global", change: func(d *model.Desired) { d.Global.Maxconn = 1000 }, reason: ReloadGlobal},
		{name: "default backend", change: func(d *model.Desired) { d.DefaultBackend = "ns_a_80" }, reason: ReloadFrontend},
		{name: "error page", change: func(d *model.Desired) {
			d.ErrorPages = []model.ErrorPage{{Code: 503, Content: "HTTP/1.0 503 Busy\r\n\r\n"}}
		}, reason: ReloadFrontend},
		{name: "https off", change: func(d *model.Desired) { d.TLS.Default = nil }, reason: ReloadTLS},
		{name: "first configuration", noCur: true, change: func(*model.Desired) {}, reason: ReloadStart},
		{name: "live haproxy behind", behind: true, change: func(*model.Desired) {}, reason: ReloadRecovery},
		{name: "behind with nothing written: recovery", noCur: true, behind: true, change: func(*model.Desired) {}, reason: ReloadRecovery},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.opts
			switch o.HTTPSBindPort {
			case 0:
				o.HTTPSBindPort = 443
			case -1:
				o.HTTPSBindPort = 0
			}
			r := goldenRenderer(o)
			cur, problems := desiredState(base())
			if len(problems) > 0 {
				t.Fatal(problems)
			}
			withSlots(emptyState(), cur)
			want := base()
			tc.change(want)
			next, problems := desiredState(want)
			if len(problems) > 0 {
				t.Fatal(problems)
			}
			withSlots(cur, next)
			if tc.noCur {
				cur = nil
			}
			p := plan(cur, next, r, tc.behind)
			if p.reload() != (tc.reason != "") || p.reason() != tc.reason {
				t.Fatalf("reload %v reason %q (%s), want reason %q", p.reload(), p.reason(), p.summary(), tc.reason)
			}
			var got []string
			for _, c := range append(append(slices.Clone(p.servers), p.maps...), stepCmds(p.tlsPre, p.tlsPost)...) {
				got = append(got, strings.ReplaceAll(c, goldenConfigDir, ""))
			}
			if !slices.Equal(got, tc.cmds) || !slices.Equal(p.bulk, tc.bulk) {
				t.Fatalf("commands %q bulk %q, want %q bulk %q", got, p.bulk, tc.cmds, tc.bulk)
			}
		})
	}
}

func stepCmds(pre, post []runtimeStep) []string {
	var out []string
	for _, s := range append(slices.Clone(pre), post...) {
		out = append(out, s.cmd)
	}
	return out
}

// Values the driver's own checks drop are not what HAProxy rejected: they
// are reported apart from the quarantine.
func TestDroppedValuesAreNotQuarantined(t *testing.T) {
	u := newUnitDriver(t, Options{})
	want := desired(oneBackend("ns_a_80", 2, eps("198.18.0.1")))
	want.Maps[model.MapExact]["ghost.test/"] = "ns_ghost_80"
	res := mustApply(t, u.Driver, want)
	if len(res.Quarantined) != 0 || len(res.Dropped) != 1 || res.Dropped[0].Reason != ReasonConfigRejected ||
		!strings.Contains(res.Dropped[0].Message, "ns_ghost_80") {
		t.Fatalf("quarantined %+v, dropped %+v; want the map entry dropped only", res.Quarantined, res.Dropped)
	}
}

// Certificates change through the Runtime API: added, rotated and removed
// without a reload, and counted as certificate commands.
func TestApplyCertificatesAtRuntime(t *testing.T) {
	u := newUnitDriver(t, Options{HTTPSBindPort: 443})
	want := desired(oneBackend("ns_a_80", 2, eps("198.18.0.1")))
	want.TLS.Default = &model.Certificate{Name: model.DefaultCertificateName, PEM: testPEM(t, "default")}
	mustApply(t, u.Driver, want)
	u.rt.take()
	r0 := u.master.count()
	certs := u.rend.certsDir
	check := func(what string, wantCmds []string) {
		t.Helper()
		res := mustApply(t, u.Driver, want)
		var got []string
		for _, c := range u.rt.take() {
			got = append(got, strings.ReplaceAll(c, certs, "/certs"))
		}
		if res.Reloaded || u.master.count() != r0 || !slices.Equal(got, wantCmds) ||
			res.RuntimeOpsByKind[RuntimeCert] != len(wantCmds) || res.RuntimeResult != ResultOK {
			t.Fatalf("%s: reloaded %v, commands %q, by kind %v %s; want %q", what, res.Reloaded, got, res.RuntimeOpsByKind, res.RuntimeResult, wantCmds)
		}
	}
	want.TLS.Certificates = []*model.Certificate{{Name: "ns_a-tls", PEM: testPEM(t, "a.test"), Hosts: []string{"a.test"}}}
	check("added", []string{
		"new ssl cert /certs/ns_a-tls.pem",
		"set ssl cert /certs/ns_a-tls.pem <<-----BEGIN CERTIFICATE-----",
		"commit ssl cert /certs/ns_a-tls.pem",
		"add ssl crt-list /certs/crt-list <</certs/ns_a-tls.pem a.test",
	})
	want.TLS.Default = &model.Certificate{Name: model.DefaultCertificateName, PEM: testPEM(t, "default")}
	check("default rotated", []string{
		"set ssl cert /certs/default.pem <<-----BEGIN CERTIFICATE-----",
		"commit ssl cert /certs/default.pem",
	})
	want.TLS.Certificates = nil
	check("removed", []string{
		"del ssl crt-list /certs/crt-list /certs/ns_a-tls.pem",
		"del ssl cert /certs/ns_a-tls.pem",
	})
}
