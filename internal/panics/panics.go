// Package panics turns a goroutine's panic into an error. A panic that no
// goroutine recovers ends the process, and the Functions host restarts it
// with every invocation in it lost (after a few restarts it stops): the
// handler and each goroutine that does an invocation's work run through
// Recover, so that a bug fails that work alone.
package panics

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
)

// Error is a recovered panic: its value and the stack of the goroutine
// that raised it.
type Error struct {
	Value any
	Stack []byte
}

func (p *Error) Error() string { return fmt.Sprintf("panicked: %v", p.Value) }

// Log records the panic at Error on log, with its value and stack.
func (p *Error) Log(ctx context.Context, log *slog.Logger, msg string) {
	log.LogAttrs(ctx, slog.LevelError, msg,
		slog.String("panic", fmt.Sprint(p.Value)), slog.String("stack", string(p.Stack)))
}

// Recover runs fn and returns its panic, or nil.
func Recover(fn func()) (p *Error) {
	defer func() {
		if v := recover(); v != nil {
			p = &Error{Value: v, Stack: debug.Stack()}
		}
	}()
	fn()
	return nil
}
