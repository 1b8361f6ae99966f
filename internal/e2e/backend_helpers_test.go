package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// secret creates or replaces an Opaque Secret of the test namespace.
func (e *env) secret(name string, data map[string]string) {
	e.t.Helper()
	ctx := context.Background()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns}, Type: corev1.SecretTypeOpaque, StringData: data}
	secrets := e.c.Admin.CoreV1().Secrets(e.ns)
	if _, err := secrets.Create(ctx, s, metav1.CreateOptions{}); err != nil {
		cur, gerr := secrets.Get(ctx, name, metav1.GetOptions{})
		if gerr != nil {
			e.t.Fatal(err)
		}
		cur.Data, cur.StringData = nil, data
		if _, err := secrets.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			e.t.Fatal(err)
		}
	}
}

// cryptHash makes a SHA-512 crypt(3) hash with openssl, as an operator
// would for an auth-secret.
func cryptHash(t *testing.T, password string) string {
	t.Helper()
	out, err := exec.Command("openssl", "passwd", "-6", password).Output()
	if err != nil {
		t.Fatalf("openssl passwd: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// getWith sends a request with headers to the daemon's HTTP port.
func (d *daemon) getWith(host, path string, hdr map[string]string) (response, error) {
	h := http.Header{}
	for k, v := range hdr {
		h.Set(k, v)
	}
	return d.do(http.MethodGet, host, path, h)
}

// expectWith polls until the request answers status (and, with pod set,
// from that pod).
func (d *daemon) expectWith(host, path string, hdr map[string]string, status int, pod string) response {
	d.t.Helper()
	var last response
	testenv.Eventually(d.t, 10*time.Second, func() error {
		r, err := d.getWith(host, path, hdr)
		if err != nil {
			return err
		}
		last = r
		if r.status != status {
			return fmt.Errorf("%s%s %v: status %d, want %d (body %q)", host, path, hdr, r.status, status, r.body)
		}
		if pod != "" && r.header.Get("X-Pod") != pod {
			return fmt.Errorf("%s%s: answered by %q, want %q", host, path, r.header.Get("X-Pod"), pod)
		}
		return nil
	})
	return last
}

// rawRequest sends prefix (a PROXY header or nothing) and a GET on one
// connection from the local address src, and returns the response.
func (d *daemon) rawRequest(src, host, path string, prefix []byte) (*http.Response, string, error) {
	dialer := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	conn, err := dialer.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", d.httpPort))
	if err != nil {
		return nil, "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	req := fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", path, host)
	if _, err := conn.Write(append(append([]byte{}, prefix...), req...)); err != nil {
		return nil, "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, string(body), err
}

// proxyV1 is a PROXY protocol v1 header for a TCP4 connection.
func proxyV1(src, dst string, sport, dport int) []byte {
	return []byte(fmt.Sprintf("PROXY TCP4 %s %s %d %d\r\n", src, dst, sport, dport))
}

// proxyPod is a pod whose server expects a PROXY protocol header (v1 or
// v2) before each HTTP request and answers with the source address the
// header carried (X-Proxy-Source) and its version (X-Proxy-Version).
type proxyPod struct {
	*testenv.Pod
	ln net.Listener
	wg sync.WaitGroup
}

func startProxyPod(t *testing.T, name, ip string) *proxyPod {
	t.Helper()
	p := &proxyPod{Pod: testenv.StartPod(t, testenv.PodOptions{Name: name, IP: ip})}
	// The standard server speaks plain HTTP: replace it with a listener of
	// our own in the pod's namespace.
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	// The stopped server's goroutine may not have closed its listener yet.
	testenv.Eventually(t, 5*time.Second, func() error {
		return p.Netns.Do(func() error {
			var err error
			p.ln, err = net.Listen("tcp4", p.Addr())
			return err
		})
	})
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() {
		p.ln.Close()
		p.wg.Wait()
	})
	return p
}

func (p *proxyPod) serve() {
	defer p.wg.Done()
	for {
		conn, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			br := bufio.NewReader(conn)
			src, version, err := readProxyHeader(br)
			if err != nil {
				return // health checks close right after the header
			}
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			_ = req.Body.Close()
			body := p.Name
			fmt.Fprintf(conn, "HTTP/1.1 200 OK\r\nX-Pod: %s\r\nX-Proxy-Source: %s\r\nX-Proxy-Version: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
				p.Name, src, version, len(body), body)
		}()
	}
}

var proxyV2Sig = []byte("\r\n\r\n\x00\r\nQUIT\n")

// readProxyHeader reads a PROXY v1 or v2 header and returns the source
// address it carries.
func readProxyHeader(br *bufio.Reader) (src, version string, err error) {
	peek, err := br.Peek(12)
	if err != nil {
		return "", "", err
	}
	if bytes.Equal(peek, proxyV2Sig) {
		hdr := make([]byte, 16)
		if _, err := io.ReadFull(br, hdr); err != nil {
			return "", "", err
		}
		rest := make([]byte, binary.BigEndian.Uint16(hdr[14:16]))
		if _, err := io.ReadFull(br, rest); err != nil {
			return "", "", err
		}
		switch {
		case hdr[12]&0x0f == 0: // LOCAL: a health check
			return "local", "2", nil
		case hdr[13]>>4 == 1 && len(rest) >= 12: // AF_INET
			a := netip.AddrFrom4([4]byte(rest[0:4]))
			return a.String(), "2", nil
		case hdr[13]>>4 == 2 && len(rest) >= 36: // AF_INET6
			a := netip.AddrFrom16([16]byte(rest[0:16]))
			return a.String(), "2", nil
		}
		return "", "", errors.New("unsupported PROXY v2 family")
	}
	line, err := br.ReadString('\n')
	if err != nil {
		return "", "", err
	}
	f := strings.Fields(line)
	if len(f) < 2 || f[0] != "PROXY" {
		return "", "", fmt.Errorf("not a PROXY header: %q", line)
	}
	if f[1] == "UNKNOWN" || len(f) < 6 {
		return "unknown", "1", nil
	}
	if _, err := strconv.Atoi(f[4]); err != nil {
		return "", "", fmt.Errorf("bad PROXY v1 header %q", line)
	}
	return f[2], "1", nil
}
