package model

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestCIDRListParser(t *testing.T) {
	p := cidrListParser()
	for in, want := range map[string]CIDRList{
		"10.0.0.0/8":                         "10.0.0.0/8",
		"10.1.2.3/8, 192.0.2.1 ,2001:db8::1": "10.0.0.0/8 192.0.2.1/32 2001:db8::1/128",
		"2001:DB8::/32 2001:db8::/32":        "2001:db8::/32",
	} {
		got, err := p.parse(in)
		if err != nil || got != want {
			t.Errorf("%q: got %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", ",", "10.0.0.0/33", "host.example", "10.0.0.1\nserver x", "fe80::1%eth0", "10.0.0.0/8 #", `"10.0.0.0/8"`} {
		if got, err := p.parse(in); err == nil {
			t.Errorf("%q: accepted as %q", in, got)
		}
	}
}

func TestFeatureParsers(t *testing.T) {
	if c, err := httpCheckParser().parse("HEAD /healthz?x=1"); err != nil || c != (HTTPCheck{Method: "HEAD", Path: "/healthz?x=1"}) {
		t.Errorf("check-http: %+v %v", c, err)
	}
	for _, bad := range []string{"healthz", "/a b", "POST /x", "/x#y", "/${X}", `/"`, "/a\\b", "/%41"} {
		if _, err := httpCheckParser().parse(bad); err == nil {
			t.Errorf("check-http %q accepted", bad)
		}
	}
	for _, bad := range []string{"Bad\"Realm", "a$b", "x\\y", "", strings.Repeat("a", 65), "a\nb"} {
		if _, err := realmParser().parse(bad); err == nil {
			t.Errorf("realm %q accepted", bad)
		}
	}
	if n, err := sizeParser(1, 100_000_000).parse("100k"); err != nil || n != 100000 {
		t.Errorf("size 100k: %d %v", n, err)
	}
	if k, err := sendProxyParser().parse("v2-ssl"); err != nil || k != "send-proxy-v2-ssl" {
		t.Errorf("send-proxy v2-ssl: %q %v", k, err)
	}
	if _, err := statusParser().parse("401"); err == nil {
		t.Error("status 401 accepted for deny")
	}
}

// TestBackendFeaturesBuild covers scopes, fail-closed values and the auth
// Secret.
func TestBackendFeaturesBuild(t *testing.T) {
	const hash = "$6$abcdefgh$ltjgWl6579NluT/Vi1nwEvcil.G5Nbc4NiXZaNGStk8PSwGfQv72N2CKPPrVACtLtip/cZ/1GM/O6IND4WQhG."
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube", Name: "cm"}, Data: map[string]string{
		"allow-list": "10.0.0.0/8", "rate-limit-requests": "100", "cookie-persistence": "CM",
	}}
	ing := webIngress("a", 1,
		"haproxy.org/whitelist=192.0.2.0/24",
		"haproxy.org/check-http=/healthz",
		"haproxy.org/auth-type=basic-auth",
		"haproxy.org/auth-secret=users",
		"haproxy.org/rate-limit-status-code=429",
	)
	svc := service("ns", "web", svcPort("", 80, 8080))
	svc.Annotations = map[string]string{"haproxy.org/cookie-persistence": "SVC"}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "users"}, Data: map[string][]byte{
		"bob": []byte(hash + "\n"), "alice": []byte(hash), "bad user": []byte(hash), "eve": []byte("plain text"),
	}}
	d := Build(&Snapshot{Ingresses: []*networkingv1.Ingress{ing}, Services: []*corev1.Service{svc}, ConfigMap: cm, Secrets: []*corev1.Secret{secret}}, Options{})
	b := backendByName(t, d, "ns_web_80")
	f := b.Features
	want := BackendFeatures{
		CheckHTTP: HTTPCheck{Method: "GET", Path: "/healthz"}, Cookie: "SVC", AllowList: "192.0.2.0/24",
		AuthRealm: "Protected Content", AuthUsers: Credentials("alice " + hash + "\nbob " + hash),
		RateLimit: RateLimit{Requests: 100, Period: time.Second, Size: 100000, Status: 429},
	}
	if f != want {
		t.Errorf("features:\n got %+v\nwant %+v", f, want)
	}
	if !strings.Contains(strings.Join(d.SecretRefs, ","), "ns/users") {
		t.Errorf("secret refs %v lack ns/users", d.SecretRefs)
	}
	if n := countReason(d.Problems, ReasonInvalidAuthSecret); n != 2 {
		t.Errorf("%d InvalidAuthSecret problems, want 2 (bad user, eve): %v", n, d.Problems)
	}

	// An invalid allow-list at the Ingress fails closed even though the
	// ConfigMap has a valid one; an invalid cookie name falls back.
	ing = webIngress("a", 1, "haproxy.org/allow-list=10.0.0.0/8,bogus", "haproxy.org/cookie-persistence=a b")
	d = Build(&Snapshot{Ingresses: []*networkingv1.Ingress{ing}, Services: []*corev1.Service{service("ns", "web", svcPort("", 80, 8080))}, ConfigMap: cm}, Options{})
	b = backendByName(t, d, "ns_web_80")
	if b.Features.Deny != 403 || b.Features.Cookie != "CM" {
		t.Errorf("deny %d cookie %q, want 403 and CM", b.Features.Deny, b.Features.Cookie)
	}
	if !strings.Contains(problemText(d.Problems), "fail closed") {
		t.Errorf("problem does not say the backend fails closed: %v", d.Problems)
	}

	// Missing Secret: 503, watched, reported.
	ing = webIngress("a", 1, "haproxy.org/auth-type=basic-auth", "haproxy.org/auth-secret=missing")
	d = Build(&Snapshot{Ingresses: []*networkingv1.Ingress{ing}, Services: []*corev1.Service{service("ns", "web", svcPort("", 80, 8080))}}, Options{})
	b = backendByName(t, d, "ns_web_80")
	if b.Features.Deny != 503 || b.Features.AuthRealm != "" || countReason(d.Problems, ReasonAuthSecretNotFound) != 1 {
		t.Errorf("missing secret: deny %d realm %q problems %v", b.Features.Deny, b.Features.AuthRealm, d.Problems)
	}
	if strings.Join(d.SecretRefs, ",") != "ns/missing" {
		t.Errorf("secret refs %v, want ns/missing", d.SecretRefs)
	}

	// While its watch starts, the Secret is pending: closed, not reported.
	d = Build(&Snapshot{Ingresses: []*networkingv1.Ingress{ing}, Services: []*corev1.Service{service("ns", "web", svcPort("", 80, 8080))},
		PendingSecrets: []string{"ns/missing"}}, Options{})
	b = backendByName(t, d, "ns_web_80")
	if b.Features.Deny != 503 || countReason(d.Problems, ReasonAuthSecretNotFound) != 0 {
		t.Errorf("pending secret: deny %d problems %v, want 503 and none", b.Features.Deny, d.Problems)
	}
}

func countReason(ps []Problem, reason string) int {
	n := 0
	for _, p := range ps {
		if p.Reason == reason {
			n++
		}
	}
	return n
}

func problemText(ps []Problem) string {
	var b strings.Builder
	for _, p := range ps {
		b.WriteString(p.Message + "\n")
	}
	return b.String()
}
