package kube

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// BenchmarkStatusWriteCost measures what one Ingress status write costs
// the API server, in CPU time, written as the StatusWriter writes them
// (UpdateStatus in protobuf, statusWriters in flight), with the daemon's
// informer watching the Ingresses with and without compression (the
// daemon's is without: kube.Connect), and as a JSON merge patch of the
// status subresource for comparison. At 10,000 Ingresses this cost, not
// the daemon, bounds how soon every status is written.
func BenchmarkStatusWriteCost(b *testing.B) {
	c := testenv.SharedCluster(b)
	apiPID, _ := c.PIDs()
	const n = 2000
	for _, tc := range []struct{ write, watch string }{
		{"update", "none"}, {"update", "gzip"}, {"update", "plain"}, {"merge-patch", "plain"},
	} {
		b.Run("write="+tc.write+"/watch="+tc.watch, func(b *testing.B) {
			cs := statusCostClient(b, c.AdminConfig, false)
			for range b.N {
				ns := c.Namespace(b)
				ings := createStatusless(b, cs, ns, n)
				var seen atomic.Int64
				stop := func() {}
				if tc.watch != "none" {
					stop = watchStatuses(b, statusCostClient(b, c.AdminConfig, tc.watch == "plain"), ns, &seen)
				}
				patch := []byte(`{"status":{"loadBalancer":{"ingress":[{"ip":"203.0.113.10"}]}}}`)
				lb := []networkingv1.IngressLoadBalancerIngress{{IP: "203.0.113.10"}}
				cpu0, start := procCPU(b, apiPID), time.Now()
				var next atomic.Int64
				var failed atomic.Int64
				var wg sync.WaitGroup
				for range statusWriters {
					wg.Go(func() {
						for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
							var err error
							if tc.write == "update" {
								up := ings[i].DeepCopy()
								up.Status.LoadBalancer.Ingress = lb
								_, err = cs.NetworkingV1().Ingresses(ns).UpdateStatus(context.Background(), up, metav1.UpdateOptions{})
							} else {
								_, err = cs.NetworkingV1().Ingresses(ns).Patch(context.Background(), ings[i].Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
							}
							if err != nil {
								failed.Add(1)
							}
						}
					})
				}
				wg.Wait()
				if failed.Load() > 0 {
					b.Fatalf("%d of %d status writes failed", failed.Load(), n)
				}
				if tc.watch != "none" {
					testenv.Converge(b, time.Minute, func() error {
						if got := seen.Load(); got < n {
							return fmt.Errorf("the watcher saw %d of %d statuses", got, n)
						}
						return nil
					})
				}
				took, cpu := time.Since(start), procCPU(b, apiPID)-cpu0
				stop()
				b.ReportMetric(float64(cpu.Microseconds())/1000/n, "apiserver-cpu-ms/write")
				b.ReportMetric(n/took.Seconds(), "writes/s")
				fmt.Printf("status writes (%s, watched: %s): %d in %v, %.0f/s; API server CPU %v, %.2f ms a write\n",
					tc.write, tc.watch, n, took.Round(time.Millisecond), n/took.Seconds(), cpu, float64(cpu.Microseconds())/1000/n)
			}
		})
	}
}

func statusCostClient(b *testing.B, base *rest.Config, plain bool) kubernetes.Interface {
	b.Helper()
	cfg := rest.CopyConfig(base)
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf
	cfg.QPS = -1
	cfg.DisableCompression = plain
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return cs
}

// watchStatuses runs an Ingress informer on ns, as the daemon's, and
// counts the Ingresses it has seen get a status.
func watchStatuses(b *testing.B, cs kubernetes.Interface, ns string, seen *atomic.Int64) (stop func()) {
	b.Helper()
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	inf := f.Networking().V1().Ingresses().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(old, cur any) {
		if len(old.(*networkingv1.Ingress).Status.LoadBalancer.Ingress) == 0 && len(cur.(*networkingv1.Ingress).Status.LoadBalancer.Ingress) > 0 {
			seen.Add(1)
		}
	}}); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		b.Fatal("informer did not sync")
	}
	return func() {
		cancel()
		f.Shutdown()
	}
}

func createStatusless(b *testing.B, cs kubernetes.Interface, ns string, n int) []*networkingv1.Ingress {
	b.Helper()
	pt := networkingv1.PathTypePrefix
	out := make([]*networkingv1.Ingress, 0, n)
	for i := range n {
		ing := &networkingv1.Ingress{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("i%d", i), Namespace: ns},
			Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{{
				Host: fmt.Sprintf("h%d.test", i),
				IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{
					Path: "/", PathType: &pt,
					Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "web", Port: networkingv1.ServiceBackendPort{Number: 80}}},
				}}}},
			}}},
		}
		got, err := cs.NetworkingV1().Ingresses(ns).Create(context.Background(), ing, metav1.CreateOptions{})
		if err != nil {
			b.Fatal(err)
		}
		// As the informers' transform leaves it (model.StripUnread).
		got.ManagedFields = nil
		out = append(out, got)
	}
	return out
}

func procCPU(b *testing.B, pid int) time.Duration {
	b.Helper()
	t, err := testenv.ProcCPU(pid)
	if err != nil {
		b.Fatal(err)
	}
	return t
}
