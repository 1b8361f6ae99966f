package haproxy

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// badBundle makes certificate bundles that Go parses and OpenSSL 3 (as
// HAProxy 2.6 runs it) refuses to load.
func badBundle(t *testing.T, kind string) []byte {
	t.Helper()
	issue := func(cn string, key crypto.Signer, parent *x509.Certificate, parentKey crypto.Signer, alg x509.SignatureAlgorithm, ca bool) *x509.Certificate {
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn}, DNSNames: []string{cn},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), SignatureAlgorithm: alg,
			IsCA: ca, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		}
		if parent == nil {
			parent, parentKey = tmpl, key
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), parentKey)
		if err != nil {
			t.Fatal(err)
		}
		c, _ := x509.ParseCertificate(der)
		return c
	}
	enc := func(key crypto.Signer, certs ...*x509.Certificate) []byte {
		var out []byte
		for _, c := range certs {
			out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
		}
		kder, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		return append(out, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})...)
	}
	switch kind {
	case "garbage":
		b := testPEM(t, "mallory.example.com")
		i := strings.Index(string(b), "-----BEGIN PRIVATE KEY")
		return []byte(string(b[:i]) + "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n" + string(b[i:]))
	case "rsa1024":
		k := testRSA(t, 1024)
		return enc(k, issue("mallory.example.com", k, nil, nil, 0, false))
	case "sha1":
		rootKey := testRSA(t, 2048)
		root := issue("sha1 root", rootKey, nil, nil, x509.SHA1WithRSA, true)
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return enc(k, issue("mallory.example.com", k, root, rootKey, x509.SHA1WithRSA, false), root)
	}
	t.Fatalf("unknown bundle %q", kind)
	return nil
}

var (
	rsaMu   sync.Mutex
	rsaKeys = map[int]*rsa.PrivateKey{}
)

func testRSA(t *testing.T, bits int) *rsa.PrivateKey {
	t.Helper()
	rsaMu.Lock()
	defer rsaMu.Unlock()
	if k := rsaKeys[bits]; k != nil {
		return k
	}
	k, err := rsa.GenerateKey(rand.Reader, bits)
	if err != nil {
		t.Fatal(err)
	}
	rsaKeys[bits] = k
	return k
}

// tlsRuntime answers certificate commands like HAProxy, refusing those
// that contain refuse.
type tlsFakeRuntime struct {
	*fakeRuntime
	refuse string
}

func (r *tlsFakeRuntime) ExecuteTLS(_ context.Context, cmd, payload string) error {
	r.mu.Lock()
	r.cmds = append(r.cmds, cmd)
	r.mu.Unlock()
	if r.refuse != "" && strings.Contains(cmd, r.refuse) {
		return &runtimeError{Command: cmd, Response: "unable to load the certificate chain"}
	}
	return nil
}

func haproxyProgram(t *testing.T) string {
	t.Helper()
	prog, err := findProgram("")
	if err != nil {
		t.Fatal("haproxy not installed (apt-get install haproxy): " + err.Error())
	}
	return prog
}

// tenantTLSDesired serves the victim's certificate and, when bad is set,
// mallory's certificate with that content, and one more backend per
// extra.
func tenantTLSDesired(victim, bad []byte, extra int) *model.Desired {
	d := fullDesired()
	d.TLS = model.TLS{
		Default: &model.Certificate{Name: model.DefaultCertificateName, PEM: victimDefault},
		Certificates: []*model.Certificate{{
			Name: "victim_shop-tls", PEM: victim, Hosts: []string{"shop.example.com"},
			Secret:    model.ObjectRef{Kind: "Secret", Namespace: "victim", Name: "shop-tls"},
			Ingresses: []model.ObjectRef{{Kind: "Ingress", Namespace: "victim", Name: "shop"}},
		}},
	}
	if bad != nil {
		d.TLS.Certificates = append(d.TLS.Certificates, &model.Certificate{
			Name: "mallory_evil-tls", PEM: bad, Hosts: []string{"mallory.example.com"},
			Secret:    model.ObjectRef{Kind: "Secret", Namespace: "mallory", Name: "evil-tls"},
			Ingresses: []model.ObjectRef{{Kind: "Ingress", Namespace: "mallory", Name: "evil"}},
		})
	}
	for i := range extra {
		be := *d.Backends[1]
		be.Name = "other_web_" + string(rune('a'+i))
		be.Namespace = "other"
		d.Backends = append(d.Backends, &be)
	}
	return d
}

