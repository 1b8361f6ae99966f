package haproxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// These tests drive the real HAProxy. Upstreams are Go HTTP servers on
// 127.0.0.1; HAProxy binds free ports on 127.0.0.1 and ::1.

func requireHAProxy(tb testing.TB) {
	tb.Helper()
	if testing.Short() {
		tb.Skip("-short: skipping tests that run haproxy")
	}
	if os.Geteuid() != 0 {
		tb.Skip("not root: skipping tests that run haproxy")
	}
	if _, err := findProgram(""); err != nil {
		tb.Fatal("haproxy not installed (apt-get install haproxy): " + err.Error())
	}
}

func freePort(tb testing.TB, host string) int {
	tb.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func ipv6Loopback() bool {
	l, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		return false
	}
	l.Close()
	return true
}

type liveHAProxy struct {
	d                            *Driver
	http4, http6, stats, healthz string
	stopOnce                     sync.Once
	cancel                       context.CancelFunc
	done                         chan error
}

// startHAProxy runs a Driver with HAProxy on free ports until the test ends.
func startHAProxy(tb testing.TB, log *slog.Logger, tweak func(*Options)) *liveHAProxy {
	tb.Helper()
	requireHAProxy(tb)
	dir := tb.TempDir()
	o := Options{
		ConfigDir:        filepath.Join(dir, "etc"),
		RuntimeDir:       filepath.Join(dir, "run"),
		HTTPBindPort:     freePort(tb, "127.0.0.1"),
		IPv4BindAddress:  "127.0.0.1",
		IPv6BindAddress:  "::1",
		DisableIPv6:      !ipv6Loopback(),
		StatsBindAddress: "127.0.0.1",
		StatsBindPort:    freePort(tb, "127.0.0.1"),
		HealthzBindPort:  freePort(tb, "127.0.0.1"),
		StopTimeout:      5 * time.Second,
		Logger:           log,
	}
	if tweak != nil {
		tweak(&o)
	}
	d, err := New(o)
	if err != nil {
		tb.Fatal(err)
	}
	h := &liveHAProxy{
		d:       d,
		http4:   net.JoinHostPort("127.0.0.1", strconv.Itoa(o.HTTPBindPort)),
		stats:   net.JoinHostPort("127.0.0.1", strconv.Itoa(o.StatsBindPort)),
		healthz: net.JoinHostPort("127.0.0.1", strconv.Itoa(o.HealthzBindPort)),
		done:    make(chan error, 1),
	}
	if !o.DisableIPv6 {
		h.http6 = net.JoinHostPort("::1", strconv.Itoa(o.HTTPBindPort))
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	ready := make(chan struct{})
	go func() { h.done <- d.Run(ctx, ready) }()
	tb.Cleanup(func() {
		if err := h.stop(); err != nil {
			tb.Error(err)
		}
	})
	select {
	case <-ready:
	case err := <-h.done:
		tb.Fatalf("Run returned before ready: %v", err)
	case <-time.After(30 * time.Second):
		tb.Fatal("haproxy not ready after 30s")
	}
	return h
}

func (h *liveHAProxy) stop() error {
	var err error
	h.stopOnce.Do(func() {
		h.cancel()
		select {
		case err = <-h.done:
		case <-time.After(60 * time.Second):
			err = errors.New("Run did not return 60s after cancel")
		}
	})
	return err
}

// upstream is an HTTP server that answers with its name.
func upstream(tb testing.TB, name string) model.Endpoint {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, name)
	}), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(l)
	tb.Cleanup(func() { srv.Close() })
	return model.Endpoint{Address: "127.0.0.1", Port: l.Addr().(*net.TCPAddr).Port}
}

// client opens a connection per request: after a reload, a kept-alive
// connection to the old worker gets one more answer from the old
// configuration (option idle-close-on-response), and these tests check what
// the configuration just applied serves.
var client = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

