package haproxy

import (
	"context"
	"log/slog"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// featureSnapshot is one Ingress (host web.example, path /) routing to
// Service ns/web port 80 with one endpoint, annotated with ingAnn, and the
// controller ConfigMap ns/cm with cmData.
func featureSnapshot(ingAnn, svcAnn, cmData map[string]string) *model.Snapshot {
	prefix := networkingv1.PathTypePrefix
	ready := true
	portName := "http"
	port := int32(8080)
	return &model.Snapshot{
		Ingresses: []*networkingv1.Ingress{{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", Annotations: ingAnn},
			Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{{
				Host: "web.example",
				IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
					Paths: []networkingv1.HTTPIngressPath{{
						Path: "/", PathType: &prefix,
						Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{
							Name: "web", Port: networkingv1.ServiceBackendPort{Number: 80}}},
					}},
				}},
			}}},
		}},
		Services: []*corev1.Service{{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", Annotations: svcAnn},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
		}},
		EndpointSlices: []*discoveryv1.EndpointSlice{{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "ns", Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: &portName, Port: &port}},
			Endpoints: []discoveryv1.Endpoint{{
				Addresses: []string{"198.18.80.10"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			}},
		}},
		ConfigMap: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm"}, Data: cmData},
	}
}

var allSnippets = model.Options{ConfigSnippets: []string{"global", "backend"}}

