package echo

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	pb "sigs.k8s.io/gateway-api/conformance/echo-basic/grpcechoserver"
)

// TestGRPCBesideHTTP: one port answers HTTP/1.1 with the JSON echo and
// gRPC with the suite's EchoResponse, each naming the pod of the address
// reached.
func TestGRPCBesideHTTP(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pods := &Pods{}
	pods.Set(netip.MustParseAddr("127.0.0.1"), Pod{Namespace: "ns", Name: "grpc-0"})
	h1, h2 := SplitHTTP2(ln)
	web := NewServer(Handler(pods, 3000), false)
	go func() { _ = web.Serve(h1) }()
	t.Cleanup(func() { _ = web.Close() })
	g := NewGRPCServer(pods)
	go func() { _ = g.Serve(h2) }()
	t.Cleanup(g.Stop)

	resp, err := http.Get("http://" + ln.Addr().String() + "/x")
	if err != nil {
		t.Fatal(err)
	}
	var r Request
	err = json.NewDecoder(resp.Body).Decode(&r)
	resp.Body.Close()
	if err != nil || r.Pod != "grpc-0" || r.Path != "/x" {
		t.Fatalf("HTTP answer %+v, %v", r, err)
	}

	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithAuthority("echo.example"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "x-in", "v")
	c := pb.NewGrpcEchoClient(conn)
	out, err := c.EchoTwo(ctx, &pb.EchoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	a := out.GetAssertions()
	if a.GetFullyQualifiedMethod() != "/gateway_api_conformance.echo_basic.grpcecho.GrpcEcho/EchoTwo" ||
		a.GetAuthority() != "echo.example" || a.GetContext().GetNamespace() != "ns" || a.GetContext().GetPod() != "grpc-0" {
		t.Errorf("assertions %v", a)
	}
	found := false
	for _, h := range a.GetHeaders() {
		found = found || h.GetKey() == "x-in" && h.GetValue() == "v"
	}
	if !found {
		t.Errorf("metadata x-in not echoed: %v", a.GetHeaders())
	}
	if _, err := c.EchoThree(ctx, &pb.EchoRequest{}); status.Code(err) != codes.Unimplemented {
		t.Errorf("EchoThree: %v, want Unimplemented", err)
	}

	pods.Delete(netip.MustParseAddr("127.0.0.1"))
	if _, err := c.Echo(ctx, &pb.EchoRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("Echo without a pod: %v, want Unavailable", err)
	}
}
