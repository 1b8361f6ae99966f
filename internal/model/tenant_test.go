package model

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const tenantHash = "$6$abcdefgh$ltjgWl6579NluT/Vi1nwEvcil.G5Nbc4NiXZaNGStk8PSwGfQv72N2CKPPrVACtLtip/cZ/1GM/O6IND4WQhG."

func tenantSecret(ns, name string, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

// TestTenantForeignSecretsModel: a tenant naming another namespace's Secret
// in auth-secret, server-ca or server-crt gets an Event, the Secret is not
// referenced (so never watched nor read), auth fails closed and the TLS
// settings are dropped; the ConfigMap may still name any namespace.
func TestTenantForeignSecretsModel(t *testing.T) {
	victimUsers := tenantSecret("victim", "users", map[string]string{"admin": tenantHash})
	victimCert := tenantSecret("victim", "client", map[string]string{"tls.crt": "x", "tls.key": "y"})
	secrets := []*corev1.Secret{victimUsers, victimCert}
	svc := service("ns", "web", svcPort("", 80, 8080))

	for _, tc := range []struct {
		ann     []string
		key     string
		onSvc   bool
		deny    int
		tlsGone bool
	}{
		{ann: []string{"haproxy.org/auth-type=basic-auth", "haproxy.org/auth-secret=victim/users"}, key: "auth-secret", deny: 503},
		{ann: []string{"haproxy.org/server-crt=victim/client"}, key: "server-crt", tlsGone: true},
		{ann: []string{"haproxy.org/server-ca=victim/client"}, key: "server-ca", tlsGone: true},
		{ann: []string{"haproxy.org/server-crt=victim/client"}, key: "server-crt", onSvc: true, tlsGone: true},
	} {
		ing := webIngress("a", 1)
		s := svc.DeepCopy()
		if tc.onSvc {
			s.Annotations = annotations(nil, tc.ann...)
		} else {
			withAnnotations(ing, tc.ann...)
		}
		d := Build(&Snapshot{Ingresses: []*networkingv1.Ingress{ing}, Services: []*corev1.Service{s}, Secrets: secrets}, Options{})
		b := backendByName(t, d, "ns_web_80")
		if n := countReason(d.Problems, ReasonCrossNamespaceSecret); n != 1 {
			t.Errorf("%v: %d CrossNamespaceSecret problems, want 1: %v", tc.ann, n, d.Problems)
		}
		for _, p := range d.Problems {
			if p.Reason == ReasonCrossNamespaceSecret && (p.Object.Namespace != "ns" || !strings.Contains(p.Message, tc.key)) {
				t.Errorf("%v: problem on %v: %s", tc.ann, p.Object, p.Message)
			}
			if strings.Contains(p.Message, "admin") || strings.Contains(p.Message, "tls.key") {
				t.Errorf("%v: problem names a key of the foreign Secret: %s", tc.ann, p.Message)
			}
		}
		for _, r := range d.SecretRefs {
			if strings.HasPrefix(r, "victim/") {
				t.Errorf("%v: foreign Secret %s referenced (it would be watched)", tc.ann, r)
			}
		}
		if b.Features.Deny != tc.deny || b.Features.AuthUsers != "" {
			t.Errorf("%v: deny %d users %q, want deny %d and no users", tc.ann, b.Features.Deny, b.Features.AuthUsers, tc.deny)
		}
		if tc.tlsGone && (b.TLS.CASecret != "" || b.TLS.CertSecret != "" || b.TLS.Cert != nil || b.TLS.CA != nil) {
			t.Errorf("%v: backend TLS %+v still uses the foreign Secret", tc.ann, b.TLS)
		}
	}

	// The own namespace, written either way, is accepted.
	for _, ref := range []string{"users", "ns/users"} {
		own := tenantSecret("ns", "users", map[string]string{"alice": tenantHash})
		ing := webIngress("a", 1, "haproxy.org/auth-type=basic-auth", "haproxy.org/auth-secret="+ref)
		d := Build(&Snapshot{Ingresses: []*networkingv1.Ingress{ing}, Services: []*corev1.Service{svc}, Secrets: []*corev1.Secret{own}}, Options{})
		if b := backendByName(t, d, "ns_web_80"); b.Features.Deny != 0 || !strings.HasPrefix(string(b.Features.AuthUsers), "alice ") {
			t.Errorf("own Secret %s: deny %d users %q; problems %v", ref, b.Features.Deny, b.Features.AuthUsers, d.Problems)
		}
	}

	// The operator's ConfigMap may name any namespace.
	cm := configMap("auth-type=basic-auth", "auth-secret=victim/users")
	d := Build(&Snapshot{Ingresses: []*networkingv1.Ingress{webIngress("a", 1)}, Services: []*corev1.Service{svc}, Secrets: secrets, ConfigMap: cm}, Options{})
	if b := backendByName(t, d, "ns_web_80"); b.Features.Deny != 0 || b.Features.AuthUsers == "" {
		t.Errorf("ConfigMap auth-secret victim/users: deny %d users %q; problems %v", b.Features.Deny, b.Features.AuthUsers, d.Problems)
	}
	// ... but a tenant's refused reference still beats it: closed, not the
	// ConfigMap's users.
	ing := webIngress("a", 1, "haproxy.org/auth-secret=other/users")
	d = Build(&Snapshot{Ingresses: []*networkingv1.Ingress{ing}, Services: []*corev1.Service{svc}, Secrets: secrets, ConfigMap: cm}, Options{})
	if b := backendByName(t, d, "ns_web_80"); b.Features.Deny != 503 {
		t.Errorf("refused tenant auth-secret over a ConfigMap one: deny %d, want 503", b.Features.Deny)
	}
}

// TestTenantExpensiveHashModel: hashes whose cost is unbounded or unknown
// never reach the userlist; the Secret's other users still do.
func TestTenantExpensiveHashModel(t *testing.T) {
	good := map[string]string{
		"sha512":       tenantHash,
		"sha512-5000":  "$6$rounds=5000$saltsalt$Zx0G1Yx0iZ0jQHfl3b0h6V6Mc8o7UwZtm7q4Rj3rz9kqfG5Hq0lVZ1ZnUeT8j0dE5sN1F8M9P6l3Y2p4u6K7a.",
		"sha256":       "$5$saltsalt$5B8vYYiY.CVt1RlTTf8KbXBH3hsxY/GNooZF5eTtMn5",
		"bcrypt-12":    "$2b$12$abcdefghijklmnopqrstuuH2yIr6dS8iH8aQ4bWJ0qv1xYzE0u0fW",
		"bcrypt-10":    "$2y$10$abcdefghijklmnopqrstuuH2yIr6dS8iH8aQ4bWJ0qv1xYzE0u0fW",
		"md5":          "$1$saltsalt$qjXMvbEw8oaL.CzflDugX/",
		"des":          "abJnggxhB/yWI",
		"yescrypt-def": "$y$j9T$F5Jx5fExrKuPp53xLKQ..1$X3DX6M94c7o.9agCG9G317fhZg9SqC.5i5rd.RhAtQ7",
	}
	bad := map[string]string{
		"sha512-huge":   "$6$rounds=999999999$saltsalt$Zx0G1Yx0iZ0jQHfl3b0h6V6Mc8o7UwZtm7q4Rj3rz9kqfG5Hq0lVZ1ZnUeT8j0dE5sN1F8M9P6l3Y2p4u6K7a.",
		"sha256-5001":   "$5$rounds=5001$saltsalt$5B8vYYiY.CVt1RlTTf8KbXBH3hsxY/GNooZF5eTtMn5",
		"bcrypt-31":     "$2b$31$abcdefghijklmnopqrstuuH2yIr6dS8iH8aQ4bWJ0qv1xYzE0u0fW",
		"bcrypt-13":     "$2a$13$abcdefghijklmnopqrstuuH2yIr6dS8iH8aQ4bWJ0qv1xYzE0u0fW",
		"yescrypt-slow": "$y$jFT$F5Jx5fExrKuPp53xLKQ..1$X3DX6M94c7o.9agCG9G317fhZg9SqC.5i5rd.RhAtQ7",
		"scrypt":        "$7$CU..../....abcdefghijklmnopq$abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG",
		"argon":         "$argon2id$v=19$m=65536,t=3,p=4$c2FsdHNhbHQ$abcdefghijklmnopqrstuvwxyz",
		"plain-long":    "abcdefghijklmnop",
	}
	for name, h := range good {
		if err := checkUser(name, h); err != nil {
			t.Errorf("%s %q refused: %v", name, h, err)
		}
	}
	for name, h := range bad {
		if err := checkUser(name, h); err == nil {
			t.Errorf("%s %q accepted", name, h)
		}
	}

	data := map[string]string{"alice": tenantHash, "mallory": bad["sha512-huge"]}
	ing := webIngress("a", 1, "haproxy.org/auth-type=basic-auth", "haproxy.org/auth-secret=users")
	d := Build(&Snapshot{Ingresses: []*networkingv1.Ingress{ing}, Services: []*corev1.Service{service("ns", "web", svcPort("", 80, 8080))},
		Secrets: []*corev1.Secret{tenantSecret("ns", "users", data)}}, Options{})
	b := backendByName(t, d, "ns_web_80")
	if string(b.Features.AuthUsers) != "alice "+tenantHash {
		t.Errorf("users %q, want alice only", b.Features.AuthUsers)
	}
	if !strings.Contains(problemText(d.Problems), "rounds=999999999 above 5000") {
		t.Errorf("no problem about the rounds: %v", d.Problems)
	}

	// Only expensive users: the backend fails closed.
	delete(data, "alice")
	d = Build(&Snapshot{Ingresses: []*networkingv1.Ingress{ing}, Services: []*corev1.Service{service("ns", "web", svcPort("", 80, 8080))},
		Secrets: []*corev1.Secret{tenantSecret("ns", "users", data)}}, Options{})
	if b := backendByName(t, d, "ns_web_80"); b.Features.Deny != 503 || b.Features.AuthUsers != "" {
		t.Errorf("only an expensive user: deny %d users %q, want 503 and none", b.Features.Deny, b.Features.AuthUsers)
	}
}

// TestTenantRegexSubset: the safe subset accepts the usual rewrite and
// origin patterns and refuses every pattern that can backtrack
// catastrophically.
func TestTenantRegexSubset(t *testing.T) {
	for _, re := range []string{
		`^/foo/(.*)`, `/foo/(.*)`, `^/api/v[0-9]+/(.*)$`, `^/([^/]+)/(.*)$`, `^/(?:a|bc)/(.*)`,
		`^https://([a-z0-9-]+\.)?example\.com$`, `^https?://[a-z]+\.example\.(com|org)$`,
		`^/static/.*\.(css|js)$`, `^/x{2,5}y`, `^/\d+-\w*$`, `\bfoo\b`, `^/a.*?b$`, `^/a.+`,
		`^(/v1)?/users/([0-9]+)$`, `^/[[:alpha:]]+/(.*)`, `^/(.*)/(.*)$`, `/api/(.*)`, `^/a*.*$`,
	} {
		if err := checkSafeRegex(re); err != nil {
			t.Errorf("%q refused: %v", re, err)
		}
	}
	for _, re := range []string{
		`(a+)+$`, `^(a+)+$`, `(a*)*`, `(a|a)*`, `(a|aa)+$`, `^(\w+\s?)*$`, `(.*a){12}`, `^(a|b|ab)*c`,
		`a*a*$`, `.*.*=.*`, `^.*.*=.*`, `^/(.*)/(.*)x$`, `^a?a?a?a?a?a?a?a?aaaaaaaa$`, `[a-z]*x`, `/api/.*x`, `/v[0-9]+/(.*)`, `\bfoo\b.*!`, `^(a?){20}a{20}$`, `\d+\d+x`,
		`(\1)`, `(?=a)`, `(?i)abc`, `(?P<n>a)`, `\x41`, `\p{L}`, `a{1000}`, `a{,2}`, `a**`,
		`((a)?)?`, `(a)?(b)?(c)?(d)?(e)?`, strings.Repeat("a", 257), `^(a+|b)c`,
	} {
		if err := checkSafeRegex(re); err == nil {
			t.Errorf("%q accepted", re)
		}
	}

	// At tenant scope an unsafe regex is refused with an Event; the
	// ConfigMap (the operator) is trusted with any regex RE2 compiles.
	ing := webIngress("a", 1, "haproxy.org/path-rewrite=(a+)+$ /x", "haproxy.org/cors-enable=true", "haproxy.org/cors-allow-origin=^(a+)+$")
	d := Build(&Snapshot{Ingresses: []*networkingv1.Ingress{ing}, Services: []*corev1.Service{service("ns", "web", svcPort("", 80, 8080))}}, Options{})
	b := backendByName(t, d, "ns_web_80")
	if n := countReason(d.Problems, ReasonUnsafeRegex); n != 2 {
		t.Errorf("%d UnsafeRegex problems, want 2: %v", n, d.Problems)
	}
	if len(b.HTTP.Rewrites) != 0 || b.HTTP.CORS.OriginRegex != "" {
		t.Errorf("unsafe regexes kept: rewrite %q origin %q", b.HTTP.Rewrites, b.HTTP.CORS.OriginRegex)
	}
	cm := configMap("path-rewrite=(a+)+$ /x")
	d = Build(&Snapshot{Ingresses: []*networkingv1.Ingress{webIngress("a", 1)}, Services: []*corev1.Service{service("ns", "web", svcPort("", 80, 8080))}, ConfigMap: cm}, Options{})
	if b := backendByName(t, d, "ns_web_80"); len(b.HTTP.Rewrites) != 1 || b.HTTP.Rewrites[0].Regex != "(a+)+$" || len(d.Problems) != 0 {
		t.Errorf("ConfigMap regex: rewrite %q problems %v", b.HTTP.Rewrites, d.Problems)
	}
}

// TestTenantLimitsModel: rate-limit-size is capped at 1m entries;
// hard-stop-after defaults to 30m.
func TestTenantLimitsModel(t *testing.T) {
	for raw, ok := range map[string]bool{"1m": true, "1000000": true, "100k": true, "1000001": false, "2m": false, "100m": false} {
		if _, err := sizeParser(1, maxRateLimitSize).parse(raw); (err == nil) != ok {
			t.Errorf("rate-limit-size %s: err %v, want accepted=%t", raw, err, ok)
		}
	}
	ing := webIngress("a", 1, "haproxy.org/rate-limit-requests=10", "haproxy.org/rate-limit-size=100m")
	d := Build(&Snapshot{Ingresses: []*networkingv1.Ingress{ing}, Services: []*corev1.Service{service("ns", "web", svcPort("", 80, 8080))}}, Options{})
	if b := backendByName(t, d, "ns_web_80"); b.Features.Deny != 503 || countReason(d.Problems, ReasonInvalidAnnotation) != 1 {
		t.Errorf("rate-limit-size 100m: deny %d problems %v, want 503 and an Event", b.Features.Deny, d.Problems)
	}
	if d.Global.HardStopAfter.String() != "30m0s" {
		t.Errorf("hard-stop-after default %s, want 30m", d.Global.HardStopAfter)
	}
}

// TestTenantRulesCoverSecretSettings: every setting a tenant can set that
// names a Secret has the own-namespace rule.
func TestTenantRulesCoverSecretSettings(t *testing.T) {
	for _, s := range Settings() {
		if s.Scopes&(ScopeIngress|ScopeService) == 0 || !strings.Contains(s.Type, "NAMESPACE/NAME") {
			continue
		}
		if s.tenant != ownSecretRule {
			t.Errorf("setting %s names a Secret at tenant scope without the own-namespace rule", s.Name)
		}
	}
}

// TestTenantSecretWatchCapModel: a Secret the watcher refused is reported
// as not watched, with why, on the object naming it, never as not found;
// auth fails closed.
func TestTenantSecretWatchCapModel(t *testing.T) {
	const why = "500 Secrets of namespace ns are watched already"
	ing := webIngress("a", 1, "haproxy.org/auth-type=basic-auth", "haproxy.org/auth-secret=users")
	ing.Spec.TLS = []networkingv1.IngressTLS{{Hosts: []string{"a.example"}, SecretName: "cert"}}
	d := Build(&Snapshot{Ingresses: []*networkingv1.Ingress{ing}, Services: []*corev1.Service{service("ns", "web", svcPort("", 80, 8080))},
		RefusedSecrets: map[string]string{"ns/users": why, "ns/cert": why}}, Options{})
	if n := countReason(d.Problems, ReasonSecretNotWatched); n != 2 {
		t.Errorf("%d SecretNotWatched problems, want 2: %v", n, d.Problems)
	}
	if countReason(d.Problems, ReasonSecretNotFound)+countReason(d.Problems, ReasonAuthSecretNotFound) != 0 {
		t.Errorf("refused Secrets reported as not found: %v", d.Problems)
	}
	for _, p := range d.Problems {
		if p.Reason == ReasonSecretNotWatched && (p.Object != ingressRef(ing) || !strings.Contains(p.Message, why)) {
			t.Errorf("problem %+v", p)
		}
	}
	if b := backendByName(t, d, "ns_web_80"); b.Features.Deny != 503 {
		t.Errorf("refused auth Secret: deny %d, want 503", b.Features.Deny)
	}
}

// FuzzCheckSafeRegex: tenant input never panics the checker, and what it
// accepts RE2 compiles too (checkRegex runs first in the daemon).
func FuzzCheckSafeRegex(f *testing.F) {
	for _, s := range []string{`^/foo/(.*)`, `(a+)+$`, `[`, `[]a]`, `[^]`, `\`, `a{`, `a{1,`, `(?`, `((((((((((a))))))))))`, `[[:alpha:]`, `a|`, `|`, `()`, `(?:)?`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, re string) {
		_ = checkSafeRegex(re)
	})
}