func get(addr, host, path string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return 0, "", err
	}
	if host != "" {
		req.Host = host
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

func eventually(tb testing.TB, timeout time.Duration, f func() error) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("after %s: %v", timeout, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func backendOf(name string, slots int, e ...model.Endpoint) *model.Backend {
	return &model.Backend{Name: name, Namespace: "ns", Service: strings.Split(name, "_")[1], Port: "80", Balance: "roundrobin", Slots: slots, Endpoints: e}
}

func routes(backends []*model.Backend, exact, prefix map[string]string) *model.Desired {
	return &model.Desired{
		Backends: backends,
		Maps:     map[string]map[string]string{model.MapExact: exact, model.MapPrefix: prefix},
	}
}

func applyOK(tb testing.TB, d *Driver, want *model.Desired) Result {
	tb.Helper()
	res, err := d.Apply(context.Background(), want)
	if err != nil {
		tb.Fatalf("Apply: %v", err)
	}
	return res
}

func reloads(tb testing.TB, d *Driver) int {
	tb.Helper()
	procs, err := d.master.ShowProc(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	return procs.Reloads
}

func TestIntegrationRouting(t *testing.T) {
	h := startHAProxy(t, testLogger(t), nil)
	if h.d.Serving() {
		t.Fatal("Serving before any Apply")
	}
	a, b, c, def := upstream(t, "A"), upstream(t, "B"), upstream(t, "C"), upstream(t, "DEF")
	want := routes(
		[]*model.Backend{backendOf("ns_a_80", 2, a), backendOf("ns_b_80", 2, b), backendOf("ns_c_80", 2, c), backendOf("ns_def_80", 2, def)},
		map[string]string{"a.test/exact": "ns_b_80", "a.test/deep": "ns_c_80", "b.test/x": "ns_b_80", "/only": "ns_c_80"},
		map[string]string{"a.test/": "ns_a_80", "a.test/deep/": "ns_c_80", "*.w.test/": "ns_c_80"},
	)
	want.DefaultBackend = "ns_def_80"
	res := applyOK(t, h.d, want)
	if !res.Reloaded || !h.d.Serving() {
		t.Fatalf("first Apply: %+v serving=%v", res, h.d.Serving())
	}
	cases := []struct{ host, path, want string }{
		{"a.test", "/anything", "A"},
		{"A.Test:8080", "/foo", "A"},
		{"a.test", "/exact", "B"},
		{"a.test", "/exact/more", "A"},
		{"a.test", "/deep", "C"},
		{"a.test", "/deep/x", "C"},
		{"b.test", "/x", "B"},
		{"b.test", "/y", "DEF"},
		{"foo.w.test", "/z", "C"},
		{"w.test", "/z", "DEF"},
		{"other.test", "/only", "C"},
		{"other.test", "/nothing", "DEF"},
	}
	addrs := []string{h.http4}
	if h.http6 != "" {
		addrs = append(addrs, h.http6)
	}
	for _, addr := range addrs {
		for _, tc := range cases {
			code, body, err := get(addr, tc.host, tc.path)
			if err != nil || code != 200 || body != tc.want {
				t.Errorf("%s Host %s %s: %d %q %v, want %s", addr, tc.host, tc.path, code, body, err, tc.want)
			}
		}
	}

	// Without a default backend, unmatched requests get the built-in 404.
	want.DefaultBackend = ""
	applyOK(t, h.d, want)
	if code, _, err := get(h.http4, "other.test", "/nothing"); err != nil || code != 404 {
		t.Errorf("built-in default: %d %v", code, err)
	}

	// Many map changes at once go out as an atomic map replacement.
	r0 := reloads(t, h.d)
	want.Maps[model.MapPrefix] = maps.Clone(want.Maps[model.MapPrefix])
	for i := range 2 * bulkMapOps {
		want.Maps[model.MapPrefix][fmt.Sprintf("bulk%d.test/", i)] = "ns_b_80"
	}
	delete(want.Maps[model.MapPrefix], "a.test/")
	res = applyOK(t, h.d, want)
	if res.Reloaded || !strings.Contains(res.Reason, "replace maps") {
		t.Fatalf("bulk map change: %+v", res)
	}
	for _, tc := range []struct{ host, want string }{{"bulk7.test", "B"}, {"bulk199.test", "B"}, {"a.test", ""}, {"b.test", ""}} {
		code, body, err := get(h.http4, tc.host, "/p")
		if tc.want == "" && (err != nil || code != 404) || tc.want != "" && body != tc.want {
			t.Errorf("after bulk change, Host %s: %d %q %v", tc.host, code, body, err)
		}
	}
	if r := reloads(t, h.d); r != r0 {
		t.Errorf("map replacement reloaded (%d -> %d)", r0, r)
	}

	// Stats, metrics and healthz.
	if code, _, err := get(h.stats, "", "/stats"); err != nil || code != 200 {
		t.Errorf("/stats: %d %v", code, err)
	}
	if code, body, err := get(h.stats, "", "/metrics"); err != nil || code != 200 || !strings.Contains(body, "haproxy_process_") {
		t.Errorf("/metrics: %d %v %.100q", code, err, body)
	}
	if code, _, err := get(h.healthz, "", "/healthz"); err != nil || code != 200 {
		t.Errorf("/healthz: %d %v", code, err)
	}
}

func TestIntegrationEndpointsAtRuntime(t *testing.T) {
	h := startHAProxy(t, testLogger(t), nil)
	var ups []model.Endpoint
	names := map[int]string{}
	for i := range 5 {
		e := upstream(t, fmt.Sprintf("U%d", i))
		ups = append(ups, e)
		names[e.Port] = fmt.Sprintf("U%d", i)
	}
	set := func(n ...int) *model.Desired {
		var e []model.Endpoint
		for _, i := range n {
			e = append(e, ups[i])
		}
		return routes([]*model.Backend{backendOf("ns_scale_80", 8, e...)}, map[string]string{}, map[string]string{"scale.test/": "ns_scale_80"})
	}
	applyOK(t, h.d, set(0, 1))
	r0 := reloads(t, h.d)

	// A client that never stops while endpoints change.
	var failures, total atomic.Int64
	var seenMu sync.Mutex
	seen := map[string]int{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				code, body, err := get(h.http4, "scale.test", "/")
				total.Add(1)
				if err != nil || code != 200 {
					failures.Add(1)
					t.Logf("request failed: %d %v", code, err)
					continue
				}
				seenMu.Lock()
				seen[body]++
				seenMu.Unlock()
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	waitSeen := func(want ...string) {
		t.Helper()
		seenMu.Lock()
		clear(seen)
		seenMu.Unlock()
		eventually(t, 10*time.Second, func() error {
			seenMu.Lock()
			defer seenMu.Unlock()
			for _, w := range want {
				if seen[w] == 0 {
					return fmt.Errorf("%s not served yet (seen %v)", w, seen)
				}
			}
			return nil
		})
	}

	waitSeen("U0", "U1")
	res := applyOK(t, h.d, set(0, 1, 2, 3, 4))
	if res.Reloaded || res.RuntimeOps == 0 {
		t.Fatalf("scale up: %+v", res)
	}
	waitSeen("U0", "U1", "U2", "U3", "U4")
	res = applyOK(t, h.d, set(3))
	if res.Reloaded {
		t.Fatalf("scale down: %+v", res)
	}
	// From now on only U3 serves.
	for range 20 {
		if _, body, err := get(h.http4, "scale.test", "/"); err != nil || body != "U3" {
			t.Fatalf("after scale down got %q %v, want U3", body, err)
		}
	}
	if r := reloads(t, h.d); r != r0 {
		t.Errorf("reloads %d -> %d: endpoint changes must not reload", r0, r)
	}
	close(stop)
	wg.Wait()
	stop = make(chan struct{})
	if failures.Load() != 0 {
		t.Errorf("%d of %d requests failed while endpoints changed", failures.Load(), total.Load())
	}
	t.Logf("%d requests, %d failed", total.Load(), failures.Load())

	// The slot assignment is on disk: a reload keeps serving U3 only.
	if err := h.d.reloadForTest(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if _, body, err := get(h.http4, "scale.test", "/"); err != nil || body != "U3" {
			t.Fatalf("after reload got %q %v, want U3", body, err)
		}
	}
}

func TestIntegrationNewBackendReloadsOnce(t *testing.T) {
	h := startHAProxy(t, testLogger(t), nil)
	a, b := upstream(t, "A"), upstream(t, "B")
	applyOK(t, h.d, routes([]*model.Backend{backendOf("ns_a_80", 2, a)}, map[string]string{}, map[string]string{"a.test/": "ns_a_80"}))
	r0 := reloads(t, h.d)
	res := applyOK(t, h.d, routes(
		[]*model.Backend{backendOf("ns_a_80", 2, a), backendOf("ns_b_80", 2, b)},
		map[string]string{}, map[string]string{"a.test/": "ns_a_80", "b.test/": "ns_b_80"},
	))
	if !res.Reloaded {
		t.Fatalf("new backend: %+v", res)
	}
	if r := reloads(t, h.d); r != r0+1 {
		t.Fatalf("reloads %d -> %d, want exactly one", r0, r)
	}
	// The reload is confirmed: the new backend serves at once.
	if _, body, err := get(h.http4, "b.test", "/"); err != nil || body != "B" {
		t.Fatalf("b.test: %q %v", body, err)
	}
}

func TestIntegrationQuarantine(t *testing.T) {
	h := startHAProxy(t, testLogger(t), nil)
	a, a2, good, bad := upstream(t, "A"), upstream(t, "A2"), upstream(t, "GOOD"), upstream(t, "BAD")
	applyOK(t, h.d, routes([]*model.Backend{backendOf("ns_a_80", 2, a)}, map[string]string{}, map[string]string{"a.test/": "ns_a_80"}))

	badBE := backendOf("ns_bad_80", 2, bad)
	badBE.Balance = "bogus" // HAProxy refuses it
	aBad := backendOf("ns_a_80", 2, a, a2)
	aBad.Balance = "bogus"
	res := applyOK(t, h.d, routes(
		[]*model.Backend{aBad, badBE, backendOf("ns_good_80", 2, good)},
		map[string]string{}, map[string]string{"a.test/": "ns_a_80", "bad.test/": "ns_bad_80", "good.test/": "ns_good_80"},
	))
	if len(res.Quarantined) != 2 || !res.Reloaded {
		t.Fatalf("quarantine: %+v", res)
	}
	for _, p := range res.Quarantined {
		if p.Reason != "ConfigRejected" || p.Object.Kind != "Service" || !strings.Contains(p.Message, "balance") {
			t.Errorf("problem %+v", p)
		}
		t.Logf("quarantined: %s", p.Message)
	}
	if _, body, err := get(h.http4, "good.test", "/"); err != nil || body != "GOOD" {
		t.Errorf("good.test: %q %v", body, err)
	}
	if code, _, err := get(h.http4, "bad.test", "/"); err != nil || code != 503 {
		t.Errorf("bad.test (empty backend): %d %v, want 503", code, err)
	}
	// ns_a_80 keeps its last good version and gets its new endpoint.
	eventually(t, 5*time.Second, func() error {
		got := map[string]bool{}
		for range 10 {
			_, body, err := get(h.http4, "a.test", "/")
			if err != nil {
				return err
			}
			got[body] = true
		}
		if !got["A"] || !got["A2"] {
			return fmt.Errorf("a.test served by %v", got)
		}
		return nil
	})
	cfg, err := os.ReadFile(h.d.ConfigPath())
	if err != nil || strings.Contains(string(cfg), "bogus") {
		t.Fatalf("rejected backend reached the config file (%v)", err)
	}
}

func TestIntegrationRestartAfterKill(t *testing.T) {
	h := startHAProxy(t, testLogger(t), nil)
	a := upstream(t, "A")
	applyOK(t, h.d, routes([]*model.Backend{backendOf("ns_a_80", 2, a)}, map[string]string{}, map[string]string{"a.test/": "ns_a_80"}))
	before, err := h.d.master.ShowProc(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(before.MasterPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		pl, err := h.d.master.ShowProc(context.Background())
		if err != nil {
			return err
		}
		if pl.MasterPID == before.MasterPID {
			return errors.New("old master still answers")
		}
		if !h.d.Serving() {
			return errors.New("not serving yet")
		}
		if _, body, err := get(h.http4, "a.test", "/"); err != nil || body != "A" {
			return fmt.Errorf("a.test: %q %v", body, err)
		}
		return nil
	})
	for _, pid := range before.Workers {
		if alive(pid) {
			t.Errorf("worker %d of the killed master is still alive", pid)
		}
	}
}

func TestIntegrationStopLeavesNoProcess(t *testing.T) {
	// The open connection below keeps an old worker busy: the soft stop
	// times out and the hard stop path runs too.
	h := startHAProxy(t, testLogger(t), func(o *Options) { o.StopTimeout = time.Second })
	a, b := upstream(t, "A"), upstream(t, "B")
	applyOK(t, h.d, routes([]*model.Backend{backendOf("ns_a_80", 2, a)}, map[string]string{}, map[string]string{"a.test/": "ns_a_80"}))
	// A reload while a connection is open leaves an old worker behind.
	conn, err := net.Dial("tcp", h.http4)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	applyOK(t, h.d, routes([]*model.Backend{backendOf("ns_a_80", 2, a), backendOf("ns_b_80", 2, b)}, map[string]string{}, map[string]string{"a.test/": "ns_a_80"}))
	pl, err := h.d.master.ShowProc(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	pids := append([]int{pl.MasterPID}, pl.Workers...)
	pids = append(pids, pl.OldWorkers...)
	t.Logf("haproxy processes before stop: %+v", pl)
	if err := h.stop(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("haproxy process %d survived the stop", pid)
		}
	}
	if left := h.d.ourProcesses(); len(left) > 0 {
		t.Errorf("processes left: %v", left)
	}
	if _, err := os.Stat(h.d.paths.pidFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pid file left: %v", err)
	}
}

func TestIntegrationStopsStaleMaster(t *testing.T) {
	requireHAProxy(t)
	log := testLogger(t)
	dir := t.TempDir()
	port := freePort(t, "127.0.0.1")
	tweak := func(o *Options) {
		o.ConfigDir, o.RuntimeDir = filepath.Join(dir, "etc"), filepath.Join(dir, "run")
		o.HTTPBindPort = port
	}
	// A master of a previous run: same runtime directory, pid file left.
	o := Options{StatsBindPort: 0, DisableIPv6: true, IPv4BindAddress: "127.0.0.1", Logger: log}
	tweak(&o)
	d, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.writeInitial(); err != nil {
		t.Fatal(err)
	}
	stale, err := d.start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(stale.pid, syscall.SIGKILL)
		<-stale.done
	})
	eventually(t, 10*time.Second, func() error {
		_, err := d.master.ShowProc(context.Background())
		return err
	})
	// Without its pid file the master was not handed over (adopt_test.go):
	// it is found by its command line and stopped.
	if err := os.Remove(d.paths.pidFile); err != nil {
		t.Fatal(err)
	}

	h := startHAProxy(t, log, func(o *Options) {
		tweak(o)
		o.StatsBindPort, o.HealthzBindPort = 0, 0
	})
	select {
	case <-stale.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the stale master was not stopped")
	}
	pl, err := h.d.master.ShowProc(context.Background())
	if err != nil || pl.MasterPID == stale.pid {
		t.Fatalf("show proc %+v %v: want a new master", pl, err)
	}
}

// alive reports whether pid runs (a zombie waiting to be reaped does not).
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	return processState(pid) != 'Z' && processState(pid) != 0
}

// BenchmarkApplyEndpoints measures an endpoint change through the Runtime
// API, with the files written after it, for configs of several sizes.
func BenchmarkApplyEndpoints(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("backends=%d", n), func(b *testing.B) {
			h := startHAProxy(b, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
			want := benchDesired(n)
			applyOK(b, h.d, want)
			be := want.Backends[0]
			r0 := reloads(b, h.d)
			ops := 0
			b.ResetTimer()
			for i := range b.N {
				// Swap one endpoint for another: two servers change. The
				// change comes as the model makes it: a new Desired
				// sharing every backend but the changed one.
				nb := *be
				nb.Endpoints = slices.Clone(be.Endpoints)
				nb.Endpoints[i%2] = model.Endpoint{Address: "127.0.0.1", Port: 20000 + i%1000}
				next := *want
				next.Backends = slices.Clone(want.Backends)
				next.Backends[0] = &nb
				res := applyOK(b, h.d, &next)
				ops += res.RuntimeOps
			}
			b.StopTimer()
			if r := reloads(b, h.d); r != r0 {
				b.Fatalf("endpoint changes reloaded (%d -> %d)", r0, r)
			}
			b.ReportMetric(float64(ops)/float64(b.N), "cmds/apply")
			b.Logf("%d backends, %d endpoint applies: %s per apply, %.1f runtime commands each",
				n, b.N, b.Elapsed()/time.Duration(b.N), float64(ops)/float64(b.N))
		})
	}
}

