package e2e

// The Calico test bed: "Calico nodes" are network namespaces on one bridge
// (the nodes' network; the root namespace, where the daemon runs, is the
// edge at .1), each running BIRD 1.6 with the configuration calico-node's
// confd renders from the cluster's Calico objects. The objects are created
// as Calico writes them, in an API server of the test's own that serves
// Calico's CRDs (the shared one must stay without them). Pods sit behind
// their node with Felix's device route (proto boot), which BIRD learns.
//
// Addresses: nodes' network 198.19.112.0/24 (fixed, hence a machine-wide
// lock), pod links in 198.19.113.0/24, IPPool 198.18.112.0/22 in /26 blocks
// (node i owns 198.18.112.(64*i)/26), host-local podCIDRs 198.18.114.0/24
// and 198.18.115.0/24 (inside the pool, as a cluster CIDR and its IPPool
// are).

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/perimeter-ingress/perimeter/internal/routes"
	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

const (
	calicoEdge      = "198.19.112.1"
	calicoPodLinks  = "198.19.113.0/24"
	calicoPool      = "198.18.112.0/22"
	calicoClusterAS = 64512
)

// calicoRoutesRange is where every route of these tests falls.
var calicoRoutesRange = netip.MustParsePrefix("198.18.112.0/22")

// calicoBed is one test's Calico cluster.
type calicoBed struct {
	e     *env
	dir   string
	port  int // the daemon's BGP port (the BGPPeer's peerIP port)
	nodes []*calicoNode
	// podNode is where each pod runs, for the EndpointSlices' nodeName.
	podNode map[string]string
	// v3 beds get Calico's projectcalico.org/v3 CRDs only, and only when
	// installCalico is called: until then the Calico objects wait in
	// pending.
	v3      bool
	pending []*unstructured.Unstructured
}

// calicoNode is a namespace with BIRD 1.6 playing calico-node.
type calicoNode struct {
	bed   *calicoBed
	name  string
	addr  string
	block string // its BlockAffinity, or its podCIDR with host-local IPAM
	ns    *testenv.Netns
	bird  *testenv.Bird
	spec  testenv.CalicoNode
}

// newCalicoBed starts the API server with Calico's CRDs, the IPPool and
// BGPConfiguration (mesh on or off, AS 64512), and n nodes with their Node
// objects (and, unless hostLocal, BlockAffinities); BIRD is not started.
func newCalicoBed(t *testing.T, n int, mesh, hostLocal bool) *calicoBed {
	t.Helper()
	return newCalicoBedAPI(t, n, mesh, hostLocal, false)
}

// newCalicoBedAPI is newCalicoBed; with v3, the cluster serves Calico's
// projectcalico.org/v3 CRDs (v3.32's native mode), installed only by
// installCalico.
func newCalicoBedAPI(t *testing.T, n int, mesh, hostLocal, v3 bool) *calicoBed {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireBird1(t)
	testenv.Exclusive(t, "calico-bed-198.19.112")
	c := testenv.StartCluster(t)
	testenv.GuardRoutes(t)
	e := &env{t: t, c: c, ns: c.Namespace(t)}
	ctx := context.Background()
	b := &calicoBed{e: e, dir: shortTempDir(t), port: testenv.FreePort(t), podNode: map[string]string{}, v3: v3}
	if !v3 {
		b.installCalico()
	}
	t.Cleanup(func() {
		for dst := range calicoKernelRoutes(t) {
			_ = exec.Command("ip", "route", "del", dst, "proto", strconv.Itoa(routes.DefaultProtocol)).Run()
		}
	})
	// Objects shaped as Calico writes them (calicoctl / the operator).
	b.apply(
		b.calicoObj("IPPool", "default-ipv4-ippool", map[string]any{"cidr": calicoPool, "blockSize": int64(26),
			"ipipMode": "Never", "vxlanMode": "Never", "natOutgoing": true, "nodeSelector": "all()",
			"allowedUses": []any{"Workload", "Tunnel"}}),
		b.calicoObj("BGPConfiguration", "default", map[string]any{"asNumber": int64(calicoClusterAS),
			"nodeToNodeMeshEnabled": mesh, "logSeverityScreen": "Info"}),
	)
	br := testenv.NewBridge(t, nil, fmt.Sprintf("pmcal%d", os.Getpid()%100000), calicoEdge+"/24")
	var addrs []string
	for i := 0; i < n; i++ {
		addrs = append(addrs, fmt.Sprintf("198.19.112.%d", 11+i))
	}
	for i := 0; i < n; i++ {
		node := &calicoNode{bed: b, name: nodeName(t, i), addr: addrs[i]}
		node.ns = testenv.NewNetns(t, fmt.Sprintf("cal-n%d", i))
		if err := node.ns.Sysctl("net/ipv4/ip_forward", "1"); err != nil {
			t.Fatal(err)
		}
		testenv.Veth(t, testenv.VethOptions{PeerNS: node.ns, PeerName: "eth0", Master: br.Name, PeerAddr: node.addr + "/24"})
		obj := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node.name, Labels: map[string]string{"kubernetes.io/hostname": node.name},
			Annotations: map[string]string{"projectcalico.org/IPv4Address": node.addr + "/24"}},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: node.addr}}}}
		if hostLocal {
			node.block = fmt.Sprintf("198.18.%d.0/24", 114+i)
			obj.Spec.PodCIDR, obj.Spec.PodCIDRs = node.block, []string{node.block}
		} else {
			node.block = fmt.Sprintf("198.18.112.%d/26", 64*i)
		}
		if _, err := c.Admin.CoreV1().Nodes().Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if !hostLocal {
			b.apply(b.blockAffinity(node.name, node.block))
		}
		node.spec = testenv.CalicoNode{Address: node.addr, AS: calicoClusterAS, Pools: []string{calicoPool},
			Blocks: []string{node.block}}
		if mesh {
			node.spec.Mesh = addrs
		}
		node.bird = testenv.NewCalicoBird(t, node.ns, b.dir, fmt.Sprintf("c%d", i))
		b.nodes = append(b.nodes, node)
	}
	return b
}