var victimDefault []byte

// TestBadCertificateNeverWritten runs the driver against the real
// `haproxy -c`: mallory's certificates that OpenSSL refuses are dropped
// alone, with an Event for mallory; the victim's certificate and other
// changes in the same sync are applied; the files on disk always load.
func TestBadCertificateNeverWritten(t *testing.T) {
	prog := haproxyProgram(t)
	victimDefault = testPEM(t, "default")
	victim := testPEM(t, "shop.example.com")
	for _, kind := range []string{"garbage", "rsa1024", "sha1"} {
		t.Run(kind, func(t *testing.T) {
			u := newUnitDriver(t, Options{HTTPSBindPort: 8443, DisableIPv6: true})
			checker := &programChecker{program: prog}
			u.Driver.checker = checker
			rt := &tlsFakeRuntime{fakeRuntime: u.rt}
			u.Driver.rt = rt
			ctx := context.Background()
			if _, err := u.Apply(ctx, tenantTLSDesired(victim, nil, 0)); err != nil {
				t.Fatal(err)
			}
			loads(t, prog, u.Driver)

			// Mallory's bad certificate arrives with another tenant's new
			// backend (a reload) in the same sync.
			bad := badBundle(t, kind)
			res, err := u.Apply(ctx, tenantTLSDesired(victim, bad, 1))
			if err != nil {
				t.Fatalf("apply with mallory's certificate: %v", err)
			}
			if !res.Reloaded {
				t.Fatalf("the new backend was not applied: %+v", res)
			}
			assertMalloryRefused(t, res.Quarantined)
			crtList := readFileT(t, filepath.Join(u.opts.ConfigDir, certsDirName, crtListName))
			if strings.Contains(crtList, "mallory") || !strings.Contains(crtList, "victim_shop-tls.pem shop.example.com") {
				t.Fatalf("crt-list:\n%s", crtList)
			}
			if _, err := os.Stat(filepath.Join(u.opts.ConfigDir, certsDirName, "mallory_evil-tls.pem")); err == nil {
				t.Error("mallory's certificate file was written")
			}
			loads(t, prog, u.Driver)

			// The same Secret again, with an endpoint change: no new
			// check, applied at run time.
			want := tenantTLSDesired(victim, bad, 1)
			want.Backends[1].Endpoints[0].Address = "198.18.2.11"
			rt.take()
			res, err = u.Apply(ctx, want)
			if err != nil || res.Reloaded || res.RuntimeOps == 0 {
				t.Fatalf("endpoint change after the refusal: %+v %v", res, err)
			}
			assertMalloryRefused(t, res.Quarantined)
			for _, c := range rt.take() {
				if strings.Contains(c, "mallory") {
					t.Errorf("runtime command for mallory's certificate: %s", c)
				}
			}
			loads(t, prog, u.Driver)

			// Arriving at run time alone (no reload due), it never reaches
			// HAProxy either.
			u2 := newUnitDriver(t, Options{HTTPSBindPort: 8443, DisableIPv6: true})
			u2.Driver.checker = checker
			rt2 := &tlsFakeRuntime{fakeRuntime: u2.rt}
			u2.Driver.rt = rt2
			if _, err := u2.Apply(ctx, tenantTLSDesired(victim, nil, 0)); err != nil {
				t.Fatal(err)
			}
			rt2.take()
			res, err = u2.Apply(ctx, tenantTLSDesired(victim, bad, 0))
			if err != nil || res.Reloaded {
				t.Fatalf("runtime apply: %+v %v", res, err)
			}
			assertMalloryRefused(t, res.Quarantined)
			for _, c := range rt2.take() {
				if strings.Contains(c, "mallory") {
					t.Errorf("runtime command for mallory's certificate: %s", c)
				}
			}
			loads(t, prog, u2.Driver)
		})
	}
}

