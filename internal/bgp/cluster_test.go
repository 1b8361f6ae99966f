package bgp

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
)

func node(name string, annotations map[string]string, addrs ...corev1.NodeAddress) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations, Labels: map[string]string{"zone": "a"}},
		Status: corev1.NodeStatus{Addresses: addrs}}
}

func internalIP(a string) corev1.NodeAddress {
	return corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a}
}

func calicoObject(kind, name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "crd.projectcalico.org/v1", "kind": kind,
		"metadata": map[string]any{"name": name}, "spec": spec,
	}}
}

func TestNodeFromObject(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    *corev1.Node
		want string
	}{
		{"calico annotation wins, mask stripped",
			node("a", map[string]string{annotationIPv4Address: "198.19.64.2/24", annotationASNumber: "64513"},
				internalIP("198.19.65.2"), internalIP("2001:db8::2")),
			"a 198.19.64.2 2001:db8::2 [198.19.64.2 198.19.65.2 2001:db8::2] 64513"},
		{"IPv6 annotation (bird6's address) wins over the IPv6 InternalIP",
			node("a6", map[string]string{annotationIPv4Address: "198.19.64.2/24", annotationIPv6Address: "2001:db8:18:1::2/64"},
				internalIP("198.19.64.2"), internalIP("2001:db8::2")),
			"a6 198.19.64.2 2001:db8:18:1::2 [2001:db8:18:1::2 198.19.64.2 2001:db8::2] 0"},
		{"IPv6 annotation of the wrong family ignored",
			node("a7", map[string]string{annotationIPv6Address: "198.19.64.2/24"}, internalIP("198.19.64.2")),
			"a7 198.19.64.2 invalid IP [198.19.64.2] 0"},
		{"internal IP without annotation",
			node("b", nil, corev1.NodeAddress{Type: corev1.NodeHostName, Address: "b"}, internalIP("198.19.64.3")),
			"b 198.19.64.3 invalid IP [198.19.64.3] 0"},
		{"bad annotation falls back",
			node("c", map[string]string{annotationIPv4Address: "nonsense", annotationASNumber: "x"}, internalIP("198.19.64.4")),
			"c 198.19.64.4 invalid IP [198.19.64.4] 0"},
		{"IPv6 only", node("d", nil, internalIP("2001:db8::4")), "d invalid IP 2001:db8::4 [2001:db8::4] 0"},
		{"no address at all", node("d", nil, corev1.NodeAddress{Type: corev1.NodeHostName, Address: "d"}), "-"},
		{"host-local IPAM: spec.podCIDRs", func() *corev1.Node {
			n := node("e", nil, internalIP("198.19.64.5"))
			n.Spec.PodCIDR, n.Spec.PodCIDRs = "198.18.5.0/24", []string{"198.18.5.0/24", "2001:db8:5::/64"}
			return n
		}(), "e 198.19.64.5 invalid IP [198.19.64.5] 0 [198.18.5.0/24 2001:db8:5::/64]"},
	} {
		// The cache holds Nodes stripped (stripNode): the same view.
		bulky := tc.n.DeepCopy()
		bulky.Status.Images = []corev1.ContainerImage{{Names: []string{"registry.example/big:1"}, SizeBytes: 1 << 30}}
		bulky.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
		bulky.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}
		stripped, _ := stripNode(bulky)
		if sn := stripped.(*corev1.Node); sn.Status.Images != nil || sn.Status.Conditions != nil || sn.ManagedFields != nil {
			t.Errorf("%s: stripped node keeps %+v", tc.name, sn)
		}
		for _, in := range []*corev1.Node{tc.n, stripped.(*corev1.Node)} {
			n, ok := nodeFromObject(in)
			got := "-"
			if ok {
				got = fmt.Sprintf("%s %s %s %v %d", n.Name, n.PeerAddress, n.PeerAddress6, n.Addresses, n.AS)
				if len(n.PodCIDRs) > 0 {
					got += fmt.Sprintf(" %v", n.PodCIDRs)
				}
			}
			if got != tc.want {
				t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
			}
		}
	}
}

