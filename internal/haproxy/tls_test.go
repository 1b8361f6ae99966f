package haproxy

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// testPEM makes a self-signed certificate and key for cn, as one bundle.
func testPEM(t *testing.T, cn string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn}, DNSNames: []string{cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})...)
}

func certOnly(b []byte) []byte {
	blk, _ := pem.Decode(b)
	return pem.EncodeToMemory(blk)
}

// tlsDesired has every TLS feature: SNI certificates, redirects, client
// authentication, TLS and h2 to backends.
func tlsDesired(t *testing.T) *model.Desired {
	d := fullDesired()
	ca := testPEM(t, "Test CA")
	d.TLS = model.TLS{
		Default: &model.Certificate{Name: model.DefaultCertificateName, PEM: testPEM(t, "default")},
		Certificates: []*model.Certificate{
			{Name: "shop_shop-tls", PEM: testPEM(t, "shop.example.com"), Hosts: []string{"shop.example.com", "*.shop.example.com"}},
			{Name: "shop_own-names", PEM: testPEM(t, "own.example.com"), Hosts: []string{"own.example.com"}},
		},
		ClientCA: &model.PEMFile{Name: "shop_client-ca_0123456789ab", PEM: certOnly(ca)},
	}
	d.Global.TLS = model.TLSPolicy{MinVersion: "TLSv1.3", ClientCertOptional: true}
	d.Maps[model.MapSSLRedirect] = map[string]string{"shop.example.com": "301", "*.example.com": "308:8443"}
	d.Backends[0].TLS = model.BackendTLS{SSL: true, Proto: "h2",
		CA:   &model.PEMFile{Name: "shop_pod-ca_0123456789ab", PEM: certOnly(ca)},
		Cert: &model.Certificate{Name: "shop_client_0123456789ab", PEM: testPEM(t, "client")}}
	d.Backends[1].TLS = model.BackendTLS{Proto: "h2"}
	return d
}

func TestRenderTLSGolden(t *testing.T) {
	cases := []struct {
		name string
		opts Options
		want func(*model.Desired)
	}{
		{"tls", Options{HTTPSBindPort: 443, StatsBindPort: DefaultStatsBindPort}, func(*model.Desired) {}},
		{"tls-invalid-client-ca", Options{HTTPSBindPort: 8443, DisableIPv6: true}, func(d *model.Desired) {
			d.TLS.ClientCA = &model.PEMFile{Name: "invalid"}
			d.TLS.Certificates = nil
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want := tlsDesired(t)
			tc.want(want)
			r := goldenRenderer(tc.opts)
			st, problems := desiredState(want)
			if len(problems) > 0 {
				t.Fatalf("problems: %v", problems)
			}
			withSlots(emptyState(), st)
			cfg, err := r.config(st, nil)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name+".cfg.golden", cfg)
			files := r.tlsFiles(st.tls)
			golden(t, tc.name+".crt-list.golden", string(files[filepath.Join(certsDirName, crtListName)]))
			tlsCheck(t, cfg, st, r)
		})
	}
}

