package testenv

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// ProcStat reads /proc/pid/stat and returns its fields from the state on
// (the third field in proc(5) is element 0): the command name before it
// may hold spaces.
func ProcStat(pid int) ([]string, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	j := strings.LastIndexByte(string(stat), ')')
	if j < 0 {
		return nil, fmt.Errorf("/proc/%d/stat: no command name in %q", pid, stat)
	}
	fields := strings.Fields(string(stat)[j+1:])
	if len(fields) < 13 {
		return nil, fmt.Errorf("/proc/%d/stat: too few fields in %q", pid, stat)
	}
	return fields, nil
}

// ProcCPU reads the CPU time, user and system, a process has used.
func ProcCPU(pid int) (time.Duration, error) {
	fields, err := ProcStat(pid)
	if err != nil {
		return 0, err
	}
	utime, err1 := strconv.Atoi(fields[11])
	stime, err2 := strconv.Atoi(fields[12])
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q, stime %q", pid, fields[11], fields[12])
	}
	// In USER_HZ, 100 on Linux.
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}
