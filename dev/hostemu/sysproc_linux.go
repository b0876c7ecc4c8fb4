//go:build linux

package hostemu

import "syscall"

// sysProcAttr puts the handler in its own process group and kills it when
// the emulator dies, so that no handler outlives a crashed test.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
