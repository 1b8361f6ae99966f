package e2e

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"os/exec"
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

// Tenant TLS tests: a hostile tenant (mallory) in one namespace, a victim
// in another, one daemon serving both. Pods in 198.18.43.0/24 ..
// 198.18.46.0/24.

// tenants makes the victim's env and mallory's, in two namespaces of the
// shared cluster.
func tenants(t *testing.T) (victim, mallory *env) {
	t.Helper()
	victim = newEnv(t)
	mallory = &env{t: t, c: victim.c, ns: victim.c.Namespace(t)}
	return victim, mallory
}

// tenantDaemon starts the daemon watching both tenants' namespaces, with
// its https frontend on port (a free one when 0) and its files in
// configDir (a new one when "").
func tenantDaemon(victim, mallory *env, port int, configDir string) (*daemon, int) {
	victim.t.Helper()
	if port == 0 {
		port = testenv.FreePort(victim.t)
	}
	args := []string{"--https-bind-port=" + strconv.Itoa(port), "--namespace-whitelist=" + mallory.ns}
	if configDir != "" {
		args = append(args, "--config-dir="+configDir)
	}
	d := victim.startDaemon(args...)
	if configDir != "" {
		d.configDir = configDir
	}
	return d, port
}

// issueRSA signs an RSA-2048 certificate for cn: HAProxy prefers ECDSA
// among certificates for the same name, so the victim uses RSA and
// mallory ECDSA, the case where a stray certificate would win.
func (ca *testCA) issueRSA(t testing.TB, cn, org string) leaf {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: randSerial(t), Subject: pkix.Name{CommonName: cn, Organization: []string{org}}, DNSNames: []string{cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(48 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	l := leaf{
		certPEM:  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:   pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}),
		notAfter: tmpl.NotAfter,
	}
	if l.pair, err = tls.X509KeyPair(l.certPEM, l.keyPEM); err != nil {
		t.Fatal(err)
	}
	return l
}

func serialOf(l leaf) string {
	c, err := x509.ParseCertificate(l.pair.Certificate[0])
	if err != nil {
		panic(err)
	}
	return c.SerialNumber.String()
}

// hostileBundle is a kubernetes.io/tls Secret's data that Go's crypto/tls
// accepts and HAProxy's OpenSSL 3 refuses to load.
func hostileBundle(t *testing.T, kind, host string) map[string][]byte {
	t.Helper()
	selfSigned := func(key any, pub any, alg x509.SignatureAlgorithm, parent *x509.Certificate, cn string, ca bool) *x509.Certificate {
		tmpl := &x509.Certificate{
			SerialNumber: randSerial(t), Subject: pkix.Name{CommonName: cn, Organization: []string{"mallory"}}, DNSNames: []string{cn},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(48 * time.Hour), SignatureAlgorithm: alg,
			IsCA: ca, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		}
		if parent == nil {
			parent = tmpl
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, key)
		if err != nil {
			t.Fatal(err)
		}
		c, _ := x509.ParseCertificate(der)
		return c
	}
	enc := func(cs ...*x509.Certificate) []byte {
		var out []byte
		for _, c := range cs {
			out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
		}
		return out
	}
	var cert, key []byte
	switch kind {
	case "garbage":
		l := selfSignedLeaf(t, host)
		cert = append(l.certPEM, "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"...)
		key = l.keyPEM
	case "rsa1024":
		k, err := rsa.GenerateKey(rand.Reader, 1024)
		if err != nil {
			t.Fatal(err)
		}
		cert = enc(selfSigned(k, &k.PublicKey, 0, nil, host, false))
		key = pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)})
	case "sha1":
		rootKey, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		root := selfSigned(rootKey, &rootKey.PublicKey, x509.SHA1WithRSA, nil, "mallory root", true)
		k := mustKey(t)
		cert = enc(selfSigned(rootKey, &k.PublicKey, x509.SHA1WithRSA, root, host, false), root)
		kder, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		key = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
	default:
		t.Fatalf("unknown bundle %q", kind)
	}
	if _, err := tls.X509KeyPair(cert, key); err != nil {
		t.Fatalf("%s: Go refuses it already, the test proves nothing: %v", kind, err)
	}
	return map[string][]byte{corev1.TLSCertKey: cert, corev1.TLSPrivateKeyKey: key}
}

