package testenv

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// process is a child (etcd, kube-apiserver) with its output in a log file.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed once the child has exited and been reaped
	waitErr error
}

func startProcess(name, bin string, args []string, dir string) (*process, error) {
	logPath := filepath.Join(dir, name+".log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s log: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Own process group: a ^C meant for the lab program reaches it, not the
		// children, so they stop in order through Stop.
		Setpgid: true,
		// If the test binary dies without cleaning up, the kernel kills the child.
		Pdeathsig: syscall.SIGKILL,
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	// Pdeathsig fires when the thread that forked the child ends, not the
	// process, and Go ends threads whose goroutine exits locked (as netns
	// code may do). So fork from a locked thread that lives until the child
	// has exited: nothing else runs on it, so nothing else can end it.
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	err = <-started
	logf.Close() // the child holds its own copy
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	_ = os.WriteFile(filepath.Join(dir, name+".pid"), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644)
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// exitError describes an early exit with the end of the log, which is where
// the reason is.
func (p *process) exitError() error {
	return fmt.Errorf("%s exited (%v); end of %s:\n%s", p.name, p.waitErr, p.logPath, tailFile(p.logPath, 20))
}

// stop asks the child to terminate, kills it after grace (at once if 0), and
// returns once it has been reaped.
func (p *process) stop(grace time.Duration) error {
	if p.exited() {
		return nil
	}
	if grace > 0 {
		if err := p.terminate(grace); err != nil || p.exited() {
			return err
		}
	}
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill %s: %w", p.name, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.name, p.pid())
	}
}

func (p *process) terminate(grace time.Duration) error {
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stop %s: %w", p.name, err)
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
	}
	return nil
}

// tailFile returns the last n lines of a file.
func tailFile(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	defer f.Close()
	const max = 64 << 10
	if st, err := f.Stat(); err == nil && st.Size() > max {
		_, _ = f.Seek(st.Size()-max, io.SeekStart)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	var sb strings.Builder
	for _, l := range lines {
		sb.WriteString("    ")
		sb.Write(l)
		sb.WriteByte('\n')
	}
	return sb.String()
}
