package model

import (
	"crypto/elliptic"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// TestTCPServiceServerTLS: server-ca and server-crt on a TCP service's
// Service are resolved like an HTTP backend's: the CA verifies the servers
// (server-ca implies server-ssl), both Secrets are watched, and a missing
// CA fails closed with an Event on the Service.
func TestTCPServiceServerTLS(t *testing.T) {
	ca := issueTestCert(t, "db-ca", ecKey(t, elliptic.P256()), nil, 0, true)
	client := issueTestCert(t, "client", ecKey(t, elliptic.P256()), ca, 0, false)
	svc := service("db", "pg", svcPort("sql", 5432, 5432))
	svc.Annotations = annotations(nil, "haproxy.org/server-ca=pg-ca", "haproxy.org/server-crt=pg-client")
	tcp := &corev1.ConfigMap{Data: map[string]string{"15432": "db/pg:5432"}}
	tcp.Namespace, tcp.Name = "ns", "tcp"
	slice := endpointSlice("db", "pg", "pg-1", discoveryv1.AddressTypeIPv4, "sql", 5432, endpoint("198.18.7.10", "ready"))
	secrets := []*corev1.Secret{
		tenantSecret("db", "pg-ca", map[string]string{"ca.crt": string(chainPEM(ca))}),
		tenantSecret("db", "pg-client", map[string]string{"tls.crt": string(chainPEM(client)), "tls.key": string(keyPEM(t, client.key))}),
	}
	s := &Snapshot{TCPServices: tcp, Services: []*corev1.Service{svc}, EndpointSlices: []*discoveryv1.EndpointSlice{slice}, Secrets: secrets}

	d := Build(s, Options{})
	b := backendByName(t, d, "tcp15432_db_pg_5432")
	if !b.TLS.SSL || b.TLS.CA == nil || b.TLS.Cert == nil {
		t.Fatalf("TCP backend TLS %+v: want ssl with the CA and the client certificate resolved", b.TLS)
	}
	if len(b.Endpoints) != 1 {
		t.Errorf("endpoints %v, want the one server", b.Endpoints)
	}
	for _, ref := range []string{"db/pg-ca", "db/pg-client"} {
		if !slices.Contains(d.SecretRefs, ref) {
			t.Errorf("SecretRefs %v lack %s: the Secret would not be watched", d.SecretRefs, ref)
		}
	}
	if len(d.Problems) != 0 {
		t.Errorf("problems %v", d.Problems)
	}

	s.Secrets = secrets[1:]
	d = Build(s, Options{})
	b = backendByName(t, d, "tcp15432_db_pg_5432")
	if !b.TLS.SSL || b.TLS.CA != nil || len(b.Endpoints) != 0 {
		t.Errorf("missing server-ca: TLS %+v endpoints %v, want ssl, no CA and no servers (fail closed)", b.TLS, b.Endpoints)
	}
	if got := problemsOf(d); !slices.Equal(got, []string{"Service db/pg SecretNotFound"}) {
		t.Errorf("problems %v, want SecretNotFound on the Service", got)
	}
}
