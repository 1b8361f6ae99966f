package e2e

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	grpcutil "sigs.k8s.io/gateway-api/conformance/utils/grpc"

	"github.com/perimeter-ingress/perimeter/internal/testenv/echo"
)

// grpcBesideHTTP serves the suite's gRPC echo service on ln beside the
// HTTP echo server, which gets the listener returned: one echo server
// stands in for the suite's HTTP and gRPC pods alike, and connections
// opening with the HTTP/2 preface are gRPC ones.
func grpcBesideHTTP(t *testing.T, ln net.Listener, pods *echo.Pods) net.Listener {
	t.Helper()
	h1, h2 := echo.SplitHTTP2(ln)
	srv := echo.NewGRPCServer(pods)
	go func() { _ = srv.Serve(h2) }()
	t.Cleanup(srv.Stop)
	return h1
}

// nsGRPCClient is the suite's gRPC client for this bed: its default one
// dials from the machine's network, where the Gateway address is not the
// bed's. It does what the default client does (which it runs on a
// connection of its own) over connections dialed from inside the edge
// namespace. The suite sends requests with different authorities at once
// (parallel subtests, the weight sampler): a connection per address and
// authority serves them, and is dropped when the default client drops it
// (an Internal status).
type nsGRPCClient struct {
	dial func(context.Context, string, string) (net.Conn, error)

	mu    sync.Mutex
	conns map[nsGRPCKey]*grpc.ClientConn
}

type nsGRPCKey struct{ address, authority string }

func newNSGRPCClient(t *testing.T, dial func(context.Context, string, string) (net.Conn, error)) *nsGRPCClient {
	c := &nsGRPCClient{dial: dial, conns: map[nsGRPCKey]*grpc.ClientConn{}}
	t.Cleanup(c.Close)
	return c
}

func (c *nsGRPCClient) SendRPC(t *testing.T, address string, expected grpcutil.ExpectedResponse, timeout time.Duration) (*grpcutil.Response, error) {
	t.Helper()
	key := nsGRPCKey{address: address}
	if expected.RequestMetadata != nil {
		key.authority = expected.RequestMetadata.Authority
	}
	conn, err := c.conn(key)
	if err != nil {
		return &grpcutil.Response{}, err
	}
	d := &grpcutil.DefaultClient{Conn: conn}
	resp, err := d.SendRPC(t, address, expected, timeout)
	if d.Conn == nil {
		c.mu.Lock()
		if c.conns[key] == conn {
			delete(c.conns, key)
		}
		c.mu.Unlock()
	}
	return resp, err
}

func (c *nsGRPCClient) conn(key nsGRPCKey) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if conn := c.conns[key]; conn != nil {
		return conn, nil
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return c.dial(ctx, "tcp", addr)
		}),
	}
	if key.authority != "" {
		opts = append(opts, grpc.WithAuthority(key.authority))
	}
	// passthrough: the address is dialed as given, not resolved by DNS
	// from the machine's network.
	conn, err := grpc.NewClient("passthrough:///"+key.address, opts...)
	if err != nil {
		return nil, err
	}
	c.conns[key] = conn
	return conn, nil
}

func (c *nsGRPCClient) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for key, conn := range c.conns {
		_ = conn.Close()
		delete(c.conns, key)
	}
}
