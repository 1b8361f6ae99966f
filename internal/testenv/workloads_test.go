package testenv_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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

// TestWorkloadsPodLogs: a request the echo server answers for a Workloads
// pod is in that pod's logs as the API server serves them (pods/log,
// proxied to the bed's stand-in kubelet, whose self-signed certificate the
// API server takes unverified), in echo-basic's words, which the suite's
// mirroring tests look for; sinceTime drops the lines written before it.
func TestWorkloadsPodLogs(t *testing.T) {
	c := testenv.SharedCluster(t)
	ns := c.Namespace(t)
	ctx := context.Background()
	pool := netip.MustParsePrefix("198.18.202.0/24")

	// Every pool address is local in the namespace (AnyIP), where one echo
	// server answers for all the pods.
	edge := testenv.NewNetns(t, "podlogs")
	if err := edge.AnyIP(pool); err != nil {
		t.Fatal(err)
	}
	var ln net.Listener
	if err := edge.Do(func() (err error) {
		ln, err = net.Listen("tcp4", "0.0.0.0:3000")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	pods := &echo.Pods{}
	srv := echo.NewServer(echo.Handler(pods, 3000), false)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	w := testenv.StartWorkloads(t, c, testenv.WorkloadOptions{Namespaces: []string{ns}, Pool: pool, Pods: pods})

	labels := map[string]string{"app": "mirror"}
	if _, err := c.Admin.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "mirror", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "mirror", Image: "echo"}}},
			},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	testenv.Eventually(t, 20*time.Second, func() error {
		if err := w.Err(); err != nil {
			return err
		}
		list, err := c.Admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=mirror"})
		if err != nil {
			return err
		}
		if len(list.Items) != 1 || list.Items[0].Status.Phase != corev1.PodRunning {
			return fmt.Errorf("%d pods, want 1 running", len(list.Items))
		}
		pod = list.Items[0]
		return nil
	})

	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (conn net.Conn, err error) {
			err = edge.Do(func() (err error) {
				conn, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return conn, err
		},
	}}
	get := func(path string) error {
		resp, err := client.Get("http://" + net.JoinHostPort(pod.Status.PodIP, "3000") + path)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", path, resp.Status)
		}
		return nil
	}
	logs := func(opts corev1.PodLogOptions) string {
		t.Helper()
		opts.Container = "mirror"
		b, err := c.Admin.CoreV1().Pods(ns).GetLogs(pod.Name, &opts).DoRaw(ctx)
		if err != nil {
			t.Fatalf("pod logs %+v: %v", opts, err)
		}
		return string(b)
	}

	before := time.Now()
	if err := get("/first"); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	if err := get("/health"); err != nil { // answered, but not echoed: not logged
		t.Fatal(err)
	}
	got := logs(corev1.PodLogOptions{Timestamps: true})
	// The suite matches "Echoing back request made to <path> to client".
	line := regexp.MustCompile(`^(\S+) Echoing back request made to /first to client \(198\.18\.202\.\d+:\d+\)\n$`).FindStringSubmatch(got)
	if line == nil {
		t.Fatalf("logs %q, want the line of /first with its timestamp", got)
	}
	first, err := time.Parse(time.RFC3339Nano, line[1])
	if err != nil || first.Before(before) || first.After(after) {
		t.Fatalf("timestamp %q (%v): want the time of the request, between %v and %v", line[1], err, before, after)
	}

	// sinceTime has whole seconds: a line of its second is kept, as the
	// kubelet keeps it; one of the second before is not.
	if got := logs(corev1.PodLogOptions{SinceTime: &metav1.Time{Time: first.Truncate(time.Second)}}); !strings.Contains(got, "/first") {
		t.Errorf("since the second of /first: %q, want its line", got)
	}
	since := first.Truncate(time.Second).Add(time.Second)
	n := 0
	testenv.Eventually(t, 10*time.Second, func() error {
		// Requests until one is answered at or after since.
		n++
		path := fmt.Sprintf("/later-%d", n)
		if err := get(path); err != nil {
			return err
		}
		got := logs(corev1.PodLogOptions{SinceTime: &metav1.Time{Time: since}})
		if strings.Contains(got, "/first ") {
			t.Fatalf("since %v: %q, holds /first, written before", since, got)
		}
		if !strings.Contains(got, "Echoing back request made to "+path+" to client") {
			return fmt.Errorf("since %v: %q, no line of %s yet", since, got, path)
		}
		return nil
	})
	if got := logs(corev1.PodLogOptions{TailLines: ptrTo(int64(1))}); !strings.HasPrefix(got, fmt.Sprintf("Echoing back request made to /later-%d ", n)) ||
		strings.Count(got, "\n") != 1 {
		t.Errorf("tailLines 1: %q, want the line of /later-%d", got, n)
	}
	if got := logs(corev1.PodLogOptions{LimitBytes: ptrTo(int64(9))}); got != "Echoing b" {
		t.Errorf("limitBytes 9: %q", got)
	}
}

// TestWorkloadsNode: the Node the pods run on exists, pointing at the
// stand-in kubelet on loopback, only while a Workloads runs, so that no
// later test finds a Node it did not make (BGP tests peer with every Node).
func TestWorkloadsNode(t *testing.T) {
	c := testenv.SharedCluster(t)
	ns := c.Namespace(t)
	ctx := context.Background()
	nodes := c.Admin.CoreV1().Nodes()
	t.Run("running", func(t *testing.T) {
		testenv.StartWorkloads(t, c, testenv.WorkloadOptions{Namespaces: []string{ns},
			Pool: netip.MustParsePrefix("198.18.203.0/24"), Pods: &echo.Pods{}})
		n, err := nodes.Get(ctx, testenv.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if a := n.Status.Addresses; len(a) != 1 || a[0].Type != corev1.NodeInternalIP || a[0].Address != "127.0.0.1" ||
			n.Status.DaemonEndpoints.KubeletEndpoint.Port == 0 {
			t.Fatalf("node status %+v, want InternalIP 127.0.0.1 and a kubelet port", n.Status)
		}
	})
	if _, err := nodes.Get(ctx, testenv.NodeName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("node %s after the workloads ended: %v, want NotFound", testenv.NodeName, err)
	}
}
