package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTick is USER_HZ, the unit of utime and stime in /proc/<pid>/stat; it
// is 100 on every Linux architecture Go supports.
const clockTick = 10 * time.Millisecond

// procSample is what /proc says about one process at one instant.
type procSample struct {
	PID int
	// CPU is user plus system time since the process started.
	CPU time.Duration
	// HWM is the peak resident set size (VmHWM) and RSS the current one
	// (VmRSS), in bytes.
	HWM, RSS int64
}

// readProc samples /proc/<pid>/stat and /proc/<pid>/status.
func readProc(pid int) (procSample, error) {
	s := procSample{PID: pid}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, err
	}
	if s.CPU, err = parseStatCPU(stat); err != nil {
		return s, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	s.HWM, s.RSS = parseStatusMemory(status)
	return s, nil
}

// parseStatCPU returns utime+stime from the contents of /proc/<pid>/stat.
// The command name (field 2) may hold spaces and parentheses, so fields are
// counted from the last ')'.
func parseStatCPU(stat []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("no command name")
	}
	// After ") " come field 3 (state) onwards; utime is field 14, stime 15.
	fields := strings.Fields(string(stat[i+1:]))
	if len(fields) < 13 {
		return 0, fmt.Errorf("%d fields after the command name", len(fields))
	}
	utime, err := strconv.ParseInt(fields[11], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("utime: %w", err)
	}
	stime, err := strconv.ParseInt(fields[12], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stime: %w", err)
	}
	return time.Duration(utime+stime) * clockTick, nil
}

// parseStatusMemory returns VmHWM and VmRSS in bytes from the contents of
// /proc/<pid>/status (0 when absent).
func parseStatusMemory(status []byte) (hwm, rss int64) {
	for line := range strings.SplitSeq(string(status), "\n") {
		name, value, ok := strings.Cut(line, ":")
		if !ok || (name != "VmHWM" && name != "VmRSS") {
			continue
		}
		f := strings.Fields(value)
		if len(f) != 2 || f[1] != "kB" {
			continue
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			continue
		}
		if name == "VmHWM" {
			hwm = kb << 10
		} else {
			rss = kb << 10
		}
	}
	return hwm, rss
}

// nodeChildren returns the pids of this process's children running node,
// by what they serve: "cosmos" (dev/cosmosdb/server.js) or "azurite".
func nodeChildren() map[string][]int {
	out := map[string][]int{}
	self := os.Getpid()
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(d, "stat"))
		if err != nil || parentPID(stat) != self {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join(d, "cmdline"))
		args := strings.ReplaceAll(string(cmdline), "\x00", " ")
		switch {
		case strings.Contains(args, "cosmosdb/server.js"):
			out["cosmos"] = append(out["cosmos"], pid)
		case strings.Contains(args, "azurite"):
			out["azurite"] = append(out["azurite"], pid)
		}
	}
	return out
}

// parentPID returns field 4 of /proc/<pid>/stat, or -1.
func parentPID(stat []byte) int {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 2 {
		return -1
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return -1
	}
	return ppid
}

// cpuOf sums the CPU time of pids; processes that are gone count 0.
func cpuOf(pids []int) time.Duration {
	var total time.Duration
	for _, pid := range pids {
		if s, err := readProc(pid); err == nil {
			total += s.CPU
		}
	}
	return total
}
