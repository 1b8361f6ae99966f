package e2e

import (
	"bufio"
	"crypto/sha1"
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

// feEchoPod starts a pod on 198.18.<subnet>.<host> whose answers show what
// it received: X-Pod, X-Seen-Uri, X-Seen-Host, X-Seen-<name> for each
// request header, and the method. /slow waits 2s before answering; /ws
// switches protocols and then echoes bytes, like a WebSocket.
func feEchoPod(t *testing.T, name string, subnet, host int) *fePod {
	t.Helper()
	p := &fePod{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.requests.Add(1)
		switch r.URL.Path {
		case "/ws":
			feUpgrade(w, r, name)
			return
		case "/slow":
			time.Sleep(2 * time.Second)
		}
		hd := w.Header()
		hd.Set("X-Pod", name)
		hd.Set("X-Seen-Uri", r.URL.RequestURI())
		hd.Set("X-Seen-Host", r.Host)
		hd.Set("X-Seen-Method", r.Method)
		for k, v := range r.Header {
			hd.Set("X-Seen-"+k, strings.Join(v, ","))
		}
		_, _ = io.WriteString(w, name)
	})
	p.Pod = testenv.StartPod(t, testenv.PodOptions{Name: name, IP: fmt.Sprintf("198.18.%d.%d", subnet, host), Handler: h})
	return p
}

// fePod is an echo pod that counts the requests it answered.
type fePod struct {
	*testenv.Pod
	requests atomic.Int64
}

func (p *fePod) Requests() int64 { return p.requests.Load() }

// feUpgrade answers 101 and echoes every line it reads, prefixed with the
// pod name, until the client closes.
func feUpgrade(w http.ResponseWriter, r *http.Request, name string) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "no hijack", 500)
		return
	}
	conn, rw, err := hj.Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	sum := sha1.Sum([]byte(r.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	_, _ = rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " +
		base64.StdEncoding.EncodeToString(sum[:]) + "\r\n\r\n")
	_ = rw.Flush()
	for {
		line, err := rw.ReadString('\n')
		if err != nil {
			return
		}
		_, _ = rw.WriteString(name + ":" + line)
		if rw.Flush() != nil {
			return
		}
	}
}

func (d *daemon) feDo(method, host, path string, hdr map[string]string) (response, error) {
	h := http.Header{}
	for k, v := range hdr {
		h.Set(k, v)
	}
	return d.do(method, host, path, h)
}

// feExpect polls until the request answers with status and check passes.
func (d *daemon) feExpect(method, host, path string, hdr map[string]string, status int, check func(response) error) response {
	d.t.Helper()
	var last response
	testenv.Eventually(d.t, 15*time.Second, func() error {
		r, err := d.feDo(method, host, path, hdr)
		if err != nil {
			return err
		}
		last = r
		if r.status != status {
			return fmt.Errorf("%s %s%s: status %d, want %d (body %q)", method, host, path, r.status, status, r.body)
		}
		if check != nil {
			return check(r)
		}
		return nil
	})
	return last
}

func feHeader(r response, name, want string) error {
	if got := r.header.Get(name); got != want {
		return fmt.Errorf("header %s = %q, want %q", name, got, want)
	}
	return nil
}

func feHeaders(r response, kv ...string) error {
	for i := 0; i+1 < len(kv); i += 2 {
		if err := feHeader(r, kv[i], kv[i+1]); err != nil {
			return err
		}
	}
	return nil
}

