package haproxy

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// The peer's clean-certs (on by default) removes certificate files no
// Ingress uses any more. Here that is the one writer's normal work, also
// when the certificate leaves at run time with no reload: there is no key
// to turn it off.
func TestUnusedCertificateRemovedWithoutReload(t *testing.T) {
	u := newUnitDriver(t, Options{HTTPSBindPort: 443})
	cert := filepath.Join(u.opts.ConfigDir, certsDirName, "ns_a-tls.pem")
	want := desired(oneBackend("ns_a_80", 2, eps("198.18.0.1")))
	want.TLS.Default = &model.Certificate{Name: model.DefaultCertificateName, PEM: testPEM(t, "default")}
	want.TLS.Certificates = []*model.Certificate{{Name: "ns_a-tls", PEM: testPEM(t, "a.test"), Hosts: []string{"a.test"}}}
	mustApply(t, u.Driver, want)
	if _, err := os.Stat(cert); err != nil {
		t.Fatalf("certificate in use not on disk: %v", err)
	}
	u.rt.take()

	want.TLS.Certificates = nil
	if res := mustApply(t, u.Driver, want); res.Reloaded {
		t.Fatalf("removing a certificate reloaded: %+v", res)
	}
	cmds := u.rt.take()
	if !slices.ContainsFunc(cmds, func(c string) bool {
		return strings.HasPrefix(c, "del ssl cert ") && strings.HasSuffix(c, "ns_a-tls.pem")
	}) {
		t.Errorf("runtime commands %q do not delete the certificate", cmds)
	}
	if _, err := os.Stat(cert); !os.IsNotExist(err) {
		t.Fatalf("certificate no longer used still on disk: %v", err)
	}
	list, err := os.ReadFile(filepath.Join(u.opts.ConfigDir, certsDirName, crtListName))
	if err != nil || strings.Contains(string(list), "ns_a-tls") {
		t.Fatalf("crt-list %q still names the certificate (%v)", list, err)
	}
}