// BenchmarkApplyNewHost measures a new host on an existing backend, as
// the model hands it over after an Ingress is added: every map but the
// changed ones shared with the previous Desired, the changed ones copies
// with the host's entries added.
func BenchmarkApplyNewHost(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("backends=%d", n), func(b *testing.B) {
			h := startHAProxy(b, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
			want := benchDesired(n)
			owner := map[string]string{}
			for k := range want.Maps[model.MapPrefix] {
				owner[strings.TrimSuffix(k, "/")] = "@ns"
			}
			want.Maps[model.MapHostOwner] = owner
			applyOK(b, h.d, want)
			r0 := reloads(b, h.d)
			ops := 0
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				// The model's work is not the driver's.
				b.StopTimer()
				next := newHost(want, fmt.Sprintf("new%d.test", i), want.Backends[i%n].Name)
				b.StartTimer()
				res := applyOK(b, h.d, next)
				ops += res.RuntimeOps
				want = next
			}
			b.StopTimer()
			if r := reloads(b, h.d); r != r0 {
				b.Fatalf("new hosts reloaded (%d -> %d)", r0, r)
			}
			b.ReportMetric(float64(ops)/float64(b.N), "cmds/apply")
		})
	}
}

// newHost is prev with host routed to backend, as the model's incremental
// update makes it.
func newHost(prev *model.Desired, host, backend string) *model.Desired {
	next := *prev
	next.Maps = maps.Clone(prev.Maps)
	prefix := maps.Clone(prev.Maps[model.MapPrefix])
	prefix[host+"/"] = backend
	owner := maps.Clone(prev.Maps[model.MapHostOwner])
	owner[host] = "@ns"
	next.Maps[model.MapPrefix], next.Maps[model.MapHostOwner] = prefix, owner
	next.MapChanges = map[string]model.MapChange{
		model.MapPrefix:    {From: prev.Maps[model.MapPrefix], To: prefix, Keys: []string{host + "/"}},
		model.MapHostOwner: {From: prev.Maps[model.MapHostOwner], To: owner, Keys: []string{host}},
	}
	return &next
}

