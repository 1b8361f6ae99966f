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
	discoveryv1 "k8s.io/api/discovery/v1"
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
	// Pools are Calico's IPPools for workloads, IPv4 and IPv6.
	Pools []Pool `json:"pools"`
	// Affinities are the confirmed BlockAffinities; nil when Calico's
	// BlockAffinity resource is not served (ownership is then not checked).
	Affinities []Affinity `json:"affinities"`
	// Secrets maps the referenced Secret keys that exist to their values.
	Secrets map[SecretRef]string `json:"-"`
	// ASNumber is BGPConfiguration default's asNumber: the AS of the nodes
	// (0: not set, Calico's default 64512 unless --bgp-cluster-as says).
	ASNumber uint32 `json:"asNumber,omitempty"`
	// NodePort is BGPConfiguration default's listenPort, where the nodes'
	// BIRD listens (0: 179).
	NodePort uint16 `json:"nodePort,omitempty"`
	// Hosts maps pod addresses to the node running the pod, from the
	// EndpointSlices' nodeName (watched only with BlockAffinities, where a
	// pod may hold an address borrowed from another node's block).
	Hosts map[netip.Addr]string `json:"-"`
	// Endpoints6 are the IPv6 endpoint addresses of each Service (from its
	// IPv6 EndpointSlices), checked for a route to them.
	Endpoints6 map[ServiceRef][]netip.Addr `json:"-"`
}

// ServiceRef names a Service.
type ServiceRef struct{ Namespace, Name string }

// Source delivers cluster state. Run calls update with a complete snapshot
// once its caches are synced and again after every change, until ctx ends;
// update must not block for long.
type Source interface {
	Run(ctx context.Context, update func(ClusterState)) error
}

// Calico annotations on Node objects (set by calico-node).
const (
	annotationIPv4Address = "projectcalico.org/IPv4Address"
	annotationIPv6Address = "projectcalico.org/IPv6Address"
	annotationASNumber    = "projectcalico.org/ASNumber"
)

// Calico's resources: crd.projectcalico.org/v1 (the Kubernetes datastore
// of every release), or projectcalico.org/v3 when only that is served
// (v3.32's native v3 CRDs). API-server installs serve both; v1 is read then.
var (
	calicoV1 = schema.GroupVersion{Group: "crd.projectcalico.org", Version: "v1"}
	calicoV3 = schema.GroupVersion{Group: "projectcalico.org", Version: "v3"}
	// The v1 resources, for tests.
	ipPoolsGVR            = calicoV1.WithResource(resIPPools)
	blockAffinitiesGVR    = calicoV1.WithResource(resBlockAffinities)
	calicoGroupVersions   = []schema.GroupVersion{calicoV1, calicoV3}
	defaultRediscoverTime = 20 * time.Second
)

const (
	resIPPools           = "ippools"
	resBlockAffinities   = "blockaffinities"
	resBGPConfigurations = "bgpconfigurations"
)

// calicoAPI is what the API server serves of Calico's resources.
type calicoAPI struct {
	gv                            schema.GroupVersion // zero: none
	pools, affinities, bgpConfigs bool
}

func (a calicoAPI) String() string {
	if a.gv.Empty() {
		return "none"
	}
	var r []string
	for _, x := range []struct {
		ok   bool
		name string
	}{{a.pools, resIPPools}, {a.affinities, resBlockAffinities}, {a.bgpConfigs, resBGPConfigurations}} {
		if x.ok {
			r = append(r, x.name)
		}
	}
	return a.gv.String() + " " + strings.Join(r, ",")
}

// KubeSource watches Nodes, Calico IPPools and BlockAffinities (when the
// CRDs are served) and the Secrets holding BGP passwords.
type KubeSource struct {
	kube    kubernetes.Interface
	dyn     dynamic.Interface
	secrets []SecretRef
	log     *slog.Logger
	// Resync is the informers' resync period (0: none).
	Resync time.Duration
	// Rediscover is how often the served Calico resources are looked up
	// again, so that CRDs installed (or an API version switched) after
	// the start are picked up; 0 means 20s.
	Rediscover time.Duration
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
	every := k.Rediscover
	if every <= 0 {
		every = defaultRediscoverTime
	}
	api, err := k.discoverCalico()
	if err != nil {
		return err
	}
	k.explain(api)
	for {
		runCtx, cancel := context.WithCancel(ctx)
		next := make(chan calicoAPI, 1)
		go func() {
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				select {
				case <-runCtx.Done():
					return
				case <-t.C:
				}
				if now, err := k.discoverCalico(); err == nil && now != api {
					next <- now
					cancel()
					return
				}
			}
		}()
		err := k.run(runCtx, api, update)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		select {
		case now := <-next:
			k.log.Info("served Calico resources changed: watching again", "was", api.String(), "now", now.String())
			api = now
			k.explain(api)
		default:
			return err
		}
	}
}

