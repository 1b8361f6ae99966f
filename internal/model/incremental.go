package model

import (
	"cmp"
	"maps"
	"reflect"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
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
// it, the backends it routes to are unchanged (the very same *Backend
// values), and no problem appears or disappears.
//
// A plain Ingress may also be the first to route to a Service port no
// backend serves yet, when the Service is no ExternalName: the Ingress
// registers the port's first variant, which takes the name Build gives
// it, and the backend is finished from the Service, its EndpointSlices
// (through a ServiceLookup) and the ConfigMap, as finishBackend does in a
// Build. Anything that would report a problem or name a Secret (auth,
// backend TLS) or a snippet falls back to Build.
//
// Services change the result only through the backends that use them and
// the Ingresses that name them: a Service that neither a backend, a served
// Ingress nor --default-backend-service names may come, change or go
// without changing anything but the index. A change of any other Service
// needs Build.

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
	// svcUsers counts the served Ingresses naming each Service in a rule
	// or a default backend, whether the rule is served or not: Build
	// judges a Service's annotations for any rule naming it.
	svcUsers map[nsName]int
	// rest identifies the parts of the snapshot an update must not see
	// changed.
	rest snapshotRest

	// During one update: lookup finds the EndpointSlices of a Service
	// getting its first backend; ownBackends says that the result's
	// Backends and bySvc are its own, no longer shared with the previous
	// one.
	lookup      ServiceLookup
	ownBackends bool

	// spare are copies of the owner's maps made by Prepare, while no
	// change waited: an update writes into one rather than copying the
	// map while its change waits.
	spare map[string]spareMap
}

// spareMap is a private copy of map from.
type spareMap struct {
	from, copy map[string]string
}

// Prepare copies, ahead of time, the maps of d the last incremental
// update changed (d.MapChanges), so that the next update of d changing
// them again, as a new host does, finds its copies made: at 10,000 hosts
// two maps of 10,000 entries, 2.5 MB and a millisecond or more, and a
// garbage collection's assists on top when one runs. It is for the
// goroutine that updates d, between changes; it does nothing for a
// Desired no update can start from, and an update of other maps ignores
// the copies.
func Prepare(d *Desired) {
	x := d.inc
	if x == nil || x.owner != d {
		return
	}
	for name := range d.MapChanges {
		m := d.Maps[name]
		if sp, ok := x.spare[name]; m == nil || ok && sameMapObject(sp.from, m) {
			continue
		}
		if x.spare == nil {
			x.spare = map[string]spareMap{}
		}
		x.spare[name] = spareMap{from: m, copy: maps.Clone(m)}
	}
}

func sameMapObject(a, b map[string]string) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// snapshotRest is what UpdateIngresses checks of the snapshot besides the
// Ingresses and Services, as a guard against a caller whose delta was
// wrong: the pointers of the single objects and the sizes of the lists.
type snapshotRest struct {
	configMap, errorFiles, tcpServices, patternFiles any
	classes, secrets, pending, refused               int
}

