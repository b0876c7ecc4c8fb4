//go:build !linux

package testenv

import (
	"os"
	"syscall"
)

const (
	terminate = syscall.SIGTERM
	kill      = syscall.SIGKILL
)

// sysProcAttr sets nothing outside Linux: there is no parent-death signal,
// so a killed test binary can leave a server behind.
func sysProcAttr() *syscall.SysProcAttr {
	return nil
}

// signalGroup signals only the process itself outside Linux.
func signalGroup(p *os.Process, sig syscall.Signal) error {
	return p.Signal(sig)
}
