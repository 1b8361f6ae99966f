package testenv

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
)

var shared struct {
	mu      sync.Mutex
	inMain  bool
	started bool
	cluster *Cluster
	err     error
}

// Main runs a package's tests and stops the cluster SharedCluster started, if
// any; when tests failed it first prints the end of the server logs. Use it as
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
//
// The cluster starts on the first SharedCluster call, so a package whose
// tests all skip (-short, not root) pays nothing.
func Main(m *testing.M) {
	shared.mu.Lock()
	shared.inMain = true
	shared.mu.Unlock()

	code := m.Run()

	shared.mu.Lock()
	c := shared.cluster
	shared.mu.Unlock()
	if c != nil {
		if code != 0 {
			fmt.Fprintf(os.Stderr, "testenv: tests failed; shared cluster logs (%s):\n%s", c.Dir, c.LogTail(40))
		}
		if err := c.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "testenv: stop shared cluster: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}
	os.Exit(code)
}

// SharedCluster returns the package's cluster, starting it on first use.
// It needs testenv.Main in the package's TestMain (which stops it) and skips
// with -short. Tests must not rely on a clean cluster: they take their own
// namespace with Namespace.
func SharedCluster(tb testing.TB) *Cluster {
	tb.Helper()
	skipShortCluster(tb)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.inMain {
		tb.Fatal("testenv.SharedCluster needs func TestMain(m *testing.M) { testenv.Main(m) } in this package")
	}
	if !shared.started {
		shared.started = true
		shared.cluster, shared.err = StartClusterCtx(context.Background(), "")
	}
	if shared.err != nil {
		tb.Fatalf("shared test cluster: %v", shared.err)
	}
	return shared.cluster
}
