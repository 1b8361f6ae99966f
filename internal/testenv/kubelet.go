package testenv

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/perimeter-ingress/perimeter/internal/testenv/echo"
)

// NodeName is the Node the bed's pods run on. While a Workloads runs, the
// Node object exists and points the API server at a stand-in kubelet in the
// test process, so that `kubectl logs` (pods/log) reads what the echo server
// logged for a pod. It is deleted again when the last Workloads ends: a
// Node with an InternalIP would otherwise become a BGP peer of every later
// test that peers with the cluster's nodes.
const NodeName = "testenv"

// kubelet serves the one kubelet API the API server proxies for the bed,
// GET /containerLogs/{namespace}/{pod}/{container}, over HTTPS on
// 127.0.0.1 with a self-signed certificate: the API server verifies a
// kubelet's certificate only when given --kubelet-certificate-authority.
// The echo server answers for every container of a pod, so a pod has one
// log, whichever container is asked for.
type kubelet struct {
	mu      sync.Mutex
	sources []*echo.Pods
	srv     *http.Server
	port    int
}

// serveLogs makes the logs of pods readable through the API server until
// the test ends.
func (c *Cluster) serveLogs(tb testing.TB, pods *echo.Pods) {
	tb.Helper()
	ctx := context.Background()
	if err := c.kubelet.add(ctx, c.Admin, pods); err != nil {
		tb.Fatalf("kubelet stand-in: %v", err)
	}
	tb.Cleanup(func() {
		if err := c.kubelet.remove(ctx, c.Admin, pods); err != nil {
			tb.Errorf("kubelet stand-in: %v", err)
		}
	})
}

func (k *kubelet) add(ctx context.Context, api kubernetes.Interface, pods *echo.Pods) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.srv == nil {
		if err := k.start(); err != nil {
			return err
		}
	}
	// Written every time, not only at start: a lab directory reused after a
	// crash may hold a Node pointing at an old port.
	if err := ensureNode(ctx, api, k.port); err != nil {
		if len(k.sources) == 0 {
			_ = k.srv.Close()
			k.srv = nil
		}
		return err
	}
	k.sources = append(k.sources, pods)
	return nil
}

func (k *kubelet) remove(ctx context.Context, api kubernetes.Interface, pods *echo.Pods) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if i := slices.Index(k.sources, pods); i >= 0 {
		k.sources = slices.Delete(k.sources, i, i+1)
	}
	if len(k.sources) > 0 || k.srv == nil {
		return nil
	}
	err := api.CoreV1().Nodes().Delete(ctx, NodeName, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		err = nil
	}
	err = errors.Join(err, k.srv.Close())
	k.srv = nil
	return err
}

func (k *kubelet) start() error {
	cert, err := selfSignedLoopback()
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", k.containerLogs)
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
	}
	go func() { _ = srv.ServeTLS(ln, "", "") }() // returns when remove closes it
	k.srv, k.port = srv, ln.Addr().(*net.TCPAddr).Port
	return nil
}

// ensureNode creates or updates the Node the API server finds the kubelet
// of NodeName by: its address (an InternalIP, which the API server's
// default --kubelet-preferred-address-types accept) and kubelet port.
func ensureNode(ctx context.Context, api kubernetes.Interface, port int) error {
	status := corev1.NodeStatus{
		Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(port)}},
	}
	nodes := api.CoreV1().Nodes()
	n, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: NodeName}, Status: status}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		n, err = nodes.Get(ctx, NodeName, metav1.GetOptions{})
	}
	if err != nil {
		return fmt.Errorf("node %s: %w", NodeName, err)
	}
	if slices.Equal(n.Status.Addresses, status.Addresses) && n.Status.DaemonEndpoints == status.DaemonEndpoints {
		return nil
	}
	n.Status.Addresses, n.Status.DaemonEndpoints = status.Addresses, status.DaemonEndpoints
	if _, err := nodes.UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("node %s status: %w", NodeName, err)
	}
	return nil
}

// kubeletTimestamp is how the kubelet prefixes lines with timestamps=true:
// RFC 3339 with nanoseconds always nine digits wide.
const kubeletTimestamp = "2006-01-02T15:04:05.000000000Z07:00"

// containerLogs answers as the kubelet does, with the query parameters the
// API server passes on from PodLogOptions: sinceTime (RFC 3339) or
// sinceSeconds, timestamps, tailLines and limitBytes. follow returns the
// log as it is now instead of streaming.
func (k *kubelet) containerLogs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var since time.Time
	if v := q.Get("sinceTime"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			http.Error(w, "sinceTime: "+err.Error(), http.StatusBadRequest)
			return
		}
		since = t
	}
	if v := q.Get("sinceSeconds"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			http.Error(w, "sinceSeconds: want a positive number", http.StatusBadRequest)
			return
		}
		since = time.Now().Add(-time.Duration(n) * time.Second)
	}
	timestamps := false
	if v := q.Get("timestamps"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			http.Error(w, "timestamps: "+err.Error(), http.StatusBadRequest)
			return
		}
		timestamps = b
	}
	tail, limit := int64(-1), int64(-1)
	for _, p := range []struct {
		name string
		to   *int64
	}{{"tailLines", &tail}, {"limitBytes", &limit}} {
		if v := q.Get(p.name); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				http.Error(w, p.name+": want a number, 0 or more", http.StatusBadRequest)
				return
			}
			*p.to = n
		}
	}

	var lines []echo.Line
	k.mu.Lock()
	for _, s := range k.sources {
		if lines = s.Logs(r.PathValue("namespace"), r.PathValue("pod")); lines != nil {
			break
		}
	}
	k.mu.Unlock()
	// The kubelet keeps a line written in the very second sinceTime names
	// but before it: only lines before since are dropped.
	lines = slices.DeleteFunc(lines, func(l echo.Line) bool { return l.Time.Before(since) })
	if tail >= 0 && int64(len(lines)) > tail {
		lines = lines[int64(len(lines))-tail:]
	}
	var out bytes.Buffer
	for _, l := range lines {
		if timestamps {
			out.WriteString(l.Time.UTC().Format(kubeletTimestamp) + " ")
		}
		out.WriteString(l.Text + "\n")
	}
	if limit >= 0 && int64(out.Len()) > limit {
		out.Truncate(int(limit))
	}
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write(out.Bytes())
}

// selfSignedLoopback is a serving certificate for 127.0.0.1 that nobody
// trusts, which is all the API server needs of a kubelet here.
func selfSignedLoopback() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	now := time.Now().Add(-time.Hour)
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "testenv-kubelet"},
		NotBefore:    now,
		NotAfter:     now.Add(certificateLife),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("kubelet certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
