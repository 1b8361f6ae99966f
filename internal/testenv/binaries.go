package testenv

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var binaries struct {
	mu  sync.Mutex
	dir string
}

// Binaries returns the directory holding kube-apiserver and etcd, building
// them with tools/build.sh the first time (a few minutes; later calls of any
// process take a fraction of a second, and of this one none). Set
// PERIMETER_BIN_DIR to use another directory.
func Binaries() (string, error) {
	binaries.mu.Lock()
	defer binaries.mu.Unlock()
	if binaries.dir != "" {
		return binaries.dir, nil
	}
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	script := filepath.Join(root, "internal", "testenv", "tools", "build.sh")
	// Two test binaries building at once would write the same outputs.
	sd, err := stateDir()
	if err != nil {
		return "", err
	}
	lock, err := lockFile(filepath.Join(sd, "build.lock"))
	if err != nil {
		return "", err
	}
	defer lock.unlock()
	var out bytes.Buffer
	cmd := exec.Command("/bin/sh", script)
	cmd.Stdout = &out
	cmd.Stderr = os.Stderr // the first build is slow: show that it is happening
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build test binaries (%s): %w", script, err)
	}
	dir := strings.TrimSpace(out.String())
	if i := strings.LastIndexByte(dir, '\n'); i >= 0 {
		dir = dir[i+1:]
	}
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return "", fmt.Errorf("build test binaries: %s missing after %s: %w", b, script, err)
		}
	}
	binaries.dir = dir
	return dir, nil
}

var daemon struct {
	once sync.Once
	path string
	err  error
}

// PerimeterBinary builds the daemon once per process into a fixed place in
// the user's cache (not a temporary directory: the binary is ~100 MiB, and
// go build only relinks it when the code changed) and returns its path.
func PerimeterBinary(tb testing.TB) string {
	tb.Helper()
	daemon.once.Do(func() {
		root, err := ModuleRoot()
		if err != nil {
			daemon.err = err
			return
		}
		cache, err := os.UserCacheDir()
		if err != nil {
			cache = os.TempDir() // no HOME: still one fixed place
		}
		// One place per checkout: two work trees never share a binary.
		sum := sha256.Sum256([]byte(root))
		dir := filepath.Join(cache, "perimeter", "e2e", hex.EncodeToString(sum[:6]))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			daemon.err = err
			return
		}
		path := filepath.Join(dir, "perimeter")
		// Test binaries of several packages may build at once: one at a time.
		lock, err := lockFile(path + ".lock")
		if err != nil {
			daemon.err = err
			return
		}
		defer lock.unlock()
		cmd := exec.Command("go", "build", "-o", path, "./cmd/perimeter")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			daemon.err = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		daemon.path = path
	})
	if daemon.err != nil {
		tb.Fatal(daemon.err)
	}
	return daemon.path
}
