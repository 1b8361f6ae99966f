package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"k8s.io/client-go/util/retry"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// TLS tests use pods in 198.18.40.0/24 .. 198.18.49.0/24.

// testCA issues the certificates of one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t testing.TB, cn string) *testCA {
	t.Helper()
	key := mustKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: randSerial(t), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return &testCA{cert: c, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

func mustKey(t testing.TB) *ecdsa.PrivateKey {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func randSerial(t testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 100))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// leaf is an issued certificate with its key, in PEM and for crypto/tls.
type leaf struct {
	certPEM, keyPEM []byte
	pair            tls.Certificate
	notAfter        time.Time
}

// issue signs a certificate for cn (also its DNS name, or IP when cn is
// an address) with usage server and client.
func (ca *testCA) issue(t testing.TB, cn, org string) leaf {
	t.Helper()
	key := mustKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: randSerial(t), Subject: pkix.Name{CommonName: cn, Organization: []string{org}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(48 * time.Hour).Truncate(time.Second),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if ip := net.ParseIP(cn); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else {
		tmpl.DNSNames = []string{cn}
	}
	return ca.sign(t, tmpl, key)
}

// sign issues tmpl for key, signed by ca (a nil ca: self-signed).
func (ca *testCA) sign(t testing.TB, tmpl *x509.Certificate, key *ecdsa.PrivateKey) leaf {
	t.Helper()
	parent, signer := tmpl, any(key)
	if ca != nil {
		parent, signer = ca.cert, ca.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	l := leaf{
		certPEM:  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:   pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}),
		notAfter: tmpl.NotAfter,
	}
	if l.pair, err = tls.X509KeyPair(l.certPEM, l.keyPEM); err != nil {
		t.Fatal(err)
	}
	return l
}

// selfSigned is a certificate no test CA signed.
func selfSigned(t testing.TB, cn, org string) leaf { return (*testCA)(nil).issue(t, cn, org) }

// secret creates or replaces a Secret.
func (e *env) tlsSecretData(name string, typ corev1.SecretType, data map[string][]byte) {
	e.t.Helper()
	ctx := context.Background()
	api := e.c.Admin.CoreV1().Secrets(e.ns)
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns}, Type: typ, Data: data}
	cur, err := api.Get(ctx, name, metav1.GetOptions{})
	if err == nil {
		cur.Data = data
		_, err = api.Update(ctx, cur, metav1.UpdateOptions{})
	} else {
		_, err = api.Create(ctx, s, metav1.CreateOptions{})
	}
	if err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) tlsSecret(name string, l leaf) {
	e.t.Helper()
	e.tlsSecretData(name, corev1.SecretTypeTLS, map[string][]byte{corev1.TLSCertKey: l.certPEM, corev1.TLSPrivateKeyKey: l.keyPEM})
}

