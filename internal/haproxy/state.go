package haproxy

import (
	"fmt"
	"maps"
	"net"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// state is everything the files on disk describe. Backends with the same
// spec can be moved between states by Runtime API commands alone.
type state struct {
	global         model.Global
	defaultBackend string // "" means the built-in 404 backend
	backends       map[string]*backend
	// maps by name (mapNames): key -> value, a backend name for most.
	maps map[string]map[string]string
	// extras are the error pages, TCP services and capture slots.
	extras extras
	// tls is the https frontend's certificates (tls.go).
	tls tlsState
	// spares are the spare backends (spare.go): chosen at each reload,
	// they are no reason for one.
	spares spareSet
	// rewritten: entries were replaced after desiredState made the state
	// (a new quarantine, the descriptor budget), so it cannot be the base
	// of a quick desiredState (reuseBackends).
	rewritten bool
	// patched are the backends whose entries were given their fallback
	// for a rejection known before (quarantineKnown): a quick
	// desiredState from this state makes them afresh.
	patched []string
	// base and changed: the state was made from base with only the
	// backends named in changed made afresh (reuseBackends).
	base    *state
	changed []string
	// mapChanges are, for some maps, the keys in which they differ from
	// the map they were made from (the model's MapChanges, checked):
	// compared with that map, only these keys need a look.
	mapChanges map[string]mapChange
	// oldIndex is the backend index of the state this one replaced on
	// disk, given up to it: it differs from backends in the names of
	// oldStale alone, so the next quick desiredState brings it up to date
	// instead of copying thousands of entries (ownIndex).
	oldIndex map[string]*backend
	oldStale []string
	// mirrors counts the backends desiredState made that mirror
	// requests (which needs the script, mirror.go): kept up to date by a
	// quick desiredState, since looking at every backend on every
	// endpoint change costs milliseconds at 10,000 backends.
	mirrors int
	// checked is the health-checked slots fdBudget counted, with the
	// slots withSlots added since; checkedOK says it is kept.
	checked   int
	checkedOK bool
}

// ownIndex returns a backend index equal to st's for a state made from st
// to change: the index st's predecessor gave up when there is one (each
// is handed out once), a copy otherwise.
func (st *state) ownIndex() map[string]*backend {
	m := st.oldIndex
	if m == nil {
		return maps.Clone(st.backends)
	}
	for _, n := range st.oldStale {
		m[n] = st.backends[n]
	}
	st.oldIndex, st.oldStale = nil, nil
	return m
}

// committed records that next replaced prev as what the files hold. Made
// from prev by changing some backends (and nothing since), next takes
// prev's index, which no one reads any more, for its own successor
// (ownIndex); either way next forgets prev, so that states do not keep
// their predecessors alive in a chain.
func committed(prev, next *state) {
	if prev != nil && next.base == prev && !next.rewritten && prev != next {
		next.oldIndex, next.oldStale = prev.backends, next.changed
	}
	next.base = nil
	// Nor does it keep the maps its own were made from.
	for name, c := range next.mapChanges {
		next.mapChanges[name] = mapChange{keys: c.keys}
	}
}

// changedSince returns the names of the backends that may differ between
// base and st, when st was made from base by changing those alone; ok is
// false when any backend may differ.
func (st *state) changedSince(base *state) (names []string, ok bool) {
	if base == nil || st.base != base || st.rewritten {
		return nil, false
	}
	return st.changed, true
}

// mapChange says that a state's map is from but for keys (sorted); from
// is nil once the state is committed and no one compares with it.
type mapChange struct {
	from map[string]string
	keys []string
}

// madeFrom reports whether st's map name was made from m by changing
// the keys of its mapChange alone.
func (st *state) madeFrom(name string, m map[string]string) (keys []string, ok bool) {
	c, ok := st.mapChanges[name]
	if !ok || c.from == nil || !sameMap(c.from, m) {
		return nil, false
	}
	return c.keys, true
}

// sameEntries reports whether map name of a and b has the same entries,
// looking only at the keys b's map was changed in when it was made from
// a's.
func sameEntries(a, b *state, name string) bool {
	am, bm := a.maps[name], b.maps[name]
	if sameMap(am, bm) {
		return true
	}
	if keys, ok := b.madeFrom(name, am); ok {
		for _, k := range keys {
			av, aok := am[k]
			bv, bok := bm[k]
			if aok != bok || av != bv {
				return false
			}
		}
		return true
	}
	return maps.Equal(am, bm)
}

// backendSpec is the structural part of a backend: a change needs a reload.
type backendSpec struct {
	Name, Namespace, Service string
	Balance                  string
	Check                    bool
	CheckInterval            time.Duration
	ForwardedFor             bool
	Slots                    int
	// SSL, Proto, CAFile and CrtFile are the server TLS options (tls.go);
	// the files are paths under certs/ named after their content.
	SSL                    bool
	Proto, CAFile, CrtFile string
	// Rules are the rendered HTTP feature rules (feat_http.go) and
	// Snippet the backend-config-snippet, one directive per line; TCP
	// makes it a mode tcp backend.
	Rules, Snippet string
	// SnippetFrom set the snippet: a rejected snippet is reported there.
	SnippetFrom model.ObjectRef
	TCP         bool
	// Mirror: Rules send copies of requests (mirror.go).
	Mirror bool
	// Features are health checks, persistence, client identity, access
	// control, authentication and rate limiting (feat_backend.go).
	Features model.BackendFeatures
}

type backend struct {
	spec backendSpec
	// slots[i] is server SRV_<i+1>.
	slots []slot
	// endpoints is what the model asked for; some may not have a slot yet
	// while a reload that grows the slots is deferred.
	endpoints []model.Endpoint
}

// slot is one server line. An empty Addr is an unused slot.
type slot struct {
	Addr     string
	Port     int
	Draining bool
}

func (s slot) used() bool { return s.Addr != "" }

// hostPort is the address of a slot as haproxy.cfg writes it.
func (s slot) hostPort() string { return net.JoinHostPort(s.Addr, strconv.Itoa(s.Port)) }

// epKey identifies an endpoint (and the slot that holds it).
type epKey struct {
	addr string
	port int
}

func (s slot) key() epKey { return epKey{s.Addr, s.Port} }

func endpointKey(e model.Endpoint) epKey { return epKey{e.Address, e.Port} }

// Names the renderer uses for its own sections. Model backend names are
// lower-case, so upper-case names cannot collide with them.
const (
	builtin404   = model.BackendNotFound
	defaultsName = "perimeter"
	serverPrefix = "SRV_"
)

// routeMaps are the maps the routing rules of both frontends load. The
// canary maps are always loaded, empty or not, so the first canary needs
// no reload.
var routeMaps = []string{model.MapExact, model.MapPrefix, model.MapHostOwner, model.MapCanaryBackend, model.MapCanaryWeight,
	model.MapRouteACLExact, model.MapRouteACLPrefix}

// mapNames are all the map files: the route maps, the ssl-redirect map
// the http frontend loads while https is served, the passthrough map the
// ssl frontend loads (feat_passthrough.go) and the Gateway API wildcard
// map the routing rules load while it has entries (gatewayWildcardActions).
var mapNames = append(slices.Clone(routeMaps), model.MapSSLRedirect, model.MapSSLPassthrough, model.MapGatewayWildcard)

var (
	backendNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,199}$`)
)

func emptyState() *state {
	return &state{
		backends: map[string]*backend{},
		maps:     map[string]map[string]string{model.MapExact: {}, model.MapPrefix: {}},
	}
}

func (s *state) clone() *state {
	c := &state{
		global:         s.global,
		defaultBackend: s.defaultBackend,
		extras:         s.extras,
		spares:         s.spares,
		tls:            s.tls.clone(),
		backends:       make(map[string]*backend, len(s.backends)),
		maps:           make(map[string]map[string]string, len(s.maps)),
	}
	for n, b := range s.backends {
		c.backends[n] = &backend{spec: b.spec, slots: slices.Clone(b.slots), endpoints: slices.Clone(b.endpoints)}
	}
	for n, m := range s.maps {
		c.maps[n] = maps.Clone(m)
	}
	return c
}

// safeToken accepts what may appear as one word in haproxy.cfg, a map file or
// a Runtime API command: printable ASCII without blanks, quotes, backslashes,
// comment or command separators.
func safeToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"'\;#`, c) >= 0 {
			return false
		}
	}
	return true
}