func selfSignedLeaf(t *testing.T, host string) leaf { return selfSigned(t, host, "mallory") }

// tlsLoad sends HTTPS requests for host (SNI and Host) in a loop, each on
// a new connection, and counts those that fail, are not answered 200 by a
// pod whose name starts with pod, or are served another certificate than
// serial.
type tlsLoad struct {
	tally
	stop, done chan struct{}
}

func startTLSLoad(port int, host, pod, serial string) *tlsLoad {
	l := &tlsLoad{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for {
			select {
			case <-l.stop:
				return
			default:
			}
			l.sent.Add(1)
			a, err := httpsGet(port, host, host, "/", nil)
			why := ""
			switch {
			case err != nil:
				why = err.Error()
			case a.status != 200 || !strings.HasPrefix(a.pod, pod):
				why = fmt.Sprintf("status %d from %q", a.status, a.pod)
			case a.serial != serial:
				why = fmt.Sprintf("served certificate %s serial %s, want serial %s", a.subject, a.serial, serial)
			}
			if why != "" {
				l.fail(why)
			}
		}
	}()
	return l
}

// finish stops the loop and fails t unless every request succeeded.
func (l *tlsLoad) finish(t *testing.T, what string) {
	t.Helper()
	close(l.stop)
	<-l.done
	sent, failed := l.sent.Load(), l.failed.Load()
	t.Logf("%s: %d HTTPS requests, %d failed", what, sent, failed)
	if sent < 20 {
		t.Errorf("%s: only %d requests sent", what, sent)
	}
	if failed > 0 {
		t.Errorf("%s: %d of %d requests failed: %v", what, failed, sent, l.reasons())
	}
}

// more waits until the loop has sent n more requests: what was just
// applied is then served for a while under load.
func (l *tlsLoad) more(t *testing.T, n int64) {
	t.Helper()
	target := l.sent.Load() + n
	testenv.Eventually(t, 30*time.Second, func() error {
		if got := l.sent.Load(); got < target {
			return fmt.Errorf("%d of %d requests sent", got, target)
		}
		return nil
	})
}

