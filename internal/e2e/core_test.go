package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// TestScenario is the user story of the README: a Service with the
// controller's annotations, an Ingress for foo.bar, scaling under load.
func TestScenario(t *testing.T) {
	e := newEnv(t)
	e.configMap("haproxy-kubernetes-ingress", map[string]string{"servers-increment": "42", "ssl-redirect": "OFF"})
	d := e.startDaemon("--configmap=" + e.ns + "/haproxy-kubernetes-ingress")
	pods := e.pods("app", 1, 5)

	// Before the Ingress exists: the built-in default backend answers 404.
	d.expect("foo.bar", "/", 404, "")

	app := e.service("app", map[string]string{
		"haproxy.org/check":         "enabled",
		"haproxy.org/forwarded-for": "enabled",
		"haproxy.org/load-balance":  "roundrobin",
	}, pods[0], pods[1])
	e.ingress("app", nil, rule{host: "foo.bar", path: "/", service: "app"})
	d.expect("foo.bar", "/", 200, "")

	// Two pods share requests round-robin, and see X-Forwarded-For.
	counts := map[string]int{}
	for i := 0; i < 20; i++ {
		r, err := d.get("foo.bar", "/")
		if err != nil || r.status != 200 {
			t.Fatalf("request %d: %v %+v", i, err, r)
		}
		counts[r.header.Get("X-Pod")]++
		if xff := r.header.Get("X-Seen-Forwarded-For"); xff != "127.0.0.1" {
			t.Fatalf("pod saw X-Forwarded-For %q, want 127.0.0.1", xff)
		}
	}
	if counts["app-0"] != 10 || counts["app-1"] != 10 {
		t.Fatalf("round-robin over 2 pods: got %v, want 10 each", counts)
	}

	// The ConfigMap is honoured: 42 server slots per backend, no redirect.
	cfg := d.config()
	if n := len(regexp.MustCompile(`(?m)^\s+server SRV_\d+ `).FindAllString(cfg, -1)); n != 42 {
		t.Fatalf("haproxy.cfg has %d server slots, want 42 (servers-increment)", n)
	}
	if strings.Contains(cfg, "redirect scheme https") {
		t.Fatalf("ssl-redirect OFF, but haproxy.cfg redirects:\n%s", cfg)
	}

	// Scaling 2 -> 5 -> 1 -> 3 pods under a running client: served by
	// exactly the new set, no failed request, no reload.
	before := d.reloads()
	stop := make(chan struct{})
	var failed, sent atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				r, err := d.get("foo.bar", "/")
				sent.Add(1)
				if err != nil || r.status != 200 {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprintf("%v %d %q", err, r.status, r.body))
				}
			}
		}()
	}
	for _, n := range []int{5, 1, 3} {
		start := time.Now()
		app.SetEndpoints(t, endpoints(pods[:n]...)...)
		want := names(pods[:n])
		testenv.Eventually(t, 5*time.Second, func() error {
			got := d.answering("foo.bar", "/", 4*n)
			if strings.Join(got, ",") != strings.Join(want, ",") {
				return fmt.Errorf("answering %v, want %v", got, want)
			}
			return nil
		})
		t.Logf("scaled to %d pods: served by exactly them %v after the API write", n, time.Since(start).Round(time.Millisecond))
	}
	close(stop)
	wg.Wait()
	if failed.Load() != 0 {
		t.Fatalf("%d of %d requests failed during scaling; first: %v", failed.Load(), sent.Load(), firstErr.Load())
	}
	if after := d.reloads(); after != before {
		t.Fatalf("HAProxy reloaded %d times during endpoint scaling, want 0", after-before)
	}
	t.Logf("scaling: %d requests, 0 failed, 0 reloads", sent.Load())

	// Removing the Ingress gives 404 again.
	e.deleteIngress("app")
	d.expect("foo.bar", "/", 404, "")
}

