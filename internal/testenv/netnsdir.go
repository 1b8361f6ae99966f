package testenv

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// netnsDir is where named network namespaces live, for ip-netns(8) and for
// this package alike.
const netnsDir = "/run/netns"

// A named namespace is an nsfs bind mount on a file in /run/netns. If that
// directory is a plain directory when the first namespace is mounted on it,
// and someone runs `ip netns add` later, ip makes /run/netns a (recursive)
// bind mount of itself: the earlier mounts are then hidden under the new
// layer, where umount cannot reach them and unlink says "busy". So the test
// bed does what ip does, first: /run/netns becomes a shared bind mount of
// itself before any namespace is created, and every later mount lands in
// that one layer whoever makes it.

var netnsPrepared struct {
	sync.Mutex
	done bool
}

// withNetnsDir runs fn with /run/netns prepared and the cross-process netns
// lock held, so creating, deleting and sweeping namespaces never interleave
// between test binaries.
func withNetnsDir(fn func() error) error {
	dir, err := stateDir()
	if err != nil {
		return err
	}
	lock, err := lockFile(filepath.Join(dir, "netns.lock"))
	if err != nil {
		return err
	}
	defer lock.unlock()
	netnsPrepared.Lock()
	defer netnsPrepared.Unlock()
	if !netnsPrepared.done {
		if err := shareNetnsDir(); err != nil {
			return err
		}
		netnsPrepared.done = true
	}
	return fn()
}

// shareNetnsDir is iproute2's netns_add preamble: make /run/netns shared,
// and if it is not a mount point yet (EINVAL), bind it onto itself first.
func shareNetnsDir() error {
	if err := os.MkdirAll(netnsDir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", netnsDir, err)
	}
	for bound := false; ; bound = true {
		err := unix.Mount("", netnsDir, "none", unix.MS_SHARED|unix.MS_REC, "")
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EINVAL) || bound {
			return fmt.Errorf("make %s a shared mount: %w", netnsDir, err)
		}
		if err := unix.Mount(netnsDir, netnsDir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s onto itself: %w", netnsDir, err)
		}
	}
}

// mountEntry is one line of /proc/self/mountinfo.
type mountEntry struct {
	id, parent int
	point      string
	fstype     string
}

func readMountinfo() ([]mountEntry, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []mountEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if len(fields) < 5 || sep < 0 || sep+1 >= len(fields) {
			continue
		}
		id, err1 := strconv.Atoi(fields[0])
		parent, err2 := strconv.Atoi(fields[1])
		if err1 != nil || err2 != nil {
			continue
		}
		out = append(out, mountEntry{id: id, parent: parent, point: unescapeMount(fields[4]), fstype: fields[sep+1]})
	}
	return out, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space, ...).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// hiddenNetns returns the names of namespace mounts in /run/netns that sit
// under another mount of /run/netns, where no path reaches them.
func hiddenNetns() (map[string]bool, error) {
	mounts, err := readMountinfo()
	if err != nil {
		return nil, err
	}
	top := -1 // the last mount of /run/netns is the one paths resolve to
	for _, m := range mounts {
		if m.point == netnsDir {
			top = m.id
		}
	}
	hidden := map[string]bool{}
	for _, m := range mounts {
		if m.fstype != "nsfs" || filepath.Dir(m.point) != netnsDir {
			continue
		}
		if m.parent != top {
			hidden[filepath.Base(m.point)] = true
		}
	}
	return hidden, nil
}

// sweepNetns deletes the namespaces of test processes that are no longer
// running (dead reports that of a name's owner), also those hidden under a
// later mount of /run/netns. Reaching a hidden one means peeling every layer
// off /run/netns; the namespaces still in use are kept open meanwhile and
// mounted again under their names afterwards, so their users see no change.
func sweepNetns(dead func(name string) bool) error {
	return withNetnsDir(func() error {
		entries, err := os.ReadDir(netnsDir)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if dead(e.Name()) {
				_ = netns.DeleteNamed(e.Name())
			}
		}
		hidden, err := hiddenNetns()
		if err != nil {
			return err
		}
		stale := false
		for name := range hidden {
			if dead(name) {
				stale = true
			}
		}
		if !stale {
			return nil
		}
		return peelNetnsDir(dead)
	})
}

// peelNetnsDir unmounts every layer of /run/netns, deletes what the dead
// left, and rebuilds one shared layer holding the namespaces that are alive.
// Called with the netns lock held.
func peelNetnsDir(dead func(name string) bool) error {
	keep := map[string]int{}
	defer func() {
		for _, fd := range keep {
			unix.Close(fd)
		}
	}()
	entries, err := os.ReadDir(netnsDir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if dead(e.Name()) {
			continue
		}
		// An nsfs file opens as a namespace handle; that keeps the
		// namespace alive while no mount does.
		fd, err := unix.Open(filepath.Join(netnsDir, e.Name()), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		var st unix.Statfs_t
		if unix.Fstatfs(fd, &st) != nil || st.Type != unix.NSFS_MAGIC {
			unix.Close(fd)
			continue
		}
		keep[e.Name()] = fd
	}
	for i := 0; i < 16; i++ {
		if err := unix.Unmount(netnsDir, unix.MNT_DETACH); err != nil {
			if errors.Is(err, unix.EINVAL) {
				break // a plain directory now
			}
			return fmt.Errorf("unmount %s: %w", netnsDir, err)
		}
	}
	if entries, err = os.ReadDir(netnsDir); err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		p := filepath.Join(netnsDir, e.Name())
		_ = unix.Unmount(p, unix.MNT_DETACH)
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("sweep netns %s: %w", e.Name(), err))
		}
	}
	if err := shareNetnsDir(); err != nil {
		return errors.Join(append(errs, err)...)
	}
	for name, fd := range keep {
		p := filepath.Join(netnsDir, name)
		f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
		if err != nil {
			errs = append(errs, fmt.Errorf("restore netns %s: %w", name, err))
			continue
		}
		f.Close()
		if err := unix.Mount("/proc/self/fd/"+strconv.Itoa(fd), p, "none", unix.MS_BIND, ""); err != nil {
			errs = append(errs, fmt.Errorf("restore netns %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}
