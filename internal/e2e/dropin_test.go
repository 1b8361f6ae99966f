package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// Drop-in tests use pods in 198.18.137.0/24 to 198.18.139.0/24.

// peerExecStart is the ExecStart line of the HAProxy Kubernetes Ingress
// Controller's documented --external systemd unit, flags unchanged, with
// the flags its Helm and metrics docs add.
var peerExecStart = []string{
	"--external", "--configmap=default/haproxy-kubernetes-ingress", "--program=/usr/sbin/haproxy",
	"--disable-ipv6", "--ipv4-bind-address=0.0.0.0", "--http-bind-port=80",
	"--prometheus", "-e", "--localpeer-port=10000", "--default-backend-port=6061",
}

// TestPeerCommandLine: the daemon started with the peer's unit and its
// TCP-services ConfigMap (NS/SVC:PORT and NS/SVC:PORT:ssl) serves an
// Ingress and both TCP services, publishes the --publish-service address,
// and says which flags did nothing.
func TestPeerCommandLine(t *testing.T) {
	e := newEnv(t)
	pod := feEchoPod(t, "dropin-0", 137, 10)
	e.service("web", nil, pod.Pod)
	e.service("ldap", nil, pod.Pod)
	e.ingress("web", nil, rule{host: "dropin.test", path: "/", service: "web", port: 80})
	plain, secure := testenv.FreePort(t), testenv.FreePort(t)
	// The ConfigMap of the peer's TCP services documentation, on free ports.
	e.configMap("tcpservices", map[string]string{
		strconv.Itoa(plain):  e.ns + "/ldap:80",
		strconv.Itoa(secure): e.ns + "/ldap:80:ssl",
	})

	// The peer's --publish-service: a Service whose load-balancer address
	// the edge publishes in Ingress status.
	e.service("front", nil)
	svcs := e.c.Admin.CoreV1().Services(e.ns)
	front, err := svcs.Get(context.Background(), "front", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	front.Spec.Type = corev1.ServiceTypeLoadBalancer
	if front, err = svcs.Update(context.Background(), front, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	front.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.7"}}
	if _, err := svcs.UpdateStatus(context.Background(), front, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The unit's flags, then only what this test bed needs instead of the
	// host's: port 80 (shared machine), the daemon's credentials, the
	// TCP services ConfigMap of this test's namespace.
	httpPort := testenv.FreePort(t)
	args := append(append([]string{}, peerExecStart...),
		"--http-bind-port="+strconv.Itoa(httpPort), "--configmap-tcp-services="+e.ns+"/tcpservices",
		"--publish-service="+e.ns+"/front")
	d := e.startDaemon(args...)
	d.httpPort = httpPort

	d.expect("dropin.test", "/", 200, "dropin-0")
	e.expectStatus("web", "203.0.113.7", 30*time.Second)

	exchange := func(conn net.Conn) (string, error) {
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(conn, "GET /tcp HTTP/1.0\r\nHost: raw\r\n\r\n"); err != nil {
			return "", err
		}
		b, err := io.ReadAll(conn)
		return string(b), err
	}
	fromPod := func(out string) error {
		if !strings.Contains(out, "X-Pod: dropin-0") || !strings.Contains(out, "X-Seen-Uri: /tcp") {
			return fmt.Errorf("answer %q is not from the pod", out)
		}
		return nil
	}
	testenv.Eventually(t, 15*time.Second, func() error {
		conn, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(plain), 2*time.Second)
		if err != nil {
			return err
		}
		out, err := exchange(conn)
		if err != nil {
			return err
		}
		return fromPod(out)
	})
	testenv.Eventually(t, 15*time.Second, func() error {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", "127.0.0.1:"+strconv.Itoa(secure),
			&tls.Config{ServerName: "ldap.example", InsecureSkipVerify: true}) //nolint:gosec // the test checks the certificate itself
		if err != nil {
			return err
		}
		if st := conn.ConnectionState(); len(st.PeerCertificates) == 0 || subjectOf(st.PeerCertificates[0]) != generatedDefault {
			conn.Close()
			return fmt.Errorf("the :ssl port did not serve the default certificate")
		}
		out, err := exchange(conn)
		if err != nil {
			return err
		}
		return fromPod(out)
	})

	// No InvalidTCPService for the peer's form, and one warning per flag
	// that has no effect.
	log := d.out.String()
	if strings.Contains(log, "InvalidTCPService") {
		t.Fatalf("a TCP service entry was refused:\n%s", tail(log, 40))
	}
	for _, f := range []string{"--prometheus", "--localpeer-port", "--default-backend-port"} {
		if !strings.Contains(log, "accepted without effect\" flag="+f+" ") {
			t.Errorf("no warning for %s", f)
		}
	}
}

// TestPatternFiles: allow-lists naming the peer's pattern files
// (--configmap-patternfiles) admit the file's addresses and follow its
// changes; a missing file fails closed for its Ingress only, with an Event.
func TestPatternFiles(t *testing.T) {
	e := newEnv(t)
	pods := e.pods("patterns", 138, 3)
	e.configMap("patterns", map[string]string{"office": "# the edge's own clients\n127.0.0.0/8\n", "elsewhere": "203.0.113.0/24\n"})
	for i, name := range []string{"office", "elsewhere", "missing"} {
		e.service(name, nil, pods[i])
		e.ingress(name, map[string]string{"haproxy.org/allow-list": "patterns/" + name},
			rule{host: name + ".test", path: "/", service: name, port: 80})
	}
	d := e.startDaemon("--configmap-patternfiles=" + e.ns + "/patterns")

	d.expect("office.test", "/", 200, "patterns-0")
	d.expect("elsewhere.test", "/", 403, "")
	d.expect("missing.test", "/", 403, "")
	ev := e.event("Ingress", "missing", "InvalidAnnotation")
	if !strings.Contains(ev.Message, `pattern file "missing" is not a key of ConfigMap `+e.ns+"/patterns") {
		t.Fatalf("Event %q does not name the missing pattern file", ev.Message)
	}

	// The file changes: the list follows.
	e.configMap("patterns", map[string]string{"office": "203.0.113.0/24\n", "elsewhere": "127.0.0.1\n"})
	d.expect("office.test", "/", 403, "")
	d.expect("elsewhere.test", "/", 200, "patterns-1")
}

// TestPeerBackendForms: check-http in the peer's HTTP-version form sends
// its Host header (a pod healthy only for that Host stays in), and
// load-balance takes HAProxy's options (url_param: one user, one pod).
func TestPeerBackendForms(t *testing.T) {
	e := newEnv(t)
	pod := func(name string, host int, healthyHost string) *testenv.Pod {
		return testenv.StartPod(t, testenv.PodOptions{Name: name, IP: fmt.Sprintf("198.18.139.%d", host),
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/healthz" && healthyHost != "" && r.Host != healthyHost {
					http.Error(w, "wrong Host "+r.Host, http.StatusServiceUnavailable)
					return
				}
				w.Header().Set("X-Pod", name)
				_, _ = io.WriteString(w, name)
			})})
	}
	picky, easy := pod("picky", 10, "health.example"), pod("easy", 11, "")
	e.service("app", map[string]string{
		"haproxy.org/check-http":     `HEAD /healthz HTTP/1.1\r\nHost:\ health.example`,
		"haproxy.org/check-interval": "200ms",
	}, picky, easy)
	e.ingress("app", nil, rule{host: "forms.test", path: "/", service: "app"})
	d := e.startDaemon()

	both := "easy,picky"
	testenv.Eventually(t, 10*time.Second, func() error {
		if got := strings.Join(d.answering("forms.test", "/", 10), ","); got != both {
			return fmt.Errorf("answering %s, want %s", got, both)
		}
		return nil
	})
	if cfg := d.config(); !strings.Contains(cfg, "option httpchk HEAD /healthz HTTP/1.1\n") || !strings.Contains(cfg, "http-check send hdr Host health.example\n") {
		t.Fatalf("haproxy.cfg lacks the version form:\n%s", cfg)
	}
	// Another Host: the picky pod fails its check and is taken out.
	e.annotate("Service", "app", map[string]string{"haproxy.org/check-http": `HEAD /healthz HTTP/1.1\r\nHost:\ other.example`})
	testenv.Eventually(t, 10*time.Second, func() error {
		if got := strings.Join(d.answering("forms.test", "/", 10), ","); got != "easy" {
			return fmt.Errorf("answering %s, want only easy (picky sees Host other.example)", got)
		}
		return nil
	})

	// Back to the Host the picky pod wants, and url_param.
	e.annotate("Service", "app", map[string]string{"haproxy.org/check-http": `GET /healthz HTTP/1.0\r\nHost:\ health.example`,
		"haproxy.org/load-balance": "url_param user"})
	testenv.Eventually(t, 10*time.Second, func() error {
		if !strings.Contains(d.config(), "balance url_param user\n") {
			return fmt.Errorf("balance url_param not rendered yet")
		}
		if got := strings.Join(d.answering("forms.test", "/", 10), ","); got != both {
			return fmt.Errorf("answering %s, want %s", got, both)
		}
		for _, user := range []string{"alice", "bob", "carol", "dave"} {
			seen := map[string]bool{}
			for i := 0; i < 6; i++ {
				r, err := d.get("forms.test", "/?user="+user)
				if err != nil || r.status != 200 {
					return fmt.Errorf("user %s: %v %d", user, err, r.status)
				}
				seen[r.header.Get("X-Pod")] = true
			}
			if len(seen) != 1 {
				return fmt.Errorf("user %s answered by %v, want one pod", user, seen)
			}
		}
		return nil
	})
}
