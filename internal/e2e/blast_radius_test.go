package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// TestBlastRadius: Ingress app (foo.bar) and Ingress hostile (evil.test)
// route to the same Service. Under a keep-alive load on foo.bar, hostile
// gets one bad or different annotation at a time: foo.bar answers 200 to
// every request throughout, each case gets its Event on hostile (none on
// the Service or on app), and hostile's own routes fail closed where the
// broken key is a security key. A new endpoint then reaches both Ingresses'
// backends without a reload.
func TestBlastRadius(t *testing.T) {
	e := newEnv(t)
	d := e.startDaemon()
	p := e.pods("blast", 87, 2)
	svc := e.service("app", nil, p[0])
	e.ingress("app", nil, rule{host: "foo.bar", path: "/", service: "app"})
	e.ingress("hostile", nil, rule{host: "evil.test", path: "/", service: "app"})
	d.expect("foo.bar", "/", 200, "blast-0")
	d.expect("evil.test", "/", 200, "blast-0")

	load := startKeepAliveLoad(d.httpPort, "foo.bar", 4)
	defer load.finish()
	cases := []struct {
		key, value string
		// reason is the Event on hostile; "" for a value that is valid
		// there, which then shows in hostile's backend as applied.
		reason, applied string
		// status hostile answers while the annotation is set.
		status int
	}{
		{"haproxy.org/auth-realm", "x # y", "InvalidAnnotation", "", 503},
		{"haproxy.org/rate-limit-requests", "-5", "InvalidAnnotation", "", 503},
		{"haproxy.org/allow-list", "1.2.3.4 acl pwn", "InvalidAnnotation", "", 403},
		{"haproxy.org/request-capture", "req.hdr(cookie),debug", "InvalidAnnotation", "", 200},
		// An Ingress-scope key: hostile's variant gets it, app's does not.
		{"haproxy.org/timeout-server", "5s", "", "timeout server 5s", 200},
	}
	prev := ""
	for _, c := range cases {
		ann := map[string]string{c.key: c.value}
		if prev != "" {
			ann[prev] = "" // one case at a time
		}
		prev = c.key
		e.annotate("Ingress", "hostile", ann)
		if c.reason != "" {
			ev := e.eventWith("Ingress", "hostile", c.reason, c.key)
			if !strings.Contains(ev.Message, c.value) {
				t.Errorf("%s: Event %q does not name the value", c.key, ev.Message)
			}
		} else {
			testenv.Eventually(t, 15*time.Second, func() error {
				cfg, err := os.ReadFile(filepath.Join(d.configDir, "haproxy.cfg"))
				if err != nil {
					return err
				}
				name := variantName(string(cfg), e.ns+"_app_80__")
				if !strings.Contains(variantSection(string(cfg), e.ns+"_app_80__"), c.applied) {
					return fmt.Errorf("%s=%s: no variant with %q yet", c.key, c.value, c.applied)
				}
				// Served once the worker's stats list the variant: no
				// reload of it is left pending.
				return d.statsList(name)
			})
		}
		d.expect("evil.test", "/", c.status, "")
		d.expect("foo.bar", "/", 200, "blast-0")
		if sent, failed, errs := load.snapshot(); failed != 0 {
			t.Fatalf("after %s=%q: foo.bar failed %d of %d requests: %v", c.key, c.value, failed, sent, errs)
		}
	}

	cfg := d.config()
	plain, variant := backendSection(cfg, e.ns+"_app_80"), variantSection(cfg, e.ns+"_app_80__")
	if plain == "" || variant == "" {
		t.Fatalf("want app's backend %s_app_80 and a variant for hostile:\n%s", e.ns, cfg)
	}
	if strings.Contains(plain, "timeout server 5s") || !strings.Contains(variant, "timeout server 5s") {
		t.Errorf("timeout-server 5s of hostile: want it in hostile's variant only\napp's:\n%s\nhostile's:\n%s", plain, variant)
	}
	// The Service's endpoints reach both variants at run time.
	before := d.reloads()
	svc.SetEndpoints(t, p[1].Endpoint())
	d.expect("foo.bar", "/", 200, "blast-1")
	d.expect("evil.test", "/", 200, "blast-1")
	if after := d.reloads(); after != before {
		t.Errorf("an endpoint change reloaded HAProxy (%d -> %d reloads)", before, after)
	}

	for _, x := range []struct{ kind, name string }{{"Service", "app"}, {"Ingress", "app"}} {
		if evs := e.events(x.kind, x.name); len(evs) > 0 {
			t.Errorf("%s %s got Events, want none: %v", x.kind, x.name, evs)
		}
	}
	sent, failed, errs := load.finish()
	if failed != 0 || sent == 0 {
		t.Fatalf("foo.bar: %d of %d requests failed: %v", failed, sent, errs)
	}
	t.Logf("foo.bar requests %d, failed %d, while hostile took 5 annotations", sent, failed)
}

