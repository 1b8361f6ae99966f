package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// TestGatewayPortsAndAddresses: an HTTP listener on a port of
// --gateway-listener-ports is bound and serves its routes on that port
// only; two Gateways get addresses of their own from --gateway-addresses
// (on loopback), each address serves its own Gateway's route for the same
// host, status.addresses says which, and a new hostname on either is a
// map change (no reload).
func TestGatewayPortsAndAddresses(t *testing.T) {
	e := newEnv(t)
	gw := e.gatewayClient()
	one := e.pods("gw-ports-one", 190, 1)
	two := e.pods("gw-ports-two", 191, 1)
	e.service("one", nil, one...)
	e.service("two", nil, two...)
	controller, class := e.gatewayClass(gw)
	extra := testenv.FreePort(t)
	// Loopback addresses of their own: the daemon's is 127.0.0.1.
	pool := []string{"127.90.0.1", "127.90.0.2"}
	d := e.startDaemon("--gateway-controller="+controller,
		"--gateway-listener-ports="+strconv.Itoa(extra), "--gateway-addresses="+pool[0]+"-"+pool[1])
	ctx := context.Background()
	gateway := func(name string, ls ...gwv1.Listener) {
		if _, err := gw.GatewayV1().Gateways(e.ns).Create(ctx, &gwv1.Gateway{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
			Spec:       gwv1.GatewaySpec{GatewayClassName: gwv1.ObjectName(class), Listeners: ls},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	route := func(name, host, svc string, parents ...gwv1.ParentReference) {
		if _, err := gw.GatewayV1().HTTPRoutes(e.ns).Create(ctx, &gwv1.HTTPRoute{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
			Spec: gwv1.HTTPRouteSpec{
				CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: parents},
				Hostnames:       []gwv1.Hostname{gwv1.Hostname(host)},
				Rules: []gwv1.HTTPRouteRule{{BackendRefs: []gwv1.HTTPBackendRef{{BackendRef: gwv1.BackendRef{
					BackendObjectReference: gwv1.BackendObjectReference{Name: gwv1.ObjectName(svc), Port: ptrTo(gwv1.PortNumber(80))}}}}}},
			},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// "a" is created first and gets the first address.
	gateway("a",
		gwv1.Listener{Name: "http", Protocol: gwv1.HTTPProtocolType, Port: 80},
		gwv1.Listener{Name: "extra", Protocol: gwv1.HTTPProtocolType, Port: gwv1.PortNumber(extra)})
	testenv.Eventually(t, 20*time.Second, func() error { return gatewayAddress(gw, e.ns, "a", pool[0]) })
	gateway("b", gwv1.Listener{Name: "http", Protocol: gwv1.HTTPProtocolType, Port: 80})
	route("a", "multi.example.com", "one", gwv1.ParentReference{Name: "a", SectionName: ptrTo(gwv1.SectionName("http"))})
	route("b", "multi.example.com", "two", gwv1.ParentReference{Name: "b"})
	route("extra", "extra.example.com", "two", gwv1.ParentReference{Name: "a", Port: ptrTo(gwv1.PortNumber(extra))})

	at := func(addr string, port int, host string, status int, pod string) {
		t.Helper()
		testenv.Eventually(t, 20*time.Second, func() error {
			r, err := getAt(net.JoinHostPort(addr, strconv.Itoa(port)), host)
			if err != nil {
				return err
			}
			if r.status != status || pod != "" && r.header.Get("X-Pod") != pod {
				return fmt.Errorf("%s on %s:%d: status %d from %q, want %d from %q", host, addr, port, r.status, r.header.Get("X-Pod"), status, pod)
			}
			return nil
		})
	}
	// Each Gateway's address serves its own route for the same host.
	at(pool[0], d.httpPort, "multi.example.com", 200, "gw-ports-one-0")
	at(pool[1], d.httpPort, "multi.example.com", 200, "gw-ports-two-0")
	// The extra port serves the route attached to it, and only that one.
	at(pool[0], extra, "extra.example.com", 200, "gw-ports-two-0")
	at(pool[0], extra, "multi.example.com", 404, "")
	at(pool[0], d.httpPort, "extra.example.com", 404, "")
	// The edge's own address serves neither Gateway.
	d.expect("multi.example.com", "/", 404, "")
	testenv.Eventually(t, 20*time.Second, func() error { return gatewayAddress(gw, e.ns, "b", pool[1]) })

	// A new hostname on a Gateway's address and on the extra port is a
	// map change.
	before := d.reloads()
	updateRoute(t, gw, e.ns, "b", func(r *gwv1.HTTPRoute) { r.Spec.Hostnames = append(r.Spec.Hostnames, "more.example.com") })
	updateRoute(t, gw, e.ns, "extra", func(r *gwv1.HTTPRoute) { r.Spec.Hostnames = append(r.Spec.Hostnames, "more.example.com") })
	at(pool[1], d.httpPort, "more.example.com", 200, "gw-ports-two-0")
	at(pool[0], extra, "more.example.com", 200, "gw-ports-two-0")
	at(pool[0], d.httpPort, "more.example.com", 404, "")
	if n := d.reloads(); n != before {
		t.Errorf("new hostnames: %d reloads, want none", n-before)
	}

	// A listener on a port the flag does not list is refused, with a
	// condition, and the rest of the Gateway is served.
	closed := testenv.FreePort(t)
	updateGateway(t, gw, e.ns, "b", func(g *gwv1.Gateway) {
		g.Spec.Listeners = append(g.Spec.Listeners, gwv1.Listener{Name: "closed", Protocol: gwv1.HTTPProtocolType, Port: gwv1.PortNumber(closed)})
	})
	testenv.Eventually(t, 20*time.Second, func() error {
		g, err := gw.GatewayV1().Gateways(e.ns).Get(ctx, "b", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(g.Status.Listeners) != 2 {
			return fmt.Errorf("%d listener statuses, want 2", len(g.Status.Listeners))
		}
		return hasCondition(g.Status.Listeners[1].Conditions, "Accepted", "False", "PortUnavailable")
	})
	at(pool[1], d.httpPort, "multi.example.com", 200, "gw-ports-two-0")
}

// gatewayAddress checks that Gateway ns/name's status names addr alone.
func gatewayAddress(gw gwclient.Interface, ns, name, addr string) error {
	g, err := gw.GatewayV1().Gateways(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if len(g.Status.Addresses) != 1 || g.Status.Addresses[0].Value != addr {
		return fmt.Errorf("Gateway %s: addresses %+v, want %s", name, g.Status.Addresses, addr)
	}
	return nil
}

// getAt sends GET / for host to hostport.
func getAt(hostport, host string) (response, error) {
	return doAt(hostport, http.MethodGet, host, "/", nil)
}

func updateGateway(tb testing.TB, gw gwclient.Interface, ns, name string, change func(*gwv1.Gateway)) {
	tb.Helper()
	gws := gw.GatewayV1().Gateways(ns)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		g, err := gws.Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(g)
		_, err = gws.Update(context.Background(), g, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
}
