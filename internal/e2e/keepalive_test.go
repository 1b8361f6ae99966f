package e2e

import (
	"bufio"
	"context"
	"crypto/sha1"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// TestReloadKeepAlive: keep-alive clients that never retry see no error
// while HAProxy reloads 20 times under their load. The old worker must
// answer what reaches it and announce the close on a response
// ("Connection: close") instead of closing a connection a request may
// already be travelling on.
func TestReloadKeepAlive(t *testing.T) {
	e := newEnv(t)
	d := e.startDaemon()
	res := keepAliveThroughReloads(e, d, 140, 20, func(host string) *reloadLoad {
		return startReloadLoad(tcpDialer(d.httpPort), host, keepAliveConns)
	})
	checkKeepAlive(t, res, true)
}

// TestReloadKeepAliveTLS: the same through the https frontend, for
// HTTP/1.1 clients and for HTTP/2 clients (whose requests share a few
// connections that the old worker ends with GOAWAY).
func TestReloadKeepAliveTLS(t *testing.T) {
	e := newEnv(t)
	d, port := e.tlsDaemon()
	t.Run("http/1.1", func(t *testing.T) {
		res := keepAliveThroughReloads(e, d, 142, 10, func(host string) *reloadLoad {
			return startReloadLoad(tlsDialer(port, host), host, keepAliveConns)
		})
		checkKeepAlive(t, res, true)
	})
	t.Run("h2", func(t *testing.T) {
		res := keepAliveThroughReloads(e, d, 143, 10, func(host string) *reloadLoad {
			return startReloadLoadH2(port, host, keepAliveConns)
		})
		checkKeepAlive(t, res, false)
	})
}

// checkKeepAlive fails the test unless no request failed and connections
// were really kept alive. h1 says whether each reload must have ended
// connections with Connection: close (HTTP/1) rather than GOAWAY.
func checkKeepAlive(t *testing.T, res keepAliveResult, h1 bool) {
	t.Helper()
	t.Logf("keep-alive load through %d reloads: %s", res.reloads, res)
	if res.failed != 0 {
		t.Fatalf("%d of %d requests failed across %d reloads; first errors:\n%s",
			res.failed, res.requests(), res.reloads, strings.Join(res.errors, "\n"))
	}
	// Every reload leaves the old worker with connections to hand over: each
	// must have been ended by the old worker, and the client moved on.
	if h1 && res.announcedCloses < int64(res.reloads) {
		t.Fatalf("%d connections closed with Connection: close over %d reloads; want at least one per reload",
			res.announcedCloses, res.reloads)
	}
	if res.dials <= int64(res.reloads) {
		t.Fatalf("%d connections opened over %d reloads; want new ones after each reload", res.dials, res.reloads)
	}
	// The load was keep-alive load: connections carried many requests.
	if res.ok < 20*res.dials {
		t.Fatalf("%d requests over %d connections: the load did not keep connections alive", res.ok, res.dials)
	}
}

// BenchmarkReloadKeepAlive prints how many requests of a keep-alive load
// failed while HAProxy reloaded 20 times (want 0).
func BenchmarkReloadKeepAlive(b *testing.B) {
	e := newEnv(b)
	d := e.startDaemon()
	for i := 0; i < b.N; i++ {
		res := keepAliveThroughReloads(e, d, 144+i%4, 20, func(host string) *reloadLoad {
			return startReloadLoad(tcpDialer(d.httpPort), host, keepAliveConns)
		})
		b.ReportMetric(float64(res.failed), "failed")
		b.ReportMetric(float64(res.requests()), "requests")
		b.ReportMetric(float64(res.reloads), "reloads")
		fmt.Printf("keep-alive load (%d connections, no retries) through %d reloads: %s\n",
			keepAliveConns, res.reloads, res)
	}
}

// keepAliveConns is the size of the client's connection pool.
const keepAliveConns = 32

type keepAliveResult struct {
	reloads         int
	ok, failed      int64
	dials           int64
	announcedCloses int64
	errors          []string
}

func (r keepAliveResult) requests() int64 { return r.ok + r.failed }

func (r keepAliveResult) String() string {
	return fmt.Sprintf("failed %d of %d requests (%d connections opened, %d closed by Connection: close)",
		r.failed, r.requests(), r.dials, r.announcedCloses)
}

// keepAliveThroughReloads serves a Service from pods in 198.18.<subnet>.0/24,
// runs the keep-alive load against it and forces reloads by changing a
// backend setting that needs one, waiting for each to complete.
func keepAliveThroughReloads(e *env, d *daemon, subnet, reloads int, start func(host string) *reloadLoad) keepAliveResult {
	t := e.t
	t.Helper()
	prefix := fmt.Sprintf("ka%d", subnet)
	host := prefix + ".test"
	pods := e.pods(prefix, subnet, 2)
	svcName := prefix + "-app"
	e.service(svcName, nil, pods...)
	e.ingress(prefix, nil, rule{host: host, path: "/", service: svcName})
	d.expect(host, "/", 200, "")

	load := start(host)
	defer load.stop()
	// Every connection of the pool is up and has answered before the first
	// reload, so that the reloads meet established keep-alive connections.
	testenv.Eventually(t, 10*time.Second, func() error {
		if n := load.ok.Load(); n < 10*keepAliveConns {
			return fmt.Errorf("%d requests answered so far", n)
		}
		return nil
	})

	first := d.reloads()
	for i := 0; i < reloads; i++ {
		before := d.reloads()
		e.annotate("Service", svcName, map[string]string{"haproxy.org/timeout-check": fmt.Sprintf("%ds", 2+i)})
		testenv.Eventually(t, 20*time.Second, func() error {
			if d.reloads() == before {
				return fmt.Errorf("reload %d not done yet", i+1)
			}
			return nil
		})
		// The next reload meets connections of the new worker, not only the
		// ones the old worker is still closing.
		okBefore := load.ok.Load()
		testenv.Eventually(t, 10*time.Second, func() error {
			if n := load.ok.Load() - okBefore; n < 2*keepAliveConns {
				return fmt.Errorf("%d requests answered since reload %d", n, i+1)
			}
			return nil
		})
	}
	load.stop()
	res := load.result()
	res.reloads = d.reloads() - first
	return res
}

// reloadLoad is a pool of HTTP/1.1 connections, each sending requests
// back to back. It does what a client without retries does: a request that
// fails is a failure, and a connection is reopened only after an error or
// after the server announced its close.
type reloadLoad struct {
	ok, failed, dials, announcedCloses atomic.Int64

	mu     sync.Mutex
	errors []string

	done chan struct{}
	once sync.Once
	wg   sync.WaitGroup
	// stopHook, when set, runs once the load has stopped.
	stopHook func()
}

// tcpDialer connects to the http frontend; tlsDialer to the https one,
// offering HTTP/1.1 only.
func tcpDialer(port int) func() (net.Conn, error) {
	return func() (net.Conn, error) {
		return net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), 2*time.Second)
	}
}

