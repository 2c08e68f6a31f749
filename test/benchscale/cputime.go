package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// clockTicks is Linux's USER_HZ, the unit of /proc/PID/stat's CPU times
// (100 on every architecture Linux runs the cluster on).
const clockTicks = 100

// cpuTimes reads the CPU seconds (user and system) each process has used
// so far; a process it cannot read is left out.
func cpuTimes(pids map[string]int) map[string]float64 {
	out := make(map[string]float64, len(pids))
	for name, pid := range pids {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		if s, ok := parseStat(string(data)); ok {
			out[name] = s
		}
	}
	return out
}

// parseStat returns utime+stime of a /proc/PID/stat line in seconds. The
// command name (field 2) is in parentheses and may hold spaces, so fields
// are counted after its last ')': utime and stime are fields 14 and 15.
func parseStat(line string) (float64, bool) {
	i := strings.LastIndexByte(line, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(line[i+1:])
	// f[0] is field 3 (state): field n is f[n-3].
	if len(f) < 13 {
		return 0, false
	}
	utime, err1 := strconv.ParseUint(f[11], 10, 64)
	stime, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return float64(utime+stime) / clockTicks, true
}

// cpuSince is the CPU seconds each process used since before.
func cpuSince(before, after map[string]float64) map[string]float64 {
	out := make(map[string]float64, len(after))
	for name, a := range after {
		if b, ok := before[name]; ok && a >= b {
			out[name] = a - b
		}
	}
	return out
}
