package haproxy

import (
	"fmt"
	"strings"
	"testing"
)

func budgetState(backends, slots int, check bool, maxconn int) *state {
	st := emptyState()
	st.global.Maxconn = maxconn
	for i := range backends {
		name := fmt.Sprintf("ns_s%d_80", i)
		st.backends[name] = &backend{spec: backendSpec{Name: name, Check: check, Slots: slots}}
	}
	return st
}

// TestFDBudget: maxconn is what the limit leaves after the checked slots;
// checks give way when they leave fewer than minMaxconn connections; a
// maxconn that does not fit is lowered.
func TestFDBudget(t *testing.T) {
	for _, tt := range []struct {
		name                        string
		limit, backends, slots, max int
		check                       bool
		wantMaxconn                 int
		wantChecks                  bool
		wantNote                    string
	}{
		{name: "no limit known", limit: 0, backends: 1000, slots: 42, check: true, wantMaxconn: 0, wantChecks: true},
		{name: "checked slots fit", limit: 20000, backends: 1000, slots: 12, check: true, wantMaxconn: 3500, wantChecks: true},
		{name: "no checks", limit: 20000, backends: 1000, slots: 42, wantMaxconn: 9500},
		{name: "42 per backend at 1,000 backends", limit: 20000, backends: 1000, slots: 42, check: true, wantMaxconn: 9500,
			wantNote: "42000 health-checked server slots do not fit"},
		{name: "a maxconn too large", limit: 20000, backends: 10, slots: 4, check: true, max: 50000, wantMaxconn: 9000, wantChecks: true,
			wantNote: "maxconn 50000 does not fit"},
		{name: "a maxconn that fits", limit: 20000, backends: 10, slots: 4, check: true, max: 5000, wantMaxconn: 5000, wantChecks: true},
		{name: "a large limit", limit: 1 << 20, backends: 10, slots: 4, check: true, wantMaxconn: maxAutoMaxconn, wantChecks: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := budgetState(tt.backends, tt.slots, tt.check, tt.max)
			note := fdBudget(st, tt.limit)
			if st.global.Maxconn != tt.wantMaxconn {
				t.Errorf("maxconn %d, want %d", st.global.Maxconn, tt.wantMaxconn)
			}
			for _, b := range st.backends {
				if b.spec.Check != tt.wantChecks {
					t.Fatalf("backend %s check %v, want %v", b.spec.Name, b.spec.Check, tt.wantChecks)
				}
			}
			if tt.wantNote == "" && note != "" || !strings.Contains(note, tt.wantNote) {
				t.Errorf("note %q, want one with %q", note, tt.wantNote)
			}
		})
	}
}
