package haproxy

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// HAProxy needs a file descriptor for every connection side and, whatever
// its state, for every server slot with a health check; it refuses to load
// a configuration whose total exceeds the hard RLIMIT_NOFILE it inherits
// ("Cannot raise FD limit"), and computes its own default maxconn without
// counting the checks. The driver therefore sets maxconn to what the limit
// leaves after the checked slots, and, when even the checks do not fit,
// serves without them rather than not at all.

// fdReserve is what HAProxy uses beyond connections and checks: listeners,
// sockets, pollers, pipes, logs (about 230 measured with a few listeners),
// with room for more binds.
const fdReserve = 1000

// minMaxconn is the fewest connections worth serving with: below it the
// health checks give way.
const minMaxconn = 1000

// maxAutoMaxconn caps the maxconn the driver derives from a large limit:
// HAProxy sizes its descriptor tables from it at start.
const maxAutoMaxconn = 200_000

// RaiseFDLimit raises the process's RLIMIT_NOFILE, inherited by HAProxy, as
// far as it is allowed: the hard limit to fs.nr_open when privileged, the
// soft limit to the hard one otherwise. It returns the limit HAProxy will
// have.
func RaiseFDLimit() (int, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("RLIMIT_NOFILE: %w", err)
	}
	if b, err := os.ReadFile("/proc/sys/fs/nr_open"); err == nil {
		if n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && n > lim.Max {
			// Only with CAP_SYS_RESOURCE; EPERM otherwise, then the soft limit.
			if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: n, Max: n}) == nil {
				return int(n), nil
			}
		}
	}
	if lim.Cur < lim.Max {
		// syscall.Setrlimit, unlike the runtime's own raise, is inherited
		// by the HAProxy the daemon starts.
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: lim.Max, Max: lim.Max}); err != nil {
			return int(lim.Cur), fmt.Errorf("raise RLIMIT_NOFILE to %d: %w", lim.Max, err)
		}
	}
	return int(min(lim.Max, 1<<31-1)), nil
}

// FDCapacity says what a limit allows: the connections left with no
// checked server slots, and the checked slots that fit next to
// minMaxconn connections.
func FDCapacity(limit int) (maxconn, checkedSlots int) {
	return min(maxAutoMaxconn, max(0, (limit-fdReserve)/2)), max(0, limit-fdReserve-2*minMaxconn)
}

// fdBudget fits st to the descriptor limit: the checked slots first, then
// maxconn (the model's, lowered if it does not fit, or derived). It
// returns a message when it had to lower maxconn or turn checks off.
func fdBudget(st *state, limit int) (note string) {
	if limit <= 0 {
		return ""
	}
	checked := checkedSlots(st)
	room := limit - fdReserve - checked
	if room < 2*minMaxconn && checked > 0 {
		for name, b := range st.backends {
			// A copy: the entry may be shared with the running state.
			nb := *b
			nb.spec.Check = false
			st.backends[name] = &nb
		}
		st.rewritten, st.checkedOK = true, false
		note = fmt.Sprintf("%d health-checked server slots do not fit in the file descriptor limit of %d next to %d connections: health checks are off until the limit is raised (LimitNOFILE) or there are fewer endpoints", checked, limit, minMaxconn)
		room = limit - fdReserve
	}
	// Rounded down to a coarse step: slots change only with a reload,
	// and most such reloads then leave the global section as it was.
	fit := max(1, room/2/500*500)
	switch {
	case st.global.Maxconn == 0:
		st.global.Maxconn = min(fit, maxAutoMaxconn)
	case st.global.Maxconn > fit:
		if note == "" {
			note = fmt.Sprintf("maxconn %d does not fit in the file descriptor limit of %d with %d health-checked server slots: using %d", st.global.Maxconn, limit, checked, fit)
		}
		st.global.Maxconn = fit
	}
	return note
}

// checkedSlots counts the health-checked slots of st, and keeps the count
// in st: made from a state that kept its count by changing some backends,
// st needs only those looked at, not every backend.
func checkedSlots(st *state) int {
	n := 0
	if base := st.base; base != nil && base.checkedOK && !base.rewritten {
		if names, ok := st.changedSince(base); ok {
			n = base.checked
			for _, name := range names {
				n += checkedOf(st.backends[name]) - checkedOf(base.backends[name])
			}
			st.checked, st.checkedOK = n, true
			return n
		}
	}
	for _, b := range st.backends {
		n += checkedOf(b)
	}
	st.checked, st.checkedOK = n, true
	return n
}

func checkedOf(b *backend) int {
	if b == nil || !b.spec.Check {
		return 0
	}
	return b.spec.Slots
}

// fitFDs applies fdBudget to target and logs when what it had to give up
// changes: once, not at every Apply.
func (d *Driver) fitFDs(target *state) {
	note := fdBudget(target, d.opts.FDLimit)
	if note == d.fdNote {
		return
	}
	if note != "" {
		d.log.Error("file descriptor budget", "limit", d.opts.FDLimit, "detail", note)
	} else {
		d.log.Info("file descriptor budget fits again", "limit", d.opts.FDLimit, "maxconn", target.global.Maxconn)
	}
	d.fdNote = note
}