// safeWords is safeToken for a value of several words separated by single
// spaces (a balance algorithm like "url_param userid").
func safeWords(s string) bool {
	if s == "" {
		return false
	}
	for _, w := range strings.Split(s, " ") {
		if !safeToken(w) {
			return false
		}
	}
	return true
}

// safePath accepts a path that can be written unquoted in haproxy.cfg.
func safePath(p string) bool {
	return safeToken(p) && !strings.ContainsAny(p, "{}$%,")
}

// desiredState turns a Desired into a state: it re-checks every value that
// reaches haproxy.cfg, the map files or the Runtime API (defence in depth,
// the model validates too) and reports what it drops.
func desiredState(want *model.Desired) (*state, []model.Problem) {
	return desiredStateMemo(want, nil, nil, nil)
}

// checkMemo keeps the results of desiredState's checks between calls, so
// that a change costs work in proportion to what it changes, not to the
// cluster: at 10,000 backends an endpoint change leaves all but one backend
// and every map as they were.
type checkMemo struct {
	backends map[string]memoBackend
	maps     map[string]memoMap
	// list is what each backend of the last call's want.Backends became
	// (no entry: left out, for the problems said), target the state it
	// made.
	list   []memoBackend
	target *state
	// srcs is each list entry's src, apart: comparing 10,000 pointers
	// in a row reads a tenth of the memory reading them from list does,
	// on every endpoint change. extras are, in order, the indices of the
	// list entries with problems or TLS files, so that gathering those
	// costs what they are, not a pass over every backend.
	srcs   []*model.Backend
	extras []int
	// captures is what captureSlots found for the last call, pems the
	// certificate PEMs that passed safePEM (tlsState.fill).
	captures captureSize
	pems     map[string][]byte
}

