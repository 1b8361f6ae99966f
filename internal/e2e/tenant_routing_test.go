package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// Tests of the tenant model (docs/security.md): a hostile tenant in one
// namespace, a victim in another, one daemon serving both, load running on
// the victim throughout.

// routingTenants is a victim and an attacker namespace served by one daemon.
type routingTenants struct {
	victim, attacker *env
}

func newRoutingTenants(t *testing.T) *routingTenants {
	t.Helper()
	v := newEnv(t)
	return &routingTenants{victim: v, attacker: &env{t: t, c: v.c, ns: v.c.Namespace(t)}}
}

// start runs the daemon on both namespaces.
func (tn *routingTenants) start(extra ...string) *daemon {
	return tn.victim.startDaemon(append([]string{"--namespace-whitelist=" + tn.attacker.ns}, extra...)...)
}

// victimLoop requests host+path for each path in a loop and counts every
// answer that is not 200 from pod: the victim's routes must hold while the
// attacker acts.
type victimLoop struct {
	tally
	stop chan struct{}
	wg   sync.WaitGroup
}

func startVictimLoop(d *daemon, host, pod string, paths ...string) *victimLoop {
	l := &victimLoop{stop: make(chan struct{})}
	for _, p := range paths {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				r, err := d.get(host, p)
				l.sent.Add(1)
				if err != nil || r.status != 200 || r.header.Get("X-Pod") != pod {
					l.fail(fmt.Sprintf("%s%s: %v status %d pod %q", host, p, err, r.status, r.header.Get("X-Pod")))
				}
			}
		}()
	}
	return l
}

// finish stops the loop and fails the test unless every request was
// answered by the victim.
func (l *victimLoop) finish(t *testing.T) {
	t.Helper()
	// Some load after the attack too, however fast the test was.
	start := l.sent.Load()
	testenv.Eventually(t, 10*time.Second, func() error {
		if n := l.sent.Load(); n < start+50 {
			return fmt.Errorf("victim load: %d requests sent", n)
		}
		return nil
	})
	close(l.stop)
	l.wg.Wait()
	if l.failed.Load() != 0 {
		t.Fatalf("victim load: %d of %d requests failed or reached another pod; first: %v", l.failed.Load(), l.sent.Load(), l.reasons())
	}
	t.Logf("victim load: %d requests, 0 failed", l.sent.Load())
}

