package kube

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwfake "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned/fake"
)

// TestGatewayAPIWatchedOnceInstalled: without the Gateway API CRDs the
// watcher starts and watches none of their kinds; once discovery serves
// them, the next look starts the informers and the snapshot holds their
// objects.
func TestGatewayAPIWatchedOnceInstalled(t *testing.T) {
	cs := fake.NewClientset()
	disc := &lockedDiscovery{FakeDiscovery: cs.Discovery().(*fakediscovery.FakeDiscovery)}
	gw := gwfake.NewSimpleClientset(&gwv1.GatewayClass{
		ObjectMeta: metav1.ObjectMeta{Name: "perimeter"},
		Spec:       gwv1.GatewayClassSpec{ControllerName: "perimeter.io/gateway-controller"},
	})
	w := NewWatcher(cs, WatchOptions{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	w.WatchGatewayAPI(gw, disc, 20*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if w.GatewayAPIWatched() {
		t.Fatal("Gateway API watched before its CRDs are installed")
	}
	if s := w.Snapshot(); len(s.GatewayClasses) != 0 {
		t.Fatalf("snapshot holds %d GatewayClasses before the CRDs are installed", len(s.GatewayClasses))
	}
	var res []metav1.APIResource
	for _, r := range gatewayResources {
		res = append(res, metav1.APIResource{Name: r, Namespaced: r != "gatewayclasses"})
	}
	disc.mu.Lock()
	disc.Resources = append(disc.Resources, &metav1.APIResourceList{GroupVersion: gwv1.GroupVersion.String(), APIResources: res})
	disc.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if s := w.Snapshot(); len(s.GatewayClasses) == 1 && s.GatewayClasses[0].Name == "perimeter" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("GatewayClass not in the snapshot 10 s after the CRDs were installed")
		}
		select {
		case <-w.Changed():
		case <-time.After(20 * time.Millisecond):
		}
	}
	if !w.GatewayAPIWatched() {
		t.Error("GatewayAPIWatched false after the objects arrived")
	}
}

// lockedDiscovery lets the test install resources while the watcher asks.
type lockedDiscovery struct {
	*fakediscovery.FakeDiscovery
	mu sync.Mutex
}

func (d *lockedDiscovery) ServerResourcesForGroupVersion(gv string) (*metav1.APIResourceList, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.FakeDiscovery.ServerResourcesForGroupVersion(gv)
}
