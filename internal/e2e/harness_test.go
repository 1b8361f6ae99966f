// Package e2e runs the daemon binary against the real stack: a kube-apiserver
// with etcd, Debian's HAProxy, pods in network namespaces.
package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// perimeterBinary builds the daemon once per test run, as `make build` does.
func perimeterBinary(t testing.TB) string {
	t.Helper()
	return testenv.PerimeterBinary(t)
}

// env is one test's world: the shared cluster, a fresh namespace, and a
// guard that keeps stray pod traffic on this machine.
type env struct {
	t  testing.TB
	c  *testenv.Cluster
	ns string
	// prefix runs the daemon under a command, e.g. prlimit.
	prefix []string
}

func newEnv(t testing.TB) *env {
	t.Helper()
	testenv.RequireRoot(t)
	c := testenv.SharedCluster(t)
	testenv.GuardRoutes(t)
	return &env{t: t, c: c, ns: c.Namespace(t)}
}

// daemon is a running perimeter process.
type daemon struct {
	t          testing.TB
	cmd        *exec.Cmd
	httpPort   int
	ctrlPort   int
	statsPort  int
	configDir  string
	runtimeDir string
	out        *syncBuffer
	done       chan struct{}
	exitErr    error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startDaemon runs the daemon as an operator would, with the least-privilege
// identity of packaging/rbac.yaml, watching only the test's namespace so that
// tests sharing the cluster do not see each other's Ingresses.
func (e *env) startDaemon(extra ...string) *daemon {
	e.t.Helper()
	return e.startDaemonWithin(60*time.Second, extra...)
}

// startDaemonWithin is startDaemon with a longer wait for readiness, for
// daemons that start against many objects.
func (e *env) startDaemonWithin(ready time.Duration, extra ...string) *daemon {
	e.t.Helper()
	d := e.launchDaemon(extra...)
	d.waitReady(ready)
	return d
}

// waitReady polls until the daemon is ready, failing the test when it
// exits first.
func (d *daemon) waitReady(within time.Duration) {
	d.t.Helper()
	testenv.Eventually(d.t, within, func() error {
		select {
		case <-d.done:
			d.t.Fatalf("daemon exited: %v\n%s", d.exitErr, d.out.String())
		default:
		}
		return d.ready()
	})
}

// launchDaemon starts the daemon without waiting for it to be ready.
func (e *env) launchDaemon(extra ...string) *daemon {
	e.t.Helper()
	d := &daemon{
		t:          e.t,
		httpPort:   testenv.FreePort(e.t),
		ctrlPort:   testenv.FreePort(e.t),
		statsPort:  testenv.FreePort(e.t),
		configDir:  e.t.TempDir(),
		runtimeDir: shortTempDir(e.t),
		out:        &syncBuffer{},
		done:       make(chan struct{}),
	}
	args := []string{
		"--external",
		// Not the machine's /etc/perimeter/perimeter.yaml, if it has one.
		"--config=/dev/null",
		"--kubeconfig=" + e.c.DaemonKubeconfig,
		"--program=/usr/sbin/haproxy",
		"--config-dir=" + d.configDir,
		"--runtime-dir=" + d.runtimeDir,
		"--http-bind-port=" + strconv.Itoa(d.httpPort),
		"--https-bind-port=" + strconv.Itoa(testenv.FreePort(e.t)),
		"--election-id=perimeter-" + e.ns,
		"--ipv4-bind-address=127.0.0.1",
		"--disable-ipv6",
		"--stats-bind-port=" + strconv.Itoa(d.statsPort),
		"--healthz-bind-port=0",
		"--controller-port=" + strconv.Itoa(d.ctrlPort),
		"--namespace-whitelist=" + e.ns,
		"--sync-period=100ms",
		"--log=debug",
	}
	args = append(args, extra...)
	d.cmd = exec.Command(perimeterBinary(e.t), args...)
	if len(e.prefix) > 0 {
		d.cmd = exec.Command(e.prefix[0], append(append(e.prefix[1:len(e.prefix):len(e.prefix)], perimeterBinary(e.t)), args...)...)
	}
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	if err := d.cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	go func() { d.exitErr = d.cmd.Wait(); close(d.done) }()
	e.t.Cleanup(func() {
		d.stop()
		if e.t.Failed() {
			e.t.Logf("daemon output:\n%s", tail(d.out.String(), 60))
		}
	})
	return d
}

// shortTempDir keeps socket paths under the 108-byte limit of sun_path.
func shortTempDir(t testing.TB) string {
	dir, err := os.MkdirTemp("", "pm-run-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func (d *daemon) ready() error {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", d.ctrlPort))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("readyz: %s", resp.Status)
	}
	return nil
}

