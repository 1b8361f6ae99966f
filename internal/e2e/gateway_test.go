package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// gatewayCRDs installs the Gateway API's standard CRDs, read from the
// gateway-api module this build uses, once per test run; the shared
// cluster keeps them (other daemons then watch them too, harmlessly: each
// test's GatewayClass names its own controller).
var gatewayCRDs sync.Once

func installGatewayCRDs(t testing.TB, e *env) {
	t.Helper()
	var err error
	gatewayCRDs.Do(func() { err = applyGatewayCRDs(e) })
	if err != nil {
		t.Fatalf("gateway API CRDs: %v", err)
	}
	cs := e.c.Admin
	testenv.Eventually(t, 30*time.Second, func() error {
		list, err := cs.Discovery().ServerResourcesForGroupVersion(gwv1.GroupVersion.String())
		if err != nil {
			return err
		}
		if len(list.APIResources) == 0 {
			return errors.New("no resources served yet")
		}
		return nil
	})
}

// gatewayClient installs the Gateway API CRDs and returns a client of them.
func (e *env) gatewayClient() *gwclient.Clientset {
	e.t.Helper()
	installGatewayCRDs(e.t, e)
	gw, err := gwclient.NewForConfig(e.c.AdminConfig)
	if err != nil {
		e.t.Fatal(err)
	}
	return gw
}

func applyGatewayCRDs(e *env) error {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/gateway-api").Output()
	if err != nil {
		return fmt.Errorf("locate the gateway-api module: %w", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "config", "crd", "standard")
	files, err := filepath.Glob(filepath.Join(dir, "gateway.networking.k8s.io_*.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no CRDs in %s", dir)
	}
	dc, err := dynamic.NewForConfig(e.c.AdminConfig)
	if err != nil {
		return err
	}
	crds := dc.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			var u unstructured.Unstructured
			if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return fmt.Errorf("%s: %w", filepath.Base(f), err)
			}
			if u.GetKind() != "CustomResourceDefinition" {
				continue
			}
			_, err := crds.Create(context.Background(), &u, metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("%s: %w", u.GetName(), err)
			}
		}
	}
	return nil
}

