package model

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// A patterns/<file> value reads the addresses of that key of
// --configmap-patternfiles, as the peer does; a missing or bad file fails
// closed for the object that names it, with an Event, and no other.
func TestPatternFileValues(t *testing.T) {
	files := &corev1.ConfigMap{Data: map[string]string{
		"office": "# office and VPN\n198.51.100.0/24\n\n  203.0.113.7 \n",
		"bad":    "198.51.100.0/24\nnot-an-address\n",
	}}
	files.Namespace, files.Name = "ops", "patterns"
	svcs := []*corev1.Service{service("ns", "web", svcPort("", 80, 8080)), service("ns", "other", svcPort("", 80, 8080))}
	other := withAnnotations(ingress("ns", "b", 2, rule("b.example", path("/", "Prefix", "other", 80))))
	build := func(files *corev1.ConfigMap, ann ...string) *Desired {
		return Build(&Snapshot{Ingresses: []*networkingv1.Ingress{webIngress("a", 1, ann...), other}, Services: svcs, PatternFiles: files}, Options{})
	}

	for _, key := range []string{"allow-list", "whitelist", "deny-list", "blacklist"} {
		d := build(files, "haproxy.org/"+key+"=patterns/office")
		f := backendByName(t, d, "ns_web_80").Features
		got := f.AllowList
		if strings.HasPrefix(key, "deny") || key == "blacklist" {
			got = f.DenyList
		}
		if got != "198.51.100.0/24 203.0.113.7/32" || f.Deny != 0 || len(d.Problems) != 0 {
			t.Errorf("%s: list %q deny %d problems %v", key, got, f.Deny, d.Problems)
		}
	}
	d := build(files, "haproxy.org/rate-limit-requests=10", "haproxy.org/rate-limit-whitelist=patterns/office")
	if f := backendByName(t, d, "ns_web_80").Features; f.RateLimit.Whitelist != "198.51.100.0/24 203.0.113.7/32" {
		t.Errorf("rate-limit-whitelist %q", f.RateLimit.Whitelist)
	}

	for _, tc := range []struct {
		files *corev1.ConfigMap
		value string
		want  string
	}{
		{nil, "patterns/office", "no --configmap-patternfiles is set"},
		{files, "patterns/missing", `pattern file "missing" is not a key of ConfigMap ops/patterns`},
		{files, "patterns/bad", `pattern file "bad" of ConfigMap ops/patterns: "not-an-address"`},
	} {
		d := build(tc.files, "haproxy.org/allow-list="+tc.value)
		if len(d.Problems) != 1 || !strings.Contains(d.Problems[0].Message, tc.want) || d.Problems[0].Object.Name != "a" {
			t.Errorf("%s: problems %v, want one on Ingress a saying %q", tc.value, d.Problems, tc.want)
		}
		if backendByName(t, d, "ns_web_80").Features.Deny != 403 {
			t.Errorf("%s: the Ingress's backend does not fail closed", tc.value)
		}
		if b := backendByName(t, d, "ns_other_80"); b.Features.Deny != 0 {
			t.Errorf("%s: another Ingress's backend denies %d", tc.value, b.Features.Deny)
		}
	}

	// From the ConfigMap too.
	cm := &corev1.ConfigMap{Data: map[string]string{"deny-list": "patterns/office"}}
	d = Build(&Snapshot{Ingresses: []*networkingv1.Ingress{other}, Services: svcs, ConfigMap: cm, PatternFiles: files}, Options{})
	if f := backendByName(t, d, "ns_other_80").Features; f.DenyList != "198.51.100.0/24 203.0.113.7/32" {
		t.Errorf("ConfigMap deny-list %q, problems %v", f.DenyList, d.Problems)
	}
}