// eventMessages are the messages of the Warning Events with reason on the
// named object; it waits for at least one.
func (e *env) eventMessages(kind, name, reason string) []string {
	e.t.Helper()
	e.event(kind, name, reason)
	list, err := e.c.Admin.CoreV1().Events(e.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, ev := range list.Items {
		if ev.InvolvedObject.Kind == kind && ev.InvolvedObject.Name == name && ev.Reason == reason {
			out = append(out, ev.Message)
		}
	}
	return out
}

// TestTenantHostTakeover: an older tenant owns its hosts. A younger tenant
// in another namespace adds Exact "/" and Prefix "/login" on the victim's
// host, a host-less "/", wildcards "*.example.com" and "*.com" and a
// spec.defaultBackend: the victim keeps every request, its host-only
// unmatched paths go to the operator's default backend, and the attacker
// gets an Event that names nothing of the victim's.
func TestTenantHostTakeover(t *testing.T) {
	tn := newRoutingTenants(t)
	v, a := tn.victim, tn.attacker
	vp, ap, fp := v.pods("ht-v", 161, 1), a.pods("ht-a", 162, 1), v.pods("ht-f", 163, 1)
	v.service("web", nil, vp[0])
	v.service("fallback", nil, fp[0])
	a.service("web", nil, ap[0])
	d := tn.start("--default-backend-service=" + v.ns + "/fallback")

	shop := v.ingress("shop", nil,
		rule{host: "shop.example.com", path: "/", service: "web"},
		rule{host: "app.example.com", path: "/app", service: "web"})
	d.expect("shop.example.com", "/login", 200, "ht-v-0")
	d.expect("app.example.com", "/app", 200, "ht-v-0")
	d.expect("app.example.com", "/login", 200, "ht-f-0")
	load := startVictimLoop(d, "shop.example.com", "ht-v-0", "/", "/login", "/login/x")
	appLoad := startVictimLoop(d, "app.example.com", "ht-v-0", "/app", "/app/x")

	// creationTimestamp has one-second steps: the attacker comes in a later
	// second, or the namespaces' names would decide.
	testenv.Eventually(t, 5*time.Second, func() error {
		if !time.Now().After(shop.CreationTimestamp.Add(time.Second)) {
			return fmt.Errorf("still the victim's second")
		}
		return nil
	})
	exact := networkingv1.PathTypeExact
	grab := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: "grab", Namespace: a.ns}}
	grab.Spec.DefaultBackend = &networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{
		Name: "web", Port: networkingv1.ServiceBackendPort{Number: 80}}}
	prefix := networkingv1.PathTypePrefix
	for _, r := range []struct {
		host, path string
		typ        *networkingv1.PathType
	}{
		{"shop.example.com", "/", &exact}, {"shop.example.com", "/login", &prefix}, {"app.example.com", "/", &prefix},
		{"", "/", &prefix}, {"*.example.com", "/", &prefix}, {"*.com", "/", &prefix}, {"evil.example.com", "/", &prefix},
	} {
		grab.Spec.Rules = append(grab.Spec.Rules, networkingv1.IngressRule{Host: r.host, IngressRuleValue: networkingv1.IngressRuleValue{
			HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{
				Path: r.path, PathType: r.typ, Backend: *grab.Spec.DefaultBackend,
			}}}}})
	}
	if _, err := a.c.Admin.NetworkingV1().Ingresses(a.ns).Create(context.Background(), grab, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The attacker's own rules apply (so the model has seen them), and
	// the hosts nobody owns fall to them as Ingress semantics say.
	d.expect("evil.example.com", "/x", 200, "ht-a-0")
	load.finish(t)
	appLoad.finish(t)
	d.expect("other.example.com", "/x", 200, "ht-a-0")
	d.expect("unknown.org", "/x", 200, "ht-a-0")
	// The victim's host-only paths go to the operator's default backend,
	// never to the attacker's wildcard, host-less rule or default.
	for _, p := range []string{"/", "/login", "/x"} {
		d.expect("app.example.com", p, 200, "ht-f-0")
	}
	d.expect("app.example.com.", "/app", 200, "ht-v-0")
	var msgs []string
	testenv.Eventually(t, 15*time.Second, func() error {
		msgs = a.eventMessages("Ingress", "grab", "RuleConflict")
		for _, host := range []string{"shop.example.com", "app.example.com"} {
			want := fmt.Sprintf("host %q is taken by another namespace; the rules for it are ignored", host)
			if !slices.Contains(msgs, want) {
				return fmt.Errorf("attacker's Events %q lack %q", msgs, want)
			}
		}
		return nil
	})
	for _, m := range msgs {
		if strings.Contains(m, v.ns) || strings.Contains(m, "shop\"") || strings.Contains(m, "Ingress shop") {
			t.Errorf("attacker's Event names the victim's objects: %q", m)
		}
	}
}

