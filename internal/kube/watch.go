package kube

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// WatchOptions select what the Watcher caches.
type WatchOptions struct {
	// ConfigMap, ErrorFiles, TCPServices and PatternFiles are
	// NAMESPACE/NAME or empty.
	ConfigMap, ErrorFiles, TCPServices, PatternFiles string
	// NamespaceWhitelist limits the namespaced informers to these namespaces;
	// NamespaceBlacklist drops objects of these namespaces from snapshots.
	NamespaceWhitelist []string
	NamespaceBlacklist []string
	Resync             time.Duration
	// DefaultSSLCertificate is --default-ssl-certificate: its namespace,
	// like the ConfigMaps', is the operator's, where Secrets are watched
	// whatever the namespace filters say.
	DefaultSSLCertificate string
	// MaxSecrets caps the Secrets watched at once, MaxSecretsPerNamespace
	// those of one namespace; 0 = no cap. A reference over a cap is
	// refused (model.Snapshot.RefusedSecrets) until others go away:
	// watches already running are never dropped for a newer one.
	MaxSecrets, MaxSecretsPerNamespace int
	// CoalesceSecrets: a namespace with at least this many referenced
	// Secrets is watched with one watch of its Secrets instead of one per
	// Secret, keeping the data of the referenced ones only (secrets.go);
	// 0: never.
	CoalesceSecrets int
	// ExternalNames: look up the DNS names of ExternalName Services
	// (extname.go), with ExternalNameResolver (HOST:PORT; empty: the
	// host's resolver) every ExternalNameInterval.
	ExternalNames        bool
	ExternalNameResolver string
	ExternalNameInterval time.Duration
}

// Watcher owns the informers. Every change to a cached object signals
// Changed(); consumers then take a Snapshot and recompute everything from it
// (level-triggered), so a lost or coalesced signal never loses state.
type Watcher struct {
	cs   kubernetes.Interface
	opts WatchOptions
	log  *slog.Logger

	changed chan struct{}

	// statusHook runs on status-only Ingress updates (OnIngressStatus).
	statusHook atomic.Pointer[func(namespace, name string)]

	factories []informers.SharedInformerFactory // one per whitelisted namespace, or one cluster-wide
	classes   informers.SharedInformerFactory   // IngressClasses are cluster-scoped

	ingresses []cache.SharedIndexInformer
	services  []cache.SharedIndexInformer
	slices    []cache.SharedIndexInformer
	ingClass  cache.SharedIndexInformer

	configMaps map[string]cache.SharedIndexInformer // NS/NAME -> single-object informer
	names      *nameResolver                        // nil: ExternalName Services are not resolved
	// gateway is set by WatchGatewayAPI (gateway.go).
	gateway *gatewayWatch

	mu      sync.Mutex
	ctx     context.Context
	secrets map[string]*namedInformer // NS/NAME -> single-object informer
	// refused are the referenced Secrets not watched, with why.
	refused map[string]string
	// watched are the referenced Secrets being watched, by one of secrets
	// or as part of nsSecrets (secrets.go).
	watched   map[string]bool
	nsSecrets map[string]*nsSecrets
	// wanted is watched for the namespace watches' transform, which runs
	// in their own goroutines.
	wantedMu sync.RWMutex
	wanted   map[string]bool

	// dirty is what changed since the last SnapshotDelta.
	dirtyMu sync.Mutex
	dirty   Delta
	// pending: the last SnapshotDelta listed Secrets still loading.
	pending bool
}

// Delta says what changed between two snapshots, so that a change to
// EndpointSlices alone can skip rebuilding everything else.
type Delta struct {
	// Other: something other than Ingresses, Services and EndpointSlices
	// changed (or may have).
	Other bool
	// Ingresses: an Ingress was added, deleted or changed (other than in
	// its status); IngressKeys says which.
	Ingresses   bool
	IngressKeys map[model.ObjectRef]bool
	// Services whose EndpointSlices changed, by the slices'
	// kubernetes.io/service-name label, before and after the change.
	Services map[model.ServiceKey]bool
	// ServiceKeys are the Services themselves that were added, deleted or
	// changed (model.Change.Services).
	ServiceKeys map[model.ServiceKey]bool
}

type namedInformer struct {
	inf  cache.SharedIndexInformer
	stop chan struct{}
}

