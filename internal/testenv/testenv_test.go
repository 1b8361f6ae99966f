package testenv_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// This package's own address ranges.
const (
	linkRange = "198.19.200.0/24"
	podNet    = "198.18.200."
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestDaemonIdentityRBAC(t *testing.T) {
	c := testenv.SharedCluster(t)
	ns := c.Namespace(t)
	ctx := context.Background()

	cfg, err := clientcmd.BuildConfigFromFlags("", c.DaemonKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	daemon, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := daemon.NetworkingV1().Ingresses("").List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("perimeter identity cannot list ingresses: %v", err)
	}
	if _, err := daemon.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("perimeter identity cannot list endpointslices: %v", err)
	}
	_, err = daemon.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "not-allowed"},
	}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("perimeter identity creating a ConfigMap: got %v, want Forbidden", err)
	}
	if st, err := os.Stat(c.DaemonKubeconfig); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("daemon kubeconfig: %v, mode %v; want 0600", err, st.Mode())
	}
}

func TestServiceEndpoints(t *testing.T) {
	c := testenv.SharedCluster(t)
	ns := c.Namespace(t)
	ctx := context.Background()

	svc := c.CreateService(t, testenv.ServiceSpec{
		Namespace: ns, Name: "web",
		Ports:     []testenv.ServicePort{{Name: "http"}, {Name: "admin", Port: 9000, TargetPort: 9001}},
		Endpoints: []testenv.Endpoint{{IP: podNet + "1"}, {IP: podNet + "2", NotReady: true}},
	})
	s, err := c.Admin.CoreV1().Services(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Spec.Selector) != 0 || len(s.Spec.Ports) != 2 || s.Spec.Ports[0].Port != 80 || s.Spec.Ports[0].TargetPort.IntVal != 8080 {
		t.Fatalf("service spec: %+v", s.Spec)
	}

	slice := func() *discoveryv1.EndpointSlice {
		t.Helper()
		l, err := c.Admin.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{
			LabelSelector: discoveryv1.LabelServiceName + "=web," + discoveryv1.LabelManagedBy + "=" + testenv.ManagedBy,
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Items) != 1 {
			t.Fatalf("%d slices for service web, want 1", len(l.Items))
		}
		return &l.Items[0]
	}
	type state struct {
		ip                          string
		ready, serving, terminating bool
	}
	got := func(es *discoveryv1.EndpointSlice) []state {
		var out []state
		for _, e := range es.Endpoints {
			out = append(out, state{e.Addresses[0], *e.Conditions.Ready, *e.Conditions.Serving, *e.Conditions.Terminating})
		}
		return out
	}
	es := slice()
	if n := len(es.Ports); n != 2 || *es.Ports[0].Name != "http" || *es.Ports[0].Port != 8080 || *es.Ports[1].Name != "admin" || *es.Ports[1].Port != 9001 {
		t.Fatalf("slice ports: %+v", es.Ports)
	}
	want := []state{{podNet + "1", true, true, false}, {podNet + "2", false, false, false}}
	if g := got(es); !equal(g, want) {
		t.Fatalf("endpoints %+v, want %+v", g, want)
	}

	svc.SetEndpoints(t, testenv.Endpoint{IP: podNet + "3", Terminating: true}, testenv.Endpoint{IP: podNet + "4"})
	want = []state{{podNet + "3", false, true, true}, {podNet + "4", true, true, false}}
	if g := got(slice()); !equal(g, want) {
		t.Fatalf("after update: endpoints %+v, want %+v", g, want)
	}
	svc.SetEndpoints(t)
	if g := got(slice()); len(g) != 0 {
		t.Fatalf("after clearing: endpoints %+v", g)
	}
}

