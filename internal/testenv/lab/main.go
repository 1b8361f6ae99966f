// Command lab brings up the whole external-mode story on one machine for a
// person to try: a real kube-apiserver and etcd on loopback with Calico's
// CRDs, two worker "nodes" (network namespaces on one bridge) whose BIRD is
// configured the way calico-node configures it (full mesh, a BGPPeer for the
// edge, each node exporting the blocks affined to it), pods behind their node
// inside its block, and perimeter on this host peering with the nodes it
// finds in the Node objects, learning the blocks into the kernel and sending
// HAProxy's traffic straight to the pods. No static route to any pod exists
// on this host. It prints what to run and tears everything down on Ctrl-C.
// Run it as root through `make lab`.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// The lab's address plan, all inside namespaces and links it makes: the
// nodes' network on a bridge in this (the edge's) namespace, the pool and
// each node's /26 block, and the pod-to-node links.
const (
	bridgeName = "pmlab0"
	edgeAddr   = "198.19.220.1"
	nodeNet    = "198.19.220.0/24"
	podLinks   = "198.19.221.0/24"
	poolCIDR   = "198.18.220.0/24"
	clusterAS  = 64512
	bgpPort    = 1790
	nodeCount  = 2
	appNS      = "demo"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "lab:", err)
		os.Exit(1)
	}
}

type options struct {
	bin                           string
	httpPort, ctrlPort, statsPort int
	labPort                       int
	replicas                      int
}

func run() error {
	var o options
	flag.StringVar(&o.bin, "perimeter", "bin/perimeter", "perimeter binary")
	flag.IntVar(&o.httpPort, "http-port", 8080, "port HAProxy serves HTTP on (127.0.0.1)")
	flag.IntVar(&o.ctrlPort, "controller-port", 6060, "port of perimeter's /healthz, /readyz, /metrics")
	flag.IntVar(&o.statsPort, "stats-port", 1024, "port of HAProxy's stats page")
	flag.IntVar(&o.labPort, "lab-port", 8099, "port of the lab's own control (POST /scale?replicas=N)")
	flag.IntVar(&o.replicas, "replicas", 2, "pods of the demo app at start")
	flag.Parse()
	if os.Geteuid() != 0 {
		return errors.New("needs root (network namespaces, routes, HAProxy, BIRD): run `sudo make lab`")
	}
	if _, _, err := testenv.Bird1(); err != nil {
		return fmt.Errorf("needs BIRD 1.6 as the nodes' BGP speaker, as calico-node runs it: %w", err)
	}
	bin, err := filepath.Abs(o.bin)
	if err != nil {
		return err
	}
	o.bin = bin
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	l := &lab{o: o}
	err = l.up(ctx)
	if err == nil {
		select {
		case <-ctx.Done():
			fmt.Println("\ntearing down ...")
		case err = <-l.daemonExited:
			err = fmt.Errorf("perimeter exited: %v", err)
		}
	}
	if derr := l.down(); derr != nil {
		err = errors.Join(err, derr)
	}
	if err == nil {
		fmt.Println("all gone: namespaces, links, routes and processes.")
	}
	return err
}

type lab struct {
	o       options
	dir     string
	cluster *testenv.Cluster
	svc     *testenv.Service
	nodes   []*node

	mu   sync.Mutex
	pods []*testenv.Pod

	daemon       *exec.Cmd
	daemonExited chan error
	control      *http.Server
	undo         []func() error // run backwards by down
}

type node struct {
	name  string
	addr  string
	block netip.Prefix
	ns    *testenv.Netns
	bird  *testenv.Bird
}

func (l *lab) defer_(f func() error) { l.undo = append(l.undo, f) }

