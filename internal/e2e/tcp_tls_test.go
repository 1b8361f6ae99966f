package e2e

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// TCP TLS tests use pods in 198.18.91.0/24.

// TestTCPServiceTLS: a --configmap-tcp-services entry NS/SERVICE:PORT::ssl
// terminates TLS with the default certificate and forwards the decrypted
// bytes to a raw TCP pod.
func TestTCPServiceTLS(t *testing.T) {
	e := newEnv(t)
	port := testenv.FreePort(t)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	e.configMap("tcp", map[string]string{strconv.Itoa(port): e.ns + "/db:80::ssl"})
	pod := feEchoPod(t, "tcptls-0", 91, 10)
	e.service("db", nil, pod.Pod)
	e.tlsDaemon("--configmap-tcp-services=" + e.ns + "/tcp")

	// The pod speaks plain HTTP/1.0 behind HAProxy, which sees only bytes.
	exchange := func(conn net.Conn) (string, error) {
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(conn, "GET /tls HTTP/1.0\r\nHost: raw\r\n\r\n"); err != nil {
			return "", err
		}
		b, err := io.ReadAll(conn)
		return string(b), err
	}
	var subject string
	testenv.Eventually(t, 15*time.Second, func() error {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr,
			&tls.Config{ServerName: "db.example", InsecureSkipVerify: true}) //nolint:gosec // the test checks the certificate itself
		if err != nil {
			return err
		}
		st := conn.ConnectionState()
		if !st.HandshakeComplete || len(st.PeerCertificates) == 0 {
			conn.Close()
			return fmt.Errorf("handshake incomplete")
		}
		subject = subjectOf(st.PeerCertificates[0])
		out, err := exchange(conn)
		if err != nil {
			return err
		}
		if !strings.Contains(out, "X-Pod: tcptls-0") || !strings.Contains(out, "X-Seen-Uri: /tls") {
			return fmt.Errorf("answer %q is not from the pod", out)
		}
		return nil
	})
	if subject != generatedDefault {
		t.Fatalf("TCP service served %q, want the default certificate %q", subject, generatedDefault)
	}

	// In clear, the request is no TLS handshake: the pod never sees it.
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := exchange(conn); strings.Contains(out, "X-Pod") {
		t.Fatalf("a cleartext request reached the pod through a TLS port: %q", out)
	}
}