// stop ends the daemon with SIGTERM, as systemd does, and checks that no
// HAProxy process of it is left behind.
func (d *daemon) stop() {
	select {
	case <-d.done:
		return
	default:
	}
	pids := haproxyPIDs(d.runtimeDir)
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.done
		d.t.Errorf("daemon did not stop within 30s after SIGTERM")
	}
	for _, pid := range pids {
		if alive(pid) {
			d.t.Errorf("HAProxy process %d outlived the daemon", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// haproxyPIDs finds the HAProxy processes started for this runtime dir by
// their command line.
func haproxyPIDs(runtimeDir string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if len(args) > 0 && strings.HasSuffix(args[0], "haproxy") && strings.Contains(string(cmdline), runtimeDir) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func alive(pid int) bool {
	// A zombie still answers kill 0; read its state instead.
	fields, err := testenv.ProcStat(pid)
	return err == nil && fields[0] != "Z"
}

// reloads reads the master's reload counter from its CLI. Right after a
// reload the master briefly refuses connections, hence the retries.
func (d *daemon) reloads() int {
	d.t.Helper()
	var n int
	err := testenv.Poll(context.Background(), 10*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		var err error
		n, err = testenv.MasterReloads(ctx, filepath.Join(d.runtimeDir, "master.sock"))
		return err
	})
	if err != nil {
		d.t.Fatalf("master reload count: %v", err)
	}
	return n
}

type response struct {
	status int
	body   string
	header http.Header
}

var client = &http.Client{
	Timeout:   5 * time.Second,
	Transport: &http.Transport{DisableKeepAlives: true},
	// Redirects are asserted, not followed.
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

func (d *daemon) get(host, path string) (response, error) {
	return d.do(http.MethodGet, host, path, nil)
}

func (d *daemon) do(method, host, path string, hdr http.Header) (response, error) {
	return doAt(net.JoinHostPort("127.0.0.1", strconv.Itoa(d.httpPort)), method, host, path, hdr)
}

// doAt sends a request for host+path to the HTTP listener at hostport.
func doAt(hostport, method, host, path string, hdr http.Header) (response, error) {
	req, err := http.NewRequest(method, "http://"+hostport+path, nil)
	if err != nil {
		return response{}, err
	}
	req.Host = host
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := client.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, err
	}
	return response{status: resp.StatusCode, body: string(b), header: resp.Header}, nil
}

// expect polls until host+path answers with status (and, when pod is not
// empty, from that pod).
func (d *daemon) expect(host, path string, status int, pod string) {
	d.t.Helper()
	testenv.Eventually(d.t, 10*time.Second, func() error {
		r, err := d.get(host, path)
		if err != nil {
			return err
		}
		if r.status != status {
			return fmt.Errorf("%s%s: status %d, want %d (body %q)", host, path, r.status, status, r.body)
		}
		if pod != "" && r.header.Get("X-Pod") != pod {
			return fmt.Errorf("%s%s: answered by %q, want %q", host, path, r.header.Get("X-Pod"), pod)
		}
		return nil
	})
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// --- objects ---

type rule struct {
	host, path string
	pathType   networkingv1.PathType
	service    string
	port       int32
}

func (e *env) ingress(name string, annotations map[string]string, rules ...rule) *networkingv1.Ingress {
	e.t.Helper()
	ing := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns, Annotations: annotations}}
	byHost := map[string]*networkingv1.IngressRule{}
	var order []string
	for _, r := range rules {
		ir := byHost[r.host]
		if ir == nil {
			ir = &networkingv1.IngressRule{Host: r.host, IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{}}}
			byHost[r.host] = ir
			order = append(order, r.host)
		}
		pt := r.pathType
		if pt == "" {
			pt = networkingv1.PathTypePrefix
		}
		port := r.port
		if port == 0 {
			port = 80
		}
		ir.HTTP.Paths = append(ir.HTTP.Paths, networkingv1.HTTPIngressPath{
			Path: r.path, PathType: &pt,
			Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{
				Name: r.service, Port: networkingv1.ServiceBackendPort{Number: port}}},
		})
	}
	for _, h := range order {
		ing.Spec.Rules = append(ing.Spec.Rules, *byHost[h])
	}
	out, err := e.c.Admin.NetworkingV1().Ingresses(e.ns).Create(context.Background(), ing, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

func (e *env) deleteIngress(name string) {
	e.t.Helper()
	if err := e.c.Admin.NetworkingV1().Ingresses(e.ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// service creates a selectorless Service (port 80 -> 8080) with the given
// annotations and its EndpointSlice listing pods.
func (e *env) service(name string, annotations map[string]string, pods ...*testenv.Pod) *testenv.Service {
	e.t.Helper()
	s := e.c.CreateService(e.t, testenv.ServiceSpec{Namespace: e.ns, Name: name, Endpoints: endpoints(pods...)})
	if len(annotations) > 0 {
		e.annotate("Service", name, annotations)
	}
	return s
}

// annotate sets (or, with an empty value, removes) annotations of a
// Service or an Ingress of the test namespace.
func (e *env) annotate(kind, name string, annotations map[string]string) {
	e.t.Helper()
	ctx := context.Background()
	set := func(m map[string]string) map[string]string {
		if m == nil {
			m = map[string]string{}
		}
		for k, v := range annotations {
			if v == "" {
				delete(m, k)
				continue
			}
			m[k] = v
		}
		return m
	}
	// The daemon writes the Ingress's status at any time: a write between
	// our read and update is a conflict, retried on a fresh read.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		switch kind {
		case "Service":
			svcs := e.c.Admin.CoreV1().Services(e.ns)
			svc, err := svcs.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			svc.Annotations = set(svc.Annotations)
			_, err = svcs.Update(ctx, svc, metav1.UpdateOptions{})
			return err
		case "Ingress":
			ings := e.c.Admin.NetworkingV1().Ingresses(e.ns)
			ing, err := ings.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			ing.Annotations = set(ing.Annotations)
			_, err = ings.Update(ctx, ing, metav1.UpdateOptions{})
			return err
		}
		return fmt.Errorf("annotate %s: not supported", kind)
	})
	if err != nil {
		e.t.Fatal(err)
	}
}

func endpoints(pods ...*testenv.Pod) []testenv.Endpoint {
	var eps []testenv.Endpoint
	for _, p := range pods {
		eps = append(eps, p.Endpoint())
	}
	return eps
}

func (e *env) configMap(name string, data map[string]string) {
	e.t.Helper()
	ctx := context.Background()
	cms := e.c.Admin.CoreV1().ConfigMaps(e.ns)
	cur, err := cms.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns}, Data: data}, metav1.CreateOptions{})
	} else {
		cur.Data = data
		_, err = cms.Update(ctx, cur, metav1.UpdateOptions{})
	}
	if err != nil {
		e.t.Fatal(err)
	}
}