// memoBackend is what desiredState made of one model backend.
type memoBackend struct {
	// src is the model's backend the entry was made from: the model hands
	// over the same pointer for a backend that did not change.
	src   *model.Backend
	entry *backend
	// problems are all the entry's problems, files the TLS files it adds.
	problems []model.Problem
	files    []tlsFile
	eps      checkedEndpoints
}

type tlsFile struct {
	path string
	data []byte
}

// memoMap is one checked map and the model's map it was checked from.
type memoMap struct {
	src, m   map[string]string
	problems []model.Problem
}

// sameMap reports whether a and b are the same map object (not merely equal).
func sameMap(a, b map[string]string) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// mapsEqual is maps.Equal with a shortcut for the common case of a map
// handed on unchanged.
func mapsEqual(a, b map[string]string) bool {
	return sameMap(a, b) || maps.Equal(a, b)
}

// sameSlice reports whether a and b are the very same list.
func sameSlice[T any](a, b []T) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

type checkedEndpoints struct {
	src      []model.Endpoint // a copy: the caller's list may be reused
	eps      []model.Endpoint
	problems []model.Problem
}

// checkEndpoints keeps b's endpoints that are an IP address and a port,
// in canonical form, each once. When all of them are, which is the rule,
// it returns b.Endpoints itself, and an address already in canonical form
// is kept as the model's string: at 100,000 endpoints, copies of either
// would be megabytes held for nothing.
func checkEndpoints(b *model.Backend, reject func(format string, args ...any)) []model.Endpoint {
	seen := make(map[epKey]bool, len(b.Endpoints))
	eps := b.Endpoints[:0:0]
	same := true
	for i, e := range b.Endpoints {
		ip := net.ParseIP(e.Address)
		if ip == nil || e.Port < 1 || e.Port > 65535 {
			reject("backend %s: endpoint %s port %d is not an IP address and port", b.Name, e.Address, e.Port)
		} else if s := ip.String(); s != e.Address {
			e.Address = s
		} else if !seen[endpointKey(e)] {
			seen[endpointKey(e)] = true
			if !same {
				eps = append(eps, e)
			}
			continue
		}
		// Not kept as it is: from here on eps is a list of its own.
		if same {
			same = false
			eps = slices.Clone(b.Endpoints[:i])
		}
		if ip == nil || e.Port < 1 || e.Port > 65535 || seen[endpointKey(e)] {
			continue
		}
		seen[endpointKey(e)] = true
		eps = append(eps, e)
	}
	if same {
		return b.Endpoints
	}
	return eps
}

