package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// namePrefix starts every network namespace name this process creates
// ("pm-<pid>-"), so parallel test binaries never collide and leftovers of a
// killed one can be recognised and swept.
var namePrefix = "pm-" + strconv.Itoa(os.Getpid()) + "-"

// initialNS is the network namespace the process started in, taken during
// package initialisation, which runs on the main thread before any code
// could move a thread elsewhere.
var initialNS, initialNSErr = netns.Get()

var rootNL struct {
	once sync.Once
	h    *netlink.Handle
	err  error
}

// rootNetlink is a netlink handle bound to the initial ("root") namespace,
// whatever thread later uses it.
func rootNetlink() (*netlink.Handle, error) {
	rootNL.once.Do(func() {
		if initialNSErr != nil {
			rootNL.err = fmt.Errorf("initial network namespace: %w", initialNSErr)
			return
		}
		rootNL.h, rootNL.err = netlink.NewHandleAt(initialNS)
		if rootNL.err != nil {
			rootNL.err = fmt.Errorf("netlink: %w", rootNL.err)
		}
	})
	return rootNL.h, rootNL.err
}

var seq atomic.Int64

// nextSeq numbers the objects of this process (netns, links).
func nextSeq() int64 { return seq.Add(1) }

// Netns is a named network namespace (visible to `ip netns`). A nil *Netns
// stands for the root namespace wherever options take one.
type Netns struct {
	Name   string
	handle netns.NsHandle
	nl     *netlink.Handle
	once   sync.Once
	closed atomic.Bool
}

// errNetnsClosed: the namespace is gone. A closed netlink handle would
// silently act on the caller's namespace instead, so it is never used.
var errNetnsClosed = errors.New("network namespace closed")

// NewNetns creates the namespace pm-<pid>-<name> for the test and deletes it
// (and the veth links in it) when the test ends.
func NewNetns(tb testing.TB, name string) *Netns {
	tb.Helper()
	RequireRoot(tb)
	n, err := CreateNetns(name)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := n.Close(); err != nil {
			tb.Error(err)
		}
	})
	return n
}

// CreateNetns creates the namespace pm-<pid>-<name>, with its loopback up.
// The caller must Close it.
func CreateNetns(name string) (*Netns, error) {
	full := namePrefix + sanitizeName(name, 40)
	n := &Netns{Name: full}
	err := withNetnsDir(func() error {
		return onLockedThread(func() error {
			origin, err := netns.Get()
			if err != nil {
				return err
			}
			defer origin.Close()
			h, err := netns.NewNamed(full)
			// NewNamed moves the thread into the namespace even when naming it
			// fails; come back before anything else.
			if serr := netns.Set(origin); serr != nil {
				if err == nil {
					h.Close()
				}
				return errThreadStuck{serr}
			}
			if err != nil {
				return err
			}
			n.handle = h
			return nil
		})
	})
	if err != nil {
		_ = os.Remove(filepath.Join(netnsDir, full)) // an empty file left by a failed NewNamed
		return nil, fmt.Errorf("create netns %s: %w", full, err)
	}
	if n.nl, err = netlink.NewHandleAt(n.handle); err != nil {
		n.Close()
		return nil, fmt.Errorf("netns %s: netlink: %w", full, err)
	}
	lo, err := n.nl.LinkByName("lo")
	if err == nil {
		err = n.nl.LinkSetUp(lo)
	}
	if err != nil {
		n.Close()
		return nil, fmt.Errorf("netns %s: loopback up: %w", full, err)
	}
	return n, nil
}

// errThreadStuck: the OS thread could not return to its namespace. The
// goroutine then ends without unlocking, and Go discards the thread.
type errThreadStuck struct{ err error }

func (e errThreadStuck) Error() string { return "restore thread network namespace: " + e.err.Error() }