// renderFeature renders a snapshot into a fresh config directory and
// returns haproxy.cfg and the directory (with maps and error pages). It
// renders as Render does, without probing HAProxy each time.
func renderFeature(t testing.TB, s *model.Snapshot, o model.Options) (string, string, *model.Desired) {
	t.Helper()
	dir := t.TempDir()
	d := model.Build(s, o)
	opts, err := checkedOptions(Options{ConfigDir: dir, RuntimeDir: filepath.Join(dir, "run"), HTTPBindPort: 18080,
		IPv4BindAddress: "127.0.0.1", DisableIPv6: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	r := newRenderer(opts, pathsFor(opts), Version{Major: 2, Minor: 6, Features: map[string]bool{"PROMEX": true}})
	st, _ := desiredState(d)
	withSlots(emptyState(), st)
	cfg, err := r.config(st, nil)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	if err := syncFiles(dir, r.stateFiles(st, cfg, nil), diskFiles{}, true); err != nil {
		t.Fatal(err)
	}
	// The directory changes from call to call; comparisons must not see it.
	return strings.ReplaceAll(cfg, dir, "CONFIGDIR"), dir, d
}

// featureCheck runs `haproxy -c` on dir/haproxy.cfg (skipped with -short;
// a missing HAProxy fails the test: the suite is meant to run with it).
func featureCheck(t testing.TB, dir string) error {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: skipping haproxy -c")
	}
	prog, err := findProgram("")
	if err != nil {
		t.Fatal("haproxy not installed (apt-get install haproxy): ", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, prog, "-c", "-f", filepath.Join(dir, "haproxy.cfg")).CombinedOutput()
	if err != nil {
		return &checkError{Alerts: alertLines(string(out))}
	}
	return nil
}

// cfgTokens splits a haproxy.cfg line as HAProxy does: blanks separate
// words, '#' starts a comment, '\' escapes one character, single quotes
// take everything literally, double quotes honour '\'. It also returns
// the comment.
func cfgTokens(line string) (tokens []string, comment string) {
	var cur strings.Builder
	in := false
	flush := func() {
		if in {
			tokens = append(tokens, cur.String())
			cur.Reset()
			in = false
		}
	}
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == ' ' || c == '\t':
			flush()
		case c == '#':
			flush()
			return tokens, line[i:]
		case c == '\\' && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
			in = true
		case c == '\'':
			j := strings.IndexByte(line[i+1:], '\'')
			if j < 0 {
				j = len(line) - i - 1
			}
			cur.WriteString(line[i+1 : i+1+j])
			i += j + 1
			in = true
		case c == '"':
			in = true
			for i++; i < len(line) && line[i] != '"'; i++ {
				if line[i] == '\\' && i+1 < len(line) {
					i++
				}
				cur.WriteByte(line[i])
			}
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	flush()
	return tokens, ""
}

func sectionHeaders(cfg string) []string {
	var out []string
	for l := range strings.SplitSeq(cfg, "\n") {
		if l != "" && l[0] != ' ' && l[0] != '\t' {
			out = append(out, l)
		}
	}
	return out
}

// featureDirectives are the directives the features add.
var featureDirectives = map[string]bool{
	"http-request": true, "http-response": true, "declare": true, "errorfile": true,
	"log": true, "log-format": true, "option": true,
}

// marker is what every payload tries to smuggle into a directive of its
// own, a comment, or a sample fetch.
const marker = "INJ"

func payloads(example string) []string {
	base := []string{
		"v\n" + marker + " on", "v\r\n" + marker + " on", "v\r" + marker,
		"v\" " + marker, "v' " + marker, "v # " + marker, "v#" + marker,
		"v\\\n" + marker, "v\\ " + marker, "v " + marker, "v\t" + marker, "v;" + marker,
		"v%[env(HOME)]" + marker, "v}" + marker + "{", "v\x00" + marker, "v\u2028" + marker,
		"\"" + marker + "\"", "'" + marker + "'", "\\" + marker,
		strings.Repeat("a", 70000) + marker,
	}
	if example == "" {
		return base
	}
	for _, tail := range []string{"\" " + marker, "' " + marker, " # " + marker, "\\", " " + marker, "%[env(HOME)]" + marker,
		"\n" + marker + " on", "\nbackend " + marker, "\n  frontend " + marker, "\n.if 1", "'\\'" + marker, strings.Repeat("é", 3000) + marker} {
		base = append(base, example+tail)
	}
	return base
}

// TestInjection tries hostile values in every setting and checks that none
// changes haproxy.cfg beyond its own field: the value is rejected (the
// configuration is unchanged), or it stays inside its own words. Snippets
// are raw directives by design: they must only stay inside their section.
// With HAProxy installed every changed configuration must pass `haproxy -c`.
func TestInjection(t *testing.T) {
	baseline, _, _ := renderFeature(t, featureSnapshot(nil, nil, nil), allSnippets)
	baseSections := sectionHeaders(baseline)
	baseDirectives := map[string]bool{}
	for l := range strings.SplitSeq(baseline, "\n") {
		if toks, _ := cfgTokens(l); len(toks) > 0 {
			baseDirectives[toks[0]] = true
		}
	}
	checked := 0
	seen := map[string]bool{}
	for _, s := range model.Settings() {
		ex := s.Example
		if ex == "" {
			ex = s.Default
		}
		snippet := strings.HasSuffix(s.Name, "-config-snippet")
		logFormat := s.Name == "log-format"
		for i, p := range payloads(ex) {
			var snap *model.Snapshot
			if s.Scopes&model.ScopeIngress != 0 {
				snap = featureSnapshot(map[string]string{s.Annotation(): p}, nil, nil)
			} else {
				snap = featureSnapshot(nil, nil, map[string]string{s.Name: p})
			}
			cfg, dir, _ := renderFeature(t, snap, allSnippets)
			if cfg == baseline {
				continue // rejected, or the same as the default
			}
			if got := sectionHeaders(cfg); !slices.Equal(got, baseSections) {
				t.Errorf("%s=%q (payload %d) changed the sections:\n%s", s.Name, trim(p), i, strings.Join(got, "\n"))
				continue
			}
			for n, line := range strings.Split(cfg, "\n") {
				if len(line) > 2000 {
					t.Errorf("%s (payload %d): line %d is %d characters long; HAProxy reads at most 2048", s.Name, i, n+1, len(line))
				}
				if snippet {
					continue
				}
				toks, comment := cfgTokens(line)
				if strings.Contains(comment, marker) {
					t.Errorf("%s=%q (payload %d): the value was cut by a comment: %s", s.Name, trim(p), i, line)
				}
				if len(toks) > 0 && !baseDirectives[toks[0]] && !featureDirectives[toks[0]] {
					t.Errorf("%s=%q (payload %d): directive %q injected: %s", s.Name, trim(p), i, toks[0], line)
				}
				for _, tok := range toks {
					if !logFormat && strings.Contains(strings.ReplaceAll(tok, "%%", ""), "%[env") {
						t.Errorf("%s=%q (payload %d): a sample fetch reached a log-format string: %s", s.Name, trim(p), i, line)
					}
				}
			}
			if snippet {
				continue // a snippet HAProxy refuses is quarantined by the driver
			}
			if testing.Short() || seen[cfg] {
				continue
			}
			seen[cfg] = true
			checked++
			if err := featureCheck(t, dir); err != nil {
				t.Errorf("%s=%q (payload %d) was accepted but HAProxy rejects the configuration: %v", s.Name, trim(p), i, err)
			}
		}
	}
	t.Logf("%d accepted hostile values checked with haproxy -c", checked)
}

func trim(s string) string {
	if len(s) > 80 {
		return s[:40] + "..." + s[len(s)-20:]
	}
	return s
}

// TestFeatureRulesDefence feeds the renderer values the model would have
// refused: they never reach haproxy.cfg.
func TestFeatureRulesDefence(t *testing.T) {
	for _, h := range []model.HTTPRules{
		{RequestHeaders: []model.Header{{Name: "X-A", Value: "a\nbackend evil"}}},
		{RequestHeaders: []model.Header{{Name: "X A", Value: "a"}}},
		{ResponseHeaders: []model.Header{{Name: "X-A", Value: "a\r"}}},
		{SetHost: "a\nb"},
		{Redirect: "a\x00b"},
		{Captures: []string{"hdr(a) id 0\nbackend x"}},
		{Captures: []string{"hdr(a) len 1"}},
		{CORS: model.CORS{Enabled: true, Origins: []string{"http://a\nb"}}},
	} {
		if _, err := httpRules(h); err == nil {
			t.Errorf("httpRules(%+v) accepted a hostile value", h)
		}
	}
}

// TestSnippetFallback: a rejected backend first loses only its snippet,
// then falls back to its last good version.
func TestSnippetFallback(t *testing.T) {
	cur := emptyState()
	good := backendSpec{Name: "ns_web_80", Namespace: "ns", Service: "web", Slots: 2, Rules: "http-request set-header A 'b'"}
	cur.backends[good.Name] = &backend{spec: good}
	bad := good
	bad.Rules = "http-request set-header A 'c'"
	bad.Snippet = "http-response bogus"
	bad.SnippetFrom = model.ObjectRef{Kind: "Ingress", Namespace: "ns", Name: "tenant"}
	fb := fallbackSpec(cur, bad)
	want := bad
	want.Snippet = ""
	if fb != want {
		t.Fatalf("first fallback %+v, want the spec without its snippet", fb)
	}
	p := quarantineProblem(cur, bad, fb, "bogus")
	if !strings.Contains(p.Message, "snippet is disabled") {
		t.Fatalf("problem %q does not say the snippet is disabled", p.Message)
	}
	// The Event goes to the Ingress that set the snippet, not the Service.
	if p.Object != bad.SnippetFrom {
		t.Fatalf("problem on %+v, want %+v", p.Object, bad.SnippetFrom)
	}
	if fb2 := fallbackSpec(cur, fb); fb2 != good {
		t.Fatalf("second fallback %+v, want the last good version", fb2)
	}
}