// desiredStateMemo is desiredState reusing memo (nil: none), which then
// holds this call's results only. A backend made from the same model
// pointer as last time gets last time's entry itself when from (nil: none)
// still holds that entry, and later steps skip it by pointer. When from is
// the state the last call made, untouched, and want lists the same
// backends in the same order, only the changed pointers are looked at
// (reuseBackends): an endpoint change then costs a copy of the backend
// index rather than thousands of lookups. Names in except are always made
// afresh (HAProxy refused their last version, so from holds a fallback).
func desiredStateMemo(want *model.Desired, memo *checkMemo, from *state, except map[string]rejection) (*state, []model.Problem) {
	st := emptyState()
	var problems []model.Problem
	reject := func(obj model.ObjectRef, format string, args ...any) {
		problems = append(problems, model.Problem{Object: obj, Reason: ReasonConfigRejected, Message: fmt.Sprintf(format, args...)})
	}
	if want == nil {
		return st, nil
	}
	st.global = want.Global
	if st.global.Maxconn < 0 {
		st.global.Maxconn = 0
	}
	if st.global.Nbthread < 0 {
		st.global.Nbthread = 0
	}
	var prev checkMemo
	if memo != nil {
		prev = *memo
		*memo = checkMemo{maps: make(map[string]memoMap, len(mapNames))}
	}
	// sameSet: the backends are those of the last call, each as TCP or not
	// as it was, which is all a map entry's check looks at.
	sameSet := false
	var list []memoBackend
	var srcs []*model.Backend
	var extras []int
	// quickCaptures: no backend with captures changed, so the capture
	// slots are the last call's.
	var captures captureSize
	quickCaptures := false
	if fast, changed, captured, ok := reuseBackends(want, &prev, from, except); ok {
		captures, quickCaptures = prev.captures, !captured
		// prev is not used again: its list, sources and index are
		// updated in place.
		list, srcs, sameSet = fast, prev.srcs, true
		extras = mergeExtras(prev.extras, changed, list)
		st.backends = from.ownIndex()
		st.base = from
		st.mirrors = from.mirrors
		for _, i := range changed {
			m := list[i]
			sameSet = sameSet && m.entry.spec.TCP == st.backends[m.src.Name].spec.TCP
			// Counted from what the last call made, as from.mirrors
			// was: from's own entry may be a fallback since.
			if old := prev.backends[m.src.Name].entry; old != nil && old.spec.Mirror {
				st.mirrors--
			}
			if m.entry.spec.Mirror {
				st.mirrors++
			}
			st.backends[m.src.Name] = m.entry
			st.changed = append(st.changed, m.src.Name)
			prev.backends[m.src.Name] = m
			srcs[i] = m.src
		}
		if memo != nil {
			memo.backends = prev.backends
		}
	} else {
		st.backends = make(map[string]*backend, len(want.Backends))
		list = make([]memoBackend, len(want.Backends))
		if memo != nil {
			memo.backends = make(map[string]memoBackend, len(want.Backends))
		}
		sameSet = memo != nil
		for i, b := range want.Backends {
			if b == nil {
				continue
			}
			if _, dup := st.backends[b.Name]; dup {
				list[i].problems = []model.Problem{{Object: serviceRef(b), Reason: ReasonConfigRejected,
					Message: fmt.Sprintf("backend %s appears twice; the first one is used", b.Name)}}
				continue
			}
			pm, known := prev.backends[b.Name]
			_, refused := except[b.Name]
			m := pm
			if !known || pm.src != b || from == nil || from.backends[b.Name] != pm.entry || refused {
				m = checkBackend(b, pm, known)
			}
			if m.entry == nil {
				list[i].problems = m.problems
				continue
			}
			list[i] = m
			st.backends[b.Name] = m.entry
			if m.entry.spec.Mirror {
				st.mirrors++
			}
			if !known || pm.entry.spec.TCP != m.entry.spec.TCP {
				sameSet = false
			}
			if memo != nil {
				memo.backends[b.Name] = m
			}
		}
		sameSet = sameSet && len(st.backends) == len(prev.backends)
		srcs = make([]*model.Backend, len(list))
		for i := range list {
			srcs[i] = list[i].src
			if hasExtras(&list[i]) {
				extras = append(extras, i)
			}
		}
	}
	for _, i := range extras {
		m := &list[i]
		problems = append(problems, m.problems...)
		for _, f := range m.files {
			st.tls.addFile(f.path, f.data)
		}
	}
	if memo != nil {
		memo.list, memo.target = list, st
		memo.srcs, memo.extras = srcs, extras
	}
	if !quickCaptures {
		captures = captureSlots(want, st)
	}
	if memo != nil {
		memo.captures = captures
	}
	st.extras = featureExtras(want, st, captures, func(format string, args ...any) { reject(model.ObjectRef{Kind: "ConfigMap"}, format, args...) })
	st.extras.routeACLs = routeACLExtras(want, st, reject)
	st.extras.mirror = st.mirrors > 0
	pems := st.tls.fill(want, prev.pems, reject)
	if memo != nil {
		memo.pems = pems
	}
	if want.DefaultBackend != "" {
		if _, ok := st.backends[want.DefaultBackend]; ok {
			st.defaultBackend = want.DefaultBackend
		} else {
			reject(model.ObjectRef{Kind: "Service"}, "default backend %q is not among the backends; answering 404", want.DefaultBackend)
		}
	}
	// Only the maps a frontend may load are kept: an entry in any other
	// map could never route a request.
	for _, name := range mapNames {
		src := want.Maps[name]
		pm, known := prev.maps[name]
		if known && sameSet && sameMap(pm.src, src) {
			st.maps[name] = pm.m
			problems = append(problems, pm.problems...)
			memo.maps[name] = pm
			continue
		}
		if known && sameSet && src != nil && sameMap(pm.m, pm.src) {
			// The last version passed whole: a change the model
			// describes needs only its keys checked.
			if c, ok := want.MapChanges[name]; ok && sameMap(c.From, pm.src) && sameMap(c.To, src) && keysOK(st, name, src, c.Keys) {
				st.maps[name] = src
				if st.mapChanges == nil {
					st.mapChanges = map[string]mapChange{}
				}
				st.mapChanges[name] = mapChange{from: pm.m, keys: c.Keys}
				memo.maps[name] = memoMap{src: src, m: src}
				continue
			}
		}
		before := len(problems)
		m := make(map[string]string, len(src))
		for k, v := range src {
			switch {
			case checkMapLine(k, v) != nil:
				reject(routeRef(want, k), "map %s: entry %.80q: %v; dropped", name, k, checkMapLine(k, v))
			case name == model.MapGatewayWildcard && !wildcardEntryOK(k, v):
				reject(hostRef(want, v), "map %s: entry %.80q: not a suffix and its wildcard host; dropped", name, k)
			case !mapValueOK(st, name, v):
				reject(routeRef(want, k), "map %s: key %q: value %q is not a backend that exists", name, k, v)
			default:
				m[k] = v
			}
		}
		if src != nil && len(m) == len(src) {
			// Nothing dropped: the model's map itself (results are
			// never changed once made), which lets the next change
			// the model describes skip the check of every entry.
			m = src
		}
		st.maps[name] = m
		if memo != nil {
			memo.maps[name] = memoMap{src: src, m: m, problems: slices.Clone(problems[before:])}
		}
	}
	st.tls.head.passthrough = st.tls.head.enabled && len(st.maps[model.MapSSLPassthrough]) > 0
	st.extras.wildcardDepths = model.WildcardDepths(st.maps[model.MapGatewayWildcard])
	return st, problems
}

