package echo

import (
	"fmt"
	"time"
)

// Line is one line a pod wrote to its log, with when it wrote it.
type Line struct {
	Time time.Time
	Text string
}

// maxLogLines bounds a pod's log as the kubelet's log rotation bounds a
// container's: the oldest lines go first. A mirroring test that counts
// hundreds of requests still finds all of them.
const maxLogLines = 20000

// Logf appends a line to pod's log, as the pod's process would print it.
func (p *Pods) Logf(pod Pod, format string, args ...any) {
	line := Line{Time: time.Now(), Text: fmt.Sprintf(format, args...)}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.logs == nil {
		p.logs = map[Pod][]Line{}
	}
	l := append(p.logs[pod], line)
	if len(l) > maxLogLines {
		l = append(l[:0:0], l[len(l)-maxLogLines:]...)
	}
	p.logs[pod] = l
}

// Logs returns a copy of the log of the pod namespace/name, oldest line
// first; nil when it wrote nothing (or is gone).
func (p *Pods) Logs(namespace, name string) []Line {
	p.mu.RLock()
	defer p.mu.RUnlock()
	l := p.logs[Pod{Namespace: namespace, Name: name}]
	if len(l) == 0 {
		return nil
	}
	return append([]Line(nil), l...)
}
