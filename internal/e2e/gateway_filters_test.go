package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// seenRequest is what the echo pod of the filter test saw.
type seenRequest struct {
	Host    string      `json:"host"`
	URI     string      `json:"uri"`
	Headers http.Header `json:"headers"`
}

// echoHandler answers with the request it saw, as JSON, and a header for
// ResponseHeaderModifier to remove.
func echoHandler(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Pod", name)
		w.Header().Set("X-Resp-Remove", "from-pod")
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(seenRequest{Host: r.Host, URI: r.RequestURI, Headers: r.Header})
	})
}

// TestGatewayHTTPRouteFilters: RequestHeaderModifier and
// ResponseHeaderModifier (set, add, remove), URLRewrite (hostname,
// ReplacePrefixMatch, ReplaceFullPath) and RequestRedirect (scheme,
// hostname, path, status code) on real HAProxy; an ExtensionRef filter is
// refused with UnsupportedValue (RequestMirror has its own test).
func TestGatewayHTTPRouteFilters(t *testing.T) {
	e := newEnv(t)
	pod := testenv.StartPod(t, testenv.PodOptions{Name: "gwf-echo-0", IP: "198.18.224.10", Handler: echoHandler("gwf-echo-0")})
	e.service("echo", nil, pod)
	d, gw, _, _ := e.gatewayDaemon()
	ctx := context.Background()
	backend := []gwv1.HTTPBackendRef{{BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{
		Name: "echo", Port: ptrTo(gwv1.PortNumber(80))}}}}
	prefix := func(p string) []gwv1.HTTPRouteMatch {
		return []gwv1.HTTPRouteMatch{{Path: &gwv1.HTTPPathMatch{Type: ptrTo(gwv1.PathMatchPathPrefix), Value: ptrTo(p)}}}
	}
	hdr := func(name, value string) gwv1.HTTPHeader {
		return gwv1.HTTPHeader{Name: gwv1.HTTPHeaderName(name), Value: value}
	}
	r := &gwv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Name: "filters", Namespace: e.ns},
		Spec: gwv1.HTTPRouteSpec{
			CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "edge"}}},
			Hostnames:       []gwv1.Hostname{"filters.example.com"},
			Rules: []gwv1.HTTPRouteRule{
				{Matches: prefix("/headers"), BackendRefs: backend, Filters: []gwv1.HTTPRouteFilter{
					{Type: gwv1.HTTPRouteFilterRequestHeaderModifier, RequestHeaderModifier: &gwv1.HTTPHeaderFilter{
						Set: []gwv1.HTTPHeader{hdr("X-Set", "set 100%")}, Add: []gwv1.HTTPHeader{hdr("X-Add", "added")}, Remove: []string{"X-Remove"}}},
					{Type: gwv1.HTTPRouteFilterResponseHeaderModifier, ResponseHeaderModifier: &gwv1.HTTPHeaderFilter{
						Set: []gwv1.HTTPHeader{hdr("X-Resp-Set", "rs")}, Add: []gwv1.HTTPHeader{hdr("X-Resp-Add", "ra")}, Remove: []string{"X-Resp-Remove"}}},
				}},
				{Matches: prefix("/rewrite"), BackendRefs: backend, Filters: []gwv1.HTTPRouteFilter{
					{Type: gwv1.HTTPRouteFilterURLRewrite, URLRewrite: &gwv1.HTTPURLRewriteFilter{
						Hostname: ptrTo(gwv1.PreciseHostname("rewritten.example.com")),
						Path:     &gwv1.HTTPPathModifier{Type: gwv1.PrefixMatchHTTPPathModifier, ReplacePrefixMatch: ptrTo("/new")}}},
				}},
				{Matches: prefix("/strip"), BackendRefs: backend, Filters: []gwv1.HTTPRouteFilter{
					{Type: gwv1.HTTPRouteFilterURLRewrite, URLRewrite: &gwv1.HTTPURLRewriteFilter{
						Path: &gwv1.HTTPPathModifier{Type: gwv1.PrefixMatchHTTPPathModifier, ReplacePrefixMatch: ptrTo("/")}}},
				}},
				{Matches: prefix("/full"), BackendRefs: backend, Filters: []gwv1.HTTPRouteFilter{
					{Type: gwv1.HTTPRouteFilterURLRewrite, URLRewrite: &gwv1.HTTPURLRewriteFilter{
						Path: &gwv1.HTTPPathModifier{Type: gwv1.FullPathHTTPPathModifier, ReplaceFullPath: ptrTo("/replaced")}}},
				}},
				{Matches: prefix("/secure"), Filters: []gwv1.HTTPRouteFilter{
					{Type: gwv1.HTTPRouteFilterRequestRedirect, RequestRedirect: &gwv1.HTTPRequestRedirectFilter{
						Scheme: ptrTo("https"), StatusCode: ptrTo(301)}},
				}},
				{Matches: prefix("/old"), Filters: []gwv1.HTTPRouteFilter{
					{Type: gwv1.HTTPRouteFilterRequestRedirect, RequestRedirect: &gwv1.HTTPRequestRedirectFilter{
						Hostname: ptrTo(gwv1.PreciseHostname("moved.example.com")),
						Path:     &gwv1.HTTPPathModifier{Type: gwv1.PrefixMatchHTTPPathModifier, ReplacePrefixMatch: ptrTo("/moved")}}},
				}},
				{Matches: prefix("/extension"), BackendRefs: backend, Filters: []gwv1.HTTPRouteFilter{
					{Type: gwv1.HTTPRouteFilterExtensionRef, ExtensionRef: &gwv1.LocalObjectReference{
						Group: "example.com", Kind: "Custom", Name: "custom"}},
				}},
			},
		},
	}
	if _, err := gw.GatewayV1().HTTPRoutes(e.ns).Create(ctx, r, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	seen := func(path string, hdr http.Header) (seenRequest, http.Header) {
		t.Helper()
		var s seenRequest
		var h http.Header
		testenv.Eventually(t, 10*time.Second, func() error {
			resp, err := d.do(http.MethodGet, "filters.example.com", path, hdr)
			if err != nil {
				return err
			}
			if resp.status != 200 || resp.header.Get("X-Pod") != "gwf-echo-0" {
				return fmt.Errorf("%s: status %d from %q", path, resp.status, resp.header.Get("X-Pod"))
			}
			h = resp.header
			return json.Unmarshal([]byte(resp.body), &s)
		})
		return s, h
	}
	s, h := seen("/headers", http.Header{"X-Remove": {"gone"}, "X-Set": {"client"}, "X-Add": {"client"}})
	if got := s.Headers.Values("X-Set"); len(got) != 1 || got[0] != "set 100%" {
		t.Errorf("X-Set seen as %q, want [\"set 100%%\"]", got)
	}
	if got := s.Headers.Values("X-Add"); len(got) != 2 || got[0] != "client" || got[1] != "added" {
		t.Errorf("X-Add seen as %q, want [client added]", got)
	}
	if got := s.Headers.Values("X-Remove"); len(got) != 0 {
		t.Errorf("X-Remove seen as %q, want none", got)
	}
	if h.Get("X-Resp-Set") != "rs" || h.Get("X-Resp-Add") != "ra" || h.Get("X-Resp-Remove") != "" {
		t.Errorf("response headers %v: want X-Resp-Set rs, X-Resp-Add ra, no X-Resp-Remove", h)
	}

	for _, c := range []struct{ path, host, uri string }{
		{"/rewrite/a?x=1", "rewritten.example.com", "/new/a?x=1"},
		{"/rewrite", "rewritten.example.com", "/new"},
		{"/strip/three", "filters.example.com", "/three"},
		{"/strip", "filters.example.com", "/"},
		{"/full/abc?q=2", "filters.example.com", "/replaced?q=2"},
	} {
		s, _ := seen(c.path, nil)
		if s.Host != c.host || s.URI != c.uri {
			t.Errorf("%s reached the pod as %s%s, want %s%s", c.path, s.Host, s.URI, c.host, c.uri)
		}
	}

	for _, c := range []struct {
		path     string
		status   int
		location string
	}{
		{"/secure/x?q=1", 301, "https://filters.example.com/secure/x?q=1"},
		{"/old/page", 302, fmt.Sprintf("http://moved.example.com:%d/moved/page", d.httpPort)},
	} {
		testenv.Eventually(t, 10*time.Second, func() error {
			resp, err := d.get("filters.example.com", c.path)
			if err != nil {
				return err
			}
			if resp.status != c.status || resp.header.Get("Location") != c.location {
				return fmt.Errorf("%s: %d Location %q, want %d %q", c.path, resp.status, resp.header.Get("Location"), c.status, c.location)
			}
			return nil
		})
	}

	// An ExtensionRef names nothing this controller knows: the rule is
	// left out.
	d.expect("filters.example.com", "/extension", 404, "")
	e.event("HTTPRoute", "filters", "UnsupportedRouteRule")
	testenv.Eventually(t, 20*time.Second, func() error {
		got, err := gw.GatewayV1().HTTPRoutes(e.ns).Get(ctx, "filters", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(got.Status.Parents) != 1 {
			return fmt.Errorf("%d parent statuses", len(got.Status.Parents))
		}
		return hasCondition(got.Status.Parents[0].Conditions, "PartiallyInvalid", "True", "UnsupportedValue")
	})
}
