package hostemu

import (
	"bytes"
	"io"
	"log/slog"
	"strings"
	"sync"
)

// LogSource tells where a line the host logs came from.
type LogSource int

const (
	// SourceStdout is a line the handler process wrote to stdout.
	SourceStdout LogSource = iota
	// SourceStderr is a line the handler process wrote to stderr.
	SourceStderr
	// SourceLogs is an entry of an invocation response's Logs.
	SourceLogs
)

// String returns "stdout", "stderr" or "Logs".
func (s LogSource) String() string {
	switch s {
	case SourceStdout:
		return "stdout"
	case SourceStderr:
		return "stderr"
	case SourceLogs:
		return "Logs"
	}
	return "unknown"
}

// LogLine is one line the host logs for a handler, with the level the host
// gives it.
type LogLine struct {
	// Level is slog.LevelInfo, slog.LevelWarn or slog.LevelError.
	Level  slog.Level
	Source LogSource
	// Instance is the host instance whose handler wrote the line.
	Instance int
	// Function and InvocationID are set for SourceLogs only: the host does
	// not know which invocation a process's output belongs to.
	Function     string
	InvocationID string
	// Text is the line as the host logs it, without the line end (and
	// without a leading "LanguageWorkerConsoleLog", which the host strips).
	Text string
}

// languageWorkerConsoleLog marks a line the host logs as its own rather
// than as the function's (WorkerConstants.LanguageWorkerConsoleLogPrefix).
const languageWorkerConsoleLog = "LanguageWorkerConsoleLog"

// processLogLevel is the level the host logs a line of the handler
// process's output at (WorkerProcess.OnOutputDataReceived and
// ParseErrorMessageAndLog): stdout lines at Information; stderr lines at
// Warning when they contain "warn" in any case, else at Error, since
// HttpWorkerDescription.UseStdErrorStreamForErrorsOnly is true for custom
// handlers.
func processLogLevel(source LogSource, line string) slog.Level {
	if source == SourceStdout {
		return slog.LevelInfo
	}
	if strings.Contains(strings.ToLower(line), "warn") {
		return slog.LevelWarn
	}
	return slog.LevelError
}

// processLine takes one line of the handler's output: it writes it to
// Options.Output and reports it with the level the host gives it.
func (in *Instance) processLine(source LogSource, line string) {
	_, _ = in.out.Write([]byte(line + "\n"))
	text := line
	if len(text) >= len(languageWorkerConsoleLog) && strings.EqualFold(text[:len(languageWorkerConsoleLog)], languageWorkerConsoleLog) {
		// WorkerProcessUtilities.RemoveLogPrefix.
		text = text[len(languageWorkerConsoleLog):]
	}
	in.emitLog(LogLine{Level: processLogLevel(source, line), Source: source, Text: text})
}

// emitLog reports a line to Options.OnLog.
func (in *Instance) emitLog(l LogLine) {
	l.Instance = in.index
	if f := in.h.opts.OnLog; f != nil {
		f(l)
	}
}

// lineSplitter cuts a process's output stream into lines the way .NET's
// Process.BeginOutputReadLine does: a line ends at "\n", "\r" or "\r\n",
// and the last unterminated line is delivered when the stream ends.
type lineSplitter struct {
	mu     sync.Mutex
	buf    []byte
	lastCR bool // the previous chunk ended in '\r': a '\n' next is part of it
	line   func(string)
}

func (l *lineSplitter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range p {
		if l.lastCR {
			l.lastCR = false
			if c == '\n' {
				continue
			}
		}
		switch c {
		case '\r':
			l.lastCR = true
			fallthrough
		case '\n':
			l.line(string(l.buf))
			l.buf = l.buf[:0]
		default:
			l.buf = append(l.buf, c)
		}
	}
	return len(p), nil
}

// flush delivers a last unterminated line.
func (l *lineSplitter) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) > 0 {
		l.line(string(l.buf))
		l.buf = nil
	}
}

// sharedWriter serializes writes from several handlers to one writer.
type sharedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func newSharedWriter(w io.Writer) *sharedWriter { return &sharedWriter{w: w} }

func (s *sharedWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// prefixed returns a writer that puts prefix before every line.
func (s *sharedWriter) prefixed(prefix string) io.Writer {
	return prefixWriter{s: s, prefix: []byte(prefix)}
}

// prefixWriter receives whole lines.
type prefixWriter struct {
	s      *sharedWriter
	prefix []byte
}

func (p prefixWriter) Write(b []byte) (int, error) {
	var buf bytes.Buffer
	for line := range bytes.Lines(b) {
		buf.Write(p.prefix)
		buf.Write(line)
	}
	if _, err := p.s.Write(buf.Bytes()); err != nil {
		return 0, err
	}
	return len(b), nil
}