func (l *lab) down() error {
	var errs []error
	for i := len(l.undo) - 1; i >= 0; i-- {
		if err := l.undo[i](); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (l *lab) up(ctx context.Context) error {
	root, err := testenv.ModuleRoot()
	if err != nil {
		return err
	}
	if l.dir, err = os.MkdirTemp("", "perimeter-lab-"); err != nil {
		return err
	}
	l.defer_(func() error { return os.RemoveAll(l.dir) })

	fmt.Println("starting kube-apiserver and etcd on loopback ...")
	if l.cluster, err = testenv.StartClusterCtx(ctx, filepath.Join(l.dir, "cluster")); err != nil {
		return err
	}
	l.defer_(l.cluster.Stop)
	release, err := testenv.AcquireGuard()
	if err != nil {
		return err
	}
	l.defer_(release)

	fmt.Println("installing Calico's CRDs, IPPool, BGPConfiguration and the edge's BGPPeer ...")
	if err := l.cluster.InstallCalicoCRDs(ctx); err != nil {
		return err
	}
	calico, err := l.calicoObjects(filepath.Join(root, "vagrant", "calico"))
	if err != nil {
		return err
	}
	if err := l.cluster.Apply(ctx, calico...); err != nil {
		return err
	}

	fmt.Printf("starting %d nodes with BIRD as calico-node runs it ...\n", nodeCount)
	if err := l.startNodes(ctx); err != nil {
		return err
	}
	if err := l.createApp(ctx); err != nil {
		return err
	}
	if err := l.scale(ctx, l.o.replicas); err != nil {
		return err
	}
	l.defer_(func() error { return l.scale(context.Background(), 0) })

	fmt.Println("starting perimeter ...")
	if err := l.startDaemon(ctx); err != nil {
		return err
	}
	if err := l.startControl(); err != nil {
		return err
	}
	if err := l.waitServed(ctx); err != nil {
		return err
	}
	l.printHelp()
	return nil
}

// calicoObjects reads the Calico objects the Vagrant lab applies and puts
// this lab's addresses in: the edge as the BGPPeer, the pool.
func (l *lab) calicoObjects(dir string) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for _, f := range []string{"bgpconfiguration.yaml", "ippool.yaml", "bgppeer-edge.yaml"} {
		objs, err := testenv.ReadObjects(filepath.Join(dir, f))
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			var err error
			switch o.GetKind() {
			case "BGPConfiguration":
				err = unstructured.SetNestedField(o.Object, int64(clusterAS), "spec", "asNumber")
			case "IPPool":
				err = unstructured.SetNestedField(o.Object, poolCIDR, "spec", "cidr")
			case "BGPPeer":
				if err = unstructured.SetNestedField(o.Object, net.JoinHostPort(edgeAddr, strconv.Itoa(bgpPort)), "spec", "peerIP"); err == nil {
					err = unstructured.SetNestedField(o.Object, int64(clusterAS), "spec", "asNumber")
				}
			}
			if err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			out = append(out, o)
		}
	}
	return out, nil
}

// startNodes makes the nodes' network (a bridge here, the edge's side), one
// namespace per node with its Node object, its block's BlockAffinity and
// its BIRD, configured from the Calico objects as confd would.
func (l *lab) startNodes(ctx context.Context) error {
	br, err := testenv.CreateBridge(nil, bridgeName, edgeAddr+"/24")
	if err != nil {
		return err
	}
	l.defer_(br.Close)
	pool := netip.MustParsePrefix(poolCIDR)
	var addrs []string
	for i := 0; i < nodeCount; i++ {
		addrs = append(addrs, fmt.Sprintf("198.19.220.%d", 11+i))
	}
	api := l.cluster.Admin
	for i := 0; i < nodeCount; i++ {
		n := &node{name: fmt.Sprintf("node-%d", i+1), addr: addrs[i],
			block: netip.PrefixFrom(pool.Addr(), 26)}
		base := pool.Addr().As4()
		base[3] = byte(64 * i)
		n.block = netip.PrefixFrom(netip.AddrFrom4(base), 26)
		if n.ns, err = testenv.CreateNetns("lab-" + n.name); err != nil {
			return err
		}
		l.defer_(n.ns.Close)
		if err := n.ns.Sysctl("net/ipv4/ip_forward", "1"); err != nil {
			return err
		}
		v, err := testenv.CreateVeth(testenv.VethOptions{PeerNS: n.ns, PeerName: "eth0", Master: bridgeName, PeerAddr: n.addr + "/24"})
		if err != nil {
			return err
		}
		l.defer_(v.Close)
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name, Annotations: map[string]string{
			"projectcalico.org/IPv4Address": n.addr + "/24",
		}}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: n.addr}}}}
		if _, err := api.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			return err
		}
		if err := l.cluster.Apply(ctx, testenv.BlockAffinity(n.name, n.block.String())); err != nil {
			return err
		}
		conf, err := testenv.CalicoBirdConfig(testenv.CalicoNode{
			Address: n.addr, AS: clusterAS, Pools: []string{poolCIDR}, Blocks: []string{n.block.String()},
			Mesh:  addrs,
			Peers: []testenv.CalicoPeer{{Address: edgeAddr, Port: bgpPort, AS: clusterAS}},
			Log:   filepath.Join(l.dir, n.name+".bird.log"),
		})
		if err != nil {
			return err
		}
		if n.bird, err = testenv.NewCalicoBirdCtx(n.ns, l.dir, n.name); err != nil {
			return err
		}
		if err := n.bird.Start(conf); err != nil {
			return err
		}
		l.defer_(func() error { n.bird.Stop(syscall.SIGTERM); return nil })
		l.nodes = append(l.nodes, n)
	}
	return nil
}

