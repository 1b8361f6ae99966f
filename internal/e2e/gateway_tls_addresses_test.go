package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// Pods in 198.18.194.0/24.

// TestGatewayTLSAddresses: Gateways with TLS listeners get addresses of
// their own from --gateway-addresses. Two Gateways whose TLS listeners
// take the same hostname ("abc") each pass it through to their own
// route's pod on their own address; a name only the second Gateway's
// routes take is closed on the first's address, as the Gateway API asks,
// and the edge's own address passes neither through. A third Gateway
// shares its TLS port between a TLS and an HTTPS listener: the one's
// hostname is passed through, the other's terminated by HAProxy with the
// listener's certificate. status.addresses names each Gateway's address,
// and a new TLSRoute hostname is a map change (no reload).
func TestGatewayTLSAddresses(t *testing.T) {
	e := newEnv(t)
	gw := e.gatewayClient()
	ctx := context.Background()
	const domain = "tlsaddr.test"
	podCA := newTestCA(t, "TLS address pod CA")
	tlsPod := func(name, ip string) *testenv.Pod {
		cert := podCA.sign(t, &x509.Certificate{
			SerialNumber: randSerial(t), Subject: podSubject(name),
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			DNSNames: []string{"*." + domain},
		}, mustKey(t))
		p, _ := startTLSPod(t, name, ip, cert, nil)
		e.c.CreateService(t, testenv.ServiceSpec{Namespace: e.ns, Name: name, Endpoints: endpoints(p),
			Ports: []testenv.ServicePort{{Name: "https", Port: 443, TargetPort: tlsPodPort}}})
		return p
	}
	tlsPod("one", "198.18.194.10")
	tlsPod("two", "198.18.194.11")
	web := feEchoPod(t, "tlsaddr-web-0", 194, 20)
	e.service("web", nil, web.Pod)
	edgeCA := newTestCA(t, "Edge CA")
	e.tlsSecret("web-tls", edgeCA.issue(t, "web."+domain, "edge"))

	controller, class := e.gatewayClass(gw)
	pool := []string{"127.90.1.1", "127.90.1.2", "127.90.1.3"}
	d, httpsPort := e.tlsDaemon("--gateway-controller="+controller, "--gateway-addresses="+pool[0]+"-"+pool[2])
	host := func(h string) *gwv1.Hostname { x := gwv1.Hostname(h); return &x }
	passthrough := func(name, hostname string) gwv1.Listener {
		l := gwv1.Listener{Name: gwv1.SectionName(name), Protocol: gwv1.TLSProtocolType, Port: 443,
			TLS: &gwv1.ListenerTLSConfig{Mode: ptrTo(gwv1.TLSModePassthrough)}}
		if hostname != "" {
			l.Hostname = host(hostname)
		}
		return l
	}
	gateway := func(name string, ls ...gwv1.Listener) {
		t.Helper()
		if _, err := gw.GatewayV1().Gateways(e.ns).Create(ctx, &gwv1.Gateway{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
			Spec:       gwv1.GatewaySpec{GatewayClassName: gwv1.ObjectName(class), Listeners: ls},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	tlsRoute := func(name, parent, svc string, hostnames ...gwv1.Hostname) {
		t.Helper()
		if _, err := gw.GatewayV1().TLSRoutes(e.ns).Create(ctx, &gwv1.TLSRoute{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
			Spec: gwv1.TLSRouteSpec{
				CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: gwv1.ObjectName(parent)}}},
				Hostnames:       hostnames,
				Rules: []gwv1.TLSRouteRule{{BackendRefs: []gwv1.BackendRef{{BackendObjectReference: gwv1.BackendObjectReference{
					Name: gwv1.ObjectName(svc), Port: ptrTo(gwv1.PortNumber(443))}}}}},
			},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Created one after the other, so that they get the pool in order.
	gateway("exact", passthrough("tls", "abc."+domain))
	testenv.Eventually(t, 20*time.Second, func() error { return gatewayAddress(gw, e.ns, "exact", pool[0]) })
	gateway("wild", passthrough("tls", "*."+domain))
	testenv.Eventually(t, 20*time.Second, func() error { return gatewayAddress(gw, e.ns, "wild", pool[1]) })
	gateway("mixed", passthrough("tls", "pass."+domain), gwv1.Listener{Name: "https", Protocol: gwv1.HTTPSProtocolType, Port: 443,
		Hostname: host("web." + domain), TLS: &gwv1.ListenerTLSConfig{CertificateRefs: []gwv1.SecretObjectReference{{Name: "web-tls"}}}})
	testenv.Eventually(t, 20*time.Second, func() error { return gatewayAddress(gw, e.ns, "mixed", pool[2]) })
	tlsRoute("on-exact", "exact", "one", gwv1.Hostname("*."+domain))
	tlsRoute("on-wild", "wild", "two", gwv1.Hostname("abc."+domain), gwv1.Hostname("other."+domain))
	tlsRoute("on-mixed", "mixed", "one", gwv1.Hostname("pass."+domain))
	if _, err := gw.GatewayV1().HTTPRoutes(e.ns).Create(ctx, &gwv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: e.ns},
		Spec: gwv1.HTTPRouteSpec{
			CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "mixed", SectionName: ptrTo(gwv1.SectionName("https"))}}},
			Rules: []gwv1.HTTPRouteRule{{BackendRefs: []gwv1.HTTPBackendRef{{BackendRef: gwv1.BackendRef{
				BackendObjectReference: gwv1.BackendObjectReference{Name: "web", Port: ptrTo(gwv1.PortNumber(80))}}}}}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	at := func(addr string) string { return net.JoinHostPort(addr, strconv.Itoa(httpsPort)) }
	// served: sni on addr reaches pod, with the certificate of subject.
	served := func(addr, sni, pod, subject string) {
		t.Helper()
		testenv.Eventually(t, 20*time.Second, func() error {
			a, err := httpsGetAt(at(addr), sni, sni, "/", nil)
			if err != nil {
				return err
			}
			if a.status != 200 || a.pod != pod || a.subject != subject {
				return fmt.Errorf("SNI %s on %s: status %d from %q with certificate %q, want 200 from %q with %q",
					sni, addr, a.status, a.pod, a.subject, pod, subject)
			}
			return nil
		})
	}
	served(pool[0], "abc."+domain, "one", "one/pod")
	served(pool[1], "abc."+domain, "two", "two/pod")
	served(pool[1], "other."+domain, "two", "two/pod")
	// "other" is no name of the exact Gateway's listener: closed there.
	closed := func(addr, sni string) {
		t.Helper()
		testenv.Eventually(t, 20*time.Second, func() error { return tlsRefused(at(addr), sni) })
	}
	closed(pool[0], "other."+domain)
	closed(pool[1], "nowhere."+domain)
	// The shared socket: passed through, and terminated.
	served(pool[2], "pass."+domain, "one", "one/pod")
	served(pool[2], "web."+domain, "tlsaddr-web-0", "web."+domain+"/edge")
	// The edge's own address passes none of them through.
	expectSubject(t, httpsPort, "abc."+domain, generatedDefault)

	before := d.reloads()
	routes := gw.GatewayV1().TLSRoutes(e.ns)
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		r, err := routes.Get(ctx, "on-wild", metav1.GetOptions{})
		if err != nil {
			return err
		}
		r.Spec.Hostnames = append(r.Spec.Hostnames, gwv1.Hostname("new."+domain))
		_, err = routes.Update(ctx, r, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	served(pool[1], "new."+domain, "two", "two/pod")
	closed(pool[0], "new."+domain)
	if n := d.reloads(); n != before {
		t.Errorf("a new TLSRoute hostname: %d reloads, want none", n-before)
	}
}

// tlsRefused checks that a TLS handshake with sni at hostport is closed
// by the server (EOF or reset), not completed nor timed out.
func tlsRefused(hostport, sni string) error {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", hostport,
		&tls.Config{ServerName: sni, InsecureSkipVerify: true}) //nolint:gosec // no certificate is expected
	if err == nil {
		subject := subjectOf(conn.ConnectionState().PeerCertificates[0])
		conn.Close()
		return fmt.Errorf("SNI %s on %s: handshake completed with %q, want the connection closed", sni, hostport, subject)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
		return nil
	}
	return fmt.Errorf("SNI %s on %s: %v, want the connection closed", sni, hostport, err)
}
