package model

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

func TestSettingsTable(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range Settings() {
		for _, n := range s.names() {
			if seen[n] {
				t.Errorf("key %s defined twice", n)
			}
			seen[n] = true
		}
		if s.Scopes == 0 || s.Type == "" || s.Doc == "" {
			t.Errorf("%s: scopes, type and doc are required", s.Name)
		}
		switch s.Target {
		case TargetBackend:
			if s.setBackend == nil {
				t.Errorf("%s: backend setting without setter", s.Name)
			}
		case TargetGlobal:
			// An Ingress or a Service may override a global setting only
			// for its own backend.
			if s.setGlobal == nil || s.Scopes&ScopeConfigMap == 0 || s.Scopes != ScopeConfigMap && s.setBackend == nil {
				t.Errorf("%s: global settings come from the ConfigMap, or set the backend from an annotation", s.Name)
			}
		case TargetTLS:
			if s.check == nil {
				t.Errorf("%s: TLS setting without parser", s.Name)
			}
		case TargetCanary:
			if s.check == nil || s.Scopes != ScopeIngress || !slices.Equal(s.Prefixes, []string{ExtensionPrefix}) {
				t.Errorf("%s: canary settings are Ingress annotations with the extension prefix alone", s.Name)
			}
		case TargetRouteACL:
			if s.check == nil || s.Scopes != ScopeService {
				t.Errorf("%s: route-acl is a Service annotation", s.Name)
			}
		default:
			t.Errorf("%s: no target", s.Name)
		}
		if s.Default != "" {
			if err := s.check(s.Default); err != nil {
				t.Errorf("%s: default %q invalid: %v", s.Name, s.Default, err)
			}
		}
		prefixes := AnnotationPrefixes
		if s.Prefixes != nil {
			prefixes = s.Prefixes
		}
		if want := len(prefixes) * len(s.names()); len(s.annotations) != want {
			t.Errorf("%s: %d annotation keys, want %d", s.Name, len(s.annotations), want)
		}
	}
}

// backendFor builds one Ingress (or two) routing to Service ns/web port 80
// and returns that backend with the problems.
func backendFor(t *testing.T, cm *corev1.ConfigMap, svcAnn []string, ings ...*networkingv1.Ingress) (*Backend, []Problem) {
	t.Helper()
	svc := service("ns", "web", svcPort("", 80, 8080))
	svc.Annotations = annotations(nil, svcAnn...)
	d := Build(&Snapshot{Ingresses: ings, Services: []*corev1.Service{svc}, ConfigMap: cm}, Options{})
	return backendByName(t, d, "ns_web_80"), d.Problems
}

func webIngress(name string, age int, ann ...string) *networkingv1.Ingress {
	return withAnnotations(ingress("ns", name, age, rule(name+".example", path("/", "Prefix", "web", 80))), ann...)
}

