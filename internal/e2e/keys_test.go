package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// Tests of single keys use pods in 198.18.98.0/24.

// TestClientStrictSNI: with client-strict-sni, a client whose SNI matches
// no certificate is refused during the handshake instead of getting the
// default certificate; hosts with a certificate are served as before.
func TestClientStrictSNI(t *testing.T) {
	e := newEnv(t)
	ca := newTestCA(t, "Strict CA")
	web := feEchoPod(t, "strict-0", 98, 10)
	e.service("web", nil, web.Pod)
	e.tlsSecret("web-tls", ca.issue(t, "strict.keys.test", "edge"))
	e.tlsIngress("web", "strict.keys.test", "web", "web-tls", nil)
	e.configMap("perimeter", map[string]string{"client-strict-sni": "true"})
	_, port := e.tlsDaemon("--configmap=" + e.ns + "/perimeter")

	testenv.Eventually(t, 15*time.Second, func() error {
		a, err := httpsGet(port, "strict.keys.test", "strict.keys.test", "/", nil)
		if err != nil {
			return err
		}
		if a.status != 200 || a.pod != "strict-0" || a.subject != "strict.keys.test/edge" {
			return fmt.Errorf("status %d pod %q certificate %q", a.status, a.pod, a.subject)
		}
		return nil
	})
	for _, sni := range []string{"other.keys.test", ""} {
		if subject, err := servedSubject(port, sni); err == nil {
			t.Errorf("SNI %q: served %q, want the handshake refused", sni, subject)
		}
	}
}
