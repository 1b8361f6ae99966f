package haproxy

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// What HAProxy may read: its own directories and the system's, not the
// daemon's secrets beside them.
func TestSandboxReads(t *testing.T) {
	root := t.TempDir()
	configDir := filepath.Join(root, "config")
	secretDir := filepath.Join(root, "etc-perimeter")
	for _, d := range []string{configDir, secretDir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	allowed := filepath.Join(configDir, "haproxy.cfg")
	secret := filepath.Join(secretDir, "kubeconfig")
	for _, f := range []string{allowed, secret} {
		if err := os.WriteFile(f, []byte("content of "+f), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cat, err := exec.LookPath("cat")
	if err != nil {
		t.Fatal(err)
	}
	sb := newSandbox(nil, cat, configDir)
	if w := sb.Warning(); w != "" {
		if os.Getenv("CI") != "" {
			t.Fatal(w)
		}
		t.Skip(w)
	}
	run := func(path string) (string, error) {
		cmd := exec.Command(cat, path)
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		err := sb.start(cmd.Start)
		if err == nil {
			err = cmd.Wait()
		}
		return out.String(), err
	}
	if out, err := run(allowed); err != nil || !strings.Contains(out, "content of") {
		t.Fatalf("reading the config directory: %v: %s", err, out)
	}
	if out, err := run(secret); err == nil || strings.Contains(out, "content of") {
		t.Fatalf("read a file outside the sandbox: %v: %s", err, out)
	}
	// The daemon itself is not restricted by having started a sandboxed child.
	if b, err := os.ReadFile(secret); err != nil || !strings.Contains(string(b), "content of") {
		t.Fatalf("the daemon lost access to its own files: %v", err)
	}
}

// The real HAProxy, checked the way the daemon checks it: a configuration
// that reads a file outside the sandbox passes `haproxy -c` unrestricted,
// and fails inside it, so it never reaches a running HAProxy.
func TestSandboxedCheckRefusesForeignFile(t *testing.T) {
	requireHAProxy(t)
	prog, err := findProgram("")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	secretDir := t.TempDir()
	secret := filepath.Join(secretDir, "kubeconfig")
	if err := os.WriteFile(secret, []byte("apiVersion: v1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := "defaults d\n  mode http\n  timeout connect 1s\n  timeout client 1s\n  timeout server 1s\n" +
		"frontend f from d\n  bind 127.0.0.1:18080\n  http-request return status 200 content-type text/plain file " + secret + "\n"
	path := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := (&programChecker{program: prog}).Check(context.Background(), path); err != nil {
		t.Fatalf("unrestricted haproxy -c: %v", err)
	}
	sb := newSandbox(nil, prog, dir)
	if w := sb.Warning(); w != "" {
		t.Fatal(w)
	}
	err = (&programChecker{program: prog, sandbox: sb}).Check(context.Background(), path)
	var ce *checkError
	if !errors.As(err, &ce) {
		t.Fatalf("sandboxed haproxy -c: %v, want a rejection", err)
	}
	t.Logf("sandboxed haproxy -c: %v", err)
}