func tlsDialer(port int, host string) func() (net.Conn, error) {
	return func() (net.Conn, error) {
		d := &net.Dialer{Timeout: 2 * time.Second}
		//nolint:gosec // the served certificate is not what this test checks
		cfg := &tls.Config{ServerName: host, InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}}
		return tls.DialWithDialer(d, "tcp", "127.0.0.1:"+strconv.Itoa(port), cfg)
	}
}

func startReloadLoad(dial func() (net.Conn, error), host string, conns int) *reloadLoad {
	l := &reloadLoad{done: make(chan struct{})}
	req := []byte("GET / HTTP/1.1\r\nHost: " + host + "\r\nUser-Agent: perimeter-e2e\r\n\r\n")
	for i := 0; i < conns; i++ {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.run(dial, req)
		}()
	}
	return l
}

func (l *reloadLoad) run(dial func() (net.Conn, error), req []byte) {
	var conn net.Conn
	var br *bufio.Reader
	drop := func() {
		if conn != nil {
			conn.Close()
			conn = nil
		}
	}
	defer drop()
	for {
		select {
		case <-l.done:
			return
		default:
		}
		if conn == nil {
			c, err := dial()
			if err != nil {
				l.fail("dial: %v", err)
				// Pace the retries of a refused dial; each one counts.
				select {
				case <-l.done:
				case <-time.After(10 * time.Millisecond):
				}
				continue
			}
			l.dials.Add(1)
			conn, br = c, bufio.NewReader(c)
		}
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := conn.Write(req); err != nil {
			l.fail("write: %v", err)
			drop()
			continue
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			l.fail("read: %v", err)
			drop()
			continue
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch {
		case err != nil:
			l.fail("read body: %v", err)
			drop()
			continue
		case resp.StatusCode != http.StatusOK:
			l.fail("status %d", resp.StatusCode)
		default:
			l.ok.Add(1)
		}
		if resp.Close {
			l.announcedCloses.Add(1)
			drop()
		}
	}
}

// startReloadLoadH2 sends requests from conns goroutines through one HTTP/2
// client, as an application would: whatever the client's transport does on
// GOAWAY is its own, an error it returns is a failure.
func startReloadLoadH2(port int, host string, conns int) *reloadLoad {
	l := &reloadLoad{done: make(chan struct{})}
	tr := &http.Transport{
		//nolint:gosec // the served certificate is not what this test checks
		TLSClientConfig:   &tls.Config{ServerName: host, InsecureSkipVerify: true},
		ForceAttemptHTTP2: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			l.dials.Add(1)
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}
	c := &http.Client{Timeout: 5 * time.Second, Transport: tr}
	url := "https://127.0.0.1:" + strconv.Itoa(port) + "/"
	for i := 0; i < conns; i++ {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for {
				select {
				case <-l.done:
					return
				default:
				}
				req, err := http.NewRequest(http.MethodGet, url, nil)
				if err != nil {
					l.fail("request: %v", err)
					return
				}
				req.Host = host
				resp, err := c.Do(req)
				if err != nil {
					l.fail("%v", err)
					continue
				}
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch {
				case err != nil:
					l.fail("read body: %v", err)
				case resp.ProtoMajor != 2:
					l.fail("HTTP/%d, want HTTP/2", resp.ProtoMajor)
				case resp.StatusCode != http.StatusOK:
					l.fail("status %d", resp.StatusCode)
				default:
					l.ok.Add(1)
				}
			}
		}()
	}
	l.stopHook = tr.CloseIdleConnections
	return l
}