// TestRuntimeRefusedCertificateNotWritten: when HAProxy refuses a
// certificate at run time after all, the files never name it, and the
// rest of the change is applied by a checked reload.
func TestRuntimeRefusedCertificateNotWritten(t *testing.T) {
	victimDefault = testPEM(t, "default")
	victim := testPEM(t, "shop.example.com")
	u := newUnitDriver(t, Options{HTTPSBindPort: 8443, DisableIPv6: true})
	rt := &tlsFakeRuntime{fakeRuntime: u.rt, refuse: "mallory_evil-tls.pem"}
	u.Driver.rt = rt
	ctx := context.Background()
	if _, err := u.Apply(ctx, tenantTLSDesired(victim, nil, 0)); err != nil {
		t.Fatal(err)
	}
	bad := testPEM(t, "mallory.example.com")
	res, err := u.Apply(ctx, tenantTLSDesired(victim, bad, 0))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Reloaded || res.ReloadReason != ReloadRecovery {
		t.Fatalf("want a recovery reload: %+v", res)
	}
	assertMalloryRefused(t, res.Quarantined)
	dir := filepath.Join(u.opts.ConfigDir, certsDirName)
	if crtList := readFileT(t, filepath.Join(dir, crtListName)); strings.Contains(crtList, "mallory") {
		t.Fatalf("crt-list names the refused certificate:\n%s", crtList)
	}
	if _, err := os.Stat(filepath.Join(dir, "mallory_evil-tls.pem")); err == nil {
		t.Error("the refused certificate was written")
	}
	// Remembered: the next sync neither sends it again nor reloads.
	rt.take()
	reloads := u.master.count()
	res, err = u.Apply(ctx, tenantTLSDesired(victim, bad, 0))
	if err != nil || res.Reloaded || u.master.count() != reloads {
		t.Fatalf("same refused certificate again: %+v %v", res, err)
	}
	assertMalloryRefused(t, res.Quarantined)
	for _, c := range rt.take() {
		if strings.Contains(c, "mallory") {
			t.Errorf("refused certificate sent again: %s", c)
		}
	}
}

func assertMalloryRefused(t *testing.T, problems []model.Problem) {
	t.Helper()
	var ing, secret bool
	for _, p := range problems {
		if p.Object.Namespace == "victim" {
			t.Errorf("problem reported to the victim: %+v", p)
		}
		if p.Reason != model.ReasonInvalidSecret || !strings.Contains(p.Message, "haproxy refused the certificate of Secret evil-tls") ||
			!strings.Contains(p.Message, "mallory.example.com get the default certificate") {
			continue
		}
		if strings.Contains(p.Message, "/") {
			t.Errorf("problem names a path: %q", p.Message)
		}
		switch p.Object {
		case model.ObjectRef{Kind: "Ingress", Namespace: "mallory", Name: "evil"}:
			ing = true
		case model.ObjectRef{Kind: "Secret", Namespace: "mallory", Name: "evil-tls"}:
			secret = true
		}
	}
	if !ing || !secret {
		t.Fatalf("no refusal reported on mallory's Ingress and Secret: %+v", problems)
	}
}

// loads checks that the files on disk load as they are: what a restarted
// HAProxy would do.
func loads(t *testing.T, prog string, d *Driver) {
	t.Helper()
	out, err := exec.Command(prog, "-c", "-f", d.paths.config).CombinedOutput()
	if err != nil {
		t.Fatalf("the files on disk do not load: %v\n%s", err, out)
	}
}

func readFileT(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
