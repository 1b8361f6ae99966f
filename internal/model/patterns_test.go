package model

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// A patterns/<file> value (the peer's --configmap-patternfiles) is refused
// with a message that names pattern files, on the object that set it; the
// security keys keep failing closed for that object's backend only.
func TestPatternFileValues(t *testing.T) {
	for _, key := range []string{"allow-list", "whitelist", "deny-list", "blacklist", "rate-limit-whitelist"} {
		t.Run(key, func(t *testing.T) {
			ann := []string{"haproxy.org/" + key + "=patterns/ips"}
			if key == "rate-limit-whitelist" {
				ann = append(ann, "haproxy.org/rate-limit-requests=10")
			}
			ing := webIngress("a", 1, ann...)
			other := withAnnotations(ingress("ns", "b", 2, rule("b.example", path("/", "Prefix", "other", 80))))
			d := Build(&Snapshot{Ingresses: []*networkingv1.Ingress{ing, other},
				Services: []*corev1.Service{service("ns", "web", svcPort("", 80, 8080)), service("ns", "other", svcPort("", 80, 8080))}}, Options{})
			var found bool
			for _, p := range d.Problems {
				if strings.Contains(p.Message, "pattern files (patterns/<file>") {
					found = true
					if p.Object.Kind != "Ingress" || p.Object.Name != "a" {
						t.Errorf("problem on %+v, want Ingress a", p.Object)
					}
				}
			}
			if !found {
				t.Fatalf("no problem naming pattern files: %v", d.Problems)
			}
			if b := backendByName(t, d, "ns_web_80"); b.Features.Deny == 0 {
				t.Errorf("%s: backend of the Ingress does not fail closed", key)
			}
			if b := backendByName(t, d, "ns_other_80"); b.Features.Deny != 0 {
				t.Errorf("%s: another Ingress's backend denies %d", key, b.Features.Deny)
			}
		})
	}
}
