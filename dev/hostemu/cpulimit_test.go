package hostemu

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// cpuTime is a process's user and system time from /proc (USER_HZ ticks
// of 10 ms).
func cpuTime(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	require.NoError(t, err)
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	utime, err := strconv.ParseInt(f[11], 10, 64)
	require.NoError(t, err)
	stime, err := strconv.ParseInt(f[12], 10, 64)
	require.NoError(t, err)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// cpuGroupOrSkip creates a CPU group, or skips where the machine allows
// none (not root, no cpu controller).
func cpuGroupOrSkip(t *testing.T, name string, cores float64) *cpuGroup {
	t.Helper()
	g, err := newCPUGroup(name, cores)
	if err != nil {
		t.Skipf("no CPU limit on this machine: %v", err)
	}
	t.Cleanup(g.remove)
	return g
}

func TestCoresOf(t *testing.T) {
	require.InDelta(t, 0.25, CoresOf(512), 1e-9)
	require.InDelta(t, 1, CoresOf(2048), 1e-9)
	require.InDelta(t, 2, CoresOf(4096), 1e-9)
}

func TestCPUGroupLimits(t *testing.T) {
	// A busy process in a group of a quarter of a core gets no more than a
	// quarter of a core's time.
	g := cpuGroupOrSkip(t, fmt.Sprintf("hostemu-test-%d", os.Getpid()), 0.25)
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	require.NoError(t, g.add(cmd.Process.Pid))
	start, from := time.Now(), cpuTime(t, cmd.Process.Pid)
	time.Sleep(3 * time.Second)
	used, wall := cpuTime(t, cmd.Process.Pid)-from, time.Since(start)
	require.LessOrEqual(t, used.Seconds(), 0.25*wall.Seconds()*1.2, "used %s of CPU in %s", used, wall)
	require.Positive(t, used)
}

func TestFlexInstanceCPU(t *testing.T) {
	// With InstanceMemoryMB every instance's handler runs in a CPU group of
	// its own, removed when the instance stops.
	cpuGroupOrSkip(t, fmt.Sprintf("hostemu-test-%d", os.Getpid()), 0.25)
	r := runHost(t, timerApp(t, ""), map[string]string{"SCAN_SCHEDULE": "*/1 * * * * *"},
		Options{Flex: &FlexOptions{InstanceMemoryMB: 512}})
	require.Eventually(t, func() bool { return len(r.rec.of("scan")) >= 1 }, time.Minute, 20*time.Millisecond)
	in := r.h.groupInstances("scan")[0]
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", in.PID()))
	require.NoError(t, err)
	name := fmt.Sprintf("hostemu-%d-%d", os.Getpid(), in.Index())
	require.Contains(t, string(b), "/"+name+"\n", "the handler is in its instance's group")
	quota := ""
	for _, root := range cgroupRoots {
		if q, err := os.ReadFile(root + "/" + name + "/cpu.cfs_quota_us"); err == nil {
			quota = strings.TrimSpace(string(q))
		} else if q, err := os.ReadFile(root + "/" + name + "/cpu.max"); err == nil {
			quota, _, _ = strings.Cut(strings.TrimSpace(string(q)), " ")
		}
		if quota != "" {
			require.NoError(t, r.stop())
			_, err := os.Stat(root + "/" + name)
			require.ErrorIs(t, err, os.ErrNotExist, "the group goes with its instance")
			break
		}
	}
	require.Equal(t, "25000", quota, "a quarter of a 100 ms period")
}