// tlsCheck runs `haproxy -c` on cfg with the map and certificate files
// written under a temporary directory.
func tlsCheck(t *testing.T, cfg string, st *state, r renderer) {
	t.Helper()
	prog, err := exec.LookPath("haproxy")
	if err != nil {
		if prog, err = exec.LookPath("/usr/sbin/haproxy"); err != nil {
			t.Log("haproxy not installed: golden not checked with haproxy -c")
			return
		}
	}
	dir := t.TempDir()
	for rel, f := range r.stateFiles(st, "", nil) {
		data := f.data
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		// The crt-list names the certificates by absolute path.
		data = []byte(strings.ReplaceAll(string(data), goldenConfigDir, dir))
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range st.backends {
		if b.spec.CAFile == "ca/invalid.pem" {
			t.Fatal("invalid CA file in a check")
		}
	}
	checkGoldenConfig(t, prog, dir, cfg)
}

func TestTLSCommands(t *testing.T) {
	r := goldenRenderer(Options{HTTPSBindPort: 443})
	want := tlsDesired(t)
	cur, _ := desiredState(want)
	rotated := *want.TLS.Certificates[0]
	rotated.PEM = testPEM(t, "shop.example.com")
	want.TLS.Certificates = []*model.Certificate{&rotated, {Name: "shop_new", PEM: testPEM(t, "new.example.com"), Hosts: []string{"new.example.com"}}}
	want.Maps[model.MapSSLRedirect] = map[string]string{"shop.example.com": "302"}
	next, _ := desiredState(want)
	withSlots(emptyState(), cur)
	withSlots(cur, next)
	p := plan(cur, next, r, false)
	if p.reload() {
		t.Fatalf("certificate changes must not be structural: %v", p.changes)
	}
	var got []string
	for _, s := range append(append(p.tlsPre, mapSteps(p.maps)...), p.tlsPost...) {
		c := s.cmd
		if s.payload != "" {
			c += " <<" + strings.SplitN(s.payload, "\n", 2)[0]
		}
		got = append(got, strings.ReplaceAll(c, goldenConfigDir, ""))
	}
	want2 := []string{
		"new ssl cert /certs/shop_new.pem",
		"set ssl cert /certs/shop_new.pem <<-----BEGIN CERTIFICATE-----",
		"commit ssl cert /certs/shop_new.pem",
		"add ssl crt-list /certs/crt-list <</certs/shop_new.pem new.example.com",
		"set ssl cert /certs/shop_shop-tls.pem <<-----BEGIN CERTIFICATE-----",
		"commit ssl cert /certs/shop_shop-tls.pem",
		"del map /maps/ssl-redirect.map *.example.com",
		"set map /maps/ssl-redirect.map shop.example.com 302",
		"del ssl crt-list /certs/crt-list /certs/shop_own-names.pem",
		"del ssl cert /certs/shop_own-names.pem",
	}
	if strings.Join(got, "\n") != strings.Join(want2, "\n") {
		t.Fatalf("commands:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want2, "\n"))
	}
}

func mapSteps(cmds []string) []runtimeStep {
	var out []runtimeStep
	for _, c := range cmds {
		out = append(out, runtimeStep{cmd: c})
	}
	return out
}

func TestSafePEM(t *testing.T) {
	good := testPEM(t, "x")
	if !safePEM(good) {
		t.Fatal("generated PEM refused")
	}
	for _, bad := range []string{"", "-----BEGIN CERTIFICATE-----\n\nabc\n", "abc def\n", "-----BEGIN X-----\n;quit\n"} {
		if safePEM([]byte(bad)) {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestCheckedPEM: a PEM that passed under its name is not checked again
// while its bytes stay the same; changed bytes are checked afresh, and
// what passes is remembered.
func TestCheckedPEM(t *testing.T) {
	good := []byte("-----BEGIN CERTIFICATE-----\nQUJD\n-----END CERTIFICATE-----\n")
	bad := []byte("-----BEGIN CERTIFICATE-----\nQUJD\"; show info\n-----END CERTIFICATE-----\n")
	now := map[string][]byte{}
	if !checkedPEM("a", good, nil, now) || checkedPEM("b", bad, nil, now) || checkedPEM("Not Valid", good, nil, now) {
		t.Fatal("first check wrong")
	}
	if _, ok := now["b"]; ok || !bytes.Equal(now["a"], good) {
		t.Fatalf("remembered %q", now)
	}
	// The same bytes under a name that passed: accepted without safePEM.
	if next := map[string][]byte{}; !checkedPEM("a", slices.Clone(good), now, next) || len(next) != 1 {
		t.Fatal("same PEM not taken")
	}
	// Other bytes under that name, or the bad PEM under a good name's
	// entry, are checked.
	if checkedPEM("a", bad, now, map[string][]byte{}) || checkedPEM("a", nil, map[string][]byte{"a": nil}, map[string][]byte{}) {
		t.Fatal("changed PEM not checked")
	}
}

// BenchmarkTLSFill measures the frontend certificates' checks at every
// Apply, at 10,000 certificates: each checked afresh, and with the PEMs
// that passed last time known.
func BenchmarkTLSFill(b *testing.B) {
	line := strings.Repeat("QUJD", 16)
	pem := []byte("-----BEGIN CERTIFICATE-----\n" + strings.Repeat(line+"\n", 40) + "-----END CERTIFICATE-----\n" +
		"-----BEGIN PRIVATE KEY-----\n" + strings.Repeat(line+"\n", 20) + "-----END PRIVATE KEY-----\n")
	want := &model.Desired{}
	for i := range 10000 {
		want.TLS.Certificates = append(want.TLS.Certificates, &model.Certificate{
			Name: fmt.Sprintf("ns_tls%d", i), PEM: slices.Clone(pem), Hosts: []string{fmt.Sprintf("h%d.test", i)}})
	}
	reject := func(o model.ObjectRef, f string, a ...any) { b.Fatalf(f, a...) }
	for _, tc := range []struct {
		name  string
		known bool
	}{{"afresh", false}, {"known", true}} {
		b.Run(tc.name, func(b *testing.B) {
			var known map[string][]byte
			if tc.known {
				known = (&tlsState{}).fill(want, nil, reject)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				var t tlsState
				if t.fill(want, known, reject); len(t.certs) != len(want.TLS.Certificates) {
					b.Fatalf("%d certificates kept", len(t.certs))
				}
			}
			b.Logf("10,000 certificates of %d bytes: %s per fill", len(pem), b.Elapsed()/time.Duration(b.N))
		})
	}
}