// NewWatcher prepares the informers; Start runs them.
func NewWatcher(cs kubernetes.Interface, opts WatchOptions, log *slog.Logger) *Watcher {
	if opts.Resync == 0 {
		opts.Resync = 10 * time.Minute
	}
	w := &Watcher{
		cs:         cs,
		opts:       opts,
		log:        log,
		changed:    make(chan struct{}, 1),
		dirty:      Delta{Other: true},
		configMaps: map[string]cache.SharedIndexInformer{},
		secrets:    map[string]*namedInformer{},
		nsSecrets:  map[string]*nsSecrets{},
	}
	// Most of every cached object is fields the model never reads.
	strip := informers.WithTransform(model.StripUnread)
	namespaces := opts.NamespaceWhitelist
	if len(namespaces) == 0 {
		namespaces = []string{corev1.NamespaceAll}
	}
	for _, ns := range namespaces {
		f := informers.NewSharedInformerFactoryWithOptions(cs, opts.Resync, informers.WithNamespace(ns), strip)
		w.factories = append(w.factories, f)
		w.ingresses = append(w.ingresses, w.notifyIngresses(f.Networking().V1().Ingresses().Informer()))
		w.services = append(w.services, w.notifyServices(f.Core().V1().Services().Informer()))
		sl := f.Discovery().V1().EndpointSlices().Informer()
		// EndpointsSnapshot finds a Service's slices without a scan.
		_ = sl.AddIndexers(cache.Indexers{sliceServiceIndex: func(o any) ([]string, error) {
			if k, known, _ := sliceService(o); known {
				return []string{k.Namespace + "/" + k.Name}, nil
			}
			return nil, nil
		}})
		w.slices = append(w.slices, w.notifySlices(sl))
	}
	if opts.ExternalNames {
		w.names = newNameResolver(opts.ExternalNameResolver, opts.ExternalNameInterval, w.namesChanged)
	}
	w.classes = informers.NewSharedInformerFactoryWithOptions(cs, opts.Resync, strip)
	w.ingClass = w.notify(w.classes.Networking().V1().IngressClasses().Informer())
	for _, name := range []string{opts.ConfigMap, opts.ErrorFiles, opts.TCPServices, opts.PatternFiles} {
		if name == "" || w.configMaps[name] != nil {
			continue
		}
		ns, n, _ := strings.Cut(name, "/")
		w.configMaps[name] = w.notify(w.single("configmaps", ns, n, &corev1.ConfigMap{}))
	}
	return w
}

// single builds an informer that lists and watches one named object, so the
// daemon never needs to cache every Secret or ConfigMap of the cluster.
func (w *Watcher) single(resource, ns, name string, obj runtime.Object) cache.SharedIndexInformer {
	lw := cache.NewFilteredListWatchFromClient(w.cs.CoreV1().RESTClient(), resource, ns, func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
	})
	inf := cache.NewSharedIndexInformer(lw, obj, w.opts.Resync, cache.Indexers{})
	_ = inf.SetTransform(model.StripUnread)
	return inf
}

func (w *Watcher) notify(inf cache.SharedIndexInformer) cache.SharedIndexInformer {
	changed := func() {
		w.dirtyMu.Lock()
		w.dirty.Other = true
		w.dirtyMu.Unlock()
		w.signal()
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { changed() },
		UpdateFunc: func(old, cur any) {
			if !resynced(old, cur) {
				changed()
			}
		},
		DeleteFunc: func(any) { changed() },
	})
	return inf
}

// resynced reports an update that is the informer's periodic resync of an
// unchanged object. At 10,000 Services one would otherwise make a full
// Build, and of as many EndpointSlices a refresh of every backend, every
// resync period, for nothing: the caches hold what they held.
func resynced(old, cur any) bool {
	a, ok1 := old.(metav1.Object)
	b, ok2 := cur.(metav1.Object)
	return ok1 && ok2 && a.GetResourceVersion() != "" && a.GetResourceVersion() == b.GetResourceVersion()
}

