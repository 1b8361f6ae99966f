package haproxy

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// Spare backends. A new Service needs a new backend section, and at
// thousands of backends the reload that adds one costs seconds: HAProxy
// parses the whole configuration twice (`haproxy -c`, then the new worker).
// A configuration with many backends therefore declares a few spare
// backends with the settings and server slots most of its backends have. A
// new backend with those settings takes a free spare at run time: its
// endpoints go into the spare's slots and its routes point at the spare,
// with no reload.
//
// The files always hold the final configuration, the new backend under
// its own name and every spare free: the next reload or start (for
// whatever other reason) loads that, and the spares are free again. No
// reload is made only to rename a backend; until one comes, HAProxy's
// statistics show the backend under the spare's name. When the spares run
// out, the next new backend reloads as before; so that a burst finds
// spares, the backends on spares take their own names by a reload once
// half the spares are taken and no spare was taken for spareRefreshDelay.

// pathMaps are the maps whose values the live HAProxy sees renamed to
// spares (liveCommands).
var pathMaps = []string{model.MapExact, model.MapPrefix}

const (
	// spareMinBackends is the size from which a configuration has spares:
	// below it a reload is quick enough.
	spareMinBackends = 500
	// spareCount spares are declared: enough for a burst of new Services
	// between two reloads, few enough to cost nothing (servers in
	// maintenance, no health checks running).
	spareCount  = 32
	sparePrefix = "SPARE_"
	// spareRefreshDelay lets a burst of new Services end before the
	// reload that gives the spares back.
	spareRefreshDelay = 10 * time.Second
)

// spareSet is the spares a configuration declares: count backends of spec
// (without a name), each with spec.Slots server slots.
type spareSet struct {
	spec  backendSpec
	count int
}

// spareName is the section name of spare i; model backend names are lower
// case, so it cannot collide with one.
func spareName(i int) string { return sparePrefix + strconv.Itoa(i+1) }

// shape is a backend's spec without what names it.
func shape(s backendSpec) backendSpec {
	s.Name, s.Namespace, s.Service = "", "", ""
	return s
}

// spareShapeOK: a shape a spare may take. A snippet or an authentication
// userlist may name the backend; tcp backends are routed by the frontend.
func spareShapeOK(s backendSpec) bool {
	return s.Snippet == "" && !s.TCP && s.Features.AuthRealm == ""
}

// chooseSpares picks the spares of a configuration about to be loaded: the
// shape, slots included, that most of its backends share.
func chooseSpares(st *state) spareSet {
	if len(st.backends) < spareMinBackends {
		return spareSet{}
	}
	counts := map[backendSpec]int{}
	for _, b := range st.backends {
		if spareShapeOK(b.spec) {
			counts[shape(b.spec)]++
		}
	}
	var best backendSpec
	n := 0
	for s, c := range counts {
		// Ties are broken by the text of the spec, so the choice does not
		// depend on map order.
		if c > n || c == n && fmt.Sprint(s) < fmt.Sprint(best) {
			best, n = s, c
		}
	}
	if n < 2 || best.Slots == 0 {
		return spareSet{}
	}
	return spareSet{spec: best, count: spareCount}
}

// fits reports whether a backend of spec can be served by one of the spares.
func (s spareSet) fits(spec backendSpec) bool {
	a, b := shape(spec), s.spec
	a.Slots, b.Slots = 0, 0
	return s.count > 0 && a == b && spec.Slots <= s.spec.Slots
}

// backend is spare i as a backend with every slot free.
func (s spareSet) backend(i int) *backend {
	spec := s.spec
	spec.Name = spareName(i)
	return &backend{spec: spec, slots: make([]slot, spec.Slots)}
}

