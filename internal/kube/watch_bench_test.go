package kube

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// BenchmarkSnapshot is what a pass pays to read the caches at n Ingresses,
// Services and EndpointSlices: the full snapshot an Ingress change takes,
// and the partial one of an endpoint change.
func BenchmarkSnapshot(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		objs := make([]runtime.Object, 0, 3*n)
		for i := range n {
			name := fmt.Sprintf("s%d", i)
			objs = append(objs,
				&networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
					Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{{Host: name + ".test"}}}},
				&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
					Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}},
				testSlice("ns", name+"-abc", name))
		}
		ctx, cancel := context.WithCancel(context.Background())
		w := NewWatcher(fake.NewClientset(objs...), WatchOptions{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err := w.Start(ctx); err != nil {
			b.Fatal(err)
		}
		deadline := time.Now().Add(time.Minute)
		for len(w.Snapshot().EndpointSlices) < n {
			if time.Now().After(deadline) {
				b.Fatal("caches not filled")
			}
			<-w.Changed()
		}
		b.Run(fmt.Sprintf("full/objects=%d", 3*n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if s := w.Snapshot(); len(s.Ingresses) != n {
					b.Fatalf("%d Ingresses", len(s.Ingresses))
				}
			}
		})
		b.Run(fmt.Sprintf("endpoints/objects=%d", 3*n), func(b *testing.B) {
			keys := map[model.ServiceKey]bool{{Namespace: "ns", Name: "s7"}: true}
			b.ReportAllocs()
			for b.Loop() {
				if s := w.EndpointsSnapshot(keys); len(s.EndpointSlices) != 1 {
					b.Fatalf("%d slices", len(s.EndpointSlices))
				}
			}
		})
		cancel()
	}
}
