package testenv

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A machine is a Debian 12 root booted with systemd-nspawn: systemd is its
// PID 1, so units, the journal, sd_notify, the watchdog and the package
// manager behave as on a real edge host, which the test host (no systemd as
// PID 1) cannot show. The root comes from debootstrap once and is cached
// outside the work tree; each machine boots an overlay of it, so the cache
// stays pristine and a boot costs no copy.

// MachinePackages are installed into the cached root at debootstrap time:
// the machine has no network to a mirror, so whatever a test installs there
// (a .deb's Depends) must already be in it. Changing the list makes a new
// cache entry.
var MachinePackages = []string{
	"adduser", "ca-certificates", "curl", "dbus", "haproxy", "iproute2", "procps", "systemd", "systemd-sysv",
}

const (
	machineSuite = "bookworm"
	// machineRecipe changes when the way the root is made changes in a way
	// the package list does not show.
	machineRecipe = "1"
)

var debianRoot struct {
	mu  sync.Mutex
	dir string
}

// DebianRoot returns the cached Debian 12 root (debootstrap minbase plus
// MachinePackages), building it the first time (about a minute, from the
// mirror the host's apt uses). Test binaries running at the same time wait
// for one build. Never modify the returned tree: boot it with StartMachine.
func DebianRoot() (string, error) {
	debianRoot.mu.Lock()
	defer debianRoot.mu.Unlock()
	if debianRoot.dir != "" {
		return debianRoot.dir, nil
	}
	if _, err := exec.LookPath("debootstrap"); err != nil {
		return "", errors.New("debootstrap not found: apt-get install debootstrap")
	}
	mirror := aptMirror("/")
	pkgs := append([]string(nil), MachinePackages...)
	sort.Strings(pkgs)
	sum := sha256.Sum256([]byte(strings.Join([]string{machineRecipe, machineSuite, "minbase", mirror, strings.Join(pkgs, ",")}, "\n")))
	key := machineSuite + "-" + hex.EncodeToString(sum[:6])

	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir() // no HOME: still one fixed place
	}
	base := filepath.Join(cache, "perimeter", "rootfs")
	if err := os.MkdirAll(base, 0o755); err != nil {
		return "", fmt.Errorf("machine root cache: %w", err)
	}
	dir := filepath.Join(base, key)
	lock, err := lockFile(filepath.Join(base, key+".lock"))
	if err != nil {
		return "", err
	}
	defer lock.unlock()
	if _, err := os.Stat(filepath.Join(dir, "usr", "lib", "systemd", "systemd")); err == nil {
		debianRoot.dir = dir
		return dir, nil
	}
	// Built aside and renamed: a build killed half-way is never taken for
	// a root.
	tmp := dir + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return "", fmt.Errorf("machine root: %w", err)
	}
	fmt.Fprintf(os.Stderr, "testenv: building the Debian %s machine root %s with debootstrap from %s (once)\n", machineSuite, dir, mirror)
	cmd := exec.Command("debootstrap", "--variant=minbase", "--include="+strings.Join(pkgs, ","), machineSuite, tmp, mirror)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive", "LC_ALL=C")
	if err := cmd.Run(); err != nil {
		_ = os.RemoveAll(tmp)
		return "", fmt.Errorf("debootstrap: %w\n%s", err, tailString(out.String(), 30))
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", fmt.Errorf("machine root: %w", err)
	}
	debianRoot.dir = dir
	return dir, nil
}

