package app

import (
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// gcPercent is the daemon's GOGC when the environment sets none. Most of
// the daemon's heap is long-lived (informer caches, the desired state, the
// rendered configuration: about 160 MB at 10,000 Ingresses), and Go's
// default of 100 lets the heap grow to twice that before collecting, which
// at that scale made the daemon's RSS 350-400 MiB for 160 MB of live data.
// At 50 the heap grows to one and a half times what is live; the price is
// about one more collection per full model Build, while the passes of a
// running daemon (an endpoint, a host) allocate little.
const gcPercent = 50

// tuneMemory sets the garbage collector's target, and a soft memory limit
// of 90% of the cgroup's memory limit so that the collector works harder
// before the kernel kills the daemon, unless GOGC or GOMEMLIMIT say
// otherwise.
func tuneMemory(log *slog.Logger) {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	limit := int64(-1)
	if os.Getenv("GOMEMLIMIT") == "" {
		if n, ok := cgroupMemoryLimit(os.ReadFile); ok {
			limit = n / 10 * 9
			debug.SetMemoryLimit(limit)
		}
	}
	log.Info("memory", "gogc", gcPercentNow(), "soft_limit_bytes", limit)
}

func gcPercentNow() int {
	p := debug.SetGCPercent(-1)
	debug.SetGCPercent(p)
	return p
}

// cgroupMemoryLimit reads the memory limit of the daemon's cgroup (v2
// memory.max, or v1 memory.limit_in_bytes); ok is false when there is
// none, or it is so large it means none.
func cgroupMemoryLimit(read func(string) ([]byte, error)) (int64, bool) {
	self, err := read("/proc/self/cgroup")
	if err != nil {
		return 0, false
	}
	var files []string
	for line := range strings.Lines(string(self)) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			files = append(files, filepath.Join("/sys/fs/cgroup", parts[2], "memory.max"))
		case strings.Contains(","+parts[1]+",", ",memory,"):
			files = append(files, filepath.Join("/sys/fs/cgroup/memory", parts[2], "memory.limit_in_bytes"),
				"/sys/fs/cgroup/memory/memory.limit_in_bytes")
		}
	}
	for _, f := range files {
		b, err := read(f)
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(b))
		if s == "max" {
			continue
		}
		// cgroup v1 says "no limit" with a page-rounded maximum int64.
		if n, err := strconv.ParseInt(s, 10, 64); err == nil && n > 0 && n < 1<<60 {
			return n, true
		}
	}
	return 0, false
}

// After a pass that made much garbage (a full Build, a reload: at 10,000
// Ingresses tens of megabytes each), the heap keeps the pages that garbage
// took until the collector's goal, half as much again as what is live, is
// reached, and Go's scavenger gives back only what lies beyond that goal.
// An idle daemon, the common case, would hold them for nothing: once
// passes pause for releaseQuiet after such a pass, the free pages go back
// to the system, or releaseMaxDelay after the heavy pass when changes
// never pause. That is one more collection, at most every releaseMinGap,
// against passes that cost many collections themselves.
const (
	releaseQuiet    = 2 * time.Second
	releaseMinGap   = 10 * time.Second
	releaseMaxDelay = 30 * time.Second
)

// releaser decides when to return free heap pages to the system. It is
// used by the loop's goroutine only.
type releaser struct {
	release func() // debug.FreeOSMemory
	now     func() time.Time
	// pending: a heavy pass ran since the last release, the first of
	// them at since.
	pending bool
	since   time.Time
	last    time.Time
}

func newReleaser() *releaser {
	return &releaser{release: debug.FreeOSMemory, now: time.Now}
}

// passed records a pass, heavy or not, and returns how long to wait for
// quiet before calling due (0: nothing to wait for).
func (r *releaser) passed(heavy bool) time.Duration {
	now := r.now()
	if heavy && !r.pending {
		r.pending, r.since = true, now
	}
	if !r.pending {
		return 0
	}
	wait := max(releaseQuiet, releaseMinGap-now.Sub(r.last))
	return max(min(wait, releaseMaxDelay-now.Sub(r.since)), time.Millisecond)
}

// due is called once the wait passed returned has gone by without
// another pass: it releases the pages, in the background so that a
// change arriving meanwhile is not held up, and reports whether it did.
func (r *releaser) due(done func()) bool {
	if !r.pending {
		return false
	}
	r.pending = false
	r.last = r.now()
	go func() {
		r.release()
		if done != nil {
			done()
		}
	}()
	return true
}