// notifyIngresses records Ingress changes apart from the others: the model
// applies them to its previous result (model.UpdateIngresses).
func (w *Watcher) notifyIngresses(inf cache.SharedIndexInformer) cache.SharedIndexInformer {
	changed := func(o any) {
		if d, isTomb := o.(cache.DeletedFinalStateUnknown); isTomb {
			o = d.Obj
		}
		w.dirtyMu.Lock()
		w.dirty.Ingresses = true
		if ing, ok := o.(*networkingv1.Ingress); ok {
			if w.dirty.IngressKeys == nil {
				w.dirty.IngressKeys = map[model.ObjectRef]bool{}
			}
			w.dirty.IngressKeys[model.ObjectRef{Kind: "Ingress", Namespace: ing.Namespace, Name: ing.Name}] = true
		} else {
			// Not knowing which Ingress changed, look at all of them.
			w.dirty.Other = true
		}
		w.dirtyMu.Unlock()
		w.signal()
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) { changed(o) },
		UpdateFunc: func(old, cur any) {
			if !statusOnly(old, cur) {
				changed(cur)
			} else if h := w.statusHook.Load(); h != nil {
				ing := cur.(*networkingv1.Ingress)
				(*h)(ing.Namespace, ing.Name)
			}
		},
		DeleteFunc: func(o any) { changed(o) },
	})
	return inf
}

// notifyServices records which Services changed: the model applies a
// change of a Service nothing uses, or a new one with its first Ingress,
// to its previous result (model.TryUpdate).
func (w *Watcher) notifyServices(inf cache.SharedIndexInformer) cache.SharedIndexInformer {
	changed := func(o any) {
		if d, isTomb := o.(cache.DeletedFinalStateUnknown); isTomb {
			o = d.Obj
		}
		w.dirtyMu.Lock()
		if svc, ok := o.(*corev1.Service); ok {
			if w.dirty.ServiceKeys == nil {
				w.dirty.ServiceKeys = map[model.ServiceKey]bool{}
			}
			w.dirty.ServiceKeys[model.ServiceKey{Namespace: svc.Namespace, Name: svc.Name}] = true
		} else {
			w.dirty.Other = true
		}
		w.dirtyMu.Unlock()
		w.signal()
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: changed,
		UpdateFunc: func(old, cur any) {
			if !resynced(old, cur) {
				changed(cur)
			}
		},
		DeleteFunc: changed,
	})
	return inf
}

// ChangedIngresses looks up the Ingresses of a Delta's IngressKeys in the
// caches: nil for one that is gone (or in a blacklisted namespace), as
// model.TryUpdate takes them.
func (w *Watcher) ChangedIngresses(keys map[model.ObjectRef]bool) map[model.ObjectRef]*networkingv1.Ingress {
	out := make(map[model.ObjectRef]*networkingv1.Ingress, len(keys))
	for k := range keys {
		var ing *networkingv1.Ingress
		if !slices.Contains(w.opts.NamespaceBlacklist, k.Namespace) {
			ing = w.Ingress(k.Namespace, k.Name)
		}
		out[k] = ing
	}
	return out
}

// OnIngressStatus makes f run when an Ingress's status alone changes
// (which is no change for the model): the status writer checks it again.
func (w *Watcher) OnIngressStatus(f func(namespace, name string)) { w.statusHook.Store(&f) }

// statusOnly reports an Ingress update that changed nothing but its status,
// which the model does not read: the status writer's own writes, 10,000 of
// them after a start at that scale, would otherwise each rebuild everything.
func statusOnly(old, cur any) bool {
	a, ok1 := old.(*networkingv1.Ingress)
	b, ok2 := cur.(*networkingv1.Ingress)
	if !ok1 || !ok2 {
		return false
	}
	return a.Generation == b.Generation && a.UID == b.UID &&
		maps.Equal(a.Annotations, b.Annotations) && maps.Equal(a.Labels, b.Labels) &&
		a.DeletionTimestamp.Equal(b.DeletionTimestamp) && reflect.DeepEqual(a.Spec, b.Spec)
}

// notifySlices records which Services' EndpointSlices changed. Informers
// update their store before calling handlers, so a change recorded after
// SnapshotDelta took the dirty set is either in that snapshot or in the
// next delta.
func (w *Watcher) notifySlices(inf cache.SharedIndexInformer) cache.SharedIndexInformer {
	changed := func(objs ...any) {
		w.dirtyMu.Lock()
		for _, o := range objs {
			k, known, ok := sliceService(o)
			switch {
			case !ok:
				w.dirty.Other = true
			case known:
				if w.dirty.Services == nil {
					w.dirty.Services = map[model.ServiceKey]bool{}
				}
				w.dirty.Services[k] = true
			}
		}
		w.dirtyMu.Unlock()
		w.signal()
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) { changed(o) },
		UpdateFunc: func(old, cur any) {
			if !resynced(old, cur) {
				changed(old, cur)
			}
		},
		DeleteFunc: func(o any) { changed(o) },
	})
	return inf
}