func TestBackendSettingScopes(t *testing.T) {
	tests := []struct {
		name     string
		cm       []string
		svc      []string
		ings     []*networkingv1.Ingress
		balance  string
		check    bool
		interval time.Duration
		ff       bool
		problems []string
	}{
		{
			name: "defaults", ings: []*networkingv1.Ingress{webIngress("a", 0)},
			balance: "roundrobin", check: true, ff: true,
		},
		{
			name: "configmap", cm: []string{"load-balance=leastconn", "check=disabled", "check-interval=500ms", "forwarded-for=OFF"},
			ings:    []*networkingv1.Ingress{webIngress("a", 0)},
			balance: "leastconn", interval: 500 * time.Millisecond,
		},
		{
			name: "ingress beats configmap", cm: []string{"load-balance=leastconn", "check-interval=5s"},
			ings:    []*networkingv1.Ingress{webIngress("a", 0, "haproxy.org/load-balance=source", "ingress.kubernetes.io/check-interval=2s")},
			balance: "source", check: true, ff: true, interval: 2 * time.Second,
		},
		{
			name: "service beats ingress", cm: []string{"load-balance=leastconn"},
			svc:     []string{"haproxy.com/load-balance=hdr(X-Tenant)", "haproxy.org/check=false"},
			ings:    []*networkingv1.Ingress{webIngress("a", 0, "haproxy.org/load-balance=source", "haproxy.org/check=true")},
			balance: "hdr(X-Tenant)", ff: true,
		},
		{
			name: "haproxy.org prefix beats the others on one object",
			ings: []*networkingv1.Ingress{webIngress("a", 0,
				"haproxy.com/load-balance=first", "haproxy.org/load-balance=uri", "ingress.kubernetes.io/load-balance=random")},
			balance: "uri", check: true, ff: true,
		},
		{
			name: "invalid ingress value falls back to configmap", cm: []string{"load-balance=leastconn"},
			ings:    []*networkingv1.Ingress{webIngress("a", 0, "haproxy.org/load-balance=fastest")},
			balance: "leastconn", check: true, ff: true,
			problems: []string{"Ingress ns/a InvalidAnnotation"},
		},
		{
			name: "invalid service value falls back to ingress",
			svc:  []string{"haproxy.org/load-balance=hdr(bad header)", "haproxy.org/check-interval=-1s"},
			ings: []*networkingv1.Ingress{webIngress("a", 0, "haproxy.org/load-balance=static-rr")},
			// check-interval invalid on the Service: nothing below sets it.
			balance: "static-rr", check: true, ff: true,
			problems: []string{"Service ns/web InvalidAnnotation", "Service ns/web InvalidAnnotation"},
		},
		{
			name: "invalid configmap value falls back to default", cm: []string{"load-balance=weighted", "check=maybe"},
			ings:    []*networkingv1.Ingress{webIngress("a", 0)},
			balance: "roundrobin", check: true, ff: true,
			problems: []string{"ConfigMap haproxy-controller/haproxy-kubernetes-ingress InvalidConfigMapKey",
				"ConfigMap haproxy-controller/haproxy-kubernetes-ingress InvalidConfigMapKey"},
		},
		{
			name: "two Ingresses disagree: the oldest keeps its own settings",
			ings: []*networkingv1.Ingress{
				webIngress("young", 9, "haproxy.org/load-balance=leastconn", "haproxy.org/check-interval=3s"),
				webIngress("old", 1, "haproxy.org/load-balance=source"),
			},
			// The young one gets a variant of its own (TestVariants):
			// nothing of it reaches the old one's backend.
			balance: "source", check: true, ff: true,
		},
		{
			name: "two Ingresses agree: no conflict",
			ings: []*networkingv1.Ingress{
				webIngress("young", 9, "haproxy.org/load-balance=source"),
				webIngress("old", 1, "haproxy.org/load-balance=source"),
			},
			balance: "source", check: true, ff: true,
		},
		{
			name: "an invalid value on the oldest is dropped, not taken from a younger one",
			ings: []*networkingv1.Ingress{
				webIngress("young", 9, "haproxy.org/load-balance=leastconn"),
				webIngress("old", 1, "haproxy.org/load-balance=nope"),
			},
			balance: "roundrobin", check: true, ff: true,
			problems: []string{"Ingress ns/old InvalidAnnotation"},
		},
		{
			name:    "values are trimmed",
			ings:    []*networkingv1.Ingress{webIngress("a", 0, "haproxy.org/load-balance= first\n")},
			balance: "first", check: true, ff: true,
		},
		{
			name:    "ConfigMap-only key on an Ingress is ignored, and reported",
			ings:    []*networkingv1.Ingress{webIngress("a", 0, "haproxy.org/servers-increment=5")},
			balance: "roundrobin", check: true, ff: true,
			problems: []string{"Ingress ns/a AnnotationScope"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var cm *corev1.ConfigMap
			if tt.cm != nil {
				cm = configMap(tt.cm...)
			}
			b, problems := backendFor(t, cm, tt.svc, tt.ings...)
			if b.Balance != tt.balance || b.Check != tt.check || b.CheckInterval != tt.interval || b.ForwardedFor != tt.ff {
				t.Errorf("got balance=%s check=%t interval=%s forwarded-for=%t; want %s %t %s %t",
					b.Balance, b.Check, b.CheckInterval, b.ForwardedFor, tt.balance, tt.check, tt.interval, tt.ff)
			}
			got := problemsOf(&Desired{Problems: problems})
			if !slices.Equal(got, tt.problems) {
				t.Errorf("problems %v, want %v", got, tt.problems)
			}
			for _, p := range problems {
				if strings.Contains(p.Message, "\n") {
					t.Errorf("multi-line message %q", p.Message)
				}
			}
		})
	}
}

