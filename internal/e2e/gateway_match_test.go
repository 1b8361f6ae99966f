package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// matchRequest is one request of a match table and the pod that must
// answer it ("" for a 404).
type matchRequest struct {
	method, host, path string
	headers            map[string]string
	pod                string
}

func (d *daemon) expectMatch(t *testing.T, r matchRequest) {
	t.Helper()
	method := r.method
	if method == "" {
		method = http.MethodGet
	}
	h := http.Header{}
	for k, v := range r.headers {
		h.Set(k, v)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		resp, err := d.do(method, r.host, r.path, h)
		if err != nil {
			return err
		}
		want := 200
		if r.pod == "" {
			want = 404
		}
		if resp.status != want || resp.header.Get("X-Pod") != r.pod {
			return fmt.Errorf("%s %s%s %v: status %d from %q, want %d from %q",
				method, r.host, r.path, r.headers, resp.status, resp.header.Get("X-Pod"), want, r.pod)
		}
		return nil
	})
}

// TestGatewayHTTPRouteMatches: header, query parameter, method and
// RegularExpression path matches on real HAProxy, in the precedence the
// Gateway API specifies, laid out like the conformance tests
// HTTPRouteMatching, HTTPRouteMatchingAcrossRoutes and
// HTTPRouteHeaderMatching; three weighted backendRefs; then a new
// hostname for conditional matches without a reload.
func TestGatewayHTTPRouteMatches(t *testing.T) {
	e := newEnv(t)
	v1 := e.pods("gwm-v1", 221, 1)
	v2 := e.pods("gwm-v2", 222, 1)
	v3 := e.pods("gwm-v3", 223, 1)
	e.service("v1", nil, v1...)
	e.service("v2", nil, v2...)
	e.service("v3", nil, v3...)
	d, gw, _, _ := e.gatewayDaemon()
	ctx := context.Background()
	backend := func(svc string) []gwv1.HTTPBackendRef {
		return []gwv1.HTTPBackendRef{{BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{
			Name: gwv1.ObjectName(svc), Port: ptrTo(gwv1.PortNumber(80))}}}}
	}
	path := func(typ gwv1.PathMatchType, v string) *gwv1.HTTPPathMatch {
		return &gwv1.HTTPPathMatch{Type: ptrTo(typ), Value: ptrTo(v)}
	}
	header := func(name, value string) gwv1.HTTPHeaderMatch {
		return gwv1.HTTPHeaderMatch{Name: gwv1.HTTPHeaderName(name), Value: value}
	}
	route := func(name string, hosts []gwv1.Hostname, rules ...gwv1.HTTPRouteRule) {
		t.Helper()
		r := &gwv1.HTTPRoute{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
			Spec: gwv1.HTTPRouteSpec{
				CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "edge"}}},
				Hostnames:       hosts,
				Rules:           rules,
			},
		}
		if _, err := gw.GatewayV1().HTTPRoutes(e.ns).Create(ctx, r, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	route("matching", []gwv1.Hostname{"match.example.com"},
		gwv1.HTTPRouteRule{Matches: []gwv1.HTTPRouteMatch{
			{Path: path(gwv1.PathMatchExact, "/")},
			{Headers: []gwv1.HTTPHeaderMatch{header("version", "one")}},
		}, BackendRefs: backend("v1")},
		gwv1.HTTPRouteRule{Matches: []gwv1.HTTPRouteMatch{
			{Path: path(gwv1.PathMatchPathPrefix, "/v2")},
			{Headers: []gwv1.HTTPHeaderMatch{header("version", "two")}},
		}, BackendRefs: backend("v2")},
	)
	regex := ptrTo(gwv1.HeaderMatchRegularExpression)
	route("headers", []gwv1.Hostname{"headers.example.com"},
		gwv1.HTTPRouteRule{Matches: []gwv1.HTTPRouteMatch{{Headers: []gwv1.HTTPHeaderMatch{header("version", "one")}}}, BackendRefs: backend("v1")},
		gwv1.HTTPRouteRule{Matches: []gwv1.HTTPRouteMatch{{Headers: []gwv1.HTTPHeaderMatch{header("version", "two")}}}, BackendRefs: backend("v2")},
		gwv1.HTTPRouteRule{Matches: []gwv1.HTTPRouteMatch{{Headers: []gwv1.HTTPHeaderMatch{
			header("version", "two"), header("color", "orange")}}}, BackendRefs: backend("v1")},
		gwv1.HTTPRouteRule{Matches: []gwv1.HTTPRouteMatch{{
			Headers:     []gwv1.HTTPHeaderMatch{{Name: "color", Type: regex, Value: "red|bl.e"}},
			QueryParams: []gwv1.HTTPQueryParamMatch{{Name: "animal", Value: "whale"}},
			Method:      ptrTo(gwv1.HTTPMethodPost),
		}}, BackendRefs: backend("v3")},
		gwv1.HTTPRouteRule{Matches: []gwv1.HTTPRouteMatch{{Path: path(gwv1.PathMatchRegularExpression, `/img/[0-9]+\.png`)}}, BackendRefs: backend("v3")},
		gwv1.HTTPRouteRule{Matches: []gwv1.HTTPRouteMatch{{Method: ptrTo(gwv1.HTTPMethodPut)}}, BackendRefs: backend("v3")},
	)
	// A younger route with the same conditions loses; another wins where
	// its match is more precise.
	route("younger", []gwv1.Hostname{"headers.example.com"},
		gwv1.HTTPRouteRule{Matches: []gwv1.HTTPRouteMatch{{Headers: []gwv1.HTTPHeaderMatch{header("version", "two")}}}, BackendRefs: backend("v3")},
		gwv1.HTTPRouteRule{Matches: []gwv1.HTTPRouteMatch{{
			Path:    path(gwv1.PathMatchPathPrefix, "/deep"),
			Headers: []gwv1.HTTPHeaderMatch{header("version", "two")},
		}}, BackendRefs: backend("v3")},
	)
	// Three weighted backends: shares drawn in turn.
	weighted := func(svc string, w int32) gwv1.HTTPBackendRef {
		br := backend(svc)[0]
		br.Weight = ptrTo(w)
		return br
	}
	route("three", []gwv1.Hostname{"three.example.com"},
		gwv1.HTTPRouteRule{BackendRefs: []gwv1.HTTPBackendRef{weighted("v1", 50), weighted("v2", 30), weighted("v3", 20)}})
	for _, r := range []matchRequest{
		// HTTPRouteMatching: an Exact "/" beats a header match on "/".
		{host: "match.example.com", path: "/", pod: "gwm-v1-0"},
		{host: "match.example.com", path: "/", headers: map[string]string{"Version": "two"}, pod: "gwm-v1-0"},
		{host: "match.example.com", path: "/example", headers: map[string]string{"version": "one"}, pod: "gwm-v1-0"},
		{host: "match.example.com", path: "/example", headers: map[string]string{"version": "two"}, pod: "gwm-v2-0"},
		{host: "match.example.com", path: "/example", pod: ""},
		{host: "match.example.com", path: "/v2/x", headers: map[string]string{"version": "one"}, pod: "gwm-v2-0"},
		// HTTPRouteHeaderMatching: two headers beat one; values are exact.
		{host: "headers.example.com", path: "/", headers: map[string]string{"version": "one"}, pod: "gwm-v1-0"},
		{host: "headers.example.com", path: "/", headers: map[string]string{"version": "two"}, pod: "gwm-v2-0"},
		{host: "headers.example.com", path: "/", headers: map[string]string{"version": "two", "color": "orange"}, pod: "gwm-v1-0"},
		{host: "headers.example.com", path: "/", headers: map[string]string{"version": "twoo"}, pod: ""},
		{host: "headers.example.com", path: "/", headers: map[string]string{"version": "ONE"}, pod: ""},
		// Method, query parameter and header regex together (AND).
		{method: "POST", host: "headers.example.com", path: "/?animal=whale", headers: map[string]string{"color": "blue"}, pod: "gwm-v3-0"},
		{method: "POST", host: "headers.example.com", path: "/?animal=whale", headers: map[string]string{"color": "green"}, pod: ""},
		{method: "POST", host: "headers.example.com", path: "/?animal=dolphin", headers: map[string]string{"color": "red"}, pod: ""},
		{method: "GET", host: "headers.example.com", path: "/?animal=whale", headers: map[string]string{"color": "red"}, pod: ""},
		{method: "PUT", host: "headers.example.com", path: "/anything", pod: "gwm-v3-0"},
		// RegularExpression path, anchored.
		{host: "headers.example.com", path: "/img/42.png", pod: "gwm-v3-0"},
		{host: "headers.example.com", path: "/img/42.png/x", pod: ""},
		// Across routes: the longer prefix of the younger route wins.
		{host: "headers.example.com", path: "/deep/x", headers: map[string]string{"version": "two"}, pod: "gwm-v3-0"},
	} {
		d.expectMatch(t, r)
	}
	e.event("HTTPRoute", "younger", "RuleConflict")
	share(t, d, "three.example.com", "gwm-v1-0", 0.40, 0.60)
	share(t, d, "three.example.com", "gwm-v2-0", 0.22, 0.38)
	share(t, d, "three.example.com", "gwm-v3-0", 0.13, 0.27)

	// A new hostname for conditional matches is a map change.
	before := d.reloads()
	updateRoute(t, gw, e.ns, "headers", func(r *gwv1.HTTPRoute) { r.Spec.Hostnames = append(r.Spec.Hostnames, "more.example.com") })
	d.expectMatch(t, matchRequest{host: "more.example.com", path: "/", headers: map[string]string{"version": "two", "color": "orange"}, pod: "gwm-v1-0"})
	d.expectMatch(t, matchRequest{method: "PUT", host: "more.example.com", path: "/", pod: "gwm-v3-0"})
	if n := d.reloads(); n != before {
		t.Errorf("new hostname for conditional matches: %d reloads, want none", n-before)
	}
}