// installCalico installs the CRDs and creates the objects waiting for them.
func (b *calicoBed) installCalico() {
	b.e.t.Helper()
	install := b.e.c.InstallCalicoCRDs
	if b.v3 {
		install = b.e.c.InstallCalicoV3CRDs
	}
	if err := install(context.Background()); err != nil {
		b.e.t.Fatal(err)
	}
	objs := b.pending
	b.pending = nil
	b.apply(objs...)
}

// apply creates or updates Calico objects, or keeps them for installCalico.
func (b *calicoBed) apply(objs ...*unstructured.Unstructured) {
	b.e.t.Helper()
	if b.v3 && !b.served() {
		b.pending = append(b.pending, objs...)
		return
	}
	if err := b.e.c.Apply(context.Background(), objs...); err != nil {
		b.e.t.Fatal(err)
	}
}

func (b *calicoBed) served() bool {
	_, err := b.e.c.Admin.Discovery().ServerResourcesForGroupVersion("projectcalico.org/v3")
	return err == nil
}

// calicoObj is a Calico object in the bed's API version.
func (b *calicoBed) calicoObj(kind, name string, spec map[string]any) *unstructured.Unstructured {
	o := calicoObj(kind, name, spec)
	if b.v3 {
		o.SetAPIVersion("projectcalico.org/v3")
	}
	return o
}

// blockAffinity is a confirmed BlockAffinity as Calico writes it: deleted
// is "false" in v1 and false in v3.
func (b *calicoBed) blockAffinity(node, cidr string) *unstructured.Unstructured {
	o := testenv.BlockAffinity(node, cidr)
	if b.v3 {
		o.SetAPIVersion("projectcalico.org/v3")
		o.Object["spec"].(map[string]any)["deleted"] = false
	}
	return o
}

func calicoObj(kind, name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "crd.projectcalico.org/v1", "kind": kind,
		"metadata": map[string]any{"name": name}, "spec": spec,
	}}
}

// edgePeer is a BGPPeer selecting nodes (all() or a selector) with the
// daemon as peerIP, as an operator writes it; the same settings go into
// each selected node's BIRD.
func (b *calicoBed) edgePeer(name, selector string, p testenv.CalicoPeer, extra map[string]any, nodes ...*calicoNode) {
	b.e.t.Helper()
	p.Address, p.Port = calicoEdge, b.port
	spec := map[string]any{"nodeSelector": selector, "peerIP": net.JoinHostPort(calicoEdge, strconv.Itoa(b.port)),
		"asNumber": int64(p.AS)}
	for k, v := range extra {
		spec[k] = v
	}
	b.apply(b.calicoObj("BGPPeer", name, spec))
	for _, n := range nodes {
		n.spec.Peers = append(n.spec.Peers, p)
	}
}

