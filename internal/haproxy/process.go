package haproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	minBackoff  = 100 * time.Millisecond
	maxBackoff  = 10 * time.Second
	stableAfter = 30 * time.Second
	// flushQuiet and flushMaxDelay bound how long haproxy.cfg lags behind
	// runtime changes (writeFiles): it is written once changes pause for
	// flushQuiet, and at the latest flushMaxDelay after the first one.
	flushQuiet    = time.Second
	flushMaxDelay = 10 * time.Second
	startTimeout  = 60 * time.Second
	hardStopWait  = 3 * time.Second
)

// process is one HAProxy master started by Run.
type process struct {
	cmd       *exec.Cmd
	pid       int
	loadedGen uint64
	done      chan struct{}
	waitErr   error
	out       *lineLogger
	// adopted: started by a previous daemon that handed it over; it is
	// not our child, so done is closed by watchAdopted, and quit ends
	// that watch.
	adopted    bool
	quit       chan struct{}
	lastAnswer time.Time
}

// masterArg is the -S argument. It names our runtime directory, so it also
// tells our HAProxy processes (master and workers share the command line)
// from any other on the host.
func (d *Driver) masterArg() string { return d.paths.masterSock + ",mode,600" }

// Run starts HAProxy as a foreground master-worker child and keeps it
// running until ctx is cancelled; then it stops it and every worker. ready
// (may be nil) is closed once HAProxy first answers on its sockets.
func (d *Driver) Run(ctx context.Context, ready chan<- struct{}) error {
	defer d.flushLocked()
	adopted := d.adopt(ctx)
	if adopted == nil {
		if err := d.stopStale(); err != nil {
			return err
		}
	}
	var once sync.Once
	everReady := false
	signalReady := func() {
		everReady = true
		if ready != nil {
			once.Do(func() { close(ready) })
		}
	}
	backoff := minBackoff
	for {
		started := time.Now()
		var p *process
		var err error
		if adopted != nil {
			p, adopted = adopted, nil
			go d.watchAdopted(p)
		} else if err = d.writeInitial(); err == nil {
			p, err = d.start()
		}
		if err != nil {
			d.log.Error("start haproxy", "error", err)
		} else {
			err = d.supervise(ctx, p, signalReady)
			if p.quit != nil {
				close(p.quit)
			}
			if ctx.Err() != nil {
				return nil
			}
			// A first start that fails (a port in use, a bad bind address)
			// will fail the same way again: say why and stop, rather than
			// retry forever with nothing serving.
			if !everReady {
				if alert := p.out.firstAlert(); alert != "" {
					return fmt.Errorf("haproxy did not start: %s", alert)
				}
				return fmt.Errorf("haproxy did not start: %w", err)
			}
			d.log.Error("haproxy stopped unexpectedly, restarting", "error", err, "backoff", backoff)
		}
		if time.Since(started) > stableAfter {
			backoff = minBackoff
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// flushLocked is flushConfig for a caller that does not hold mu.
func (d *Driver) flushLocked() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.flushConfig(); err != nil {
		d.log.Error("write haproxy.cfg or map files", "error", err)
	}
}

// writeInitial writes an empty configuration unless Apply already wrote one.
func (d *Driver) writeInitial() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cur != nil {
		return nil
	}
	st := emptyState()
	cfg, err := d.rend.config(st, d.cache)
	if err != nil {
		return err
	}
	if err := d.writeFiles(st, cfg, true, false); err != nil {
		return err
	}
	d.fromApply = false
	d.emptyGen = d.diskGen
	return nil
}

func (d *Driver) start() (*process, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.flushConfig(); err != nil {
		return nil, err
	}
	d.live = nil
	cmd := exec.Command(d.opts.Program, "-W", "-S", d.masterArg(), "-f", d.paths.config)
	cmd.Dir = d.opts.ConfigDir
	cmd.Env = haproxyEnv
	w := &lineLogger{log: d.log.With("source", "haproxy")}
	cmd.Stdout, cmd.Stderr = w, w
	// Own process group: a Ctrl-C on the daemon's terminal must not reach
	// HAProxy behind our back; Run decides how it stops.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Workers inherit the output pipe; do not wait for them forever.
	cmd.WaitDelay = 2 * time.Second
	if err := d.sandbox.start(cmd.Start); err != nil {
		return nil, fmt.Errorf("start %s: %w", d.opts.Program, err)
	}
	p := &process{cmd: cmd, pid: cmd.Process.Pid, loadedGen: d.diskGen, done: make(chan struct{}), out: w}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	// The pid file is ours, not HAProxy's (-p or "pidfile" would write the
	// same master pid, only later): the next run of the daemon reads it to
	// stop a master we left behind, and checks the pid's command line first
	// since pids are reused.
	if err := writeFileAtomic(d.paths.pidFile, []byte(strconv.Itoa(p.pid)+"\n"), 0o644); err != nil {
		d.log.Warn("write pid file", "error", err)
	}
	d.log.Info("haproxy started", "pid", p.pid, "config", d.paths.config)
	return p, nil
}

// supervise waits for p to become ready, then for it to exit or for ctx to
// be cancelled, in which case it stops p.
func (d *Driver) supervise(ctx context.Context, p *process, signalReady func()) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	tickC := tick.C
	deadline := time.Now().Add(startTimeout)
	flush := time.NewTimer(time.Hour)
	flush.Stop()
	defer flush.Stop()
	var firstPending time.Time
	var health <-chan time.Time
	if p.adopted {
		p.lastAnswer = time.Now()
		ht := time.NewTicker(time.Second)
		defer ht.Stop()
		health = ht.C
	}
	for {
		select {
		case <-ctx.Done():
			d.markStopped()
			if d.handOver.Load() && tickC == nil {
				d.log.Info("leaving haproxy running for the next daemon to adopt", "pid", p.pid)
				return ctx.Err()
			}
			d.stopProcess(p)
			return ctx.Err()
		case <-p.done:
			d.markStopped()
			d.killLeftovers()
			return fmt.Errorf("master %d exited: %v", p.pid, p.waitErr)
		case <-d.flushReq:
			now := time.Now()
			if firstPending.IsZero() {
				firstPending = now
			}
			flush.Reset(max(0, min(flushQuiet, flushMaxDelay-now.Sub(firstPending))))
		case <-flush.C:
			// Changes since the request move the flush on, as a
			// request for each of them would have.
			now := time.Now()
			due := time.Unix(0, d.lastStale.Load()).Add(flushQuiet)
			if latest := firstPending.Add(flushMaxDelay); latest.Before(due) {
				due = latest
			}
			if !firstPending.IsZero() && due.After(now) {
				flush.Reset(due.Sub(now))
				continue
			}
			firstPending = time.Time{}
			d.flushLocked()
		case <-health:
			if !d.adoptedHealthy(ctx, p) {
				d.markStopped()
				d.stopProcess(p)
				return fmt.Errorf("adopted master %d stopped answering on its socket", p.pid)
			}
		case <-tickC:
			if d.probeReady(ctx) {
				d.becomeReady(ctx, p)
				signalReady()
				tick.Stop()
				tickC = nil
				continue
			}
			if time.Now().After(deadline) {
				d.markStopped()
				d.stopProcess(p)
				return fmt.Errorf("master %d not ready after %s", p.pid, startTimeout)
			}
		}
	}
}