// TestRedirectsAndRewrites: path-rewrite (two lines, applied in order),
// set-host, request-set-header
// (value with a quote and a percent sign, sent literally; %[...] sample
// expressions evaluated), response-set-header (%[status] evaluated),
// request-redirect (host:port and URL forms) with their codes.
func TestRedirectsAndRewrites(t *testing.T) {
	e := newEnv(t)
	d := e.startDaemon()
	pod := feEchoPod(t, "rw-0", 80, 10)
	e.service("rw", nil, pod.Pod)
	e.service("redir", nil, pod.Pod)
	e.service("redir-url", nil, pod.Pod)
	e.ingress("rw", map[string]string{
		"haproxy.org/path-rewrite":        "/api/(.*) /\\1\n^/v1/(.*) /v2/\\1",
		"haproxy.org/set-host":            "backend.local",
		"haproxy.org/request-set-header":  "X-Tenant it's 100% \"ours\" #1\nX-Two two\nX-Three %[method] q=%[url_param(q)]",
		"haproxy.org/response-set-header": "Cache-Control \"no-store,no-cache,private\"\nX-Status %[status]",
	}, rule{host: "rw.example", path: "/", service: "rw"})
	e.ingress("redir", map[string]string{
		"haproxy.org/request-redirect":      "example.com:8443",
		"haproxy.org/request-redirect-code": "301",
	}, rule{host: "redir.example", path: "/", service: "redir"})
	e.ingress("redir-url", map[string]string{
		"ingress.kubernetes.io/request-redirect":      "https://new.example/landing",
		"ingress.kubernetes.io/request-redirect-code": "308",
	}, rule{host: "old.example", path: "/", service: "redir-url"})

	d.feExpect("GET", "rw.example", "/api/items?q=1", nil, 200, func(r response) error {
		return feHeaders(r, "X-Pod", "rw-0", "X-Seen-Uri", "/items?q=1", "X-Seen-Host", "backend.local",
			"X-Seen-X-Tenant", `it's 100% "ours" #1`, "X-Seen-X-Two", "two", "X-Seen-X-Three", "GET q=1",
			"Cache-Control", "no-store,no-cache,private", "X-Status", "200")
	})
	// The second rule rewrites what the first one left.
	d.feExpect("GET", "rw.example", "/api/v1/items", nil, 200, func(r response) error { return feHeader(r, "X-Seen-Uri", "/v2/items") })
	d.feExpect("GET", "rw.example", "/v1/x", nil, 200, func(r response) error { return feHeader(r, "X-Seen-Uri", "/v2/x") })
	// A path the regex does not match goes through unchanged.
	d.feExpect("GET", "rw.example", "/other", nil, 200, func(r response) error { return feHeader(r, "X-Seen-Uri", "/other") })
	d.feExpect("GET", "redir.example", "/x/y?z=1", nil, 301, func(r response) error {
		return feHeader(r, "Location", "http://example.com:8443/x/y?z=1")
	})
	d.feExpect("GET", "old.example", "/anything", nil, 308, func(r response) error {
		return feHeader(r, "Location", "https://new.example/landing")
	})
	if n := pod.Requests(); n == 0 {
		t.Fatal("pod saw no request")
	}
	// Redirects are answered by HAProxy alone.
	before := pod.Requests()
	d.feExpect("GET", "redir.example", "/", nil, 301, nil)
	if after := pod.Requests(); after != before {
		t.Fatalf("a redirect reached the pod (%d -> %d requests)", before, after)
	}
}

// TestCORS: a listed origin is echoed with the CORS headers, another one
// gets none, a preflight OPTIONS is answered 204 by HAProxy without
// reaching the pod, and a regex origin matches.
func TestCORS(t *testing.T) {
	e := newEnv(t)
	d := e.startDaemon()
	pod := feEchoPod(t, "cors-0", 81, 10)
	e.service("cors", nil, pod.Pod)
	e.service("cors-re", nil, pod.Pod)
	e.ingress("cors", map[string]string{
		"haproxy.org/cors-enable":             "true",
		"haproxy.org/cors-allow-origin":       "https://a.example, https://b.example:8443",
		"haproxy.org/cors-allow-methods":      "GET, POST",
		"haproxy.org/cors-allow-headers":      "X-Custom-Header",
		"haproxy.org/cors-allow-credentials":  "true",
		"haproxy.org/cors-max-age":            "1m",
		"haproxy.org/cors-respond-to-options": "true",
	}, rule{host: "cors.example", path: "/", service: "cors"})
	e.ingress("cors-re", map[string]string{
		"haproxy.org/cors-enable":       "true",
		"haproxy.org/cors-allow-origin": `^https://(.+\.)?c\.example$`,
	}, rule{host: "corsre.example", path: "/", service: "cors-re"})

	d.feExpect("GET", "cors.example", "/", map[string]string{"Origin": "https://a.example"}, 200, func(r response) error {
		return feHeaders(r, "X-Pod", "cors-0", "Access-Control-Allow-Origin", "https://a.example",
			"Access-Control-Allow-Methods", "GET, POST", "Access-Control-Allow-Headers", "X-Custom-Header",
			"Access-Control-Allow-Credentials", "true", "Access-Control-Max-Age", "60", "Vary", "Origin")
	})
	r := d.feExpect("GET", "cors.example", "/", map[string]string{"Origin": "https://evil.example"}, 200, nil)
	if v := r.header.Get("Access-Control-Allow-Origin"); v != "" {
		t.Fatalf("origin not allowed, but Access-Control-Allow-Origin is %q", v)
	}
	before := pod.Requests()
	d.feExpect("OPTIONS", "cors.example", "/", map[string]string{"Origin": "https://b.example:8443", "Access-Control-Request-Method": "POST"}, 204, func(r response) error {
		return feHeaders(r, "X-Pod", "", "Access-Control-Allow-Origin", "https://b.example:8443", "Access-Control-Allow-Methods", "GET, POST",
			"Access-Control-Max-Age", "60")
	})
	if after := pod.Requests(); after != before {
		t.Fatalf("preflight reached the pod (%d -> %d requests)", before, after)
	}
	d.feExpect("GET", "corsre.example", "/", map[string]string{"Origin": "https://x.c.example"}, 200, func(r response) error {
		return feHeaders(r, "Access-Control-Allow-Origin", "https://x.c.example", "Access-Control-Allow-Methods", "*", "Access-Control-Max-Age", "5")
	})
	r = d.feExpect("GET", "corsre.example", "/", map[string]string{"Origin": "https://c.example.evil"}, 200, nil)
	if v := r.header.Get("Access-Control-Allow-Origin"); v != "" {
		t.Fatalf("regex origin not matched, but Access-Control-Allow-Origin is %q", v)
	}
}