func (l *lab) createApp(ctx context.Context) error {
	api := l.cluster.Admin
	for _, n := range []string{appNS, "haproxy-controller"} {
		if _, err := api.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	if _, err := api.CoreV1().ConfigMaps("haproxy-controller").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "haproxy-kubernetes-ingress"},
		Data:       map[string]string{"ssl-redirect": "OFF"},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	var err error
	if l.svc, err = l.cluster.CreateServiceCtx(ctx, testenv.ServiceSpec{Namespace: appNS, Name: "app"}); err != nil {
		return err
	}
	svc, err := api.CoreV1().Services(appNS).Get(ctx, "app", metav1.GetOptions{})
	if err != nil {
		return err
	}
	svc.Annotations = map[string]string{
		"haproxy.org/check": "enabled", "haproxy.org/forwarded-for": "enabled", "haproxy.org/load-balance": "roundrobin",
	}
	if _, err := api.CoreV1().Services(appNS).Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		return err
	}
	prefix := networkingv1.PathTypePrefix
	_, err = api.NetworkingV1().Ingresses(appNS).Create(ctx, &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Name: "app"},
		Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{{Host: "foo.bar",
			IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{
				Path: "/", PathType: &prefix,
				Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "app", Port: networkingv1.ServiceBackendPort{Number: 80}}},
			}}}}}}},
	}, metav1.CreateOptions{})
	return err
}

