package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// Issue 15's proof: every way a Calico cluster exports pod routes, against
// BIRD 1.6 configured as calico-node configures it. Pods are reached through
// HAProxy over BGP-learned routes only.

// The documented setup: iBGP (the edge in the cluster's AS), the node mesh
// on, a BGPPeer to the edge with an MD5 password from a Secret and TTL
// security. A pod on node 1 holds an address borrowed from node 0's block.
func TestCalicoMeshIBGP(t *testing.T) {
	b := newCalicoBed(t, 2, true, false)
	e, n0, n1 := b.e, b.nodes[0], b.nodes[1]
	if _, err := e.c.Admin.CoreV1().Secrets(e.ns).Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "bgp-password"}, Data: map[string][]byte{"password": []byte("calico-s3cret")},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	b.edgePeer("perimeter", "all()", testenv.CalicoPeer{AS: calicoClusterAS, Password: "calico-s3cret", TTLSecurity: 1},
		map[string]any{"password": map[string]any{"secretKeyRef": map[string]any{"name": "bgp-password", "key": "password"}},
			"ttlSecurity": int64(1)}, n0, n1)
	b.start()
	a := n0.pod("cal-a", n0.hostIP(10))
	bb := n1.pod("cal-b", n1.hostIP(10))
	borrowed := n1.pod("cal-borrowed", n0.hostIP(40))
	b.service("web", a, bb, borrowed)
	e.ingress("web", nil, rule{host: "calico.example", path: "/", service: "web"})
	d := e.startDaemon(b.daemonFlags(calicoClusterAS,
		"--bgp-node-password-secret="+e.ns+"/bgp-password", "--bgp-node-ttl-security=1")...)

	d.waitCalicoPeers(60*time.Second, n0, n1)
	want := blocksVia(n0, n1)
	want[n0.hostIP(40)+"/32"] = n1.addr // the borrowed address, via the node running the pod
	waitCalicoRoutes(t, 30*time.Second, want)
	d.answeredBy("calico.example", 20*time.Second, a, bb, borrowed)
	d.steady("calico.example", 30, 20*time.Second)
	if w := d.warnings("rejected BGP route"); len(w) > 0 {
		t.Errorf("rejections logged at Warn:\n%s", strings.Join(w, "\n"))
	}
	t.Logf("routes installed: %v; requests served by %s, %s, %s: %d, %d, %d", calicoKernelRoutes(t),
		a.Name, bb.Name, borrowed.Name, a.Requests(), bb.Requests(), borrowed.Requests())
}

// eBGP edge (AS 65000): each node re-announces every other node's block
// and the borrowed /32 with itself as next hop. Only the owners' paths are
// used (for the /32, the path from the node running the pod, its
// EndpointSlice's nodeName); the rest is counted, in metrics and status,
// without a Warn line. The nodes' AS comes from the BGPConfiguration.
func TestCalicoEBGPEdge(t *testing.T) {
	b := newCalicoBed(t, 3, true, false)
	e, n := b.e, b.nodes
	b.edgePeer("perimeter", "all()", testenv.CalicoPeer{AS: 65000}, nil, n...)
	b.start()
	pods := []*testenv.Pod{n[0].pod("ebgp-a", n[0].hostIP(10)), n[1].pod("ebgp-b", n[1].hostIP(10)),
		n[2].pod("ebgp-c", n[2].hostIP(10)), n[2].pod("ebgp-borrowed", n[0].hostIP(40))}
	b.service("web", pods...)
	e.ingress("web", nil, rule{host: "ebgp.example", path: "/", service: "web"})
	d := e.startDaemon(b.daemonFlags(65000)...)

	d.waitCalicoPeers(60*time.Second, n...)
	want := blocksVia(n...)
	want[n[0].hostIP(40)+"/32"] = n[2].addr // not via node 1, which re-announces it too
	waitCalicoRoutes(t, 30*time.Second, want)
	d.answeredBy("ebgp.example", 20*time.Second, pods...)

	// Each node sends the two other blocks via itself: 6 expected
	// rejections, and the /32 from every node.
	testenv.Eventually(t, 20*time.Second, func() error {
		st, err := d.bgpStatus()
		if err != nil {
			return err
		}
		n := 0
		for _, r := range st.Rejected {
			if r.Reason != "next-hop-not-owner" || !r.Expected {
				return fmt.Errorf("unexpected rejection %+v", r)
			}
			n++
		}
		if n != 6 {
			return fmt.Errorf("%d rejections, want 6: %+v", n, st.Rejected)
		}
		return nil
	})
	lines, err := d.metricLines(`perimeter_bgp_prefixes_rejected_total{`)
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, l := range lines {
		var v float64
		if _, err := fmt.Sscan(l[strings.LastIndexByte(l, ' ')+1:], &v); err == nil && strings.Contains(l, `reason="next-hop-not-owner"`) {
			total += v
		}
	}
	if total < 6 {
		t.Errorf("perimeter_bgp_prefixes_rejected_total{reason=next-hop-not-owner} = %v, want at least 6:\n%s", total, strings.Join(lines, "\n"))
	}
	out, err := runCLI(t, "bgp", "status", "--controller-port="+strconv.Itoa(d.ctrlPort))
	if err != nil || !strings.Contains(out, "next-hop-not-owner") {
		t.Errorf("perimeter bgp status: %v\n%s", err, out)
	}
	if w := d.warnings("rejected BGP route"); len(w) > 0 {
		t.Errorf("expected rejections logged at Warn:\n%s", strings.Join(w, "\n"))
	}
	d.steady("ebgp.example", 30, 20*time.Second)
	t.Logf("routes installed: %v; requests served: %s", calicoKernelRoutes(t), served(pods))
}

