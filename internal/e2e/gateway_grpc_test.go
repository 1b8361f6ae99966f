package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// grpcPort is where the gRPC test pods listen.
const grpcPort = 9000

// grpcPod adds to a test pod a gRPC server (the standard health service)
// speaking cleartext HTTP/2 on grpcPort; every answer carries the pod's
// name in the x-pod header.
func grpcPod(t *testing.T, name, ip string) *testenv.Pod {
	t.Helper()
	pod := testenv.StartPod(t, testenv.PodOptions{Name: name, IP: ip})
	var ln net.Listener
	if err := pod.Netns.Do(func() error {
		var err error
		ln, err = net.Listen("tcp4", net.JoinHostPort(ip, strconv.Itoa(grpcPort)))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		_ = grpc.SetHeader(ctx, metadata.Pairs("x-pod", name))
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return pod
}

// h2cServer serves cleartext HTTP/2 only on the pod's address and port
// 9001, answering with the protocol the request came in.
func h2cServer(t *testing.T, pod *testenv.Pod) {
	t.Helper()
	var ln net.Listener
	if err := pod.Netns.Do(func() error {
		var err error
		ln, err = net.Listen("tcp4", net.JoinHostPort(pod.IP.String(), "9001"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Protocols: &p, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Pod", pod.Name)
		w.Header().Set("X-Proto", r.Proto)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
}

// TestGatewayGRPCRoute: a GRPCRoute on real HAProxy: a real gRPC client
// reaches the pod through the HTTP listener (h2c in, proto h2 to the
// server) by service and method; a method the route does not match is not
// routed; a header match chooses another rule; the route's status is
// written. An HTTPRoute to a Service port of appProtocol kubernetes.io/h2c
// reaches a pod that speaks only h2c.
func TestGatewayGRPCRoute(t *testing.T) {
	e := newEnv(t)
	a := grpcPod(t, "gwg-a-0", "198.18.225.10")
	b := grpcPod(t, "gwg-b-0", "198.18.226.10")
	for name, pod := range map[string]*testenv.Pod{"grpc-a": a, "grpc-b": b} {
		e.c.CreateService(t, testenv.ServiceSpec{Namespace: e.ns, Name: name,
			Ports: []testenv.ServicePort{{Name: "grpc", Port: 80, TargetPort: grpcPort}}, Endpoints: endpoints(pod)})
	}
	h2cServer(t, b)
	e.c.CreateService(t, testenv.ServiceSpec{Namespace: e.ns, Name: "h2c",
		Ports: []testenv.ServicePort{{Name: "http", Port: 80, TargetPort: 9001}}, Endpoints: endpoints(b)})
	svc, err := e.c.Admin.CoreV1().Services(e.ns).Get(context.Background(), "h2c", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc.Spec.Ports[0].AppProtocol = ptrTo("kubernetes.io/h2c")
	if _, err := e.c.Admin.CoreV1().Services(e.ns).Update(context.Background(), svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	d, gw, _, _ := e.gatewayDaemon()
	ctx := context.Background()
	backend := func(svc string) []gwv1.GRPCBackendRef {
		return []gwv1.GRPCBackendRef{{BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{
			Name: gwv1.ObjectName(svc), Port: ptrTo(gwv1.PortNumber(80))}}}}
	}
	route := &gwv1.GRPCRoute{
		ObjectMeta: metav1.ObjectMeta{Name: "health", Namespace: e.ns},
		Spec: gwv1.GRPCRouteSpec{
			CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "edge"}}},
			Hostnames:       []gwv1.Hostname{"grpc.example.com"},
			Rules: []gwv1.GRPCRouteRule{
				{Matches: []gwv1.GRPCRouteMatch{{Method: &gwv1.GRPCMethodMatch{
					Service: ptrTo("grpc.health.v1.Health"), Method: ptrTo("Check")}}}, BackendRefs: backend("grpc-a")},
				{Matches: []gwv1.GRPCRouteMatch{{
					Method:  &gwv1.GRPCMethodMatch{Service: ptrTo("grpc.health.v1.Health")},
					Headers: []gwv1.GRPCHeaderMatch{{Name: "x-tier", Value: "gold"}},
				}}, BackendRefs: backend("grpc-b")},
			},
		},
	}
	if _, err := gw.GatewayV1().GRPCRoutes(e.ns).Create(ctx, route, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := gw.GatewayV1().HTTPRoutes(e.ns).Create(ctx, &gwv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Name: "h2c", Namespace: e.ns},
		Spec: gwv1.HTTPRouteSpec{
			CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "edge"}}},
			Hostnames:       []gwv1.Hostname{"h2c.example.com"},
			Rules: []gwv1.HTTPRouteRule{{BackendRefs: []gwv1.HTTPBackendRef{{BackendRef: gwv1.BackendRef{
				BackendObjectReference: gwv1.BackendObjectReference{Name: "h2c", Port: ptrTo(gwv1.PortNumber(80))}}}}}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// An HTTP/1.1 client; HAProxy speaks HTTP/2 to the pod.
	testenv.Eventually(t, 15*time.Second, func() error {
		r, err := d.get("h2c.example.com", "/")
		if err != nil {
			return err
		}
		if r.status != 200 || r.header.Get("X-Pod") != "gwg-b-0" || r.header.Get("X-Proto") != "HTTP/2.0" {
			return fmt.Errorf("h2c backend: status %d from %q over %q", r.status, r.header.Get("X-Pod"), r.header.Get("X-Proto"))
		}
		return nil
	})
	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", d.httpPort),
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithAuthority("grpc.example.com"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	client := healthpb.NewHealthClient(conn)
	call := func(method string, md metadata.MD) (string, error) {
		cctx, cancel := context.WithTimeout(metadata.NewOutgoingContext(ctx, md), 3*time.Second)
		defer cancel()
		var hdr metadata.MD
		resp := &healthpb.HealthCheckResponse{}
		if err := conn.Invoke(cctx, method, &healthpb.HealthCheckRequest{}, resp, grpc.Header(&hdr)); err != nil {
			return "", err
		}
		if resp.Status != healthpb.HealthCheckResponse_SERVING {
			return "", fmt.Errorf("status %v", resp.Status)
		}
		if v := hdr.Get("x-pod"); len(v) == 1 {
			return v[0], nil
		}
		return "", errors.New("no x-pod header")
	}
	expect := func(method string, md metadata.MD, pod string) {
		t.Helper()
		testenv.Eventually(t, 15*time.Second, func() error {
			got, err := call(method, md)
			if err != nil {
				return fmt.Errorf("%s %v: %w", method, md, err)
			}
			if got != pod {
				return fmt.Errorf("%s %v: answered by %s, want %s", method, md, got, pod)
			}
			return nil
		})
	}
	expect("/grpc.health.v1.Health/Check", nil, "gwg-a-0")
	// The header match is more precise than the plain service match: the
	// Exact path of Check still wins over it, as the Gateway API orders.
	expect("/grpc.health.v1.Health/Check", metadata.Pairs("x-tier", "gold"), "gwg-a-0")
	// Through the generated client too.
	if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("health client: %v", err)
	}
	// A method of the service other than Check: only the header rule.
	testenv.Eventually(t, 10*time.Second, func() error {
		_, err := call("/grpc.health.v1.Health/Other", nil)
		if status.Code(err) != codes.Unimplemented {
			return fmt.Errorf("unmatched method: %v, want Unimplemented (HTTP 404)", err)
		}
		return nil
	})
	testenv.Eventually(t, 10*time.Second, func() error {
		_, err := call("/grpc.health.v1.Health/Other", metadata.Pairs("x-tier", "gold"))
		// The pod answers: it has no such method.
		if status.Code(err) != codes.Unimplemented || !containsPodAnswer(err) {
			return fmt.Errorf("header-matched unknown method: %v, want the pod's Unimplemented", err)
		}
		return nil
	})
	testenv.Eventually(t, 20*time.Second, func() error {
		got, err := gw.GatewayV1().GRPCRoutes(e.ns).Get(ctx, "health", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(got.Status.Parents) != 1 {
			return fmt.Errorf("%d parent statuses", len(got.Status.Parents))
		}
		if err := hasCondition(got.Status.Parents[0].Conditions, "Accepted", "True", "Accepted"); err != nil {
			return err
		}
		return hasCondition(got.Status.Parents[0].Conditions, "ResolvedRefs", "True", "ResolvedRefs")
	})
}

// containsPodAnswer tells a gRPC server's own Unimplemented (a gRPC
// status) from HAProxy's 404 (an HTTP status turned into one).
func containsPodAnswer(err error) bool {
	s, ok := status.FromError(err)
	return ok && s.Code() == codes.Unimplemented && !strings.Contains(s.Message(), "404")
}
