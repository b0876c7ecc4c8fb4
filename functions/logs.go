package functions

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
)

// Limits on the lines an invocation returns in Logs; the process log still
// gets every line.
const (
	maxLogLines = 1000
	maxLogBytes = 256 << 10
)

// collector keeps the log lines of one invocation for the response's Logs.
// It is the io.Writer of a slog.TextHandler, which writes one line per
// record.
type collector struct {
	// invocationID marks the line that says how many lines were left out.
	invocationID string

	mu      sync.Mutex
	lines   []string
	size    int
	dropped int
}

func (c *collector) Write(p []byte) (int, error) {
	line := string(bytes.TrimRight(p, "\n"))
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.lines) >= maxLogLines || c.size+len(line) > maxLogBytes {
		c.dropped++
		return len(p), nil
	}
	c.lines = append(c.lines, line)
	c.size += len(line)
	return len(p), nil
}

// Lines returns a copy of the collected lines, never nil.
func (c *collector) Lines() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, len(c.lines), len(c.lines)+1)
	copy(out, c.lines)
	if c.dropped > 0 {
		out = append(out, fmt.Sprintf("level=WARN msg=%q invocation_id=%q",
			fmt.Sprintf("%d more log lines left out of this response", c.dropped), c.invocationID))
	}
	return out
}

// newCollectorHandler formats records as short text lines (level=INFO
// msg=... key=value) without a time, which the host adds itself.
func newCollectorHandler(c *collector) slog.Handler {
	return slog.NewTextHandler(c, &slog.HandlerOptions{
		Level: slog.LevelInfo,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	})
}

// teeHandler sends every record to two handlers. Attributes and groups
// added with With and WithGroup reach both.
type teeHandler struct {
	a, b slog.Handler
}

func (t teeHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return t.a.Enabled(ctx, l) || t.b.Enabled(ctx, l)
}

func (t teeHandler) Handle(ctx context.Context, r slog.Record) error {
	var errA, errB error
	if t.a.Enabled(ctx, r.Level) {
		errA = t.a.Handle(ctx, r.Clone())
	}
	if t.b.Enabled(ctx, r.Level) {
		errB = t.b.Handle(ctx, r.Clone())
	}
	return errors.Join(errA, errB)
}

func (t teeHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return teeHandler{a: t.a.WithAttrs(attrs), b: t.b.WithAttrs(attrs)}
}

func (t teeHandler) WithGroup(name string) slog.Handler {
	return teeHandler{a: t.a.WithGroup(name), b: t.b.WithGroup(name)}
}

// invocationLogger returns a logger whose lines go to base and to c, each
// carrying the invocation's id and function.
func invocationLogger(base *slog.Logger, c *collector, id, function string) *slog.Logger {
	return slog.New(teeHandler{a: base.Handler(), b: newCollectorHandler(c)}).With(
		slog.String("invocation_id", id),
		slog.String("function", function),
	)
}
