package haproxy

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// change is one reason going from one state to the next needs a reload.
type change struct {
	kind string // one of the Reload* reasons
	text string // what changed, for logs
}

// changePlan is how to go from one state to the next: a reload when changes
// is not empty, the Runtime API commands otherwise.
type changePlan struct {
	changes []change
	// servers and maps are the server and map entry commands; bulk names
	// the maps replaced as a whole (too many entries changed).
	servers, maps, bulk []string
	// tlsPre runs before servers and maps (a new host has its
	// certificate before it is routed), tlsPost after.
	tlsPre, tlsPost []runtimeStep
	// cfgChanged: haproxy.cfg changes beyond server slots although no
	// reload is needed (a backend served through a spare).
	cfgChanged bool
	// spares: the reload gives the spare backends back (spare.go).
	spares bool
}

// reload reports whether the plan needs a reload.
func (p changePlan) reload() bool { return len(p.changes) > 0 }

// reason is the main reason for the reload: plan orders the changes by
// weight, so it is the first one's kind.
func (p changePlan) reason() string {
	if len(p.changes) == 0 {
		return ""
	}
	return p.changes[0].kind
}

// summary lists the first changes, for logs and Result.Reason.
func (p changePlan) summary() string {
	const maxShown = 4
	texts := make([]string, 0, min(len(p.changes), maxShown))
	for _, c := range p.changes[:min(len(p.changes), maxShown)] {
		texts = append(texts, c.text)
	}
	s := strings.Join(texts, ", ")
	if n := len(p.changes) - maxShown; n > 0 {
		s += fmt.Sprintf(" and %d more", n)
	}
	return s
}

// empty reports whether the plan sends nothing at all.
func (p changePlan) empty() bool {
	return !p.reload() && !p.cfgChanged && len(p.servers)+len(p.maps)+len(p.bulk)+len(p.tlsPre)+len(p.tlsPost) == 0
}

// runtimeSummary counts the commands, for logs.
func (p changePlan) runtimeSummary() string {
	s := fmt.Sprintf("%d server and %d map commands", len(p.servers), len(p.maps))
	if n := len(p.tlsPre) + len(p.tlsPost); n > 0 {
		s += fmt.Sprintf(", %d TLS commands", n)
	}
	if len(p.bulk) > 0 {
		s += ", replace maps " + strings.Join(p.bulk, ",")
	}
	return s
}

// plan decides how to go from cur (what the files hold; nil when nothing
// was written yet) to next, whose slots are assigned: the one place that
// says whether a change reloads and why. behind says the live HAProxy may
// run something else than cur. A reload carries everything, so a plan
// with changes has no commands.
func plan(cur, next *state, r renderer, behind bool) changePlan {
	var p changePlan
	if behind {
		p.changes = append(p.changes, change{ReloadRecovery, "live haproxy behind the files"})
	}
	if cur == nil {
		p.changes = append(p.changes, change{ReloadStart, "first configuration"})
		cur = emptyState()
	}
	p.changes = append(p.changes, structuralChanges(cur, next)...)
	if p.reload() {
		return p
	}
	p.servers = serverCommands(cur, next)
	p.maps, p.bulk = r.mapCommands(cur, next)
	p.tlsPre, p.tlsPost = r.tlsCommands(cur, next)
	return p
}

