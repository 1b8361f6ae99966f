// Package echo answers HTTP requests the way the Gateway API conformance
// suite's echo-basic backend does: a JSON description of the request as the
// backend received it (path, host, method, protocol, headers) and of the pod
// that answered (namespace, pod), which is what the suite's assertions read.
//
// One server answers for many pods: the test bed gives each pod its own
// address and the server tells them apart by the local address a
// connection reached.
package echo

import (
	"encoding/json"
	"net"
	"net/http"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Pod is who answers on one address.
type Pod struct {
	Namespace string
	Name      string
}

// Request is the JSON body of an answer, with echo-basic's field names.
type Request struct {
	Path      string              `json:"path"`
	Host      string              `json:"host"`
	Method    string              `json:"method"`
	Proto     string              `json:"proto"`
	Headers   map[string][]string `json:"headers"`
	HTTPPort  string              `json:"httpPort"`
	Namespace string              `json:"namespace"`
	Ingress   string              `json:"ingress"`
	Service   string              `json:"service"`
	Pod       string              `json:"pod"`
}

// Pods maps local addresses to the pods behind them and keeps each pod's
// log; safe for concurrent use, as the bed adds pods while requests are
// served.
type Pods struct {
	mu   sync.RWMutex
	byIP map[netip.Addr]Pod
	logs map[Pod][]Line
}

// Set makes addr answer as pod.
func (p *Pods) Set(addr netip.Addr, pod Pod) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byIP == nil {
		p.byIP = map[netip.Addr]Pod{}
	}
	p.byIP[addr.Unmap()] = pod
}

// Delete forgets addr: requests reaching it are refused with 503. The
// pod's log goes with its last address, as a deleted pod's logs do.
func (p *Pods) Delete(addr netip.Addr) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pod, ok := p.byIP[addr.Unmap()]
	if !ok {
		return
	}
	delete(p.byIP, addr.Unmap())
	for _, other := range p.byIP {
		if other == pod {
			return
		}
	}
	delete(p.logs, pod)
}

func (p *Pods) lookup(addr netip.Addr) (Pod, bool) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	pod, ok := p.byIP[addr.Unmap()]
	return pod, ok
}

var statusPath = regexp.MustCompile(`^/status/(\d\d\d)$`)

// Handler serves the pods on port (reported as httpPort, as echo-basic
// reports its own): /health, /status/<code>, and everything else echoed.
// Each echoed request is logged to the pod's log with echo-basic's line,
// which the suite's mirroring tests look for in the pod's logs.
func Handler(pods *Pods, port int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pod, ok := localPod(pods, r)
		if !ok {
			// No pod lives here (any more): as a connection to a gone pod
			// would fail, say so plainly.
			http.Error(w, "no pod on this address", http.StatusServiceUnavailable)
			return
		}
		// echo-basic folds double slashes before routing (but echoes the
		// request URI as sent).
		path := strings.ReplaceAll(r.URL.Path, "//", "/")
		switch {
		case path == "/health":
			_, _ = w.Write([]byte("OK"))
			return
		case strings.HasPrefix(path, "/status/"):
			code := http.StatusBadRequest
			if m := statusPath.FindStringSubmatch(r.RequestURI); m != nil {
				code, _ = strconv.Atoi(m[1])
			}
			w.WriteHeader(code)
			return
		}
		pods.Logf(pod, "Echoing back request made to %s to client (%s)", r.RequestURI, r.RemoteAddr)
		if d := r.URL.Query().Get("delay"); d != "" {
			wait, err := time.ParseDuration(d)
			if err != nil {
				writeError(w, err)
				return
			}
			select {
			case <-time.After(wait):
			case <-r.Context().Done():
				return
			}
		}
		body, err := json.MarshalIndent(Request{
			Path: r.RequestURI, Host: r.Host, Method: r.Method, Proto: r.Proto, Headers: r.Header,
			HTTPPort: strconv.Itoa(port), Namespace: pod.Namespace, Pod: pod.Name,
		}, "", " ")
		if err != nil {
			writeError(w, err)
			return
		}
		setEchoHeaders(w, r.Header)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		_, _ = w.Write(body)
	})
}

func localPod(pods *Pods, r *http.Request) (Pod, bool) {
	a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return Pod{}, false
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return Pod{}, false
	}
	return pods.lookup(ap.Addr())
}

// setEchoHeaders: the suite asks for response headers through
// X-Echo-Set-Header: "Name: value, Other: value".
func setEchoHeaders(w http.ResponseWriter, h http.Header) {
	for _, list := range h["X-Echo-Set-Header"] {
		for kv := range strings.SplitSeq(list, ",") {
			name, value, _ := strings.Cut(strings.TrimSpace(kv), ":")
			// Set the map directly: the suite checks the name's case.
			if len(w.Header()[name]) == 0 {
				w.Header()[name] = []string{value}
			} else {
				w.Header()[name][0] += "," + strings.TrimSpace(value)
			}
		}
	}
}

func writeError(w http.ResponseWriter, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusInternalServerError)
	body, _ := json.Marshal(struct {
		Message string `json:"message"`
	}{err.Error()})
	_, _ = w.Write(body)
}

// NewServer returns a server for h speaking HTTP/1.1 and, with h2c, also
// HTTP/2 without TLS (echo-basic's second port); the caller Serves and
// Closes it.
func NewServer(h http.Handler, h2c bool) *http.Server {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	if h2c {
		p := new(http.Protocols)
		p.SetHTTP1(true)
		p.SetUnencryptedHTTP2(true)
		srv.Protocols = p
	}
	return srv
}
