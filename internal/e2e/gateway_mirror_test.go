package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// mirrorCopy is a request a mirror pod received.
type mirrorCopy struct {
	method, uri, token, set, body string
}

// mirrorRecorder is the handler of a mirror pod: it keeps every request.
type mirrorRecorder struct {
	mu   sync.Mutex
	seen []mirrorCopy
	// stall, when not nil, holds every answer until it is closed.
	stall chan struct{}
}

func (m *mirrorRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	m.mu.Lock()
	m.seen = append(m.seen, mirrorCopy{method: r.Method, uri: r.RequestURI, token: r.Header.Get("X-Mirror-Token"), set: r.Header.Get("X-Set"), body: string(body)})
	m.mu.Unlock()
	if m.stall != nil {
		select {
		case <-m.stall:
		case <-r.Context().Done():
		}
	}
	// What the mirror answers must never reach the client.
	w.Header().Set("X-Pod", "mirror")
	w.WriteHeader(http.StatusTeapot)
}

// copyOf is the copy carrying token, if one arrived.
func (m *mirrorRecorder) copyOf(token string) (mirrorCopy, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := slices.IndexFunc(m.seen, func(c mirrorCopy) bool { return c.token == token })
	if i < 0 {
		return mirrorCopy{}, false
	}
	return m.seen[i], true
}

// withPrefix counts the copies whose request URI starts with prefix.
func (m *mirrorRecorder) withPrefix(prefix string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, c := range m.seen {
		if strings.HasPrefix(c.uri, prefix) {
			n++
		}
	}
	return n
}