// eBGP with nextHopMode: Keep: every path keeps its owner as next hop,
// nothing is rejected.
func TestCalicoEBGPKeepNextHop(t *testing.T) {
	b := newCalicoBed(t, 3, true, false)
	e, n := b.e, b.nodes
	b.edgePeer("perimeter", "all()", testenv.CalicoPeer{AS: 65000, NextHopMode: "Keep"},
		map[string]any{"nextHopMode": "Keep"}, n...)
	b.start()
	pods := []*testenv.Pod{n[0].pod("keep-a", n[0].hostIP(10)), n[1].pod("keep-b", n[1].hostIP(10)),
		n[2].pod("keep-c", n[2].hostIP(10)), n[1].pod("keep-borrowed", n[0].hostIP(40))}
	b.service("web", pods...)
	e.ingress("web", nil, rule{host: "keep.example", path: "/", service: "web"})
	d := e.startDaemon(b.daemonFlags(65000)...)

	d.waitCalicoPeers(60*time.Second, n...)
	want := blocksVia(n...)
	want[n[0].hostIP(40)+"/32"] = n[1].addr
	waitCalicoRoutes(t, 30*time.Second, want)
	d.answeredBy("keep.example", 20*time.Second, pods...)
	testenv.Eventually(t, 20*time.Second, func() error {
		st, err := d.bgpStatus()
		if err != nil {
			return err
		}
		received := 0
		for _, p := range st.Peers {
			received += p.Received
		}
		// Every node sends all 3 blocks, and the /32 comes from nodes 1
		// and 2 (node 0 keeps what is inside its block to itself).
		if received != 11 || len(st.Rejected) != 0 {
			return fmt.Errorf("received %d (want 11), rejected %+v", received, st.Rejected)
		}
		return nil
	})
	d.steady("keep.example", 30, 20*time.Second)
	t.Logf("routes installed: %v; requests served: %s", calicoKernelRoutes(t), served(pods))
}

