package haproxy

import (
	"context"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A hand-over restart: the daemon exits leaving HAProxy serving (HandOver),
// and the next daemon with the same runtime directory adopts that master
// instead of stopping it, so no connection and no request is lost while the
// daemon itself restarts.

const (
	// adoptedPoll is how often an adopted master (not our child, so no wait
	// status) is looked up in /proc.
	adoptedPoll = 50 * time.Millisecond
	// adoptedSilence is how long an adopted master may leave its socket
	// unanswered before it is considered hung. Reloads make it refuse for
	// a few milliseconds only.
	adoptedSilence = 15 * time.Second
)

// HandOver makes Run leave HAProxy running, with its pid file, when its
// context ends, for the next daemon to adopt. Without it Run stops HAProxy.
func (d *Driver) HandOver() { d.handOver.Store(true) }

// adopt returns the master a previous daemon handed over, if it is ours
// (pid file and command line) and healthy: it answers on the master socket
// as master and its worker answers on the stats socket. Anything else is
// left for stopStale.
func (d *Driver) adopt(ctx context.Context) *process {
	b, err := os.ReadFile(d.paths.pidFile)
	if err != nil {
		return nil
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || !d.isOurs(pid) || d.isOurs(parentPID(pid)) {
		return nil
	}
	var pl procList
	healthy := false
	// A master handed over in the middle of a reload refuses briefly.
	deadline := time.Now().Add(3 * time.Second)
	for !healthy && time.Now().Before(deadline) && ctx.Err() == nil {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		pl, err = d.master.ShowProc(pctx)
		if err == nil && pl.MasterPID == pid && len(pl.Workers) > 0 {
			w, werr := d.rt.WorkerPID(pctx)
			healthy = werr == nil && slices.Contains(pl.Workers, w)
		}
		cancel()
		if !healthy {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if !healthy {
		d.log.Warn("haproxy left by a previous run does not answer as a healthy master; replacing it", "pid", pid, "error", err)
		return nil
	}
	d.log.Info("adopting haproxy handed over by the previous run", "pid", pid, "workers", pl.Workers, "reloads", pl.Reloads)
	return &process{pid: pid, adopted: true, done: make(chan struct{}), quit: make(chan struct{}), out: &lineLogger{log: d.log}}
}

// adoptedMisses is how many polls in a row must find a foreign command line
// before the adopted master counts as gone.
const adoptedMisses = 5

// watchAdopted closes p.done when the adopted master is gone, since we
// cannot wait for a process that is not our child.
func (d *Driver) watchAdopted(p *process) {
	t := time.NewTicker(adoptedPoll)
	defer t.Stop()
	// A reloading master re-executes itself under the same pid, and for a
	// moment its /proc cmdline is empty or not yet ours: only a missing
	// process, a zombie, or a foreign command line seen several polls in a
	// row (the pid was reused) means it is gone.
	misses := 0
	for {
		select {
		case <-p.quit:
			return
		case <-t.C:
			switch st := processState(p.pid); {
			case st == 0 || st == 'Z':
				misses = adoptedMisses
			case d.isOurs(p.pid):
				misses = 0
			default:
				misses++
			}
			if misses >= adoptedMisses {
				p.waitErr = errors.New("adopted master exited")
				close(p.done)
				return
			}
		}
	}
}

// adoptedHealthy is called periodically while an adopted master runs: it
// reports false once the master socket has not answered for adoptedSilence.
func (d *Driver) adoptedHealthy(ctx context.Context, p *process) bool {
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := d.master.ShowProc(cctx); err == nil {
		p.lastAnswer = time.Now()
		return true
	}
	return time.Since(p.lastAnswer) < adoptedSilence
}
