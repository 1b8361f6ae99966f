package bgp

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// ClusterState is what the speaker needs to know about the cluster, as one
// immutable snapshot.
type ClusterState struct {
	Nodes []Node `json:"nodes"`
	// Pools are Calico's IPv4 IPPools.
	Pools []Pool `json:"pools"`
	// Affinities are the confirmed BlockAffinities; nil when Calico's
	// BlockAffinity resource is not served (ownership is then not checked).
	Affinities []Affinity `json:"affinities"`
	// Secrets maps the referenced Secret keys that exist to their values.
	Secrets map[SecretRef]string `json:"-"`
}

// Source delivers cluster state. Run calls update with a complete snapshot
// once its caches are synced and again after every change, until ctx ends;
// update must not block for long.
type Source interface {
	Run(ctx context.Context, update func(ClusterState)) error
}

// Calico annotations on Node objects (set by calico-node).
const (
	annotationIPv4Address = "projectcalico.org/IPv4Address"
	annotationASNumber    = "projectcalico.org/ASNumber"
)

// Calico's CRDs in Kubernetes-datastore mode.
var (
	calicoGroupVersion = schema.GroupVersion{Group: "crd.projectcalico.org", Version: "v1"}
	ipPoolsGVR         = calicoGroupVersion.WithResource("ippools")
	blockAffinitiesGVR = calicoGroupVersion.WithResource("blockaffinities")
)

// KubeSource watches Nodes, Calico IPPools and BlockAffinities (when the
// CRDs are served) and the Secrets holding BGP passwords.
type KubeSource struct {
	kube    kubernetes.Interface
	dyn     dynamic.Interface
	secrets []SecretRef
	log     *slog.Logger
	// Resync is the informers' resync period (0: none).
	Resync time.Duration
}

// NewKubeSource returns a source reading through kube and dyn; secrets are
// the Secret keys to watch (Config.SecretRefs).
func NewKubeSource(kube kubernetes.Interface, dyn dynamic.Interface, secrets []SecretRef, log *slog.Logger) *KubeSource {
	if log == nil {
		log = slog.Default()
	}
	return &KubeSource{kube: kube, dyn: dyn, secrets: secrets, log: log}
}