// sliceService reads the Service an EndpointSlice event is about; known is
// false for a slice of no Service, which the model ignores, and ok is false
// for an object that is not a slice.
func sliceService(o any) (k model.ServiceKey, known, ok bool) {
	if d, isTomb := o.(cache.DeletedFinalStateUnknown); isTomb {
		o = d.Obj
	}
	sl, isSlice := o.(*discoveryv1.EndpointSlice)
	if !isSlice || sl == nil {
		return k, false, false
	}
	name := sl.Labels[discoveryv1.LabelServiceName]
	if name == "" {
		return k, false, true
	}
	return model.ServiceKey{Namespace: sl.Namespace, Name: name}, true, true
}

// namesChanged records Services whose ExternalName resolved differently:
// to the model, the same as a change of their EndpointSlices.
func (w *Watcher) namesChanged(services []model.ServiceKey) {
	w.dirtyMu.Lock()
	if w.dirty.Services == nil {
		w.dirty.Services = map[model.ServiceKey]bool{}
	}
	for _, k := range services {
		w.dirty.Services[k] = true
	}
	w.dirtyMu.Unlock()
	w.signal()
}

func (w *Watcher) signal() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// Changed signals (coalesced) that some cached object changed.
func (w *Watcher) Changed() <-chan struct{} { return w.changed }

// Start runs the informers until ctx ends and waits for their first sync.
func (w *Watcher) Start(ctx context.Context) error {
	w.mu.Lock()
	w.ctx = ctx
	w.mu.Unlock()
	synced := []cache.InformerSynced{w.ingClass.HasSynced}
	for _, f := range w.factories {
		f.Start(ctx.Done())
	}
	w.classes.Start(ctx.Done())
	if w.names != nil {
		w.names.start(ctx)
	}
	for _, infs := range [][]cache.SharedIndexInformer{w.ingresses, w.services, w.slices} {
		for _, inf := range infs {
			synced = append(synced, inf.HasSynced)
		}
	}
	for _, inf := range w.configMaps {
		go inf.Run(ctx.Done())
		synced = append(synced, inf.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("informer caches did not sync: %w", context.Cause(ctx))
	}
	if w.gateway != nil && (!w.startGateway(ctx) || !w.gateway.complete()) {
		go w.discoverGateway(ctx)
	}
	return nil
}

// Synced reports whether every informer, including the Secret watches
// started so far, has completed its first list.
func (w *Watcher) Synced() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.secrets {
		if !s.inf.HasSynced() {
			return false
		}
	}
	for _, n := range w.nsSecrets {
		if n.current() == nil {
			return false
		}
	}
	return true
}

// WatchSecrets makes the set of watched Secrets refs (NS/NAME), within the
// namespace filters and the caps: new ones get an informer, ones no longer
// referenced are dropped, so Secrets that nothing served refers to are
// never read. It reports whether it started a watch or refused another
// set of references: a snapshot taken now lists a started Secret as
// pending and the refused ones as refused.
func (w *Watcher) WatchSecrets(refs []string) (changed bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ctx == nil {
		return false
	}
	want, refused := w.selectSecrets(refs)
	if !maps.Equal(refused, w.refused) {
		w.refused = refused
		changed = true
		for r, why := range refused {
			w.log.Warn("secret not watched", "secret", r, "why", why)
		}
	}
	// The transform keeps the data of what is wanted from now on; a
	// namespace watch that dropped it before lists again.
	before := w.watched
	w.wantedMu.Lock()
	w.wanted = want
	w.wantedMu.Unlock()
	w.watched = want
	whole, started, dropped := w.syncNamespaceSecrets(want, before)
	for r, s := range w.secrets {
		ns, _, _ := strings.Cut(r, "/")
		if !want[r] || whole[ns] {
			close(s.stop)
			delete(w.secrets, r)
			dropped = true
		}
	}
	for r := range want {
		ns, name, _ := strings.Cut(r, "/")
		if w.secrets[r] != nil || whole[ns] {
			continue
		}
		s := &namedInformer{inf: w.notify(w.single("secrets", ns, name, &corev1.Secret{})), stop: make(chan struct{})}
		stop := s.stop
		ctxDone := w.ctx.Done()
		merged := make(chan struct{})
		go func() {
			select {
			case <-stop:
			case <-ctxDone:
			}
			close(merged)
		}()
		go s.inf.Run(merged)
		go w.signalSynced(merged, s.inf)
		w.secrets[r] = s
		started = true
	}
	// A dropped Secret leaves the snapshots without an event.
	if started || dropped || changed {
		w.markOther()
	}
	return started || changed
}

