package haproxy

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// sharedServiceSnapshot is featureSnapshot with one more Ingress per
// annotation set, each on its own host and routing to the same Service:
// Ingresses with different settings get their own backend variants.
func sharedServiceSnapshot(anns []map[string]string) *model.Snapshot {
	s := featureSnapshot(nil, nil, nil)
	base := s.Ingresses[0]
	for i, ann := range anns {
		ing := base.DeepCopy()
		ing.ObjectMeta = metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("t%d", i), Annotations: ann,
			CreationTimestamp: metav1.Unix(int64(i+1), 0)}
		ing.Spec.Rules[0].Host = fmt.Sprintf("t%d.example", i)
		s.Ingresses = append(s.Ingresses, ing)
	}
	return s
}

// TestModelAcceptedPassesHAProxy runs what the model accepts through the
// real `haproxy -c`: every setting's documented example (as an Ingress
// annotation where the setting has that scope, else as a ConfigMap key),
// and every allowed sample fetch and converter in request-capture,
// request-set-header and response-set-header. A value the model accepts
// must never need HAProxy to refuse it.
func TestModelAcceptedPassesHAProxy(t *testing.T) {
	var anns []map[string]string
	cm := map[string]string{}
	for _, s := range model.Settings() {
		if s.Example == "" || strings.HasSuffix(s.Name, "-config-snippet") {
			continue
		}
		if s.Scopes&model.ScopeIngress != 0 {
			anns = append(anns, map[string]string{s.Annotation(): s.Example})
		} else if s.Target == model.TargetGlobal || s.Target == model.TargetBackend {
			cm[s.Name] = s.Example
		}
	}
	chunks := func(list []string, n int) [][]string {
		var out [][]string
		for len(list) > n {
			out = append(out, list[:n])
			list = list[n:]
		}
		return append(out, list)
	}
	req, res := model.SampleExamples(model.SampleRequest), model.SampleExamples(model.SampleResponse)
	for _, c := range chunks(req, 16) {
		anns = append(anns, map[string]string{"haproxy.org/request-capture": strings.Join(c, "\n")})
	}
	header := func(list []string) string {
		var lines []string
		for i, e := range list {
			lines = append(lines, fmt.Sprintf("X-S%d v=%%[%s] 100%%", i, e))
		}
		return strings.Join(lines, "\n")
	}
	for _, c := range chunks(req, 32) {
		anns = append(anns, map[string]string{"haproxy.org/request-set-header": header(c)})
	}
	for _, c := range chunks(res, 32) {
		anns = append(anns, map[string]string{"haproxy.org/response-set-header": header(c)})
	}
	s := sharedServiceSnapshot(anns)
	s.ConfigMap.Data = cm
	cfg, dir, d := renderFeature(t, s, model.Options{})
	for _, p := range d.Problems {
		// Other problems are about objects the examples name (Secrets,
		// the canary Service) that the snapshot lacks.
		if p.Reason == model.ReasonInvalidAnnotation || p.Reason == model.ReasonInvalidConfigMapKey {
			t.Errorf("model refused its own example: %s %s: %s", p.Object.Name, p.Reason, p.Message)
		}
	}
	if n := strings.Count(cfg, "\nbackend ns_web_80__"); n < len(anns)/2 {
		t.Errorf("%d backend variants in haproxy.cfg, want one per distinct Ingress (%d Ingresses)", n, len(anns))
	}
	for _, e := range append(req, res...) {
		if !strings.Contains(cfg, e) {
			t.Errorf("sample %q is not in haproxy.cfg", e)
		}
	}
	if err := featureCheck(t, dir); err != nil {
		ce, _ := err.(*checkError)
		if ce != nil {
			for _, a := range ce.Alerts {
				t.Errorf("haproxy -c: %s", a)
			}
		}
		t.Fatalf("the model accepted values HAProxy rejects: %v", err)
	}
	t.Logf("%d Ingresses, %d request and %d response sample expressions, %d ConfigMap keys passed haproxy -c", len(anns), len(req), len(res), len(cm))
}

// TestVariantSnippetRejectedOnItsIngress: with backend snippets enabled,
// Ingress hostile sets one HAProxy rejects on a Service it shares with
// Ingress web. Only hostile's variant loses its snippet, and the
// ConfigRejected problem names hostile, not the Service: web's backend
// is untouched.
func TestVariantSnippetRejectedOnItsIngress(t *testing.T) {
	s := sharedServiceSnapshot([]map[string]string{{"haproxy.org/backend-config-snippet": "http-response no-such-action x"}})
	// No health checks: the endpoint is not reachable from here.
	s.ConfigMap.Data = map[string]string{"check": "false"}
	d := model.Build(s, allSnippets)
	var hostile *model.Backend
	for _, b := range d.Backends {
		if strings.HasPrefix(b.Name, "ns_web_80__") {
			hostile = b
		}
	}
	if hostile == nil || len(d.Backends) != 2 {
		t.Fatalf("want ns_web_80 and a variant for t0, got:\n%s", model.Dump(d))
	}
	if want := (model.ObjectRef{Kind: "Ingress", Namespace: "ns", Name: "t0"}); hostile.HTTP.SnippetFrom != want {
		t.Fatalf("snippet of %s set by %+v, want %+v", hostile.Name, hostile.HTTP.SnippetFrom, want)
	}
	h := startHAProxy(t, slog.New(slog.DiscardHandler), nil)
	res := applyOK(t, h.d, d)
	if len(res.Quarantined) != 1 {
		t.Fatalf("quarantined %v, want the variant's snippet alone", res.Quarantined)
	}
	p := res.Quarantined[0]
	if p.Object != hostile.HTTP.SnippetFrom || !strings.Contains(p.Message, hostile.Name) || !strings.Contains(p.Message, "snippet is disabled") {
		t.Errorf("problem %+v, want ConfigRejected on Ingress ns/t0 naming %s", p, hostile.Name)
	}
	cfg, err := os.ReadFile(h.d.paths.config)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(cfg), "no-such-action") || !strings.Contains(string(cfg), "\nbackend "+hostile.Name+" ") {
		t.Errorf("running config keeps the rejected snippet or lost the variant:\n%s", cfg)
	}
}
