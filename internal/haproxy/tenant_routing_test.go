package haproxy

import (
	"strings"
	"testing"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// TestTenantLongPathMapLine: whatever the model hands over, no map line is
// longer than maxMapLine or carries a second line, a blank or a NUL; the
// entries dropped are reported.
func TestTenantLongPathMapLine(t *testing.T) {
	be := &model.Backend{Name: "evil_web_80", Namespace: "evil", Service: "web", Port: "80", Slots: 1}
	long := "b.example.com/" + strings.Repeat("x", 16369) + "victim.example.com/login"
	want := &model.Desired{
		Backends: []*model.Backend{be},
		Maps: map[string]map[string]string{
			model.MapExact: {
				long:                         "evil_web_80",
				"a.example.com/x\nvictim/ x": "evil_web_80",
				"a.example.com/y\rvictim/":   "evil_web_80",
				"a.example.com/z\x00":        "evil_web_80",
				"a.example.com/ok":           "evil_web_80",
				"a.example.com/v":            "evil_web_80 victim_x",
				"a.example.com/" + strings.Repeat("y", maxMapLine-len("a.example.com/ evil_web_80\n")): "evil_web_80",
			},
			model.MapHostOwner: {"a.example.com": "@evil", "b.example.com": "@evil x", "c.example.com": "evil"},
		},
	}
	st, problems := desiredState(want)
	if got := len(st.maps[model.MapExact]); got != 2 {
		t.Errorf("path-exact keeps %d entries, want 2: %v", got, st.maps[model.MapExact])
	}
	if got := len(st.maps[model.MapHostOwner]); got != 1 {
		t.Errorf("host-owner keeps %d entries, want 1: %v", got, st.maps[model.MapHostOwner])
	}
	if len(problems) != 7 {
		t.Errorf("%d problems, want 7: %v", len(problems), problems)
	}
	for _, p := range problems {
		if len(p.Message) > 300 {
			t.Errorf("problem message of %d bytes", len(p.Message))
		}
	}
	// mapFile is the last guard, even for a map desiredState never saw.
	file := string(mapFile(want.Maps[model.MapExact]))
	lines := strings.Split(strings.TrimSuffix(file, "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("map file has %d lines, want 2:\n%.300s", len(lines), file)
	}
	for _, l := range lines {
		if len(l)+1 > maxMapLine || len(strings.Fields(l)) != 2 {
			t.Errorf("map line of %d bytes, %d words", len(l)+1, len(strings.Fields(l)))
		}
	}
}

// TestTenantRequestQuirksRender: both frontends refuse a Host with '/',
// set X-Forwarded-Proto, strip a trailing dot; a forwarded-for backend
// drops the client's X-Forwarded-For unless the operator trusts it.
func TestTenantRequestQuirksRender(t *testing.T) {
	for _, trust := range []bool{false, true} {
		r := goldenRenderer(Options{HTTPSBindPort: 443, TrustForwardedFor: trust})
		want := fullDesired()
		want.TLS.Default = &model.Certificate{Name: model.DefaultCertificateName, PEM: []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")}
		st, _ := desiredState(want)
		withSlots(emptyState(), st)
		cfg, err := r.config(st, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, fe := range []string{"http", "https"} {
			sec := section(cfg, "frontend "+fe+" ")
			for _, line := range []string{
				"http-request deny deny_status 400 if { req.hdr(host) -m sub / @ }",
				"http-request set-header X-Forwarded-Proto " + fe,
				"lower,regsub([.]$,)",
			} {
				if !strings.Contains(sec, line) {
					t.Errorf("frontend %s lacks %q:\n%s", fe, line, sec)
				}
			}
			if strings.Index(sec, "X-Forwarded-Proto") > strings.Index(sec, "set-var(txn.host)") {
				t.Errorf("frontend %s: X-Forwarded-Proto set after routing", fe)
			}
		}
		be := section(cfg, "backend shop_api_8080 ")
		if has := strings.Contains(be, "http-request del-header X-Forwarded-For"); has == trust {
			t.Errorf("trust=%t: backend deletes X-Forwarded-For: %t\n%s", trust, has, be)
		}
	}
}

// section is the text of the section whose header starts with head.
func section(cfg, head string) string {
	i := strings.Index(cfg, "\n"+head)
	if i < 0 {
		return ""
	}
	rest := cfg[i+1:]
	if j := strings.Index(rest, "\n\n"); j >= 0 {
		rest = rest[:j]
	}
	if j := strings.Index(rest[1:], "\nfrontend "); j >= 0 {
		rest = rest[:j+1]
	}
	if j := strings.Index(rest[1:], "\nbackend "); j >= 0 {
		rest = rest[:j+1]
	}
	return rest
}