// tlsIngress creates an Ingress for host -> service:80 with spec.tls for
// host from secret (no spec.tls when secret is empty).
func (e *env) tlsIngress(name, host, service, secret string, annotations map[string]string) {
	e.t.Helper()
	pt := networkingv1.PathTypePrefix
	ing := &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns, Annotations: annotations},
		Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{{
			Host: host,
			IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{
				Path: "/", PathType: &pt,
				Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{
					Name: service, Port: networkingv1.ServiceBackendPort{Number: 80}}},
			}}}},
		}}},
	}
	if secret != "" {
		ing.Spec.TLS = []networkingv1.IngressTLS{{Hosts: []string{host}, SecretName: secret}}
	}
	if _, err := e.c.Admin.NetworkingV1().Ingresses(e.ns).Create(context.Background(), ing, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// setIngressAnnotations replaces an Ingress's annotations.
func (e *env) setIngressAnnotations(name string, annotations map[string]string) {
	e.t.Helper()
	ctx := context.Background()
	api := e.c.Admin.NetworkingV1().Ingresses(e.ns)
	// Retried on a fresh read when the daemon's status write came between.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ing, err := api.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		ing.Annotations = annotations
		_, err = api.Update(ctx, ing, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		e.t.Fatal(err)
	}
}

// tlsDaemon starts the daemon with an https frontend on a free port.
func (e *env) tlsDaemon(extra ...string) (*daemon, int) {
	e.t.Helper()
	port := testenv.FreePort(e.t)
	d := e.startDaemon(append([]string{"--https-bind-port=" + strconv.Itoa(port)}, extra...)...)
	return d, port
}

// tlsAnswer is what one HTTPS request saw.
type tlsAnswer struct {
	status  int
	subject string // served certificate's subject CN + "/" + O
	serial  string
	pod     string
	header  http.Header
}

// httpsGet requests https://host/path on port with SNI sni, presenting
// client when it has a certificate.
func httpsGet(port int, sni, host, path string, client *tls.Certificate) (tlsAnswer, error) {
	return httpsGetAt(fmt.Sprintf("127.0.0.1:%d", port), sni, host, path, client)
}

// httpsGetAt is httpsGet to hostport.
func httpsGetAt(hostport, sni, host, path string, client *tls.Certificate) (tlsAnswer, error) {
	cfg := &tls.Config{ServerName: sni, InsecureSkipVerify: true} //nolint:gosec // the test checks the certificate itself
	if client != nil {
		// Present it even when the server names other CAs: a client
		// with the wrong certificate must be refused, not just skipped.
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return client, nil }
	}
	c := &http.Client{
		Timeout:       5 * time.Second,
		Transport:     &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	req, err := http.NewRequest(http.MethodGet, "https://"+hostport+path, nil)
	if err != nil {
		return tlsAnswer{}, err
	}
	req.Host = host
	resp, err := c.Do(req)
	if err != nil {
		return tlsAnswer{}, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	a := tlsAnswer{status: resp.StatusCode, pod: resp.Header.Get("X-Pod"), header: resp.Header}
	if resp.TLS != nil && len(resp.TLS.PeerCertificates) > 0 {
		leaf := resp.TLS.PeerCertificates[0]
		a.subject = subjectOf(leaf)
		a.serial = leaf.SerialNumber.String()
	}
	return a, nil
}

func subjectOf(c *x509.Certificate) string {
	return c.Subject.CommonName + "/" + strings.Join(c.Subject.Organization, ",")
}

// servedSubject is the subject of the certificate served for sni.
func servedSubject(port int, sni string) (string, error) {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", fmt.Sprintf("127.0.0.1:%d", port),
		&tls.Config{ServerName: sni, InsecureSkipVerify: true}) //nolint:gosec // the test checks the certificate itself
	if err != nil {
		return "", err
	}
	defer conn.Close()
	return subjectOf(conn.ConnectionState().PeerCertificates[0]), nil
}

// expectSubject polls until sni is served the certificate with subject want.
func expectSubject(t testing.TB, port int, sni, want string) {
	t.Helper()
	testenv.Eventually(t, 15*time.Second, func() error {
		got, err := servedSubject(port, sni)
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("SNI %s: served %q, want %q", sni, got, want)
		}
		return nil
	})
}

const generatedDefault = "perimeter default certificate/"

