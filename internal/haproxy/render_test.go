package haproxy

import (
	"context"
	"flag"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// Paths written into the goldens: fixed, so the files do not depend on
// where the tests run.
const (
	goldenConfigDir = "/etc/perimeter/haproxy"
	goldenRunDir    = "/run/perimeter"
)

func goldenRenderer(o Options) renderer {
	o.ConfigDir, o.RuntimeDir = goldenConfigDir, goldenRunDir
	if o.HTTPBindPort == 0 {
		o.HTTPBindPort = 80
	}
	if o.IPv4BindAddress == "" {
		o.IPv4BindAddress = "0.0.0.0"
	}
	if o.IPv6BindAddress == "" {
		o.IPv6BindAddress = "::"
	}
	if o.StatsBindAddress == "" {
		o.StatsBindAddress = "127.0.0.1"
	}
	p := paths{
		config:    goldenConfigDir + "/haproxy.cfg",
		mapsDir:   goldenConfigDir + "/maps",
		adminSock: goldenRunDir + "/admin.sock",
	}
	return newRenderer(o, p, Version{Major: 2, Minor: 6, Features: map[string]bool{"PROMEX": true}})
}

// fullDesired exercises every feature the renderer knows.
func fullDesired() *model.Desired {
	return &model.Desired{
		Global: model.Global{
			Maxconn: 20000, Nbthread: 2, HardStopAfter: 30 * time.Minute,
			TimeoutClient: 30 * time.Second, TimeoutConnect: 1500 * time.Millisecond,
		},
		Backends: []*model.Backend{
			{
				Name: "shop_api_8080", Namespace: "shop", Service: "api", Port: "8080",
				Balance: "leastconn", Check: true, CheckInterval: 2 * time.Second, ForwardedFor: true,
				Slots: 4,
				Endpoints: []model.Endpoint{
					{Address: "198.18.1.10", Port: 8080},
					{Address: "198.18.1.11", Port: 8080, Draining: true},
					{Address: "2001:db8::12", Port: 8080},
				},
			},
			{
				Name: "shop_web_http", Namespace: "shop", Service: "web", Port: "http",
				Balance: "roundrobin", Slots: 2,
				Endpoints: []model.Endpoint{{Address: "198.18.2.10", Port: 80}},
			},
		},
		Maps: map[string]map[string]string{
			model.MapExact: {
				"shop.example.com/api":   "shop_api_8080",
				"*.example.com/":         "shop_web_http",
				"/healthz":               "shop_web_http",
				"shop.example.com/exact": "shop_web_http",
			},
			model.MapPrefix: {
				"shop.example.com/api/": "shop_api_8080",
				"*.example.com/":        "shop_web_http",
				"shop.example.com/":     "shop_web_http",
			},
		},
		DefaultBackend: "shop_web_http",
	}
}

func TestRenderGolden(t *testing.T) {
	cases := []struct {
		name string
		opts Options
		want *model.Desired
	}{
		{"empty", Options{StatsBindPort: DefaultStatsBindPort, HealthzBindPort: 1042}, &model.Desired{}},
		{"full", Options{StatsBindPort: DefaultStatsBindPort, HealthzBindPort: 1042}, fullDesired()},
		{"ipv4-only-no-stats", Options{HTTPBindPort: 8080, DisableIPv6: true}, fullDesired()},
		{"http-disabled", Options{DisableHTTP: true, StatsBindPort: 9000}, fullDesired()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := goldenRenderer(tc.opts)
			st, problems := desiredState(tc.want)
			if len(problems) > 0 {
				t.Fatalf("problems: %v", problems)
			}
			withSlots(emptyState(), st)
			cfg, err := r.config(st, nil)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name+".cfg.golden", cfg)
			maps := map[string]string{}
			for _, name := range routeMaps {
				maps[name] = string(mapFile(st.maps[name]))
				if tc.name == "full" {
					golden(t, tc.name+"."+name+".map.golden", maps[name])
				}
			}
			haproxyCheck(t, cfg, maps)
		})
	}
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs from the rendered output (run with -update to accept):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// haproxyCheck runs `haproxy -c` on a golden config, with its paths moved
// to a temporary directory that holds the map files.
func haproxyCheck(t *testing.T, cfg string, maps map[string]string) {
	t.Helper()
	prog, err := exec.LookPath("haproxy")
	if err != nil {
		if prog, err = exec.LookPath("/usr/sbin/haproxy"); err != nil {
			t.Log("haproxy not installed: golden not checked with haproxy -c")
			return
		}
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "maps"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range mapNames {
		if err := os.WriteFile(filepath.Join(dir, "maps", name+".map"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, content := range maps {
		if err := os.WriteFile(filepath.Join(dir, "maps", name+".map"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	checkGoldenConfig(t, prog, dir, cfg)
}

func TestHaproxyDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0", time.Hour: "1h", 90 * time.Minute: "90m", 50 * time.Second: "50s",
		1500 * time.Millisecond: "1500ms", 1500 * time.Microsecond: "1500us",
	} {
		if got := haproxyDuration(d); got != want {
			t.Errorf("haproxyDuration(%s) = %q, want %q", d, got, want)
		}
	}
}

func TestSectionAt(t *testing.T) {
	cfg := "global\n  maxconn 1\n\ndefaults perimeter\n  mode http\n\nbackend a from perimeter\n  balance x\n\nbackend b from perimeter\n  server s 1.2.3.4:5\n"
	for line, want := range map[int]string{2: "global ", 5: "defaults perimeter", 8: "backend a", 11: "backend b"} {
		kind, name := sectionAt(cfg, line)
		if got := kind + " " + name; got != want {
			t.Errorf("line %d: got %q, want %q", line, got, want)
		}
	}
}

// The cache must give the same text as a fresh render through changes.
func TestRenderCache(t *testing.T) {
	r := goldenRenderer(Options{StatsBindPort: DefaultStatsBindPort})
	cache := &renderCache{}
	cur := emptyState()
	want := fullDesired()
	for i, change := range []func(){
		func() {},
		func() { want.Backends[0].Endpoints = want.Backends[0].Endpoints[1:] },
		func() { want.Backends[1].ForwardedFor = true },
		func() { want.Backends = want.Backends[:1]; want.Maps = nil; want.DefaultBackend = "" },
		func() { want.Global.Maxconn = 10 },
	} {
		change()
		st, _ := desiredState(want)
		withSlots(cur, st)
		got, err := r.config(st, cache)
		if err != nil {
			t.Fatal(err)
		}
		fresh, err := r.config(st, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got != fresh {
			t.Fatalf("step %d: cached render differs:\n%s\n--- fresh\n%s", i, got, fresh)
		}
		cur = st
	}
	if len(cache.entries) != 2 { // ns backend + DEFAULT_404
		t.Errorf("cache holds %d backends after pruning, want 2", len(cache.entries))
	}
}

func TestRenderFiles(t *testing.T) {
	dir := t.TempDir()
	files, err := Render(Options{ConfigDir: filepath.Join(dir, "etc"), RuntimeDir: filepath.Join(dir, "run"), StatsBindPort: DefaultStatsBindPort}, fullDesired())
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 1+len(mapNames) || !strings.Contains(string(files["haproxy.cfg"]), "backend shop_api_8080 from perimeter") ||
		!strings.Contains(string(files["maps/path-prefix.map"]), "shop.example.com/api/ shop_api_8080\n") {
		t.Fatalf("files: %v", slices.Collect(maps.Keys(files)))
	}
	if _, err := os.Stat(filepath.Join(dir, "etc")); !os.IsNotExist(err) {
		t.Errorf("Render must not create directories: %v", err)
	}
}

// checkGoldenConfig writes a golden haproxy.cfg into dir, with the golden
// paths pointed at dir, and fails the test unless `haproxy -c` accepts it.
func checkGoldenConfig(t *testing.T, prog, dir, cfg string) {
	t.Helper()
	cfg = strings.ReplaceAll(cfg, goldenConfigDir, dir)
	cfg = strings.ReplaceAll(cfg, goldenRunDir, dir)
	path := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := (&programChecker{program: prog}).Check(context.Background(), path); err != nil {
		t.Fatalf("haproxy -c: %v", err)
	}
}
