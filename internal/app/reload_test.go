package app

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/perimeter-ingress/perimeter/internal/config"
	"github.com/perimeter-ingress/perimeter/internal/model"
)

// TestReloadOnce: a reload applies the live keys (log level, model
// options), reports the others as needing a restart until one happens, and
// keeps everything on a bad file, saying why.
func TestReloadOnce(t *testing.T) {
	p := filepath.Join(t.TempDir(), "perimeter.yaml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("log: info\nhttp-bind-port: 8080\n")
	var c config.Config
	src, err := config.Parse(&c, c.FlagSet("perimeter run", io.Discard), []string{"--config=" + p}, Check)
	if err != nil {
		t.Fatal(err)
	}
	var level slog.LevelVar
	var out bytes.Buffer
	log := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: &level}))
	r := &Reload{Load: src.Load, Level: &level}
	opts := make(chan model.Options, 1)

	write("log: debug\nhttp-bind-port: 8081\ndefault-backend-service: web/fallback\n")
	running, status := r.once(&c, opts, log)
	if level.Level() != slog.LevelDebug {
		t.Errorf("log level %v after reload, want debug", level.Level())
	}
	select {
	case o := <-opts:
		if o.DefaultBackendService != "web/fallback" {
			t.Errorf("model options %+v, want the new default backend", o)
		}
	default:
		t.Error("no model options sent to the loop")
	}
	if status != "serving; needs a restart for: http-bind-port" {
		t.Errorf("status %q", status)
	}
	if running.HTTPBindPort != 8080 || running.DefaultBackendService != "web/fallback" {
		t.Errorf("running config: port %d backend %q", running.HTTPBindPort, running.DefaultBackendService)
	}
	for _, want := range []string{"http-bind-port changed: needs a restart", "default-backend-service changed", "configuration reloaded"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, out.String())
		}
	}

	// A bad file: nothing changes, the reason is logged and in the status.
	out.Reset()
	write("log: info\nhttp-bind-port: eighty\n")
	after, status := r.once(running, opts, log)
	want := p + `:2: http-bind-port: want a whole number, got "eighty"`
	if status != "serving with the previous settings: "+want {
		t.Errorf("status %q, want the reason %q", status, want)
	}
	if after != running || level.Level() != slog.LevelDebug || len(opts) != 0 {
		t.Errorf("a refused file changed something")
	}
	if !strings.Contains(out.String(), "level=ERROR") || !strings.Contains(out.String(), "http-bind-port: want a whole number") {
		t.Errorf("log lacks the reason:\n%s", out.String())
	}

	// The restart-only change is still reported on the next good reload.
	write("log: debug\nhttp-bind-port: 8081\ndefault-backend-service: web/fallback\n")
	if _, status := r.once(after, opts, log); status != "serving; needs a restart for: http-bind-port" {
		t.Errorf("status %q", status)
	}
}

// Check names the file's line for what the BGP speaker would refuse.
func TestCheckBGP(t *testing.T) {
	p := filepath.Join(t.TempDir(), "perimeter.yaml")
	if err := os.WriteFile(p, []byte("bgp-local-as: 64512\nbgp-router-id: 198.51.100.10\nbgp-peer:\n  - 198.51.100.1\n  - 198.51.100.2,as=x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var c config.Config
	_, err := config.Parse(&c, c.FlagSet("perimeter run", io.Discard), []string{"--config=" + p}, Check)
	if err == nil || !strings.HasPrefix(err.Error(), p+":5: bgp-peer: ") {
		t.Fatalf("error %v, want one at line 5", err)
	}
}

// The example file of docs/configuration.md is one the daemon takes.
func TestDocExampleChecks(t *testing.T) {
	_, block, _ := strings.Cut(config.Markdown(), "```yaml\n")
	block, _, _ = strings.Cut(block, "```")
	p := filepath.Join(t.TempDir(), "perimeter.yaml")
	if err := os.WriteFile(p, []byte(block), 0o644); err != nil {
		t.Fatal(err)
	}
	var c config.Config
	if _, err := config.Parse(&c, c.FlagSet("perimeter run", io.Discard), []string{"--config=" + p}, Check); err != nil {
		t.Fatal(err)
	}
}
