package kube

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwfake "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned/fake"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// TestGatewayRouteKindsWatchedOnceServed: with CRDs that lack TLSRoute and
// TCPRoute, the Gateway API and the Namespaces are watched without them;
// once discovery serves them, the next look adds their informers and the
// snapshot holds their objects.
func TestGatewayRouteKindsWatchedOnceServed(t *testing.T) {
	cs := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{"env": "prod"}}})
	disc := &lockedDiscovery{FakeDiscovery: cs.Discovery().(*fakediscovery.FakeDiscovery)}
	gw := gwfake.NewSimpleClientset(
		&gwv1.TLSRoute{ObjectMeta: metav1.ObjectMeta{Name: "vault", Namespace: "shop"}},
		&gwv1.TCPRoute{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "shop"}},
		&gwv1.GRPCRoute{ObjectMeta: metav1.ObjectMeta{Name: "rpc", Namespace: "shop"}},
	)
	resources := func(names ...string) {
		var res []metav1.APIResource
		for _, r := range names {
			res = append(res, metav1.APIResource{Name: r, Namespaced: r != "gatewayclasses"})
		}
		disc.mu.Lock()
		disc.Resources = []*metav1.APIResourceList{{GroupVersion: gwv1.GroupVersion.String(), APIResources: res}}
		disc.mu.Unlock()
	}
	resources(gatewayResources...)
	w := NewWatcher(cs, WatchOptions{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	w.WatchGatewayAPI(gw, disc, 20*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	s := w.Snapshot()
	if !w.GatewayAPIWatched() {
		t.Fatal("Gateway API not watched with its CRDs installed")
	}
	if len(s.Namespaces) != 1 || s.Namespaces[0].Labels["env"] != "prod" {
		t.Fatalf("snapshot Namespaces %v, want shop with its labels", s.Namespaces)
	}
	if len(s.TLSRoutes)+len(s.TCPRoutes)+len(s.GRPCRoutes) != 0 {
		t.Fatalf("snapshot holds %d TLSRoutes, %d TCPRoutes and %d GRPCRoutes before their CRDs are served", len(s.TLSRoutes), len(s.TCPRoutes), len(s.GRPCRoutes))
	}
	resources(append(gatewayResources, grpcRoutesResource, tlsRoutesResource, tcpRoutesResource)...)
	waitSnapshot(t, w, func(s *model.Snapshot) bool {
		return len(s.TLSRoutes) == 1 && len(s.TCPRoutes) == 1 && len(s.GRPCRoutes) == 1
	})
	for _, k := range []struct{ kind, name string }{{"TLSRoute", "vault"}, {"TCPRoute", "db"}, {"GRPCRoute", "rpc"}} {
		if w.gatewayObject(k.kind, "shop", k.name) == nil {
			t.Errorf("%s shop/%s not found for status writes", k.kind, k.name)
		}
	}
}

// waitSnapshot polls the watcher's snapshot until ok holds, for 10 s.
func waitSnapshot(t *testing.T, w *Watcher, ok func(*model.Snapshot) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok(w.Snapshot()) {
		if time.Now().After(deadline) {
			t.Fatal("snapshot not as wanted after 10 s")
		}
		select {
		case <-w.Changed():
		case <-time.After(20 * time.Millisecond):
		}
	}
}
