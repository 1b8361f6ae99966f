package e2e

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/gateway-api/conformance/echo-basic/tcpserver"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
	"github.com/perimeter-ingress/perimeter/internal/testenv/echo"
)

// The suite's TLS and TCP clients dial the Gateway address with a plain
// net.Dialer from the test process, in the machine's namespace: a veth pair
// from there into the edge namespace and a /32 route over it make the
// address reachable from the machine without binding anything on it.
const conformanceLinkRange = "198.19.140.0/24"

// The ports of the suite's echo-basic image: HTTP (or, with
// TCP_ECHO_SERVER, the TCP echo) and TLS.
const (
	echoPlainPort = 3000
	echoTLSPort   = 8443
)

// routeGatewayFromRoot routes the Gateway addresses (the edge's and the
// pool the Gateways get theirs from) from the machine's namespace into
// edge.
func routeGatewayFromRoot(t *testing.T, edge *testenv.Netns) {
	t.Helper()
	link := testenv.Veth(t, testenv.VethOptions{NS: nil, PeerNS: edge, LinkRange: conformanceLinkRange})
	root, err := (*testenv.Netns)(nil).Netlink()
	if err != nil {
		t.Fatal(err)
	}
	l, err := root.LinkByName(link.Name)
	if err != nil {
		t.Fatal(err)
	}
	route := &netlink.Route{LinkIndex: l.Attrs().Index, Dst: ipNet(conformanceGatewayPool),
		Gw: net.IP(link.PeerAddr.Addr().AsSlice())}
	if err := root.RouteAdd(route); err != nil {
		t.Fatalf("route %s via %s: %v (is another conformance run using it?)", conformanceGatewayPool, link.PeerAddr.Addr(), err)
	}
	t.Cleanup(func() { _ = root.RouteDel(route) })
}

// echoStreams plays echo-basic where it does more than HTTP: the TCP echo
// server (TCP_ECHO_SERVER) on 3000 and 8443 and the HTTPS echo on 8443
// (TLS_SERVER_CERT), with the certificate of the Secret the pod's
// Deployment mounts, read from the API server when a connection comes.
type echoStreams struct {
	t     *testing.T
	api   kubernetes.Interface
	pods  *echo.Pods
	https *connQueue
}

// startEchoStreams listens on 8443 in edge and serves HTTPS echo there
// with h; plain wraps the listener of port 3000.
func startEchoStreams(t *testing.T, edge *testenv.Netns, api kubernetes.Interface, pods *echo.Pods, h http.Handler) *echoStreams {
	t.Helper()
	var ln net.Listener
	if err := edge.Do(func() (err error) {
		ln, err = net.Listen("tcp4", fmt.Sprintf("0.0.0.0:%d", echoTLSPort))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	s := &echoStreams{t: t, api: api, pods: pods, https: newConnQueue(ln.Addr())}
	srv := echo.NewServer(h, false)
	go func() { _ = srv.Serve(s.https) }()
	t.Cleanup(func() { _ = srv.Close() })
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go s.serveTLS(c)
		}
	}()
	return s
}

// plain returns a listener that yields the connections of ln that are
// HTTP, serving those of TCP echo pods itself.
func (s *echoStreams) plain(ln net.Listener) net.Listener {
	q := newConnQueue(ln.Addr())
	s.t.Cleanup(func() { _ = q.Close() })
	go func() {
		defer ln.Close()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				pod, spec, err := s.podSpec(c)
				if err == nil && pod.tcpEcho() {
					_ = echo.ServeTCP(c, pod.context(spec))
					return
				}
				// HTTP pods, and addresses without a pod, which the HTTP
				// echo refuses as it does.
				q.put(c)
			}()
		}
	}()
	return q
}

// serveTLS answers a connection to 8443 as the pod it reached would: TLS
// with its certificate, then the TCP or the HTTP echo. A pod that serves
// no TLS (or whose Secret is missing) closes it, as a pod without the
// port would refuse it.
func (s *echoStreams) serveTLS(c net.Conn) {
	pod, spec, err := s.podSpec(c)
	if err != nil {
		c.Close()
		return
	}
	cert, err := s.certificate(spec)
	if err != nil {
		c.Close()
		return
	}
	tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	if pod.tcpEcho() {
		_ = echo.ServeTCP(tc, pod.context(spec))
		return
	}
	s.https.put(tc)
}

// echoPod is a pod's echo-basic container, as its environment configures
// it.
type echoPod struct {
	env map[string]string
}

func (p echoPod) tcpEcho() bool { return p.env["TCP_ECHO_SERVER"] != "" }

