// Package testenv is the project's real test bed: a kube-apiserver with etcd
// on loopback, HTTP "pods" in network namespaces reached through veth pairs,
// and the guard route that keeps test traffic from leaving the machine. The
// end-to-end tests and the lab program build on it.
//
// Address plan: pods take 198.18.x.y (on the loopback of their namespace),
// the veth links to them 198.19.x.y, the API server's virtual ClusterIPs
// 198.19.240.0/20. All of it lies in 198.18.0.0/15, which the leak guard
// makes unreachable in the root namespace while tests run.
//
// A package of end-to-end tests shares one cluster and starts its pods per
// test:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
//
//	func TestRouting(t *testing.T) {
//		testenv.RequireRoot(t)
//		c := testenv.SharedCluster(t)
//		ns := c.Namespace(t)
//		pod := testenv.StartPod(t, testenv.PodOptions{Name: "web-0", IP: "198.18.7.10", LinkRange: "198.19.7.0/24"})
//		svc := c.CreateService(t, testenv.ServiceSpec{Namespace: ns, Name: "web", Endpoints: []testenv.Endpoint{pod.Endpoint()}})
//		// run the daemon with c.DaemonKubeconfig, then svc.SetEndpoints(t, ...)
//	}
package testenv

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// RequireRoot skips the test unless it runs as root and without -short:
// network namespaces, links and routes need CAP_NET_ADMIN, and -short promises
// to leave out everything that touches the machine.
func RequireRoot(tb testing.TB) {
	tb.Helper()
	if testing.Short() {
		tb.Skip("skipped with -short: needs root, network namespaces and routes")
	}
	if os.Geteuid() != 0 {
		tb.Skip("needs root (network namespaces, veth links, routes); run the tests as root")
	}
}

// Eventually polls cond until it returns nil and fails the test with cond's
// last error when timeout passes first. Call it from the test's goroutine.
func Eventually(tb testing.TB, timeout time.Duration, cond func() error) {
	tb.Helper()
	if err := Poll(context.Background(), timeout, cond); err != nil {
		tb.Fatal(err)
	}
}

// Poll calls cond until it returns nil, ctx ends or timeout passes, starting
// fast (1 ms) so that latency-sensitive checks see a change soon after it
// happens, and backing off to 50 ms so a slow condition does not burn a core.
func Poll(ctx context.Context, timeout time.Duration, cond func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	wait := time.Millisecond
	for {
		err := cond()
		if err == nil {
			return nil
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("not within %v: %w", timeout, err)
			}
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-timer.C:
		}
		if wait < 50*time.Millisecond {
			wait *= 2
		}
	}
}

// Converge is Eventually for latency figures: it polls every millisecond
// for the first five seconds, so a measured time overstates the real one by
// at most a millisecond plus one poll's round trip (Poll's back-off would
// add up to half the time already waited), then slows to 50 ms.
func Converge(tb testing.TB, timeout time.Duration, cond func() error) {
	tb.Helper()
	ConvergeEvery(tb, timeout, time.Millisecond, cond)
}

// ConvergeEvery is Converge polling every interval for the first five
// seconds: for figures of a few milliseconds, where Converge's millisecond
// (and the timer's slack on a busy machine) would be a sizeable share.
func ConvergeEvery(tb testing.TB, timeout, interval time.Duration, cond func() error) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	for {
		err := cond()
		if err == nil {
			return
		}
		wait := interval
		if time.Since(start) > 5*time.Second {
			wait = 50 * time.Millisecond
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			tb.Fatalf("not within %v: %v", timeout, err)
		case <-timer.C:
		}
	}
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(tb testing.TB) int {
	tb.Helper()
	p, err := freePort()
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

func freePort() (int, error) {
	// Below the kernel's ephemeral range (32768 and up by default): a port
	// from that range can be taken by any process's next outgoing
	// connection between this check and the test's bind, which made
	// HAProxy's reloads fail with "address already in use".
	const lo, hi = 20000, 32767
	portsGiven.Lock()
	defer portsGiven.Unlock()
	for range 200 {
		port := lo + rand.IntN(hi-lo+1)
		if portsGiven.m[port] {
			continue
		}
		// The wildcard bind is the strict check: it fails whatever
		// address another socket holds the port on.
		l, err := net.Listen("tcp4", "0.0.0.0:"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		l.Close()
		portsGiven.m[port] = true
		return port, nil
	}
	return 0, errors.New("free port: none found below the ephemeral range")
}

// portsGiven are the ports this process handed out: never twice.
var portsGiven = struct {
	sync.Mutex
	m map[int]bool
}{m: map[int]bool{}}

const modulePath = "github.com/perimeter-ingress/perimeter"

// ModuleRoot returns the directory of the project's go.mod: from this source
// file when the build kept paths, else by walking up from the working
// directory (go test runs in the package directory).
func ModuleRoot() (string, error) {
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		root := filepath.Join(filepath.Dir(file), "..", "..")
		if isModuleRoot(root) {
			return filepath.Clean(root), nil
		}
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("module root: %w", err)
	}
	for {
		if isModuleRoot(dir) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("module root: no go.mod of %s above the working directory", modulePath)
		}
		dir = parent
	}
}

func isModuleRoot(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "module" {
			return f[1] == modulePath
		}
	}
	return false
}

// stateDir holds the cross-process lock and reference files shared by test
// binaries that run at the same time.
func stateDir() (string, error) {
	dirs := []string{"/run/perimeter-tests", filepath.Join(os.TempDir(), "perimeter-tests")}
	var err error
	for _, d := range dirs {
		if err = os.MkdirAll(d, 0o755); err == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("state directory: %w", err)
}