// BenchmarkApplyReload measures a structural change: haproxy -c, write,
// reload, and wait until the new worker answers.
func BenchmarkApplyReload(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("backends=%d", n), func(b *testing.B) {
			h := startHAProxy(b, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
			want := benchDesired(n)
			applyOK(b, h.d, want)
			r0 := reloads(b, h.d)
			b.ResetTimer()
			for i := range b.N {
				// A new balance algorithm is a change of the backend's
				// section: a reload, whatever spare backends there are.
				be := *want.Backends[0]
				be.Balance = []string{"leastconn", "roundrobin"}[i%2]
				want.Backends = append([]*model.Backend{&be}, want.Backends[1:]...)
				if res := applyOK(b, h.d, want); !res.Reloaded {
					b.Fatalf("no reload: %+v", res)
				}
			}
			b.StopTimer()
			if r := reloads(b, h.d); r != r0+b.N {
				b.Fatalf("reloads %d -> %d, want +%d", r0, r, b.N)
			}
			b.Logf("%d backends, %d reloads: %s per reload", n, b.N, b.Elapsed()/time.Duration(b.N))
		})
	}
}

func benchDesired(n int) *model.Desired {
	want := routes(nil, map[string]string{}, map[string]string{})
	for i := range n {
		name := fmt.Sprintf("bench_svc%d_80", i)
		want.Backends = append(want.Backends, backendOf(name, 8,
			model.Endpoint{Address: "127.0.0.1", Port: 30000 + 2*i},
			model.Endpoint{Address: "127.0.0.1", Port: 30001 + 2*i}))
		want.Maps[model.MapPrefix][fmt.Sprintf("svc%d.test/", i)] = name
	}
	return want
}

