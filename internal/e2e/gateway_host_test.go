package e2e

import (
	"context"
	"crypto/x509"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// TestGatewayWildcardHostnames: on real HAProxy, a Gateway API wildcard
// hostname matches one or more leading labels, the most specific match
// wins (exact host, then the longest wildcard suffix, falling through to
// a shorter one when no path matches), the route's hostnames are
// intersected with its listener's, and an Ingress wildcard still matches
// exactly one label; then a new wildcard whose suffix has a label count
// served already is a map change without a reload.
func TestGatewayWildcardHostnames(t *testing.T) {
	e := newEnv(t)
	v1 := e.pods("gwh-v1", 231, 1)
	v2 := e.pods("gwh-v2", 232, 1)
	v3 := e.pods("gwh-v3", 233, 1)
	e.service("v1", nil, v1...)
	e.service("v2", nil, v2...)
	e.service("v3", nil, v3...)
	org := gwv1.Hostname("*.example.org")
	// The helper's listener "http" is for "*.example.com".
	d, gw, _, _ := e.gatewayDaemon(gwv1.Listener{Name: "org", Protocol: gwv1.HTTPProtocolType, Port: 80, Hostname: &org})
	ctx := context.Background()
	route := func(name string, parent gwv1.ParentReference, hosts []gwv1.Hostname, path, svc string) {
		t.Helper()
		r := &gwv1.HTTPRoute{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
			Spec: gwv1.HTTPRouteSpec{
				CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{parent}},
				Hostnames:       hosts,
				Rules: []gwv1.HTTPRouteRule{{
					Matches: []gwv1.HTTPRouteMatch{{Path: &gwv1.HTTPPathMatch{Type: ptrTo(gwv1.PathMatchPathPrefix), Value: ptrTo(path)}}},
					BackendRefs: []gwv1.HTTPBackendRef{{BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{
						Name: gwv1.ObjectName(svc), Port: ptrTo(gwv1.PortNumber(80))}}}},
				}},
			},
		}
		if _, err := gw.GatewayV1().HTTPRoutes(e.ns).Create(ctx, r, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	edge := gwv1.ParentReference{Name: "edge"}
	section := func(s string) gwv1.ParentReference {
		return gwv1.ParentReference{Name: "edge", SectionName: ptrTo(gwv1.SectionName(s))}
	}
	// No hostnames: the listeners' own, "*.example.com" and "*.example.org".
	route("listeners", edge, nil, "/", "v1")
	// A narrower wildcard within the listener's, and a specific host.
	route("deep", section("http"), []gwv1.Hostname{"*.deep.example.com"}, "/deep", "v2")
	route("exact", edge, []gwv1.Hostname{"foo.example.com", "foo.example.net"}, "/", "v3")
	// A wider route wildcard takes the listener's.
	route("wide", section("org"), []gwv1.Hostname{"*.org"}, "/wide", "v2")
	e.ingress("one-label", nil, rule{host: "*.ing.example.net", path: "/", service: "v3"})

	for _, r := range []matchRequest{
		{host: "a.example.com", path: "/", pod: "gwh-v1-0"},
		{host: "a.b.c.example.com", path: "/", pod: "gwh-v1-0"},
		{host: "example.com", path: "/", pod: ""},
		// The exact host beats the wildcard; foo.example.net is in no
		// listener's hostname.
		{host: "foo.example.com", path: "/", pod: "gwh-v3-0"},
		{host: "foo.example.net", path: "/", pod: ""},
		// The longest wildcard suffix first, then a shorter one.
		{host: "x.deep.example.com", path: "/deep", pod: "gwh-v2-0"},
		{host: "x.y.deep.example.com", path: "/deep/z", pod: "gwh-v2-0"},
		{host: "x.y.deep.example.com", path: "/other", pod: "gwh-v1-0"},
		{host: "deep.example.com", path: "/deep", pod: "gwh-v1-0"},
		// "*.org" on a "*.example.org" listener is "*.example.org".
		{host: "a.b.example.org", path: "/wide", pod: "gwh-v2-0"},
		{host: "a.other.org", path: "/wide", pod: ""},
		// An Ingress wildcard: exactly one label.
		{host: "a.ing.example.net", path: "/", pod: "gwh-v3-0"},
		{host: "a.b.ing.example.net", path: "/", pod: ""},
	} {
		d.expectMatch(t, r)
	}

	// A new wildcard with a suffix of three labels, like
	// "deep.example.com": map entries only.
	before := d.reloads()
	updateRoute(t, gw, e.ns, "deep", func(r *gwv1.HTTPRoute) { r.Spec.Hostnames = append(r.Spec.Hostnames, "*.more.example.com") })
	d.expectMatch(t, matchRequest{host: "a.b.more.example.com", path: "/deep", pod: "gwh-v2-0"})
	d.expectMatch(t, matchRequest{host: "a.b.more.example.com", path: "/", pod: "gwh-v1-0"})
	if n := d.reloads(); n != before {
		t.Errorf("new wildcard hostname: %d reloads, want none", n-before)
	}
}

// TestGatewayWildcardPassthrough: a TLSRoute wildcard hostname, narrowed to
// its listener's, passes TLS through for one or more labels in place of
// "*", as the conformance test TLSRouteHostnameIntersection asks; other
// names are terminated by HAProxy.
func TestGatewayWildcardPassthrough(t *testing.T) {
	e := newEnv(t)
	gw := e.gatewayClient()
	ctx := context.Background()
	ca := newTestCA(t, "Pass pod CA")
	cert := ca.sign(t, &x509.Certificate{
		SerialNumber: randSerial(t), Subject: podSubject("vault.gwh.test"),
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"*.gwh.test"},
	}, mustKey(t))
	pass, _ := startTLSPod(t, "gwh-pass-0", "198.18.234.10", cert, nil)
	e.c.CreateService(t, testenv.ServiceSpec{Namespace: e.ns, Name: "pass", Endpoints: endpoints(pass),
		Ports: []testenv.ServicePort{{Name: "https", Port: 443, TargetPort: tlsPodPort}}})
	controller, class := e.gatewayClass(gw)
	_, httpsPort := e.tlsDaemon("--gateway-controller=" + controller)
	listener := gwv1.Hostname("*.vault.gwh.test")
	if _, err := gw.GatewayV1().Gateways(e.ns).Create(ctx, &gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Name: "edge", Namespace: e.ns},
		Spec: gwv1.GatewaySpec{
			GatewayClassName: gwv1.ObjectName(class),
			Listeners: []gwv1.Listener{{Name: "pass", Protocol: gwv1.TLSProtocolType, Port: 443, Hostname: &listener,
				TLS: &gwv1.ListenerTLSConfig{Mode: ptrTo(gwv1.TLSModePassthrough)}}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// "*.test" within the listener's "*.vault.gwh.test" is the listener's.
	if _, err := gw.GatewayV1().TLSRoutes(e.ns).Create(ctx, &gwv1.TLSRoute{
		ObjectMeta: metav1.ObjectMeta{Name: "pass", Namespace: e.ns},
		Spec: gwv1.TLSRouteSpec{
			CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "edge"}}},
			Hostnames:       []gwv1.Hostname{"*.test"},
			Rules: []gwv1.TLSRouteRule{{BackendRefs: []gwv1.BackendRef{{BackendObjectReference: gwv1.BackendObjectReference{
				Name: "pass", Port: ptrTo(gwv1.PortNumber(443))}}}}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, sni := range []string{"a.vault.gwh.test", "a.b.vault.gwh.test"} {
		testenv.Eventually(t, 15*time.Second, func() error {
			a, err := httpsGet(httpsPort, sni, sni, "/", nil)
			if err != nil {
				return err
			}
			if a.status != 200 || a.pod != "gwh-pass-0" || a.subject != "vault.gwh.test/pod" {
				return fmt.Errorf("SNI %s: status %d pod %q certificate %q, want 200 from gwh-pass-0 with the pod's certificate", sni, a.status, a.pod, a.subject)
			}
			return nil
		})
	}
	expectSubject(t, httpsPort, "vault.gwh.test", generatedDefault)
	expectSubject(t, httpsPort, "a.other.gwh.test", generatedDefault)
}