// TestTLSFrontend: certificates by SNI, the default certificate, rotation
// without reload, a broken Secret, ssl-redirect.
func TestTLSFrontend(t *testing.T) {
	e := newEnv(t)
	ca := newTestCA(t, "TLS frontend CA")
	pods := e.pods("tls", 40, 2)
	e.service("web-a", nil, pods[0])
	e.service("web-b", nil, pods[1])
	e.service("web-plain", nil, pods[1])
	certA, certB := ca.issue(t, "a.tls.test", "first"), ca.issue(t, "b.tls.test", "first")
	e.tlsSecret("a-tls", certA)
	e.tlsSecret("b-tls", certB)
	e.tlsIngress("a", "a.tls.test", "web-a", "a-tls", nil)
	e.tlsIngress("b", "b.tls.test", "web-b", "b-tls", nil)
	e.tlsIngress("plain", "plain.tls.test", "web-plain", "", nil)
	d, port := e.tlsDaemon()

	// Two hosts, each with its own certificate, chosen by SNI; routing as
	// on the http frontend.
	expectSubject(t, port, "a.tls.test", "a.tls.test/first")
	expectSubject(t, port, "b.tls.test", "b.tls.test/first")
	for _, c := range []struct{ host, pod string }{{"a.tls.test", "tls-0"}, {"b.tls.test", "tls-1"}} {
		a, err := httpsGet(port, c.host, c.host, "/", nil)
		if err != nil || a.status != 200 || a.pod != c.pod {
			t.Fatalf("https %s: %+v %v, want 200 from %s", c.host, a, err, c.pod)
		}
	}
	// Unknown SNI (and none at all): the generated default certificate.
	expectSubject(t, port, "unknown.tls.test", generatedDefault)
	expectSubject(t, port, "", generatedDefault)
	if !strings.Contains(d.out.String(), "generated a self-signed default certificate") {
		t.Error("the generated default certificate is not logged as such")
	}

	// Rotation: the new certificate is served at once, the old one never
	// again, and HAProxy does not reload.
	before := d.reloads()
	rotated := ca.issue(t, "a.tls.test", "rotated")
	start := time.Now()
	e.tlsSecret("a-tls", rotated)
	var latency time.Duration
	testenv.Eventually(t, 10*time.Second, func() error {
		got, err := servedSubject(port, "a.tls.test")
		if err != nil {
			return err
		}
		if got != "a.tls.test/rotated" {
			return fmt.Errorf("served %q", got)
		}
		latency = time.Since(start)
		return nil
	})
	t.Logf("rotated certificate served %v after the Secret update", latency.Round(time.Millisecond))
	if latency > time.Second {
		t.Errorf("rotation took %v, want within a second", latency)
	}
	for i := 0; i < 20; i++ {
		if got, err := servedSubject(port, "a.tls.test"); err != nil || got != "a.tls.test/rotated" {
			t.Fatalf("after rotation, handshake %d served %q (%v)", i, got, err)
		}
	}
	if after := d.reloads(); after != before {
		t.Fatalf("certificate rotation reloaded HAProxy %d times, want 0", after-before)
	}

	// A broken Secret: Event on the Ingress, that host falls back to the
	// default certificate (and keeps routing), the others are unaffected.
	e.tlsSecretData("b-tls", corev1.SecretTypeTLS, map[string][]byte{
		corev1.TLSCertKey: certB.certPEM, corev1.TLSPrivateKeyKey: selfSigned(t, "x", "x").keyPEM,
	})
	ev := e.event("Ingress", "b", "InvalidSecret")
	t.Logf("Event: %s", ev.Message)
	expectSubject(t, port, "b.tls.test", generatedDefault)
	if a, err := httpsGet(port, "b.tls.test", "b.tls.test", "/", nil); err != nil || a.status != 200 || a.pod != "tls-1" {
		t.Fatalf("b.tls.test with the default certificate: %+v %v", a, err)
	}
	expectSubject(t, port, "a.tls.test", "a.tls.test/rotated")
	// Fixed again: its own certificate is back.
	e.tlsSecret("b-tls", certB)
	expectSubject(t, port, "b.tls.test", "b.tls.test/first")
	if after := d.reloads(); after != before {
		t.Fatalf("broken and fixed Secret reloaded HAProxy %d times, want 0", after-before)
	}

	// ssl-redirect: on by default for hosts with TLS (302), off for others.
	r, err := d.get("a.tls.test", "/x?q=1")
	if err != nil || r.status != 302 || r.header.Get("Location") != "https://a.tls.test/x?q=1" {
		t.Fatalf("http a.tls.test: %v %d %q, want 302 to https://a.tls.test/x?q=1", err, r.status, r.header.Get("Location"))
	}
	d.expect("plain.tls.test", "/", 200, "tls-1")
	// Code and port per Ingress, at run time.
	e.setIngressAnnotations("a", map[string]string{"haproxy.org/ssl-redirect-code": "308", "haproxy.org/ssl-redirect-port": strconv.Itoa(port)})
	want := fmt.Sprintf("https://a.tls.test:%d/x?q=1", port)
	testenv.Eventually(t, 10*time.Second, func() error {
		r, err := d.get("a.tls.test", "/x?q=1")
		if err != nil {
			return err
		}
		if r.status != 308 || r.header.Get("Location") != want {
			return fmt.Errorf("status %d Location %q, want 308 %s", r.status, r.header.Get("Location"), want)
		}
		return nil
	})
	// Following the redirect reaches the pod over HTTPS.
	if a, err := httpsGet(port, "a.tls.test", "a.tls.test", "/x?q=1", nil); err != nil || a.status != 200 || a.pod != "tls-0" ||
		a.header.Get("X-Pod") == "" {
		t.Fatalf("https after redirect: %+v %v", a, err)
	}
	// Turned off on the Ingress; turned on for a host without TLS.
	e.setIngressAnnotations("a", map[string]string{"haproxy.org/ssl-redirect": "false"})
	d.expect("a.tls.test", "/", 200, "tls-0")
	e.deleteIngress("plain")
	e.tlsIngress("plain2", "plain.tls.test", "web-plain", "", map[string]string{"haproxy.org/ssl-redirect": "true", "haproxy.org/ssl-redirect-code": "301"})
	testenv.Eventually(t, 10*time.Second, func() error {
		r, err := d.get("plain.tls.test", "/")
		if err != nil {
			return err
		}
		if r.status != 301 || r.header.Get("Location") != "https://plain.tls.test/" {
			return fmt.Errorf("status %d Location %q", r.status, r.header.Get("Location"))
		}
		return nil
	})
	t.Logf("reloads since the rotation: %d (the Ingress replaced at the end adds a backend)", d.reloads()-before)

	// The private keys are files of mode 0600, and not in the logs.
	if strings.Contains(d.out.String(), "PRIVATE KEY") {
		t.Error("a private key appears in the daemon's output")
	}
	checkKeyFiles(t, d)
}