// start renders the node's configuration and runs its BIRD.
func (n *calicoNode) start() {
	t := n.bed.e.t
	t.Helper()
	conf, err := testenv.CalicoBirdConfig(n.spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.bird.Start(conf); err != nil {
		t.Fatalf("%s: %v", n.name, err)
	}
}

// reconfigure re-renders the configuration, as confd does on a change.
func (n *calicoNode) reconfigure() {
	t := n.bed.e.t
	t.Helper()
	conf, err := testenv.CalicoBirdConfig(n.spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.bird.Reconfigure(conf); err != nil {
		t.Fatal(err)
	}
}

func (b *calicoBed) start() {
	for _, n := range b.nodes {
		n.start()
	}
}

// pod starts an HTTP pod on the node at ip with Felix's route to it: a
// device route, proto boot, which BIRD's kernel protocol learns.
func (n *calicoNode) pod(name, ip string) *testenv.Pod { return n.dualPod(name, ip, "") }

// dualPod is pod with an IPv6 address too (ip6 "": none), and Felix's
// IPv6 device route to it, which bird6 learns.
func (n *calicoNode) dualPod(name, ip, ip6 string) *testenv.Pod {
	t := n.bed.e.t
	t.Helper()
	p := testenv.StartPod(t, testenv.PodOptions{Name: name, IP: ip, IP6: ip6, Parent: n.ns, LinkRange: calicoPodLinks, NoHostRoute: true})
	nl, err := n.ns.Netlink()
	if err != nil {
		t.Fatal(err)
	}
	link, err := nl.LinkByName(p.Link.Name)
	if err != nil {
		t.Fatal(err)
	}
	dsts := []*net.IPNet{{IP: p.IP.AsSlice(), Mask: net.CIDRMask(32, 32)}}
	if ip6 != "" {
		dsts = append(dsts, &net.IPNet{IP: p.IP6.AsSlice(), Mask: net.CIDRMask(128, 128)})
	}
	for _, dst := range dsts {
		if err := nl.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Scope: netlink.SCOPE_LINK,
			Dst: dst, Protocol: netlink.RouteProtocol(3)}); err != nil {
			t.Fatalf("route to %s in %s: %v", dst, n.name, err)
		}
	}
	n.bed.podNode[name] = n.name
	return p
}

// service is env.service with each endpoint's nodeName, as the
// EndpointSlice controller writes it.
func (b *calicoBed) service(name string, pods ...*testenv.Pod) *testenv.Service {
	b.e.t.Helper()
	s := b.e.c.CreateService(b.e.t, testenv.ServiceSpec{Namespace: b.e.ns, Name: name, Endpoints: b.endpoints(pods...)})
	b.e.annotate("Service", name, checkedService)
	return s
}

func (b *calicoBed) endpoints(pods ...*testenv.Pod) []testenv.Endpoint {
	var out []testenv.Endpoint
	for _, p := range pods {
		out = append(out, testenv.Endpoint{IP: p.IP.String(), NodeName: b.podNode[p.Name]})
	}
	return out
}

// hostIP is the address at offset in the node's block.
func (n *calicoNode) hostIP(offset int) string {
	a := netip.MustParsePrefix(n.block).Addr().As4()
	a[3] += byte(offset)
	return netip.AddrFrom4(a).String()
}

// daemonFlags run the speaker as the edge of this bed, peering with the
// Nodes.
func (b *calicoBed) daemonFlags(localAS int, extra ...string) []string {
	return append([]string{
		"--bgp-local-as=" + strconv.Itoa(localAS),
		"--bgp-router-id=" + calicoEdge,
		"--bgp-listen-address=" + calicoEdge,
		"--bgp-listen-port=" + strconv.Itoa(b.port),
		"--bgp-peers-from-nodes",
		"--bgp-hold-time=9s",
	}, extra...)
}

// calicoKernelRoutes are the daemon's main-table routes in this bed's
// range: destination -> gateway.
func calicoKernelRoutes(t testing.TB) map[string]string { return routesWithin(t, calicoRoutesRange) }

func waitCalicoRoutes(t testing.TB, timeout time.Duration, want map[string]string) {
	t.Helper()
	waitRoutesWithin(t, timeout, calicoRoutesRange, want)
}

// blocksVia is the expected kernel state: each node's block via the node.
func blocksVia(nodes ...*calicoNode) map[string]string {
	out := map[string]string{}
	for _, n := range nodes {
		out[n.block] = n.addr
	}
	return out
}

// waitCalicoPeers polls until the speaker's Established peers are exactly
// these nodes.
func (d *daemon) waitCalicoPeers(timeout time.Duration, nodes ...*calicoNode) {
	d.t.Helper()
	testenv.Eventually(d.t, timeout, func() error {
		st, err := d.bgpStatus()
		if err != nil {
			return err
		}
		want := map[string]bool{}
		for _, n := range nodes {
			want[n.addr] = true
		}
		for _, p := range st.Peers {
			if !want[p.Address.String()] || p.State != "Established" {
				return fmt.Errorf("peer %s %s (%s), want established peers %v", p.Address, p.State, p.Problem, want)
			}
			delete(want, p.Address.String())
		}
		if len(want) > 0 {
			return fmt.Errorf("no session with %v", want)
		}
		return nil
	})
}

// metricLines returns the daemon's /metrics lines starting with name.
func (d *daemon) metricLines(name string) ([]string, error) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", d.ctrlPort))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(l, name) {
			out = append(out, l)
		}
	}
	return out, nil
}

// warnings are the daemon's log lines at WARN containing msg.
func (d *daemon) warnings(msg string) []string {
	var out []string
	for _, l := range strings.Split(d.out.String(), "\n") {
		if strings.Contains(l, "level=WARN") && strings.Contains(l, msg) {
			out = append(out, l)
		}
	}
	return out
}

// stopNode shuts a node's BIRD down (Cease to its peers).
func (n *calicoNode) stop() { n.bird.Stop(syscall.SIGTERM) }
