package haproxy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// variantsSnapshot is ingresses Ingresses spread over services Services
// (two endpoints each). With variants, the Ingresses of a Service each ask
// for a different pod-maxconn, so each gets its own backend; without, they
// all ask for the same. Health checks are off: the endpoints are not
// reachable from here and nothing must be sent to them.
func variantsSnapshot(ingresses, services int, variants bool, serversIncrement int) *model.Snapshot {
	prefix := networkingv1.PathTypePrefix
	ready := true
	portName := "http"
	port := int32(8080)
	s := &model.Snapshot{ConfigMap: &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm"},
		Data:       map[string]string{"check": "false", "servers-increment": strconv.Itoa(serversIncrement)},
	}}
	for i := range services {
		ns, name := fmt.Sprintf("ns-%d", i%10), fmt.Sprintf("svc-%d", i)
		s.Services = append(s.Services, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
		})
		s.EndpointSlices = append(s.EndpointSlices, &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: &portName, Port: &port}},
			Endpoints: []discoveryv1.Endpoint{
				{Addresses: []string{fmt.Sprintf("198.18.%d.%d", i/250, i%250+1)}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}},
				{Addresses: []string{fmt.Sprintf("198.19.%d.%d", i/250, i%250+1)}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}},
			},
		})
	}
	for i := range ingresses {
		svc := i % services
		ns, name := fmt.Sprintf("ns-%d", svc%10), fmt.Sprintf("ing-%d", i)
		maxconn := "100"
		if variants {
			maxconn = strconv.Itoa(100 + i/services)
		}
		s.Ingresses = append(s.Ingresses, &networkingv1.Ingress{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, CreationTimestamp: metav1.Unix(int64(i), 0),
				Annotations: map[string]string{"haproxy.org/pod-maxconn": maxconn}},
			Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{{
				Host: name + ".example.com",
				IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
					Paths: []networkingv1.HTTPIngressPath{{
						Path: "/", PathType: &prefix,
						Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{
							Name: fmt.Sprintf("svc-%d", svc), Port: networkingv1.ServiceBackendPort{Number: 80}}},
					}},
				}},
			}}},
		})
	}
	return s
}

// BenchmarkVariantsCost measures what backend variants cost at 1,000
// Ingresses sharing 100 Services: model.Build allocations, the size of
// haproxy.cfg and the HAProxy worker's resident memory, with every
// Ingress of a Service asking for the same settings (100 backends) and
// each asking for its own (1,000 backends), with the default server slots
// (42 a backend) and with servers-increment 10.
func BenchmarkVariantsCost(b *testing.B) {
	const ingresses, services = 1000, 100
	for _, c := range []struct {
		variants bool
		slots    int
	}{{false, 42}, {true, 42}, {false, 10}, {true, 10}} {
		variants := c.variants
		b.Run(fmt.Sprintf("variants=%t/servers-increment=%d", variants, c.slots), func(b *testing.B) {
			s := variantsSnapshot(ingresses, services, variants, c.slots)
			want := services
			if variants {
				want = ingresses
			}
			var d *model.Desired
			b.ReportAllocs()
			for b.Loop() {
				d = model.Build(s, model.Options{})
			}
			if len(d.Backends) != want || len(d.Problems) != 0 {
				b.Fatalf("%d backends (want %d), problems %v", len(d.Backends), want, d.Problems)
			}
			b.StopTimer()
			h := startHAProxy(b, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
			applyOK(b, h.d, d)
			cfg, err := os.ReadFile(h.d.paths.config)
			if err != nil {
				b.Fatal(err)
			}
			rss := workerRSS(b, h.d)
			b.ReportMetric(float64(len(d.Backends)), "backends")
			b.ReportMetric(float64(len(cfg))/1024, "cfg-KiB")
			b.ReportMetric(float64(rss)/1024, "worker-RSS-MiB")
			b.Logf("%d Ingresses, %d Services: %d backends, haproxy.cfg %d KiB, worker RSS %d MiB",
				ingresses, services, len(d.Backends), len(cfg)/1024, rss/1024)
		})
	}
}

// workerRSS is the resident memory (KiB) of the current worker, once it
// serves the applied configuration.
func workerRSS(tb testing.TB, d *Driver) int {
	tb.Helper()
	var kib int
	eventually(tb, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		pl, err := d.master.ShowProc(ctx)
		if err != nil {
			return err
		}
		if len(pl.Workers) != 1 || len(pl.OldWorkers) != 0 {
			return fmt.Errorf("workers %v, old workers %v", pl.Workers, pl.OldWorkers)
		}
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pl.Workers[0]))
		if err != nil {
			return err
		}
		for l := range strings.Lines(string(status)) {
			if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
				kib, err = strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
				return err
			}
		}
		return fmt.Errorf("no VmRSS in /proc/%d/status", pl.Workers[0])
	})
	return kib
}
