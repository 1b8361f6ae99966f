package model

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// A Secret whose watch is still loading is not reported missing; once
// loaded and absent, it is.
func TestPendingSecrets(t *testing.T) {
	ing := ingress("web", "site", 0, rule("site.example", path("/", "Prefix", "web", 80)))
	ing.Spec.TLS = []networkingv1.IngressTLS{{Hosts: []string{"site.example"}, SecretName: "site-tls"}}
	s := &Snapshot{Ingresses: []*networkingv1.Ingress{ing}, Services: []*corev1.Service{service("web", "web", svcPort("", 80, 8080))}}
	s.PendingSecrets = []string{"web/site-tls"}
	if d := Build(s, Options{}); len(d.Problems) != 0 || len(d.SecretRefs) != 1 {
		t.Fatalf("pending Secret: problems %v refs %v", d.Problems, d.SecretRefs)
	}
	s.PendingSecrets = nil
	d := Build(s, Options{})
	if len(d.Problems) != 1 || d.Problems[0].Reason != ReasonSecretNotFound {
		t.Fatalf("missing Secret: problems %v", d.Problems)
	}
	// ssl-redirect is on by default for the TLS host even while its
	// certificate is missing: the default certificate serves it.
	if d.Maps[MapSSLRedirect]["site.example"] != "302" {
		t.Fatalf("ssl-redirect map %v", d.Maps[MapSSLRedirect])
	}
}

func TestTLSParsers(t *testing.T) {
	for _, c := range []struct {
		p    parser[string]
		in   string
		okay bool
	}{
		{cipherParser(), "ECDHE-RSA-AES128-GCM-SHA256:TLS_AES_128_GCM_SHA256", true},
		{cipherParser(), "AES;server x", false},
		{cipherParser(), "!aNULL", false},
		{alpnParser(), "h2,http/1.1", true},
		{alpnParser(), "h2 http/1.1", false},
		{secretRefParser(), "ns/name", true},
		{secretRefParser(), "name", true},
		{secretRefParser(), "a/b/c", false},
	} {
		if _, err := c.p.parse(c.in); (err == nil) != c.okay {
			t.Errorf("%q: err %v, want ok=%t", c.in, err, c.okay)
		}
	}
}