func TestPoolAndAffinityFromObject(t *testing.T) {
	p, ok, err := poolFromObject(calicoObject("IPPool", "default", map[string]any{
		"cidr": "198.18.64.0/18", "blockSize": int64(27), "ipipMode": "Always", "vxlanMode": "Never"}))
	if err != nil || !ok || p.CIDR != netip.MustParsePrefix("198.18.64.0/18") || p.BlockSize != 27 || p.Encapsulation != "ipip-always" {
		t.Fatalf("pool %+v ok=%v err=%v", p, ok, err)
	}
	p, ok, err = poolFromObject(calicoObject("IPPool", "defaults", map[string]any{"cidr": "198.18.64.0/18", "vxlanMode": "Always"}))
	if err != nil || !ok || p.BlockSize != 26 || p.Encapsulation != "vxlan-always" {
		t.Fatalf("pool with default block size %+v ok=%v err=%v", p, ok, err)
	}
	// IPv6 pools: Calico's default block size is /122.
	p, ok, err = poolFromObject(calicoObject("IPPool", "v6", map[string]any{"cidr": "2001:db8:18::/48"}))
	if err != nil || !ok || p.CIDR != netip.MustParsePrefix("2001:db8:18::/48") || p.BlockSize != 122 {
		t.Fatalf("IPv6 pool %+v ok=%v err=%v", p, ok, err)
	}
	p, ok, err = poolFromObject(calicoObject("IPPool", "v6", map[string]any{"cidr": "2001:db8:18::/48", "blockSize": int64(116)}))
	if err != nil || !ok || p.BlockSize != 116 {
		t.Fatalf("IPv6 pool with block size %+v ok=%v err=%v", p, ok, err)
	}
	if _, _, err := poolFromObject(calicoObject("IPPool", "v6bad", map[string]any{"cidr": "2001:db8:18::/48", "blockSize": int64(129)})); err == nil {
		t.Fatal("IPv6 block size /129 accepted")
	}
	if a, ok := affinityFromObject(calicoObject("BlockAffinity", "n-v6", map[string]any{"cidr": "2001:db8:18:1::/122", "node": "n",
		"state": "confirmed", "deleted": "false"})); !ok || a.Block != netip.MustParsePrefix("2001:db8:18:1::/122") {
		t.Fatalf("IPv6 affinity %+v ok=%v", a, ok)
	}
	if _, _, err := poolFromObject(calicoObject("IPPool", "bad", map[string]any{"cidr": "198.18.64.0/18", "blockSize": int64(16)})); err == nil {
		t.Fatal("block larger than the pool accepted")
	}
	if w := encapsulationWarning([]Pool{{Name: "x", Encapsulation: "vxlan-always"}}); !strings.Contains(w, "VXLAN") {
		t.Fatalf("warning %q", w)
	}
	p, ok, err = poolFromObject(calicoObject("IPPool", "quiet", map[string]any{"cidr": "198.18.64.0/18", "disableBGPExport": true,
		"allowedUses": []any{"Workload", "Tunnel"}}))
	if err != nil || !ok || !p.DisableBGPExport {
		t.Fatalf("pool with disableBGPExport %+v ok=%v err=%v", p, ok, err)
	}
	if w := encapsulationWarning([]Pool{p}); !strings.Contains(w, "disableBGPExport") {
		t.Fatalf("warning %q", w)
	}
	// Pools for LoadBalancer addresses or tunnels only hold no pods.
	for _, uses := range [][]any{{"LoadBalancer"}, {"Tunnel"}} {
		if _, ok, err := poolFromObject(calicoObject("IPPool", "lb", map[string]any{"cidr": "198.18.128.0/24", "allowedUses": uses})); ok || err != nil {
			t.Fatalf("pool for %v: ok=%v err=%v", uses, ok, err)
		}
	}
	if as, port := bgpConfigurationFromObject(calicoObject("BGPConfiguration", "default",
		map[string]any{"asNumber": int64(64600), "listenPort": int64(1790), "nodeToNodeMeshEnabled": false})); as != 64600 || port != 1790 {
		t.Fatalf("BGPConfiguration: as %d port %d", as, port)
	}

	for _, tc := range []struct {
		spec map[string]any
		ok   bool
	}{
		{map[string]any{"cidr": "198.18.64.0/26", "node": "a", "state": "confirmed", "deleted": "false"}, true},
		{map[string]any{"cidr": "198.18.64.0/26", "node": "a", "state": "confirmed", "type": "host"}, true},
		{map[string]any{"cidr": "198.18.64.0/26", "node": "a", "state": "pending"}, false},
		// Calico exports "" (older data) and pendingDeletion blocks too.
		{map[string]any{"cidr": "198.18.64.0/26", "node": "a", "state": "", "deleted": "false"}, true},
		{map[string]any{"cidr": "198.18.64.0/26", "node": "a", "deleted": "false"}, true},
		{map[string]any{"cidr": "198.18.64.0/26", "node": "a", "state": "pendingDeletion", "deleted": "false"}, true},
		{map[string]any{"cidr": "198.18.64.0/26", "node": "a", "state": "confirmed", "deleted": "true"}, false},
		// projectcalico.org/v3 (v3.32 native): deleted is a boolean.
		{map[string]any{"cidr": "198.18.64.0/26", "node": "a", "state": "confirmed", "deleted": true}, false},
		{map[string]any{"cidr": "198.18.64.0/26", "node": "a", "state": "confirmed", "deleted": false, "type": "host"}, true},
		{map[string]any{"cidr": "198.18.64.0/26", "node": "a", "state": "confirmed", "type": "virtual"}, false},
		{map[string]any{"cidr": "198.18.64.0/26", "state": "confirmed"}, false},
	} {
		a, ok := affinityFromObject(calicoObject("BlockAffinity", "x", tc.spec))
		if ok != tc.ok || (ok && (a.Node != "a" || a.Block != netip.MustParsePrefix("198.18.64.0/26"))) {
			t.Errorf("affinity %v: %+v ok=%v, want ok=%v", tc.spec, a, ok, tc.ok)
		}
	}
}