func restOf(s *Snapshot) snapshotRest {
	return snapshotRest{
		configMap: s.ConfigMap, errorFiles: s.ErrorFiles, tcpServices: s.TCPServices, patternFiles: s.PatternFiles,
		classes: len(s.IngressClasses), secrets: len(s.Secrets),
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
		svcUsers:  map[nsName]int{},
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
		for _, k := range namedServices(ing) {
			x.svcUsers[k]++
		}
	}
	for _, ns := range b.hostOwners {
		x.nsHosts[ns]++
	}
	for _, r := range b.routes {
		x.routes[r.Backend]++
	}
	for _, c := range b.d.Maps[MapCanaryBackend] {
		x.canaries[c] = true
	}
	// Drop what only the Build itself needs, so that an index kept across
	// many updates keeps neither the old snapshot's lists nor the first
	// result alive.
	b.claims, b.hostOwners, b.httpHosts, b.passthroughHosts, b.slices, b.gwSplits = nil, nil, nil, nil, nil, nil
	b.ingValues, b.variantKeys, b.secrets, b.d, b.backends, b.routes = nil, nil, nil, nil, nil, nil
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

// namedServices lists the Services ing names in its rules and default
// backend, once each.
func namedServices(ing *networkingv1.Ingress) []nsName {
	var out []nsName
	add := func(be *networkingv1.IngressBackend) {
		if be != nil && be.Service != nil {
			out = append(out, nsName{ing.Namespace, be.Service.Name})
		}
	}
	add(ing.Spec.DefaultBackend)
	for _, r := range ing.Spec.Rules {
		if r.HTTP == nil {
			continue
		}
		for i := range r.HTTP.Paths {
			add(&r.HTTP.Paths[i].Backend)
		}
	}
	slices.SortFunc(out, func(a, b nsName) int { return cmp.Or(cmp.Compare(a.ns, b.ns), cmp.Compare(a.name, b.name)) })
	return slices.Compact(out)
}

// UpdateIngresses returns what Build(s, o) returns when prev was built (by
// Build, RefreshEndpoints, UpdateIngresses or TryUpdate) from a snapshot
// that differs from s only in its Ingresses and Services, and in
// EndpointSlices whose change the caller then passes to RefreshEndpoints.
// It applies changed plain Ingresses and unused Services (see above) to
// prev, at a cost that grows with the change apart from one look at every
// Ingress's and Service's pointer, and runs Build for anything else. prev
// is not modified, but can no longer be updated itself: pass the result
// next time.
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

type serviceChange struct {
	key      nsName
	old, cur *corev1.Service
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
	var svcs []serviceChange
	matched = 0
	for _, svc := range s.Services {
		if svc == nil {
			continue
		}
		k := nsName{svc.Namespace, svc.Name}
		old, ok := x.b.services[k]
		if ok {
			matched++
		}
		if old != svc {
			svcs = append(svcs, serviceChange{k, old, svc})
		}
	}
	if matched < len(x.b.services) {
		present := make(map[nsName]bool, len(s.Services))
		for _, svc := range s.Services {
			if svc != nil {
				present[nsName{svc.Namespace, svc.Name}] = true
			}
		}
		for k, old := range x.b.services {
			if !present[k] {
				svcs = append(svcs, serviceChange{k, old, nil})
			}
		}
	}
	return applyChanges(prev, x, changes, svcs, snapshotLookup(s))
}

// snapshotLookup is a ServiceLookup reading a whole snapshot.
func snapshotLookup(s *Snapshot) ServiceLookup {
	return func(keys map[ServiceKey]bool) *Snapshot {
		part := &Snapshot{ExternalNames: s.ExternalNames}
		for _, svc := range s.Services {
			if svc != nil && keys[ServiceKey{svc.Namespace, svc.Name}] {
				part.Services = append(part.Services, svc)
			}
		}
		for _, sl := range s.EndpointSlices {
			if k, ok := sliceService(sl); ok && keys[ServiceKey{k.ns, k.name}] {
				part.EndpointSlices = append(part.EndpointSlices, sl)
			}
		}
		return part
	}
}

// ServiceLookup returns the current state of the given Services: those of
// them that exist, their EndpointSlices and the addresses their
// ExternalNames resolve to, as a partial Snapshot.
type ServiceLookup func(keys map[ServiceKey]bool) *Snapshot

// Change is what may have changed since a previous result, as TryUpdate
// takes it.
type Change struct {
	// Ingresses holds, by namespace and name, every Ingress that may have
	// changed, as it is now, nil when it is gone.
	Ingresses map[ObjectRef]*networkingv1.Ingress
	// Services are the Services (the objects, not their EndpointSlices)
	// that may have been added, changed or deleted.
	Services map[ServiceKey]bool
	// Lookup reads the current Services and EndpointSlices: those of
	// Services, and of the Services a changed Ingress routes to first.
	// Without it, Service changes and new backends need a Build.
	Lookup ServiceLookup
}

// TryUpdate is UpdateIngresses told what changed instead of given a
// snapshot. ok is false when a Build is needed. Nothing else may have
// changed since prev but EndpointSlices, which are left to
// RefreshEndpoints. It costs the change: no snapshot of every cached
// object needs to be taken.
func TryUpdate(prev *Desired, c Change, o Options) (d *Desired, ok bool) {
	if prev == nil {
		return nil, false
	}
	x := prev.inc
	if x == nil || x.owner != prev || !reflect.DeepEqual(o, x.b.o) {
		return nil, false
	}
	var changes []ingressChange
	for ref, cur := range c.Ingresses {
		if old := x.ings[ref]; old != cur {
			changes = append(changes, ingressChange{ref, old, cur})
		}
	}
	var svcs []serviceChange
	if len(c.Services) > 0 {
		if c.Lookup == nil || len(c.Services) > maxIncremental {
			return nil, false
		}
		part := c.Lookup(c.Services)
		if part == nil {
			return nil, false
		}
		now := make(map[nsName]*corev1.Service, len(c.Services))
		for _, svc := range part.Services {
			if svc != nil && c.Services[ServiceKey{svc.Namespace, svc.Name}] {
				now[nsName{svc.Namespace, svc.Name}] = svc
			}
		}
		for k := range c.Services {
			n := nsName{k.Namespace, k.Name}
			if old, cur := x.b.services[n], now[n]; old != cur {
				svcs = append(svcs, serviceChange{n, old, cur})
			}
		}
	}
	d = applyChanges(prev, x, changes, svcs, c.Lookup)
	return d, d != nil
}

// TryUpdateIngresses is TryUpdate for a change of Ingresses alone: current
// is Change.Ingresses. Without a lookup, only Service ports that already
// have a backend can take new routes.
func TryUpdateIngresses(prev *Desired, current map[ObjectRef]*networkingv1.Ingress, o Options) (d *Desired, ok bool) {
	return TryUpdate(prev, Change{Ingresses: current}, o)
}

// applyChanges applies changes to prev, or returns nil when one of them is
// not plain or a Service change is not one of an unused Service.
func applyChanges(prev *Desired, x *ingressIndex, changes []ingressChange, svcs []serviceChange, lookup ServiceLookup) *Desired {
	if len(changes)+len(svcs) > maxIncremental {
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
	x.lookup, x.ownBackends = lookup, false
	// The lookup reads caches that change: it is not kept past the update.
	defer func() { x.lookup = nil }()
	d := *prev
	d.inc = nil
	d.MapChanges = nil
	// Services first: an Ingress of the same change may route to one that
	// has just come.
	for _, c := range svcs {
		if !x.changeService(&d, c) {
			return nil
		}
	}
	if len(changes) > 0 {
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

// changeService applies the change of a Service that nothing uses: only
// the index notes it. It reports false when something does.
func (x *ingressIndex) changeService(d *Desired, c serviceChange) bool {
	if len(d.bySvc[ServiceKey{c.key.ns, c.key.name}]) > 0 || x.svcUsers[c.key] > 0 || x.b.o.DefaultBackendService == c.key.ns+"/"+c.key.name {
		return false
	}
	if c.old != nil {
		// Values are cached by object: the old one's are never read again.
		delete(x.b.svcValues, c.old)
	}
	if c.cur == nil {
		delete(x.b.services, c.key)
	} else {
		x.b.services[c.key] = c.cur
	}
	return true
}

// addBackend finishes st, the first backend of its Service port, for ing,
// its one user, and adds it to d, as a Build would have: it reports false
// when it cannot tell that a Build would give the very same backend and
// nothing else (no problem, no Secret, no snippet).
func (x *ingressIndex) addBackend(d *Desired, st *backendState, ing *networkingv1.Ingress) bool {
	k := ServiceKey{st.namespace, st.service}
	if x.lookup == nil {
		return false
	}
	// No backend of that name: no variant of the port either, since the
	// first one takes the plain name (variantName).
	i, taken := slices.BinarySearchFunc(d.Backends, st.name, compareBackendName)
	if taken {
		return false
	}
	part := x.lookup(map[ServiceKey]bool{k: true})
	if part == nil {
		return false
	}
	n := nsName{k.Namespace, k.Name}
	var svc *corev1.Service
	for _, s := range part.Services {
		if s != nil && s.Namespace == k.Namespace && s.Name == k.Name {
			svc = s
		}
	}
	if svc != x.b.services[n] {
		// The caches hold a Service the change does not tell of yet: an
		// Ingress's event may come before its new Service's. Unused, the
		// Service is taken as it is now, and its own change, when it
		// comes, changes nothing.
		if svc == nil || !x.changeService(d, serviceChange{n, x.b.services[n], svc}) {
			return false
		}
	}
	// The resolver learns an ExternalName from full snapshots only.
	if svc == nil || svc.Spec.Type == corev1.ServiceTypeExternalName {
		return false
	}
	var sls []*discoveryv1.EndpointSlice
	for _, sl := range part.EndpointSlices {
		if n, ok := sliceService(sl); ok && n.ns == k.Namespace && n.name == k.Name {
			sls = append(sls, sl)
		}
	}
	fb := &builder{s: x.b.s, o: x.b.o, d: &Desired{}, services: x.b.services,
		slices: map[nsName][]*discoveryv1.EndpointSlice{n: sls}, cmValues: x.b.cmValues,
		ingValues: map[*networkingv1.Ingress]values{}, svcValues: x.b.svcValues}
	st.users = []*networkingv1.Ingress{ing}
	be := fb.finishBackend(st)
	if len(fb.d.Problems) > 0 || st.userProblems || len(fb.d.SecretRefs) > 0 ||
		be.TLS.CASecret != "" || be.TLS.CertSecret != "" || len(be.HTTP.Snippet) > 0 {
		return false
	}
	if !x.ownBackends {
		d.Backends = slices.Clone(d.Backends)
		d.bySvc = maps.Clone(d.bySvc)
		if d.bySvc == nil {
			d.bySvc = map[ServiceKey][]string{}
		}
		x.ownBackends = true
	}
	d.Backends = slices.Insert(d.Backends, i, be)
	d.bySvc[k] = append(slices.Clone(d.bySvc[k]), be.Name)
	x.b.variants[variantID{base: st.base}] = st
	return true
}

// ingressPlan is what a plain Ingress contributes.
type ingressPlan struct {
	ref ObjectRef
	// routes with their backends' state, de-duplicated.
	routes []Route
	states []*backendState
	// hosts are the hosts it names (namedHosts); owned those it routes.
	hosts, owned []string
	// fresh are the states among states of Service ports without a
	// backend yet: the Ingress would register them (addBackend).
	fresh []*backendState
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
			base, port, ok := sb.backendName(p.ref, hp.Backend)
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
				if i := slices.IndexFunc(p.fresh, func(st *backendState) bool { return st.name == base }); i >= 0 {
					st = p.fresh[i]
				} else {
					st = &backendState{name: base, base: base, namespace: ing.Namespace, service: svc, port: port, origin: ing}
					p.fresh = append(p.fresh, st)
				}
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
			if sp, ok := x.spare[name]; ok && m != nil && sameMapObject(sp.from, m) {
				// Copied ahead by Prepare, and handed out once.
				m = sp.copy
				delete(x.spare, name)
			} else {
				// maps.Clone copies the table wholesale, several times
				// faster than re-inserting every key.
				m = maps.Clone(m)
			}
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
		if len(oldPlan.fresh) > 0 {
			// Served, yet a Service port it routes to has no backend.
			return false
		}
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
		for _, k := range namedServices(c.old) {
			x.svcUsers[k]--
		}
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
			if !d.Routes.deleteHost(h, oldPlan.ref) {
				return false
			}
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
		if !slices.Contains(curPlan.fresh, st) && !x.backendOK(d, st, c.cur) {
			return false
		}
	}
	if !cross && len(curPlan.owned) > 0 && x.nsHosts[c.cur.Namespace] == 0 {
		return false
	}
	for _, st := range curPlan.fresh {
		if !x.addBackend(d, st, c.cur) {
			return false
		}
	}
	for _, k := range namedServices(c.cur) {
		x.svcUsers[k]++
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
		d.Routes.insert(r)
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
