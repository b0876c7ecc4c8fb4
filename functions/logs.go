package functions

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"sync"
	"time"
)

// How the Functions host reads a custom handler's logs (azure-functions-host:
// WorkerProcess.ParseErrorMessageAndLog with UseStdErrorStreamForErrorsOnly,
// which is true for HTTP workers, and DefaultHttpWorkerService's handling of
// the response's Logs):
//   - a stdout line is logged at Information;
//   - a stderr line is logged at Warning if it contains "warn" in any case,
//     and at Error otherwise;
//   - each Logs line of a 2xx answer is logged at Information, attached to
//     the invocation; the Logs of any other answer are not logged at all.
//
// So every record is written once, where the host gives it its level:
// records below Warn of an invocation go to its Logs (to stdout instead if
// the invocation fails), Warn and Error records to stderr, and records
// outside an invocation below Warn to stdout.

// Limits on the lines an invocation returns in Logs.
const (
	maxLogLines = 1000
	maxLogBytes = 256 << 10
)

// Bounds of the level ranges that have no bound of their own.
const (
	lowestLevel  = slog.Level(math.MinInt)
	highestLevel = slog.Level(math.MaxInt)
)

// NewLogHandler returns a handler for the process log of a custom handler
// that the Functions host reads each record at its level: one JSON line per
// record, on stdout below Warn (logged by the host at Information) and on
// stderr from Warn up (logged at Warning when the line contains "warn" in
// any case, as every WARN line does, and at Error otherwise). In an Error
// line every "warn", in any case, has its first letter written as a JSON
// \u escape, so that a message or attribute that mentions a warning cannot
// turn an error into a warning; JSON decoders read the same text.
//
// Records below level are dropped; a nil level means Info.
func NewLogHandler(stdout, stderr io.Writer, level slog.Leveler) slog.Handler {
	// One lock for both streams, which may be the same writer.
	mu := &sync.Mutex{}
	opts := &slog.HandlerOptions{Level: level}
	return slog.NewMultiHandler(
		levelRange{min: lowestLevel, max: slog.LevelWarn,
			h: slog.NewJSONHandler(&lockedWriter{mu: mu, w: stdout}, opts)},
		levelRange{min: slog.LevelWarn, max: slog.LevelError,
			h: slog.NewJSONHandler(&lockedWriter{mu: mu, w: stderr}, opts)},
		levelRange{min: slog.LevelError, max: highestLevel,
			h: slog.NewJSONHandler(&lockedWriter{mu: mu, w: stderr, hideWarn: true}, opts)},
	)
}

// levelRange passes on the records whose level is in [min, max).
type levelRange struct {
	min, max slog.Level
	h        slog.Handler
}

func (l levelRange) Enabled(ctx context.Context, level slog.Level) bool {
	return level >= l.min && level < l.max && l.h.Enabled(ctx, level)
}

func (l levelRange) Handle(ctx context.Context, r slog.Record) error { return l.h.Handle(ctx, r) }

func (l levelRange) WithAttrs(attrs []slog.Attr) slog.Handler {
	return levelRange{min: l.min, max: l.max, h: l.h.WithAttrs(attrs)}
}

func (l levelRange) WithGroup(name string) slog.Handler {
	return levelRange{min: l.min, max: l.max, h: l.h.WithGroup(name)}
}

// lockedWriter serializes the lines of several handlers on one stream. A
// slog handler writes each record with a single Write.
type lockedWriter struct {
	mu       *sync.Mutex
	w        io.Writer
	hideWarn bool // escape every "warn" of a JSON line
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	line := p
	if l.hideWarn {
		line = escapeWarn(p)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.w.Write(line); err != nil {
		return 0, err
	}
	return len(p), nil
}

// escapeWarn rewrites the first letter of every case-insensitive "warn" in
// a JSON text as a \u escape. In JSON text such letters can only be inside
// strings (keys or values), where the escape stands for the same letter.
func escapeWarn(p []byte) []byte {
	var out []byte
	rest := p
	for {
		i := indexWarn(rest)
		if i < 0 {
			break
		}
		if out == nil {
			out = make([]byte, 0, len(p)+16)
		}
		out = append(out, rest[:i]...)
		out = fmt.Appendf(out, `\u%04x`, rest[i])
		rest = rest[i+1:]
	}
	if out == nil {
		return p
	}
	return append(out, rest...)
}

// indexWarn returns the index of the first "warn" in p, in any ASCII case,
// or -1. The host compares ordinally ignoring case; no other character
// folds to these letters.
func indexWarn(p []byte) int {
	for i := 0; i+4 <= len(p); i++ {
		// For letters, setting bit 0x20 gives the lower case.
		if p[i]|0x20 == 'w' && p[i+1]|0x20 == 'a' && p[i+2]|0x20 == 'r' && p[i+3]|0x20 == 'n' {
			return i
		}
	}
	return -1
}

// collector keeps the records of one invocation that the host is to log
// from the response's Logs: each as a short text line for Logs, and the
// record itself, to be written to the process log instead if the
// invocation fails (the host drops the Logs of a failed invocation).
type collector struct {
	invocationID, function string
	// proc is the process log with the invocation's attributes.
	proc slog.Handler

	mu       sync.Mutex
	lines    []string
	size     int
	dropped  int
	kept     bool       // whether Write kept the line it was last given
	records  []deferred // the records of lines, in order
	done     bool       // Logs taken or records replayed: log the rest directly
	replayed bool
}

// deferred is a record kept for the process log with the handler, carrying
// its attributes and groups, that would have written it.
type deferred struct {
	h slog.Handler
	r slog.Record
}

// Write takes one line from the text handler. It is called from
// captureHandler.Handle only, with c.mu held.
func (c *collector) Write(p []byte) (int, error) {
	line := string(bytes.TrimRight(p, "\n"))
	c.kept = len(c.lines) < maxLogLines && c.size+len(line) <= maxLogBytes
	if !c.kept {
		c.dropped++
		return len(p), nil
	}
	c.lines = append(c.lines, line)
	c.size += len(line)
	return len(p), nil
}

// Lines returns the lines for the response's Logs, never nil. Records
// logged afterwards go to the process log: the answer is on its way.
func (c *collector) Lines() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done = true
	out := make([]string, len(c.lines), len(c.lines)+1)
	copy(out, c.lines)
	if c.dropped > 0 {
		// At INFO: the host logs every Logs line at Information.
		out = append(out, fmt.Sprintf("level=INFO msg=%q invocation_id=%q function=%q",
			fmt.Sprintf("%d more log lines left out of this response", c.dropped), c.invocationID, c.function))
	}
	return out
}