// keysOK reports whether the entries of m under keys (missing ones
// included) pass desiredState's checks of map name.
func keysOK(st *state, name string, m map[string]string, keys []string) bool {
	for _, k := range keys {
		if v, ok := m[k]; ok && (checkMapLine(k, v) != nil || !mapValueOK(st, name, v)) {
			return false
		}
	}
	return true
}

// checkBackend makes the entry of model backend b, reusing the checked
// endpoints of pm, what the last call made of the backend of that name
// (known: there was one). An entry nil means b is left out; problems say
// why.
func checkBackend(b *model.Backend, pm memoBackend, known bool) memoBackend {
	var problems []model.Problem
	svc := serviceRef(b)
	reject := func(format string, args ...any) {
		problems = append(problems, model.Problem{Object: svc, Reason: ReasonConfigRejected, Message: fmt.Sprintf(format, args...)})
	}
	if !known && !backendNameRE.MatchString(b.Name) {
		reject("backend name %q is not valid in haproxy.cfg", b.Name)
		return memoBackend{problems: problems}
	}
	spec := backendSpec{
		Name: b.Name, Namespace: b.Namespace, Service: b.Service,
		Balance: b.Balance, Check: b.Check, CheckInterval: b.CheckInterval,
		ForwardedFor: b.ForwardedFor, Slots: b.Slots,
	}
	if spec.Balance != "" && !safeWords(spec.Balance) {
		reject("backend %s: balance %q is not valid; using roundrobin", b.Name, spec.Balance)
		spec.Balance = ""
	}
	if spec.CheckInterval < 0 || !spec.Check {
		spec.CheckInterval = 0
	}
	if !featureSpec(&spec, b, reject) {
		return memoBackend{problems: problems}
	}
	var files tlsState
	backendTLSSpec(&spec, b, &files, reject)
	spec.Features = checkedFeatures(b.Features, func(format string, args ...any) { reject("backend "+b.Name+": "+format, args...) })
	ce := pm.eps
	if known && slices.Equal(ce.src, b.Endpoints) {
		problems = append(problems, ce.problems...)
	} else {
		before := len(problems)
		ce = checkedEndpoints{src: slices.Clone(b.Endpoints)}
		ce.eps = checkEndpoints(b, reject)
		if sameSlice(ce.eps, b.Endpoints) {
			// Nothing dropped or rewritten: one copy serves as both.
			ce.eps = ce.src
		}
		ce.problems = slices.Clip(problems[before:])
	}
	spec.Slots = max(spec.Slots, len(ce.eps))
	return memoBackend{src: b, entry: &backend{spec: spec, endpoints: ce.eps}, problems: problems, files: backendTLSFiles(spec, b), eps: ce}
}

