package testenv_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
	"github.com/perimeter-ingress/perimeter/internal/testenv/echo"
)

// TestWorkloads: a Deployment gets Ready Pods with addresses from the pool,
// named as the ReplicaSet controller names them; a Service selecting them
// gets an EndpointSlice with its named target port resolved; scaling down
// removes a Pod from both.
func TestWorkloads(t *testing.T) {
	c := testenv.SharedCluster(t)
	ns := c.Namespace(t)
	ctx := context.Background()
	pool := netip.MustParsePrefix("198.18.201.0/24")
	pods := &echo.Pods{}
	w := testenv.StartWorkloads(t, c, testenv.WorkloadOptions{Namespaces: []string{ns}, Pool: pool, Pods: pods})

	labels := map[string]string{"app": "web"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptrTo(int32(2)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "echo",
					Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 3000}}}}},
			},
		},
	}
	if _, err := c.Admin.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Admin.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{
			{Name: "main", Port: 8080, TargetPort: intstr.FromString("http")},
		}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// expect polls until n Ready Pods in the pool back the Service's slice.
	expect := func(n int) {
		t.Helper()
		testenv.Eventually(t, 20*time.Second, func() error {
			if err := w.Err(); err != nil {
				return err
			}
			list, err := c.Admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			var ips []string
			for _, p := range list.Items {
				a, err := netip.ParseAddr(p.Status.PodIP)
				if err != nil || !pool.Contains(a) || p.Status.Phase != corev1.PodRunning {
					return fmt.Errorf("pod %s: phase %s, address %q", p.Name, p.Status.Phase, p.Status.PodIP)
				}
				// The conformance suite names a backend by dropping the last
				// two parts of its pods' names.
				if parts := strings.Split(p.Name, "-"); len(parts) != 3 || parts[0] != "web" {
					return fmt.Errorf("pod name %q, want web-<hash>-<suffix>", p.Name)
				}
				ips = append(ips, a.String())
			}
			if len(ips) != n {
				return fmt.Errorf("%d pods, want %d", len(ips), n)
			}
			slices.Sort(ips)
			slice, err := c.Admin.DiscoveryV1().EndpointSlices(ns).Get(ctx, "web-testenv", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if slice.Labels[discoveryv1.LabelServiceName] != "web" || len(slice.Ports) != 1 ||
				*slice.Ports[0].Name != "main" || *slice.Ports[0].Port != 3000 {
				return fmt.Errorf("slice labels %v ports %+v", slice.Labels, slice.Ports)
			}
			var got []string
			for _, e := range slice.Endpoints {
				if e.Conditions.Ready == nil || !*e.Conditions.Ready {
					return fmt.Errorf("endpoint %v not ready", e.Addresses)
				}
				got = append(got, e.Addresses...)
			}
			slices.Sort(got)
			if !slices.Equal(got, ips) {
				return fmt.Errorf("slice endpoints %v, want the pods' %v", got, ips)
			}
			return nil
		})
	}
	expect(2)
	dep, err := c.Admin.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dep.Spec.Replicas = ptrTo(int32(1))
	if _, err := c.Admin.AppsV1().Deployments(ns).Update(ctx, dep, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect(1)
}

func ptrTo[T any](v T) *T { return &v }
