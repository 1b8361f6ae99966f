package haproxy

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// HAProxy runs with the daemon's user, so without more it could read what
// the daemon reads (the kubeconfig, with its cluster credentials) and would
// inherit the capability the daemon needs for kernel routes. A config
// snippet or a crafted file reference could then serve the kubeconfig
// (`http-request return ... file /etc/perimeter/kubeconfig`), the
// IngressNightmare pattern. So HAProxy, and every `haproxy -c`, starts from
// a thread that has given up, for itself and its children:
//   - reading files outside what HAProxy needs (Landlock, unprivileged, kept
//     across the master's re-executions on reload);
//   - CAP_NET_ADMIN and every other capability but CAP_NET_BIND_SERVICE in
//     its inheritable and ambient sets.
// It also gets an environment of its own (haproxyEnv): env() and "${VAR}"
// in a snippet see nothing of the daemon's.
// The thread is never given back to the Go scheduler: it exits with its
// goroutine.

// sandbox says what HAProxy may read. Landlock needs Linux 5.13; on an older
// kernel HAProxy runs without that restriction and the daemon says so once.
type sandbox struct {
	readable []string
	log      *slog.Logger

	capsOnce sync.Once

	once    sync.Once
	ruleset int // -1: no Landlock
	warning string
}

// systemReadable is what HAProxy, its libraries and the C library read:
// programs and libraries, name service and TLS configuration, devices and
// kernel views. /etc is listed file by file because /etc/perimeter is in it.
var systemReadable = []string{
	"/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/opt",
	"/dev", "/proc", "/sys",
	"/etc/ssl", "/etc/pki", "/etc/crypto-policies", "/etc/haproxy", "/etc/alternatives",
	"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime",
	"/etc/nsswitch.conf", "/etc/hosts", "/etc/host.conf", "/etc/resolv.conf", "/etc/gai.conf",
	"/etc/services", "/etc/protocols", "/etc/passwd", "/etc/group",
	"/run/systemd/resolve",
}

func newSandbox(log *slog.Logger, program string, dirs ...string) *sandbox {
	s := &sandbox{ruleset: -1, log: log}
	s.readable = append(s.readable, systemReadable...)
	s.readable = append(s.readable, filepath.Dir(program))
	s.readable = append(s.readable, dirs...)
	return s
}

const landlockRead = unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_READ_DIR

// prepare builds the Landlock ruleset once: the paths HAProxy may read.
func (s *sandbox) prepare() {
	attr := unix.LandlockRulesetAttr{Access_fs: landlockRead}
	fd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr), 0)
	if errno != 0 {
		s.warning = fmt.Sprintf("Landlock unavailable (%v): HAProxy can read every file the daemon can", errno)
		return
	}
	for _, p := range s.readable {
		dir, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			continue // not on this system
		}
		access := uint64(landlockRead)
		var st unix.Stat_t
		if unix.Fstat(dir, &st) == nil && st.Mode&unix.S_IFMT != unix.S_IFDIR {
			access = unix.LANDLOCK_ACCESS_FS_READ_FILE // directory rights only fit directories
		}
		rule := unix.LandlockPathBeneathAttr{Allowed_access: access, Parent_fd: int32(dir)}
		_, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, fd, unix.LANDLOCK_RULE_PATH_BENEATH,
			uintptr(unsafe.Pointer(&rule)), 0, 0, 0)
		unix.Close(dir)
		if errno != 0 {
			unix.Close(int(fd))
			s.warning = fmt.Sprintf("Landlock rule for %s: %v: HAProxy can read every file the daemon can", p, errno)
			return
		}
	}
	s.ruleset = int(fd)
}

// Warning is what the operator should know about the sandbox, if anything.
func (s *sandbox) Warning() string {
	if s == nil {
		return ""
	}
	s.once.Do(s.prepare)
	return s.warning
}

// start runs start (an exec.Cmd's Start) on a thread restricted as above,
// so that the process it forks is restricted too. A nil sandbox restricts
// nothing.
func (s *sandbox) start(start func() error) error {
	if s == nil {
		return start()
	}
	s.once.Do(s.prepare)
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the thread is restricted for good and must exit
		// with this goroutine rather than run other goroutines.
		runtime.LockOSThread()
		if err := s.restrictThread(); err != nil {
			errc <- err
			return
		}
		errc <- start()
	}()
	return <-errc
}

func (s *sandbox) restrictThread() error {
	if err := dropInheritedCaps(); err != nil {
		// A seccomp filter may refuse capset; HAProxy then inherits the
		// daemon's capabilities, which beats not serving at all.
		s.capsOnce.Do(func() {
			if s.log != nil {
				s.log.Warn("HAProxy keeps the daemon's capabilities", "error", err)
			}
		})
	}
	if s.ruleset < 0 {
		return nil
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("haproxy sandbox: no_new_privs: %w", err)
	}
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(s.ruleset), 0, 0); errno != 0 {
		return fmt.Errorf("haproxy sandbox: landlock: %w", errno)
	}
	return nil
}

// dropInheritedCaps leaves only CAP_NET_BIND_SERVICE for programs this
// thread starts: HAProxy binds ports below 1024 and needs nothing else.
func dropInheritedCaps() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	bind := uint32(1) << unix.CAP_NET_BIND_SERVICE
	data[0].Inheritable &= data[0].Permitted & bind
	data[1].Inheritable = 0
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	if data[0].Inheritable&bind != 0 {
		if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_RAISE, unix.CAP_NET_BIND_SERVICE, 0, 0); err != nil {
			return fmt.Errorf("keep CAP_NET_BIND_SERVICE: %w", err)
		}
	}
	return nil
}

// haproxyEnv is HAProxy's whole environment.
var haproxyEnv = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
