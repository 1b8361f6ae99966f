package e2e

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/perimeter-ingress/perimeter/internal/routes"
	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// IPv6 addresses of the Calico bed (inside the leak guard 2001:db8::/32):
// the nodes' network 2001:db8:18:112::/64 (edge ::1, node i ::(11+i)), the
// IPv6 IPPool 2001:db8:18:1::/64 in Calico's default /122 blocks (node i
// owns 2001:db8:18:1::(40*i)/122).
const (
	calicoEdge6 = "2001:db8:18:112::1"
	calicoPool6 = "2001:db8:18:1::/64"
)

var calicoRoutesRange6 = netip.MustParsePrefix(calicoPool6)

// A dual-stack cluster: every calico-node runs bird (IPv4) and bird6 (IPv6,
// peering over the node's projectcalico.org/IPv6Address), each with
// confd's configuration and a BGPPeer to the edge. A dual-stack Service has
// an IPv4 endpoint and two IPv6 ones: a pod in node 1's block and one on
// node 0 holding an address borrowed from node 1's block (a /128 learned
// from Felix's route). HAProxy reaches the IPv6 pods over the IPv6 routes
// learned from bird6 only: no static route anywhere on the edge.
func TestCalicoDualStack(t *testing.T) {
	b := newCalicoBed(t, 2, true, false)
	e, n0, n1 := b.e, b.nodes[0], b.nodes[1]
	ctx := context.Background()
	testenv.GuardRoutes(t)
	t.Cleanup(func() {
		for dst := range routesWithin(t, calicoRoutesRange6) {
			_ = exec.Command("ip", "-6", "route", "del", dst, "proto", strconv.Itoa(routes.DefaultProtocol)).Run()
		}
	})
	bridge := fmt.Sprintf("pmcal%d", os.Getpid()%100000)
	if out, err := exec.Command("ip", "-6", "addr", "add", calicoEdge6+"/64", "dev", bridge, "nodad").CombinedOutput(); err != nil {
		t.Fatalf("edge IPv6 address: %v: %s", err, out)
	}

	// The IPv6 pool, blocks, node addresses and BGPPeer, as Calico writes
	// them; each node's bird6.
	b.apply(b.calicoObj("IPPool", "default-ipv6-ippool", map[string]any{"cidr": calicoPool6, "blockSize": int64(122),
		"ipipMode": "Never", "vxlanMode": "Never", "natOutgoing": false, "nodeSelector": "all()", "allowedUses": []any{"Workload"}}))
	b.edgePeer("perimeter", "all()", testenv.CalicoPeer{AS: calicoClusterAS}, nil, n0, n1)
	b.apply(b.calicoObj("BGPPeer", "perimeter-ipv6", map[string]any{"nodeSelector": "all()",
		"peerIP": net.JoinHostPort(calicoEdge6, strconv.Itoa(b.port)), "asNumber": int64(calicoClusterAS)}))
	var mesh6 []string
	for i := range b.nodes {
		mesh6 = append(mesh6, fmt.Sprintf("2001:db8:18:112::%d", 11+i))
	}
	type node6 struct {
		addr, block string
		bird        *testenv.Bird
		spec        testenv.CalicoNode
	}
	v6 := map[*calicoNode]*node6{}
	for i, n := range b.nodes {
		x := &node6{addr: mesh6[i], block: netip.MustParsePrefix(fmt.Sprintf("2001:db8:18:1::%x/122", 0x40*i)).String()}
		if err := n.ns.Sysctl("net/ipv6/conf/all/forwarding", "1"); err != nil {
			t.Fatal(err)
		}
		if out, err := n.ns.Exec("ip", "-6", "addr", "add", x.addr+"/64", "dev", "eth0", "nodad"); err != nil {
			t.Fatalf("%s: %v: %s", n.name, err, out)
		}
		patch := fmt.Sprintf(`{"metadata":{"annotations":{"projectcalico.org/IPv6Address":%q}}}`, x.addr+"/64")
		if _, err := e.c.Admin.CoreV1().Nodes().Patch(ctx, n.name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		b.apply(b.blockAffinity(n.name, x.block))
		x.spec = testenv.CalicoNode{Address: x.addr, RouterID: n.addr, AS: calicoClusterAS, Pools: []string{calicoPool6},
			Blocks: []string{x.block}, Mesh: mesh6,
			Peers: []testenv.CalicoPeer{{Address: calicoEdge6, Port: b.port, AS: calicoClusterAS}}}
		x.bird = testenv.NewCalicoBird6(t, n.ns, b.dir, fmt.Sprintf("c6-%d", i))
		v6[n] = x
	}
	b.start()
	for _, n := range b.nodes {
		conf, err := testenv.CalicoBird6Config(v6[n].spec)
		if err != nil {
			t.Fatal(err)
		}
		if err := v6[n].bird.Start(conf); err != nil {
			t.Fatalf("%s bird6: %v", n.name, err)
		}
	}

	a := n0.pod("ds-a", n0.hostIP(10))
	bb := n1.dualPod("ds-b", n1.hostIP(10), "2001:db8:18:1::4a")
	borrowed := n0.dualPod("ds-borrowed", n0.hostIP(11), "2001:db8:18:1::4b") // in node 1's block
	b.service("web", a)
	ready := true
	if _, err := e.c.Admin.DiscoveryV1().EndpointSlices(e.ns).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "web-ipv6", Labels: map[string]string{
			discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: testenv.ManagedBy}},
		AddressType: discoveryv1.AddressTypeIPv6,
		Ports:       []discoveryv1.EndpointPort{{Name: ptrTo("http"), Port: ptrTo(int32(8080))}},
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{bb.IP6.String()}, NodeName: ptrTo(n1.name), Conditions: discoveryv1.EndpointConditions{Ready: &ready}},
			{Addresses: []string{borrowed.IP6.String()}, NodeName: ptrTo(n0.name), Conditions: discoveryv1.EndpointConditions{Ready: &ready}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.ingress("web", nil, rule{host: "dualstack.example", path: "/", service: "web"})
	// A Service whose IPv6 endpoint is in no pool: no route reaches it.
	e.c.CreateService(t, testenv.ServiceSpec{Namespace: e.ns, Name: "orphan"})
	if _, err := e.c.Admin.DiscoveryV1().EndpointSlices(e.ns).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "orphan-ipv6", Labels: map[string]string{
			discoveryv1.LabelServiceName: "orphan", discoveryv1.LabelManagedBy: testenv.ManagedBy}},
		AddressType: discoveryv1.AddressTypeIPv6,
		Ports:       []discoveryv1.EndpointPort{{Name: ptrTo("http"), Port: ptrTo(int32(8080))}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"2001:db8:18:2::5"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.ingress("orphan", nil, rule{host: "orphan.example", path: "/", service: "orphan"})
	d := e.startDaemon(b.daemonFlags(calicoClusterAS, "--bgp-listen-address-ipv6="+calicoEdge6)...)

	// Four sessions: each node's bird and bird6.
	testenv.Eventually(t, 60*time.Second, func() error {
		st, err := d.bgpStatus()
		if err != nil {
			return err
		}
		var got []string
		for _, p := range st.Peers {
			got = append(got, p.Address.String()+" "+p.Family+" "+p.State)
		}
		want := []string{n0.addr + " ipv4 Established", n1.addr + " ipv4 Established",
			v6[n0].addr + " ipv6 Established", v6[n1].addr + " ipv6 Established"}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			return fmt.Errorf("peers %v, want %v", got, want)
		}
		return nil
	})
	want6 := map[string]string{v6[n0].block: v6[n0].addr, v6[n1].block: v6[n1].addr,
		borrowed.IP6.String() + "/128": v6[n0].addr} // via the node running the pod
	waitRoutesWithin(t, 30*time.Second, calicoRoutesRange6, want6)
	waitCalicoRoutes(t, 30*time.Second, blocksVia(n0, n1))
	if out, _ := exec.Command("ip", "-6", "route", "show", "table", "all", "to", "match", bb.IP6.String()).CombinedOutput(); !strings.Contains(string(out), "proto 201") {
		t.Fatalf("route to %s is not BGP's:\n%s", bb.IP6, out)
	}
	d.answeredBy("dualstack.example", 30*time.Second, a, bb, borrowed)
	d.steady("dualstack.example", 30, 20*time.Second)

	for name, want := range map[string]string{
		`perimeter_bgp_peer_up{peer="` + v6[n1].addr + `"}`:           "1",
		`perimeter_routes_installed_by_family{family="ipv6"}`:         "3",
		`perimeter_bgp_best_paths_by_family{family="ipv6"}`:           "3",
		`perimeter_bgp_prefixes_accepted{peer="` + v6[n0].addr + `"}`: "2",
	} {
		lines, err := d.metricLines(name)
		if err != nil || len(lines) != 1 || !strings.HasSuffix(lines[0], " "+want) {
			t.Errorf("metric %s: %v %v, want %s", name, lines, err, want)
		}
	}
	out, err := runCLI(t, "bgp", "status", "--controller-port="+strconv.Itoa(d.ctrlPort))
	if err != nil || !strings.Contains(out, v6[n1].addr) || !strings.Contains(out, "ipv6") || !strings.Contains(out, v6[n1].block) {
		t.Errorf("perimeter bgp status: %v\n%s", err, out)
	}
	if w := d.warnings("rejected BGP route"); len(w) > 0 {
		t.Errorf("rejections logged at Warn:\n%s", strings.Join(w, "\n"))
	}
	// The unreachable IPv6 endpoint is reported on its Service, once; the
	// reachable ones are not.
	noRoute := func(svc string) []string {
		evs, err := e.c.Admin.CoreV1().Events(e.ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + svc})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, ev := range evs.Items {
			if ev.Reason == "NoRouteToEndpoint" && ev.InvolvedObject.Kind == "Service" {
				out = append(out, fmt.Sprintf("%s (count %d)", ev.Message, ev.Count))
			}
		}
		return out
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		if evs := noRoute("orphan"); len(evs) != 1 || !strings.Contains(evs[0], "2001:db8:18:2::5") || !strings.Contains(evs[0], "count 1") {
			return fmt.Errorf("NoRouteToEndpoint Events on Service orphan: %v", evs)
		}
		return nil
	})
	if evs := noRoute("web"); len(evs) != 0 {
		t.Errorf("Events on Service web, whose IPv6 endpoints are routed: %v", evs)
	}
	if w := d.warnings("IPv6 endpoints unreachable"); len(w) != 1 || !strings.Contains(w[0], "orphan") {
		t.Errorf("warnings: %v", w)
	}
	t.Logf("IPv6 routes installed: %v; requests served by %s (IPv4), %s, %s (IPv6): %d, %d, %d",
		routesWithin(t, calicoRoutesRange6), a.Name, bb.Name, borrowed.Name, a.Requests(), bb.Requests(), borrowed.Requests())

	// Node 1's bird6 stops (Cease): its block goes; the borrowed /128 via
	// node 0 and node 1's IPv4 block stay.
	v6[n1].bird.Stop(syscall.SIGTERM)
	delete(want6, v6[n1].block)
	waitRoutesWithin(t, 20*time.Second, calicoRoutesRange6, want6)

	// The daemon stops: its IPv6 routes go with the IPv4 ones.
	d.stop()
	if got := routesWithin(t, calicoRoutesRange6); len(got) != 0 {
		t.Fatalf("IPv6 routes left after stop: %v", got)
	}
	if got := calicoKernelRoutes(t); len(got) != 0 {
		t.Fatalf("IPv4 routes left after stop: %v", got)
	}
}

func ptrTo[T any](v T) *T { return &v }
