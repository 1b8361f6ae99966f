package model

import (
	"cmp"
	"maps"
	"reflect"
	"slices"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// Incremental Ingress updates. At thousands of Ingresses a full Build costs
// tens of milliseconds, most of it spent redoing what did not change; a new
// host on an existing Service would wait for all of it. UpdateIngresses
// applies a change of "plain" Ingresses to the previous result instead,
// and falls back to Build for anything else, so its result is always
// Build's.
//
// A plain Ingress is one whose contribution depends on nothing but itself
// and state it cannot change: no annotations the model reads, no spec.tls,
// no spec.defaultBackend, only valid hosts and paths, and every path routes
// over HTTP to a Service port whose backend variant (variants.go) another,
// older, Ingress already registered by a rule, with no canary, no
// passthrough, no route-acl, no backend TLS Secrets and no problems on its
// users. Its hosts must be named by no other served Ingress, so no conflict
// can be won or lost, and its namespace must keep owning some other host,
// so the namespace defaults of ownerMaps stay as they are. Its routes then
// give exactly the routes, map entries and Served entry a full Build gives
// it, the backends are unchanged (the very same *Backend values), and no
// problem appears or disappears.

// ingressIndex is what a full Build keeps for UpdateIngresses. It belongs
// to one Desired (owner): an update takes it over, so the Desired it was
// made for can no longer be updated incrementally.
type ingressIndex struct {
	owner *Desired
	// b is the Build's builder, for the settings already read (ConfigMap,
	// Services), the class selector and the backend variants with their
	// users. Only those parts are kept.
	b *builder
	// ings are the snapshot's Ingresses, served or not, by reference: an
	// Ingress whose pointer differs in a later snapshot changed.
	ings map[ObjectRef]*networkingv1.Ingress
	// hostUsers counts the served Ingresses naming each host in a rule or
	// a spec.tls entry.
	hostUsers map[string]int
	// nsHosts counts the hosts each namespace owns (builder.hostOwners).
	nsHosts map[string]int
	// routes counts the Routes of each backend.
	routes map[string]int
	// canaries are the backends serving as another backend's canary.
	canaries map[string]bool
	// rest identifies the parts of the snapshot an update must not see
	// changed.
	rest snapshotRest
}

// snapshotRest is what UpdateIngresses checks of the snapshot besides the
// Ingresses, as a guard against a caller whose delta was wrong: the
// pointers of the single objects and the sizes of the lists.
type snapshotRest struct {
	configMap, errorFiles, tcpServices, patternFiles any
	classes, services, secrets, pending, refused     int
}

func restOf(s *Snapshot) snapshotRest {
	return snapshotRest{
		configMap: s.ConfigMap, errorFiles: s.ErrorFiles, tcpServices: s.TCPServices, patternFiles: s.PatternFiles,
		classes: len(s.IngressClasses), services: len(s.Services), secrets: len(s.Secrets),
		pending: len(s.PendingSecrets), refused: len(s.RefusedSecrets),
	}
}

// maxIncremental is the most changed Ingresses UpdateIngresses applies one
// by one; a larger change is a full Build's work anyway.
const maxIncremental = 256

// servesGatewayAPI: routes of every kind share hosts, backends and maps
// with Ingresses (certificates and passthrough hosts too), once a
// GatewayClass of this controller exists. Other controllers' classes, and
// the routes and Gateways that only they serve, change nothing here (a
// cluster often runs a mesh or another gateway beside the edge), and
// Namespaces alone do not count.
func servesGatewayAPI(s *Snapshot, o Options) bool {
	controller := cmp.Or(o.GatewayController, DefaultGatewayController)
	return slices.ContainsFunc(s.GatewayClasses, func(gc *gwv1.GatewayClass) bool {
		return gc != nil && string(gc.Spec.ControllerName) == controller
	})
}

func newIngressIndex(b *builder, served []*networkingv1.Ingress) *ingressIndex {
	s := b.s
	// HTTPRoutes share hosts, backends and maps with Ingresses in ways
	// the plain-Ingress rules above do not cover.
	if servesGatewayAPI(s, b.o) {
		return nil
	}
	x := &ingressIndex{
		owner:     b.d,
		b:         b,
		ings:      make(map[ObjectRef]*networkingv1.Ingress, len(s.Ingresses)),
		hostUsers: make(map[string]int, len(served)),
		nsHosts:   map[string]int{},
		routes:    make(map[string]int, len(b.backends)),
		canaries:  map[string]bool{},
		rest:      restOf(s),
	}
	for _, ing := range s.Ingresses {
		if ing != nil {
			x.ings[ingressRef(ing)] = ing
		}
	}
	for _, ing := range served {
		for _, h := range namedHosts(ing) {
			x.hostUsers[h]++
		}
	}
	for _, ns := range b.hostOwners {
		x.nsHosts[ns]++
	}
	for _, r := range b.d.Routes {
		x.routes[r.Backend]++
	}
	for _, c := range b.d.Maps[MapCanaryBackend] {
		x.canaries[c] = true
	}
	// Drop what only the Build itself needs, so that an index kept across
	// many updates keeps neither the old snapshot's lists nor the first
	// result alive.
	b.claims, b.hostOwners, b.httpHosts, b.passthroughHosts, b.slices, b.gwSplits = nil, nil, nil, nil, nil, nil
	b.ingValues, b.variantKeys, b.secrets, b.d, b.backends = nil, nil, nil, nil, nil
	b.s = &Snapshot{ConfigMap: s.ConfigMap, ErrorFiles: s.ErrorFiles, TCPServices: s.TCPServices, PatternFiles: s.PatternFiles}
	return x
}

// namedHosts lists the hosts ing names in its rules and spec.tls entries,
// as written and lower-case.
func namedHosts(ing *networkingv1.Ingress) []string {
	var out []string
	for _, r := range ing.Spec.Rules {
		out = append(out, r.Host, strings.ToLower(r.Host))
	}
	for _, t := range ing.Spec.TLS {
		for _, h := range t.Hosts {
			out = append(out, strings.ToLower(h))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// UpdateIngresses returns what Build(s, o) returns when prev was built (by
// Build, RefreshEndpoints, UpdateIngresses or TryUpdateIngresses) from a
// snapshot that differs from s only in its Ingresses, and in EndpointSlices
// whose change the caller then passes to RefreshEndpoints. It applies
// changed plain Ingresses (see above) to prev, at a cost that grows with
// the change apart from one look at every Ingress's pointer, and runs
// Build for anything else. prev is not modified, but can no longer be
// updated itself: pass the result next time.
func UpdateIngresses(prev *Desired, s *Snapshot, o Options) *Desired {
	if d := updateIngresses(prev, s, o); d != nil {
		return d
	}
	return Build(s, o)
}

type ingressChange struct {
	ref      ObjectRef
	old, cur *networkingv1.Ingress
}

func updateIngresses(prev *Desired, s *Snapshot, o Options) *Desired {
	if prev == nil || s == nil {
		return nil
	}
	x := prev.inc
	if x == nil || x.owner != prev || restOf(s) != x.rest || !reflect.DeepEqual(o, x.b.o) {
		return nil
	}
	if servesGatewayAPI(s, o) {
		return nil
	}
	var changes []ingressChange
	matched := 0
	for _, ing := range s.Ingresses {
		if ing == nil {
			continue
		}
		ref := ingressRef(ing)
		old, ok := x.ings[ref]
		if ok {
			matched++
		}
		if old != ing {
			changes = append(changes, ingressChange{ref, old, ing})
		}
	}
	if matched < len(x.ings) {
		present := make(map[ObjectRef]bool, len(s.Ingresses))
		for _, ing := range s.Ingresses {
			if ing != nil {
				present[ingressRef(ing)] = true
			}
		}
		for ref, old := range x.ings {
			if !present[ref] {
				changes = append(changes, ingressChange{ref, old, nil})
			}
		}
	}
	return applyIngressChanges(prev, x, changes)
}

// TryUpdateIngresses is UpdateIngresses told what changed instead of given
// a snapshot: current holds, by namespace and name, every Ingress that may
// have changed since prev, as it is now, nil when it is gone. ok is false
// when a Build is needed. Nothing else may have changed since prev but
// EndpointSlices, which are left to RefreshEndpoints. It costs the
// change: no snapshot of every cached object needs to be taken.
func TryUpdateIngresses(prev *Desired, current map[ObjectRef]*networkingv1.Ingress, o Options) (d *Desired, ok bool) {
	if prev == nil {
		return nil, false
	}
	x := prev.inc
	if x == nil || x.owner != prev || !reflect.DeepEqual(o, x.b.o) {
		return nil, false
	}
	var changes []ingressChange
	for ref, cur := range current {
		if old := x.ings[ref]; old != cur {
			changes = append(changes, ingressChange{ref, old, cur})
		}
	}
	d = applyIngressChanges(prev, x, changes)
	return d, d != nil
}

// applyIngressChanges applies changes to prev, or returns nil when one of
// them is not plain.
func applyIngressChanges(prev *Desired, x *ingressIndex, changes []ingressChange) *Desired {
	if len(changes) > maxIncremental {
		return nil
	}
	// Deletions first, then by name: the outcome does not depend on the
	// order (an order that fails falls back to Build), but which path is
	// taken should be reproducible.
	slices.SortFunc(changes, func(a, b ingressChange) int {
		if (a.cur == nil) != (b.cur == nil) {
			if a.cur == nil {
				return -1
			}
			return 1
		}
		return compareRefs(a.ref, b.ref)
	})
	// From here on x changes: prev loses it whatever the outcome.
	x.owner = nil
	d := *prev
	d.inc = nil
	d.MapChanges = nil
	if len(changes) > 0 {
		d.Routes = slices.Clone(prev.Routes)
		d.Served = slices.Clone(prev.Served)
		d.Maps = make(map[string]map[string]string, len(prev.Maps))
		for k, m := range prev.Maps {
			d.Maps[k] = m
		}
		touched := map[string]map[string]bool{}
		for _, c := range changes {
			if !x.apply(&d, c, touched) {
				return nil
			}
		}
		d.MapChanges = make(map[string]MapChange, len(touched))
		for name, keys := range touched {
			ks := make([]string, 0, len(keys))
			for k := range keys {
				ks = append(ks, k)
			}
			slices.Sort(ks)
			d.MapChanges[name] = MapChange{From: prev.Maps[name], To: d.Maps[name], Keys: ks}
		}
	}
	x.owner = &d
	d.inc = x
	return &d
}

// ingressPlan is what a plain Ingress contributes.
type ingressPlan struct {
	ref ObjectRef
	// routes with their backends' state, de-duplicated.
	routes []Route
	states []*backendState
	// hosts are the hosts it names (namedHosts); owned those it routes.
	hosts, owned []string
}

// plan checks that ing is plain by itself, and what it contributes; the
// checks against the other Ingresses are apply's.
func (x *ingressIndex) plan(ing *networkingv1.Ingress) (*ingressPlan, bool) {
	if len(ing.Spec.TLS) > 0 || ing.Spec.DefaultBackend != nil {
		return nil, false
	}
	b := x.b
	// A scratch builder reads ing's annotations and judges its backends
	// with the Build's settings, without touching the Build's state.
	sb := &builder{s: b.s, o: b.o, d: &Desired{}, services: b.services, cmValues: b.cmValues,
		svcValues: b.svcValues, ingValues: map[*networkingv1.Ingress]values{}}
	sb.ingressSettings(ing)
	if len(sb.ingValues[ing]) > 0 || len(sb.d.Problems) > 0 {
		return nil, false
	}
	p := &ingressPlan{ref: ingressRef(ing), hosts: namedHosts(ing)}
	seen := map[routeKey]string{}
	for _, rule := range ing.Spec.Rules {
		if rule.Host == "" || checkHost(rule.Host) != nil {
			return nil, false
		}
		if rule.HTTP == nil {
			continue
		}
		for _, hp := range rule.HTTP.Paths {
			path, typ, err := servedPath(hp.Path, hp.PathType)
			if err != nil {
				return nil, false
			}
			base, _, ok := sb.backendName(p.ref, hp.Backend)
			if !ok {
				return nil, false
			}
			svc := hp.Backend.Service.Name
			if sb.passthrough(ing, svc) {
				return nil, false
			}
			if _, set, ok := sb.routeACL(ing.Namespace, svc); set || ok {
				return nil, false
			}
			if sb.variantKey(ing.Namespace, svc, ing) != "" {
				return nil, false
			}
			key := routeKey{rule.Host, path, typ}
			if prior, dup := seen[key]; dup {
				if prior != base {
					// Build reports the second backend.
					return nil, false
				}
				continue
			}
			seen[key] = base
			st := b.variants[variantID{base: base}]
			if st == nil {
				return nil, false
			}
			p.routes = append(p.routes, Route{Ingress: p.ref, Host: rule.Host, Path: path, PathType: typ, Backend: st.name})
			p.states = append(p.states, st)
			if !slices.Contains(p.owned, rule.Host) {
				p.owned = append(p.owned, rule.Host)
			}
		}
	}
	if len(sb.d.Problems) > 0 {
		return nil, false
	}
	return p, true
}

// backendOK reports whether a plain Ingress may start or stop using st
// without changing anything but its own routes.
func (x *ingressIndex) backendOK(d *Desired, st *backendState, ing *networkingv1.Ingress) bool {
	if st.origin == nil || st.origin == ing || olderIngress(st.origin, ing) >= 0 {
		return false
	}
	if st.userProblems || st.passthrough || x.canaries[st.name] {
		return false
	}
	if _, ok := d.Maps[MapCanaryBackend][st.name]; ok {
		return false
	}
	i, ok := slices.BinarySearchFunc(d.Backends, st.name, func(be *Backend, name string) int { return strings.Compare(be.Name, name) })
	if !ok {
		return false
	}
	be := d.Backends[i]
	return be.TLS.CASecret == "" && be.TLS.CertSecret == ""
}

func (x *ingressIndex) served(ing *networkingv1.Ingress) bool {
	return ing != nil && namespaceAllowed(ing.Namespace, x.b.o) && x.b.sel.serves(ing)
}

// apply applies one changed Ingress to d, whose Routes and Served are
// d's own and whose maps are copied on first write; touched records, by
// map, the keys written (a map is d's own once it is there). It reports
// false, leaving d and x unusable, when the change is not a plain one.
func (x *ingressIndex) apply(d *Desired, c ingressChange, touched map[string]map[string]bool) bool {
	var oldPlan, curPlan *ingressPlan
	if x.served(c.old) {
		p, ok := x.plan(c.old)
		if !ok {
			return false
		}
		oldPlan = p
	}
	if x.served(c.cur) {
		p, ok := x.plan(c.cur)
		if !ok {
			return false
		}
		curPlan = p
	}
	cross := x.b.o.AllowCrossNamespaceHosts
	writable := func(name string) map[string]string {
		m := d.Maps[name]
		if touched[name] == nil {
			// maps.Clone copies the table wholesale, several times
			// faster than re-inserting every key.
			m = maps.Clone(m)
			if m == nil {
				m = map[string]string{}
			}
			d.Maps[name] = m
			touched[name] = map[string]bool{}
		}
		return m
	}
	set := func(name, k, v string) {
		writable(name)[k] = v
		touched[name][k] = true
	}
	del := func(name, k string) {
		if _, ok := d.Maps[name][k]; !ok {
			// Not there (an ssl-redirect entry of a host without
			// one): no copy of the map for nothing.
			return
		}
		delete(writable(name), k)
		touched[name][k] = true
	}
	if oldPlan != nil {
		for _, h := range oldPlan.hosts {
			if x.hostUsers[h] != 1 {
				return false
			}
		}
		for _, st := range oldPlan.states {
			if !x.backendOK(d, st, c.old) {
				return false
			}
		}
		if !cross && x.nsHosts[c.old.Namespace] <= len(oldPlan.owned) {
			return false
		}
		for _, h := range oldPlan.hosts {
			delete(x.hostUsers, h)
		}
		x.nsHosts[c.old.Namespace] -= len(oldPlan.owned)
		for i, r := range oldPlan.routes {
			x.routes[r.Backend]--
			if x.routes[r.Backend] <= 0 {
				return false
			}
			st := oldPlan.states[i]
			if j := slices.Index(st.users, c.old); j >= 0 {
				st.users = slices.Delete(st.users, j, j+1)
			}
		}
		exact, prefix := planMaps(oldPlan)
		for k := range exact {
			del(MapExact, k)
		}
		for k := range prefix {
			del(MapPrefix, k)
		}
		for _, h := range oldPlan.owned {
			if !cross {
				del(MapHostOwner, h)
			}
			del(MapSSLRedirect, h)
		}
		for _, h := range oldPlan.owned {
			i, _ := slices.BinarySearchFunc(d.Routes, h, func(r Route, h string) int { return strings.Compare(r.Host, h) })
			j := i
			for j < len(d.Routes) && d.Routes[j].Host == h {
				if d.Routes[j].Ingress != oldPlan.ref {
					return false
				}
				j++
			}
			d.Routes = slices.Delete(d.Routes, i, j)
		}
		if i, ok := slices.BinarySearchFunc(d.Served, oldPlan.ref, compareRefs); ok {
			d.Served = slices.Delete(d.Served, i, i+1)
		}
	}
	if c.cur == nil {
		delete(x.ings, c.ref)
	} else {
		x.ings[c.ref] = c.cur
	}
	if curPlan == nil {
		return true
	}
	for _, h := range curPlan.hosts {
		if x.hostUsers[h] != 0 {
			return false
		}
	}
	for _, st := range curPlan.states {
		if !x.backendOK(d, st, c.cur) {
			return false
		}
	}
	if !cross && len(curPlan.owned) > 0 && x.nsHosts[c.cur.Namespace] == 0 {
		return false
	}
	for _, h := range curPlan.hosts {
		x.hostUsers[h] = 1
	}
	x.nsHosts[c.cur.Namespace] += len(curPlan.owned)
	for i, r := range curPlan.routes {
		x.routes[r.Backend]++
		st := curPlan.states[i]
		if !slices.Contains(st.users, c.cur) {
			st.users = append(st.users, c.cur)
		}
		j, _ := slices.BinarySearchFunc(d.Routes, r, compareRoutes)
		d.Routes = slices.Insert(d.Routes, j, r)
	}
	exact, prefix := planMaps(curPlan)
	for k, v := range exact {
		set(MapExact, k, v)
	}
	for k, v := range prefix {
		set(MapPrefix, k, v)
	}
	if len(curPlan.owned) > 0 {
		if !cross {
			for _, h := range curPlan.owned {
				set(MapHostOwner, h, "@"+c.cur.Namespace)
			}
		}
		if target, on := x.b.redirectTarget(c.cur); on {
			for _, h := range curPlan.owned {
				set(MapSSLRedirect, h, target)
			}
		}
	}
	i, _ := slices.BinarySearchFunc(d.Served, curPlan.ref, compareRefs)
	d.Served = slices.Insert(d.Served, i, curPlan.ref)
	return true
}

// planMaps are the MapExact and MapPrefix entries of a plain Ingress's
// routes, by buildMaps's rules: its hosts are its own, so no other route
// shares a key with them.
func planMaps(p *ingressPlan) (exact, prefix map[string]string) {
	exact, prefix = map[string]string{}, map[string]string{}
	routeMapEntries(p.routes, exact, prefix)
	return exact, prefix
}