// structuralChanges lists what haproxy.cfg changes beyond server slot
// contents, heaviest reason first: the head (the sections before the
// backends, as far as the state decides them), then backends.
func structuralChanges(a, b *state) []change {
	var out []change
	ah, bh := headKeyOf(a), headKeyOf(b)
	if ah.global != bh.global {
		out = append(out, change{ReloadGlobal, "global settings"})
	}
	if ah.tls != bh.tls {
		out = append(out, change{ReloadTLS, "https frontend (default certificate, client CA or ssl-passthrough)"})
	}
	if ah.defaultBackend != bh.defaultBackend {
		out = append(out, change{ReloadFrontend, fmt.Sprintf("default backend %q->%q", ah.defaultBackend, bh.defaultBackend)})
	}
	if ah.extras != bh.extras {
		text := "error pages, TCP services, captures or route-acl conditions"
		if ae, be := a.extras, b.extras; !slices.Equal(ae.wildcardDepths, be.wildcardDepths) {
			ae.wildcardDepths, be.wildcardDepths = nil, nil
			text = fmt.Sprintf("wildcard label counts %v->%v", a.extras.wildcardDepths, b.extras.wildcardDepths)
			if ae.key() != be.key() {
				text = "error pages, TCP services, captures, route-acl conditions, " + text
			}
		}
		if ae, be := a.extras, b.extras; ae.mirror != be.mirror {
			ae.mirror = be.mirror
			if ae.key() == be.key() {
				text = fmt.Sprintf("mirroring script loaded %t->%t", a.extras.mirror, b.extras.mirror)
			}
		}
		out = append(out, change{ReloadFrontend, text})
	}
	// Only the backends that changed are sorted (for a stable order): at
	// thousands of backends, sorting all names was most of a plan's cost.
	var changed, slotted []string
	if names, ok := b.changedSince(a); ok {
		// The same backends, only these made afresh.
		for _, n := range names {
			if a.backends[n].spec != b.backends[n].spec {
				changed = append(changed, n)
			}
		}
	} else {
		for n, bb := range b.backends {
			ab, ok := a.backends[n]
			if !ok || ab != bb && ab.spec != bb.spec {
				changed = append(changed, n)
			}
		}
	}
	slices.Sort(changed)
	for _, n := range changed {
		ab, ok := a.backends[n]
		bs := b.backends[n].spec
		switch {
		case !ok:
			out = append(out, change{ReloadBackends, "backend added: " + n})
		case specWithoutSlots(ab.spec) == specWithoutSlots(bs):
			slotted = append(slotted, n)
		default:
			out = append(out, change{ReloadBackends, "backend changed: " + n})
		}
	}
	var removed []string
	if _, ok := b.changedSince(a); !ok {
		for n := range a.backends {
			if _, ok := b.backends[n]; !ok {
				removed = append(removed, n)
			}
		}
	}
	slices.Sort(removed)
	for _, n := range removed {
		out = append(out, change{ReloadBackends, "backend removed: " + n})
	}
	for _, n := range slotted {
		out = append(out, change{ReloadSlots, fmt.Sprintf("backend %s slots %d->%d", n, a.backends[n].spec.Slots, b.backends[n].spec.Slots)})
	}
	return out
}

func specWithoutSlots(s backendSpec) backendSpec {
	s.Slots = 0
	return s
}

// loadedMaps names the maps a frontend of st loads. Only their entries
// change at run time; the others are files for the next start.
func (r renderer) loadedMaps(st *state) []string {
	var out []string
	if len(r.httpBinds) > 0 || r.httpsOn(st) {
		out = append(out, routeMaps...)
	}
	if len(r.httpBinds) > 0 && r.httpsOn(st) {
		out = append(out, model.MapSSLRedirect)
	}
	if (len(r.httpBinds) > 0 || r.httpsOn(st) || r.passthroughOn(st)) && len(st.extras.wildcardDepths) > 0 {
		out = append(out, model.MapGatewayWildcard)
	}
	if r.passthroughOn(st) {
		out = append(out, model.MapSSLPassthrough)
	}
	return out
}

// mapCommands diffs the maps the frontends of next load, entry by entry;
// a map with too many changes is named in bulk, to be replaced atomically.
func (r renderer) mapCommands(cur, next *state) (cmds, bulk []string) {
	for _, name := range r.loadedMaps(next) {
		path := r.mapPath(name)
		old, nw := cur.maps[name], next.maps[name]
		if sameMap(old, nw) {
			continue
		}
		// Keys that may differ: those the change names when next's map
		// was made from cur's, which spares sorting thousands; else all.
		var gone, kept []string
		if keys, ok := next.madeFrom(name, old); ok {
			gone, kept = keys, keys
		} else {
			if maps.Equal(old, nw) {
				continue
			}
			gone, kept = slices.Sorted(maps.Keys(old)), slices.Sorted(maps.Keys(nw))
		}
		var c []string
		for _, k := range gone {
			_, was := old[k]
			if _, ok := nw[k]; was && !ok {
				c = append(c, "del map "+path+" "+k)
			}
		}
		for _, k := range kept {
			v, ok := nw[k]
			if !ok {
				continue
			}
			ov, was := old[k]
			switch {
			case !was:
				c = append(c, "add map "+path+" "+k+" "+v)
			case ov != v:
				c = append(c, "set map "+path+" "+k+" "+v)
			}
		}
		if len(c) > bulkMapOps {
			bulk = append(bulk, name)
			continue
		}
		cmds = append(cmds, c...)
	}
	return cmds, bulk
}
