package e2e

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"testing"
	"time"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// Passthrough tests use pods in 198.18.97.0/24.

// TestSSLPassthrough: a host with ssl-passthrough reaches a pod that
// terminates TLS itself, and the client sees the pod's own certificate;
// a host HAProxy terminates still works beside it, with the client's
// address; a second passthrough host for the same Service is served with
// no reload.
func TestSSLPassthrough(t *testing.T) {
	e := newEnv(t)
	podCA := newTestCA(t, "Vault pod CA")
	podCert := podCA.sign(t, &x509.Certificate{
		SerialNumber: randSerial(t), Subject: podSubject("vault.pt.test"),
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"vault.pt.test", "second.pt.test"},
	}, mustKey(t))
	vault, _ := startTLSPod(t, "vault-0", "198.18.97.10", podCert, nil)
	e.c.CreateService(t, testenv.ServiceSpec{Namespace: e.ns, Name: "vault", Endpoints: endpoints(vault),
		Ports: []testenv.ServicePort{{Name: "https", Port: 80, TargetPort: tlsPodPort}}})
	pt := map[string]string{"haproxy.org/ssl-passthrough": "true"}
	e.ingress("vault", pt, rule{host: "vault.pt.test", path: "/", service: "vault"})

	edgeCA := newTestCA(t, "Edge CA")
	web := feEchoPod(t, "web-0", 97, 20)
	e.service("web", nil, web.Pod)
	e.tlsSecret("web-tls", edgeCA.issue(t, "web.pt.test", "edge"))
	e.tlsIngress("web", "web.pt.test", "web", "web-tls", nil)
	d, port := e.tlsDaemon()

	expectPassthrough := func(sni string) {
		t.Helper()
		testenv.Eventually(t, 15*time.Second, func() error {
			a, err := httpsGet(port, sni, sni, "/", nil)
			if err != nil {
				return err
			}
			if a.status != 200 || a.pod != "vault-0" || a.subject != "vault.pt.test/pod" {
				return fmt.Errorf("SNI %s: status %d pod %q certificate %q, want 200 from vault-0 with the pod's certificate", sni, a.status, a.pod, a.subject)
			}
			return nil
		})
	}
	expectPassthrough("vault.pt.test")
	// HAProxy terminates the other host with the Ingress's certificate, and
	// the pod still sees the client's address, not the internal hop's.
	testenv.Eventually(t, 15*time.Second, func() error {
		a, err := httpsGet(port, "web.pt.test", "web.pt.test", "/", nil)
		if err != nil {
			return err
		}
		if a.status != 200 || a.pod != "web-0" || a.subject != "web.pt.test/edge" {
			return fmt.Errorf("terminated host: status %d pod %q certificate %q", a.status, a.pod, a.subject)
		}
		if xff := a.header.Get("X-Seen-X-Forwarded-For"); xff != "127.0.0.1" {
			return fmt.Errorf("terminated host: the pod saw X-Forwarded-For %q, want the client 127.0.0.1", xff)
		}
		return nil
	})
	// An unknown name gets HAProxy's default certificate, not the pod's.
	expectSubject(t, port, "nobody.pt.test", generatedDefault)

	before := d.reloads()
	e.ingress("vault-second", pt, rule{host: "second.pt.test", path: "/", service: "vault"})
	expectPassthrough("second.pt.test")
	if after := d.reloads(); after != before {
		t.Fatalf("a second passthrough host for an existing backend reloaded HAProxy: %d -> %d reloads", before, after)
	}
	expectPassthrough("vault.pt.test")

	// A reload moves the https frontend's Unix socket to the new worker:
	// both kinds of host keep working.
	e.annotate("Service", "web", map[string]string{"haproxy.org/load-balance": "leastconn"})
	testenv.Eventually(t, 15*time.Second, func() error {
		if n := d.reloads(); n <= before {
			return fmt.Errorf("reloads %d, waiting for more than %d", n, before)
		}
		return nil
	})
	expectPassthrough("second.pt.test")
	testenv.Eventually(t, 15*time.Second, func() error {
		a, err := httpsGet(port, "web.pt.test", "web.pt.test", "/", nil)
		if err != nil {
			return err
		}
		if a.status != 200 || a.pod != "web-0" || a.subject != "web.pt.test/edge" {
			return fmt.Errorf("terminated host after a reload: status %d pod %q certificate %q", a.status, a.pod, a.subject)
		}
		return nil
	})
}

func podSubject(cn string) pkix.Name { return pkix.Name{CommonName: cn, Organization: []string{"pod"}} }
