package testenv

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The leak guard is `unreachable 198.18.0.0/15` in the root namespace while
// any test binary needs it: a pod or link route that is missing then fails at
// once ("no route to host") instead of sending test traffic to the default
// gateway. Specific routes (static or learned over BGP) still win. Test
// binaries running at the same time share it through a flock-protected file
// of owner processes; the last one out removes the route. Owners that died
// are dropped, so a killed test binary does not pin the route forever.

var guard struct {
	mu    sync.Mutex
	users int // in this process
}

// GuardRoutes holds the leak guard for the duration of the test. StartPod
// takes it too.
func GuardRoutes(tb testing.TB) {
	tb.Helper()
	RequireRoot(tb)
	release, err := AcquireGuard()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := release(); err != nil {
			tb.Error(err)
		}
	})
}

// AcquireGuard installs the leak guard unless present and counts this process
// as a user until release is called (once per acquisition).
func AcquireGuard() (release func() error, err error) {
	guard.mu.Lock()
	defer guard.mu.Unlock()
	if guard.users == 0 {
		if err := updateOwners(true); err != nil {
			return nil, err
		}
	}
	guard.users++
	var once sync.Once
	return func() error {
		var err error
		once.Do(func() { err = releaseGuard() })
		return err
	}, nil
}

func releaseGuard() error {
	guard.mu.Lock()
	defer guard.mu.Unlock()
	guard.users--
	if guard.users > 0 {
		return nil
	}
	return updateOwners(false)
}

// GuardRange is what the leak guard makes unreachable: pods, links and ClusterIPs.
const GuardRange = "198.18.0.0/15"

// GuardRange6 is the IPv6 leak guard: the documentation range, from which
// the tests take their IPv6 pods and links.
const GuardRange6 = "2001:db8::/32"

func guardRoute6() *netlink.Route {
	return &netlink.Route{Dst: prefixNet(netip.MustParsePrefix(GuardRange6)), Type: unix.RTN_UNREACHABLE, Table: unix.RT_TABLE_MAIN}
}

func guardRoute() *netlink.Route {
	return &netlink.Route{Dst: prefixNet(podSpace), Type: unix.RTN_UNREACHABLE, Table: unix.RT_TABLE_MAIN}
}

// updateOwners adds or removes this process in the owner file and makes the
// route match: present while there is an owner.
func updateOwners(add bool) error {
	dir, err := stateDir()
	if err != nil {
		return err
	}
	lock, err := lockFile(filepath.Join(dir, "guard.lock"))
	if err != nil {
		return err
	}
	defer lock.unlock()
	path := filepath.Join(dir, "guard.owners")
	self := processID(os.Getpid())
	var owners []string
	if b, err := os.ReadFile(path); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if line = strings.TrimSpace(line); line == "" || line == self {
				continue
			}
			if pid, _, ok := strings.Cut(line, " "); ok {
				if n, err := strconv.Atoi(pid); err == nil && processID(n) == line {
					owners = append(owners, line) // alive and the same process
				}
			}
		}
	}
	if add {
		sweepStale()
		owners = append(owners, self)
	}
	h, err := rootNetlink()
	if err != nil {
		return err
	}
	if len(owners) > 0 {
		err = errors.Join(ensureGuardRoute(h, guardRoute()), ensureGuardRoute(h, guardRoute6()))
	} else {
		for _, r := range []*netlink.Route{guardRoute(), guardRoute6()} {
			derr := h.RouteDel(r)
			if errors.Is(derr, unix.ESRCH) || errors.Is(derr, unix.EAFNOSUPPORT) {
				derr = nil
			}
			if derr != nil {
				err = errors.Join(err, fmt.Errorf("remove leak guard route %s: %w", r.Dst, derr))
			}
		}
	}
	content := ""
	if len(owners) > 0 {
		content = strings.Join(owners, "\n") + "\n"
	}
	if werr := os.WriteFile(path, []byte(content), 0o644); werr != nil {
		err = errors.Join(err, fmt.Errorf("leak guard owners: %w", werr))
	}
	return err
}

func ensureGuardRoute(h *netlink.Handle, r *netlink.Route) error {
	routes, err := h.RouteListFiltered(netlink.FAMILY_ALL, r, netlink.RT_FILTER_DST|netlink.RT_FILTER_TABLE)
	if errors.Is(err, unix.EAFNOSUPPORT) && r.Dst.IP.To4() == nil {
		return nil // no IPv6 on this host: nothing can leak there
	}
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return fmt.Errorf("list routes: %w", err)
	}
	for _, x := range routes {
		if x.Type == unix.RTN_UNREACHABLE {
			return nil
		}
	}
	if err := h.RouteAdd(r); err != nil && !errors.Is(err, unix.EEXIST) {
		if errors.Is(err, unix.EAFNOSUPPORT) && r.Dst.IP.To4() == nil {
			return nil
		}
		return fmt.Errorf("add leak guard route unreachable %s: %w", r.Dst, err)
	}
	return nil
}

// GuardActive6 reports whether the IPv6 leak guard route is in the root
// namespace.
func GuardActive6() (bool, error) { return guardActive(netlink.FAMILY_V6, guardRoute6()) }

// GuardActive reports whether the leak guard route is in the root namespace.
func GuardActive() (bool, error) { return guardActive(netlink.FAMILY_V4, guardRoute()) }

func guardActive(family int, guard *netlink.Route) (bool, error) {
	h, err := rootNetlink()
	if err != nil {
		return false, err
	}
	routes, err := h.RouteListFiltered(family, guard, netlink.RT_FILTER_DST|netlink.RT_FILTER_TABLE)
	if err != nil {
		return false, err
	}
	for _, r := range routes {
		if r.Type == unix.RTN_UNREACHABLE {
			return true, nil
		}
	}
	return false, nil
}

// processID is "pid starttime" for a live process, "" otherwise; the start
// time tells a reused pid from the process that wrote the entry.
func processID(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(s[i+1:])
	// after the command: state is field 3, starttime field 22
	if len(f) < 20 {
		return ""
	}
	return strconv.Itoa(pid) + " " + f[19]
}

// sweepStale deletes network namespaces and root links that test binaries
// which are no longer running left behind (a binary killed by a timeout
// cannot clean up): they would hold 198.18/198.19 addresses and routes.
// Called with the guard lock held.
func sweepStale() {
	dead := func(pid string) bool {
		n, err := strconv.Atoi(pid)
		return err == nil && n != os.Getpid() && processID(n) == ""
	}
	_ = sweepNetns(func(name string) bool {
		rest, ok := strings.CutPrefix(name, "pm-")
		if !ok {
			return false
		}
		pid, _, ok := strings.Cut(rest, "-")
		return ok && dead(pid)
	})
	h, err := rootNetlink()
	if err != nil {
		return
	}
	links, err := listLinks(h)
	if err != nil {
		return
	}
	for _, l := range links {
		owner, ok := strings.CutPrefix(l.Attrs().Alias, linkAliasPrefix)
		if !ok {
			continue
		}
		if pid, _, ok := strings.Cut(owner, " "); ok {
			if n, err := strconv.Atoi(pid); err == nil && n != os.Getpid() && processID(n) != owner {
				_ = h.LinkDel(l)
			}
		}
	}
}

// linkAliasPrefix marks the links this package creates; the alias goes on
// with the owner's processID, which tells the sweep whose they are.
const linkAliasPrefix = "perimeter-testenv "

var linkAlias = linkAliasPrefix + processID(os.Getpid())