// Run implements Source.
func (k *KubeSource) Run(ctx context.Context, update func(ClusterState)) error {
	pools, affinities, err := k.discoverCalico()
	if err != nil {
		return err
	}
	changed := make(chan struct{}, 1)
	notify := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { notify() },
		UpdateFunc: func(any, any) { notify() },
		DeleteFunc: func(any) { notify() },
	}

	var synced []cache.InformerSynced
	factory := informers.NewSharedInformerFactory(k.kube, k.Resync)
	nodeInf := factory.Core().V1().Nodes().Informer()
	if _, err := nodeInf.AddEventHandler(handler); err != nil {
		return fmt.Errorf("node informer: %w", err)
	}
	synced = append(synced, nodeInf.HasSynced)

	// One informer per referenced Secret: the daemon may read only those.
	type secretInf struct {
		ref SecretRef
		inf cache.SharedIndexInformer
	}
	var secretInfs []secretInf
	var secretFactories []informers.SharedInformerFactory
	seen := map[[2]string]cache.SharedIndexInformer{}
	for _, ref := range k.secrets {
		key := [2]string{ref.Namespace, ref.Name}
		inf, ok := seen[key]
		if !ok {
			f := informers.NewSharedInformerFactoryWithOptions(k.kube, k.Resync,
				informers.WithNamespace(ref.Namespace),
				informers.WithTweakListOptions(func(o *metav1.ListOptions) {
					o.FieldSelector = fields.OneTermEqualSelector("metadata.name", ref.Name).String()
				}))
			inf = f.Core().V1().Secrets().Informer()
			if _, err := inf.AddEventHandler(handler); err != nil {
				return fmt.Errorf("secret informer: %w", err)
			}
			seen[key] = inf
			secretFactories = append(secretFactories, f)
			synced = append(synced, inf.HasSynced)
		}
		secretInfs = append(secretInfs, secretInf{ref, inf})
	}

	var poolInf, affInf cache.SharedIndexInformer
	if pools || affinities {
		df := dynamicinformer.NewDynamicSharedInformerFactory(k.dyn, k.Resync)
		if pools {
			poolInf = df.ForResource(ipPoolsGVR).Informer()
			if _, err := poolInf.AddEventHandler(handler); err != nil {
				return fmt.Errorf("ippool informer: %w", err)
			}
			synced = append(synced, poolInf.HasSynced)
		}
		if affinities {
			affInf = df.ForResource(blockAffinitiesGVR).Informer()
			if _, err := affInf.AddEventHandler(handler); err != nil {
				return fmt.Errorf("blockaffinity informer: %w", err)
			}
			synced = append(synced, affInf.HasSynced)
		}
		df.Start(ctx.Done())
		defer df.Shutdown()
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	for _, f := range secretFactories {
		f.Start(ctx.Done())
		defer f.Shutdown()
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return ctx.Err()
	}

	var lastEncap string
	for {
		st := ClusterState{Secrets: map[SecretRef]string{}}
		for _, o := range nodeInf.GetStore().List() {
			if n, ok := nodeFromObject(o.(*corev1.Node)); ok {
				st.Nodes = append(st.Nodes, n)
			}
		}
		slices.SortFunc(st.Nodes, func(a, b Node) int { return strings.Compare(a.Name, b.Name) })
		for _, s := range secretInfs {
			o, ok, _ := s.inf.GetStore().GetByKey(s.ref.Namespace + "/" + s.ref.Name)
			if !ok {
				continue
			}
			if v, ok := o.(*corev1.Secret).Data[s.ref.Key]; ok {
				st.Secrets[s.ref] = string(v)
			}
		}
		if poolInf != nil {
			for _, o := range poolInf.GetStore().List() {
				p, ok, err := poolFromObject(o.(*unstructured.Unstructured))
				if err != nil {
					k.log.Warn("ignoring IPPool", "err", err)
				}
				if ok {
					st.Pools = append(st.Pools, p)
				}
			}
		}
		if affInf != nil {
			st.Affinities = []Affinity{}
			for _, o := range affInf.GetStore().List() {
				if a, ok := affinityFromObject(o.(*unstructured.Unstructured)); ok {
					st.Affinities = append(st.Affinities, a)
				}
			}
		}
		if w := encapsulationWarning(st.Pools); w != lastEncap {
			if w != "" {
				k.log.Warn(w)
			}
			lastEncap = w
		}
		update(st)
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
	}
}

// discoverCalico reports which Calico resources the API server serves.
func (k *KubeSource) discoverCalico() (pools, affinities bool, _ error) {
	rl, err := k.kube.Discovery().ServerResourcesForGroupVersion(calicoGroupVersion.String())
	switch {
	case apierrors.IsNotFound(err):
		k.log.Warn("Calico CRDs (crd.projectcalico.org/v1) not served: accepting any block inside the configured pod CIDRs, without ownership check")
		return false, false, nil
	case err != nil:
		return false, false, fmt.Errorf("discover Calico resources: %w", err)
	}
	for _, r := range rl.APIResources {
		switch r.Name {
		case ipPoolsGVR.Resource:
			pools = true
		case blockAffinitiesGVR.Resource:
			affinities = true
		}
	}
	if !affinities {
		k.log.Warn("Calico BlockAffinity resource not served: blocks are accepted without ownership check")
	}
	return pools, affinities, nil
}

// nodeFromObject extracts the BGP view of a Node: Calico's BGP address
// (annotation, without its mask) or else the first IPv4 InternalIP.
func nodeFromObject(n *corev1.Node) (Node, bool) {
	out := Node{Name: n.Name, Labels: n.Labels}
	if v, ok := n.Annotations[annotationIPv4Address]; ok {
		if p, err := netip.ParsePrefix(v); err == nil && p.Addr().Is4() {
			out.PeerAddress = p.Addr()
		} else if a, err := netip.ParseAddr(v); err == nil && a.Is4() {
			out.PeerAddress = a
		}
	}
	for _, a := range n.Status.Addresses {
		ip, err := netip.ParseAddr(a.Address)
		if err != nil || !ip.Is4() {
			continue
		}
		if a.Type == corev1.NodeInternalIP && !out.PeerAddress.IsValid() {
			out.PeerAddress = ip
		}
		if (a.Type == corev1.NodeInternalIP || a.Type == corev1.NodeExternalIP) && !slices.Contains(out.Addresses, ip) {
			out.Addresses = append(out.Addresses, ip)
		}
	}
	if out.PeerAddress.IsValid() && !slices.Contains(out.Addresses, out.PeerAddress) {
		out.Addresses = append([]netip.Addr{out.PeerAddress}, out.Addresses...)
	}
	if v, ok := n.Annotations[annotationASNumber]; ok {
		if as, err := parseAS(v); err == nil {
			out.AS = as
		}
	}
	return out, out.PeerAddress.IsValid()
}