// variantName is the name of the first backend whose name starts with
// prefix, "" when there is none.
func variantName(cfg, prefix string) string {
	_, rest, ok := strings.Cut(cfg, "\nbackend "+prefix)
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, " ")
	return prefix + name
}

// variantSection is the text of the first backend whose name starts
// with prefix, "" when there is none.
func variantSection(cfg, prefix string) string {
	if name := variantName(cfg, prefix); name != "" {
		return backendSection(cfg, name)
	}
	return ""
}

// statsList checks that the running HAProxy worker has backend name.
func (d *daemon) statsList(name string) error {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/stats;csv", d.statsPort))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if !strings.Contains(string(b), "\n"+name+",BACKEND,") {
		return fmt.Errorf("backend %s not served yet", name)
	}
	return nil
}

// eventWith waits for an Event with reason on the named object whose
// message contains text.
func (e *env) eventWith(kind, name, reason, text string) *corev1.Event {
	e.t.Helper()
	var found *corev1.Event
	testenv.Eventually(e.t, 15*time.Second, func() error {
		for _, ev := range e.events(kind, name) {
			if ev.Reason == reason && strings.Contains(ev.Message, text) {
				found = &ev
				return nil
			}
		}
		return fmt.Errorf("no %s Event naming %s on %s %s/%s", reason, text, kind, e.ns, name)
	})
	return found
}

// events lists the daemon's Events on the named object of the test
// namespace (the API server's own controllers record some too).
func (e *env) events(kind, name string) []corev1.Event {
	e.t.Helper()
	list, err := e.c.Admin.CoreV1().Events(e.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []corev1.Event
	for _, ev := range list.Items {
		if ev.InvolvedObject.Kind == kind && ev.InvolvedObject.Name == name && ev.Source.Component == "perimeter" {
			out = append(out, ev)
		}
	}
	return out
}

// keepAliveLoad sends requests for one host over kept-alive connections
// until finished, counting every answer other than 200 as a failure.
type keepAliveLoad struct {
	tally
	stop chan struct{}
	done chan struct{}
}

func startKeepAliveLoad(port int, host string, clients int) *keepAliveLoad {
	l := &keepAliveLoad{stop: make(chan struct{}), done: make(chan struct{})}
	url := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) + "/"
	finished := make(chan struct{}, clients)
	for range clients {
		cl := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
		go func() {
			defer func() { finished <- struct{}{} }()
			defer cl.CloseIdleConnections()
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				req, _ := http.NewRequest(http.MethodGet, url, nil)
				req.Host = host
				l.sent.Add(1)
				resp, err := cl.Do(req)
				switch {
				case err != nil:
					l.fail(err.Error())
				default:
					if resp.StatusCode != http.StatusOK {
						l.fail(resp.Status)
					}
					// Drain so the connection is kept alive.
					var buf [512]byte
					for {
						if _, err := resp.Body.Read(buf[:]); err != nil {
							break
						}
					}
					resp.Body.Close()
				}
			}
		}()
	}
	go func() {
		for range clients {
			<-finished
		}
		close(l.done)
	}()
	return l
}

func (l *keepAliveLoad) snapshot() (sent, failed int64, errs []string) {
	return l.sent.Load(), l.failed.Load(), l.reasons()
}

func (l *keepAliveLoad) finish() (sent, failed int64, errs []string) {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.done
	return l.snapshot()
}