// pods starts n pods named prefix-0.. on 198.18.<subnet>.10+i.
func (e *env) pods(prefix string, subnet, n int) []*testenv.Pod {
	e.t.Helper()
	var out []*testenv.Pod
	for i := 0; i < n; i++ {
		out = append(out, testenv.StartPod(e.t, testenv.PodOptions{
			Name: fmt.Sprintf("%s-%d", prefix, i),
			IP:   fmt.Sprintf("198.18.%d.%d", subnet, 10+i),
		}))
	}
	return out
}

// event waits for a Warning Event with reason on the named object.
func (e *env) event(kind, name, reason string) *corev1.Event {
	e.t.Helper()
	var found *corev1.Event
	testenv.Eventually(e.t, 15*time.Second, func() error {
		list, err := e.c.Admin.CoreV1().Events(e.ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		for i, ev := range list.Items {
			if ev.InvolvedObject.Kind == kind && ev.InvolvedObject.Name == name && ev.Reason == reason {
				found = &list.Items[i]
				return nil
			}
		}
		return fmt.Errorf("no %s Event on %s %s/%s among %d events", reason, kind, e.ns, name, len(list.Items))
	})
	return found
}

// killHAProxy kills every HAProxy process of the daemon and waits until
// the daemon has started HAProxy again.
func (d *daemon) killHAProxy() {
	d.t.Helper()
	old := haproxyPIDs(d.runtimeDir)
	if len(old) == 0 {
		d.t.Fatal("no HAProxy process found")
	}
	for _, pid := range old {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	testenv.Eventually(d.t, 20*time.Second, func() error {
		if now := haproxyPIDs(d.runtimeDir); len(now) == 0 || now[0] == old[0] {
			return fmt.Errorf("HAProxy not restarted yet (pids %v)", now)
		}
		return nil
	})
}
