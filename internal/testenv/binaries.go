package testenv

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
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
