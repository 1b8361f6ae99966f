package haproxy

import (
	"strings"
	"testing"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

func tcpTLSDesired(t *testing.T, withDefault bool) *model.Desired {
	d := desired(oneBackend("ns_a_80", 2, eps("198.18.0.1")))
	db := oneBackend("tcp15432_ns_db_5432", 2, eps("198.18.0.2"))
	db.TCP = true
	d.Backends = append(d.Backends, db)
	d.TCPServices = []model.TCPService{{Port: 15432, Backend: db.Name, SSL: true}}
	if withDefault {
		d.TLS.Default = &model.Certificate{Name: model.DefaultCertificateName, PEM: testPEM(t, "default")}
	}
	return d
}

// TestTCPServiceTLS: a ::ssl TCP service binds with the default
// certificate (HAProxy accepts it, with or without the https frontend);
// without a default certificate the port is not served at all.
func TestTCPServiceTLS(t *testing.T) {
	for _, https := range []int{0, 8443} {
		r := goldenRenderer(Options{HTTPSBindPort: https, DisableIPv6: true})
		st, problems := desiredState(tcpTLSDesired(t, true))
		if len(problems) != 0 {
			t.Fatal(problems)
		}
		withSlots(emptyState(), st)
		cfg, err := r.config(st, nil)
		if err != nil {
			t.Fatal(err)
		}
		want := "frontend tcp_15432 from perimeter\n  mode tcp\n  bind 0.0.0.0:15432 ssl crt " + r.certPath(defaultCertFile) + "\n  default_backend tcp15432_ns_db_5432\n"
		if !strings.Contains(cfg, want) {
			t.Fatalf("https port %d: config lacks\n%s\nin:\n%s", https, want, cfg)
		}
		tlsCheck(t, cfg, st, r)
	}

	st, problems := desiredState(tcpTLSDesired(t, false))
	if len(problems) != 1 || len(st.extras.tcp) != 0 {
		t.Fatalf("without a default certificate: problems %v, tcp %v", problems, st.extras.tcp)
	}
}

// TestTCPServiceTLSRotation: without the https frontend, a new default
// certificate still reaches the TCP services through the Runtime API.
func TestTCPServiceTLSRotation(t *testing.T) {
	r := goldenRenderer(Options{DisableIPv6: true})
	cur, _ := desiredState(tcpTLSDesired(t, true))
	next, _ := desiredState(tcpTLSDesired(t, true))
	withSlots(emptyState(), cur)
	withSlots(cur, next)
	p := plan(cur, next, r, false)
	if p.reload() {
		t.Fatalf("a default certificate change must not be structural: %v", p.changes)
	}
	pre, post := p.tlsPre, p.tlsPost
	path := r.certPath(defaultCertFile)
	if len(pre) != 2 || len(post) != 0 || pre[0].cmd != "set ssl cert "+path || pre[1].cmd != "commit ssl cert "+path {
		t.Fatalf("commands %+v %+v", pre, post)
	}
}