func (l *reloadLoad) fail(format string, args ...any) {
	l.failed.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.errors) < 10 {
		l.errors = append(l.errors, time.Now().Format("15:04:05.000000 ")+fmt.Sprintf(format, args...))
	}
}

// stop ends the load and waits for its connections to close.
func (l *reloadLoad) stop() {
	l.once.Do(func() {
		close(l.done)
		l.wg.Wait()
		if l.stopHook != nil {
			l.stopHook()
		}
	})
	l.wg.Wait()
}

func (l *reloadLoad) result() keepAliveResult {
	l.mu.Lock()
	defer l.mu.Unlock()
	return keepAliveResult{
		ok:              l.ok.Load(),
		failed:          l.failed.Load(),
		dials:           l.dials.Load(),
		announcedCloses: l.announcedCloses.Load(),
		errors:          append([]string(nil), l.errors...),
	}
}

// TestConnectionModes: http-connection-mode (and the deprecated
// http-server-close), logasap and the fin timeouts from the ConfigMap, on
// the real HAProxy.
func TestConnectionModes(t *testing.T) {
	e := newEnv(t)
	logs := feSyslog(t)
	syslog := "address:127.0.0.1, port:" + strconv.Itoa(logs.port) + ", facility:local0"
	e.configMap("cm", map[string]string{
		"http-connection-mode": "httpclose",
		"logasap":              "true",
		"timeout-client-fin":   "3s",
		"timeout-server-fin":   "2s",
		"syslog-server":        syslog,
		"log-format":           "perimeter-logasap %ST %B",
	})
	d := e.startDaemon("--configmap=" + e.ns + "/cm")
	pod := feEchoPod(t, "cm-0", 150, 10)
	e.service("cm", nil, pod.Pod)
	e.ingress("cm", nil, rule{host: "cm.example", path: "/", service: "cm"})
	d.feExpect("GET", "cm.example", "/", nil, 200, nil)
	for _, line := range []string{"option httpclose", "option logasap", "timeout client-fin 3s", "timeout server-fin 2s"} {
		if !strings.Contains(d.config(), "\n  "+line+"\n") {
			t.Fatalf("haproxy.cfg lacks %q", line)
		}
	}

	// httpclose: the client's connection ends with the first response.
	addr := "127.0.0.1:" + strconv.Itoa(d.httpPort)
	c := exchangeTwo(t, addr, "cm.example")
	if !c.closed || c.answered != 1 {
		t.Fatalf("httpclose: %+v, want one answer and the connection closed", c)
	}
	// logasap: the log line is written when the headers arrive, with the
	// byte count marked as not final.
	logs.expect(t, "perimeter-logasap 200 +")

	// http-server-close (through its deprecated key): the client keeps its
	// connection, the pod gets one per request.
	e.configMap("cm", map[string]string{"http-server-close": "true"})
	testenv.Eventually(t, 15*time.Second, func() error {
		if cfg := d.config(); !strings.Contains(cfg, "\n  option http-server-close\n") || strings.Contains(cfg, "httpclose") {
			return fmt.Errorf("haproxy.cfg not updated yet")
		}
		return nil
	})
	testenv.Eventually(t, 10*time.Second, func() error {
		c := exchangeTwo(t, addr, "cm.example")
		if c.closed || c.answered != 2 || c.podSaw != "close" {
			return fmt.Errorf("http-server-close: %+v, want two answers on one connection and the pod told to close", c)
		}
		return nil
	})

	// Unset: HAProxy's keep-alive on both sides.
	e.configMap("cm", map[string]string{})
	testenv.Eventually(t, 15*time.Second, func() error {
		c := exchangeTwo(t, addr, "cm.example")
		if c.closed || c.answered != 2 || c.podSaw != "" {
			return fmt.Errorf("keep-alive: %+v, want two answers on one connection and no close for the pod", c)
		}
		return nil
	})
	for _, key := range []string{"http-server-close", "logasap", "client-fin", "server-fin"} {
		if strings.Contains(d.config(), key) {
			t.Fatalf("haproxy.cfg still has %s after the ConfigMap dropped it", key)
		}
	}
}

