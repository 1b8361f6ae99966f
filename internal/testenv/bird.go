package testenv

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Bird is a BIRD daemon in a network namespace: the test bed's stand-in
// for calico-node's BGP speaker. The BGP tests, the end-to-end tests and
// `make lab` all run their nodes through it: BIRD 2 with hand-written
// configurations (NewBird), or BIRD 1.6, the line calico-node's BIRD comes
// from, with Calico's own configuration (NewCalicoBird, CalicoBirdConfig).
type Bird struct {
	Name string
	NS   *Netns
	Conf string // configuration file
	Ctl  string // control socket, for birdc
	Log  string // what BIRD prints

	bin, birdc string   // the programs: bird and birdc of BIRD 2 or 1.6
	args       []string // extra options

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// RequireBird fails the test when BIRD 2 is missing (root and not -short
// are required first): CI installs it, so a missing one is a broken machine,
// not a reason to skip.
func RequireBird(tb testing.TB) {
	tb.Helper()
	RequireRoot(tb)
	for _, bin := range []string{"bird", "birdc"} {
		if _, err := exec.LookPath(bin); err != nil {
			tb.Fatalf("needs %s (apt-get install bird2)", bin)
		}
	}
}

// NewBird prepares a BIRD named name in ns, with its files in dir (which must
// be short: the control socket path is limited to 107 bytes). Start runs it;
// the test's end kills it and, when the test failed, logs its last lines.
func NewBird(tb testing.TB, ns *Netns, dir, name string) *Bird {
	tb.Helper()
	RequireBird(tb)
	b := newBird(ns, dir, name)
	tb.Cleanup(func() {
		b.Stop(syscall.SIGKILL)
		if tb.Failed() {
			tb.Logf("BIRD %s (tail):\n%s", name, tailFile(b.Log, 30))
		}
	})
	return b
}

func newBird(ns *Netns, dir, name string) *Bird {
	return &Bird{Name: name, NS: ns,
		Conf: filepath.Join(dir, name+".conf"),
		Ctl:  filepath.Join(dir, name+".ctl"),
		Log:  filepath.Join(dir, name+".log"),
		bin:  "bird", birdc: "birdc"}
}

var bird1 struct {
	mu         sync.Mutex
	bird, ctl  string
	dir        string
	err        error
	downloaded bool
}

// Bird1 returns the paths of BIRD 1.6's bird and birdc, fetched once from
// Debian's "bird" package into the cache by tools/bird1.sh (which needs
// apt's package lists).
func Bird1() (bird, birdc string, err error) {
	bird1.mu.Lock()
	defer bird1.mu.Unlock()
	if bird1.downloaded {
		return bird1.bird, bird1.ctl, bird1.err
	}
	root, err := ModuleRoot()
	if err != nil {
		return "", "", err
	}
	sd, err := stateDir()
	if err != nil {
		return "", "", err
	}
	lock, err := lockFile(filepath.Join(sd, "bird1.lock"))
	if err != nil {
		return "", "", err
	}
	defer lock.unlock()
	var out, stderr bytes.Buffer
	cmd := exec.Command("/bin/sh", filepath.Join(root, "internal", "testenv", "tools", "bird1.sh"))
	cmd.Stdout, cmd.Stderr = &out, &stderr
	bird1.downloaded = true
	if err := cmd.Run(); err != nil {
		bird1.err = fmt.Errorf("BIRD 1.6 (tools/bird1.sh): %w\n%s", err, stderr.String())
		return "", "", bird1.err
	}
	dir := strings.TrimSpace(out.String())
	bird1.dir = dir
	bird1.bird, bird1.ctl = filepath.Join(dir, "bird"), filepath.Join(dir, "birdc")
	return bird1.bird, bird1.ctl, nil
}

// Bird6 returns the paths of BIRD 1.6's IPv6 daemon, bird6, and its birdc6,
// from the same package as Bird1: calico-node runs it beside bird for
// IPv6 pools.
func Bird6() (bird6, birdc6 string, err error) {
	if _, _, err := Bird1(); err != nil {
		return "", "", err
	}
	bird1.mu.Lock()
	dir := bird1.dir
	bird1.mu.Unlock()
	bird6, birdc6 = filepath.Join(dir, "bird6"), filepath.Join(dir, "birdc6")
	for _, p := range []string{bird6, birdc6} {
		if _, err := os.Stat(p); err != nil {
			return "", "", fmt.Errorf("BIRD 1.6 package without bird6: %w", err)
		}
	}
	return bird6, birdc6, nil
}

// NewCalicoBird6 is NewCalicoBird running bird6, for CalicoBird6Config.
func NewCalicoBird6(tb testing.TB, ns *Netns, dir, name string) *Bird {
	tb.Helper()
	RequireBird1(tb)
	bin, ctl, err := Bird6()
	if err != nil {
		tb.Fatal(err)
	}
	b := newBird(ns, dir, name)
	b.bin, b.birdc = bin, ctl
	b.args = []string{"-R"}
	tb.Cleanup(func() {
		b.Stop(syscall.SIGKILL)
		if tb.Failed() {
			tb.Logf("BIRD %s (tail):\n%s", name, tailFile(b.Log, 30))
		}
	})
	return b
}

// RequireBird1 fails the test when BIRD 1.6 cannot be had (root and not
// -short are required first).
func RequireBird1(tb testing.TB) {
	tb.Helper()
	RequireRoot(tb)
	if _, _, err := Bird1(); err != nil {
		tb.Fatal(err)
	}
}

// NewCalicoBird is NewBird running BIRD 1.6, for CalicoBirdConfig.
func NewCalicoBird(tb testing.TB, ns *Netns, dir, name string) *Bird {
	tb.Helper()
	RequireBird1(tb)
	b, err := NewCalicoBirdCtx(ns, dir, name)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		b.Stop(syscall.SIGKILL)
		if tb.Failed() {
			tb.Logf("BIRD %s (tail):\n%s", name, tailFile(b.Log, 30))
		}
	})
	return b
}