func equal[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestClusterStop(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped with -short: needs kube-apiserver and etcd")
	}
	c, err := testenv.StartClusterCtx(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	apiPID, etcdPID := c.PIDs()
	if _, err := c.Admin.Discovery().ServerVersion(); err != nil {
		c.Stop()
		t.Fatal(err)
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range []int{apiPID, etcdPID} {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process %d still there after Stop (kill 0: %v)", pid, err)
		}
	}
	if _, err := os.Stat(c.Dir); !os.IsNotExist(err) {
		t.Errorf("state dir %s left behind: %v", c.Dir, err)
	}
}

var plainHTTP = &http.Client{
	Timeout:   5 * time.Second,
	Transport: &http.Transport{DisableKeepAlives: true},
}

func get(t *testing.T, url string, hdr map[string]string) (*http.Response, string, error) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := plainHTTP.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

func TestPod(t *testing.T) {
	testenv.RequireRoot(t)
	p := testenv.StartPod(t, testenv.PodOptions{Name: "web-0", IP: podNet + "10", LinkRange: linkRange})

	resp, body, err := get(t, p.URL()+"/some/path", map[string]string{"X-Forwarded-For": "203.0.113.7"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || body != "web-0" || resp.Header.Get("X-Pod") != "web-0" ||
		resp.Header.Get("X-Seen-Forwarded-For") != "203.0.113.7" {
		t.Fatalf("GET /: %s %q headers %v", resp.Status, body, resp.Header)
	}
	health := func() int {
		t.Helper()
		resp, _, err := get(t, p.URL()+"/healthz", nil)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode
	}
	if s := health(); s != 200 {
		t.Fatalf("healthz %d", s)
	}
	p.SetHealthy(false)
	if s := health(); s != 503 {
		t.Fatalf("unhealthy pod: healthz %d, want 503", s)
	}
	p.SetHealthy(true)
	if s := health(); s != 200 {
		t.Fatalf("healthy again: healthz %d", s)
	}
	if n := p.Requests(); n != 4 {
		t.Errorf("pod counted %d requests, want 4", n)
	}

	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := get(t, p.URL(), nil); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("stopped pod: got %v, want connection refused", err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	if _, body, err := get(t, p.URL(), nil); err != nil || body != "web-0" {
		t.Fatalf("restarted pod: %q %v", body, err)
	}

	// The leak guard: an address in 198.18.0.0/15 without a route fails
	// locally, it is not sent to the default gateway.
	if on, err := testenv.GuardActive(); err != nil || !on {
		t.Fatalf("leak guard route active: %v %v", on, err)
	}
	if _, _, err := get(t, "http://"+podNet+"99:8080/", nil); !errors.Is(err, syscall.EHOSTUNREACH) {
		t.Fatalf("address without pod: got %v, want no route to host", err)
	}
	// The same for IPv6 test addresses (the documentation range).
	if on, err := testenv.GuardActive6(); err != nil || !on {
		t.Fatalf("IPv6 leak guard route active: %v %v", on, err)
	}
	if _, _, err := get(t, "http://[2001:db8:18::99]:8080/", nil); !errors.Is(err, syscall.ENETUNREACH) && !errors.Is(err, syscall.EHOSTUNREACH) {
		t.Fatalf("IPv6 address without pod: got %v, want unreachable", err)
	}

	// Inside, the pod has its address on lo and a veth named eth0.
	out, err := p.Netns.Exec("ip", "-4", "-o", "addr")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "lo    inet "+podNet+"10/32") || !strings.Contains(out, "eth0    inet "+p.Link.PeerAddr.String()) {
		t.Fatalf("pod addresses:\n%s", out)
	}
	if !netip.MustParsePrefix(linkRange).Contains(p.Link.Addr.Addr()) {
		t.Fatalf("link address %s outside %s", p.Link.Addr, linkRange)
	}

	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	assertGone(t, p)
}

// assertGone checks that nothing of a closed pod is left in the root namespace.
func assertGone(t *testing.T, p *testenv.Pod) {
	t.Helper()
	if _, err := os.Stat(filepath.Join("/run/netns", p.Netns.Name)); !os.IsNotExist(err) {
		t.Errorf("netns %s left behind (%v)", p.Netns.Name, err)
	}
	if _, err := netlink.LinkByName(p.Link.Name); err == nil {
		t.Errorf("link %s left behind", p.Link.Name)
	}
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_V4,
		&netlink.Route{Dst: &net.IPNet{IP: net.IP(p.IP.AsSlice()), Mask: net.CIDRMask(32, 32)}}, netlink.RT_FILTER_DST)
	if err != nil {
		t.Fatal(err)
	}
	if len(routes) > 0 {
		t.Errorf("route to %s left behind: %v", p.IP, routes)
	}
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if a.IP.Equal(net.IP(p.Link.Addr.Addr().AsSlice())) {
			t.Errorf("link address %s left behind", a.IPNet)
		}
	}
}

func TestPodsGetDistinctLinks(t *testing.T) {
	testenv.RequireRoot(t)
	a := testenv.StartPod(t, testenv.PodOptions{Name: "a", IP: podNet + "11", LinkRange: linkRange})
	b := testenv.StartPod(t, testenv.PodOptions{Name: "b", IP: podNet + "12", LinkRange: linkRange})
	if a.Link.Addr.Overlaps(b.Link.Addr) || a.Netns.Name == b.Netns.Name || a.Link.Name == b.Link.Name {
		t.Fatalf("pods share a link or namespace: %+v %+v", a.Link, b.Link)
	}
	for _, p := range []*testenv.Pod{a, b} {
		if _, body, err := get(t, p.URL(), nil); err != nil || body != p.Name {
			t.Fatalf("pod %s: %q %v", p.Name, body, err)
		}
	}
	// An IP already served is refused, not silently shadowed.
	if _, err := testenv.StartPodCtx(context.Background(), testenv.PodOptions{Name: "dup", IP: podNet + "11", LinkRange: linkRange}); err == nil {
		t.Fatal("second pod with the same IP started")
	}
}

func TestPodWithoutHostRoute(t *testing.T) {
	testenv.RequireRoot(t)
	p := testenv.StartPod(t, testenv.PodOptions{Name: "bgp", IP: podNet + "13", LinkRange: linkRange, NoHostRoute: true})
	if _, _, err := get(t, p.URL(), nil); !errors.Is(err, syscall.EHOSTUNREACH) {
		t.Fatalf("pod without route: got %v, want no route to host", err)
	}
	// The route a BGP speaker would install: via the pod side of the link.
	link, err := netlink.LinkByName(p.Link.Name)
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.RouteAdd(&netlink.Route{
		LinkIndex: link.Attrs().Index,
		Dst:       &net.IPNet{IP: net.IP(p.IP.AsSlice()), Mask: net.CIDRMask(32, 32)},
		Gw:        net.IP(p.Link.PeerAddr.Addr().AsSlice()),
	}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, func() error {
		_, body, err := get(t, p.URL(), nil)
		if err == nil && body != "bgp" {
			err = errors.New("wrong body " + body)
		}
		return err
	})
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	assertGone(t, p)
}

// A pod behind a "node" namespace that routes, the topology of the BGP tests.
func TestPodBehindNode(t *testing.T) {
	testenv.RequireRoot(t)
	node := testenv.NewNetns(t, "node")
	if err := node.Sysctl("net.ipv4.ip_forward", "1"); err != nil {
		t.Fatal(err)
	}
	uplink := testenv.Veth(t, testenv.VethOptions{PeerNS: node, LinkRange: linkRange})
	p := testenv.StartPod(t, testenv.PodOptions{Name: "behind", IP: podNet + "20", LinkRange: linkRange, Parent: node})

	out, err := node.Exec("ip", "-4", "route", "show", podNet+"20")
	if err != nil || !strings.Contains(out, "via "+p.Link.PeerAddr.Addr().String()) {
		t.Fatalf("route to the pod in the node namespace: %q %v", out, err)
	}
	link, err := netlink.LinkByName(uplink.Name)
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.RouteAdd(&netlink.Route{
		LinkIndex: link.Attrs().Index,
		Dst:       &net.IPNet{IP: net.IP(p.IP.AsSlice()), Mask: net.CIDRMask(32, 32)},
		Gw:        net.IP(uplink.PeerAddr.Addr().AsSlice()),
	}); err != nil {
		t.Fatal(err)
	}
	if _, body, err := get(t, p.URL(), nil); err != nil || body != "behind" {
		t.Fatalf("pod behind node: %q %v", body, err)
	}
	// A listener made with Do lives in the node namespace.
	var ln net.Listener
	if err := node.Do(func() (err error) {
		ln, err = net.Listen("tcp4", uplink.PeerAddr.Addr().String()+":0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	conn, err := net.DialTimeout("tcp4", ln.Addr().String(), 2*time.Second)
	if err != nil {
		t.Fatalf("dial listener in node namespace: %v", err)
	}
	conn.Close()

	name := node.Name
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := uplink.Close(); err != nil {
		t.Fatal(err)
	}
	if err := node.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join("/run/netns", name)); !os.IsNotExist(err) {
		t.Errorf("netns %s left behind", name)
	}
	if _, err := netlink.LinkByName(uplink.Name); err == nil {
		t.Errorf("link %s left behind", uplink.Name)
	}
}

func TestFreePortAndEventually(t *testing.T) {
	port := testenv.FreePort(t)
	if port <= 0 || port > 65535 {
		t.Fatalf("port %d", port)
	}
	n := 0
	testenv.Eventually(t, time.Second, func() error {
		if n++; n < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	err := testenv.Poll(context.Background(), 20*time.Millisecond, func() error { return errors.New("never") })
	if err == nil || !strings.Contains(err.Error(), "never") {
		t.Fatalf("Poll timeout error: %v", err)
	}
}
