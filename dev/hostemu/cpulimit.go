package hostemu

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// cpuPeriodMicros is the CFS period the CPU limit is expressed in.
const cpuPeriodMicros = 100_000

// CoresOf is the CPU a Flex Consumption instance of memoryMB gets: 512 MB
// a quarter of a core, 2,048 MB one core, 4,096 MB two (Microsoft's Flex
// Consumption plan documentation, "Instance memory").
func CoresOf(memoryMB int) float64 { return float64(memoryMB) / 2048 }

// cpuGroup is a control group that holds an instance's handler processes
// to a share of the CPU: the cgroup v1 cpu controller's cfs_quota_us, or
// cgroup v2's cpu.max.
type cpuGroup struct {
	dir string
}

// cgroupRoots are where the cpu controller is mounted: v1, then v2.
var cgroupRoots = []string{"/sys/fs/cgroup/cpu", "/sys/fs/cgroup"}

// newCPUGroup creates the group name allowed cores of CPU time.
func newCPUGroup(name string, cores float64) (*cpuGroup, error) {
	quota := int(cores * cpuPeriodMicros)
	if quota < 1000 {
		return nil, fmt.Errorf("hostemu: a CPU limit of %g cores is below the kernel's least quota", cores)
	}
	var errs []error
	for _, root := range cgroupRoots {
		if _, err := os.Stat(filepath.Join(root, "cpu.cfs_quota_us")); err == nil {
			g := &cpuGroup{dir: filepath.Join(root, name)}
			if err := g.setup(map[string]string{"cpu.cfs_period_us": strconv.Itoa(cpuPeriodMicros), "cpu.cfs_quota_us": strconv.Itoa(quota)}); err != nil {
				errs = append(errs, err)
				continue
			}
			return g, nil
		}
		if b, err := os.ReadFile(filepath.Join(root, "cgroup.controllers")); err == nil && strings.Contains(" "+string(b)+" ", " cpu ") {
			// The parent must hand the cpu controller down.
			_ = os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte("+cpu"), 0o644)
			g := &cpuGroup{dir: filepath.Join(root, name)}
			if err := g.setup(map[string]string{"cpu.max": fmt.Sprintf("%d %d", quota, cpuPeriodMicros)}); err != nil {
				errs = append(errs, err)
				continue
			}
			return g, nil
		}
	}
	if len(errs) == 0 {
		errs = append(errs, errors.New("no cgroup cpu controller mounted"))
	}
	return nil, fmt.Errorf("hostemu: limiting an instance's CPU: %w", errors.Join(errs...))
}

// setup creates the group and writes its settings.
func (g *cpuGroup) setup(files map[string]string) error {
	if err := os.Mkdir(g.dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	for name, v := range files {
		if err := os.WriteFile(filepath.Join(g.dir, name), []byte(v), 0o644); err != nil {
			g.remove()
			return err
		}
	}
	return nil
}

// add moves process pid (and the children it starts later) into the group.
func (g *cpuGroup) add(pid int) error {
	if err := os.WriteFile(filepath.Join(g.dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		return fmt.Errorf("hostemu: limiting the handler's CPU: %w", err)
	}
	return nil
}

// HoldToCores holds process pid, started outside the emulator, to the CPU
// of a Flex instance of memoryMB, as the emulator holds an instance's
// handler. release removes the hold once the process has ended.
func HoldToCores(pid, memoryMB int) (release func(), err error) {
	g, err := newCPUGroup(fmt.Sprintf("hostemu-%d-pid-%d", os.Getpid(), pid), CoresOf(memoryMB))
	if err != nil {
		return nil, err
	}
	if err := g.add(pid); err != nil {
		g.remove()
		return nil, err
	}
	return g.remove, nil
}

// remove deletes the group; its processes must have ended.
func (g *cpuGroup) remove() { _ = os.Remove(g.dir) }
