package haproxy

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// masterAPI is the master CLI (-S socket). client-native's master mode does
// not work with 2.6 (it sends "set severity-output", unknown there) and its
// Reload needs 2.7, hence these few lines of our own.
type masterAPI interface {
	// Reload asks the master to reload; 2.6 answers nothing, so the result
	// is read from ShowProc.
	Reload(ctx context.Context) error
	ShowProc(ctx context.Context) (procList, error)
}

// procList is the parsed `show proc`.
type procList struct {
	MasterPID int
	// Reloads counts the master's reloads; Failed the failed ones.
	Reloads, Failed int
	// Workers are the current workers, OldWorkers those still finishing
	// their connections after a reload.
	Workers, OldWorkers []int
}

type masterSocket struct{ path string }

func (m *masterSocket) Reload(ctx context.Context) error {
	out, err := unixRoundTrip(ctx, m.path, "reload")
	if err != nil {
		return fmt.Errorf("master cli reload: %w", err)
	}
	// 2.6 is silent; 2.7+ answers "Success=1" or "Success=0".
	if strings.Contains(out, "Success=0") {
		return fmt.Errorf("master cli reload: %s", strings.TrimSpace(out))
	}
	return nil
}

func (m *masterSocket) ShowProc(ctx context.Context) (procList, error) {
	out, err := unixRoundTrip(ctx, m.path, "show proc")
	if err != nil {
		return procList{}, fmt.Errorf("master cli show proc: %w", err)
	}
	return parseShowProc(out)
}

var failedRE = regexp.MustCompile(`\[failed:\s*(\d+)\]`)

// parseShowProc reads the 2.6 format:
//
//	#<PID>  <type>  <reloads>  <uptime>  <version>
//	1234    master  1 [failed: 0]  0d00h00m09s  2.6.12
//	# workers
//	1240    worker  0  0d00h00m01s  2.6.12
//	# old workers
//	1236    worker  1  0d00h00m09s  2.6.12
//	# programs
func parseShowProc(out string) (procList, error) {
	var pl procList
	section := "master"
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		switch {
		case l == "":
			continue
		case l == "# workers":
			section = "workers"
			continue
		case l == "# old workers":
			section = "old"
			continue
		case strings.HasPrefix(l, "#"):
			if !strings.HasPrefix(l, "#<PID>") {
				section = "other"
			}
			continue
		}
		f := strings.Fields(l)
		if len(f) < 3 {
			continue
		}
		pid, err := strconv.Atoi(f[0])
		if err != nil {
			continue
		}
		switch {
		case f[1] == "master":
			pl.MasterPID = pid
			pl.Reloads, _ = strconv.Atoi(f[2])
			if m := failedRE.FindStringSubmatch(l); m != nil {
				pl.Failed, _ = strconv.Atoi(m[1])
			}
		case f[1] == "worker" && section == "workers":
			pl.Workers = append(pl.Workers, pid)
		case f[1] == "worker" && section == "old":
			pl.OldWorkers = append(pl.OldWorkers, pid)
		}
	}
	if pl.MasterPID == 0 {
		return pl, fmt.Errorf("master cli show proc: no master line in %.200q", out)
	}
	return pl, nil
}