// reuseBackends is the quick way of desiredStateMemo for the common case
// of a few changed backends: want lists the backends of the last call in
// the same order, the changed ones as new pointers under the same names,
// and from is the state the last call made, as it was made but for the
// backends HAProxy refused, which are made afresh. It returns
// what want's backends become, with prev's list and index updated in
// place; captured says a backend with captures changed. ok is false when
// the long way is needed.
func reuseBackends(want *model.Desired, prev *checkMemo, from *state, except map[string]rejection) (list []memoBackend, changed []int, captured, ok bool) {
	if from == nil || from != prev.target || from.rewritten || len(want.Backends) != len(prev.list) || len(prev.srcs) != len(prev.list) {
		return nil, nil, false, false
	}
	// Backends HAProxy refused are made afresh: from holds their
	// fallback, not what the model asks for.
	var remake map[string]bool
	if len(except)+len(from.patched) > 0 {
		remake = make(map[string]bool, len(except)+len(from.patched))
		for n := range except {
			remake[n] = true
		}
		for _, n := range from.patched {
			remake[n] = true
		}
	}
	list = prev.list
	for i, b := range want.Backends {
		src := prev.srcs[i]
		if b == src && (b == nil || remake == nil || !remake[b.Name]) {
			continue
		}
		pm := &list[i]
		if b == nil || pm.src == nil || b.Name != pm.src.Name {
			return nil, nil, false, false
		}
		changed = append(changed, i)
		captured = captured || hasCaptures(b) || hasCaptures(pm.src)
	}
	fresh := make([]memoBackend, len(changed))
	for k, i := range changed {
		if fresh[k] = checkBackend(want.Backends[i], list[i], true); fresh[k].entry == nil {
			return nil, nil, false, false
		}
	}
	for k, i := range changed {
		list[i] = fresh[k]
	}
	return list, changed, captured, true
}

func hasExtras(m *memoBackend) bool { return len(m.problems)+len(m.files) > 0 }

// mergeExtras is extras (sorted indices into list) after the entries at
// changed (sorted) were replaced: each of those is in it when it now has
// extras.
func mergeExtras(extras, changed []int, list []memoBackend) []int {
	out := make([]int, 0, len(extras)+len(changed))
	for len(extras) > 0 || len(changed) > 0 {
		switch {
		case len(changed) == 0 || len(extras) > 0 && extras[0] < changed[0]:
			out = append(out, extras[0])
			extras = extras[1:]
		default:
			i := changed[0]
			changed = changed[1:]
			if len(extras) > 0 && extras[0] == i {
				extras = extras[1:]
			}
			if hasExtras(&list[i]) {
				out = append(out, i)
			}
		}
	}
	return out
}