// NewCalicoBirdCtx is NewCalicoBird for programs: the caller must Stop it.
func NewCalicoBirdCtx(ns *Netns, dir, name string) (*Bird, error) {
	bin, ctl, err := Bird1()
	if err != nil {
		return nil, err
	}
	b := newBird(ns, dir, name)
	b.bin, b.birdc = bin, ctl
	// As calico-node runs it: a restart is a graceful restart (the
	// routes it left in the kernel stay, its peers keep its routes
	// until it is back and has sent them again).
	b.args = []string{"-R"}
	return b, nil
}

// NewBirdCtx is NewBird for programs: the caller must Stop it.
func NewBirdCtx(ns *Netns, dir, name string) *Bird { return newBird(ns, dir, name) }

// Start writes conf and runs BIRD until it answers on its control socket.
func (b *Bird) Start(conf string) error {
	if err := os.WriteFile(b.Conf, []byte(conf), 0o600); err != nil {
		return err
	}
	logf, err := os.OpenFile(b.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := b.NS.Command(context.Background(), append([]string{b.bin, "-f", "-c", b.Conf, "-s", b.Ctl}, b.args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// If the test binary dies before its cleanups, BIRD dies with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start bird %s: %w", b.Name, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(exited) }()
	b.mu.Lock()
	b.cmd, b.exited = cmd, exited
	b.mu.Unlock()
	var died error
	err = Poll(context.Background(), 10*time.Second, func() error {
		select {
		case <-exited:
			died = fmt.Errorf("bird %s exited at start:\n%s", b.Name, tailFile(b.Log, 20))
			return nil // waiting cannot help
		default:
		}
		_, err := b.Birdc("show", "status")
		return err
	})
	if died != nil {
		return died
	}
	return err
}

// Birdc runs a birdc command against this BIRD.
func (b *Bird) Birdc(args ...string) (string, error) {
	out, err := exec.Command(b.birdc, append([]string{"-s", b.Ctl}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("birdc %s on %s: %w: %s", strings.Join(args, " "), b.Name, err, out)
	}
	return string(out), nil
}

// BirdcPath is the birdc that talks to this BIRD.
func (b *Bird) BirdcPath() string { return b.birdc }

// Reconfigure writes conf and makes the running BIRD load it.
func (b *Bird) Reconfigure(conf string) error {
	if err := os.WriteFile(b.Conf, []byte(conf), 0o600); err != nil {
		return err
	}
	_, err := b.Birdc("configure")
	return err
}

// Signal sends sig to BIRD; SIGSTOP and SIGCONT freeze and thaw it.
func (b *Bird) Signal(sig syscall.Signal) {
	b.mu.Lock()
	cmd := b.cmd
	b.mu.Unlock()
	if cmd != nil && cmd.Process != nil {
		_ = cmd.Process.Signal(sig)
	}
}

// Stop signals BIRD and waits until it has exited: SIGTERM sends Cease to its
// peers (a node shut down), SIGKILL just drops the sessions (a crash).
func (b *Bird) Stop(sig syscall.Signal) {
	b.mu.Lock()
	cmd, exited := b.cmd, b.exited
	b.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-exited:
		return
	default:
	}
	_ = cmd.Process.Signal(sig)
	_ = cmd.Process.Signal(syscall.SIGCONT) // a frozen BIRD cannot act on sig
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// Running reports whether BIRD is running.
func (b *Bird) Running() bool {
	b.mu.Lock()
	exited := b.exited
	b.mu.Unlock()
	if exited == nil {
		return false
	}
	select {
	case <-exited:
		return false
	default:
		return true
	}
}
