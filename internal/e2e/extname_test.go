package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// externalNameService creates an ExternalName Service pointing at host,
// with one port whose number is the pods' (8080).
func (e *env) externalNameService(name, host string) {
	e.t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: name},
		Spec: corev1.ServiceSpec{
			Type:         corev1.ServiceTypeExternalName,
			ExternalName: host,
			Ports:        []corev1.ServicePort{{Name: "http", Port: 8080, Protocol: corev1.ProtocolTCP}},
		},
	}
	if _, err := e.c.Admin.CoreV1().Services(e.ns).Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// TestExternalName: an ExternalName Service is served by the address its
// name resolves to (the daemon asks a DNS server the test runs); a new
// address is served with no reload; a name resolving to 127.0.0.1, or not
// existing, leaves the backend without servers (503) with an Event on the
// Service, while another Service keeps serving throughout.
func TestExternalName(t *testing.T) {
	e := newEnv(t)
	dns := testenv.StartDNS(t)
	pods := e.pods("xn", 174, 3)
	const name = "backend.ext.test"
	dns.Set(name, pods[0].IP.String())
	e.externalNameService("ext", name)
	e.service("web", nil, pods[2])
	d := e.startDaemon("--external-name-resolver="+dns.Addr, "--external-name-interval=200ms")
	e.ingress("xn", nil,
		rule{host: "ext.test", path: "/", service: "ext", port: 8080},
		rule{host: "web.test", path: "/", service: "web"})
	d.expect("ext.test", "/", 200, "xn-0")
	d.expect("web.test", "/", 200, "xn-2")
	load := startVictimLoop(d, "web.test", "xn-2", "/")

	r0 := d.reloads()
	dns.Set(name, pods[1].IP.String())
	testenv.Eventually(t, 10*time.Second, func() error {
		if got := strings.Join(d.answering("ext.test", "/", 6), ","); got != "xn-1" {
			return fmt.Errorf("ext.test answered by %q, want xn-1", got)
		}
		return nil
	})
	if r := d.reloads(); r != r0 {
		t.Fatalf("HAProxy reloaded %d times for a new ExternalName address", r-r0)
	}

	// A name pointing at the edge itself is refused like such an
	// endpoint (CVE-2021-25740).
	dns.Set(name, "127.0.0.1")
	testenv.Eventually(t, 15*time.Second, func() error {
		for _, msg := range e.eventMessages("Service", "ext", "InvalidEndpoint") {
			if strings.Contains(msg, `"`+name+`" resolves to 127.0.0.1, which is a loopback address`) {
				return nil
			}
		}
		return fmt.Errorf("no InvalidEndpoint Event naming 127.0.0.1 on Service ext")
	})
	d.expect("ext.test", "/", 503, "")
	if cfg := d.config(); strings.Contains(cfg, "127.0.0.1:8080") {
		t.Error("the refused address reached haproxy.cfg")
	}

	dns.Set(name)
	if ev := e.event("Service", "ext", "ExternalNameUnresolved"); !strings.Contains(ev.Message, name) {
		t.Errorf("ExternalNameUnresolved Event: %q", ev.Message)
	}
	d.expect("ext.test", "/", 503, "")

	dns.Set(name, pods[0].IP.String())
	d.expect("ext.test", "/", 200, "xn-0")
	if r := d.reloads(); r != r0 {
		t.Errorf("HAProxy reloaded %d times while the name changed", r-r0)
	}
	load.finish(t)
}