// selectSecrets splits refs into those to watch and those refused, with
// why. Secrets already watched keep their watch; new ones are taken in
// order until a cap is reached, so that a namespace referencing thousands
// of Secrets cannot take the watches of another (the per-namespace cap)
// nor of the operator (whose watches start first).
func (w *Watcher) selectSecrets(refs []string) (want map[string]bool, refused map[string]string) {
	want = map[string]bool{}
	operator := map[string]bool{}
	for _, name := range []string{w.opts.ConfigMap, w.opts.ErrorFiles, w.opts.TCPServices, w.opts.PatternFiles, w.opts.DefaultSSLCertificate} {
		if ns, _, ok := strings.Cut(name, "/"); ok {
			operator[ns] = true
		}
	}
	perNS := map[string]int{}
	total := 0
	var fresh []string
	for _, r := range slices.Compact(slices.Sorted(slices.Values(refs))) {
		ns, name, ok := strings.Cut(r, "/")
		if !ok || ns == "" || name == "" {
			continue
		}
		if !operator[ns] && !namespaceServed(ns, w.opts) {
			if refused == nil {
				refused = map[string]string{}
			}
			refused[r] = fmt.Sprintf("namespace %s is not served (--namespace-whitelist, --namespace-blacklist)", ns)
			continue
		}
		if !w.watched[r] {
			fresh = append(fresh, r)
			continue
		}
		want[r] = true
		perNS[ns]++
		total++
	}
	// The operator's Secrets first: a tenant's references never take the
	// default certificate's watch.
	slices.SortStableFunc(fresh, func(a, b string) int {
		na, _, _ := strings.Cut(a, "/")
		nb, _, _ := strings.Cut(b, "/")
		switch {
		case operator[na] == operator[nb]:
			return 0
		case operator[na]:
			return -1
		}
		return 1
	})
	for _, r := range fresh {
		ns, _, _ := strings.Cut(r, "/")
		why := ""
		switch {
		case w.opts.MaxSecrets > 0 && total >= w.opts.MaxSecrets:
			why = fmt.Sprintf("%d Secrets are watched already, the most --max-watched-secrets allows", total)
		case w.opts.MaxSecretsPerNamespace > 0 && perNS[ns] >= w.opts.MaxSecretsPerNamespace:
			why = fmt.Sprintf("%d Secrets of namespace %s are watched already, the most --max-watched-secrets-per-namespace allows", perNS[ns], ns)
		}
		if why != "" {
			if refused == nil {
				refused = map[string]string{}
			}
			refused[r] = why
			continue
		}
		want[r] = true
		perNS[ns]++
		total++
	}
	return want, refused
}

// namespaceServed applies the namespace filters.
func namespaceServed(ns string, o WatchOptions) bool {
	if slices.Contains(o.NamespaceBlacklist, ns) {
		return false
	}
	return len(o.NamespaceWhitelist) == 0 || slices.Contains(o.NamespaceWhitelist, ns)
}

// signalSynced starts a pass once inf has completed its first list: a
// watch of a Secret that does not exist syncs without any event, and the
// pass that reports it missing would otherwise wait for an unrelated change.
func (w *Watcher) signalSynced(stop <-chan struct{}, inf cache.SharedIndexInformer) {
	if cache.WaitForCacheSync(stop, inf.HasSynced) {
		w.markOther()
		w.signal()
	}
}

func (w *Watcher) markOther() {
	w.dirtyMu.Lock()
	w.dirty.Other = true
	w.dirtyMu.Unlock()
}

