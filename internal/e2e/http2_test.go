package e2e

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// HTTP/2 tests use pods in 198.18.92.0/24.

// h2Get requests https://127.0.0.1:port/ for host with a client that
// offers h2 and http/1.1 by ALPN, and returns the protocol it got.
func h2Get(port int, host string) (proto int, pod string, err error) {
	c := &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{ServerName: host, InsecureSkipVerify: true}, //nolint:gosec // not what this test checks
			ForceAttemptHTTP2: true,
			DisableKeepAlives: true,
		},
	}
	req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("https://127.0.0.1:%d/", port), nil)
	if err != nil {
		return 0, "", err
	}
	req.Host = host
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return resp.ProtoMajor, "", fmt.Errorf("status %d", resp.StatusCode)
	}
	return resp.ProtoMajor, resp.Header.Get("X-Pod"), nil
}

// TestHTTP2Clients: the https frontend speaks HTTP/2 to clients that offer
// it (ALPN h2,http/1.1 by default), and HTTP/1.1 only once the ConfigMap's
// tls-alpn says so.
func TestHTTP2Clients(t *testing.T) {
	e := newEnv(t)
	pods := e.pods("h2", 92, 1)
	e.service("web", nil, pods[0])
	e.tlsIngress("h2", "h2.example", "web", "", nil)
	e.configMap("cm", map[string]string{})
	_, port := e.tlsDaemon("--configmap=" + e.ns + "/cm")
	expectProto := func(want int) {
		t.Helper()
		testenv.Eventually(t, 15*time.Second, func() error {
			proto, pod, err := h2Get(port, "h2.example")
			if err != nil {
				return err
			}
			if proto != want || pod != "h2-0" {
				return fmt.Errorf("HTTP/%d from %q, want HTTP/%d from h2-0", proto, pod, want)
			}
			return nil
		})
	}
	expectProto(2)
	e.configMap("cm", map[string]string{"tls-alpn": "http/1.1"})
	expectProto(1)
}
