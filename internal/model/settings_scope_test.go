package model

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// TestStrayAnnotations: a key under one of our own prefixes that is
// unknown, or set on an object its scope does not read, gets a Warning
// (a Problem on that object); the object's other settings still apply.
func TestStrayAnnotations(t *testing.T) {
	tests := []struct {
		name     string
		svc, ing []string
		problems []string
		message  string // in the first problem's message
	}{
		{
			name:     "ConfigMap-only key on an Ingress",
			ing:      []string{"haproxy.org/timeout-tunnel=5s"},
			problems: []string{"Ingress ns/a AnnotationScope"},
			message:  "annotation haproxy.org/timeout-tunnel has no effect on an Ingress: timeout-tunnel is read from the configmap only; ignored",
		},
		{
			name:     "Ingress-only key on a Service",
			svc:      []string{"haproxy.org/ssl-redirect=true"},
			problems: []string{"Service ns/web AnnotationScope"},
			message:  "has no effect on a Service: ssl-redirect is read from the configmap or ingress only",
		},
		{
			name:     "extension key on a Service",
			svc:      []string{"perimeter.io/canary-weight=10"},
			problems: []string{"Service ns/web AnnotationScope"},
		},
		{
			name:     "unknown key",
			ing:      []string{"haproxy.com/load-balanse=leastconn"},
			problems: []string{"Ingress ns/a UnknownAnnotation"},
			message:  "annotation haproxy.com/load-balanse is not a key of this controller; ignored",
		},
		{
			name:     "unknown extension key",
			svc:      []string{"perimeter.io/canary=on"},
			problems: []string{"Service ns/web UnknownAnnotation"},
		},
		{
			name:     "extension key under the peer's prefix",
			ing:      []string{"haproxy.org/canary-weight=10"},
			problems: []string{"Ingress ns/a UnknownAnnotation"},
			message:  "canary-weight takes the prefix perimeter.io/",
		},
		{name: "the class annotation is read elsewhere", ing: []string{"haproxy.org/ingress.class="}},
		{name: "unknown keys under the shared legacy prefix are other controllers'", ing: []string{"ingress.kubernetes.io/whitelist-source-range=10.0.0.0/8"}},
		{name: "other controllers' prefixes", ing: []string{"nginx.ingress.kubernetes.io/rewrite-target=/"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ing := webIngress("a", 0, append([]string{"haproxy.org/load-balance=leastconn"}, tt.ing...)...)
			b, problems := backendFor(t, nil, append([]string{"haproxy.org/check=false"}, tt.svc...), ing)
			if b.Balance != "leastconn" || b.Check {
				t.Errorf("the object's valid settings must still apply: balance=%s check=%t", b.Balance, b.Check)
			}
			got := problemsOf(&Desired{Problems: problems})
			if !slices.Equal(got, tt.problems) {
				t.Fatalf("problems %v, want %v", got, tt.problems)
			}
			if tt.message != "" && !strings.Contains(problems[0].Message, tt.message) {
				t.Errorf("message %q lacks %q", problems[0].Message, tt.message)
			}
		})
	}
}

// TestLegacyPrefix: ingress.kubernetes.io/ is also ingress-nginx's and
// haproxy-ingress's prefix. A value valid for the key is read as ours; one
// that is not is theirs: reported, ignored, and never fails closed.
func TestLegacyPrefix(t *testing.T) {
	b, problems := backendFor(t, nil, nil, webIngress("a", 0, "ingress.kubernetes.io/auth-type=basic", "ingress.kubernetes.io/auth-secret=htpasswd"))
	if b.Features.Deny != 0 || b.Features.AuthRealm != "" {
		t.Errorf("ingress-nginx's auth-type closed the backend: %+v", b.Features)
	}
	if got := problemsOf(&Desired{Problems: problems}); !slices.Contains(got, "Ingress ns/a ForeignAnnotation") {
		t.Errorf("problems %v, want a ForeignAnnotation", got)
	}
	b, _ = backendFor(t, nil, nil, webIngress("a", 0, "ingress.kubernetes.io/load-balance=leastconn"))
	if b.Balance != "leastconn" {
		t.Errorf("a valid value under the legacy prefix is ours: balance %s", b.Balance)
	}
	// Under our own prefix an invalid security key still fails closed.
	b, problems = backendFor(t, nil, nil, webIngress("a", 0, "haproxy.org/auth-type=basic"))
	if b.Features.Deny == 0 {
		t.Errorf("haproxy.org/auth-type=basic must fail closed: %+v", b.Features)
	}
	if got := problemsOf(&Desired{Problems: problems}); !slices.Contains(got, "Ingress ns/a InvalidAnnotation") {
		t.Errorf("problems %v, want an InvalidAnnotation", got)
	}
}