// onLockedThread runs fn on a fresh goroutine locked to its OS thread, so
// that fn may switch the thread's namespace without affecting the caller. If
// fn returns errThreadStuck the thread stays locked and dies with the goroutine.
func onLockedThread(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		err := fn()
		var stuck errThreadStuck
		if !errors.As(err, &stuck) {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// Do runs fn with the calling thread inside the namespace. Sockets fn creates
// (listeners, connections) stay in the namespace after it returns. fn must not
// start goroutines that expect to run there.
func (n *Netns) Do(fn func() error) error {
	if n == nil {
		return fn()
	}
	if n.closed.Load() {
		return fmt.Errorf("netns %s: %w", n.Name, errNetnsClosed)
	}
	var fnErr error
	err := onLockedThread(func() error {
		origin, err := netns.Get()
		if err != nil {
			return err
		}
		defer origin.Close()
		if err := netns.Set(n.handle); err != nil {
			return fmt.Errorf("enter netns %s: %w", n.Name, err)
		}
		fnErr = fn()
		if err := netns.Set(origin); err != nil {
			return errThreadStuck{err}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return fnErr
}

// Netlink returns a handle that configures links, addresses and routes of
// the namespace from any goroutine; for a nil Netns, of the root namespace.
func (n *Netns) Netlink() (*netlink.Handle, error) {
	if n == nil {
		return rootNetlink()
	}
	if n.closed.Load() || n.nl == nil {
		return nil, fmt.Errorf("netns %s: %w", n.Name, errNetnsClosed)
	}
	return n.nl, nil
}

// AnyIP makes every address of p local in the namespace (a local route on
// its loopback): one listener on the wildcard address answers for all of
// them, without an address or a link each.
func (n *Netns) AnyIP(p netip.Prefix) error {
	nl, err := n.Netlink()
	if err != nil {
		return err
	}
	lo, err := nl.LinkByName("lo")
	if err != nil {
		return err
	}
	dst := &net.IPNet{IP: net.IP(p.Masked().Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
	if err := nl.RouteAdd(&netlink.Route{LinkIndex: lo.Attrs().Index, Dst: dst,
		Type: unix.RTN_LOCAL, Table: unix.RT_TABLE_LOCAL, Scope: netlink.SCOPE_HOST}); err != nil {
		return fmt.Errorf("netns %s: local route %s: %w", n.Name, p, err)
	}
	return nil
}

// Exec runs a command in the namespace (`ip netns exec`) and returns its
// combined output.
func (n *Netns) Exec(args ...string) (string, error) {
	out, err := n.Command(context.Background(), args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("netns %s: %s: %w: %s", n.name(), strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// Command prepares a command to run in the namespace, for long-running
// processes (bird, haproxy) the caller starts and stops.
func (n *Netns) Command(ctx context.Context, args ...string) *exec.Cmd {
	if n == nil {
		return exec.CommandContext(ctx, args[0], args[1:]...)
	}
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.Name}, args...)...)
}

// Sysctl sets a sysctl of the namespace, e.g. Sysctl("net/ipv4/ip_forward", "1")
// for a namespace that routes between others.
func (n *Netns) Sysctl(key, value string) error {
	path := filepath.Join("/proc/sys", strings.ReplaceAll(key, ".", "/"))
	return n.Do(func() error {
		// /proc/sys/net shows the namespace of the thread that opens it.
		if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
			return fmt.Errorf("netns %s: sysctl %s=%s: %w", n.name(), key, value, err)
		}
		return nil
	})
}

func (n *Netns) name() string {
	if n == nil {
		return "root"
	}
	return n.Name
}

// Close deletes the veth links in the namespace (and so their peers in other
// namespaces) and the namespace. Processes still running in it keep it alive
// until they exit: stop them first.
func (n *Netns) Close() error {
	if n == nil {
		return nil
	}
	var errs []error
	n.once.Do(func() {
		n.closed.Store(true)
		if n.nl != nil {
			links, err := listLinks(n.nl)
			if err != nil {
				errs = append(errs, fmt.Errorf("netns %s: list links: %w", n.Name, err))
			}
			for _, l := range links {
				if _, ok := l.(*netlink.Veth); ok {
					if err := n.nl.LinkDel(l); err != nil && !isNotFound(err) {
						errs = append(errs, fmt.Errorf("netns %s: delete %s: %w", n.Name, l.Attrs().Name, err))
					}
				}
			}
			n.nl.Close()
		}
		if n.handle.IsOpen() {
			n.handle.Close()
		}
		if err := withNetnsDir(func() error { return netns.DeleteNamed(n.Name) }); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("delete netns %s: %w", n.Name, err))
		}
	})
	return errors.Join(errs...)
}

func listLinks(h *netlink.Handle) ([]netlink.Link, error) {
	for i := 0; ; i++ {
		links, err := h.LinkList()
		if errors.Is(err, netlink.ErrDumpInterrupted) && i < 5 {
			continue
		}
		return links, err
	}
}

func isNotFound(err error) bool {
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf) || errors.Is(err, os.ErrNotExist) || errors.Is(err, errNoDevice)
}

// sanitizeName keeps a name usable in paths and interface names.
func sanitizeName(s string, max int) string {
	var b strings.Builder
	for _, r := range s {
		if b.Len() >= max {
			break
		}
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		return "ns"
	}
	return b.String()
}

// Handle is the namespace's handle, for APIs that take one (route
// subscriptions, netlink.NewHandleAt). It is closed with the namespace.
func (n *Netns) Handle() netns.NsHandle { return n.handle }