// TestTenantLongPath: an Exact path of 16 kB whose tail reads
// "shop.example.com/login" is refused with a short Event; after reloads the
// victim's /login is still the victim's and no map line is longer than
// HAProxy reads in one piece.
func TestTenantLongPath(t *testing.T) {
	tn := newRoutingTenants(t)
	v, a := tn.victim, tn.attacker
	vp, ap := v.pods("lp-v", 164, 1), a.pods("lp-a", 165, 2)
	v.service("web", nil, vp[0])
	a.service("web", nil, ap[0])
	d := tn.start()
	exact := networkingv1.PathTypeExact
	v.ingress("shop", nil,
		rule{host: "shop.example.com", path: "/", service: "web"},
		rule{host: "shop.example.com", path: "/login", pathType: exact, service: "web"})
	d.expect("shop.example.com", "/login", 200, "lp-v-0")
	load := startVictimLoop(d, "shop.example.com", "lp-v-0", "/", "/login")

	long := "/" + strings.Repeat("x", 16369) + "shop.example.com/login"
	a.ingress("evil", nil,
		rule{host: "b.example.com", path: long, pathType: exact, service: "web"},
		rule{host: "b.example.com", path: long[:len(long)-len("login")], service: "web"},
		rule{host: "b.example.com", path: "/ok", service: "web"})
	d.expect("b.example.com", "/ok", 200, "lp-a-0")
	// A new backend is a reload: HAProxy reads the map files again.
	before := d.reloads()
	a.service("web2", nil, ap[1])
	a.ingress("evil2", nil, rule{host: "c.example.com", path: "/", service: "web2"})
	d.expect("c.example.com", "/", 200, "lp-a-1")
	if d.reloads() == before {
		t.Fatal("no reload happened")
	}
	for _, name := range []string{"path-exact.map", "path-prefix.map", "host-owner.map"} {
		b, err := os.ReadFile(filepath.Join(d.configDir, "maps", name))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if len(l) >= 4096+300 || strings.Contains(l, "xxxxxxxx") {
				t.Errorf("%s has a line of %d bytes: %.100q", name, len(l), l)
			}
		}
	}
	d.expect("shop.example.com", "/login", 200, "lp-v-0")
	load.finish(t)
	msgs := a.eventMessages("Ingress", "evil", "InvalidPath")
	for _, m := range msgs {
		if len(m) > 300 || !strings.Contains(m, "more than 4096") {
			t.Errorf("InvalidPath Event of %d bytes, want a short one saying the cap: %.200q", len(m), m)
		}
	}
}

// TestTenantEndpointAddresses: an attacker's EndpointSlice that points at
// a multicast address and at the edge host's own address gets an Event on
// its Service; those addresses never reach haproxy.cfg, the Service's
// real pod keeps serving, and so does the victim. (The API server itself
// refuses loopback, link-local and unspecified endpoint addresses; the
// model's unit test covers those.)
func TestTenantEndpointAddresses(t *testing.T) {
	tn := newRoutingTenants(t)
	v, a := tn.victim, tn.attacker
	vp, ap := v.pods("ea-v", 166, 1), a.pods("ea-a", 167, 1)
	// The pod's link address on this side is one of the edge's own, as the
	// daemon sees them when it starts.
	local := ap[0].Link.Addr.Addr().String()
	v.service("web", nil, vp[0])
	svc := a.service("web", nil, ap[0])
	d := tn.start()
	v.ingress("shop", nil, rule{host: "shop.example.com", path: "/", service: "web"})
	a.ingress("evil", nil, rule{host: "evil.example.com", path: "/", service: "web"})
	d.expect("shop.example.com", "/", 200, "ea-v-0")
	d.expect("evil.example.com", "/", 200, "ea-a-0")
	load := startVictimLoop(d, "shop.example.com", "ea-v-0", "/")

	svc.SetEndpoints(t, testenv.Endpoint{IP: ap[0].IP.String()}, testenv.Endpoint{IP: "224.0.1.1"}, testenv.Endpoint{IP: local})
	testenv.Eventually(t, 15*time.Second, func() error {
		msgs := a.eventMessages("Service", "web", "InvalidEndpoint")
		all := strings.Join(msgs, "\n")
		for _, want := range []string{"224.0.1.1 is a multicast", local + " is an address of the edge host itself"} {
			if !strings.Contains(all, want) {
				return fmt.Errorf("InvalidEndpoint Events %q lack %q", msgs, want)
			}
		}
		return nil
	})
	for i := 0; i < 30; i++ {
		r, err := d.get("evil.example.com", "/")
		if err != nil || r.status != 200 || r.header.Get("X-Pod") != "ea-a-0" {
			t.Fatalf("attacker's Service with refused endpoints: %v %d %q, want 200 from its real pod", err, r.status, r.header.Get("X-Pod"))
		}
	}
	cfg := d.config()
	for _, addr := range []string{"224.0.1.1", local + ":"} {
		if strings.Contains(cfg, addr) {
			t.Errorf("refused endpoint %s reached haproxy.cfg", addr)
		}
	}
	load.finish(t)
}