// TestConfigSnippets: with --config-snippets=global,backend both kinds
// apply; a backend snippet HAProxy rejects is dropped from its backend
// alone (the backend keeps its other rules and serves), with an Event.
func TestConfigSnippets(t *testing.T) {
	e := newEnv(t)
	e.configMap("cm", map[string]string{"global-config-snippet": "presetenv PERIMETER_E2E_GREETING hello-from-global"})
	d := e.startDaemon("--configmap="+e.ns+"/cm", "--config-snippets=global,backend")
	pod := feEchoPod(t, "snip-0", 82, 10)
	e.service("good", map[string]string{
		"haproxy.org/backend-config-snippet": "http-response set-header X-Snippet yes\nhttp-response set-header X-Global %[env(PERIMETER_E2E_GREETING)]",
	}, pod.Pod)
	e.ingress("good", nil, rule{host: "good.example", path: "/", service: "good"})
	d.feExpect("GET", "good.example", "/", nil, 200, func(r response) error {
		return feHeaders(r, "X-Pod", "snip-0", "X-Snippet", "yes", "X-Global", "hello-from-global")
	})

	e.service("bad", map[string]string{"haproxy.org/backend-config-snippet": "http-response no-such-action x"}, pod.Pod)
	e.ingress("bad", map[string]string{"haproxy.org/response-set-header": "X-Kept yes"}, rule{host: "bad.example", path: "/", service: "bad"})
	d.feExpect("GET", "bad.example", "/", nil, 200, func(r response) error {
		return feHeaders(r, "X-Pod", "snip-0", "X-Kept", "yes")
	})
	ev := e.event("Service", "bad", "ConfigRejected")
	if !strings.Contains(ev.Message, "snippet") {
		t.Fatalf("event message %q does not name the snippet", ev.Message)
	}
	// The good backend keeps its snippet.
	d.feExpect("GET", "good.example", "/", nil, 200, func(r response) error { return feHeader(r, "X-Snippet", "yes") })
}

// TestErrorPages: --configmap-errorfile (the seeds' spelling) pages answer
// HAProxy's own 404 (no rule matches) and 503 (no server).
func TestErrorPages(t *testing.T) {
	e := newEnv(t)
	e.configMap("pages", map[string]string{
		"404": "<h1>perimeter: nothing here</h1>",
		"503": "HTTP/1.0 503 Service Unavailable\nCache-Control: no-cache\nContent-Type: text/html\nX-Page: custom\n\n<h1>perimeter: try later</h1>",
	})
	d := e.startDaemon("--configmap-errorfile=" + e.ns + "/pages")
	d.feExpect("GET", "nowhere.example", "/", nil, 404, func(r response) error {
		if r.body != "<h1>perimeter: nothing here</h1>" {
			return fmt.Errorf("404 body %q", r.body)
		}
		return feHeader(r, "Content-Type", "text/html")
	})
	e.service("empty", nil)
	e.ingress("empty", nil, rule{host: "empty.example", path: "/", service: "empty"})
	d.feExpect("GET", "empty.example", "/", nil, 503, func(r response) error {
		if r.body != "<h1>perimeter: try later</h1>" {
			return fmt.Errorf("503 body %q", r.body)
		}
		return feHeader(r, "X-Page", "custom")
	})
	// A changed page is served after the reload it needs.
	e.configMap("pages", map[string]string{"404": "<h1>moved on</h1>"})
	d.feExpect("GET", "nowhere.example", "/", nil, 404, func(r response) error {
		if r.body != "<h1>moved on</h1>" {
			return fmt.Errorf("404 body %q", r.body)
		}
		return nil
	})
}