// aptMirror is the Debian mirror of the apt sources under root (one-line
// and deb822 formats), so the machine's packages come from where the host's
// come from; deb.debian.org when there is none.
func aptMirror(root string) string {
	var files []string
	files = append(files, filepath.Join(root, "etc/apt/sources.list"))
	list, _ := filepath.Glob(filepath.Join(root, "etc/apt/sources.list.d/*.list"))
	deb822, _ := filepath.Glob(filepath.Join(root, "etc/apt/sources.list.d/*.sources"))
	files = append(files, list...)
	files = append(files, deb822...)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if strings.HasSuffix(f, ".sources") {
			// Stanzas separated by blank lines; take one with the plain suite.
			for _, stanza := range strings.Split(string(b), "\n\n") {
				fields := map[string]string{}
				for _, line := range strings.Split(stanza, "\n") {
					if k, v, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(strings.TrimSpace(line), "#") {
						fields[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
					}
				}
				if strings.EqualFold(fields["enabled"], "no") || !strings.Contains(" "+fields["types"]+" ", " deb ") {
					continue
				}
				if !containsWord(fields["suites"], machineSuite) {
					continue
				}
				if uris := strings.Fields(fields["uris"]); len(uris) > 0 {
					return uris[0]
				}
			}
			continue
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) < 3 || f[0] != "deb" {
				continue
			}
			f = f[1:]
			if strings.HasPrefix(f[0], "[") { // options
				for len(f) > 0 && !strings.HasSuffix(f[0], "]") {
					f = f[1:]
				}
				if len(f) > 0 {
					f = f[1:]
				}
			}
			if len(f) >= 2 && f[1] == machineSuite {
				return f[0]
			}
		}
	}
	return "http://deb.debian.org/debian"
}

func containsWord(list, word string) bool {
	for _, w := range strings.Fields(list) {
		if w == word {
			return true
		}
	}
	return false
}

// MachineOptions describe a machine to boot.
type MachineOptions struct {
	// Netns is the network namespace the machine lives in (required): its
	// links and addresses are what the machine has; nothing inside
	// configures the network.
	Netns *Netns
	// Name is nspawn's name for the machine; default pm-<pid>-<seq>.
	Name string
}

// Machine is a booted machine.
type Machine struct {
	Name  string
	Netns *Netns
	// Root is the machine's root seen from the host (an overlay of the cached
	// root, thrown away on Stop).
	Root string

	dir     string // holds upper/, work/, root/ and the console log
	logPath string
	cmd     *exec.Cmd
	leader  int // PID 1 of the machine, as the host numbers it
	done    chan struct{}
	waitErr error
	once    sync.Once
	stopErr error
}

// BootMachine boots a machine for the test, waits until it has finished
// booting, and shuts it down (and removes it) when the test ends.
func BootMachine(tb testing.TB, opts MachineOptions) *Machine {
	tb.Helper()
	RequireRoot(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	m, err := StartMachine(ctx, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("machine %s console (end):\n%s", m.Name, m.ConsoleTail(40))
		}
		if err := m.Stop(); err != nil {
			tb.Error(err)
		}
	})
	return m
}

const machineDirPrefix = "pm-machine-"

