package app

import (
	"errors"
	"testing"
	"time"
)

func TestCgroupMemoryLimit(t *testing.T) {
	for name, tc := range map[string]struct {
		files map[string]string
		want  int64
		ok    bool
	}{
		"v2 limit": {map[string]string{"/proc/self/cgroup": "0::/system.slice/perimeter.service\n",
			"/sys/fs/cgroup/system.slice/perimeter.service/memory.max": "536870912\n"}, 536870912, true},
		"v2 max": {map[string]string{"/proc/self/cgroup": "0::/\n", "/sys/fs/cgroup/memory.max": "max\n"}, 0, false},
		"v1 limit": {map[string]string{"/proc/self/cgroup": "4:memory:/process_api/x\n1:cpu:/\n0::/\n",
			"/sys/fs/cgroup/memory/process_api/x/memory.limit_in_bytes": "1073741824\n"}, 1073741824, true},
		"v1 unlimited": {map[string]string{"/proc/self/cgroup": "4:memory:/\n",
			"/sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n"}, 0, false},
		"no cgroup file": {map[string]string{}, 0, false},
	} {
		read := func(p string) ([]byte, error) {
			if s, ok := tc.files[p]; ok {
				return []byte(s), nil
			}
			return nil, errors.New("not found")
		}
		if got, ok := cgroupMemoryLimit(read); got != tc.want || ok != tc.ok {
			t.Errorf("%s: %d %v, want %d %v", name, got, ok, tc.want, tc.ok)
		}
	}
}

// TestReleaser: free pages go back once passes pause after a heavy one,
// not after light passes alone, not more often than releaseMinGap, and
// not later than releaseMaxDelay while changes never pause.
func TestReleaser(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	released := make(chan struct{}, 10)
	r := &releaser{release: func() { released <- struct{}{} }, now: func() time.Time { return now }}
	if w := r.passed(false); w != 0 || r.due(nil) {
		t.Fatalf("a light pass: wait %v, or released", w)
	}
	if w := r.passed(true); w != releaseQuiet {
		t.Fatalf("a heavy pass: wait %v, want %v", w, releaseQuiet)
	}
	now = now.Add(releaseQuiet)
	if !r.due(nil) {
		t.Fatal("not released after the quiet time")
	}
	<-released
	if r.due(nil) {
		t.Fatal("released twice for one heavy pass")
	}
	now = now.Add(3 * time.Second)
	if w := r.passed(true); w != releaseMinGap-3*time.Second {
		t.Fatalf("a heavy pass 3 s after a release: wait %v, want %v", w, releaseMinGap-3*time.Second)
	}
	// Changes every second for longer than releaseMaxDelay.
	var w time.Duration
	for range int(releaseMaxDelay/time.Second) - 1 {
		now = now.Add(time.Second)
		w = r.passed(false)
	}
	if w != time.Second {
		t.Fatalf("a pass %v before the longest delay: wait %v, want 1s", time.Second, w)
	}
	now = now.Add(time.Second)
	if w := r.passed(false); w != time.Millisecond {
		t.Fatalf("a pass at the longest delay: wait %v, want 1ms", w)
	}
	done := make(chan struct{})
	if !r.due(func() { close(done) }) {
		t.Fatal("not released at the longest delay")
	}
	<-released
	<-done
}
