package app

import (
	"errors"
	"testing"
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
