package model

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// testChainCert is one certificate of a generated chain.
type testChainCert struct {
	cert *x509.Certificate
	key  crypto.Signer
}

var (
	rsaKeysOnce sync.Once
	rsa1024     *rsa.PrivateKey
	rsa2048     *rsa.PrivateKey
)

func testRSAKeys(t *testing.T) (small, big *rsa.PrivateKey) {
	t.Helper()
	rsaKeysOnce.Do(func() {
		rsa1024, _ = rsa.GenerateKey(rand.Reader, 1024)
		rsa2048, _ = rsa.GenerateKey(rand.Reader, 2048)
	})
	return rsa1024, rsa2048
}

// issueTestCert signs a certificate for cn with key, by parent (self-signed
// when nil) with alg (Go's default when 0).
func issueTestCert(t *testing.T, cn string, key crypto.Signer, parent *testChainCert, alg x509.SignatureAlgorithm, ca bool) *testChainCert {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn}, DNSNames: []string{cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		SignatureAlgorithm: alg, IsCA: ca, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
	}
	p, signer := tmpl, key
	if parent != nil {
		p, signer = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p, key.Public(), signer)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testChainCert{cert: c, key: key}
}

func chainPEM(certs ...*testChainCert) []byte {
	var out []byte
	for _, c := range certs {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.cert.Raw})...)
	}
	return out
}

func keyPEM(t *testing.T, key crypto.Signer) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

func ecKey(t *testing.T, c elliptic.Curve) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(c, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestParseCertificateLikeOpenSSL: what HAProxy's OpenSSL 3 refuses to load
// is refused by the model, with a reason naming the block; what it loads
// passes.
func TestParseCertificateLikeOpenSSL(t *testing.T) {
	small, big := testRSAKeys(t)
	p256 := ecKey(t, elliptic.P256())
	root := issueTestCert(t, "root", ecKey(t, elliptic.P384()), nil, 0, true)
	leaf := issueTestCert(t, "leaf.test", p256, root, 0, false)
	sha1Root := issueTestCert(t, "sha1 root", big, nil, x509.SHA1WithRSA, true)
	sha1Leaf := issueTestCert(t, "sha1.test", p256, sha1Root, 0, false)
	sha1Signed := issueTestCert(t, "signed-sha1.test", p256, &testChainCert{cert: sha1Root.cert, key: big}, x509.SHA1WithRSA, false)
	rsaSmall := issueTestCert(t, "rsa1024.test", small, nil, 0, false)
	smallCA := issueTestCert(t, "small ca", small, nil, 0, true)
	underSmallCA := issueTestCert(t, "under-small.test", p256, smallCA, 0, false)
	rsaOK := issueTestCert(t, "rsa2048.test", big, nil, 0, false)
	p224 := issueTestCert(t, "p224.test", ecKey(t, elliptic.P224()), nil, 0, false)
	_, edKey, _ := ed25519.GenerateKey(rand.Reader)
	ed := issueTestCert(t, "ed25519.test", edKey, nil, 0, false)
	garbage := []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")

	cases := []struct {
		name      string
		cert, key []byte
		wantErr   string // "" means accepted
		wantCerts int
	}{
		{"leaf and its root", chainPEM(leaf, root), keyPEM(t, p256), "", 2},
		{"leaf only", chainPEM(leaf), keyPEM(t, p256), "", 1},
		{"RSA-2048", chainPEM(rsaOK), keyPEM(t, big), "", 1},
		{"self-signed SHA-1 root in the chain", chainPEM(sha1Leaf, sha1Root), keyPEM(t, p256), "", 2},
		{"comment and other blocks around", append(append([]byte("subject=leaf\n"), chainPEM(leaf)...), "-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n"...), keyPEM(t, p256), "", 1},
		{"leaf + garbage CERTIFICATE block", append(chainPEM(leaf), garbage...), keyPEM(t, p256), "tls.crt certificate 2:", 0},
		{"garbage leaf", append(garbage, chainPEM(leaf)...), keyPEM(t, p256), "tls.crt certificate 1:", 0},
		{"RSA-1024 leaf", chainPEM(rsaSmall), keyPEM(t, small), "RSA key of 1024 bits", 0},
		{"RSA-1024 intermediate", chainPEM(underSmallCA, smallCA), keyPEM(t, p256), "certificate 2 (CN=small ca): RSA key of 1024 bits", 0},
		{"SHA-1 signed leaf", chainPEM(sha1Signed, sha1Root), keyPEM(t, p256), "signed with SHA1-RSA", 0},
		{"P-224 key", chainPEM(p224), keyPEM(t, p224.key), "ECDSA curve P-224", 0},
		{"Ed25519 key", chainPEM(ed), keyPEM(t, edKey), "Ed25519 keys are not supported", 0},
		{"key of another certificate", chainPEM(leaf), keyPEM(t, ecKey(t, elliptic.P256())), "not a matching certificate and key", 0},
		{"no certificate", []byte("nothing"), keyPEM(t, p256), "no PEM certificate", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := parseCertificate(c.cert, c.key)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(string(got.PEM), "BEGIN CERTIFICATE"); n != c.wantCerts {
				t.Errorf("%d certificates written, want %d", n, c.wantCerts)
			}
			// Whole markers only: base64 text can hold "CRL" by chance.
			if strings.Contains(string(got.PEM), "BEGIN X509 CRL") || strings.Contains(string(got.PEM), "subject=leaf") {
				t.Error("something else than the chain and the key is written")
			}
		})
	}
}