// explain warns about what is not checked for lack of Calico's resources.
func (k *KubeSource) explain(api calicoAPI) {
	switch {
	case api.gv.Empty():
		k.log.Warn("Calico CRDs (crd.projectcalico.org/v1 or projectcalico.org/v3) not served: accepting any block inside the configured pod CIDRs, " +
			"or a Node's spec.podCIDRs from that Node, without BlockAffinity check")
	case !api.affinities:
		k.log.Warn("Calico BlockAffinity resource not served: blocks are accepted without ownership check", "api", api.gv.String())
	}
}

// run watches until ctx ends.
func (k *KubeSource) run(ctx context.Context, api calicoAPI, update func(ClusterState)) error {
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
	if err := nodeInf.SetTransform(stripNode); err != nil {
		return fmt.Errorf("node informer: %w", err)
	}
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

	// EndpointSlices: the nodes running pods on borrowed addresses (with
	// BlockAffinities), and the IPv6 endpoints that need a route.
	sliceInf := factory.Discovery().V1().EndpointSlices().Informer()
	if _, err := sliceInf.AddEventHandler(handler); err != nil {
		return fmt.Errorf("endpointslice informer: %w", err)
	}
	synced = append(synced, sliceInf.HasSynced)

	var poolInf, affInf, confInf cache.SharedIndexInformer
	if !api.gv.Empty() {
		df := dynamicinformer.NewDynamicSharedInformerFactory(k.dyn, k.Resync)
		for _, r := range []struct {
			want bool
			res  string
			inf  *cache.SharedIndexInformer
		}{{api.pools, resIPPools, &poolInf}, {api.affinities, resBlockAffinities, &affInf}, {api.bgpConfigs, resBGPConfigurations, &confInf}} {
			if !r.want {
				continue
			}
			*r.inf = df.ForResource(api.gv.WithResource(r.res)).Informer()
			if _, err := (*r.inf).AddEventHandler(handler); err != nil {
				return fmt.Errorf("%s informer: %w", r.res, err)
			}
			synced = append(synced, (*r.inf).HasSynced)
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
		if api.affinities {
			st.Hosts = hostsFromSlices(sliceInf.GetStore().List())
		}
		st.Endpoints6 = ipv6Endpoints(sliceInf.GetStore().List())
		if confInf != nil {
			if o, ok, _ := confInf.GetStore().GetByKey("default"); ok {
				st.ASNumber, st.NodePort = bgpConfigurationFromObject(o.(*unstructured.Unstructured))
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

// discoverCalico reports which Calico resources the API server serves: v1
// when it serves IPPools or BlockAffinities there, else v3.
func (k *KubeSource) discoverCalico() (calicoAPI, error) {
	for _, gv := range calicoGroupVersions {
		rl, err := k.kube.Discovery().ServerResourcesForGroupVersion(gv.String())
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return calicoAPI{}, fmt.Errorf("discover Calico resources (%s): %w", gv, err)
		}
		api := calicoAPI{gv: gv}
		for _, r := range rl.APIResources {
			switch r.Name {
			case resIPPools:
				api.pools = true
			case resBlockAffinities:
				api.affinities = true
			case resBGPConfigurations:
				api.bgpConfigs = true
			}
		}
		if api.pools || api.affinities {
			return api, nil
		}
	}
	return calicoAPI{}, nil
}

// hostsFromSlices maps every IP endpoint address with a nodeName to that
// node.
func hostsFromSlices(objs []any) map[netip.Addr]string {
	out := map[netip.Addr]string{}
	for _, o := range objs {
		s, ok := o.(*discoveryv1.EndpointSlice)
		if !ok || (s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6) {
			continue
		}
		for _, ep := range s.Endpoints {
			if ep.NodeName == nil || *ep.NodeName == "" {
				continue
			}
			for _, a := range ep.Addresses {
				if ip, err := netip.ParseAddr(a); err == nil && ip.Zone() == "" {
					out[ip.Unmap()] = *ep.NodeName
				}
			}
		}
	}
	return out
}

// ipv6Endpoints lists the addresses of the IPv6 EndpointSlices by Service.
func ipv6Endpoints(objs []any) map[ServiceRef][]netip.Addr {
	out := map[ServiceRef][]netip.Addr{}
	for _, o := range objs {
		s, ok := o.(*discoveryv1.EndpointSlice)
		if !ok || s.AddressType != discoveryv1.AddressTypeIPv6 || s.Labels[discoveryv1.LabelServiceName] == "" {
			continue
		}
		ref := ServiceRef{s.Namespace, s.Labels[discoveryv1.LabelServiceName]}
		for _, ep := range s.Endpoints {
			for _, a := range ep.Addresses {
				if ip, err := netip.ParseAddr(a); err == nil && ip.Is6() && !ip.Is4In6() && ip.Zone() == "" {
					out[ref] = append(out[ref], ip)
				}
			}
		}
	}
	for ref, ips := range out {
		slices.SortFunc(ips, netip.Addr.Compare)
		out[ref] = slices.Compact(ips)
	}
	return out
}

// stripNode keeps of a Node what nodeFromObject reads before it enters the
// cache: a Node's status (images, conditions, capacity, system info) and
// managed fields are many kilobytes each, and nothing here reads them.
func stripNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	n.ManagedFields = nil
	n.OwnerReferences = nil
	if _, ok := n.Annotations[lastApplied]; ok {
		a := make(map[string]string, len(n.Annotations)-1)
		for k, v := range n.Annotations {
			if k != lastApplied {
				a[k] = v
			}
		}
		n.Annotations = a
	}
	n.Spec = corev1.NodeSpec{PodCIDR: n.Spec.PodCIDR, PodCIDRs: n.Spec.PodCIDRs}
	n.Status = corev1.NodeStatus{Addresses: n.Status.Addresses}
	return n, nil
}

const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// nodeFromObject extracts the BGP view of a Node: Calico's BGP addresses
// (annotations, without their masks) or else the first InternalIP of each
// family. A node with only an IPv6 address is kept (an IPv6-only cluster).
func nodeFromObject(n *corev1.Node) (Node, bool) {
	out := Node{Name: n.Name, Labels: n.Labels}
	annotated := func(key string, v6 bool) netip.Addr {
		v, ok := n.Annotations[key]
		if !ok {
			return netip.Addr{}
		}
		a, err := netip.ParseAddr(v)
		if p, perr := netip.ParsePrefix(v); perr == nil {
			a, err = p.Addr(), nil
		}
		if err != nil || a.Is6() != v6 || a.Is4In6() || a.Zone() != "" {
			return netip.Addr{}
		}
		return a
	}
	out.PeerAddress = annotated(annotationIPv4Address, false)
	out.PeerAddress6 = annotated(annotationIPv6Address, true)
	for _, a := range n.Status.Addresses {
		ip, err := netip.ParseAddr(a.Address)
		if err != nil || ip.Is4In6() || ip.Zone() != "" {
			continue
		}
		if a.Type == corev1.NodeInternalIP {
			if ip.Is4() && !out.PeerAddress.IsValid() {
				out.PeerAddress = ip
			}
			if ip.Is6() && !out.PeerAddress6.IsValid() {
				out.PeerAddress6 = ip
			}
		}
		if (a.Type == corev1.NodeInternalIP || a.Type == corev1.NodeExternalIP) && !slices.Contains(out.Addresses, ip) {
			out.Addresses = append(out.Addresses, ip)
		}
	}
	for _, pa := range []netip.Addr{out.PeerAddress6, out.PeerAddress} {
		if pa.IsValid() && !slices.Contains(out.Addresses, pa) {
			out.Addresses = append([]netip.Addr{pa}, out.Addresses...)
		}
	}
	if v, ok := n.Annotations[annotationASNumber]; ok {
		if as, err := parseAS(v); err == nil {
			out.AS = as
		}
	}
	cidrs := n.Spec.PodCIDRs
	if len(cidrs) == 0 && n.Spec.PodCIDR != "" {
		cidrs = []string{n.Spec.PodCIDR}
	}
	for _, c := range cidrs {
		if p, err := netip.ParsePrefix(c); err == nil && !p.Addr().Is4In6() {
			out.PodCIDRs = append(out.PodCIDRs, p.Masked())
		}
	}
	return out, out.PeerAddress.IsValid() || out.PeerAddress6.IsValid()
}

// poolFromObject reads an IPPool (v1 or v3: same fields), IPv4 or IPv6.
// Pools not for workloads (allowedUses without Workload: tunnel addresses,
// LoadBalancer IPs) are skipped (ok false, no error).
func poolFromObject(u *unstructured.Unstructured) (Pool, bool, error) {
	cidr, _, _ := unstructured.NestedString(u.Object, "spec", "cidr")
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return Pool{}, false, fmt.Errorf("IPPool %s: cidr %q: %w", u.GetName(), cidr, err)
	}
	if p.Addr().Is4In6() || p.Addr().Zone() != "" {
		return Pool{}, false, fmt.Errorf("IPPool %s: cidr %q is neither IPv4 nor IPv6", u.GetName(), cidr)
	}
	if uses, found, _ := unstructured.NestedStringSlice(u.Object, "spec", "allowedUses"); found && len(uses) > 0 &&
		!slices.Contains(uses, "Workload") {
		return Pool{}, false, nil
	}
	bs, found, err := nestedInt(u.Object, "spec", "blockSize")
	if err != nil {
		return Pool{}, false, fmt.Errorf("IPPool %s: blockSize: %w", u.GetName(), err)
	}
	if !found {
		// Calico's defaults, which its API server fills in.
		bs = 26
		if p.Addr().Is6() {
			bs = 122
		}
	}
	if bs < int64(p.Bits()) || bs > int64(p.Addr().BitLen()) {
		return Pool{}, false, fmt.Errorf("IPPool %s: blockSize %d does not fit %s", u.GetName(), bs, p)
	}
	out := Pool{Name: u.GetName(), CIDR: p.Masked(), BlockSize: int(bs)}
	if m, _, _ := unstructured.NestedString(u.Object, "spec", "vxlanMode"); m != "" && m != "Never" {
		out.Encapsulation = "vxlan-" + strings.ToLower(m)
	} else if m, _, _ := unstructured.NestedString(u.Object, "spec", "ipipMode"); m != "" && m != "Never" {
		out.Encapsulation = "ipip-" + strings.ToLower(m)
	}
	out.DisableBGPExport, _, _ = unstructured.NestedBool(u.Object, "spec", "disableBGPExport")
	return out, true, nil
}

// nestedInt reads a number that JSON may have made a float64.
func nestedInt(obj map[string]any, fields ...string) (int64, bool, error) {
	v, found, err := unstructured.NestedFieldNoCopy(obj, fields...)
	if !found || err != nil {
		return 0, found, err
	}
	switch n := v.(type) {
	case int64:
		return n, true, nil
	case float64:
		return int64(n), true, nil
	case int:
		return int64(n), true, nil
	}
	return 0, true, fmt.Errorf("%v is not a number", v)
}

// affinityFromObject reads a BlockAffinity (v1: deleted is a string; v3: a
// boolean) that gives its node the block, as Calico's BIRD exports it:
// confirmed, "" (older data, which Calico treats as confirmed) and
// pendingDeletion (still exported until the affinity is gone, and empty by
// then). Pending ones are not announced yet, and virtual ones (v3.30+) are
// not a node.
func affinityFromObject(u *unstructured.Unstructured) (Affinity, bool) {
	switch state, _, _ := unstructured.NestedString(u.Object, "spec", "state"); state {
	case "confirmed", "", "pendingDeletion":
	default:
		return Affinity{}, false
	}
	switch d, _, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "deleted"); d {
	case "true", true:
		return Affinity{}, false
	}
	if t, _, _ := unstructured.NestedString(u.Object, "spec", "type"); t != "" && t != "host" {
		return Affinity{}, false
	}
	cidr, _, _ := unstructured.NestedString(u.Object, "spec", "cidr")
	node, _, _ := unstructured.NestedString(u.Object, "spec", "node")
	p, err := netip.ParsePrefix(cidr)
	if err != nil || p.Addr().Is4In6() || node == "" {
		return Affinity{}, false
	}
	return Affinity{Block: p.Masked(), Node: node}, true
}

// bgpConfigurationFromObject reads the cluster-wide BGPConfiguration's
// asNumber and listenPort.
func bgpConfigurationFromObject(u *unstructured.Unstructured) (as uint32, port uint16) {
	if n, ok, err := nestedInt(u.Object, "spec", "asNumber"); ok && err == nil && n > 0 && n <= 1<<32-1 {
		as = uint32(n)
	} else if v, _, _ := unstructured.NestedString(u.Object, "spec", "asNumber"); v != "" {
		as, _ = parseAS(v)
	}
	if n, ok, err := nestedInt(u.Object, "spec", "listenPort"); ok && err == nil && n > 0 && n < 1<<16 {
		port = uint16(n)
	}
	return as, port
}

// encapsulationWarning explains pools whose routes will not come (BGP export
// disabled), may not come (VXLAN installs usually run without BGP) or whose
// traffic the nodes expect encapsulated (IPIP Always).
func encapsulationWarning(pools []Pool) string {
	var vx, ipip, noExport []string
	for _, p := range pools {
		switch {
		case p.DisableBGPExport:
			noExport = append(noExport, p.Name)
		case p.Encapsulation == "vxlan-always":
			vx = append(vx, p.Name)
		case p.Encapsulation == "ipip-always":
			ipip = append(ipip, p.Name)
		}
	}
	var parts []string
	if len(noExport) > 0 {
		parts = append(parts, "IPPools "+strings.Join(noExport, ", ")+" have disableBGPExport: Calico announces none of their routes, so their pods are unreachable from here")
	}
	if len(vx) > 0 {
		parts = append(parts, "IPPools "+strings.Join(vx, ", ")+" use VXLAN: their blocks come only if calico-node runs BIRD (calico_backend: bird, BGP enabled); "+
			"VXLAN installs usually run without it, and then no route comes")
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