// TestTimeoutServerScopes: timeout-server from the ConfigMap is the
// defaults section's; on an Ingress or a Service it is the backend's own,
// the Service's beating the Ingress's.
func TestTimeoutServerScopes(t *testing.T) {
	tests := []struct {
		name          string
		cm, svc, ing  []string
		global, local time.Duration
	}{
		{name: "default", global: 50 * time.Second},
		{name: "configmap", cm: []string{"timeout-server=1m"}, global: time.Minute},
		{name: "ingress", cm: []string{"timeout-server=1m"}, ing: []string{"haproxy.org/timeout-server=5s"}, global: time.Minute, local: 5 * time.Second},
		{name: "service beats ingress", svc: []string{"haproxy.com/timeout-server=7s"}, ing: []string{"haproxy.org/timeout-server=5s"}, global: 50 * time.Second, local: 7 * time.Second},
		{name: "invalid on the ingress", ing: []string{"haproxy.org/timeout-server=soon"}, global: 50 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var cm *corev1.ConfigMap
			if tt.cm != nil {
				cm = configMap(tt.cm...)
			}
			svc := service("ns", "web", svcPort("", 80, 8080))
			svc.Annotations = annotations(nil, tt.svc...)
			d := Build(&Snapshot{Ingresses: []*networkingv1.Ingress{webIngress("a", 0, tt.ing...)}, Services: []*corev1.Service{svc}, ConfigMap: cm}, Options{})
			b := backendByName(t, d, "ns_web_80")
			if d.Global.TimeoutServer != tt.global || b.Features.TimeoutServer != tt.local {
				t.Errorf("global %s backend %s, want %s %s (problems %v)", d.Global.TimeoutServer, b.Features.TimeoutServer, tt.global, tt.local, d.Problems)
			}
		})
	}
}

// TestServerSlotsScopes: scale-server-slots (and its aliases) on a Service
// sizes that Service's backends; on an Ingress it has no effect and says so.
func TestServerSlotsScopes(t *testing.T) {
	b, problems := backendFor(t, configMap("server-slots=20"), nil, webIngress("a", 0))
	if b.Slots != 20 || len(problems) != 0 {
		t.Errorf("ConfigMap server-slots: slots %d problems %v, want 20", b.Slots, problems)
	}
	b, problems = backendFor(t, configMap("server-slots=20"), []string{"haproxy.org/scale-server-slots=7"}, webIngress("a", 0))
	if b.Slots != 7 || len(problems) != 0 {
		t.Errorf("Service scale-server-slots: slots %d problems %v, want 7", b.Slots, problems)
	}
	b, problems = backendFor(t, nil, []string{"haproxy.org/server-slots=9"}, webIngress("a", 0, "haproxy.org/scale-server-slots=3"))
	if b.Slots != 9 {
		t.Errorf("Service server-slots: slots %d, want 9", b.Slots)
	}
	if got := problemsOf(&Desired{Problems: problems}); !slices.Equal(got, []string{"Ingress ns/a AnnotationScope"}) {
		t.Errorf("problems %v, want the Ingress's scale-server-slots reported", got)
	}
}
