package kube

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/informers"
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

// Route kinds watched once discovery serves them too (in v1.6 they are in
// the standard channel, but clusters with older CRDs lack them: GRPCRoute
// came in v1.1); each costs nothing until then.
const (
	grpcRoutesResource = "grpcroutes"
	tlsRoutesResource  = "tlsroutes"
	tcpRoutesResource  = "tcproutes"
)

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
	// nss are the Namespaces, watched with the Gateway API objects because
	// a listener may select its routes' namespaces by label: one small
	// object per namespace, cheaper than starting and stopping a watch as
	// Gateways come and go.
	nss cache.SharedIndexInformer
	// grpc, tls and tcp are the GRPCRoute, TLSRoute and TCPRoute
	// informers, nil until their CRDs are served.
	grpc, tls, tcp cache.SharedIndexInformer
	factory        gwinformers.SharedInformerFactory
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

// served asks discovery which of the daemon's resources are served in
// gateway.networking.k8s.io/v1; nil when the group version is not.
func (g *gatewayWatch) served() map[string]bool {
	list, err := g.disc.ServerResourcesForGroupVersion(gwv1.GroupVersion.String())
	if err != nil || list == nil {
		return nil
	}
	out := map[string]bool{}
	for _, r := range list.APIResources {
		out[r.Name] = true
	}
	return out
}

// installed reports whether every resource the daemon needs is served.
func installed(served map[string]bool) bool {
	for _, want := range gatewayResources {
		if !served[want] {
			return false
		}
	}
	return true
}

// complete reports whether every kind the daemon can watch is watched.
func (g *gatewayWatch) complete() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.running && g.grpc != nil && g.tls != nil && g.tcp != nil
}

// startGateway starts the informers when the CRDs are installed and waits
// for their first list, then the route kinds served since; it reports
// whether the core informers run.
func (w *Watcher) startGateway(ctx context.Context) bool {
	g := w.gateway
	served := g.served()
	g.mu.Lock()
	running := g.running
	g.mu.Unlock()
	started := false
	if !running {
		if !installed(served) {
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
		nsf := informers.NewSharedInformerFactoryWithOptions(w.cs, w.opts.Resync, informers.WithTransform(model.StripUnread))
		nss := w.notify(nsf.Core().V1().Namespaces().Informer())
		f.Start(ctx.Done())
		nsf.Start(ctx.Done())
		if !cache.WaitForCacheSync(ctx.Done(), classes.HasSynced, gws.HasSynced, routes.HasSynced, grants.HasSynced, nss.HasSynced) {
			return false
		}
		g.mu.Lock()
		g.classes, g.gws, g.routes, g.grants, g.nss, g.factory = classes, gws, routes, grants, nss, f
		g.running = true
		g.mu.Unlock()
		w.log.Info("watching Gateway API objects", "group", gwv1.GroupVersion.String())
		started = true
	}
	if w.startGatewayRoutes(ctx, served) || started {
		w.markOther()
		w.signal()
	}
	return true
}

// startGatewayRoutes starts the GRPCRoute, TLSRoute and TCPRoute
// informers whose resources discovery serves, and reports whether it
// started one.
func (w *Watcher) startGatewayRoutes(ctx context.Context, served map[string]bool) bool {
	g := w.gateway
	g.mu.Lock()
	f := g.factory
	needGRPC := g.grpc == nil && served[grpcRoutesResource]
	needTLS := g.tls == nil && served[tlsRoutesResource]
	needTCP := g.tcp == nil && served[tcpRoutesResource]
	g.mu.Unlock()
	if !needGRPC && !needTLS && !needTCP {
		return false
	}
	var grpc, tls, tcp cache.SharedIndexInformer
	var synced []cache.InformerSynced
	if needGRPC {
		grpc = w.notify(f.Gateway().V1().GRPCRoutes().Informer())
		synced = append(synced, grpc.HasSynced)
	}
	if needTLS {
		tls = w.notify(f.Gateway().V1().TLSRoutes().Informer())
		synced = append(synced, tls.HasSynced)
	}
	if needTCP {
		tcp = w.notify(f.Gateway().V1().TCPRoutes().Informer())
		synced = append(synced, tcp.HasSynced)
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return false
	}
	g.mu.Lock()
	if grpc != nil {
		g.grpc = grpc
	}
	if tls != nil {
		g.tls = tls
	}
	if tcp != nil {
		g.tcp = tcp
	}
	g.mu.Unlock()
	w.log.Info("watching Gateway API routes", "grpcroutes", grpc != nil, "tlsroutes", tls != nil, "tcproutes", tcp != nil)
	return true
}

// discoverGateway looks for the CRDs until every kind is watched or ctx
// ends.
func (w *Watcher) discoverGateway(ctx context.Context) {
	t := time.NewTicker(w.gateway.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if w.startGateway(ctx) && w.gateway.complete() {
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
	s.GatewayClasses = listOf[*gwv1.GatewayClass](w.gatewayInformer("GatewayClass"))
	s.Gateways = listOf[*gwv1.Gateway](w.gatewayInformer("Gateway"))
	s.HTTPRoutes = listOf[*gwv1.HTTPRoute](w.gatewayInformer("HTTPRoute"))
	s.GRPCRoutes = listOf[*gwv1.GRPCRoute](w.gatewayInformer("GRPCRoute"))
	s.TLSRoutes = listOf[*gwv1.TLSRoute](w.gatewayInformer("TLSRoute"))
	s.TCPRoutes = listOf[*gwv1.TCPRoute](w.gatewayInformer("TCPRoute"))
	s.ReferenceGrants = listOf[*gwv1.ReferenceGrant](w.gatewayInformer("ReferenceGrant"))
	s.Namespaces = listOf[*corev1.Namespace](w.gatewayInformer("Namespace"))
}

// gatewayInformer is the informer of a kind watched with the Gateway API;
// nil while it is not watched (CRDs not served yet).
func (w *Watcher) gatewayInformer(kind string) cache.SharedIndexInformer {
	g := w.gateway
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.running {
		return nil
	}
	switch kind {
	case "GatewayClass":
		return g.classes
	case "Gateway":
		return g.gws
	case "HTTPRoute":
		return g.routes
	case "GRPCRoute":
		return g.grpc
	case "TLSRoute":
		return g.tls
	case "TCPRoute":
		return g.tcp
	case "ReferenceGrant":
		return g.grants
	case "Namespace":
		return g.nss
	}
	return nil
}

// listOf lists an informer's cached objects; nil for a nil informer.
func listOf[T any](inf cache.SharedIndexInformer) []T {
	if inf == nil {
		return nil
	}
	var out []T
	for _, o := range inf.GetStore().List() {
		out = append(out, o.(T))
	}
	return out
}

// gatewayObject finds a cached Gateway API object for status writes.
func (w *Watcher) gatewayObject(kind, ns, name string) any {
	inf := w.gatewayInformer(kind)
	if inf == nil {
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
