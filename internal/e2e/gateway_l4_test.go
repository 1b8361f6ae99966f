package e2e

import (
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// Gateway listener tests use pods in 198.18.186.0/24.

// TestGatewayListeners: one Gateway with HTTPS, TLS and TCP listeners on a
// real HAProxy, with the daemon's least-privilege identity. The HTTPS
// listener serves its Secret's certificate for its hostname, and its route
// attaches only once the route's namespace carries the label the listener
// selects; a listener whose Secret does not exist is not programmed; a
// TLSRoute passes TLS through to a pod that shows its own certificate, and
// a new hostname needs no reload; a TCPRoute gets the TCP listener's port,
// bytes through unparsed. Every status is read back from the API server.
func TestGatewayListeners(t *testing.T) {
	e := newEnv(t)
	gw := e.gatewayClient()
	ctx := context.Background()

	web := feEchoPod(t, "gwl-web-0", 186, 10)
	e.service("web", nil, web.Pod)
	podCA := newTestCA(t, "Pass pod CA")
	podCert := podCA.sign(t, &x509.Certificate{
		SerialNumber: randSerial(t), Subject: podSubject("a.pass.gwl.test"),
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"a.pass.gwl.test", "b.pass.gwl.test"},
	}, mustKey(t))
	pass, _ := startTLSPod(t, "gwl-pass-0", "198.18.186.11", podCert, nil)
	e.c.CreateService(t, testenv.ServiceSpec{Namespace: e.ns, Name: "pass", Endpoints: endpoints(pass),
		Ports: []testenv.ServicePort{{Name: "https", Port: 443, TargetPort: tlsPodPort}}})
	db := feEchoPod(t, "gwl-db-0", 186, 12)
	e.service("db", nil, db.Pod)
	edgeCA := newTestCA(t, "Edge CA")
	e.tlsSecret("secure-tls", edgeCA.issue(t, "secure.gwl.test", "edge"))

	controller, class := e.gatewayClass(gw)
	d, httpsPort := e.tlsDaemon("--gateway-controller=" + controller)
	tcpPort := testenv.FreePort(t)
	selected := "e2e.perimeter.io/gateway-listeners"
	tlsRef := func(name string) *gwv1.ListenerTLSConfig {
		return &gwv1.ListenerTLSConfig{CertificateRefs: []gwv1.SecretObjectReference{{Name: gwv1.ObjectName(name)}}}
	}
	host := func(h string) *gwv1.Hostname { x := gwv1.Hostname(h); return &x }
	if _, err := gw.GatewayV1().Gateways(e.ns).Create(ctx, &gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Name: "edge", Namespace: e.ns},
		Spec: gwv1.GatewaySpec{
			GatewayClassName: gwv1.ObjectName(class),
			Listeners: []gwv1.Listener{
				{Name: "https", Protocol: gwv1.HTTPSProtocolType, Port: 443, Hostname: host("secure.gwl.test"), TLS: tlsRef("secure-tls"),
					AllowedRoutes: &gwv1.AllowedRoutes{Namespaces: &gwv1.RouteNamespaces{From: ptrTo(gwv1.NamespacesFromSelector),
						Selector: &metav1.LabelSelector{MatchLabels: map[string]string{selected: "yes"}}}}},
				{Name: "broken", Protocol: gwv1.HTTPSProtocolType, Port: gwv1.PortNumber(httpsPort), Hostname: host("broken.gwl.test"), TLS: tlsRef("nowhere")},
				{Name: "foreign", Protocol: gwv1.HTTPSProtocolType, Port: 443, Hostname: host("foreign.gwl.test"),
					TLS: &gwv1.ListenerTLSConfig{CertificateRefs: []gwv1.SecretObjectReference{{Name: "secure-tls", Namespace: ptrTo(gwv1.Namespace("elsewhere"))}}}},
				{Name: "pass", Protocol: gwv1.TLSProtocolType, Port: 443, Hostname: host("*.pass.gwl.test"),
					TLS: &gwv1.ListenerTLSConfig{Mode: ptrTo(gwv1.TLSModePassthrough)}},
				{Name: "tcp", Protocol: gwv1.TCPProtocolType, Port: gwv1.PortNumber(tcpPort)},
			},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	parent := func(section string) gwv1.CommonRouteSpec {
		return gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "edge", SectionName: ptrTo(gwv1.SectionName(section))}}}
	}
	ref := func(svc string, port int) []gwv1.BackendRef {
		return []gwv1.BackendRef{{BackendObjectReference: gwv1.BackendObjectReference{Name: gwv1.ObjectName(svc), Port: ptrTo(gwv1.PortNumber(port))}}}
	}
	if _, err := gw.GatewayV1().HTTPRoutes(e.ns).Create(ctx, &gwv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Name: "secure", Namespace: e.ns},
		Spec: gwv1.HTTPRouteSpec{CommonRouteSpec: parent("https"),
			Rules: []gwv1.HTTPRouteRule{{BackendRefs: []gwv1.HTTPBackendRef{{BackendRef: ref("web", 80)[0]}}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := gw.GatewayV1().TLSRoutes(e.ns).Create(ctx, &gwv1.TLSRoute{
		ObjectMeta: metav1.ObjectMeta{Name: "pass", Namespace: e.ns},
		Spec: gwv1.TLSRouteSpec{CommonRouteSpec: parent("pass"), Hostnames: []gwv1.Hostname{"a.pass.gwl.test"},
			Rules: []gwv1.TLSRouteRule{{BackendRefs: ref("pass", 443)}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := gw.GatewayV1().TCPRoutes(e.ns).Create(ctx, &gwv1.TCPRoute{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: e.ns},
		Spec:       gwv1.TCPRouteSpec{CommonRouteSpec: parent("tcp"), Rules: []gwv1.TCPRouteRule{{BackendRefs: ref("db", 80)}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The namespace lacks the selected label: the HTTPRoute is not let in.
	routeCondition(t, gw, "HTTPRoute", e.ns, "secure", "Accepted", "False", "NotAllowedByListeners")
	before := d.reloads()
	e.labelNamespace(selected, "yes")
	routeCondition(t, gw, "HTTPRoute", e.ns, "secure", "Accepted", "True", "Accepted")
	testenv.Eventually(t, 15*time.Second, func() error {
		a, err := httpsGet(httpsPort, "secure.gwl.test", "secure.gwl.test", "/x", nil)
		if err != nil {
			return err
		}
		if a.status != 200 || a.pod != "gwl-web-0" || a.subject != "secure.gwl.test/edge" {
			return fmt.Errorf("HTTPS listener: status %d pod %q certificate %q, want 200 from gwl-web-0 with the listener's certificate", a.status, a.pod, a.subject)
		}
		return nil
	})
	t.Logf("HTTPS listener route attached by a namespace label: %d reloads", d.reloads()-before)

	// TLS passthrough: the client sees the pod's certificate.
	expectPass := func(sni string) {
		t.Helper()
		testenv.Eventually(t, 15*time.Second, func() error {
			a, err := httpsGet(httpsPort, sni, sni, "/", nil)
			if err != nil {
				return err
			}
			if a.status != 200 || a.pod != "gwl-pass-0" || a.subject != "a.pass.gwl.test/pod" {
				return fmt.Errorf("SNI %s: status %d pod %q certificate %q, want 200 from gwl-pass-0 with the pod's certificate", sni, a.status, a.pod, a.subject)
			}
			return nil
		})
	}
	expectPass("a.pass.gwl.test")
	before = d.reloads()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		r, err := gw.GatewayV1().TLSRoutes(e.ns).Get(ctx, "pass", metav1.GetOptions{})
		if err != nil {
			return err
		}
		r.Spec.Hostnames = append(r.Spec.Hostnames, "b.pass.gwl.test")
		_, err = gw.GatewayV1().TLSRoutes(e.ns).Update(ctx, r, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	expectPass("b.pass.gwl.test")
	if n := d.reloads() - before; n != 0 {
		t.Errorf("a new TLSRoute hostname: %d reloads, want none", n)
	}
	// Names nobody passes through are terminated by HAProxy.
	expectSubject(t, httpsPort, "c.pass.gwl.test", generatedDefault)

	// TCP: the pod's answer comes back byte for byte.
	testenv.Eventually(t, 15*time.Second, func() error {
		out, err := rawTCPGet(tcpPort, "/tcp")
		if err != nil {
			return err
		}
		if !strings.Contains(out, "X-Pod: gwl-db-0") || !strings.Contains(out, "X-Seen-Uri: /tcp") {
			return fmt.Errorf("TCP listener: answer %q is not gwl-db-0's", out)
		}
		return nil
	})

	// Status, as the spec defines it.
	testenv.Eventually(t, 20*time.Second, func() error {
		g, err := gw.GatewayV1().Gateways(e.ns).Get(ctx, "edge", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := hasCondition(g.Status.Conditions, "Accepted", "True", "ListenersNotValid"); err != nil {
			return fmt.Errorf("Gateway: %w", err)
		}
		want := []struct {
			name           string
			attached       int32
			programmed     string
			resolved, kind string
		}{
			{"https", 1, "True", "ResolvedRefs", "HTTPRoute"},
			{"broken", 0, "False", "InvalidCertificateRef", "HTTPRoute"},
			{"foreign", 0, "False", "RefNotPermitted", "HTTPRoute"},
			{"pass", 1, "True", "ResolvedRefs", "TLSRoute"},
			{"tcp", 1, "True", "ResolvedRefs", "TCPRoute"},
		}
		if len(g.Status.Listeners) != len(want) {
			return fmt.Errorf("Gateway: %d listener statuses, want %d", len(g.Status.Listeners), len(want))
		}
		for i, w := range want {
			l := g.Status.Listeners[i]
			if string(l.Name) != w.name || l.AttachedRoutes != w.attached {
				return fmt.Errorf("listener %d: %s with %d routes, want %s with %d", i, l.Name, l.AttachedRoutes, w.name, w.attached)
			}
			if !slices.ContainsFunc(l.SupportedKinds, func(k gwv1.RouteGroupKind) bool { return string(k.Kind) == w.kind }) {
				return fmt.Errorf("listener %s: supportedKinds %v, want %s among them", l.Name, l.SupportedKinds, w.kind)
			}
			if err := hasCondition(l.Conditions, "Programmed", w.programmed, map[string]string{"True": "Programmed", "False": "Invalid"}[w.programmed]); err != nil {
				return fmt.Errorf("listener %s: %w", l.Name, err)
			}
			if err := hasCondition(l.Conditions, "ResolvedRefs", map[bool]string{true: "True", false: "False"}[w.resolved == "ResolvedRefs"], w.resolved); err != nil {
				return fmt.Errorf("listener %s: %w", l.Name, err)
			}
		}
		return nil
	})
	routeCondition(t, gw, "TLSRoute", e.ns, "pass", "Accepted", "True", "Accepted")
	routeCondition(t, gw, "TCPRoute", e.ns, "db", "ResolvedRefs", "True", "ResolvedRefs")
	e.event("Gateway", "edge", "InvalidCertificateRef")
	e.event("Gateway", "edge", "RefNotPermitted")

	// Listeners removed: the status follows, at the new generation.
	var gen int64
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		g, err := gw.GatewayV1().Gateways(e.ns).Get(ctx, "edge", metav1.GetOptions{})
		if err != nil {
			return err
		}
		g.Spec.Listeners = slices.DeleteFunc(g.Spec.Listeners, func(l gwv1.Listener) bool { return l.Name == "broken" || l.Name == "foreign" })
		g, err = gw.GatewayV1().Gateways(e.ns).Update(ctx, g, metav1.UpdateOptions{})
		if err == nil {
			gen = g.Generation
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, func() error {
		g, err := gw.GatewayV1().Gateways(e.ns).Get(ctx, "edge", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := hasCondition(g.Status.Conditions, "Accepted", "True", "Accepted"); err != nil {
			return fmt.Errorf("Gateway: %w", err)
		}
		for _, c := range g.Status.Conditions {
			if c.ObservedGeneration != gen {
				return fmt.Errorf("Gateway condition %s: observedGeneration %d, want %d", c.Type, c.ObservedGeneration, gen)
			}
		}
		if len(g.Status.Listeners) != 3 {
			return fmt.Errorf("Gateway: %d listener statuses, want 3", len(g.Status.Listeners))
		}
		return nil
	})
}

// rawTCPGet sends a bare HTTP/1.0 request over TCP and reads the answer.
func rawTCPGet(port int, path string) (string, error) {
	conn, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), 2*time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, "GET "+path+" HTTP/1.0\r\nHost: raw\r\n\r\n"); err != nil {
		return "", err
	}
	b, err := io.ReadAll(conn)
	return string(b), err
}

// routeCondition polls until our parent entry of a route has the condition.
func routeCondition(t *testing.T, gw gwclient.Interface, kind, ns, name, typ, status, reason string) {
	t.Helper()
	ctx := context.Background()
	testenv.Eventually(t, 20*time.Second, func() error {
		var parents []gwv1.RouteParentStatus
		switch kind {
		case "HTTPRoute":
			r, err := gw.GatewayV1().HTTPRoutes(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			parents = r.Status.Parents
		case "TLSRoute":
			r, err := gw.GatewayV1().TLSRoutes(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			parents = r.Status.Parents
		case "TCPRoute":
			r, err := gw.GatewayV1().TCPRoutes(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			parents = r.Status.Parents
		}
		if len(parents) != 1 {
			return fmt.Errorf("%s %s: %d parent entries, want 1", kind, name, len(parents))
		}
		if err := hasCondition(parents[0].Conditions, typ, status, reason); err != nil {
			return fmt.Errorf("%s %s: %w", kind, name, err)
		}
		return nil
	})
}

// labelNamespace sets a label on the test's namespace.
func (e *env) labelNamespace(key, value string) {
	e.t.Helper()
	ctx := context.Background()
	api := e.c.Admin.CoreV1().Namespaces()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ns, err := api.Get(ctx, e.ns, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if ns.Labels == nil {
			ns.Labels = map[string]string{}
		}
		ns.Labels[key] = value
		_, err = api.Update(ctx, ns, metav1.UpdateOptions{})
		return err
	}); err != nil {
		e.t.Fatal(err)
	}
}