// TestTimeoutsAndLogs: timeout-server cuts a silent server, a WebSocket
// outlives timeout-server thanks to timeout-tunnel, and the traffic log
// goes to syslog-server with log-format and a request-capture.
func TestTimeoutsAndLogs(t *testing.T) {
	e := newEnv(t)
	logs := feSyslog(t)
	e.configMap("cm", map[string]string{
		"timeout-server": "1s",
		"timeout-tunnel": "1m",
		"syslog-server":  "address:127.0.0.1, port:" + strconv.Itoa(logs.port) + ", facility:local0",
		"log-format":     "perimeter-e2e %ST %b %hr",
	})
	d := e.startDaemon("--configmap=" + e.ns + "/cm")
	pod := feEchoPod(t, "to-0", 84, 10)
	e.service("to", nil, pod.Pod)
	e.ingress("to", map[string]string{"haproxy.org/request-capture": "hdr(X-Trace)", "haproxy.org/request-capture-len": "16"},
		rule{host: "to.example", path: "/", service: "to"})
	d.feExpect("GET", "to.example", "/", map[string]string{"X-Trace": "trace-1234567890abcdef"}, 200, nil)
	// The capture is cut at 16 characters.
	logs.expect(t, "perimeter-e2e 200 "+e.ns+"_to_80 {trace-1234567890}")

	// The pod answers /slow after 2s: past timeout-server, HAProxy gives 504.
	d.feExpect("GET", "to.example", "/slow", nil, 504, nil)

	// A tunnel idle for longer than timeout-server survives.
	conn, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(d.httpPort))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(15 * time.Second))
	fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: to.example\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		t.Fatalf("upgrade: status %d %q", resp.StatusCode, body)
	}
	for i := range 2 {
		// Idle on purpose: the subject of the test is an idle tunnel
		// outliving timeout-server (1s).
		time.Sleep(1500 * time.Millisecond)
		fmt.Fprintf(conn, "ping %d\n", i)
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("tunnel closed after %d idle periods longer than timeout-server: %v", i+1, err)
		}
		if want := fmt.Sprintf("to-0:ping %d\n", i); line != want {
			t.Fatalf("tunnel echoed %q, want %q", line, want)
		}
	}
}

// feSyslogServer collects the datagrams sent to a UDP port on 127.0.0.1.
type feSyslogServer struct {
	port  int
	mu    sync.Mutex
	lines []string
}

func feSyslog(t *testing.T) *feSyslogServer {
	t.Helper()
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	s := &feSyslogServer{port: pc.LocalAddr().(*net.UDPAddr).Port}
	go func() {
		buf := make([]byte, 65536)
		for {
			n, _, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			s.mu.Lock()
			s.lines = append(s.lines, string(buf[:n]))
			s.mu.Unlock()
		}
	}()
	return s
}

func (s *feSyslogServer) expect(t *testing.T, sub string) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, l := range s.lines {
			if strings.Contains(l, sub) {
				return nil
			}
		}
		return fmt.Errorf("no log line with %q among %d: %q", sub, len(s.lines), s.lines)
	})
}

// TestTCPServices: a --configmap-tcp-services port forwards raw TCP to the
// Service's pods, and endpoint changes apply without a reload.
func TestTCPServices(t *testing.T) {
	e := newEnv(t)
	port := testenv.FreePort(t)
	e.configMap("tcp", map[string]string{strconv.Itoa(port): e.ns + "/db:80"})
	d := e.startDaemon("--configmap-tcp-services=" + e.ns + "/tcp")
	p0, p1 := feEchoPod(t, "tcp-0", 85, 10), feEchoPod(t, "tcp-1", 85, 11)
	svc := e.service("db", nil, p0.Pod)
	// Raw TCP: the pod's answer comes back byte for byte, unparsed by HAProxy.
	rawGet := func() (string, error) {
		conn, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), 2*time.Second)
		if err != nil {
			return "", err
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(conn, "GET /tcp HTTP/1.0\r\nHost: raw\r\n\r\n"); err != nil {
			return "", err
		}
		b, err := io.ReadAll(conn)
		return string(b), err
	}
	expectPod := func(name string) {
		testenv.Eventually(t, 15*time.Second, func() error {
			out, err := rawGet()
			if err != nil {
				return err
			}
			if !strings.Contains(out, "X-Pod: "+name) || !strings.Contains(out, "X-Seen-Uri: /tcp") {
				return fmt.Errorf("answer %q is not from %s", out, name)
			}
			return nil
		})
	}
	expectPod("tcp-0")
	before := d.reloads()
	svc.SetEndpoints(t, endpoints(p1.Pod)...)
	expectPod("tcp-1")
	if after := d.reloads(); after != before {
		t.Fatalf("endpoint change of a TCP service reloaded HAProxy %d times", after-before)
	}
}