func TestProblemMessages(t *testing.T) {
	_, problems := backendFor(t, configMap("check-interval=soon"), []string{"haproxy.org/load-balance=hdr(x y)"},
		webIngress("a", 0, "haproxy.com/forwarded-for=maybe"))
	want := []string{
		`key check-interval="soon": not a duration (want an integer with unit ms, s, m, h or d, e.g. 500ms); ignored; HAProxy's default applies`,
		`annotation haproxy.com/forwarded-for="maybe": not a boolean (want true, false, on, off, enabled or disabled); ignored; the configmap value or the default "true" applies`,
		`annotation haproxy.org/load-balance="hdr(x y)": header name "x y" has a character outside [A-Za-z0-9-]; ignored; the configmap or ingress value or the default "roundrobin" applies`,
	}
	var got []string
	for _, p := range problems {
		got = append(got, p.Message)
	}
	if !slices.Equal(got, want) {
		t.Errorf("messages:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestGlobalSettings(t *testing.T) {
	d := Build(&Snapshot{ConfigMap: configMap(
		"maxconn=5000", "nbthread=2", "hard-stop-after=30m", "ssl-redirect=OFF",
		"timeout-client=50s", "timeout-connect=5s", "timeout-server=50000", "timeout-http-request=5s",
		"timeout-http-keep-alive=1m", "timeout-queue=5s", "timeout-tunnel=1h",
	)}, Options{})
	want := Global{
		Maxconn: 5000, Nbthread: 2, HardStopAfter: 30 * time.Minute, MworkerMaxReloads: 50,
		TimeoutClient: 50 * time.Second, TimeoutConnect: 5 * time.Second, TimeoutServer: 50 * time.Second,
		TimeoutHTTPRequest: 5 * time.Second, TimeoutHTTPKeepAlive: time.Minute, TimeoutQueue: 5 * time.Second,
		TimeoutTunnel: time.Hour,
	}
	if d.Global != want || len(d.Problems) != 0 {
		t.Fatalf("global %+v problems %v\nwant %+v", d.Global, d.Problems, want)
	}
	d = Build(&Snapshot{ConfigMap: configMap("ssl-redirect=Enabled", "maxconn=0", "nbthread=two", "timeout-client=1.5s")}, Options{})
	if !d.Global.SSLRedirect || d.Global.Maxconn != 0 || d.Global.Nbthread != 0 || d.Global.TimeoutClient != DefaultGlobal().TimeoutClient {
		t.Fatalf("global %+v", d.Global)
	}
	if len(d.Problems) != 3 {
		t.Fatalf("want 3 problems, got %v", d.Problems)
	}
}

func TestServersIncrementAlias(t *testing.T) {
	for _, tt := range []struct {
		kv   []string
		want int
	}{
		{[]string{"scale-server-slots=7"}, 7},
		{[]string{"servers-increment=5", "scale-server-slots=7"}, 5},
		// Out of range: unset, slots sized to need.
		{[]string{"servers-increment=0"}, 4},
		{[]string{"servers-increment=1001"}, 4},
	} {
		b, _ := backendFor(t, configMap(tt.kv...), nil, webIngress("a", 0))
		if b.Slots != tt.want {
			t.Errorf("%v: %d slots, want %d", tt.kv, b.Slots, tt.want)
		}
	}
}

func TestParsers(t *testing.T) {
	type c struct {
		in  string
		ok  bool
		out any
	}
	run := func(name string, parse func(string) (any, error), cases []c) {
		for _, tc := range cases {
			v, err := parse(tc.in)
			if (err == nil) != tc.ok || tc.ok && v != tc.out {
				t.Errorf("%s(%q) = %v, %v; want %v ok=%t", name, tc.in, v, err, tc.out, tc.ok)
			}
		}
	}
	wrap := func(f func(string) (any, error)) func(string) (any, error) { return f }
	run("bool", wrap(func(s string) (any, error) { return boolParser().parse(s) }), []c{
		{"true", true, true}, {"TRUE", true, true}, {"on", true, true}, {"Enabled", true, true},
		{"false", true, false}, {"OFF", true, false}, {"disabled", true, false},
		{"yes", false, nil}, {"1", false, nil}, {"", false, nil},
	})
	run("duration", wrap(func(s string) (any, error) { return durationParser().parse(s) }), []c{
		{"2s", true, 2 * time.Second}, {"500ms", true, 500 * time.Millisecond}, {"1500", true, 1500 * time.Millisecond},
		{"5m", true, 5 * time.Minute}, {"1h", true, time.Hour}, {"2d", true, 48 * time.Hour}, {"3000us", true, 3 * time.Millisecond},
		{"24d", true, 24 * 24 * time.Hour}, {"25d", false, nil}, {"1500us", false, nil},
		{"0s", false, nil}, {"-1s", false, nil}, {"1.5s", false, nil}, {"1m30s", false, nil}, {"s", false, nil},
		{"", false, nil}, {"2 s", false, nil}, {"99999999999999999999s", false, nil},
	})
	run("int", wrap(func(s string) (any, error) { return intRange(1, 1000).parse(s) }), []c{
		{"1", true, 1}, {"1000", true, 1000}, {"0", false, nil}, {"1001", false, nil}, {"-5", false, nil},
		{"+5", false, nil}, {"5 ", false, nil}, {"", false, nil}, {"0x10", false, nil},
	})
	run("enum", wrap(func(s string) (any, error) { return enumParser("a", "b").parse(s) }), []c{
		{"a", true, "a"}, {"b", true, "b"}, {"A", false, nil}, {"", false, nil},
	})
	run("balance", wrap(func(s string) (any, error) { return balanceParser().parse(s) }), []c{
		{"roundrobin", true, "roundrobin"}, {"static-rr", true, "static-rr"}, {"leastconn", true, "leastconn"},
		{"first", true, "first"}, {"source", true, "source"}, {"random", true, "random"}, {"uri", true, "uri"},
		{"hdr(Host)", true, "hdr(Host)"}, {"hdr(X-Forwarded-For)", true, "hdr(X-Forwarded-For)"},
		{"hdr()", false, nil}, {"hdr(Host", false, nil}, {"hdr(a b)", false, nil}, {"hdr(a)x", false, nil},
		{"hdr(a\n)", false, nil}, {"url_param(x)", false, nil}, {"roundrobin\nserver x", false, nil}, {"RoundRobin", false, nil},
	})
}

// TestHandlesRegistered checks that every handle is bound to the table
// entry of its key, so reading through it reads that key.
func TestHandlesRegistered(t *testing.T) {
	for name, index := range map[string]int{
		"ssl-redirect": sslRedirect.index, "ssl-redirect-code": sslRedirectCode.index,
		"ssl-redirect-port": sslRedirectPort.index, "ssl-certificate": sslCertificate.index,
		"client-ca": clientCA.index, "canary-service": canaryService.index,
		"canary-service-port": canaryServicePort.index, "canary-weight": canaryWeight.index,
	} {
		if index < 0 || settings[index].Name != name {
			t.Errorf("handle of %s is bound to index %d", name, index)
		}
	}
}

// TestTargetNames checks that every target a setting uses has a name.
func TestTargetNames(t *testing.T) {
	for _, s := range Settings() {
		if s.Target.String() == "unknown" {
			t.Errorf("%s: target %d has no name", s.Name, s.Target)
		}
	}
}