// StartMachine boots a machine and waits until systemd reports the boot
// finished (running or degraded). The caller must Stop it.
func StartMachine(ctx context.Context, opts MachineOptions) (m *Machine, err error) {
	if opts.Netns == nil {
		return nil, errors.New("machine: no network namespace")
	}
	if _, err := exec.LookPath("systemd-nspawn"); err != nil {
		return nil, errors.New("systemd-nspawn not found: apt-get install systemd-container")
	}
	lower, err := DebianRoot()
	if err != nil {
		return nil, err
	}
	sweepMachineDirs()
	seq := nextSeq()
	m = &Machine{Name: opts.Name, Netns: opts.Netns, done: make(chan struct{})}
	if m.Name == "" {
		m.Name = fmt.Sprintf("pm-%d-%d", os.Getpid(), seq)
	}
	if m.dir, err = os.MkdirTemp("", fmt.Sprintf("%s%d-", machineDirPrefix, os.Getpid())); err != nil {
		return nil, fmt.Errorf("machine: %w", err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(fmt.Errorf("machine %s: %w", m.Name, err), m.Stop())
			m = nil
		}
	}()
	m.Root = filepath.Join(m.dir, "root")
	for _, d := range []string{"upper", "work", "root"} {
		if err := os.Mkdir(filepath.Join(m.dir, d), 0o755); err != nil {
			return m, err
		}
	}
	data := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", lower, filepath.Join(m.dir, "upper"), filepath.Join(m.dir, "work"))
	if err := unix.Mount("overlay", m.Root, "overlay", 0, data); err != nil {
		return m, fmt.Errorf("overlay mount of %s: %w", lower, err)
	}
	m.logPath = filepath.Join(m.dir, "console.log")
	logf, err := os.Create(m.logPath)
	if err != nil {
		return m, err
	}
	defer logf.Close()
	m.cmd = exec.Command("systemd-nspawn",
		"--quiet",
		"--register=no", // no machined on the host
		"--keep-unit",   // and no systemd to make a scope with
		"--settings=no",
		"--link-journal=no", // keep the host's /var/log/journal out of it
		"--resolv-conf=off",
		"--timezone=off",
		"--console=read-only",
		// nspawn keeps CAP_NET_ADMIN only for networks it makes itself; the
		// namespace is the machine's own, and an edge host's services
		// (kernel routes) need it.
		"--capability=CAP_NET_ADMIN",
		// nspawn's own system call filter predates Landlock, which a host's
		// services may use (EPERM inside otherwise).
		"--system-call-filter=landlock_create_ruleset landlock_add_rule landlock_restrict_self",
		"--machine="+m.Name,
		"--network-namespace-path="+filepath.Join("/run/netns", opts.Netns.Name),
		"--directory="+m.Root,
		"--boot",
	)
	m.cmd.Stdout, m.cmd.Stderr = logf, logf
	m.cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid: true,
		// If the test binary dies, nspawn shuts the machine down (SIGTERM
		// asks it for an orderly poweroff).
		Pdeathsig: syscall.SIGTERM,
	}
	// Pdeathsig follows the forking thread: fork from a locked thread that
	// lives as long as nspawn (see startProcess).
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := m.cmd.Start(); err != nil {
			started <- err
			close(m.done)
			return
		}
		started <- nil
		m.waitErr = m.cmd.Wait()
		close(m.done)
	}()
	if err := <-started; err != nil {
		return m, fmt.Errorf("systemd-nspawn: %w", err)
	}
	if err := Poll(ctx, 60*time.Second, func() error {
		if m.exited() {
			return errMachineExited
		}
		m.leader = machineLeader(m.cmd.Process.Pid)
		if m.leader == 0 {
			return errors.New("no PID 1 yet")
		}
		return nil
	}); err != nil {
		return m, fmt.Errorf("find PID 1: %w; console:\n%s", err, m.ConsoleTail(20))
	}
	var state string
	if err := Poll(ctx, 90*time.Second, func() error {
		if m.exited() {
			return errMachineExited
		}
		// --wait blocks until the boot finishes once PID 1 answers; before
		// that systemctl fails to connect and we ask again.
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		out, _ := m.Command(cctx, "systemctl", "is-system-running", "--wait").Output()
		state = strings.TrimSpace(string(out))
		if state == "running" || state == "degraded" {
			return nil
		}
		return fmt.Errorf("system state %q", state)
	}); err != nil {
		return m, fmt.Errorf("boot: %w; console:\n%s", err, m.ConsoleTail(30))
	}
	return m, nil
}

var errMachineExited = errors.New("systemd-nspawn exited")

func (m *Machine) exited() bool {
	select {
	case <-m.done:
		return true
	default:
		return false
	}
}

// machineLeader finds the machine's PID 1: the child of nspawn that is 1 in
// its own PID namespace.
func machineLeader(nspawn int) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		var ppid int
		var nspid []string
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "PPid:"); ok {
				ppid, _ = strconv.Atoi(strings.TrimSpace(v))
			}
			if v, ok := strings.CutPrefix(line, "NSpid:"); ok {
				nspid = strings.Fields(v)
			}
		}
		if ppid == nspawn && len(nspid) >= 2 && nspid[len(nspid)-1] == "1" {
			return pid
		}
	}
	return 0
}

