package testenv

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// ProcStatField reads field i of /proc/pid/stat, counting the state (the
// third field in proc(5)) as 0: the command name before it may hold
// spaces.
func ProcStatField(pid, i int) (int, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	j := strings.LastIndexByte(string(stat), ')')
	if j < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name in %q", pid, stat)
	}
	fields := strings.Fields(string(stat)[j+1:])
	if len(fields) <= i {
		return 0, fmt.Errorf("/proc/%d/stat: no field %d in %q", pid, i, stat)
	}
	return strconv.Atoi(fields[i])
}

// ProcCPU reads the CPU time, user and system, a process has used.
func ProcCPU(pid int) (time.Duration, error) {
	utime, err := ProcStatField(pid, 11)
	if err != nil {
		return 0, err
	}
	stime, err := ProcStatField(pid, 12)
	if err != nil {
		return 0, err
	}
	// In USER_HZ, 100 on Linux.
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}