// replay writes the kept records to the process log, once, for an
// invocation whose Logs the host will not log (a failure, or a response
// that did not arrive whole). Records logged afterwards go to the process
// log directly.
func (c *collector) replay(ctx context.Context) {
	c.mu.Lock()
	c.done = true
	if c.replayed {
		c.mu.Unlock()
		return
	}
	c.replayed = true
	records, dropped := c.records, c.dropped
	c.records = nil
	c.mu.Unlock()

	for _, d := range records {
		_ = d.h.Handle(ctx, d.r) // as a handler's own log call, errors are not reported
	}
	if dropped > 0 && c.proc.Enabled(ctx, slog.LevelInfo) {
		r := slog.NewRecord(time.Now(), slog.LevelInfo,
			fmt.Sprintf("%d more log lines of this invocation left out", dropped), 0)
		_ = c.proc.Handle(ctx, r)
	}
}

// captureHandler puts the records it gets into a collector.
type captureHandler struct {
	c    *collector
	text slog.Handler // formats the Logs lines, written to c
	proc slog.Handler // the process log, with the same attributes and groups
}

// Enabled follows the process log, so that its level setting decides
// which records an invocation keeps too.
func (h *captureHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.proc.Enabled(ctx, l)
}

func (h *captureHandler) Handle(ctx context.Context, r slog.Record) error {
	c := h.c
	c.mu.Lock()
	if c.done {
		c.mu.Unlock()
		return h.proc.Handle(ctx, r)
	}
	defer c.mu.Unlock()
	c.kept = false
	err := h.text.Handle(ctx, r)
	if c.kept {
		c.records = append(c.records, deferred{h: h.proc, r: r.Clone()})
	}
	return err
}

func (h *captureHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &captureHandler{c: h.c, text: h.text.WithAttrs(attrs), proc: h.proc.WithAttrs(attrs)}
}

func (h *captureHandler) WithGroup(name string) slog.Handler {
	return &captureHandler{c: h.c, text: h.text.WithGroup(name), proc: h.proc.WithGroup(name)}
}

// newTextHandler formats records as short text lines (level=INFO msg=...
// key=value) without a time, which the host adds itself.
func newTextHandler(w io.Writer) slog.Handler {
	return slog.NewTextHandler(w, &slog.HandlerOptions{
		Level: lowestLevel, // captureHandler.Enabled decides
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	})
}

// newInvocation returns the collector and logger of one invocation. Every
// record carries the invocation's id and function. Records below Warn go
// to the collector; Warn and above go to base's handler at once, so that a
// failure is logged whatever becomes of the answer.
func newInvocation(base *slog.Logger, id, function string) (*collector, *slog.Logger) {
	attrs := []slog.Attr{slog.String("invocation_id", id), slog.String("function", function)}
	proc := base.Handler().WithAttrs(attrs)
	c := &collector{invocationID: id, function: function, proc: proc}
	capture := &captureHandler{c: c, text: newTextHandler(c).WithAttrs(attrs), proc: proc}
	return c, slog.New(&lazyAttrs{h: slog.NewMultiHandler(
		levelRange{min: lowestLevel, max: slog.LevelWarn, h: capture},
		levelRange{min: slog.LevelWarn, max: highestLevel, h: proc},
	)})
}

// lazyAttrs keeps the attributes of Logger.With until a record is handled.
// An invocation's logger is cloned per operation of a message (ids, paths),
// and its handlers would format those attributes into each of their several
// outputs at once, for loggers that mostly never write a record.
type lazyAttrs struct {
	h     slog.Handler
	attrs []slog.Attr // after h's own, before the record's
}

func (l *lazyAttrs) Enabled(ctx context.Context, level slog.Level) bool {
	return l.h.Enabled(ctx, level)
}

func (l *lazyAttrs) Handle(ctx context.Context, r slog.Record) error {
	if len(l.attrs) == 0 {
		return l.h.Handle(ctx, r)
	}
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	out.AddAttrs(l.attrs...)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(a)
		return true
	})
	return l.h.Handle(ctx, out)
}

func (l *lazyAttrs) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(attrs) == 0 {
		return l
	}
	return &lazyAttrs{h: l.h, attrs: append(l.attrs[:len(l.attrs):len(l.attrs)], attrs...)}
}

// WithGroup gives the kept attributes to h first: they stay outside the
// group.
func (l *lazyAttrs) WithGroup(name string) slog.Handler {
	if name == "" {
		return l
	}
	h := l.h
	if len(l.attrs) > 0 {
		h = h.WithAttrs(l.attrs)
	}
	return &lazyAttrs{h: h.WithGroup(name)}
}