func newFakeKube(withCalico bool, objects ...runtime.Object) (*fake.Clientset, *dynamicfake.FakeDynamicClient) {
	kube := fake.NewClientset(objects...)
	if withCalico {
		serveCalico(kube, calicoV1)
	}
	kinds := map[schema.GroupVersionResource]string{}
	for _, gv := range calicoGroupVersions {
		kinds[gv.WithResource(resIPPools)] = "IPPoolList"
		kinds[gv.WithResource(resBlockAffinities)] = "BlockAffinityList"
		kinds[gv.WithResource(resBGPConfigurations)] = "BGPConfigurationList"
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), kinds)
	return kube, dyn
}

// serveCalico makes discovery list Calico's resources in gv.
func serveCalico(kube *fake.Clientset, gv schema.GroupVersion) {
	kube.Resources = append(kube.Resources, &metav1.APIResourceList{GroupVersion: gv.String(), APIResources: []metav1.APIResource{
		{Name: resIPPools, Kind: "IPPool"}, {Name: resBlockAffinities, Kind: "BlockAffinity"},
		{Name: resBGPConfigurations, Kind: "BGPConfiguration"}}})
}

// runSource runs src and returns a function waiting for a state matching cond.
func runSource(t *testing.T, src Source) func(what string, cond func(ClusterState) bool) ClusterState {
	ctx, cancel := context.WithCancel(context.Background())
	states := make(chan ClusterState, 100)
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, func(st ClusterState) { states <- st }) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("source: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("source did not stop")
		}
	})
	return func(what string, cond func(ClusterState) bool) ClusterState {
		t.Helper()
		deadline := time.After(10 * time.Second)
		var last ClusterState
		for {
			select {
			case st := <-states:
				if cond(st) {
					return st
				}
				last = st
			case <-deadline:
				t.Fatalf("no state with %s; last: %+v", what, last)
			}
		}
	}
}