type exchangeTwoResult struct {
	answered int
	closed   bool
	// podSaw is the Connection header the pod received.
	podSaw string
}

// exchangeTwo sends up to two requests on one connection and reports how many
// were answered, whether the server closed the connection after the last,
// and what the pod was told about its own connection.
func exchangeTwo(t *testing.T, addr, host string) exchangeTwoResult {
	t.Helper()
	var res exchangeTwoResult
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(conn)
	for range 2 {
		if _, err := fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", host); err != nil {
			break
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			break
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			res.answered++
		}
		res.podSaw = resp.Header.Get("X-Seen-Connection")
		if resp.Close {
			_, err := br.ReadByte()
			res.closed = err == io.EOF
			break
		}
	}
	return res
}

// TestConnectionFinTimeouts: a WebSocket tunnel (timeout-tunnel 1m) that
// the client half-closed while its pod stays silent ends after
// timeout-server-fin; without it, or with only timeout-client-fin (the
// client's side, which is not the silent one), it stays.
func TestConnectionFinTimeouts(t *testing.T) {
	e := newEnv(t)
	e.configMap("cm", map[string]string{"timeout-tunnel": "1m"})
	d := e.startDaemon("--configmap=" + e.ns + "/cm")
	stop := make(chan struct{})
	pod := testenv.StartPod(t, testenv.PodOptions{Name: "fin-0", IP: "198.18.151.10", Handler: finPod(stop)})
	t.Cleanup(func() { close(stop) })
	e.service("fin", nil, pod)
	e.ingress("fin", nil, rule{host: "fin.example", path: "/", service: "fin"})
	d.expect("fin.example", "/", 200, "")
	addr := "127.0.0.1:" + strconv.Itoa(d.httpPort)
	reconfigure := func(data map[string]string) {
		t.Helper()
		before := d.reloads()
		e.configMap("cm", data)
		testenv.Eventually(t, 15*time.Second, func() error {
			if d.reloads() == before {
				return fmt.Errorf("no reload yet")
			}
			return nil
		})
	}
	// halfClosed half-closes a tunnel from the client (the pod then stays
	// silent with its side open) and reads until HAProxy ends it or wait
	// passes.
	halfClosed := func(wait time.Duration) error {
		conn, br := finTunnel(t, addr, "/pod-silent")
		defer conn.Close()
		if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(wait))
		_, err := br.ReadByte()
		return err
	}

	if err := halfClosed(3 * time.Second); err == io.EOF {
		t.Fatal("without timeout-server-fin, a tunnel half-closed by the client ended within 3s")
	}
	reconfigure(map[string]string{"timeout-tunnel": "1m", "timeout-client-fin": "1s"})
	if !strings.Contains(d.config(), "\n  timeout client-fin 1s\n") {
		t.Fatal("haproxy.cfg lacks timeout client-fin 1s")
	}
	if err := halfClosed(3 * time.Second); err == io.EOF {
		t.Fatal("timeout-client-fin ended a tunnel whose silent side is the pod")
	}
	reconfigure(map[string]string{"timeout-tunnel": "1m", "timeout-server-fin": "1s"})
	if err := halfClosed(10 * time.Second); err != io.EOF {
		t.Fatalf("timeout-server-fin 1s: tunnel half-closed by the client, silent pod, not ended within 10s: %v", err)
	}
}

// finTunnel opens a WebSocket tunnel to path.
func finTunnel(t *testing.T, addr, path string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: fin.example\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", path)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		conn.Close()
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		conn.Close()
		t.Fatalf("%s: status %d, want 101", path, resp.StatusCode)
	}
	return conn, br
}

// finPod answers WebSocket upgrades: it reads until the client's FIN and
// then stays silent with its side open until stop.
func finPod(stop <-chan struct{}) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") == "" {
			_, _ = io.WriteString(w, "fin")
			return
		}
		conn, rw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		sum := sha1.Sum([]byte(r.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
		_, _ = rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " +
			base64.StdEncoding.EncodeToString(sum[:]) + "\r\n\r\n")
		if rw.Flush() != nil {
			return
		}
		_, _ = io.Copy(io.Discard, rw)
		<-stop
	})
}