func serviceRef(b *model.Backend) model.ObjectRef {
	return model.ObjectRef{Kind: "Service", Namespace: b.Namespace, Name: b.Service}
}

// routeRef finds the Ingress that asked for a map key, for the Problem.
func routeRef(want *model.Desired, key string) model.ObjectRef {
	for r := range want.Routes.All() {
		if r.Host+r.Path == key || strings.TrimSuffix(key, "/") == r.Host+strings.TrimSuffix(r.Path, "/") {
			return r.Ingress
		}
	}
	return model.ObjectRef{}
}

// hostRef is the object of the first route for host, or none.
func hostRef(want *model.Desired, host string) model.ObjectRef {
	for r := range want.Routes.All() {
		if r.Host == host {
			return r.Ingress
		}
	}
	return model.ObjectRef{}
}

// assignSlots keeps every endpoint that still exists in its slot, frees the
// slots of the others and fills free slots, lowest first, with new endpoints.
// Endpoints that do not fit in n slots are left out (a reload grows n).
func assignSlots(prev []slot, eps []model.Endpoint, n int) []slot {
	out := make([]slot, n)
	want := make(map[epKey]model.Endpoint, len(eps))
	for _, e := range eps {
		want[endpointKey(e)] = e
	}
	placed := make(map[epKey]bool, len(eps))
	for i, s := range prev {
		if i >= n || !s.used() {
			continue
		}
		if e, ok := want[s.key()]; ok {
			out[i] = slot{Addr: e.Address, Port: e.Port, Draining: e.Draining}
			placed[s.key()] = true
		}
	}
	free := 0
	for _, e := range eps {
		if placed[endpointKey(e)] {
			continue
		}
		for free < n && out[free].used() {
			free++
		}
		if free == n {
			break
		}
		out[free] = slot{Addr: e.Address, Port: e.Port, Draining: e.Draining}
		free++
	}
	return out
}

// withSlots gives every backend of target its slot assignment, starting from
// the assignment in cur so endpoints keep their slots.
func withSlots(cur, target *state) {
	if names, ok := target.changedSince(cur); ok {
		for _, n := range names {
			withSlotsOf(cur, target, n, target.backends[n])
		}
		return
	}
	for n, b := range target.backends {
		withSlotsOf(cur, target, n, b)
	}
}

// withSlotsOf is withSlots for backend n of target, b.
func withSlotsOf(cur, target *state, n string, b *backend) {
	var prev []slot
	if cb, ok := cur.backends[n]; ok {
		if cb == b {
			return
		}
		if cb.spec.Slots > b.spec.Slots && specWithoutSlots(cb.spec) == specWithoutSlots(b.spec) {
			// Fewer endpoints fit in the slots the backend has: a
			// reload only to free slots would cost more than they do.
			if b.spec.Check {
				target.checked += cb.spec.Slots - b.spec.Slots
			}
			b.spec.Slots = cb.spec.Slots
		}
		if cb.spec.Slots == b.spec.Slots && slices.Equal(cb.endpoints, b.endpoints) {
			// The common case: nothing changed for this backend.
			b.slots = cb.slots
			return
		}
		prev = cb.slots
	}
	b.slots = assignSlots(prev, b.endpoints, b.spec.Slots)
}

// runtimeSubset is what can go out now when the reload that target needs
// is deferred: cur's structure, target's endpoints as far as cur's slots
// hold them, and target's map entries that point at backends cur has.
func runtimeSubset(cur, target *state) *state {
	next := cur.clone()
	if next.tls.head == target.tls.head {
		next.tls.defaultCert, next.tls.certs = target.tls.defaultCert, target.tls.certs
	}
	for n, b := range next.backends {
		tb, ok := target.backends[n]
		if !ok {
			continue
		}
		b.endpoints = slices.Clone(tb.endpoints)
		b.slots = assignSlots(b.slots, b.endpoints, b.spec.Slots)
	}
	for name, tm := range target.maps {
		cm := cur.maps[name]
		m := map[string]string{}
		for k, v := range tm {
			switch {
			case mapValueOK(next, name, v):
				m[k] = v
			case cm[k] != "":
				// The key moves to a backend the running config lacks:
				// keep the old route until the reload.
				m[k] = cm[k]
			}
		}
		next.maps[name] = m
	}
	return next
}
