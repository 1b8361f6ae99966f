package haproxy

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// ReasonConfigTooLarge is the problem of a backend kept at its last good
// version because the change would make haproxy.cfg exceed MaxConfigSize.
const ReasonConfigTooLarge = "ConfigTooLarge"

// sizeError: the rendered configuration exceeds MaxConfigSize. It is found
// before `haproxy -c`, which would have to parse all of it.
type sizeError struct{ size, max int }

func (e *sizeError) Error() string {
	return fmt.Sprintf("haproxy.cfg would be %d bytes, over --max-config-size=%d", e.size, e.max)
}

// backendSizes measures each backend section of a rendered configuration.
func backendSizes(cfg string) map[string]int {
	out := map[string]int{}
	cur := ""
	for line := range strings.SplitSeq(cfg, "\n") {
		if line != "" && line[0] != ' ' && line[0] != '\t' && line[0] != '#' {
			cur = ""
			if name, ok := strings.CutPrefix(line, "backend "); ok {
				cur, _, _ = strings.Cut(name, " ")
			}
		}
		if cur != "" {
			out[cur] += len(line) + 1
		}
	}
	return out
}

// shrinkToBudget gives new or changed backends their last good version,
// largest first, until the configuration fits again; what is unchanged
// since the last good configuration is never touched, so a tenant growing
// its backends cannot push another's out. It reports whether it changed
// anything: when not, the change as a whole is refused.
func (d *Driver) shrinkToBudget(cfg string, se *sizeError, cur, target *state) ([]model.Problem, bool) {
	sizes := backendSizes(cfg)
	type cand struct {
		name string
		size int
	}
	var cands []cand
	for name, tb := range target.backends {
		if tb.spec != fallbackSpec(cur, tb.spec) {
			cands = append(cands, cand{name, sizes[name]})
		}
	}
	slices.SortFunc(cands, func(a, b cand) int {
		if c := cmp.Compare(b.size, a.size); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	var problems []model.Problem
	excess := se.size - se.max
	for _, c := range cands {
		if excess <= 0 {
			break
		}
		tb := detach(cur, target, c.name)
		fb := fallbackSpec(cur, tb.spec)
		reason := se.Error()
		d.rejected[c.name] = rejection{spec: tb.spec, reason: reason, tooLarge: true}
		problems = append(problems, sizeProblem(cur, tb.spec, reason))
		d.log.Warn("backend kept at its last good version: configuration too large", "backend", c.name, "bytes", c.size, "max", se.max)
		tb.spec = fb
		var prev []slot
		if cb, ok := cur.backends[c.name]; ok {
			prev = cb.slots
		}
		tb.slots = assignSlots(prev, tb.endpoints, fb.Slots)
		// The fallback is rendered too; the next check measures it.
		excess -= c.size
	}
	return problems, len(problems) > 0
}

func sizeProblem(cur *state, spec backendSpec, reason string) model.Problem {
	kept := "its last good version is kept"
	if cur.backends[spec.Name] == nil {
		kept = "it has no servers until the configuration fits"
	}
	return model.Problem{
		Object:  model.ObjectRef{Kind: "Service", Namespace: spec.Namespace, Name: spec.Service},
		Reason:  ReasonConfigTooLarge,
		Message: fmt.Sprintf("backend %s not applied: %s; %s", spec.Name, reason, kept),
	}
}
