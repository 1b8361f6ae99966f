package kube

import (
	"context"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/cache"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
	gwinformers "sigs.k8s.io/gateway-api/pkg/client/informers/externalversions"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// gatewayResources are the Gateway API v1 resources served; their
// informers start only once the API server serves all of them, so a cluster
// without the CRDs costs nothing and needs no extra permission.
var gatewayResources = []string{"gatewayclasses", "gateways", "httproutes", "referencegrants"}

// DefaultGatewayDiscovery is how often the API server is asked whether the
// Gateway API CRDs have been installed since the last look.
const DefaultGatewayDiscovery = 30 * time.Second

// gatewayWatch holds the Gateway API informers once they run.
type gatewayWatch struct {
	cs       gwclient.Interface
	disc     discovery.DiscoveryInterface
	interval time.Duration

	mu      sync.Mutex
	running bool
	classes cache.SharedIndexInformer
	gws     cache.SharedIndexInformer
	routes  cache.SharedIndexInformer
	grants  cache.SharedIndexInformer
}

// WatchGatewayAPI makes Start look for the Gateway API CRDs (at start, then
// every interval) and watch their objects once they are installed. Call
// it before Start.
func (w *Watcher) WatchGatewayAPI(cs gwclient.Interface, disc discovery.DiscoveryInterface, interval time.Duration) {
	if interval <= 0 {
		interval = DefaultGatewayDiscovery
	}
	w.gateway = &gatewayWatch{cs: cs, disc: disc, interval: interval}
}

// gatewayInstalled asks discovery whether every resource the daemon
// watches is served in gateway.networking.k8s.io/v1.
func (g *gatewayWatch) installed() bool {
	list, err := g.disc.ServerResourcesForGroupVersion(gwv1.GroupVersion.String())
	if err != nil || list == nil {
		return false
	}
	for _, want := range gatewayResources {
		if !slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == want }) {
			return false
		}
	}
	return true
}

// startGateway starts the informers when the CRDs are installed and waits
// for their first list; it reports whether they run.
func (w *Watcher) startGateway(ctx context.Context) bool {
	g := w.gateway
	g.mu.Lock()
	if g.running {
		g.mu.Unlock()
		return true
	}
	g.mu.Unlock()
	if !g.installed() {
		return false
	}
	// Gateway API objects are few next to Services and slices: one
	// cluster-wide watch each, filtered by namespace in the model.
	f := gwinformers.NewSharedInformerFactoryWithOptions(g.cs, w.opts.Resync, gwinformers.WithTransform(model.StripUnread))
	v1 := f.Gateway().V1()
	classes := w.notify(v1.GatewayClasses().Informer())
	gws := w.notify(v1.Gateways().Informer())
	routes := w.notify(v1.HTTPRoutes().Informer())
	grants := w.notify(v1.ReferenceGrants().Informer())
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), classes.HasSynced, gws.HasSynced, routes.HasSynced, grants.HasSynced) {
		return false
	}
	g.mu.Lock()
	g.classes, g.gws, g.routes, g.grants = classes, gws, routes, grants
	g.running = true
	g.mu.Unlock()
	w.log.Info("watching Gateway API objects", "group", gwv1.GroupVersion.String())
	w.markOther()
	w.signal()
	return true
}

// discoverGateway looks for the CRDs until they are found or ctx ends.
func (w *Watcher) discoverGateway(ctx context.Context) {
	t := time.NewTicker(w.gateway.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if w.startGateway(ctx) {
				return
			}
		}
	}
}

// GatewayAPIWatched reports whether the Gateway API objects are watched.
func (w *Watcher) GatewayAPIWatched() bool {
	if w.gateway == nil {
		return false
	}
	w.gateway.mu.Lock()
	defer w.gateway.mu.Unlock()
	return w.gateway.running
}

// gatewaySnapshot adds the cached Gateway API objects to s.
func (w *Watcher) gatewaySnapshot(s *model.Snapshot) {
	g := w.gateway
	if g == nil {
		return
	}
	g.mu.Lock()
	running := g.running
	g.mu.Unlock()
	if !running {
		return
	}
	for _, o := range g.classes.GetStore().List() {
		s.GatewayClasses = append(s.GatewayClasses, o.(*gwv1.GatewayClass))
	}
	for _, o := range g.gws.GetStore().List() {
		s.Gateways = append(s.Gateways, o.(*gwv1.Gateway))
	}
	for _, o := range g.routes.GetStore().List() {
		s.HTTPRoutes = append(s.HTTPRoutes, o.(*gwv1.HTTPRoute))
	}
	for _, o := range g.grants.GetStore().List() {
		s.ReferenceGrants = append(s.ReferenceGrants, o.(*gwv1.ReferenceGrant))
	}
}

// gatewayObject finds a cached Gateway API object for status writes.
func (w *Watcher) gatewayObject(kind, ns, name string) any {
	g := w.gateway
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.running {
		return nil
	}
	var inf cache.SharedIndexInformer
	switch kind {
	case "GatewayClass":
		inf = g.classes
	case "Gateway":
		inf = g.gws
	case "HTTPRoute":
		inf = g.routes
	default:
		return nil
	}
	key := name
	if ns != "" {
		key = ns + "/" + name
	}
	o, ok, _ := inf.GetStore().GetByKey(key)
	if !ok {
		return nil
	}
	return o
}

// gatewayRoutes lists the cached HTTPRoutes.
func (w *Watcher) gatewayRoutes() []*gwv1.HTTPRoute {
	g := w.gateway
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.running {
		return nil
	}
	var out []*gwv1.HTTPRoute
	for _, o := range g.routes.GetStore().List() {
		out = append(out, o.(*gwv1.HTTPRoute))
	}
	return out
}