// tlsIngressHosts creates an Ingress routing rules (host -> service:80,
// path /; a host mapped to "" gets a rule without paths) with the given
// spec.tls and annotations.
func (e *env) tlsIngressHosts(name string, rules map[string]string, tlsEntries []networkingv1.IngressTLS, annotations map[string]string) *networkingv1.Ingress {
	e.t.Helper()
	pt := networkingv1.PathTypePrefix
	ing := &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns, Annotations: annotations},
		Spec:       networkingv1.IngressSpec{TLS: tlsEntries},
	}
	for host, svc := range rules {
		r := networkingv1.IngressRule{Host: host}
		if svc != "" {
			r.HTTP = &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{
				Path: "/", PathType: &pt,
				Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{
					Name: svc, Port: networkingv1.ServiceBackendPort{Number: 80}}},
			}}}
		}
		ing.Spec.Rules = append(ing.Spec.Rules, r)
	}
	out, err := e.c.Admin.NetworkingV1().Ingresses(e.ns).Create(context.Background(), ing, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// TestTenantBadCertificate: mallory's Secrets that OpenSSL 3 refuses (a
// leaf followed by a garbage CERTIFICATE block, an RSA-1024 key, a
// SHA-1-signed chain) are refused with an Event on mallory's Ingress, cost
// only mallory's hosts their certificate, and stop nothing: the victim is
// served its certificate throughout, its new Ingress and endpoints are
// applied, a killed HAProxy restarts from the files on disk, and so does a
// restarted daemon.
func TestTenantBadCertificate(t *testing.T) {
	victim, mallory := tenants(t)
	ca := newTestCA(t, "Victim CA")
	vpod := victim.pods("tt-v", 43, 1)[0]
	mpod := mallory.pods("tt-m", 44, 1)[0]
	web := victim.service("web", nil, vpod)
	mallory.service("web", nil, mpod)
	shop := ca.issueRSA(t, "shop.victim.test", "victim")
	victim.tlsSecret("shop-tls", shop)
	victim.tlsIngress("shop", "shop.victim.test", "web", "shop-tls", nil)
	d, port := tenantDaemon(victim, mallory, 0, "")
	expectSubject(t, port, "shop.victim.test", "shop.victim.test/victim")

	load := startTLSLoad(port, "shop.victim.test", "tt-v-", serialOf(shop))
	reloads := d.reloads()
	for _, kind := range []string{"garbage", "rsa1024", "sha1"} {
		host := kind + ".mallory.test"
		mallory.tlsSecretData("evil-"+kind, corev1.SecretTypeTLS, hostileBundle(t, kind, host))
		mallory.tlsIngress("evil-"+kind, host, "web", "evil-"+kind, nil)
		ev := mallory.event("Ingress", "evil-"+kind, "InvalidSecret")
		t.Logf("%s: Event on mallory's Ingress: %s", kind, ev.Message)
		if strings.Contains(ev.Message, victim.ns) || strings.Contains(ev.Message, "/etc/") {
			t.Errorf("%s: the Event names something mallory does not own: %q", kind, ev.Message)
		}
		// Mallory's host is still routed, with the default certificate.
		expectSubject(t, port, host, generatedDefault)
		// (The Event may be written before the pass that carries it has
		// reached HAProxy: poll.)
		testenv.Eventually(t, 15*time.Second, func() error {
			if a, err := httpsGet(port, host, host, "/", nil); err != nil || a.status != 200 || a.pod != "tt-m-0" {
				return fmt.Errorf("%s: mallory's host over HTTPS: %+v %v", kind, a, err)
			}
			return nil
		})
	}
	// Changes keep applying: the victim's new Ingress with a certificate,
	// an endpoint change (a second victim pod).
	extra := ca.issueRSA(t, "new.victim.test", "victim")
	victim.tlsSecret("new-tls", extra)
	victim.tlsIngress("new", "new.victim.test", "web", "new-tls", nil)
	expectSubject(t, port, "new.victim.test", "new.victim.test/victim")
	vpod2 := testenv.StartPod(t, testenv.PodOptions{Name: "tt-v-1", IP: "198.18.43.11"})
	web.SetEndpoints(t, endpoints(vpod, vpod2)...)
	testenv.Eventually(t, 15*time.Second, func() error {
		seen := map[string]bool{}
		for range 10 {
			a, err := httpsGet(port, "new.victim.test", "new.victim.test", "/", nil)
			if err != nil {
				return err
			}
			seen[a.pod] = true
		}
		if !seen["tt-v-1"] {
			return fmt.Errorf("the new endpoint is not used: %v", seen)
		}
		return nil
	})
	load.finish(t, "victim during the attack")
	t.Logf("reloads during the attack: %d", d.reloads()-reloads)

	// The files on disk load as they are: HAProxy killed is started again
	// from them, with mallory's Secrets still there.
	if out, err := exec.Command("/usr/sbin/haproxy", "-c", "-f", filepath.Join(d.configDir, "haproxy.cfg")).CombinedOutput(); err != nil {
		t.Fatalf("the files on disk do not load: %v\n%s", err, out)
	}
	d.killHAProxy()
	expectSubject(t, port, "shop.victim.test", "shop.victim.test/victim")
	expectSubject(t, port, "new.victim.test", "new.victim.test/victim")
	// And so does a restarted daemon.
	d.stop()
	d2, _ := tenantDaemon(victim, mallory, port, d.configDir)
	expectSubject(t, port, "shop.victim.test", "shop.victim.test/victim")
	load = startTLSLoad(port, "shop.victim.test", "tt-v-", serialOf(shop))
	load.more(t, 50)
	load.finish(t, "victim after the restart")
	expectSubject(t, port, "garbage.mallory.test", generatedDefault)
	if strings.Contains(d2.out.String(), "PRIVATE KEY") {
		t.Error("a private key appears in the daemon's output")
	}
}

// TestTenantTLSHostsNotRouted: mallory claims the victim's host in
// spec.tls without routing it (an older Ingress whose rule for the host
// has no paths, a younger one naming it next to its own host), turns the
// HTTPS redirect off there, and adds a spec.tls entry without hosts whose
// ECDSA certificate names the victim's host. The victim keeps its RSA
// certificate and its redirect; mallory gets TLSHostNotRouted Events, and
// its entry without hosts serves only mallory's own host.
func TestTenantTLSHostsNotRouted(t *testing.T) {
	victim, mallory := tenants(t)
	ca := newTestCA(t, "Tenant CA")
	vpod := victim.pods("tr-v", 45, 1)[0]
	mpod := mallory.pods("tr-m", 46, 1)[0]
	victim.service("web", nil, vpod)
	mallory.service("web", nil, mpod)
	const shopHost, evilHost = "shop.victim.test", "evil.mallory.test"

	// Mallory was there first, with a path-less rule for the victim's
	// host: the oldest Ingress used to decide its certificate and
	// redirect.
	evilShop := ca.issue(t, shopHost, "mallory")
	mallory.tlsSecret("evil-shop", evilShop)
	off := map[string]string{"haproxy.org/ssl-redirect": "false"}
	squat := mallory.tlsIngressHosts("squat", map[string]string{shopHost: ""},
		[]networkingv1.IngressTLS{{Hosts: []string{shopHost}, SecretName: "evil-shop"}}, off)
	// Creation timestamps have a one-second resolution: the victim's
	// Ingress must be strictly younger.
	testenv.Eventually(t, 5*time.Second, func() error {
		if next := squat.CreationTimestamp.Add(time.Second); time.Now().Before(next) {
			return fmt.Errorf("waiting for the clock to pass %s", next.Format(time.RFC3339))
		}
		return nil
	})
	shop := ca.issueRSA(t, shopHost, "victim")
	victim.tlsSecret("shop-tls", shop)
	victim.tlsIngress("shop", shopHost, "web", "shop-tls", nil)
	d, port := tenantDaemon(victim, mallory, 0, "")
	expectSubject(t, port, shopHost, shopHost+"/victim")
	mallory.event("Ingress", "squat", "TLSHostNotRouted")
	expectRedirect(t, d, shopHost)

	load := startTLSLoad(port, shopHost, "tr-v-0", serialOf(shop))
	// Mallory, younger: its own host, the victim's host in spec.tls, and
	// an entry without hosts with an ECDSA certificate for both names.
	anyCert := ca.issueMulti(t, "mallory", evilHost, shopHost)
	mallory.tlsSecret("evil-any", anyCert)
	mallory.tlsIngressHosts("evil", map[string]string{evilHost: "web"}, []networkingv1.IngressTLS{
		{Hosts: []string{shopHost, "unrouted.mallory.test"}, SecretName: "evil-shop"},
		{SecretName: "evil-any"},
	}, off)
	ev := mallory.event("Ingress", "evil", "TLSHostNotRouted")
	t.Logf("Event on mallory's Ingress: %s", ev.Message)
	if strings.Contains(ev.Message, victim.ns) {
		t.Errorf("the Event names the victim's namespace: %q", ev.Message)
	}
	// The entry without hosts serves mallory's own routed host.
	expectSubject(t, port, evilHost, evilHost+"/mallory")
	load.more(t, 200)
	load.finish(t, "victim during the attack")
	expectRedirect(t, d, shopHost)
	if r, err := d.get(evilHost, "/"); err != nil || r.status != 200 {
		t.Fatalf("mallory's own host, redirect off: %d %v", r.status, err)
	}
	events, err := victim.c.Admin.CoreV1().Events(victim.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range events.Items {
		if ev.Type == corev1.EventTypeWarning && ev.InvolvedObject.Kind == "Ingress" {
			t.Errorf("Event on the victim's Ingress: %s %s", ev.Reason, ev.Message)
		}
	}
}

// expectRedirect asserts plain HTTP to host is redirected to HTTPS.
func expectRedirect(t *testing.T, d *daemon, host string) {
	t.Helper()
	r, err := d.get(host, "/x")
	if err != nil || r.status != 302 || r.header.Get("Location") != "https://"+host+"/x" {
		t.Fatalf("http %s: %d %q %v, want a 302 to https", host, r.status, r.header.Get("Location"), err)
	}
}

// issueMulti signs an ECDSA certificate for several names (CN the first).
func (ca *testCA) issueMulti(t testing.TB, org string, names ...string) leaf {
	t.Helper()
	key := mustKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: randSerial(t), Subject: pkix.Name{CommonName: names[0], Organization: []string{org}}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(48 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	return ca.sign(t, tmpl, key)
}