// poolFromObject reads a crd.projectcalico.org/v1 IPPool. IPv6 pools are
// skipped (ok false, no error).
func poolFromObject(u *unstructured.Unstructured) (Pool, bool, error) {
	cidr, _, _ := unstructured.NestedString(u.Object, "spec", "cidr")
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return Pool{}, false, fmt.Errorf("IPPool %s: cidr %q: %w", u.GetName(), cidr, err)
	}
	if !p.Addr().Is4() {
		return Pool{}, false, nil
	}
	bs, found, err := unstructured.NestedInt64(u.Object, "spec", "blockSize")
	if err != nil {
		// Numbers may arrive as float64 from JSON.
		f, ffound, ferr := unstructured.NestedFloat64(u.Object, "spec", "blockSize")
		if ferr != nil {
			return Pool{}, false, fmt.Errorf("IPPool %s: blockSize: %w", u.GetName(), err)
		}
		bs, found = int64(f), ffound
	}
	if !found {
		bs = 26
	}
	if bs < int64(p.Bits()) || bs > 32 {
		return Pool{}, false, fmt.Errorf("IPPool %s: blockSize %d does not fit %s", u.GetName(), bs, p)
	}
	out := Pool{Name: u.GetName(), CIDR: p.Masked(), BlockSize: int(bs)}
	if m, _, _ := unstructured.NestedString(u.Object, "spec", "vxlanMode"); m != "" && m != "Never" {
		out.Encapsulation = "vxlan-" + strings.ToLower(m)
	} else if m, _, _ := unstructured.NestedString(u.Object, "spec", "ipipMode"); m != "" && m != "Never" {
		out.Encapsulation = "ipip-" + strings.ToLower(m)
	}
	return out, true, nil
}

// affinityFromObject reads a confirmed crd.projectcalico.org/v1
// BlockAffinity; pending and pendingDeletion ones do not own the block.
func affinityFromObject(u *unstructured.Unstructured) (Affinity, bool) {
	state, _, _ := unstructured.NestedString(u.Object, "spec", "state")
	if state != "confirmed" {
		return Affinity{}, false
	}
	if d, _, _ := unstructured.NestedString(u.Object, "spec", "deleted"); d == "true" {
		return Affinity{}, false
	}
	// Calico 3.29+ also has affinities of type "virtual" (not a node).
	if t, _, _ := unstructured.NestedString(u.Object, "spec", "type"); t != "" && t != "host" {
		return Affinity{}, false
	}
	cidr, _, _ := unstructured.NestedString(u.Object, "spec", "cidr")
	node, _, _ := unstructured.NestedString(u.Object, "spec", "node")
	p, err := netip.ParsePrefix(cidr)
	if err != nil || !p.Addr().Is4() || node == "" {
		return Affinity{}, false
	}
	return Affinity{Block: p.Masked(), Node: node}, true
}

// encapsulationWarning explains pools whose routes BGP will not carry (VXLAN)
// or whose traffic the nodes expect encapsulated (IPIP Always).
func encapsulationWarning(pools []Pool) string {
	var vx, ipip []string
	for _, p := range pools {
		switch p.Encapsulation {
		case "vxlan-always":
			vx = append(vx, p.Name)
		case "ipip-always":
			ipip = append(ipip, p.Name)
		}
	}
	var parts []string
	if len(vx) > 0 {
		parts = append(parts, "IPPools "+strings.Join(vx, ", ")+" use VXLAN: Calico does not announce their blocks over BGP (use ipipMode/vxlanMode Never or CrossSubnet with BGP)")
	}
	if len(ipip) > 0 {
		parts = append(parts, "IPPools "+strings.Join(ipip, ", ")+" use IPIP Always: the edge sends pod traffic unencapsulated; nodes must accept it")
	}
	return strings.Join(parts, "; ")
}

// staticSource is used when there is no Kubernetes connection.
type staticSource struct{}

func (staticSource) Run(ctx context.Context, update func(ClusterState)) error {
	update(ClusterState{})
	<-ctx.Done()
	return nil
}
