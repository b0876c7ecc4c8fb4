//go:build unix && !linux

package hostemu

import "syscall"

// sysProcAttr puts the handler in its own process group.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
