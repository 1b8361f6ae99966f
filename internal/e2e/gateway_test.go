package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
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
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// gatewayCRDs installs the Gateway API's standard CRDs, read from the
// gateway-api module this build uses, once per test run; the shared
// cluster keeps them (other daemons then watch them too, harmlessly: each
// test's GatewayClass names its own controller).
var gatewayCRDs sync.Once

func installGatewayCRDs(t *testing.T, e *env) {
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
	installGatewayCRDs(t, e)
	gw, err := gwclient.NewForConfig(e.c.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	controller := "perimeter.io/e2e-" + e.ns
	class := "perimeter-" + e.ns

	web := e.pods("gw-web", 180, 1)
	api := e.pods("gw-api", 181, 1)
	e.service("web", nil, web...)
	e.service("api", nil, api...)
	e.ingress("legacy", nil, rule{host: "legacy.example.com", path: "/", service: "web"})

	d := e.startDaemon("--gateway-controller=" + controller)

	if _, err := gw.GatewayV1().GatewayClasses().Create(ctx, &gwv1.GatewayClass{
		ObjectMeta: metav1.ObjectMeta{Name: class},
		Spec:       gwv1.GatewayClassSpec{ControllerName: gwv1.GatewayController(controller)},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.GatewayV1().GatewayClasses().Delete(ctx, class, metav1.DeleteOptions{}) })
	hostname := gwv1.Hostname("*.example.com")
	if _, err := gw.GatewayV1().Gateways(e.ns).Create(ctx, &gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Name: "edge", Namespace: e.ns},
		Spec: gwv1.GatewaySpec{
			GatewayClassName: gwv1.ObjectName(class),
			Listeners: []gwv1.Listener{
				{Name: "http", Protocol: gwv1.HTTPProtocolType, Port: gwv1.PortNumber(d.httpPort), Hostname: &hostname},
				{Name: "tcp", Protocol: gwv1.TCPProtocolType, Port: 9000},
			},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
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
	r, err := routes.Get(ctx, "shop", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r.Spec.Hostnames = append(r.Spec.Hostnames, "store.example.com")
	if _, err := routes.Update(ctx, r, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
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
		http, tcp := g.Status.Listeners[0], g.Status.Listeners[1]
		if http.AttachedRoutes != 2 {
			return fmt.Errorf("listener http: attachedRoutes %d, want 2", http.AttachedRoutes)
		}
		if err := hasCondition(http.Conditions, "Programmed", "True", "Programmed"); err != nil {
			return fmt.Errorf("listener http: %w", err)
		}
		if err := hasCondition(tcp.Conditions, "Accepted", "False", "UnsupportedProtocol"); err != nil {
			return fmt.Errorf("listener tcp: %w", err)
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

	// A backendRef to another namespace needs a ReferenceGrant there.
	other := e.c.Namespace(t)
	r, err = routes.Get(ctx, "late", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns := gwv1.Namespace(other)
	r.Spec.Rules[0].BackendRefs[0].Namespace = &ns
	if _, err := routes.Update(ctx, r, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
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
	d.expect("late.example.com", "/", 404, "")
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