// TestTenantRequestQuirks: a Host with '/' is refused (400) instead of
// reaching the /app backend with a path outside its prefix; a trailing-dot
// host routes like the host, not to the attacker's host-less rule;
// X-Forwarded-Proto says how the client came; a client's X-Forwarded-For
// does not reach a forwarded-for backend.
func TestTenantRequestQuirks(t *testing.T) {
	tn := newRoutingTenants(t)
	v, a := tn.victim, tn.attacker
	app, root := feEchoPod(t, "rq-app", 168, 10), feEchoPod(t, "rq-root", 168, 11)
	ap := a.pods("rq-a", 169, 1)
	v.service("app", nil, app.Pod)
	v.service("root", nil, root.Pod)
	a.service("web", nil, ap[0])
	d, httpsPort := v.tlsDaemon("--namespace-whitelist=" + a.ns)
	v.ingress("shop", nil,
		rule{host: "shop.example.com", path: "/app", service: "app"},
		rule{host: "shop.example.com", path: "/", service: "root"})
	a.ingress("evil", nil, rule{host: "", path: "/", service: "web"})
	d.expect("shop.example.com", "/app/x", 200, "rq-app")
	d.expect("elsewhere.test", "/", 200, "rq-a-0")
	load := startVictimLoop(d, "shop.example.com", "rq-app", "/app", "/app/x")

	// Host with a '/': HAProxy 2.6 accepts it; the frontend must not route
	// "shop.example.com/app" + "/internal" as the /app prefix.
	for _, host := range []string{"shop.example.com/app", "shop.example.com@x"} {
		status, err := rawStatus(d.httpPort, host, "/internal")
		if err != nil || status != 400 {
			t.Errorf("Host %q: status %d %v, want 400", host, status, err)
		}
	}
	// Trailing dot: the host's own rules, not the attacker's host-less one.
	for _, host := range []string{"shop.example.com.", "SHOP.example.com.:80"} {
		r, err := d.get(host, "/app/x")
		if err != nil || r.status != 200 || r.header.Get("X-Pod") != "rq-app" {
			t.Errorf("Host %q: %v %d %q, want 200 from rq-app", host, err, r.status, r.header.Get("X-Pod"))
		}
	}
	// Forwarded headers on plain HTTP.
	r, err := d.getWith("shop.example.com", "/app", map[string]string{"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.66"})
	if err != nil || r.status != 200 {
		t.Fatalf("plain HTTP: %v %+v", err, r)
	}
	if got := r.header.Get("X-Seen-X-Forwarded-Proto"); got != "http" {
		t.Errorf("plain HTTP: backend saw X-Forwarded-Proto %q, want http", got)
	}
	if got := r.header.Get("X-Seen-X-Forwarded-For"); got != "127.0.0.1" {
		t.Errorf("backend saw X-Forwarded-For %q, want only 127.0.0.1", got)
	}
	// And on HTTPS.
	testenv.Eventually(t, 10*time.Second, func() error {
		ans, err := httpsGet(httpsPort, "shop.example.com", "shop.example.com", "/app", nil)
		if err != nil {
			return err
		}
		if ans.status != 200 || ans.pod != "rq-app" {
			return fmt.Errorf("https: status %d pod %q", ans.status, ans.pod)
		}
		if got := ans.header.Get("X-Seen-X-Forwarded-Proto"); got != "https" {
			return fmt.Errorf("https: backend saw X-Forwarded-Proto %q, want https", got)
		}
		return nil
	})
	load.finish(t)
}

// TestTenantTrustForwardedFor: with --trust-forwarded-for the client's
// X-Forwarded-For is kept first.
func TestTenantTrustForwardedFor(t *testing.T) {
	e := newEnv(t)
	p := feEchoPod(t, "tf-app", 168, 20)
	e.service("app", nil, p.Pod)
	d := e.startDaemon("--trust-forwarded-for")
	e.ingress("app", nil, rule{host: "tf.example.com", path: "/", service: "app"})
	r := d.expectWith("tf.example.com", "/", map[string]string{"X-Forwarded-For": "203.0.113.66"}, 200, "tf-app")
	if got := r.header.Get("X-Seen-X-Forwarded-For"); got != "203.0.113.66,127.0.0.1" {
		t.Errorf("backend saw X-Forwarded-For %q, want the client's first", got)
	}
}

// rawStatus sends one GET with a Host the Go client would refuse.
func rawStatus(port int, host, path string) (int, error) {
	conn, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), 5*time.Second)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", path, host); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}
