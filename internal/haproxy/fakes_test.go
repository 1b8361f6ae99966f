package haproxy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeMaster counts reloads and hands out worker pids like the 2.6 master.
type fakeMaster struct {
	mu      sync.Mutex
	reloads int
	failed  int
	worker  int
	// failNext makes the next reload fail as a broken config would.
	failNext bool
}

func (m *fakeMaster) Reload(context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reloads++
	if m.failNext {
		m.failNext = false
		m.failed++
		return nil
	}
	m.worker++
	return nil
}

func (m *fakeMaster) ShowProc(context.Context) (procList, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return procList{MasterPID: 1, Reloads: m.reloads, Failed: m.failed, Workers: []int{m.worker}}, nil
}

func (m *fakeMaster) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.reloads
}

// fakeRuntime records commands and answers like HAProxy.
type fakeRuntime struct {
	master *fakeMaster
	mu     sync.Mutex
	cmds   []string
	// failOn makes the first command containing it fail.
	failOn string
}

func (r *fakeRuntime) Execute(_ context.Context, cmds []string) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, c := range cmds {
		r.cmds = append(r.cmds, c)
		if r.failOn != "" && strings.Contains(c, r.failOn) {
			r.failOn = ""
			return out, &runtimeError{Command: c, Response: "No such server."}
		}
		resp := ""
		switch {
		case strings.HasPrefix(c, "set server") && strings.Contains(c, " addr "):
			resp = "IP changed from '127.0.0.1' to 'x'"
		case strings.HasPrefix(c, "prepare map"):
			resp = "New version created: 7"
		}
		out = append(out, resp)
	}
	return out, nil
}

// ExecuteTLS records a certificate command with the first line of its
// payload and answers like HAProxy does on success.
func (r *fakeRuntime) ExecuteTLS(_ context.Context, cmd, payload string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if payload != "" {
		cmd += " <<" + strings.SplitN(payload, "\n", 2)[0]
	}
	r.cmds = append(r.cmds, cmd)
	return nil
}

func (r *fakeRuntime) WorkerPID(context.Context) (int, error) {
	r.master.mu.Lock()
	defer r.master.mu.Unlock()
	return r.master.worker, nil
}

func (r *fakeRuntime) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.cmds
	r.cmds = nil
	return c
}

// fakeChecker rejects every "balance bogus" line the way haproxy -c does.
type fakeChecker struct {
	mu    sync.Mutex
	calls int
}

var bogusRE = regexp.MustCompile(`^\s+balance bogus`)

func (c *fakeChecker) Check(_ context.Context, path string) error {
	c.mu.Lock()
	c.calls++
	c.mu.Unlock()
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var alerts []string
	for i, l := range strings.Split(string(b), "\n") {
		if bogusRE.MatchString(l) {
			alerts = append(alerts, fmt.Sprintf("config : parsing [%s:%d] : balance only supports 'roundrobin', 'static-rr', 'leastconn'.", path, i+1))
		}
	}
	if len(alerts) > 0 {
		return &checkError{Alerts: alerts}
	}
	return nil
}

func (c *fakeChecker) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls
}

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

type unitDriver struct {
	*Driver
	master  *fakeMaster
	rt      *fakeRuntime
	checker *fakeChecker
	clock   *fakeClock
}

// newUnitDriver builds a Driver around fakes, as if HAProxy ran the initial
// empty configuration.
func newUnitDriver(t testing.TB, o Options) *unitDriver {
	t.Helper()
	dir := t.TempDir()
	o.ConfigDir, o.RuntimeDir = filepath.Join(dir, "etc"), filepath.Join(dir, "run")
	if o.ReloadTimeout == 0 {
		o.ReloadTimeout = 5 * time.Second
	}
	if o.HTTPBindPort == 0 {
		o.HTTPBindPort = 80
	}
	o.IPv4BindAddress, o.IPv6BindAddress, o.StatsBindAddress = "0.0.0.0", "::", "127.0.0.1"
	if err := checkOptions(&o); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(o.ConfigDir, "maps"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := pathsFor(o)
	u := &unitDriver{master: &fakeMaster{worker: 100}, checker: &fakeChecker{}, clock: &fakeClock{t: time.Unix(1_000_000, 0)}}
	u.rt = &fakeRuntime{master: u.master}
	u.Driver = &Driver{
		opts:     o,
		log:      testLogger(t),
		paths:    p,
		rend:     newRenderer(o, p, Version{Major: 2, Minor: 6, Features: map[string]bool{"PROMEX": true}}),
		cache:    &renderCache{},
		rt:       u.rt,
		master:   u.master,
		checker:  u.checker,
		now:      u.clock.now,
		rejected: map[string]rejection{},
	}
	if err := u.writeInitial(); err != nil {
		t.Fatal(err)
	}
	u.running.Store(true)
	return u
}

// testLogger logs through t.Log until the test ends (HAProxy's output may
// still arrive while the test is cleaning up).
func testLogger(t testing.TB) *slog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(w.close)
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func (w *testWriter) close() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
}

var _ io.Writer = (*testWriter)(nil)