// spareCommands plans serving the backends target adds through free
// spares, when those are its only structural change from cur and each
// fits a spare; ok is false otherwise. live is the new assignment of
// backend names to spares.
func (d *Driver) spareCommands(cur, target *state) (p changePlan, live map[string]string, ok bool) {
	if !d.running.Load() || d.cur == nil || d.dirty || cur.spares.count == 0 || headKeyOf(cur) != headKeyOf(target) {
		return p, nil, false
	}
	var added []string
	for n, tb := range target.backends {
		cb, known := cur.backends[n]
		switch {
		case !known:
			added = append(added, n)
		case cb != tb && cb.spec != tb.spec:
			return p, nil, false
		}
	}
	if len(added) == 0 || len(target.backends)-len(added) != len(cur.backends) {
		return p, nil, false
	}
	taken := map[string]bool{}
	for _, s := range d.live {
		taken[s] = true
	}
	var free []string
	for i := range cur.spares.count {
		if n := spareName(i); !taken[n] {
			free = append(free, n)
		}
	}
	if len(added) > len(free) || !d.spareRoom(len(added)) {
		return p, nil, false
	}
	slices.Sort(added)
	live = maps.Clone(d.live)
	if live == nil {
		live = map[string]string{}
	}
	var cmds []string
	for i, name := range added {
		tb := target.backends[name]
		if !cur.spares.fits(tb.spec) || routedElsewhere(target, name) {
			return p, nil, false
		}
		live[name] = free[i]
		for j, s := range tb.slots {
			if !s.used() {
				continue
			}
			srv := free[i] + "/" + serverName(j)
			cmds = append(cmds, "set server "+srv+" addr "+s.Addr+" port "+strconv.Itoa(s.Port))
			if s.Draining {
				cmds = append(cmds, "set server "+srv+" state drain")
			} else {
				cmds = append(cmds, "set server "+srv+" state ready")
			}
		}
	}
	p.servers = append(serverCommands(cur, target), cmds...)
	p.maps, p.bulk = d.rend.mapCommands(cur, target)
	p.tlsPre, p.tlsPost = d.rend.tlsCommands(cur, target)
	p.cfgChanged = true
	return p, live, true
}

// spareRefresh says whether the reload that gives the spares back is
// due, or else how long until it is (0: none planned).
func (d *Driver) spareRefresh() (due bool, wait time.Duration) {
	if len(d.live) < spareCount/2 || !d.running.Load() {
		return false, 0
	}
	wait = spareRefreshDelay - d.now().Sub(d.spareTaken)
	return wait <= 0, max(wait, 0)
}

// spareRoom reports whether n backends of the spares' shape fit in
// MaxConfigSize, which is otherwise checked on the configuration a reload
// renders: the last rendered size and twice a spare section's, for the
// longer names and the server addresses.
func (d *Driver) spareRoom(n int) bool {
	if d.opts.MaxConfigSize <= 0 {
		return true
	}
	e, ok := d.cache.entries[spareName(0)]
	return ok && d.cache.size+2*n*len(e.text) <= d.opts.MaxConfigSize
}

// routedElsewhere reports whether a map other than the path maps names
// backend name: only path map values are renamed to spares.
func routedElsewhere(st *state, name string) bool {
	for mapName, m := range st.maps {
		if slices.Contains(pathMaps, mapName) {
			continue
		}
		for _, v := range m {
			if strings.Contains(v, name) {
				return true
			}
		}
	}
	return false
}

// liveCommands renames, in server and path map commands, the backends the
// live HAProxy serves through spares.
func (d *Driver) liveCommands(cmds []string) []string {
	if len(d.live) == 0 {
		return cmds
	}
	out := make([]string, len(cmds))
	for i, c := range cmds {
		out[i] = d.liveCommand(c)
	}
	return out
}

func (d *Driver) liveCommand(c string) string {
	if rest, ok := strings.CutPrefix(c, "set server "); ok {
		name, srv, ok := strings.Cut(rest, "/")
		if s, taken := d.live[name]; ok && taken {
			return "set server " + s + "/" + srv
		}
		return c
	}
	f := strings.Split(c, " ")
	// add map PATH KEY VALUE, set map PATH KEY VALUE, add map @VER PATH KEY VALUE
	if len(f) < 5 || f[1] != "map" || f[0] != "add" && f[0] != "set" {
		return c
	}
	path := f[len(f)-3]
	if !slices.ContainsFunc(pathMaps, func(m string) bool { return d.rend.mapPath(m) == path }) {
		return c
	}
	if s, taken := d.live[f[len(f)-1]]; taken {
		f[len(f)-1] = s
		return strings.Join(f, " ")
	}
	return c
}
