package haproxy

import (
	"fmt"
	"strings"
	"testing"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

func bigAllowList(n int) model.CIDRList {
	var p []string
	for i := range n {
		p = append(p, fmt.Sprintf("10.%d.%d.0/24", i/256, i%256))
	}
	return model.CIDRList(strings.Join(p, " "))
}

// TestTenantLimitsConfigBudget: a change that would make haproxy.cfg exceed
// MaxConfigSize keeps the grown backend at its last good version with a
// ConfigTooLarge problem, while another backend's change in the same pass
// is applied; the quarantine holds without another check until the
// backend changes again.
func TestTenantLimitsConfigBudget(t *testing.T) {
	u := newUnitDriver(t, Options{MaxConfigSize: 32 << 10})
	victim := oneBackend("ns_victim_80", 2, eps("198.18.0.1"))
	attacker := oneBackend("ns_attacker_80", 2, eps("198.18.0.2"))
	mustApply(t, u.Driver, desired(victim, attacker))

	grown := *attacker
	grown.Features.AllowList = bigAllowList(4096) // ~50 kB of acl lines
	victim2 := oneBackend("ns_victim_80", 2, eps("198.18.0.1"))
	victim2.Balance = "leastconn"
	res := mustApply(t, u.Driver, desired(victim2, &grown))
	if len(res.Quarantined) != 1 {
		t.Fatalf("quarantined %+v, want the attacker's backend", res.Quarantined)
	}
	p := res.Quarantined[0]
	if p.Reason != ReasonConfigTooLarge || p.Object != (model.ObjectRef{Kind: "Service", Namespace: "ns", Name: "attacker"}) || !strings.Contains(p.Message, "max-config-size") {
		t.Fatalf("problem %+v", p)
	}
	cfg := readConfig(t, u.Driver)
	if len(cfg) > 32<<10 || strings.Contains(cfg, "10.0.1.0/24") || !strings.Contains(cfg, "balance leastconn") {
		t.Fatalf("config (%d bytes) lacks the victim's change or has the attacker's:\n%.2000s", len(cfg), cfg)
	}

	// The same again: refused at once, without rendering a check.
	calls := u.checker.count()
	res = mustApply(t, u.Driver, desired(victim2, &grown))
	if len(res.Quarantined) != 1 || res.Quarantined[0].Reason != ReasonConfigTooLarge || u.checker.count() != calls {
		t.Fatalf("repeat: %+v, %d checks", res.Quarantined, u.checker.count()-calls)
	}

	// Shrunk below the budget: applied.
	small := *attacker
	small.Features.AllowList = bigAllowList(16)
	res = mustApply(t, u.Driver, desired(victim2, &small))
	if len(res.Quarantined) != 0 || !strings.Contains(readConfig(t, u.Driver), "10.0.1.0/24") {
		t.Fatalf("small change not applied: %+v", res.Quarantined)
	}

	// Only the global part over budget: nothing to quarantine, the change
	// is refused and the last good configuration stays.
	u2 := newUnitDriver(t, Options{MaxConfigSize: 1024})
	res, err := u2.Apply(t.Context(), desired(victim))
	if err == nil || !strings.Contains(err.Error(), "max-config-size") {
		t.Fatalf("over budget with nothing to quarantine: %v", err)
	}
	if n := len(res.Quarantined); n == 0 || res.Quarantined[n-1].Reason != ReasonConfigTooLarge || res.Quarantined[n-1].Object.Kind != "ConfigMap" {
		t.Fatalf("no ConfigTooLarge problem for the refused change: %+v", res.Quarantined)
	}
}

func TestBackendSizes(t *testing.T) {
	cfg := "global\n  maxconn 1\n\nbackend a from perimeter\n  server x\n\nbackend b\n  x\n#c\nfrontend f\n  y\n"
	s := backendSizes(cfg)
	if s["a"] != len("backend a from perimeter\n  server x\n\n") || s["b"] != len("backend b\n  x\n#c\n") || len(s) != 2 {
		t.Fatalf("sizes %v", s)
	}
}