// answering sends n requests and returns the sorted set of pods that
// answered.
func (d *daemon) answering(host, path string, n int) []string {
	seen := map[string]bool{}
	for i := 0; i < n; i++ {
		if r, err := d.get(host, path); err == nil && r.status == 200 {
			seen[r.header.Get("X-Pod")] = true
		}
	}
	var out []string
	for p := range seen {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

func names(pods []*testenv.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	sort.Strings(out)
	return out
}

func (d *daemon) config() string {
	d.t.Helper()
	b, err := os.ReadFile(filepath.Join(d.configDir, "haproxy.cfg"))
	if err != nil {
		d.t.Fatal(err)
	}
	return string(b)
}

// TestPathAndHostMatrix checks Ingress v1 matching on the real HAProxy:
// exact, wildcard and missing hosts, Exact/Prefix/ImplementationSpecific
// paths, longest match, Exact before Prefix.
func TestPathAndHostMatrix(t *testing.T) {
	e := newEnv(t)
	d := e.startDaemon()
	p := e.pods("m", 2, 6)
	for i, name := range []string{"root", "foo", "foobar", "exact", "wild", "nohost"} {
		e.service(name, nil, p[i])
	}
	exact, prefix, impl := networkingv1.PathTypeExact, networkingv1.PathTypePrefix, networkingv1.PathTypeImplementationSpecific
	e.ingress("matrix", nil,
		rule{host: "a.test", path: "/", pathType: prefix, service: "root"},
		rule{host: "a.test", path: "/foo", pathType: prefix, service: "foo"},
		rule{host: "a.test", path: "/foo/bar/", pathType: impl, service: "foobar"},
		rule{host: "a.test", path: "/foo", pathType: exact, service: "exact"},
		rule{host: "*.w.test", path: "/", pathType: prefix, service: "wild"},
		rule{host: "", path: "/only", pathType: prefix, service: "nohost"},
	)
	for _, c := range []struct {
		host, path string
		status     int
		pod        string
	}{
		{"a.test", "/", 200, "m-0"},
		{"a.test", "/foo", 200, "m-3"},         // Exact beats Prefix on the same path
		{"a.test", "/foo/", 200, "m-1"},        // Prefix /foo
		{"a.test", "/foo/x", 200, "m-1"},       // element-wise prefix
		{"a.test", "/foobar", 200, "m-0"},      // not /foo: falls to /
		{"a.test", "/foo/bar", 200, "m-2"},     // trailing slash ignored
		{"a.test", "/foo/bar/baz", 200, "m-2"}, // longest match
		{"A.TEST:8080", "/foo/x", 200, "m-1"},  // host case and port ignored
		{"x.w.test", "/any", 200, "m-4"},       // wildcard: one label
		{"y.x.w.test", "/any", 404, ""},        // wildcard: not two labels
		{"w.test", "/any", 404, ""},            // wildcard: not zero labels
		{"other.test", "/only/x", 200, "m-5"},  // rule without host
		{"other.test", "/", 404, ""},
	} {
		d.expect(c.host, c.path, c.status, c.pod)
	}
}

// TestSharedHost: several Ingresses on one host merge; a conflicting rule
// goes to the oldest Ingress and the younger one gets an Event.
func TestSharedHost(t *testing.T) {
	e := newEnv(t)
	d := e.startDaemon()
	p := e.pods("s", 3, 3)
	e.service("one", nil, p[0])
	e.service("two", nil, p[1])
	e.service("three", nil, p[2])
	// Names sort in creation order too, so the outcome is the same whether
	// the API server stamps these in one second or several.
	e.ingress("first", nil, rule{host: "shared.test", path: "/a", service: "one"})
	e.ingress("second", nil, rule{host: "shared.test", path: "/b", service: "two"})
	d.expect("shared.test", "/a", 200, "s-0")
	d.expect("shared.test", "/b", 200, "s-1")

	e.ingress("third", nil, rule{host: "shared.test", path: "/a", service: "three"})
	e.event("Ingress", "third", "RuleConflict")
	d.expect("shared.test", "/a", 200, "s-0")

	// When the older Ingress goes, the younger one's rule takes over.
	e.deleteIngress("first")
	d.expect("shared.test", "/a", 200, "s-2")
}

// TestNoReadyEndpoints: a Service without ready endpoints answers 503, and
// a not-ready endpoint never gets traffic.
func TestNoReadyEndpoints(t *testing.T) {
	e := newEnv(t)
	d := e.startDaemon()
	p := e.pods("n", 4, 2)
	svc := e.service("empty", nil)
	e.ingress("empty", nil, rule{host: "empty.test", path: "/", service: "empty"})
	d.expect("empty.test", "/", 503, "")

	svc.SetEndpoints(t, testenv.Endpoint{IP: p[0].IP.String()}, testenv.Endpoint{IP: p[1].IP.String(), NotReady: true})
	d.expect("empty.test", "/", 200, "n-0")
	if got := d.answering("empty.test", "/", 10); strings.Join(got, ",") != "n-0" {
		t.Fatalf("answering %v, want only the ready pod n-0", got)
	}
	svc.SetEndpoints(t, testenv.Endpoint{IP: p[0].IP.String(), NotReady: true})
	d.expect("empty.test", "/", 503, "")
}

// TestInvalidAnnotation: a value HAProxy would reject gets an Event on its
// object, never reaches haproxy.cfg, and everything else keeps serving.
func TestInvalidAnnotation(t *testing.T) {
	e := newEnv(t)
	d := e.startDaemon()
	p := e.pods("i", 5, 2)
	e.service("good", nil, p[0])
	e.ingress("good", nil, rule{host: "good.test", path: "/", service: "good"})
	d.expect("good.test", "/", 200, "i-0")

	e.service("bad", map[string]string{"haproxy.org/load-balance": "bogus\n  server evil 203.0.113.9:80"}, p[1])
	e.ingress("bad", nil, rule{host: "bad.test", path: "/", service: "bad"})
	ev := e.event("Service", "bad", "InvalidAnnotation")
	if !strings.Contains(ev.Message, "load-balance") {
		t.Fatalf("event message %q does not name the key", ev.Message)
	}
	// The default applies to the bad Service; the good one is untouched.
	d.expect("bad.test", "/", 200, "i-1")
	d.expect("good.test", "/", 200, "i-0")
	cfg := d.config()
	if strings.Contains(cfg, "bogus") || strings.Contains(cfg, "evil") {
		t.Fatalf("rejected value reached haproxy.cfg:\n%s", cfg)
	}
}

// TestDefaultBackendService: --default-backend-service answers what no rule
// matches.
func TestDefaultBackendService(t *testing.T) {
	e := newEnv(t)
	p := e.pods("f", 6, 1)
	e.service("fallback", nil, p[0])
	d := e.startDaemon("--default-backend-service=" + e.ns + "/fallback")
	d.expect("unknown.test", "/", 200, "f-0")
}

// TestHAProxySupervision: killing HAProxy makes the daemon start it again;
// stopping the daemon leaves no HAProxy behind (checked in stop()).
func TestHAProxySupervision(t *testing.T) {
	e := newEnv(t)
	d := e.startDaemon()
	p := e.pods("k", 7, 1)
	e.service("app", nil, p[0])
	e.ingress("app", nil, rule{host: "k.test", path: "/", service: "app"})
	d.expect("k.test", "/", 200, "k-0")

	d.killHAProxy()
	d.expect("k.test", "/", 200, "k-0")
	d.stop()
	if left := haproxyPIDs(d.runtimeDir); len(left) != 0 {
		for _, pid := range left {
			if alive(pid) {
				t.Fatalf("HAProxy %v left after the daemon stopped", left)
			}
		}
	}
}

// TestIngressClass: with --ingress.class, only Ingresses of that class (or
// without a class, with --empty-ingress-class) are served.
func TestIngressClass(t *testing.T) {
	e := newEnv(t)
	p := e.pods("c", 8, 1)
	e.service("app", nil, p[0])
	class := "perimeter-" + e.ns
	_, err := e.c.Admin.NetworkingV1().IngressClasses().Create(context.Background(), &networkingv1.IngressClass{
		ObjectMeta: metav1.ObjectMeta{Name: class},
		Spec:       networkingv1.IngressClassSpec{Controller: "haproxy.org/ingress-controller/" + class},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.c.Admin.NetworkingV1().IngressClasses().Delete(context.Background(), class, metav1.DeleteOptions{})
	})
	d := e.startDaemon("--ingress.class=" + class)
	ours := e.ingress("ours", nil, rule{host: "ours.test", path: "/", service: "app"})
	ours.Spec.IngressClassName = &class
	if _, err := e.c.Admin.NetworkingV1().Ingresses(e.ns).Update(context.Background(), ours, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.ingress("classless", nil, rule{host: "classless.test", path: "/", service: "app"})
	d.expect("ours.test", "/", 200, "c-0")
	d.expect("classless.test", "/", 404, "")
}

// TestFatalStartErrors: what stops the daemon from serving at start ends it
// with a non-zero status and one line saying why.
func TestFatalStartErrors(t *testing.T) {
	e := newEnv(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyPort := busy.Addr().(*net.TCPAddr).Port

	closedPort := testenv.FreePort(t)
	unreachable := filepath.Join(t.TempDir(), "unreachable.kubeconfig")
	kc, err := os.ReadFile(e.c.DaemonKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`https://127\.0\.0\.1:\d+`)
	if err := os.WriteFile(unreachable, re.ReplaceAll(kc, []byte(fmt.Sprintf("https://127.0.0.1:%d", closedPort))), 0o600); err != nil {
		t.Fatal(err)
	}
	base := func(kubeconfig string) []string {
		return []string{"--kubeconfig=" + kubeconfig, "--config-dir=" + t.TempDir(), "--runtime-dir=" + shortTempDir(t),
			"--ipv4-bind-address=127.0.0.1", "--disable-ipv6", "--http-bind-port=" + strconv.Itoa(testenv.FreePort(t)),
			"--stats-bind-port=0", "--healthz-bind-port=0", "--controller-port=0"}
	}
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"missing kubeconfig", base("/nonexistent/kubeconfig"), "no such file"},
		{"unreachable API server", base(unreachable), "unreachable"},
		{"missing haproxy", append(base(e.c.DaemonKubeconfig), "--program=/nonexistent/haproxy"), "haproxy"},
		{"HTTP port in use", append(base(e.c.DaemonKubeconfig), "--http-bind-port="+strconv.Itoa(busyPort)), "haproxy"},
		{"controller port in use", append(base(e.c.DaemonKubeconfig), "--controller-port="+strconv.Itoa(busyPort)), "address already in use"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(perimeterBinary(t), c.args...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			done := make(chan error, 1)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			go func() { done <- cmd.Wait() }()
			select {
			case err = <-done:
			case <-time.After(60 * time.Second):
				_ = cmd.Process.Kill()
				t.Fatalf("daemon still running after 60s; output:\n%s", stderr.String())
			}
			if err == nil {
				t.Fatalf("exit status 0, want non-zero; output:\n%s", stderr.String())
			}
			var last string
			for _, l := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
				if strings.HasPrefix(l, "perimeter: ") {
					last = l
				}
			}
			if last == "" || !strings.Contains(last, c.want) {
				t.Fatalf("want one line \"perimeter: ...%s...\"; output:\n%s", c.want, stderr.String())
			}
			t.Log(last)
		})
	}
}
