package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// Inspect tests use pods in 198.18.52.0/24.

// inspect runs `perimeter <cmd>` with the daemon's flags.
func inspect(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(perimeterBinary(t), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("perimeter %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// renderedFiles splits `perimeter render` output into its files.
func renderedFiles(out string) map[string]string {
	files := map[string]string{}
	name := ""
	for _, l := range strings.SplitAfter(out, "\n") {
		if n, ok := strings.CutPrefix(l, "# ---- "); ok {
			name = strings.TrimSpace(n)
			files[name] = ""
			continue
		}
		if strings.HasPrefix(l, "# problem: ") {
			name = ""
			continue
		}
		if name != "" {
			files[name] += l
		}
	}
	return files
}

var endpointRE = regexp.MustCompile(`(?m)^  endpoint (\S+):\d+ ready$`)

// TestRenderExplainMatch: `perimeter render` prints the files the daemon
// runs, and `perimeter explain` names, for each request of the scenario,
// the pods that really answer it.
func TestRenderExplainMatch(t *testing.T) {
	e := newEnv(t)
	pods := e.pods("ix", 52, 4)
	ip := map[string]string{}
	for _, p := range pods {
		ip[p.Name] = p.IP.String()
	}
	e.service("root", nil, pods[0])
	e.service("api", nil, pods[1], pods[2])
	e.service("fallback", nil, pods[3])
	exact := networkingv1.PathTypeExact
	e.ingress("shop", nil,
		rule{host: "shop.inspect.test", path: "/", service: "root"},
		rule{host: "shop.inspect.test", path: "/api", service: "api"},
		rule{host: "shop.inspect.test", path: "/api/exact", pathType: exact, service: "root"},
		rule{host: "*.w.inspect.test", path: "/", service: "api"},
	)
	flags := []string{"--default-backend-service=" + e.ns + "/fallback"}
	d, port := e.tlsDaemon(flags...)
	d.expect("shop.inspect.test", "/", 200, "")

	// The same flags as the daemon, as an operator would pass them.
	common := []string{
		"--kubeconfig=" + e.c.DaemonKubeconfig, "--config-dir=" + d.configDir, "--runtime-dir=" + d.runtimeDir,
		fmt.Sprintf("--http-bind-port=%d", d.httpPort), fmt.Sprintf("--https-bind-port=%d", port),
		"--ipv4-bind-address=127.0.0.1", "--disable-ipv6", fmt.Sprintf("--stats-bind-port=%d", d.statsPort),
		"--healthz-bind-port=0", "--namespace-whitelist=" + e.ns, flags[0],
	}
	files := renderedFiles(inspect(t, append([]string{"render"}, common...)...))
	for _, name := range []string{"haproxy.cfg", "maps/path-exact.map", "maps/path-prefix.map", "maps/ssl-redirect.map", "certs/crt-list"} {
		got, ok := files[name]
		if !ok {
			t.Fatalf("render printed no %s (files: %v)", name, keys(files))
		}
		// The daemon writes what a runtime change left for later once
		// changes pause for a second.
		testenv.Eventually(t, 15*time.Second, func() error {
			live, err := os.ReadFile(filepath.Join(d.configDir, name))
			if err != nil {
				return err
			}
			// render ends every file with a newline, empty ones too.
			if got != string(live) && !(got == "\n" && len(live) == 0) {
				return fmt.Errorf("render's %s differs from the daemon's:\n--- render\n%s\n--- daemon\n%s", name, got, live)
			}
			return nil
		})
	}
	for name, content := range files {
		if strings.HasSuffix(name, ".pem") && strings.Contains(content, "PRIVATE KEY") {
			t.Errorf("render printed the private key of %s", name)
		}
	}

	// explain against real requests.
	for _, c := range []struct{ host, path string }{
		{"shop.inspect.test", "/"},
		{"shop.inspect.test", "/api/v1"},
		{"shop.inspect.test", "/api/exact"},
		{"shop.inspect.test", "/apix"},
		{"x.w.inspect.test", "/any"},
		{"unknown.inspect.test", "/"},
	} {
		out := inspect(t, append([]string{"explain", "--host", c.host, "--path", c.path}, common...)...)
		want := map[string]bool{}
		for _, m := range endpointRE.FindAllStringSubmatch(out, -1) {
			want[m[1]] = true
		}
		if len(want) == 0 {
			t.Fatalf("explain %s%s names no endpoint:\n%s", c.host, c.path, out)
		}
		seen := map[string]bool{}
		for i := 0; i < 8; i++ {
			r, err := d.get(c.host, c.path)
			if err != nil || r.status != 200 {
				t.Fatalf("%s%s: %v %d", c.host, c.path, err, r.status)
			}
			seen[ip[r.header.Get("X-Pod")]] = true
		}
		for a := range seen {
			if !want[a] {
				t.Errorf("%s%s answered by %s, which explain does not name:\n%s", c.host, c.path, a, out)
			}
		}
		if len(seen) != len(want) {
			t.Errorf("%s%s answered by %v, explain names %v", c.host, c.path, seen, want)
		}
		t.Logf("%s", strings.SplitN(out, "\n", 2)[0])
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