// TestIngressCertificateRefusedAtModel: an invalid certificate costs its
// own hosts their certificate and nothing else.
func TestIngressCertificateRefusedAtModel(t *testing.T) {
	small, _ := testRSAKeys(t)
	bad := issueTestCert(t, "bad.test", small, nil, 0, false)
	p256 := ecKey(t, elliptic.P256())
	good := issueTestCert(t, "good.test", p256, nil, 0, false)
	s := &Snapshot{
		Ingresses: []*networkingv1.Ingress{
			withTLS(ingress("mallory", "bad", 0, rule("bad.test", path("/", "Prefix", "web", 80))), "bad-tls", "bad.test"),
			withTLS(ingress("victim", "good", 1, rule("good.test", path("/", "Prefix", "web", 80))), "good-tls", "good.test"),
		},
		Services: []*corev1.Service{service("mallory", "web", svcPort("http", 80, 8080)), service("victim", "web", svcPort("http", 80, 8080))},
		Secrets: []*corev1.Secret{
			tlsSecret("mallory", "bad-tls", chainPEM(bad), keyPEM(t, small)),
			tlsSecret("victim", "good-tls", chainPEM(good), keyPEM(t, p256)),
		},
	}
	d := Build(s, Options{})
	if len(d.TLS.Certificates) != 1 || d.TLS.Certificates[0].Name != "victim_good-tls" ||
		strings.Join(d.TLS.Certificates[0].Hosts, ",") != "good.test" {
		t.Fatalf("certificates %+v, want only victim's", d.TLS.Certificates)
	}
	if got := d.TLS.Certificates[0].Ingresses; len(got) != 1 || got[0] != (ObjectRef{Kind: "Ingress", Namespace: "victim", Name: "good"}) {
		t.Errorf("certificate users %v", got)
	}
	var found bool
	for _, p := range d.Problems {
		if p.Object.Namespace == "victim" {
			t.Errorf("problem reported to the victim: %+v", p)
		}
		if p.Object == (ObjectRef{Kind: "Ingress", Namespace: "mallory", Name: "bad"}) && p.Reason == ReasonInvalidSecret &&
			strings.Contains(p.Message, "RSA key of 1024 bits") && strings.Contains(p.Message, "bad.test get the default certificate") {
			found = true
		}
	}
	if !found {
		t.Fatalf("no InvalidSecret problem on mallory/bad: %+v", d.Problems)
	}
}

func withTLS(ing *networkingv1.Ingress, secret string, hosts ...string) *networkingv1.Ingress {
	ing.Spec.TLS = append(ing.Spec.TLS, networkingv1.IngressTLS{Hosts: hosts, SecretName: secret})
	return ing
}

func tlsSecret(ns, name string, cert, key []byte) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: meta(ns, name, 0), Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: cert, corev1.TLSPrivateKeyKey: key}}
}