// SnapshotDelta is Snapshot with what changed since the previous
// SnapshotDelta (everything, the first time). The dirty state is taken
// before the caches are read, so a change is never lost between the two:
// at worst it is reported again next time.
func (w *Watcher) SnapshotDelta() (*model.Snapshot, Delta) {
	w.dirtyMu.Lock()
	d := w.dirty
	w.dirty = Delta{}
	w.dirtyMu.Unlock()
	s := w.Snapshot()
	// A Secret's watch completing its first list changes PendingSecrets
	// without any event when the Secret does not exist.
	pending := len(s.PendingSecrets) > 0
	w.dirtyMu.Lock()
	if pending || w.pending {
		d.Other = true
	}
	w.pending = pending
	w.dirtyMu.Unlock()
	return s, d
}

// sliceServiceIndex indexes EndpointSlices by NAMESPACE/NAME of their
// Service.
const sliceServiceIndex = "service"

// TakeDelta is what changed since the previous TakeDelta or SnapshotDelta,
// without a snapshot: an endpoint change then needs only
// EndpointsSnapshot. While referenced Secrets are loading every delta asks
// for a full build (Other), as SnapshotDelta's does.
func (w *Watcher) TakeDelta() Delta {
	w.dirtyMu.Lock()
	defer w.dirtyMu.Unlock()
	d := w.dirty
	w.dirty = Delta{}
	if w.pending {
		d.Other = true
	}
	return d
}

// EndpointsSnapshot is a partial snapshot: the cached Services among keys,
// their EndpointSlices and the addresses their ExternalNames resolved
// to; what model.TryRefreshEndpoints reads. It costs the Services asked
// for, not the size of the caches.
func (w *Watcher) EndpointsSnapshot(keys map[model.ServiceKey]bool) *model.Snapshot {
	s := &model.Snapshot{}
	for k := range keys {
		if slices.Contains(w.opts.NamespaceBlacklist, k.Namespace) {
			continue
		}
		key := k.Namespace + "/" + k.Name
		for _, inf := range w.services {
			if o, ok, _ := inf.GetStore().GetByKey(key); ok {
				s.Services = append(s.Services, o.(*corev1.Service))
			}
		}
		for _, inf := range w.slices {
			objs, _ := inf.GetIndexer().ByIndex(sliceServiceIndex, key)
			for _, o := range objs {
				s.EndpointSlices = append(s.EndpointSlices, o.(*discoveryv1.EndpointSlice))
			}
		}
	}
	if w.names != nil {
		s.ExternalNames = w.names.current(s.Services)
	}
	return s
}

// Snapshot copies the caches' current content. Objects are shared with the
// caches and must not be modified.
func (w *Watcher) Snapshot() *model.Snapshot {
	s := &model.Snapshot{}
	black := map[string]bool{}
	for _, ns := range w.opts.NamespaceBlacklist {
		black[ns] = true
	}
	for _, inf := range w.ingresses {
		for _, o := range inf.GetStore().List() {
			if ing := o.(*networkingv1.Ingress); !black[ing.Namespace] {
				s.Ingresses = append(s.Ingresses, ing)
			}
		}
	}
	for _, inf := range w.services {
		for _, o := range inf.GetStore().List() {
			if svc := o.(*corev1.Service); !black[svc.Namespace] {
				s.Services = append(s.Services, svc)
			}
		}
	}
	if w.names != nil {
		s.ExternalNames = w.names.want(s.Services)
	}
	for _, inf := range w.slices {
		for _, o := range inf.GetStore().List() {
			if es := o.(*discoveryv1.EndpointSlice); !black[es.Namespace] {
				s.EndpointSlices = append(s.EndpointSlices, es)
			}
		}
	}
	for _, o := range w.ingClass.GetStore().List() {
		s.IngressClasses = append(s.IngressClasses, o.(*networkingv1.IngressClass))
	}
	cm := func(name string) *corev1.ConfigMap {
		inf := w.configMaps[name]
		if inf == nil {
			return nil
		}
		for _, o := range inf.GetStore().List() {
			return o.(*corev1.ConfigMap)
		}
		return nil
	}
	s.ConfigMap = cm(w.opts.ConfigMap)
	s.ErrorFiles = cm(w.opts.ErrorFiles)
	s.TCPServices = cm(w.opts.TCPServices)
	s.PatternFiles = cm(w.opts.PatternFiles)
	w.gatewaySnapshot(s)
	w.mu.Lock()
	if len(w.refused) > 0 {
		s.RefusedSecrets = maps.Clone(w.refused)
	}
	for ref, sec := range w.secrets {
		if !sec.inf.HasSynced() {
			s.PendingSecrets = append(s.PendingSecrets, ref)
		}
		for _, o := range sec.inf.GetStore().List() {
			s.Secrets = append(s.Secrets, o.(*corev1.Secret))
		}
	}
	for ref := range w.watched {
		ns, _, _ := strings.Cut(ref, "/")
		n := w.nsSecrets[ns]
		if n == nil {
			continue
		}
		cur := n.current()
		if cur == nil {
			s.PendingSecrets = append(s.PendingSecrets, ref)
			continue
		}
		o, ok, _ := cur.inf.GetStore().GetByKey(ref)
		switch {
		case !ok:
		case stripped(o):
			// Its data arrives with the next list.
			s.PendingSecrets = append(s.PendingSecrets, ref)
		default:
			s.Secrets = append(s.Secrets, o.(*corev1.Secret))
		}
	}
	w.mu.Unlock()
	sort.Strings(s.PendingSecrets)
	// Store order is map order; the model sorts what it needs, but a stable
	// snapshot makes debugging output reproducible.
	sort.Slice(s.Secrets, func(i, j int) bool {
		return s.Secrets[i].Namespace+"/"+s.Secrets[i].Name < s.Secrets[j].Namespace+"/"+s.Secrets[j].Name
	})
	return s
}