// scale runs replicas pods of the app, spread over the nodes like a
// scheduler would, each inside its node's block and reached only through
// that node, and publishes them as the Service's endpoints.
func (l *lab) scale(ctx context.Context, replicas int) error {
	if replicas < 0 || replicas > 50 {
		return fmt.Errorf("replicas %d: from 0 to 50", replicas)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var errs []error
	for len(l.pods) > replicas {
		p := l.pods[len(l.pods)-1]
		l.pods = l.pods[:len(l.pods)-1]
		// Out of the endpoints first, then stopped: no request meets a
		// pod that is going away.
		if err := l.publish(ctx); err != nil {
			errs = append(errs, err)
		}
		if err := p.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	for i := len(l.pods); i < replicas; i++ {
		n := l.nodes[i%len(l.nodes)]
		ip := n.block.Addr().As4()
		ip[3] += byte(10 + i/len(l.nodes))
		p, err := testenv.StartPodCtx(ctx, testenv.PodOptions{Name: fmt.Sprintf("app-%d", i),
			IP: netip.AddrFrom4(ip).String(), Parent: n.ns, LinkRange: podLinks})
		if err != nil {
			errs = append(errs, err)
			break
		}
		l.pods = append(l.pods, p)
	}
	if ctx.Err() == nil || replicas > 0 {
		if err := l.publish(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (l *lab) publish(ctx context.Context) error {
	if l.svc == nil {
		return nil
	}
	var eps []testenv.Endpoint
	for _, p := range l.pods {
		eps = append(eps, p.Endpoint())
	}
	return l.svc.SetEndpointsCtx(ctx, eps...)
}

func (l *lab) daemonArgs() []string {
	return []string{"run", "--external", "--config=/dev/null", "--kubeconfig=" + l.cluster.DaemonKubeconfig, "--program=/usr/sbin/haproxy",
		"--configmap=haproxy-controller/haproxy-kubernetes-ingress",
		"--config-dir=" + filepath.Join(l.dir, "etc"), "--runtime-dir=" + filepath.Join(l.dir, "run"),
		"--http-bind-port=" + strconv.Itoa(l.o.httpPort), "--ipv4-bind-address=127.0.0.1", "--disable-ipv6", "--disable-https",
		"--controller-port=" + strconv.Itoa(l.o.ctrlPort), "--stats-bind-port=" + strconv.Itoa(l.o.statsPort),
		"--bgp-local-as=" + strconv.Itoa(clusterAS), "--bgp-router-id=" + edgeAddr,
		"--bgp-listen-port=" + strconv.Itoa(bgpPort), "--bgp-peers-from-nodes",
	}
}

func (l *lab) startDaemon(ctx context.Context) error {
	cmd := exec.Command(l.o.bin, l.daemonArgs()...)
	logf, err := os.Create(filepath.Join(l.dir, "perimeter.log"))
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	l.daemon, l.daemonExited = cmd, make(chan error, 1)
	done := make(chan struct{})
	go func() { err := cmd.Wait(); logf.Close(); l.daemonExited <- err; close(done) }()
	l.defer_(func() error {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		return nil
	})
	return testenv.Poll(ctx, time.Minute, func() error {
		select {
		case err := <-l.daemonExited:
			l.daemonExited <- err
			return fmt.Errorf("perimeter exited: %v\n%s", err, tail(filepath.Join(l.dir, "perimeter.log")))
		default:
		}
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", l.o.ctrlPort))
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errors.New(resp.Status)
		}
		return nil
	})
}

// waitServed waits until every pod has answered through HAProxy: the
// blocks have come over BGP and the kernel routes to the pods are in.
func (l *lab) waitServed(ctx context.Context) error {
	want := map[string]bool{}
	for _, p := range l.pods {
		want[p.Name] = true
	}
	return testenv.Poll(ctx, 90*time.Second, func() error {
		for i := 0; i < 4*len(want) && len(want) > 0; i++ {
			req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/", l.o.httpPort), nil)
			req.Host = "foo.bar"
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return err
			}
			resp.Body.Close()
			delete(want, resp.Header.Get("X-Pod"))
		}
		if len(want) > 0 {
			return fmt.Errorf("pods not answering through HAProxy yet: %v", keys(want))
		}
		return nil
	})
}

// startControl serves the lab's own commands: scaling the app.
func (l *lab) startControl() error {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(l.o.labPort)))
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /scale", func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(r.URL.Query().Get("replicas"))
		if err == nil {
			err = l.scale(r.Context(), n)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, p := range l.pods {
			fmt.Fprintf(w, "%s %s on %s\n", p.Name, p.IP, l.nodeOf(p.IP))
		}
	})
	l.control = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = l.control.Serve(ln) }()
	l.defer_(func() error { return l.control.Close() })
	return nil
}

func (l *lab) nodeOf(ip netip.Addr) string {
	for _, n := range l.nodes {
		if n.block.Contains(ip) {
			return n.name
		}
	}
	return "?"
}

func (l *lab) printHelp() {
	proto := "201"
	if _, err := os.Stat("/etc/iproute2/rt_protos.d/perimeter.conf"); err == nil {
		proto = "perimeter"
	}
	var nodes []string
	for _, n := range l.nodes {
		nodes = append(nodes, fmt.Sprintf("%s %s (block %s)", n.name, n.addr, n.block))
	}
	ctl := fmt.Sprintf("--controller-port=%d", l.o.ctrlPort)
	fmt.Printf(`
perimeter is serving foo.bar from pods behind %s,
reached over the routes it learned from the nodes' BIRD. Try:

  curl -s -H 'Host: foo.bar' http://127.0.0.1:%[2]d/
  %[3]s bgp status %[4]s
  ip route show proto %[5]s
  %[3]s explain --kubeconfig=%[6]s --host foo.bar --path /
  %[9]s -s %[7]s show protocols
  curl -s -X POST 'http://127.0.0.1:%[8]d/scale?replicas=3'
  for i in 1 2 3 4 5 6; do curl -s -H 'Host: foo.bar' http://127.0.0.1:%[2]d/; echo; done

Ctrl-C tears everything down.
`, strings.Join(nodes, ", "), l.o.httpPort, l.o.bin, ctl, proto, l.cluster.DaemonKubeconfig, l.nodes[0].bird.Ctl, l.o.labPort, l.nodes[0].bird.BirdcPath())
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return strings.Join(lines, "\n")
}
