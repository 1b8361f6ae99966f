package testenv

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// envNetnsChild marks the re-executed test binary that runs in a private
// mount namespace, where /run can start empty without touching the machine.
const envNetnsChild = "PERIMETER_TESTENV_NETNS_CHILD"

// The test bed must work from a /run/netns that was never mounted, beside
// `ip netns add`: the mix that once hid namespaces under ip's bind mount.
// It runs in a private mount namespace with a fresh tmpfs on /run, so the
// machine's /run/netns stays as it is.
func TestNetnsDirFromUnmounted(t *testing.T) {
	if os.Getenv(envNetnsChild) != "" {
		netnsDirChild(t)
		return
	}
	RequireRoot(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Fatal("needs unshare(1) from util-linux")
	}
	cmd := exec.Command("unshare", "--mount", "--propagation", "private",
		os.Args[0], "-test.run=^TestNetnsDirFromUnmounted$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), envNetnsChild+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestNetnsDirFromUnmounted") {
		t.Fatalf("child in a private mount namespace: %v\n%s", err, out)
	}
	t.Logf("child:\n%s", out)
}

func netnsDirChild(t *testing.T) {
	// The copies of the machine's namespace mounts this mount namespace
	// started with go first (privately: the machine keeps its own), so
	// that what is left is only what this test makes.
	mounts, err := readMountinfo()
	if err != nil {
		t.Fatal(err)
	}
	for i := len(mounts) - 1; i >= 0; i-- {
		if strings.HasPrefix(mounts[i].point, netnsDir+"/") {
			_ = unix.Unmount(mounts[i].point, unix.MNT_DETACH)
		}
	}
	for unix.Unmount(netnsDir, unix.MNT_DETACH) == nil {
	}
	if err := unix.Mount("tmpfs", "/run", "tmpfs", 0, "mode=0755"); err != nil {
		t.Fatalf("tmpfs on /run: %v", err)
	}
	if _, err := os.Stat(netnsDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s exists on a fresh /run: %v", netnsDir, err)
	}

	t.Run("beside ip netns add", func(t *testing.T) {
		// One namespace before ip runs at all: the order that hid it.
		first, err := CreateNetns("dir-first")
		if err != nil {
			t.Fatal(err)
		}
		spaces := []*Netns{first}
		var wg sync.WaitGroup
		ipErr := make(chan error, 1)
		wg.Add(1)
		go func() { // what a person or another tool does meanwhile
			defer wg.Done()
			for i := 0; i < 10; i++ {
				name := fmt.Sprintf("other-%d", i)
				for _, args := range [][]string{
					{"netns", "add", name}, {"-n", name, "link", "set", "lo", "up"}, {"netns", "del", name},
				} {
					if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
						ipErr <- fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
						return
					}
				}
			}
		}()
		for i := 0; i < 8; i++ {
			n, err := CreateNetns(fmt.Sprintf("dir-%d", i))
			if err != nil {
				t.Fatal(err)
			}
			spaces = append(spaces, n)
			useNetns(t, n)
		}
		wg.Wait()
		select {
		case err := <-ipErr:
			t.Fatal(err)
		default:
		}
		for _, n := range spaces {
			useNetns(t, n) // still reachable after ip's mounts
			if err := n.Close(); err != nil {
				t.Fatal(err)
			}
		}
		assertNoNetnsMounts(t)
		mounts, err := readMountinfo()
		if err != nil {
			t.Fatal(err)
		}
		layers := 0
		for _, m := range mounts {
			if m.point == netnsDir {
				layers++
			}
		}
		if layers != 1 {
			t.Fatalf("%s mounted %d times, want once", netnsDir, layers)
		}
	})

	t.Run("sweep reaches hidden namespaces", func(t *testing.T) {
		// Back to a never-mounted /run/netns, then leak a namespace the way
		// the test bed once did: a plain NewNamed, then ip's bind mount on top.
		for unix.Unmount(netnsDir, unix.MNT_DETACH) == nil {
		}
		netnsPrepared.Lock()
		netnsPrepared.done = false
		netnsPrepared.Unlock()
		gone := exec.Command("true")
		if err := gone.Run(); err != nil {
			t.Fatal(err)
		}
		leaked := "pm-" + strconv.Itoa(gone.Process.Pid) + "-leaked"
		if err := onLockedThread(func() error {
			origin, err := netns.Get()
			if err != nil {
				return err
			}
			defer origin.Close()
			h, err := netns.NewNamed(leaked)
			if serr := netns.Set(origin); serr != nil {
				return errThreadStuck{serr}
			}
			if err == nil {
				h.Close()
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("ip", "netns", "add", "hider").CombinedOutput(); err != nil {
			t.Fatalf("ip netns add: %v: %s", err, out)
		}
		hidden, err := hiddenNetns()
		if err != nil || !hidden[leaked] {
			t.Fatalf("setup: %s not hidden (%v, %v)", leaked, hidden, err)
		}
		alive, err := CreateNetns("alive")
		if err != nil {
			t.Fatal(err)
		}

		if err := sweepNetns(func(name string) bool { return name == leaked }); err != nil {
			t.Fatal(err)
		}

		if hidden, err := hiddenNetns(); err != nil || len(hidden) != 0 {
			t.Fatalf("hidden namespaces after the sweep: %v %v", hidden, err)
		}
		if _, err := os.Stat(filepath.Join(netnsDir, leaked)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s still there: %v", leaked, err)
		}
		// What was alive is still there under its name.
		if out, err := exec.Command("ip", "netns", "exec", "hider", "ip", "link", "show", "lo").CombinedOutput(); err != nil {
			t.Fatalf("hider after the sweep: %v: %s", err, out)
		}
		useNetns(t, alive)
		if out, err := exec.Command("ip", "netns", "exec", alive.Name, "true").CombinedOutput(); err != nil {
			t.Fatalf("%s by name after the sweep: %v: %s", alive.Name, err, out)
		}
		if err := alive.Close(); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("ip", "netns", "del", "hider").CombinedOutput(); err != nil {
			t.Fatalf("ip netns del: %v: %s", err, out)
		}
		assertNoNetnsMounts(t)
	})
}

// useNetns checks the namespace works: by name for ip, and by handle for a
// listener and a connection on its own loopback.
func useNetns(t *testing.T, n *Netns) {
	t.Helper()
	if _, err := n.Exec("ip", "link", "show", "lo"); err != nil {
		t.Fatal(err)
	}
	if err := n.Do(func() error {
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			return err
		}
		defer ln.Close()
		c, err := net.DialTimeout("tcp4", ln.Addr().String(), 2*time.Second)
		if err != nil {
			return err
		}
		return c.Close()
	}); err != nil {
		t.Fatalf("netns %s: %v", n.Name, err)
	}
}

func assertNoNetnsMounts(t *testing.T) {
	t.Helper()
	mounts, err := readMountinfo()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mounts {
		if m.fstype == "nsfs" && strings.HasPrefix(m.point, netnsDir+"/") {
			t.Errorf("namespace mount left: %s", m.point)
		}
	}
	entries, _ := os.ReadDir(netnsDir)
	for _, e := range entries {
		t.Errorf("file left in %s: %s", netnsDir, e.Name())
	}
}