// checkKeyFiles asserts every PEM file under the certs directory is 0600.
func checkKeyFiles(t *testing.T, d *daemon) {
	t.Helper()
	n := 0
	err := filepath.WalkDir(filepath.Join(d.configDir, "certs"), func(p string, de os.DirEntry, err error) error {
		if err != nil || de.IsDir() || !strings.HasSuffix(p, ".pem") {
			return err
		}
		n++
		fi, err := de.Info()
		if err != nil {
			return err
		}
		if fi.Mode().Perm() != 0o600 {
			return fmt.Errorf("%s has mode %v, want 0600", p, fi.Mode().Perm())
		}
		return nil
	})
	if err != nil || n == 0 {
		t.Fatalf("certificate files: %v (%d checked)", err, n)
	}
}

// TestTLSClientAuth: client-ca at the frontend, required then optional.
func TestTLSClientAuth(t *testing.T) {
	e := newEnv(t)
	ca := newTestCA(t, "Client CA")
	pods := e.pods("tlsca", 41, 1)
	e.service("web", nil, pods[0])
	e.tlsSecret("site-tls", ca.issue(t, "auth.tls.test", "site"))
	e.tlsSecretData("client-ca", corev1.SecretTypeOpaque, map[string][]byte{"ca.crt": ca.pem})
	e.configMap("perimeter", map[string]string{"client-ca": e.ns + "/client-ca"})
	e.tlsIngress("auth", "auth.tls.test", "web", "site-tls", nil)
	_, port := e.tlsDaemon("--configmap=" + e.ns + "/perimeter")

	good := ca.issue(t, "good client", "clients")
	bad := selfSigned(t, "bad client", "mallory")
	testenv.Eventually(t, 15*time.Second, func() error {
		a, err := httpsGet(port, "auth.tls.test", "auth.tls.test", "/", &good.pair)
		if err != nil {
			return err
		}
		if a.status != 200 || a.pod != "tlsca-0" {
			return fmt.Errorf("good client: %+v", a)
		}
		return nil
	})
	for name, cert := range map[string]*tls.Certificate{"bad client": &bad.pair, "no client certificate": nil} {
		if a, err := httpsGet(port, "auth.tls.test", "auth.tls.test", "/", cert); err == nil {
			t.Fatalf("%s accepted: %+v", name, a)
		} else {
			t.Logf("%s refused: %v", name, err)
		}
	}

	// Optional: no certificate passes, a bad one is still refused.
	e.configMap("perimeter", map[string]string{"client-ca": e.ns + "/client-ca", "client-crt-optional": "true"})
	testenv.Eventually(t, 15*time.Second, func() error {
		a, err := httpsGet(port, "auth.tls.test", "auth.tls.test", "/", nil)
		if err != nil {
			return err
		}
		if a.status != 200 {
			return fmt.Errorf("no certificate with client-crt-optional: %+v", a)
		}
		return nil
	})
	if a, err := httpsGet(port, "auth.tls.test", "auth.tls.test", "/", &bad.pair); err == nil && a.status == 200 {
		t.Fatalf("bad client accepted with client-crt-optional: %+v", a)
	}
	if a, err := httpsGet(port, "auth.tls.test", "auth.tls.test", "/", &good.pair); err != nil || a.status != 200 {
		t.Fatalf("good client with client-crt-optional: %+v %v", a, err)
	}
}

// tlsPodPort is where TLS pods listen (their plain-HTTP server stays on 8080).
const tlsPodPort = 8443