func (p echoPod) context(spec *corev1.Pod) tcpserver.Context {
	return tcpserver.Context{
		Namespace: spec.Namespace, Pod: spec.Name,
		Ingress: p.env["INGRESS_NAME"], Service: p.env["SERVICE_NAME"],
		TCPPort: fmt.Sprint(echoPlainPort), TLSPort: fmt.Sprint(echoTLSPort),
	}
}

// podSpec reads the Pod a connection reached and its first container's
// environment (literal values and the name and namespace field
// references the suite's manifests use).
func (s *echoStreams) podSpec(c net.Conn) (echoPod, *corev1.Pod, error) {
	who, ok := s.pods.PodOf(c)
	if !ok {
		return echoPod{}, nil, errors.New("no pod on this address")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	spec, err := s.api.CoreV1().Pods(who.Namespace).Get(ctx, who.Name, metav1.GetOptions{})
	if err != nil {
		return echoPod{}, nil, err
	}
	if len(spec.Spec.Containers) == 0 {
		return echoPod{}, nil, fmt.Errorf("pod %s/%s has no container", spec.Namespace, spec.Name)
	}
	p := echoPod{env: map[string]string{}}
	for _, e := range spec.Spec.Containers[0].Env {
		v := e.Value
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			switch e.ValueFrom.FieldRef.FieldPath {
			case "metadata.name":
				v = spec.Name
			case "metadata.namespace":
				v = spec.Namespace
			}
		}
		p.env[e.Name] = v
	}
	return p, spec, nil
}

// certificate is the key pair the container's TLS_SERVER_CERT and
// TLS_SERVER_PRIVKEY (TLS_SERVER_PRIV_KEY for the TCP echo) name, files
// of a Secret volume.
func (s *echoStreams) certificate(spec *corev1.Pod) (tls.Certificate, error) {
	env := func(name string) string {
		for _, e := range spec.Spec.Containers[0].Env {
			if e.Name == name {
				return e.Value
			}
		}
		return ""
	}
	certPath, keyPath := env("TLS_SERVER_CERT"), env("TLS_SERVER_PRIVKEY")
	if keyPath == "" {
		keyPath = env("TLS_SERVER_PRIV_KEY")
	}
	if certPath == "" || keyPath == "" {
		return tls.Certificate{}, errors.New("the pod serves no TLS")
	}
	certPEM, err := s.secretFile(spec, certPath)
	if err != nil {
		return tls.Certificate{}, err
	}
	keyPEM, err := s.secretFile(spec, keyPath)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.X509KeyPair(certPEM, keyPEM)
}

// secretFile reads the file at file from the Secret volume mounted above
// it.
func (s *echoStreams) secretFile(spec *corev1.Pod, file string) ([]byte, error) {
	for _, m := range spec.Spec.Containers[0].VolumeMounts {
		rel, ok := strings.CutPrefix(file, strings.TrimSuffix(m.MountPath, "/")+"/")
		if !ok {
			continue
		}
		for _, v := range spec.Spec.Volumes {
			if v.Name != m.Name || v.Secret == nil {
				continue
			}
			key := path.Clean(rel)
			for _, it := range v.Secret.Items {
				if it.Path == key {
					key = it.Key
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			sec, err := s.api.CoreV1().Secrets(spec.Namespace).Get(ctx, v.Secret.SecretName, metav1.GetOptions{})
			if err != nil {
				return nil, err
			}
			data, ok := sec.Data[key]
			if !ok {
				return nil, fmt.Errorf("secret %s/%s has no %s", spec.Namespace, sec.Name, key)
			}
			return data, nil
		}
	}
	return nil, fmt.Errorf("%s is in no Secret volume of pod %s/%s", file, spec.Namespace, spec.Name)
}

// connQueue is a listener fed with connections accepted elsewhere.
type connQueue struct {
	addr net.Addr
	ch   chan net.Conn
	once sync.Once
	done chan struct{}
}

func newConnQueue(addr net.Addr) *connQueue {
	return &connQueue{addr: addr, ch: make(chan net.Conn), done: make(chan struct{})}
}

func (q *connQueue) put(c net.Conn) {
	select {
	case q.ch <- c:
	case <-q.done:
		c.Close()
	}
}

func (q *connQueue) Accept() (net.Conn, error) {
	select {
	case c := <-q.ch:
		return c, nil
	case <-q.done:
		return nil, net.ErrClosed
	}
}

func (q *connQueue) Close() error {
	q.once.Do(func() { close(q.done) })
	return nil
}

func (q *connQueue) Addr() net.Addr { return q.addr }