func (d *Driver) reloadForTest(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.reload(ctx)
}

// TestIntegrationDrain: Drain keeps the listeners (a new connection is
// served) and makes the worker that held a keep-alive connection answer
// its next request with "Connection: close" and close it.
func TestIntegrationDrain(t *testing.T) {
	h := startHAProxy(t, testLogger(t), nil)
	a := upstream(t, "A")
	applyOK(t, h.d, routes([]*model.Backend{backendOf("ns_a_80", 1, a)}, nil, map[string]string{"a.test/": "ns_a_80"}))
	c, err := net.DialTimeout("tcp", h.http4, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	ask := func() *http.Response {
		t.Helper()
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "A" {
			t.Fatalf("body %q", body)
		}
		return resp
	}
	if resp := ask(); resp.Close {
		t.Fatal("the first response closes the connection: not kept alive")
	}
	before := reloads(t, h.d)
	if err := h.d.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := reloads(t, h.d); n != before+1 {
		t.Fatalf("reloads %d -> %d, want one", before, n)
	}
	if code, body, err := get(h.http4, "a.test", "/"); err != nil || code != 200 || body != "A" {
		t.Fatalf("a new connection after Drain: %d %q %v", code, body, err)
	}
	if resp := ask(); !resp.Close {
		t.Fatal("the keep-alive connection's next response after Drain does not close it")
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("the drained connection stays open: %v", err)
	}
}

// TestIntegrationConfigFlushedAfterChanges: endpoint changes go out at
// run time and haproxy.cfg catches up with the last of them once they
// pause, although only the first one asked Run for the write.
func TestIntegrationConfigFlushedAfterChanges(t *testing.T) {
	h := startHAProxy(t, testLogger(t), nil)
	a := upstream(t, "A")
	applyOK(t, h.d, routes([]*model.Backend{backendOf("ns_a_80", 4, a)}, nil, map[string]string{"a.test/": "ns_a_80"}))
	var last model.Endpoint
	for i := range 5 {
		last = model.Endpoint{Address: "127.0.0.1", Port: 21000 + i}
		res := applyOK(t, h.d, routes([]*model.Backend{backendOf("ns_a_80", 4, a, last)}, nil, map[string]string{"a.test/": "ns_a_80"}))
		if res.Reloaded {
			t.Fatalf("change %d reloaded: %s", i, res.Reason)
		}
	}
	want := fmt.Sprintf(" 127.0.0.1:%d", last.Port)
	eventually(t, 30*time.Second, func() error {
		if cfg := readConfigFile(t, h.d); !strings.Contains(cfg, want) {
			return fmt.Errorf("haproxy.cfg lacks the last endpoint %s", want)
		}
		return nil
	})
}

// TestIntegrationFirstConfigRefused: the first full configuration goes to
// HAProxy without `haproxy -c`; when HAProxy refuses it, the empty one
// keeps running, the check finds the backend to blame, and the rest is
// served by the next reload, through a master that still answers.
func TestIntegrationFirstConfigRefused(t *testing.T) {
	h := startHAProxy(t, testLogger(t), nil)
	good, bad := upstream(t, "GOOD"), upstream(t, "BAD")
	badBE := backendOf("ns_bad_80", 2, bad)
	badBE.Balance = "bogus" // HAProxy refuses it
	res := applyOK(t, h.d, routes(
		[]*model.Backend{badBE, backendOf("ns_good_80", 2, good)},
		map[string]string{}, map[string]string{"bad.test/": "ns_bad_80", "good.test/": "ns_good_80"},
	))
	if len(res.Quarantined) != 1 || !res.Reloaded {
		t.Fatalf("first configuration: %+v", res)
	}
	pl, err := h.d.master.ShowProc(context.Background())
	// The refused reload and the checked one (a master that re-executes
	// successfully forgets its failures).
	if err != nil || pl.Reloads != 2 {
		t.Fatalf("show proc: %+v %v; want two reloads", pl, err)
	}
	if _, body, err := get(h.http4, "good.test", "/"); err != nil || body != "GOOD" {
		t.Errorf("good.test: %q %v", body, err)
	}
	if code, _, err := get(h.http4, "bad.test", "/"); err != nil || code != 503 {
		t.Errorf("bad.test (empty backend): %d %v, want 503", code, err)
	}
	// Later reloads are checked and confirmed as before.
	badBE.Balance = "leastconn"
	if res := applyOK(t, h.d, routes(
		[]*model.Backend{badBE, backendOf("ns_good_80", 2, good)},
		map[string]string{}, map[string]string{"bad.test/": "ns_bad_80", "good.test/": "ns_good_80"},
	)); !res.Reloaded || len(res.Quarantined) != 0 {
		t.Fatalf("fixed: %+v", res)
	}
	if _, body, err := get(h.http4, "bad.test", "/"); err != nil || body != "BAD" {
		t.Errorf("bad.test once fixed: %q %v", body, err)
	}
}
