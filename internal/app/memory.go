package app

import (
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
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