// Sizes reports how many objects each cache holds, for metrics.
func (w *Watcher) Sizes() map[string]int {
	n := func(infs []cache.SharedIndexInformer) int {
		t := 0
		for _, inf := range infs {
			t += len(inf.GetStore().ListKeys())
		}
		return t
	}
	w.mu.Lock()
	secrets := len(w.watched)
	watches := len(w.secrets) + len(w.nsSecrets)
	w.mu.Unlock()
	return map[string]int{
		"ingresses":      n(w.ingresses),
		"services":       n(w.services),
		"endpointslices": n(w.slices),
		"ingressclasses": len(w.ingClass.GetStore().ListKeys()),
		"configmaps":     len(w.configMaps),
		"secrets":        secrets,
		"secret_watches": watches,
	}
}

// Lookup finds a cached object for an Event; nil when it is not cached.
func (w *Watcher) Lookup(ref model.ObjectRef) runtime.Object {
	key := ref.Name
	if ref.Namespace != "" {
		key = ref.Namespace + "/" + ref.Name
	}
	var infs []cache.SharedIndexInformer
	switch ref.Kind {
	case "Ingress":
		infs = w.ingresses
	case "Service":
		infs = w.services
	case "IngressClass":
		infs = []cache.SharedIndexInformer{w.ingClass}
	case "ConfigMap":
		if inf := w.configMaps[key]; inf != nil {
			infs = []cache.SharedIndexInformer{inf}
		}
	case "Secret":
		w.mu.Lock()
		if s := w.secrets[key]; s != nil {
			infs = []cache.SharedIndexInformer{s.inf}
		}
		if n := w.nsSecrets[ref.Namespace]; n != nil {
			if cur := n.current(); cur != nil {
				infs = append(infs, cur.inf)
			}
		}
		w.mu.Unlock()
	}
	for _, inf := range infs {
		if o, ok, _ := inf.GetStore().GetByKey(key); ok {
			return o.(runtime.Object)
		}
	}
	return nil
}

// Ingress returns a cached Ingress, or nil (for status writes).
func (w *Watcher) Ingress(namespace, name string) *networkingv1.Ingress {
	for _, inf := range w.ingresses {
		if o, ok, _ := inf.GetStore().GetByKey(namespace + "/" + name); ok {
			return o.(*networkingv1.Ingress)
		}
	}
	return nil
}

// AllIngresses lists every cached Ingress, served or not.
func (w *Watcher) AllIngresses() []*networkingv1.Ingress {
	var out []*networkingv1.Ingress
	for _, inf := range w.ingresses {
		for _, o := range inf.GetStore().List() {
			out = append(out, o.(*networkingv1.Ingress))
		}
	}
	return out
}