// TestGatewayHTTPRoute: a Gateway and HTTPRoutes served beside an Ingress
// by one HAProxy, with the daemon's least-privilege identity: routing to
// pods, a new hostname and a new route without a reload, the Ingress
// winning a conflicting key (with an Event on the HTTPRoute), and the
// status of the GatewayClass, the Gateway and its listeners and the routes
// read back.
func TestGatewayHTTPRoute(t *testing.T) {
	e := newEnv(t)
	web := e.pods("gw-web", 180, 1)
	api := e.pods("gw-api", 181, 1)
	e.service("web", nil, web...)
	e.service("api", nil, api...)
	e.ingress("legacy", nil, rule{host: "legacy.example.com", path: "/", service: "web"})
	d, gw, controller, class := e.gatewayDaemon(gwv1.Listener{Name: "udp", Protocol: gwv1.UDPProtocolType, Port: 9000})
	ctx := context.Background()
	route := func(name string, hosts []string, rules ...gwv1.HTTPRouteRule) *gwv1.HTTPRoute {
		r := &gwv1.HTTPRoute{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
			Spec: gwv1.HTTPRouteSpec{
				CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "edge"}}},
				Rules:           rules,
			},
		}
		for _, h := range hosts {
			r.Spec.Hostnames = append(r.Spec.Hostnames, gwv1.Hostname(h))
		}
		return r
	}
	backend := func(svc string) []gwv1.HTTPBackendRef {
		return []gwv1.HTTPBackendRef{{BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{
			Name: gwv1.ObjectName(svc), Port: ptrTo(gwv1.PortNumber(80))}}}}
	}
	prefix := func(p string) []gwv1.HTTPRouteMatch {
		return []gwv1.HTTPRouteMatch{{Path: &gwv1.HTTPPathMatch{Type: ptrTo(gwv1.PathMatchPathPrefix), Value: ptrTo(p)}}}
	}
	exact := func(p string) []gwv1.HTTPRouteMatch {
		return []gwv1.HTTPRouteMatch{{Path: &gwv1.HTTPPathMatch{Type: ptrTo(gwv1.PathMatchExact), Value: ptrTo(p)}}}
	}
	routes := gw.GatewayV1().HTTPRoutes(e.ns)
	if _, err := routes.Create(ctx, route("shop", []string{"shop.example.com"},
		gwv1.HTTPRouteRule{Matches: prefix("/api"), BackendRefs: backend("api")},
		gwv1.HTTPRouteRule{Matches: exact("/exact"), BackendRefs: backend("api")},
		gwv1.HTTPRouteRule{BackendRefs: backend("web")},
	), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	d.expect("shop.example.com", "/", 200, "gw-web-0")
	d.expect("shop.example.com", "/api/orders", 200, "gw-api-0")
	d.expect("shop.example.com", "/apix", 200, "gw-web-0")
	d.expect("shop.example.com", "/exact", 200, "gw-api-0")
	d.expect("shop.example.com", "/exact/x", 200, "gw-web-0")
	d.expect("legacy.example.com", "/", 200, "gw-web-0")
	// A hostname outside the listener's is not served.
	d.expect("shop.example.org", "/", 404, "")

	// A new hostname and a new route are map changes: no reload.
	before := d.reloads()
	updateRoute(t, gw, e.ns, "shop", func(r *gwv1.HTTPRoute) { r.Spec.Hostnames = append(r.Spec.Hostnames, "store.example.com") })
	d.expect("store.example.com", "/api", 200, "gw-api-0")
	if _, err := routes.Create(ctx, route("late", []string{"legacy.example.com", "late.example.com"},
		gwv1.HTTPRouteRule{BackendRefs: backend("api")}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	d.expect("late.example.com", "/", 200, "gw-api-0")
	if n := d.reloads(); n != before {
		t.Errorf("new hostname and route: %d reloads, want none", n-before)
	}
	// The Ingress keeps legacy.example.com/; the HTTPRoute is told.
	d.expect("legacy.example.com", "/", 200, "gw-web-0")
	e.event("HTTPRoute", "late", "RuleConflict")

	// Status, read back as the spec defines it.
	testenv.Eventually(t, 20*time.Second, func() error {
		gc, err := gw.GatewayV1().GatewayClasses().Get(ctx, class, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := hasCondition(gc.Status.Conditions, "Accepted", "True", "Accepted"); err != nil {
			return fmt.Errorf("GatewayClass: %w", err)
		}
		g, err := gw.GatewayV1().Gateways(e.ns).Get(ctx, "edge", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := hasCondition(g.Status.Conditions, "Accepted", "True", "ListenersNotValid"); err != nil {
			return fmt.Errorf("Gateway: %w", err)
		}
		if err := hasCondition(g.Status.Conditions, "Programmed", "True", "Programmed"); err != nil {
			return fmt.Errorf("Gateway: %w", err)
		}
		if len(g.Status.Addresses) == 0 {
			return errors.New("Gateway: no addresses")
		}
		if len(g.Status.Listeners) != 2 {
			return fmt.Errorf("Gateway: %d listener statuses, want 2", len(g.Status.Listeners))
		}
		http, udp := g.Status.Listeners[0], g.Status.Listeners[1]
		if http.AttachedRoutes != 2 {
			return fmt.Errorf("listener http: attachedRoutes %d, want 2", http.AttachedRoutes)
		}
		if err := hasCondition(http.Conditions, "Programmed", "True", "Programmed"); err != nil {
			return fmt.Errorf("listener http: %w", err)
		}
		if err := hasCondition(udp.Conditions, "Accepted", "False", "UnsupportedProtocol"); err != nil {
			return fmt.Errorf("listener udp: %w", err)
		}
		for _, name := range []string{"shop", "late"} {
			r, err := routes.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if len(r.Status.Parents) != 1 || string(r.Status.Parents[0].ControllerName) != controller {
				return fmt.Errorf("HTTPRoute %s: parents %+v", name, r.Status.Parents)
			}
			p := r.Status.Parents[0]
			if err := hasCondition(p.Conditions, "Accepted", "True", "Accepted"); err != nil {
				return fmt.Errorf("HTTPRoute %s: %w", name, err)
			}
			if err := hasCondition(p.Conditions, "ResolvedRefs", "True", "ResolvedRefs"); err != nil {
				return fmt.Errorf("HTTPRoute %s: %w", name, err)
			}
		}
		return nil
	})

	// Two weighted backendRefs split the requests; a new weight is a map
	// change.
	weighted := func(web, api int32) []gwv1.HTTPBackendRef {
		refs := append(backend("web"), backend("api")...)
		refs[0].Weight, refs[1].Weight = &web, &api
		return refs
	}
	if _, err := routes.Create(ctx, route("split", []string{"split.example.com"},
		gwv1.HTTPRouteRule{BackendRefs: weighted(1, 1)}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	d.expect("split.example.com", "/", 200, "")
	share(t, d, "split.example.com", "gw-api-0", 0.35, 0.65)
	before = d.reloads()
	updateRoute(t, gw, e.ns, "split", func(r *gwv1.HTTPRoute) { r.Spec.Rules[0].BackendRefs = weighted(1, 3) })
	share(t, d, "split.example.com", "gw-api-0", 0.62, 0.88)
	if n := d.reloads(); n != before {
		t.Errorf("new backendRef weight: %d reloads, want none", n-before)
	}

	// Filters: a redirect to another hostname (on the listener's port, as
	// the spec says when no port is given), request and response headers
	// set.
	echo := testenv.StartPod(t, testenv.PodOptions{Name: "gw-echo-0", IP: "198.18.183.10",
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Pod", "gw-echo-0")
			w.Header().Set("X-Seen-Env", r.Header.Get("X-Env"))
		})})
	e.service("echo", nil, echo)
	if _, err := routes.Create(ctx, route("filters", []string{"filters.example.com"},
		gwv1.HTTPRouteRule{Matches: prefix("/old"), Filters: []gwv1.HTTPRouteFilter{{
			Type:            gwv1.HTTPRouteFilterRequestRedirect,
			RequestRedirect: &gwv1.HTTPRequestRedirectFilter{Hostname: ptrTo(gwv1.PreciseHostname("new.example.com")), StatusCode: ptrTo(301)},
		}}},
		gwv1.HTTPRouteRule{BackendRefs: backend("echo"), Filters: []gwv1.HTTPRouteFilter{{
			Type:                  gwv1.HTTPRouteFilterRequestHeaderModifier,
			RequestHeaderModifier: &gwv1.HTTPHeaderFilter{Set: []gwv1.HTTPHeader{{Name: "X-Env", Value: "100% prod"}}},
		}, {
			Type:                   gwv1.HTTPRouteFilterResponseHeaderModifier,
			ResponseHeaderModifier: &gwv1.HTTPHeaderFilter{Set: []gwv1.HTTPHeader{{Name: "X-Served-By", Value: "perimeter"}}},
		}}},
	), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	d.expect("filters.example.com", "/old/x?q=1", 301, "")
	resp, err := d.get("filters.example.com", "/old/x?q=1")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("http://new.example.com:%d/old/x?q=1", d.httpPort); resp.header.Get("Location") != want {
		t.Errorf("redirect to %q, want %q", resp.header.Get("Location"), want)
	}
	d.expect("filters.example.com", "/", 200, "gw-echo-0")
	resp, err = d.do(http.MethodGet, "filters.example.com", "/", http.Header{"X-Env": {"dev"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.header.Get("X-Seen-Env"); got != "100% prod" {
		t.Errorf("the pod saw X-Env %q, want the filter's %q", got, "100% prod")
	}
	if got := resp.header.Get("X-Served-By"); got != "perimeter" {
		t.Errorf("response X-Served-By %q, want perimeter", got)
	}

	// A backendRef to another namespace needs a ReferenceGrant there.
	other := e.c.Namespace(t)
	updateRoute(t, gw, e.ns, "late", func(r *gwv1.HTTPRoute) {
		r.Spec.Rules[0].BackendRefs[0].Namespace = ptrTo(gwv1.Namespace(other))
	})
	testenv.Eventually(t, 20*time.Second, func() error {
		r, err := routes.Get(ctx, "late", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(r.Status.Parents) != 1 {
			return fmt.Errorf("parents %+v", r.Status.Parents)
		}
		return hasCondition(r.Status.Parents[0].Conditions, "ResolvedRefs", "False", "RefNotPermitted")
	})
	// The rule whose backend is refused answers 500, as the spec asks.
	d.expect("late.example.com", "/", 500, "")

	// A route that leaves our Gateway loses our status entry.
	updateRoute(t, gw, e.ns, "late", func(r *gwv1.HTTPRoute) { r.Spec.ParentRefs[0].Name = "elsewhere" })
	testenv.Eventually(t, 20*time.Second, func() error {
		r, err := routes.Get(ctx, "late", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(r.Status.Parents) != 0 {
			return fmt.Errorf("parents %+v", r.Status.Parents)
		}
		return nil
	})
}

// gatewayDaemon starts a daemon serving a GatewayClass of its own and a
// Gateway "edge" with an HTTP listener "http" for *.example.com on the
// daemon's HTTP port, plus the extra listeners.
func (e *env) gatewayDaemon(extra ...gwv1.Listener) (d *daemon, gw gwclient.Interface, controller, class string) {
	t := e.t
	t.Helper()
	gw = e.gatewayClient()
	ctx := context.Background()
	controller, class = e.gatewayClass(gw)
	d = e.startDaemon("--gateway-controller=" + controller)
	hostname := gwv1.Hostname("*.example.com")
	if _, err := gw.GatewayV1().Gateways(e.ns).Create(ctx, &gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Name: "edge", Namespace: e.ns},
		Spec: gwv1.GatewaySpec{
			GatewayClassName: gwv1.ObjectName(class),
			Listeners: append([]gwv1.Listener{
				{Name: "http", Protocol: gwv1.HTTPProtocolType, Port: gwv1.PortNumber(d.httpPort), Hostname: &hostname},
			}, extra...),
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return d, gw, controller, class
}

// gatewayClass creates a GatewayClass for a controller name of the test's
// own, which the test's daemon serves with --gateway-controller.
func (e *env) gatewayClass(gw gwclient.Interface) (controller, class string) {
	t := e.t
	t.Helper()
	ctx := context.Background()
	controller = "perimeter.io/e2e-" + e.ns
	class = "perimeter-" + e.ns
	if _, err := gw.GatewayV1().GatewayClasses().Create(ctx, &gwv1.GatewayClass{
		ObjectMeta: metav1.ObjectMeta{Name: class},
		Spec:       gwv1.GatewayClassSpec{ControllerName: gwv1.GatewayController(controller)},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.GatewayV1().GatewayClasses().Delete(ctx, class, metav1.DeleteOptions{}) })
	return controller, class
}

// share polls until the share of 400 requests to host that pod answers
// lies within [lo, hi].
func share(t *testing.T, d *daemon, host, pod string, lo, hi float64) {
	t.Helper()
	const n = 400
	testenv.Eventually(t, 20*time.Second, func() error {
		hits := 0
		for range n {
			r, err := d.get(host, "/")
			if err != nil {
				return err
			}
			if r.status != 200 {
				return fmt.Errorf("status %d", r.status)
			}
			if r.header.Get("X-Pod") == pod {
				hits++
			}
		}
		if f := float64(hits) / n; f < lo || f > hi {
			return fmt.Errorf("%s answered %.2f of the requests to %s, want %.2f..%.2f", pod, f, host, lo, hi)
		}
		return nil
	})
}

// updateRoute changes an HTTPRoute, again on a conflict: the daemon writes
// its status meanwhile.
// updateRoute changes HTTPRoute name and returns when the write that
// succeeded was sent and how long the API server took to answer it.
func updateRoute(tb testing.TB, gw gwclient.Interface, ns, name string, change func(*gwv1.HTTPRoute)) (sent time.Time, took time.Duration) {
	tb.Helper()
	routes := gw.GatewayV1().HTTPRoutes(ns)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		r, err := routes.Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(r)
		sent = time.Now()
		_, err = routes.Update(context.Background(), r, metav1.UpdateOptions{})
		took = time.Since(sent)
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
	return sent, took
}

func hasCondition(cs []metav1.Condition, typ, status, reason string) error {
	for _, c := range cs {
		if c.Type == typ {
			if string(c.Status) != status || c.Reason != reason {
				return fmt.Errorf("%s=%s %s (%q), want %s %s", typ, c.Status, c.Reason, c.Message, status, reason)
			}
			if c.LastTransitionTime.IsZero() {
				return fmt.Errorf("%s: no lastTransitionTime", typ)
			}
			return nil
		}
	}
	return fmt.Errorf("no %s condition among %d", typ, len(cs))
}

// BenchmarkHTTPRouteConvergence measures, on the real stack, the time from
// an HTTPRoute write to HAProxy routing by it, for a new hostname, a new
// path match and a new backendRef weight, and counts the reloads (want 0:
// all are map changes).
func BenchmarkHTTPRouteConvergence(b *testing.B) {
	e := newEnv(b)
	pods := e.pods("gwb", 182, 2)
	e.service("web", nil, pods[0])
	e.service("api", nil, pods[1])
	d, gw, _, _ := e.gatewayDaemon()
	ctx := context.Background()
	routes := gw.GatewayV1().HTTPRoutes(e.ns)
	ref := func(svc string) []gwv1.HTTPBackendRef {
		return []gwv1.HTTPBackendRef{{BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{
			Name: gwv1.ObjectName(svc), Port: ptrTo(gwv1.PortNumber(80))}}}}
	}
	// Weights 1000:1 and 1:1000 round to 0% and 100% for api: every
	// request shows which one is in force.
	weights := func(web, api int32) []gwv1.HTTPBackendRef {
		refs := append(ref("web"), ref("api")...)
		refs[0].Weight, refs[1].Weight = &web, &api
		return refs
	}
	if _, err := routes.Create(ctx, &gwv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Name: "bench", Namespace: e.ns},
		Spec: gwv1.HTTPRouteSpec{
			CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "edge"}}},
			Hostnames:       []gwv1.Hostname{"warm.example.com"},
			// The api backend exists before the changes: adding a backend
			// is a reload, adding a route to one is not.
			Rules: []gwv1.HTTPRouteRule{{BackendRefs: ref("web")}, {
				Matches:     []gwv1.HTTPRouteMatch{{Path: &gwv1.HTTPPathMatch{Type: ptrTo(gwv1.PathMatchPathPrefix), Value: ptrTo("/warm")}}},
				BackendRefs: ref("api"),
			}, {
				Matches:     []gwv1.HTTPRouteMatch{{Path: &gwv1.HTTPPathMatch{Type: ptrTo(gwv1.PathMatchPathPrefix), Value: ptrTo("/w")}}},
				BackendRefs: weights(1000, 1),
			}},
		},
	}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	d.expect("warm.example.com", "/", 200, pods[0].Name)
	d.expect("warm.example.com", "/warm", 200, pods[1].Name)
	d.expect("warm.example.com", "/w", 200, pods[0].Name)
	// The figures start when the write is sent; the API server's own part
	// (an HTTPRoute is a custom resource: JSON and the CRD's validation
	// rules) is counted apart.
	var writes []time.Duration
	update := func(change func(r *gwv1.HTTPRoute)) time.Time {
		sent, took := updateRoute(b, gw, e.ns, "bench", change)
		writes = append(writes, took)
		return sent
	}
	wait := func(host, path, pod string) {
		testenv.Converge(b, 10*time.Second, func() error {
			r, err := d.get(host, path)
			if err != nil {
				return err
			}
			if r.status != 200 || r.header.Get("X-Pod") != pod {
				return fmt.Errorf("status %d from %q", r.status, r.header.Get("X-Pod"))
			}
			return nil
		})
	}
	const changes = 30
	for i := 0; i < b.N; i++ {
		before := d.reloads()
		var hostTook, matchTook []time.Duration
		for c := 0; c < changes; c++ {
			host := fmt.Sprintf("h%d-%d.example.com", i, c)
			// An HTTPRoute holds at most 16 hostnames: the previous new one
			// makes way.
			start := update(func(r *gwv1.HTTPRoute) { r.Spec.Hostnames = []gwv1.Hostname{"warm.example.com", gwv1.Hostname(host)} })
			wait(host, "/", pods[0].Name)
			hostTook = append(hostTook, time.Since(start))
		}
		for c := 0; c < changes; c++ {
			path := fmt.Sprintf("/m%d-%d", i, c)
			start := update(func(r *gwv1.HTTPRoute) {
				// At most 16 rules, too: the previous new one makes way.
				r.Spec.Rules = append(r.Spec.Rules[:3], gwv1.HTTPRouteRule{
					Matches:     []gwv1.HTTPRouteMatch{{Path: &gwv1.HTTPPathMatch{Type: ptrTo(gwv1.PathMatchPathPrefix), Value: ptrTo(path)}}},
					BackendRefs: ref("api"),
				})
			})
			wait("warm.example.com", path, pods[1].Name)
			matchTook = append(matchTook, time.Since(start))
		}
		var weightTook []time.Duration
		for c := 0; c < changes; c++ {
			w, pod := weights(1, 1000), pods[1].Name
			if c%2 == 1 {
				w, pod = weights(1000, 1), pods[0].Name
			}
			start := update(func(r *gwv1.HTTPRoute) { r.Spec.Rules[2].BackendRefs = w })
			wait("warm.example.com", "/w", pod)
			weightTook = append(weightTook, time.Since(start))
		}
		reloads := d.reloads() - before
		slices.Sort(weightTook)
		pw := func(q float64) time.Duration { return weightTook[int(q*float64(len(weightTook)-1))] }
		b.ReportMetric(float64(pw(0.5).Microseconds())/1000, "weight-p50-ms")
		b.ReportMetric(float64(pw(0.9).Microseconds())/1000, "weight-p90-ms")
		fmt.Printf("HTTPRoute new backendRef weight -> routed, %d changes: p50 %v, p90 %v, max %v\n", changes, pw(0.5), pw(0.9), weightTook[len(weightTook)-1])
		slices.Sort(hostTook)
		ph := func(q float64) time.Duration { return hostTook[int(q*float64(len(hostTook)-1))] }
		p := report(b, matchTook, reloads)
		b.ReportMetric(float64(ph(0.5).Microseconds())/1000, "host-p50-ms")
		b.ReportMetric(float64(ph(0.9).Microseconds())/1000, "host-p90-ms")
		fmt.Printf("HTTPRoute new hostname -> routed, %d changes: p50 %v, p90 %v, max %v\n", changes, ph(0.5), ph(0.9), hostTook[len(hostTook)-1])
		fmt.Printf("HTTPRoute new path match -> routed, %d changes: p50 %v, p90 %v, max %v; reloads during all three: %d\n",
			changes, p(0.5), p(0.9), matchTook[len(matchTook)-1], reloads)
		slices.Sort(writes)
		fmt.Printf("of which the API server's answer to the HTTPRoute write: p50 %v, p90 %v over %d writes\n",
			writes[len(writes)/2], writes[len(writes)*9/10], len(writes))
		b.ReportMetric(float64(writes[len(writes)/2].Microseconds())/1000, "apiserver-write-p50-ms")
		writes = writes[:0]
	}
}
