package echo

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	pb "sigs.k8s.io/gateway-api/conformance/echo-basic/grpcechoserver"
)

// NewGRPCServer answers the conformance suite's GrpcEcho service the way
// echo-basic does with GRPC_ECHO_SERVER set: Echo and EchoTwo return the
// method called, the request's metadata (":authority" included) and the
// pod that answered; EchoThree is not implemented, as there. The suite's
// own server is a program answering for one pod, hence this one, which
// tells pods apart by the local address like Handler. The caller Serves
// and Stops it.
func NewGRPCServer(pods *Pods) *grpc.Server {
	s := grpc.NewServer()
	pb.RegisterGrpcEchoServer(s, &grpcEcho{pods: pods})
	return s
}

type grpcEcho struct {
	pb.UnimplementedGrpcEchoServer
	pods *Pods
}

func (g *grpcEcho) Echo(ctx context.Context, _ *pb.EchoRequest) (*pb.EchoResponse, error) {
	return g.echo(ctx, pb.GrpcEcho_Echo_FullMethodName)
}

func (g *grpcEcho) EchoTwo(ctx context.Context, _ *pb.EchoRequest) (*pb.EchoResponse, error) {
	return g.echo(ctx, pb.GrpcEcho_EchoTwo_FullMethodName)
}

func (g *grpcEcho) echo(ctx context.Context, method string) (*pb.EchoResponse, error) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.LocalAddr == nil {
		return nil, status.Error(codes.Internal, "no local address")
	}
	ap, err := netip.ParseAddrPort(p.LocalAddr.String())
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	pod, ok := g.pods.lookup(ap.Addr())
	if !ok {
		// As a connection to a gone pod would fail.
		return nil, status.Error(codes.Unavailable, "no pod on this address")
	}
	md, _ := metadata.FromIncomingContext(ctx)
	a := &pb.Assertions{
		FullyQualifiedMethod: method,
		Context:              &pb.Context{Namespace: pod.Namespace, Pod: pod.Name},
	}
	for k, vs := range md {
		for _, v := range vs {
			if k == ":authority" {
				a.Authority = v
			}
			a.Headers = append(a.Headers, &pb.Header{Key: k, Value: v})
		}
	}
	return &pb.EchoResponse{Assertions: a}, nil
}

// h2Preface opens every connection of an HTTP/2 client with prior
// knowledge, which is how gRPC speaks in cleartext.
const h2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// SplitHTTP2 shares one listening port between two servers, as the
// suite's pods share port 3000 between echo-basic's HTTP and gRPC modes
// (one echo server stands in for both kinds of pod here): connections
// opening with the HTTP/2 preface are accepted from h2, all others from
// h1. Closing either closes ln and both.
func SplitHTTP2(ln net.Listener) (h1, h2 net.Listener) {
	s := &splitter{ln: ln, done: make(chan struct{})}
	l1 := &splitListener{s: s, ch: make(chan net.Conn)}
	l2 := &splitListener{s: s, ch: make(chan net.Conn)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				s.close()
				return
			}
			go s.route(c, l1, l2)
		}
	}()
	return l1, l2
}

type splitter struct {
	ln   net.Listener
	once sync.Once
	done chan struct{}
}

func (s *splitter) close() error {
	var err error
	s.once.Do(func() {
		err = s.ln.Close()
		close(s.done)
	})
	return err
}

// route reads as much of the connection's start as tells the preface
// apart, and hands the connection on with what it read put back.
func (s *splitter) route(c net.Conn, l1, l2 *splitListener) {
	// A client that never speaks is dropped rather than kept forever.
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 0, len(h2Preface))
	for len(buf) < len(h2Preface) && strings.HasPrefix(h2Preface, string(buf)) {
		n, err := c.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err != nil {
			_ = c.Close()
			return
		}
	}
	_ = c.SetReadDeadline(time.Time{})
	to := l1
	if string(buf) == h2Preface {
		to = l2
	}
	select {
	case to.ch <- &prefixConn{Conn: c, r: io.MultiReader(bytes.NewReader(buf), c)}:
	case <-s.done:
		_ = c.Close()
	}
}

type splitListener struct {
	s  *splitter
	ch chan net.Conn
}

func (l *splitListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.s.done:
		return nil, net.ErrClosed
	}
}

func (l *splitListener) Close() error {
	if err := l.s.close(); err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}

func (l *splitListener) Addr() net.Addr { return l.s.ln.Addr() }

// prefixConn reads what route read before the rest of the connection.
type prefixConn struct {
	net.Conn
	r io.Reader
}

func (c *prefixConn) Read(p []byte) (int, error) { return c.r.Read(p) }