// probeReady: the master lists a worker, and that worker answers on the
// stats socket.
func (d *Driver) probeReady(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	pl, err := d.master.ShowProc(ctx)
	if err != nil || len(pl.Workers) == 0 {
		return false
	}
	pid, err := d.rt.WorkerPID(ctx)
	return err == nil && slices.Contains(pl.Workers, pid)
}

func (d *Driver) becomeReady(ctx context.Context, p *process) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.running.Store(true)
	d.adopted.Store(p.adopted)
	defer d.signalChanged()
	d.dirty = false
	d.loadedGen = p.loadedGen
	if p.adopted && !d.fromApply {
		// It runs what the previous daemon gave it: the first Apply
		// reloads it (hitlessly) with ours.
		d.dirty = true
		d.serving.Store(false)
		d.log.Info("haproxy adopted", "master", p.pid)
		return
	}
	if p.adopted || p.loadedGen != d.diskGen {
		// Apply wrote new files while HAProxy was starting with older ones.
		if err := d.reload(ctx); err != nil {
			d.dirty = true
			d.log.Error("reload to the files written during start", "error", err)
		}
	}
	d.serving.Store(d.fromApply && !d.dirty)
	d.log.Info("haproxy ready", "master", p.pid, "serving", d.serving.Load())
}

func (d *Driver) markStopped() {
	d.running.Store(false)
	d.serving.Store(false)
	d.signalChanged()
}

// Drain makes the serving worker wind down without closing a listening
// socket: HAProxy reloads the configuration it runs, a new worker takes the
// listeners over, and the old one finishes the requests in flight
// (answering "Connection: close"), closes its idle keep-alive connections
// and exits with its last connection. Keep-alive clients thus leave an edge
// that stops, instead of being cut when it does.
func (d *Driver) Drain(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.running.Load() {
		return errors.New("haproxy is not running")
	}
	return d.reload(ctx)
}

// stopProcess soft-stops the master (workers finish their connections),
// asking again while it runs, since a signal that reaches a 2.6 master while
// it re-executes can be lost; after StopTimeout it stops it hard, then kills
// whatever is left.
func (d *Driver) stopProcess(p *process) {
	start := time.Now()
	d.log.Info("stopping haproxy", "pid", p.pid)
	if d.waitSignalling(p, syscall.SIGUSR1, d.opts.StopTimeout) ||
		d.waitSignalling(p, syscall.SIGTERM, hardStopWait) {
		d.log.Info("haproxy stopped", "took", time.Since(start).Round(time.Millisecond))
	} else {
		d.log.Warn("haproxy did not stop, killing it", "pid", p.pid)
		_ = syscall.Kill(p.pid, syscall.SIGKILL)
		<-p.done
	}
	d.killLeftovers()
	if err := os.Remove(d.paths.pidFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		d.log.Warn("remove pid file", "error", err)
	}
}