func TestKubeSource(t *testing.T) {
	ref := SecretRef{Namespace: "calico-system", Name: "bgp", Key: "mesh"}
	kube, dyn := newFakeKube(true,
		node("node-a", map[string]string{annotationIPv4Address: "198.19.64.2/24"}, internalIP("198.19.64.2")),
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "calico-system", Name: "bgp"},
			Data: map[string][]byte{"mesh": []byte("s3cret")}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "calico-system", Name: "other"},
			Data: map[string][]byte{"mesh": []byte("not this one")}},
	)
	ctx := t.Context()
	_, err := dyn.Resource(ipPoolsGVR).Create(ctx, calicoObject("IPPool", "default",
		map[string]any{"cidr": "198.18.64.0/18", "blockSize": int64(26), "vxlanMode": "Always"}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = dyn.Resource(blockAffinitiesGVR).Create(ctx, calicoObject("BlockAffinity", "node-a-198-18-64-0-26",
		map[string]any{"cidr": "198.18.64.0/26", "node": "node-a", "state": "confirmed"}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wait := runSource(t, NewKubeSource(kube, dyn, []SecretRef{ref}, testLog(t)))

	st := wait("the initial objects", func(st ClusterState) bool { return len(st.Nodes) == 1 })
	if st.Nodes[0].PeerAddress != netip.MustParseAddr("198.19.64.2") || len(st.Pools) != 1 || len(st.Affinities) != 1 ||
		st.Secrets[ref] != "s3cret" || st.Pools[0].Encapsulation != "vxlan-always" {
		t.Fatalf("initial state %+v", st)
	}

	// A node joins, a block is assigned, the password rotates.
	if _, err := kube.CoreV1().Nodes().Create(ctx, node("node-b", nil, internalIP("198.19.64.3")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = dyn.Resource(blockAffinitiesGVR).Create(ctx, calicoObject("BlockAffinity", "node-b-198-18-64-64-26",
		map[string]any{"cidr": "198.18.64.64/26", "node": "node-b", "state": "confirmed"}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().Secrets("calico-system").Update(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "calico-system", Name: "bgp"},
		Data: map[string][]byte{"mesh": []byte("rotated")}}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait("node-b, its block and the new password", func(st ClusterState) bool {
		return len(st.Nodes) == 2 && st.Nodes[1].Name == "node-b" && len(st.Affinities) == 2 && st.Secrets[ref] == "rotated"
	})

	// The node leaves.
	if err := kube.CoreV1().Nodes().Delete(ctx, "node-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wait("node-a gone", func(st ClusterState) bool { return len(st.Nodes) == 1 && st.Nodes[0].Name == "node-b" })
}

func TestKubeSourceWithoutCalico(t *testing.T) {
	kube, dyn := newFakeKube(false, node("node-a", nil, internalIP("198.19.64.2")))
	wait := runSource(t, NewKubeSource(kube, dyn, nil, testLog(t)))
	st := wait("the node", func(st ClusterState) bool { return len(st.Nodes) == 1 })
	if st.Affinities != nil || st.Pools != nil {
		t.Fatalf("without Calico CRDs: pools %v affinities %v (want nil: ownership unknown)", st.Pools, st.Affinities)
	}
}

// v3.32 native-v3 clusters serve only projectcalico.org/v3, with deleted as a
// boolean; CRDs installed after the start are picked up.
func TestKubeSourceCalicoV3AfterStart(t *testing.T) {
	kube, dyn := newFakeKube(false, node("node-a", nil, internalIP("198.19.64.2")))
	src := NewKubeSource(kube, dyn, nil, testLog(t))
	src.Rediscover = 50 * time.Millisecond
	ctx := t.Context()
	v3 := func(kind, name string, spec map[string]any) *unstructured.Unstructured {
		o := calicoObject(kind, name, spec)
		o.SetAPIVersion(calicoV3.String())
		return o
	}
	if _, err := dyn.Resource(calicoV3.WithResource(resIPPools)).Create(ctx, v3("IPPool", "default",
		map[string]any{"cidr": "198.18.64.0/18", "blockSize": int64(26)}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(calicoV3.WithResource(resBlockAffinities)).Create(ctx, v3("BlockAffinity", "node-a-198-18-64-0-26",
		map[string]any{"cidr": "198.18.64.0/26", "node": "node-a", "state": "confirmed", "deleted": false}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(calicoV3.WithResource(resBGPConfigurations)).Create(ctx, v3("BGPConfiguration", "default",
		map[string]any{"asNumber": int64(64600), "listenPort": int64(1790)}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait := runSource(t, src)
	st := wait("the node", func(st ClusterState) bool { return len(st.Nodes) == 1 })
	if st.Affinities != nil || st.Pools != nil {
		t.Fatalf("before the CRDs: pools %v affinities %v", st.Pools, st.Affinities)
	}
	serveCalico(kube, calicoV3)
	st = wait("v3 pools, affinities and BGPConfiguration", func(st ClusterState) bool {
		return len(st.Pools) == 1 && len(st.Affinities) == 1
	})
	if st.ASNumber != 64600 || st.NodePort != 1790 || st.Affinities[0].Node != "node-a" {
		t.Fatalf("state %+v", st)
	}
}
