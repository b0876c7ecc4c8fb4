//go:build unix

package hostemu

import (
	"errors"
	"syscall"
)

// Freeze stops the instance's handler with SIGSTOP (its process group), as
// a VM paused by its hypervisor or a process starved of CPU for a long
// time would be: it answers nothing and its timers do not fire until Thaw.
// The host's side goes on: invocations wait, and one that runs out of
// functionTimeout kills the handler as usual.
func (in *Instance) Freeze() error { return in.signalCurrent(syscall.SIGSTOP) }

// Thaw resumes a handler stopped by Freeze (SIGCONT).
func (in *Instance) Thaw() error { return in.signalCurrent(syscall.SIGCONT) }

func (in *Instance) signalCurrent(sig syscall.Signal) error {
	in.mu.Lock()
	p := in.cur
	in.mu.Unlock()
	if p == nil {
		return errors.New("hostemu: no handler running")
	}
	return p.signal(sig)
}