// Route reflector: the mesh is off, node 0 reflects for the others and is
// the only node peering with the edge (--bgp-node-selector, the BGPPeer's
// nodeSelector). Reflected routes keep their owners as next hops.
func TestCalicoRouteReflector(t *testing.T) {
	b := newCalicoBed(t, 3, false, false)
	e, n := b.e, b.nodes
	rr := n[0]
	ctx := context.Background()
	node, err := e.c.Admin.CoreV1().Nodes().Get(ctx, rr.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Labels["route-reflector"] = "true"
	node.Annotations["projectcalico.org/RouteReflectorClusterID"] = "224.0.0.1"
	if _, err := e.c.Admin.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Apply(ctx, calicoObj("BGPPeer", "peer-with-route-reflectors", map[string]any{
		"nodeSelector": "all()", "peerSelector": "route-reflector == 'true'"})); err != nil {
		t.Fatal(err)
	}
	rr.spec.RRClusterID = "224.0.0.1"
	for _, c := range n[1:] {
		c.spec.NodePeers = []testenv.CalicoNodePeer{{Address: rr.addr, RRClusterID: "224.0.0.1"}}
		rr.spec.NodePeers = append(rr.spec.NodePeers, testenv.CalicoNodePeer{Address: c.addr})
	}
	b.edgePeer("perimeter", "route-reflector == 'true'", testenv.CalicoPeer{AS: calicoClusterAS}, nil, rr)
	b.start()
	pods := []*testenv.Pod{n[0].pod("rr-a", n[0].hostIP(10)), n[1].pod("rr-b", n[1].hostIP(10)),
		n[2].pod("rr-c", n[2].hostIP(10))}
	b.service("web", pods...)
	e.ingress("web", nil, rule{host: "rr.example", path: "/", service: "web"})
	d := e.startDaemon(b.daemonFlags(calicoClusterAS, "--bgp-node-selector=route-reflector=true")...)

	d.waitCalicoPeers(60*time.Second, rr)
	waitCalicoRoutes(t, 30*time.Second, blocksVia(n...))
	d.answeredBy("rr.example", 20*time.Second, pods...)
	d.steady("rr.example", 30, 20*time.Second)
	if st, err := d.bgpStatus(); err != nil || len(st.Rejected) != 0 {
		t.Errorf("rejected: %+v (%v)", st.Rejected, err)
	}
	t.Logf("routes installed: %v; requests served: %s", calicoKernelRoutes(t), served(pods))
}

// host-local IPAM: each node announces its Node's spec.podCIDRs (a /24,
// shorter than the pool's /26 blocks) and no BlockAffinity exists,
// although the CRD is served.
func TestCalicoHostLocalIPAM(t *testing.T) {
	b := newCalicoBed(t, 2, true, true)
	e, n := b.e, b.nodes
	b.edgePeer("perimeter", "all()", testenv.CalicoPeer{AS: calicoClusterAS}, nil, n...)
	b.start()
	pods := []*testenv.Pod{n[0].pod("hl-a", n[0].hostIP(10)), n[1].pod("hl-b", n[1].hostIP(10))}
	b.service("web", pods...)
	e.ingress("web", nil, rule{host: "hostlocal.example", path: "/", service: "web"})
	d := e.startDaemon(b.daemonFlags(calicoClusterAS)...)

	d.waitCalicoPeers(60*time.Second, n...)
	waitCalicoRoutes(t, 30*time.Second, blocksVia(n...))
	d.answeredBy("hostlocal.example", 20*time.Second, pods...)
	d.steady("hostlocal.example", 30, 20*time.Second)
	out, err := runCLI(t, "bgp", "status", "--controller-port="+strconv.Itoa(d.ctrlPort))
	if err != nil || !strings.Contains(out, "Node podCIDRs: 2") {
		t.Errorf("perimeter bgp status: %v\n%s", err, out)
	}
	t.Logf("routes installed: %v; requests served: %s", calicoKernelRoutes(t), served(pods))
}

// A node's BIRD restarts (graceful restart: its routes stay), a block is
// released (pendingDeletion, then gone) and a node leaves, under a steady
// stream of requests whose failures are counted.
func TestCalicoNodeLifecycle(t *testing.T) {
	b := newCalicoBed(t, 2, true, false)
	e, n0, n1 := b.e, b.nodes[0], b.nodes[1]
	ctx := context.Background()
	b.edgePeer("perimeter", "all()", testenv.CalicoPeer{AS: calicoClusterAS}, nil, n0, n1)
	b.start()
	a, bb := n0.pod("life-a", n0.hostIP(10)), n1.pod("life-b", n1.hostIP(10))
	svc := b.service("web", a, bb)
	e.ingress("web", nil, rule{host: "life.example", path: "/", service: "web"})
	d := e.startDaemon(b.daemonFlags(calicoClusterAS)...)
	d.waitCalicoPeers(60*time.Second, n0, n1)
	waitCalicoRoutes(t, 30*time.Second, blocksVia(n0, n1))
	d.answeredBy("life.example", 20*time.Second, a, bb)

	// BIRD on node 1 crashes and comes back (calico-node restarting).
	loop := startRequestLoop(d.httpPort, "life.example")
	n1.bird.Stop(syscall.SIGKILL)
	testenv.Eventually(t, 20*time.Second, func() error {
		st, err := d.bgpStatus()
		if err != nil {
			return err
		}
		for _, p := range st.Peers {
			if p.Address.String() == n1.addr && p.State != "Established" {
				return nil
			}
		}
		return fmt.Errorf("session with %s still up", n1.addr)
	})
	if got := calicoKernelRoutes(t); got[n1.block] != n1.addr {
		t.Fatalf("graceful restart: %s's route gone while its BIRD restarts: %v", n1.block, got)
	}
	n1.start()
	d.waitCalicoPeers(60*time.Second, n0, n1)
	waitCalicoRoutes(t, 30*time.Second, blocksVia(n0, n1))
	d.steady("life.example", 20, 20*time.Second)
	sent, failed, errs := loop.finish()
	t.Logf("BIRD restart: %d requests, %d failed %v", sent, failed, errs)
	if failed > 0 {
		t.Errorf("BIRD restart: %d of %d requests failed: %v", failed, sent, errs)
	}

	// Node 1 gets a second block, then Calico releases it: pendingDeletion
	// (still exported), then the affinity goes and confd drops the block.
	second := "198.18.112.192/26"
	aff := testenv.BlockAffinity(n1.name, second)
	if err := e.c.Apply(ctx, aff); err != nil {
		t.Fatal(err)
	}
	n1.spec.Blocks = append(n1.spec.Blocks, second)
	n1.reconfigure()
	want := blocksVia(n0, n1)
	want[second] = n1.addr
	waitCalicoRoutes(t, 30*time.Second, want)
	aff = testenv.BlockAffinity(n1.name, second)
	aff.Object["spec"].(map[string]any)["state"] = "pendingDeletion"
	if err := e.c.Apply(ctx, aff); err != nil {
		t.Fatal(err)
	}
	n1.spec.Blocks, n1.spec.PendingDeletion = []string{n1.block}, []string{second}
	n1.reconfigure()
	waitCalicoRoutes(t, 10*time.Second, want)
	dyn, err := dynamic.NewForConfig(e.c.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := dyn.Resource(schema.GroupVersionResource{Group: "crd.projectcalico.org", Version: "v1", Resource: "blockaffinities"}).
		Delete(ctx, aff.GetName(), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	n1.spec.PendingDeletion = nil
	n1.reconfigure()
	waitCalicoRoutes(t, 30*time.Second, blocksVia(n0, n1))

	// Node 1 is drained and leaves: its pod goes out of the Service, its
	// Node object is deleted, calico-node stops.
	loop = startRequestLoop(d.httpPort, "life.example")
	svc.SetEndpoints(t, b.endpoints(a)...)
	d.steady("life.example", 20, 20*time.Second, bb)
	if err := e.c.Admin.CoreV1().Nodes().Delete(ctx, n1.name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	n1.stop()
	d.waitCalicoPeers(30*time.Second, n0)
	waitCalicoRoutes(t, 30*time.Second, blocksVia(n0))
	d.steady("life.example", 20, 20*time.Second, bb)
	sent, failed, errs = loop.finish()
	t.Logf("node leaving: %d requests, %d failed %v; requests served: %s", sent, failed, errs, served([]*testenv.Pod{a, bb}))
	if failed > 0 {
		t.Errorf("node leaving: %d of %d requests failed: %v", failed, sent, errs)
	}
}

// Calico v3.32 with its native projectcalico.org/v3 CRDs (deleted is a
// boolean), installed after the daemon started: until then blocks are
// accepted from --pod-cidr without ownership check; once the daemon sees
// the CRDs, a block without affinity (a stray announcement from node 0) is
// rejected and the owned ones stay.
func TestCalicoV3CRDsAfterStart(t *testing.T) {
	b := newCalicoBedAPI(t, 2, true, false, true)
	e, n0, n1 := b.e, b.nodes[0], b.nodes[1]
	b.edgePeer("perimeter", "all()", testenv.CalicoPeer{AS: calicoClusterAS}, nil, n0, n1)
	stray := "198.18.112.192/26"
	n0.spec.Blocks = append(n0.spec.Blocks, stray)
	b.start()
	pods := []*testenv.Pod{n0.pod("v3-a", n0.hostIP(10)), n1.pod("v3-b", n1.hostIP(10))}
	b.service("web", pods...)
	e.ingress("web", nil, rule{host: "v3.example", path: "/", service: "web"})
	d := e.startDaemon(b.daemonFlags(calicoClusterAS, "--pod-cidr="+calicoPool)...)
	d.waitCalicoPeers(60*time.Second, n0, n1)
	want := blocksVia(n0, n1)
	want[stray] = n0.addr
	waitCalicoRoutes(t, 30*time.Second, want)
	d.answeredBy("v3.example", 20*time.Second, pods...)

	loop := startRequestLoop(d.httpPort, "v3.example")
	b.installCalico()
	// The daemon looks for Calico's resources again every 20s.
	waitCalicoRoutes(t, 60*time.Second, blocksVia(n0, n1))
	st, err := d.bgpStatus()
	if err != nil {
		t.Fatal(err)
	}
	if !st.OwnershipChecked || st.OwnedBlocks != 2 || len(st.Rejected) != 1 || st.Rejected[0].Prefix.String() != stray ||
		st.Rejected[0].Reason != "no-block-affinity" {
		t.Fatalf("after the v3 CRDs: ownership checked %v (%d blocks), rejected %+v", st.OwnershipChecked, st.OwnedBlocks, st.Rejected)
	}
	d.steady("v3.example", 20, 20*time.Second)
	sent, failed, errs := loop.finish()
	t.Logf("routes installed: %v; %d requests while the CRDs came, %d failed %v; served: %s",
		calicoKernelRoutes(t), sent, failed, errs, served(pods))
	if failed > 0 {
		t.Errorf("%d of %d requests failed: %v", failed, sent, errs)
	}
}

func served(pods []*testenv.Pod) string {
	var out []string
	for _, p := range pods {
		out = append(out, fmt.Sprintf("%s %d", p.Name, p.Requests()))
	}
	return strings.Join(out, ", ")
}