// startTLSPod runs a pod with a second server on tlsPodPort that speaks TLS
// with cert and, when clientCAs is set, requires a client certificate they
// signed.
func startTLSPod(t *testing.T, name, ip string, cert leaf, clientCAs *x509.CertPool) (*testenv.Pod, string) {
	t.Helper()
	p := testenv.StartPod(t, testenv.PodOptions{Name: name, IP: ip})
	addr := net.JoinHostPort(ip, strconv.Itoa(tlsPodPort))
	cfg := &tls.Config{Certificates: []tls.Certificate{cert.pair}, MinVersion: tls.VersionTLS12}
	if clientCAs != nil {
		cfg.ClientCAs, cfg.ClientAuth = clientCAs, tls.RequireAndVerifyClientCert
	}
	var ln net.Listener
	if err := p.Netns.Do(func() error {
		var err error
		ln, err = net.Listen("tcp4", addr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		ReadHeaderTimeout: 5 * time.Second,
		TLSConfig:         cfg,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Pod", name)
			client := ""
			if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
				client = r.TLS.PeerCertificates[0].Subject.CommonName
			}
			w.Header().Set("X-Client-Cert", client)
			w.Header().Set("X-Proto", r.Proto)
			_, _ = io.WriteString(w, name)
		}),
	}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })
	return p, addr
}

// TestTLSBackend: a pod reached over mutual TLS (server-ca, server-crt),
// which refuses connections without the client certificate.
func TestTLSBackend(t *testing.T) {
	e := newEnv(t)
	ca := newTestCA(t, "Pod CA")
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	const ip = "198.18.42.10"
	pod, podAddr := startTLSPod(t, "mtls-0", ip, ca.issue(t, ip, "pod"), pool)
	clientCert := ca.issue(t, "perimeter edge", "edge")

	// Without the client certificate the pod refuses the connection.
	testenv.Eventually(t, 10*time.Second, func() error {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", podAddr, &tls.Config{RootCAs: pool})
		if err != nil {
			return nil // refused during the handshake
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
		_, _ = io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		if _, err := conn.Read(make([]byte, 1)); err != nil {
			return nil // TLS 1.3: the refusal comes with the first read
		}
		return errors.New("pod answered a client without certificate")
	})

	e.tlsSecretData("pod-ca", corev1.SecretTypeOpaque, map[string][]byte{"ca.crt": ca.pem})
	e.tlsSecret("edge-client", clientCert)
	e.c.CreateService(t, testenv.ServiceSpec{Namespace: e.ns, Name: "secure", Endpoints: endpoints(pod),
		Ports: []testenv.ServicePort{{Name: "https", Port: 80, TargetPort: tlsPodPort}}})
	e.annotate("Service", "secure", map[string]string{
		"haproxy.org/server-ca":  "pod-ca",
		"haproxy.org/server-crt": "edge-client",
	})
	e.ingress("secure", nil, rule{host: "secure.tls.test", path: "/", service: "secure"})
	d, _ := e.tlsDaemon()
	testenv.Eventually(t, 15*time.Second, func() error {
		r, err := d.get("secure.tls.test", "/")
		if err != nil {
			return err
		}
		if r.status != 200 || r.header.Get("X-Pod") != "mtls-0" || r.header.Get("X-Client-Cert") != "perimeter edge" {
			return fmt.Errorf("status %d pod %q client %q body %q", r.status, r.header.Get("X-Pod"), r.header.Get("X-Client-Cert"), r.body)
		}
		return nil
	})
	// HTTP/2 to the pod (ALPN h2) with server-proto.
	e.annotate("Service", "secure", map[string]string{"haproxy.org/server-proto": "h2"})
	testenv.Eventually(t, 15*time.Second, func() error {
		r, err := d.get("secure.tls.test", "/")
		if err != nil {
			return err
		}
		if r.status != 200 || r.header.Get("X-Proto") != "HTTP/2.0" {
			return fmt.Errorf("status %d proto %q", r.status, r.header.Get("X-Proto"))
		}
		return nil
	})
	// Without server-crt HAProxy has no client certificate: the pod
	// refuses it and the request fails.
	ctx := context.Background()
	s, err := e.c.Admin.CoreV1().Services(e.ns).Get(ctx, "secure", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	delete(s.Annotations, "haproxy.org/server-crt")
	if _, err := e.c.Admin.CoreV1().Services(e.ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 15*time.Second, func() error {
		r, err := d.get("secure.tls.test", "/")
		if err != nil {
			return err
		}
		// 502 when the pod aborts the handshake, 503 once the health
		// check has taken it out: either way the pod refused HAProxy.
		if r.status != 502 && r.status != 503 {
			return fmt.Errorf("without the client certificate: status %d, want 502 or 503", r.status)
		}
		return nil
	})
}