// Leader is the machine's PID 1 as the host numbers it.
func (m *Machine) Leader() int { return m.leader }

// Command prepares a command run inside the machine (all its namespaces and
// its root, a clean environment), like `machinectl shell` would.
func (m *Machine) Command(ctx context.Context, args ...string) *exec.Cmd {
	nsenter := []string{
		"--target=" + strconv.Itoa(m.leader),
		"--mount", "--uts", "--ipc", "--net", "--pid", "--cgroup", "--root", "--wd",
		"--", "/usr/bin/env", "-i",
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"LANG=C.UTF-8", "TERM=dumb", "SYSTEMD_PAGER=", "SYSTEMD_COLORS=0",
		"DEBIAN_FRONTEND=noninteractive",
	}
	return exec.CommandContext(ctx, "nsenter", append(nsenter, args...)...)
}

// Exec runs a command inside the machine and returns its combined output;
// stdin may be nil.
func (m *Machine) Exec(ctx context.Context, stdin io.Reader, args ...string) (string, error) {
	cmd := m.Command(ctx, args...)
	cmd.Stdin = stdin
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("machine %s: %s: %w: %s", m.Name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return string(out), nil
}

// ConsoleTail returns the last n lines of the machine's console.
func (m *Machine) ConsoleTail(n int) string { return tailFile(m.logPath, n) }

// Stop shuts the machine down (nspawn turns SIGTERM into an orderly
// poweroff), kills it if that takes more than 30 s, and removes the overlay.
// Safe to call twice.
func (m *Machine) Stop() error {
	m.once.Do(func() {
		var errs []error
		if m.cmd != nil && m.cmd.Process != nil {
			_ = m.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-m.done:
			case <-time.After(30 * time.Second):
				errs = append(errs, fmt.Errorf("machine %s: no poweroff within 30s; killed", m.Name))
				if m.leader > 0 {
					// PID 1 of a PID namespace takes every process in it along.
					_ = syscall.Kill(m.leader, syscall.SIGKILL)
				}
				_ = m.cmd.Process.Kill()
				<-m.done
			}
		}
		if m.dir != "" {
			errs = append(errs, removeMachineDir(m.dir))
		}
		m.stopErr = errors.Join(errs...)
	})
	return m.stopErr
}

// removeMachineDir unmounts the overlay and removes the throwaway upper
// layer. It refuses to remove anything while the overlay is still mounted:
// the removal would reach through the mount.
func removeMachineDir(dir string) error {
	root := filepath.Join(dir, "root")
	if err := unix.Unmount(root, 0); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		if err := unix.Unmount(root, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("unmount %s: %w", root, err)
		}
	}
	if mounted(root) {
		return fmt.Errorf("unmount %s: still mounted", root)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove machine dir: %w", err)
	}
	return nil
}

// mounted reports whether path is a mount point in this mount namespace.
func mounted(path string) bool {
	mounts, err := readMountinfo()
	if err != nil {
		return false
	}
	for _, m := range mounts {
		if m.point == path {
			return true
		}
	}
	return false
}

// sweepMachineDirs removes the machines of test binaries that died: their
// nspawn shut the machine down (Pdeathsig), but nobody unmounted the overlay.
func sweepMachineDirs() {
	entries, err := os.ReadDir(os.TempDir())
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), machineDirPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		pid, _, _ := strings.Cut(rest, "-")
		if n, err := strconv.Atoi(pid); err == nil && n != os.Getpid() && processID(n) == "" {
			_ = removeMachineDir(filepath.Join(os.TempDir(), e.Name()))
		}
	}
}

func tailString(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