// waitSignalling sends sig every second until p exits or limit passes.
func (d *Driver) waitSignalling(p *process, sig syscall.Signal, limit time.Duration) bool {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	resend := time.NewTicker(time.Second)
	defer resend.Stop()
	_ = syscall.Kill(p.pid, sig)
	for {
		select {
		case <-p.done:
			return true
		case <-deadline.C:
			return false
		case <-resend.C:
			_ = syscall.Kill(p.pid, sig)
		}
	}
}

// stopStale stops HAProxy processes of an earlier run of ours (found through
// the pid file and the command line naming our master socket).
func (d *Driver) stopStale() error {
	pids := d.ourProcesses()
	if b, err := os.ReadFile(d.paths.pidFile); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && d.isOurs(pid) && !slices.Contains(pids, pid) {
			pids = append(pids, pid)
		}
	}
	if len(pids) == 0 {
		_ = os.Remove(d.paths.pidFile)
		return nil
	}
	d.log.Warn("stopping haproxy left by a previous run", "pids", pids)
	// Masters (and orphaned workers) soft-stop; workers of a live master
	// are stopped by it.
	var roots []int
	for _, pid := range pids {
		if !slices.Contains(pids, parentPID(pid)) {
			roots = append(roots, pid)
		}
	}
	if !d.waitGone(roots, syscall.SIGUSR1, d.opts.StopTimeout) && !d.waitGone(roots, syscall.SIGTERM, hardStopWait) {
		for _, pid := range roots {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	d.killLeftovers()
	if left := d.ourProcesses(); len(left) > 0 {
		return fmt.Errorf("haproxy processes of a previous run do not stop: %v", left)
	}
	_ = os.Remove(d.paths.pidFile)
	return nil
}

// waitGone signals processes that are not our children every second until
// none of ours is left or limit passes.
func (d *Driver) waitGone(pids []int, sig syscall.Signal, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	lastSignal := time.Time{}
	for time.Now().Before(deadline) {
		if len(d.ourProcesses()) == 0 {
			return true
		}
		if time.Since(lastSignal) >= time.Second {
			for _, pid := range pids {
				_ = syscall.Kill(pid, sig)
			}
			lastSignal = time.Now()
		}
		time.Sleep(20 * time.Millisecond)
	}
	return len(d.ourProcesses()) == 0
}

// killLeftovers kills any of our HAProxy processes still alive, such as the
// workers of a master that was killed.
func (d *Driver) killLeftovers() {
	deadline := time.Now().Add(5 * time.Second)
	for {
		pids := d.ourProcesses()
		if len(pids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			d.log.Error("haproxy processes survive SIGKILL", "pids", pids)
			return
		}
		d.log.Warn("killing leftover haproxy processes", "pids", pids)
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ourProcesses lists live (not zombie) processes whose command line has
// "-S <our master socket>".
func (d *Driver) ourProcesses() []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if d.isOurs(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func (d *Driver) isOurs(pid int) bool {
	if pid <= 0 || processState(pid) == 'Z' {
		return false
	}
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return false
	}
	args := strings.Split(string(bytes.TrimRight(b, "\x00")), "\x00")
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "-S" && args[i+1] == d.masterArg() {
			return true
		}
	}
	return false
}

// processState is the state letter of /proc/<pid>/stat, 0 if unknown.
func processState(pid int) byte {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	// The command name may hold spaces and parentheses: state follows the
	// last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}

func parentPID(pid int) int {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// lineLogger turns HAProxy's output into log lines at the level HAProxy
// gave them.
type lineLogger struct {
	log *slog.Logger
	mu  sync.Mutex
	buf []byte
	// alert is HAProxy's first ALERT line, the reason a start failed.
	alert string
}

func (l *lineLogger) firstAlert() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.alert
}

func (l *lineLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		line := strings.TrimSpace(string(l.buf[:i]))
		l.buf = l.buf[i+1:]
		if line != "" {
			l.log.Log(context.Background(), haproxyLevel(line), line)
			if l.alert == "" && strings.HasPrefix(line, "[ALERT]") {
				l.alert = line
			}
		}
	}
	if len(l.buf) > 64<<10 {
		l.log.Info(string(l.buf))
		l.buf = l.buf[:0]
	}
	return len(p), nil
}

func haproxyLevel(line string) slog.Level {
	switch {
	case strings.HasPrefix(line, "[ALERT]"):
		return slog.LevelError
	case strings.Contains(line, " stopped (cumulated conns"), strings.Contains(line, "Stopping "):
		// One per proxy on every reload.
		return slog.LevelDebug
	case strings.HasPrefix(line, "[WARNING]"):
		return slog.LevelWarn
	default:
		return slog.LevelInfo
	}
}
