package testenv

import (
	"os"
	"syscall"
)

const (
	terminate = syscall.SIGTERM
	kill      = syscall.SIGKILL
)

// sysProcAttr puts the server in its own process group, so that Stop can
// signal its children too, and has the kernel kill it when the test binary
// dies, even by SIGKILL or a panic.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// signalGroup sends sig to the process group that p leads.
func signalGroup(p *os.Process, sig syscall.Signal) error {
	return syscall.Kill(-p.Pid, sig)
}
