//go:build unix

package hostemu

import (
	"os"
	"syscall"
)

// signalGroup sends sig to the process group that p leads (sysProcAttr
// makes the handler a group leader), so that a wrapper script's children
// get it too.
func signalGroup(p *os.Process, sig syscall.Signal) error {
	if err := syscall.Kill(-p.Pid, sig); err != nil {
		return p.Signal(sig)
	}
	return nil
}
