package e2e

import (
	"bufio"
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
	res := keepAliveThroughReloads(e, d, 140, 20)
	t.Logf("keep-alive load through %d reloads: %s", res.reloads, res)
	if res.failed != 0 {
		t.Fatalf("%d of %d requests failed across %d reloads; first errors:\n%s",
			res.failed, res.requests(), res.reloads, strings.Join(res.errors, "\n"))
	}
	// Every reload leaves the old worker with connections to hand over: each
	// must have been closed by an announced close, not silently.
	if res.announcedCloses < int64(res.reloads) {
		t.Fatalf("%d connections closed with Connection: close over %d reloads; want at least one per reload",
			res.announcedCloses, res.reloads)
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
		res := keepAliveThroughReloads(e, d, 141+i%8, 20)
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
func keepAliveThroughReloads(e *env, d *daemon, subnet, reloads int) keepAliveResult {
	t := e.t
	t.Helper()
	prefix := fmt.Sprintf("ka%d", subnet)
	host := prefix + ".test"
	pods := e.pods(prefix, subnet, 2)
	svcName := prefix + "-app"
	e.service(svcName, nil, pods...)
	e.ingress(prefix, nil, rule{host: host, path: "/", service: svcName})
	d.expect(host, "/", 200, "")

	load := startReloadLoad(fmt.Sprintf("127.0.0.1:%d", d.httpPort), host, keepAliveConns)
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
}

func startReloadLoad(addr, host string, conns int) *reloadLoad {
	l := &reloadLoad{done: make(chan struct{})}
	req := []byte("GET / HTTP/1.1\r\nHost: " + host + "\r\nUser-Agent: perimeter-e2e\r\n\r\n")
	for i := 0; i < conns; i++ {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.run(addr, req)
		}()
	}
	return l
}

func (l *reloadLoad) run(addr string, req []byte) {
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
			c, err := net.DialTimeout("tcp", addr, 2*time.Second)
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
	l.once.Do(func() { close(l.done) })
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
