package kube

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// DefaultCoalesceSecrets is how many referenced Secrets of one namespace
// make the watcher use one watch of the namespace's Secrets instead of one
// watch per Secret.
const DefaultCoalesceSecrets = 8

// strippedAnnotation marks a cached Secret whose data was dropped because
// nothing referenced it when it arrived: a namespace watch sees every
// Secret of its namespace, and the daemon keeps only what it serves.
const strippedAnnotation = "perimeter.io/data-not-kept"

// nsSecrets is one watch of all the Secrets of a namespace.
type nsSecrets struct {
	inf  cache.SharedIndexInformer
	stop chan struct{}
	// old keeps serving until inf has completed its first list: a new
	// reference to a Secret cached without its data needs a new list.
	old *nsSecrets
}

func (n *nsSecrets) close() {
	if n.old != nil {
		n.old.close()
		n.old = nil
	}
	close(n.stop)
}

// current is the watch to read: inf once it has synced, else the one it
// replaces (nil when none).
func (n *nsSecrets) current() *nsSecrets {
	if n.inf.HasSynced() {
		if n.old != nil {
			n.old.close()
			n.old = nil
		}
		return n
	}
	if n.old != nil && n.old.inf.HasSynced() {
		return n.old
	}
	return nil
}

// startNamespaceSecrets starts a watch of ns's Secrets; only referenced
// ones keep their data and signal changes.
func (w *Watcher) startNamespaceSecrets(ns string) *nsSecrets {
	f := informers.NewSharedInformerFactoryWithOptions(w.cs, w.opts.Resync, informers.WithNamespace(ns),
		informers.WithTransform(w.keepWantedSecret))
	inf := f.Core().V1().Secrets().Informer()
	changed := func(objs ...any) {
		for _, o := range objs {
			if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			if s, ok := o.(*corev1.Secret); ok && w.isWanted(s.Namespace+"/"+s.Name) {
				w.markOther()
				w.signal()
				return
			}
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { changed(o) },
		UpdateFunc: func(old, cur any) { changed(old, cur) },
		DeleteFunc: func(o any) { changed(o) },
	})
	n := &nsSecrets{inf: inf, stop: make(chan struct{})}
	stop, ctxDone := n.stop, w.ctx.Done()
	merged := make(chan struct{})
	go func() {
		select {
		case <-stop:
		case <-ctxDone:
		}
		close(merged)
	}()
	go inf.Run(merged)
	go w.signalSynced(merged, inf)
	return n
}

// keepWantedSecret is the namespace watch's transform: a Secret nothing
// references is cached without its data.
func (w *Watcher) keepWantedSecret(o any) (any, error) {
	o, _ = model.StripUnread(o)
	s, ok := o.(*corev1.Secret)
	if !ok || w.isWanted(s.Namespace+"/"+s.Name) {
		return o, nil
	}
	s.Data, s.StringData = nil, nil
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations[strippedAnnotation] = "true"
	return s, nil
}

func (w *Watcher) isWanted(ref string) bool {
	w.wantedMu.RLock()
	defer w.wantedMu.RUnlock()
	return w.wanted[ref]
}

// needsRelist: a newly referenced Secret of the namespace is cached
// without its data.
func (n *nsSecrets) needsRelist(ns string, want, before map[string]bool) bool {
	cur := n.current()
	if cur == nil {
		return false
	}
	for r := range want {
		if before[r] || !strings.HasPrefix(r, ns+"/") {
			continue
		}
		if o, ok, _ := cur.inf.GetStore().GetByKey(r); ok && stripped(o) {
			return true
		}
	}
	return false
}

func stripped(o any) bool {
	s, ok := o.(*corev1.Secret)
	return ok && s.Annotations[strippedAnnotation] != ""
}

// syncNamespaceSecrets starts, restarts and stops the namespace watches for
// want; it returns the namespaces watched as a whole and whether it started
// or stopped any watch.
func (w *Watcher) syncNamespaceSecrets(want, before map[string]bool) (whole map[string]bool, started, dropped bool) {
	perNS := map[string]int{}
	for r := range want {
		ns, _, _ := strings.Cut(r, "/")
		perNS[ns]++
	}
	whole = map[string]bool{}
	if at := w.opts.CoalesceSecrets; at > 0 {
		for ns, n := range perNS {
			if n >= at {
				whole[ns] = true
			}
		}
	}
	for ns, n := range w.nsSecrets {
		if !whole[ns] {
			n.close()
			delete(w.nsSecrets, ns)
			dropped = true
		}
	}
	for ns := range whole {
		n := w.nsSecrets[ns]
		switch {
		case n == nil:
			w.nsSecrets[ns] = w.startNamespaceSecrets(ns)
			started = true
		case n.needsRelist(ns, want, before):
			fresh := w.startNamespaceSecrets(ns)
			switch cur := n.current(); {
			case cur == n: // synced; current() let its predecessor go
				fresh.old = n
			case cur != nil: // n never synced: keep the one serving
				n.old = nil
				close(n.stop)
				fresh.old = cur
			default:
				n.close()
			}
			w.nsSecrets[ns] = fresh
			started = true
		}
	}
	return whole, started, dropped
}
