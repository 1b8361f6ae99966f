package kube

import (
	"context"
	"io"
	"log/slog"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/perimeter-ingress/perimeter/internal/model"
	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func testSlice(ns, name, svc string) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
}

func TestSliceService(t *testing.T) {
	sl := testSlice("ns", "web-abc", "web")
	want := model.ServiceKey{Namespace: "ns", Name: "web"}
	for _, o := range []any{sl, cache.DeletedFinalStateUnknown{Key: "ns/web-abc", Obj: sl}} {
		if k, known, ok := sliceService(o); k != want || !known || !ok {
			t.Errorf("sliceService(%T) = %v %v %v", o, k, known, ok)
		}
	}
	if _, known, ok := sliceService(testSlice("ns", "orphan", "")); known || !ok {
		t.Errorf("a slice without a Service: known %v ok %v", known, ok)
	}
	if _, _, ok := sliceService(cache.DeletedFinalStateUnknown{Key: "x", Obj: "junk"}); ok {
		t.Error("a tombstone of something else counts as a slice")
	}
}

// waitDelta polls SnapshotDelta until it reports something, with a
// deadline.
func waitDelta(t *testing.T, w *Watcher) (*model.Snapshot, Delta) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, d := w.SnapshotDelta()
		if d.Other || d.Ingresses || len(d.Services) > 0 || len(d.ServiceKeys) > 0 {
			return s, d
		}
		if time.Now().After(deadline) {
			t.Fatal("no change reported")
		}
		select {
		case <-w.Changed():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func TestSnapshotDelta(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := fake.NewClientset()
	w := NewWatcher(cs, WatchOptions{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, d := w.SnapshotDelta(); !d.Other {
		t.Fatal("the first delta must ask for a full build")
	}
	if _, d := w.SnapshotDelta(); d.Other || len(d.Services) != 0 {
		t.Fatalf("nothing changed, got %+v", d)
	}

	slices := cs.DiscoveryV1().EndpointSlices("ns")
	if _, err := slices.Create(ctx, testSlice("ns", "web-abc", "web"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s, d := waitDelta(t, w)
	web := model.ServiceKey{Namespace: "ns", Name: "web"}
	if d.Other || !reflect.DeepEqual(d.Services, map[model.ServiceKey]bool{web: true}) {
		t.Fatalf("after a slice was created: %+v", d)
	}
	if len(s.EndpointSlices) != 1 {
		t.Fatalf("the snapshot taken with the delta lacks the slice: %d slices", len(s.EndpointSlices))
	}
	// The partial snapshot of an endpoint change holds the Service's
	// slices and nothing else.
	if _, err := slices.Create(ctx, testSlice("ns", "other-abc", "other"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for d := w.TakeDelta(); len(d.Services) == 0 || d.Other || d.Ingresses; d = w.TakeDelta() {
		select {
		case <-w.Changed():
		case <-time.After(10 * time.Second):
			t.Fatal("the second slice was not reported")
		}
	}
	if part := w.EndpointsSnapshot(map[model.ServiceKey]bool{web: true}); len(part.EndpointSlices) != 1 || part.EndpointSlices[0].Name != "web-abc" || len(part.Ingresses) != 0 {
		t.Fatalf("partial snapshot for ns/web: %+v", part)
	}
	if err := slices.Delete(ctx, "other-abc", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, d := waitDelta(t, w); d.Other || len(d.Services) != 1 {
		t.Fatalf("after the second slice was deleted: %+v", d)
	}

	// A slice moved to another Service changes both.
	moved := testSlice("ns", "web-abc", "api")
	if _, err := slices.Update(ctx, moved, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, d = waitDelta(t, w)
	api := model.ServiceKey{Namespace: "ns", Name: "api"}
	if d.Other || !reflect.DeepEqual(d.Services, map[model.ServiceKey]bool{web: true, api: true}) {
		t.Fatalf("after a slice moved: %+v", d)
	}

	if err := slices.Delete(ctx, "web-abc", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s, d = waitDelta(t, w)
	if d.Other || !reflect.DeepEqual(d.Services, map[model.ServiceKey]bool{api: true}) || len(s.EndpointSlices) != 0 {
		t.Fatalf("after a slice was deleted: %+v, %d slices", d, len(s.EndpointSlices))
	}

	// Ingress changes are told apart, and a status write is none.
	ing := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"},
		Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{{Host: "web.test"}}}}
	ings := cs.NetworkingV1().Ingresses("ns")
	if _, err := ings.Create(ctx, ing, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	webIng := model.ObjectRef{Kind: "Ingress", Namespace: "ns", Name: "web"}
	if s, d = waitDelta(t, w); d.Other || !d.Ingresses || !reflect.DeepEqual(d.IngressKeys, map[model.ObjectRef]bool{webIng: true}) ||
		len(d.Services) != 0 || len(s.Ingresses) != 1 {
		t.Fatalf("after an Ingress was created: %+v, %d Ingresses", d, len(s.Ingresses))
	}
	if got := w.ChangedIngresses(d.IngressKeys); got[webIng] == nil || got[webIng].Spec.Rules[0].Host != "web.test" {
		t.Fatalf("changed Ingresses: %v", got)
	}
	statusSeen := make(chan string, 1)
	w.OnIngressStatus(func(ns, name string) { statusSeen <- ns + "/" + name })
	ing.Status.LoadBalancer.Ingress = []networkingv1.IngressLoadBalancerIngress{{IP: "203.0.113.1"}}
	if _, err := ings.UpdateStatus(ctx, ing, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-statusSeen:
		if got != "ns/web" {
			t.Fatalf("status hook told of %s", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the status write did not reach the hook")
	}
	if _, d := w.SnapshotDelta(); d.Other || d.Ingresses {
		t.Fatalf("a status write counted as a change: %+v", d)
	}

	// A Service is named, for the model to tell whether anything uses
	// it; the lookup the model is given finds it.
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"}}
	if _, err := cs.CoreV1().Services("ns").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, d = waitDelta(t, w); d.Other || d.Ingresses || !reflect.DeepEqual(d.ServiceKeys, map[model.ServiceKey]bool{web: true}) {
		t.Fatalf("after a Service was created: %+v", d)
	}
	if part := w.EndpointsSnapshot(map[model.ServiceKey]bool{web: true}); len(part.Services) != 1 || part.Services[0].Name != "web" {
		t.Fatalf("the lookup does not find the new Service: %+v", part.Services)
	}
	if err := cs.CoreV1().Services("ns").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, d = waitDelta(t, w); d.Other || !reflect.DeepEqual(d.ServiceKeys, map[model.ServiceKey]bool{web: true}) {
		t.Fatalf("after a Service was deleted: %+v", d)
	}
}

// TestMissingSecretSignals: a newly referenced Secret that does not exist
// produces no watch event; the end of its first list must still start a
// pass, or the Event that it is missing waits for an unrelated change. Both
// watch kinds run against the real API server: a single Secret's watch and
// a namespace's coalesced one.
func TestMissingSecretSignals(t *testing.T) {
	c := testenv.SharedCluster(t)
	ns := c.Namespace(t)
	for _, coalesce := range []int{0, 1} {
		ctx, cancel := context.WithCancel(context.Background())
		w := NewWatcher(c.Admin, WatchOptions{CoalesceSecrets: coalesce}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		w.SnapshotDelta()
		select { // whatever Start signalled
		case <-w.Changed():
		default:
		}
		w.WatchSecrets([]string{ns + "/nobody"})
		deadline := time.After(10 * time.Second)
		for done := false; !done; {
			select {
			case <-w.Changed():
				s, d := w.SnapshotDelta()
				if len(s.PendingSecrets) == 0 {
					if !d.Other {
						t.Fatalf("coalesce %d: the pass after the list must be a full build: %+v", coalesce, d)
					}
					done = true
				}
			case <-deadline:
				t.Fatalf("coalesce %d: no change signalled after the watch of a missing Secret synced", coalesce)
			}
		}
		cancel()
	}
}

// TestStatusOnly: an Ingress update that changed only its status (the
// status writer's own) does not count as a change; any other does.
func TestStatusOnly(t *testing.T) {
	base := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", Generation: 1, ResourceVersion: "1",
		Annotations: map[string]string{"haproxy.org/check": "false"}},
		Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{{Host: "a.test"}}}}
	status := base.DeepCopy()
	status.ResourceVersion = "2"
	status.Status.LoadBalancer.Ingress = []networkingv1.IngressLoadBalancerIngress{{IP: "203.0.113.1"}}
	if !statusOnly(base, status) {
		t.Error("a status write counted as a change")
	}
	spec := status.DeepCopy()
	spec.Generation = 2
	spec.Spec.Rules[0].Host = "b.test"
	annotated := status.DeepCopy()
	annotated.Annotations["haproxy.org/check"] = "true"
	for name, cur := range map[string]*networkingv1.Ingress{"spec": spec, "annotation": annotated} {
		if statusOnly(status, cur) {
			t.Errorf("a %s change did not count", name)
		}
	}
	if statusOnly(&corev1.Service{}, &corev1.Service{}) {
		t.Error("statusOnly is about Ingresses only")
	}
}

// TestResynced: an informer's periodic resync (the same resourceVersion)
// is no change; a real update, or objects without a version (fake
// clients), are.
func TestResynced(t *testing.T) {
	svc := func(rv string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", ResourceVersion: rv}}
	}
	sl := func(rv string) *discoveryv1.EndpointSlice {
		s := testSlice("ns", "web-abc", "web")
		s.ResourceVersion = rv
		return s
	}
	for _, c := range []struct {
		name     string
		old, cur any
		want     bool
	}{
		{"service resync", svc("7"), svc("7"), true},
		{"slice resync", sl("7"), sl("7"), true},
		{"service update", svc("7"), svc("8"), false},
		{"slice update", sl("7"), sl("8"), false},
		{"no version", svc(""), svc(""), false},
		{"tombstone", cache.DeletedFinalStateUnknown{Key: "ns/web", Obj: svc("7")}, svc("7"), false},
	} {
		if got := resynced(c.old, c.cur); got != c.want {
			t.Errorf("%s: resynced = %v, want %v", c.name, got, c.want)
		}
	}
}