// TestGatewayHTTPRouteRequestMirror: RequestMirror on real HAProxy. The
// client gets the primary's answer while the mirror Service's pod gets a
// copy (method, path and query, headers, body); two mirrors on one rule
// both get theirs; a mirror of percent 0 sends nothing; and moving the
// mirror Service's endpoint to another pod moves the copies without a
// reload. A mirror that never answers does not delay the client.
func TestGatewayHTTPRouteRequestMirror(t *testing.T) {
	e := newEnv(t)
	installGatewayCRDs(t, e)
	main := testenv.StartPod(t, testenv.PodOptions{Name: "gwm-main-0", IP: "198.18.203.10"})
	rec0, rec1, rec2 := &mirrorRecorder{}, &mirrorRecorder{}, &mirrorRecorder{}
	stalled := &mirrorRecorder{stall: make(chan struct{})}
	shadow0 := testenv.StartPod(t, testenv.PodOptions{Name: "gwm-shadow-0", IP: "198.18.203.20", Handler: rec0})
	shadow1 := testenv.StartPod(t, testenv.PodOptions{Name: "gwm-shadow-1", IP: "198.18.203.21", Handler: rec1})
	audit := testenv.StartPod(t, testenv.PodOptions{Name: "gwm-audit-0", IP: "198.18.203.30", Handler: rec2})
	e.service("main", nil, main)
	shadow := e.service("shadow", nil, shadow0)
	e.service("audit", nil, audit)
	e.service("stalled", nil, testenv.StartPod(t, testenv.PodOptions{Name: "gwm-stalled-0", IP: "198.18.203.40", Handler: stalled}))
	// Registered after the pod, so it runs before the pod's shutdown,
	// which waits for the held answers.
	t.Cleanup(func() { close(stalled.stall) })
	d, gw, _, _ := e.gatewayDaemon()
	ctx := context.Background()

	ref := func(name string) gwv1.BackendObjectReference {
		return gwv1.BackendObjectReference{Name: gwv1.ObjectName(name), Port: ptrTo(gwv1.PortNumber(80))}
	}
	backend := []gwv1.HTTPBackendRef{{BackendRef: gwv1.BackendRef{BackendObjectReference: ref("main")}}}
	prefix := func(p string) []gwv1.HTTPRouteMatch {
		return []gwv1.HTTPRouteMatch{{Path: &gwv1.HTTPPathMatch{Type: ptrTo(gwv1.PathMatchPathPrefix), Value: ptrTo(p)}}}
	}
	mirror := func(name string, percent *int32) gwv1.HTTPRouteFilter {
		return gwv1.HTTPRouteFilter{Type: gwv1.HTTPRouteFilterRequestMirror, RequestMirror: &gwv1.HTTPRequestMirrorFilter{BackendRef: ref(name), Percent: percent}}
	}
	r := &gwv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Name: "mirror", Namespace: e.ns},
		Spec: gwv1.HTTPRouteSpec{
			CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "edge"}}},
			Hostnames:       []gwv1.Hostname{"mirror.example.com"},
			Rules: []gwv1.HTTPRouteRule{
				{Matches: prefix("/copy"), BackendRefs: backend, Filters: []gwv1.HTTPRouteFilter{
					{Type: gwv1.HTTPRouteFilterRequestHeaderModifier, RequestHeaderModifier: &gwv1.HTTPHeaderFilter{
						Set: []gwv1.HTTPHeader{{Name: "X-Set", Value: "by-route"}}}},
					mirror("shadow", nil),
				}},
				{Matches: prefix("/two"), BackendRefs: backend, Filters: []gwv1.HTTPRouteFilter{mirror("shadow", nil), mirror("audit", ptrTo(int32(100)))}},
				{Matches: prefix("/never"), BackendRefs: backend, Filters: []gwv1.HTTPRouteFilter{mirror("shadow", ptrTo(int32(0)))}},
				{Matches: prefix("/stalled"), BackendRefs: backend, Filters: []gwv1.HTTPRouteFilter{mirror("stalled", nil)}},
			},
		},
	}
	if _, err := gw.GatewayV1().HTTPRoutes(e.ns).Create(ctx, r, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	n := 0
	// send makes one request with a token of its own and checks that the
	// client gets the primary's answer.
	send := func(method, path, body string) (string, error) {
		n++
		token := fmt.Sprintf("t%d", n)
		req, err := http.NewRequest(method, fmt.Sprintf("http://127.0.0.1:%d%s", d.httpPort, path), strings.NewReader(body))
		if err != nil {
			return "", err
		}
		req.Host = "mirror.example.com"
		req.Header.Set("X-Mirror-Token", token)
		resp, err := client.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		if _, err := io.ReadAll(resp.Body); err != nil {
			return "", err
		}
		if resp.StatusCode != 200 || resp.Header.Get("X-Pod") != "gwm-main-0" {
			return "", fmt.Errorf("%s %s: status %d from %q, want 200 from gwm-main-0", method, path, resp.StatusCode, resp.Header.Get("X-Pod"))
		}
		return token, nil
	}
	// mirrored sends requests until one's copy reaches rec.
	mirrored := func(rec *mirrorRecorder, method, path, body string) mirrorCopy {
		t.Helper()
		var c mirrorCopy
		testenv.Eventually(t, 20*time.Second, func() error {
			token, err := send(method, path, body)
			if err != nil {
				return err
			}
			return testenv.Poll(ctx, 2*time.Second, func() error {
				var ok bool
				if c, ok = rec.copyOf(token); !ok {
					return fmt.Errorf("no copy of %s %s (%s)", method, path, token)
				}
				return nil
			})
		})
		return c
	}

	c := mirrored(rec0, http.MethodPost, "/copy/a?x=1", "payload")
	// The copy is the request as the route's filters made it.
	if c.method != http.MethodPost || c.uri != "/copy/a?x=1" || c.body != "payload" || c.set != "by-route" {
		t.Errorf("copy: %s %s X-Set %q body %q, want POST /copy/a?x=1 X-Set \"by-route\" body \"payload\"", c.method, c.uri, c.set, c.body)
	}

	// Two mirrors: each gets its copy of the same request.
	c = mirrored(rec0, http.MethodGet, "/two", "")
	testenv.Eventually(t, 5*time.Second, func() error {
		if _, ok := rec2.copyOf(c.token); !ok {
			return fmt.Errorf("the second mirror got no copy of %s", c.token)
		}
		return nil
	})

	// Percent 0: nothing. The requests go first; a copy sent after them
	// arriving means theirs would have had their chance.
	for range 20 {
		if _, err := send(http.MethodGet, "/never", ""); err != nil {
			t.Fatal(err)
		}
	}
	mirrored(rec0, http.MethodGet, "/copy/after-never", "")
	if got := rec0.withPrefix("/never"); got != 0 {
		t.Errorf("percent 0 mirrored %d requests", got)
	}

	// A mirror that takes the copy and never answers: the client's answer
	// does not wait for it. Waiting would take the script's timeout of a
	// second.
	mirrored(stalled, http.MethodGet, "/stalled/first", "")
	for range 5 {
		start := time.Now()
		if _, err := send(http.MethodGet, "/stalled", ""); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took > 800*time.Millisecond {
			t.Errorf("a request whose mirror does not answer took %v", took)
		}
	}

	// The mirror's endpoint moves: a runtime change, and the copies follow.
	before := d.reloads()
	shadow.SetEndpoints(t, shadow1.Endpoint())
	mirrored(rec1, http.MethodGet, "/copy/moved", "")
	moved := rec0.withPrefix("/copy/moved")
	var tokens []string
	for range 5 {
		token, err := send(http.MethodGet, "/copy/settled", "")
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, token)
	}
	testenv.Eventually(t, 5*time.Second, func() error {
		for _, tk := range tokens {
			if _, ok := rec1.copyOf(tk); !ok {
				return fmt.Errorf("no copy of %s at the new endpoint", tk)
			}
		}
		return nil
	})
	if got := rec0.withPrefix("/copy/settled"); got != 0 {
		t.Errorf("the old endpoint still got %d copies once the new one did", got)
	}
	if after := d.reloads(); after != before {
		t.Errorf("moving the mirror's endpoint reloaded HAProxy %d times", after-before)
	}
	t.Logf("copies at the old endpoint while the move converged: %d", moved)

	testenv.Eventually(t, 20*time.Second, func() error {
		got, err := gw.GatewayV1().HTTPRoutes(e.ns).Get(ctx, "mirror", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(got.Status.Parents) != 1 {
			return fmt.Errorf("%d parent statuses", len(got.Status.Parents))
		}
		cs := got.Status.Parents[0].Conditions
		if err := hasCondition(cs, "Accepted", "True", "Accepted"); err != nil {
			return err
		}
		if slices.ContainsFunc(cs, func(c metav1.Condition) bool { return c.Type == "PartiallyInvalid" }) {
			return fmt.Errorf("conditions %v: PartiallyInvalid", cs)
		}
		return hasCondition(cs, "ResolvedRefs", "True", "ResolvedRefs")
	})
}
