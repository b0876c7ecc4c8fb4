package functions

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/internal/testenv"
)

func TestLogHandlerWritesEachLevelWhereTheHostReadsIt(t *testing.T) {
	tests := []struct {
		name       string
		level      slog.Level // of the handler; Info if zero
		record     slog.Level
		msg        string
		attrs      []any
		wantStream string // "" for none
	}{
		{name: "debug is off", record: slog.LevelDebug, msg: "d"},
		{name: "debug when asked for", level: slog.LevelDebug, record: slog.LevelDebug, msg: "d", wantStream: "stdout"},
		{name: "info", record: slog.LevelInfo, msg: "i", wantStream: "stdout"},
		{name: "info that mentions errors", record: slog.LevelInfo, msg: "error: failed, severe", wantStream: "stdout"},
		{name: "warn", record: slog.LevelWarn, msg: "w", wantStream: "stderr"},
		{name: "between warn and error", record: slog.LevelWarn + 2, msg: "w2", wantStream: "stderr"},
		{name: "error", record: slog.LevelError, msg: "e", wantStream: "stderr"},
		{name: "error above error", record: slog.LevelError + 4, msg: "e4", wantStream: "stderr"},
		{
			name: "error that mentions warnings", record: slog.LevelError, msg: "Warning: WARN, warn and wArNiNg",
			attrs: []any{"warnings", "AWARNING", "nested", slog.GroupValue(slog.String("warn", "swarn"))}, wantStream: "stderr",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr testenv.SyncBuffer
			log := slog.New(NewLogHandler(&stdout, &stderr, tt.level))
			log.Log(context.Background(), tt.record, tt.msg, tt.attrs...)

			entries := processEntries(t, &stdout, &stderr)
			if tt.wantStream == "" {
				require.Empty(t, entries)
				return
			}
			require.Len(t, entries, 1)
			e := entries[0]
			require.Equal(t, tt.wantStream, e.source)
			require.Equal(t, hostLevelOf(tt.record), e.level, e.line)
			require.Equal(t, tt.msg, e.msg, "JSON decoders read the text as it was logged")
			if tt.attrs != nil {
				require.Equal(t, "AWARNING", e.rec["warnings"])
				require.Equal(t, map[string]any{"warn": "swarn"}, e.rec["nested"])
			}
		})
	}
}

func TestLogHandlerKeepsAttributesAndGroups(t *testing.T) {
	var stdout, stderr testenv.SyncBuffer
	log := slog.New(NewLogHandler(&stdout, &stderr, nil)).With("k", "v").WithGroup("g")
	log.Info("i", "a", 1)
	log.Warn("w", "a", 2)
	log.Error("e", "a", 3)

	entries := processEntries(t, &stdout, &stderr)
	require.Len(t, entries, 3)
	for _, e := range entries {
		require.Equal(t, "v", e.rec["k"], e.line)
		require.Contains(t, e.rec["g"], "a", e.line)
		require.Equal(t, hostLevelOf(map[string]slog.Level{"i": slog.LevelInfo, "w": slog.LevelWarn, "e": slog.LevelError}[e.msg]), e.level)
	}
}

func TestEscapeWarn(t *testing.T) {
	tests := []struct{ in, want string }{
		{in: `{"msg":"ok"}`, want: `{"msg":"ok"}`},
		{in: `{"msg":"warn"}`, want: `{"msg":"\u0077arn"}`},
		{in: `{"msg":"WARN Warning wArN"}`, want: `{"msg":"\u0057ARN \u0057arning \u0077ArN"}`},
		{in: `{"warnwarn":"swarn"}`, want: `{"\u0077arn\u0077arn":"s\u0077arn"}`},
		{in: `{"msg":"war n, wa rn, \\warn"}`, want: `{"msg":"war n, wa rn, \\\u0077arn"}`},
		{in: `{"msg":"wwarn"}`, want: `{"msg":"w\u0077arn"}`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got := string(escapeWarn([]byte(tt.in)))
			require.Equal(t, tt.want, got)
			require.Equal(t, -1, indexWarn([]byte(got)))
			var in, out any
			require.NoError(t, json.Unmarshal([]byte(tt.in), &in))
			require.NoError(t, json.Unmarshal([]byte(got), &out))
			require.Equal(t, in, out, "the same text once decoded")
		})
	}
}

func TestInvocationLogger(t *testing.T) {
	var stdout, stderr testenv.SyncBuffer
	base := slog.New(NewLogHandler(&stdout, &stderr, nil))
	c, log := newInvocation(base, "inv-1", "poll")

	log.Info("first", "n", 1)
	log = log.With("subscription_id", "sub-1", "operation_id", "op-1")
	log.Warn("second", "text", "with spaces")
	log.WithGroup("cs").Error("third", "state", "ready")
	log.WithGroup("cs").Info("fourth", "state", "ready")
	log.Debug("debug is off")

	require.Equal(t, []string{
		`level=INFO msg=first invocation_id=inv-1 function=poll n=1`,
		`level=INFO msg=fourth invocation_id=inv-1 function=poll subscription_id=sub-1 operation_id=op-1 cs.state=ready`,
	}, c.Lines(), "records below Warn, in Logs only")

	require.Empty(t, stdout.String(), "nothing below Warn is in the process log")
	entries := processEntries(t, &stdout, &stderr)
	require.Len(t, entries, 2)
	for _, e := range entries {
		require.Equal(t, "stderr", e.source)
		require.Equal(t, "inv-1", e.rec["invocation_id"])
		require.Equal(t, "poll", e.rec["function"])
		require.Equal(t, "sub-1", e.rec["subscription_id"])
		require.Contains(t, e.rec, "time")
	}
	require.Equal(t, "second", entries[0].msg)
	require.Equal(t, testenv.HostWarning, entries[0].level)
	require.Equal(t, "third", entries[1].msg)
	require.Equal(t, testenv.HostError, entries[1].level)
	require.Equal(t, map[string]any{"state": "ready"}, entries[1].rec["cs"])

	// Once the Logs are taken, later records go to the process log.
	log.Info("late")
	require.Len(t, c.Lines(), 2)
	entries = processEntries(t, &stdout, &stderr)
	require.Len(t, entries, 3)
	require.Equal(t, "late", entries[0].msg)
	require.Equal(t, "stdout", entries[0].source)
	require.Equal(t, "sub-1", entries[0].rec["subscription_id"])
}

func TestInvocationLoggerReplay(t *testing.T) {
	var stdout, stderr testenv.SyncBuffer
	base := slog.New(NewLogHandler(&stdout, &stderr, slog.LevelDebug))
	c, log := newInvocation(base, "inv-2", "scan")
	log.With("k", "v").WithGroup("g").Info("first", "a", 1)
	log.Debug("second")

	c.replay(context.Background())
	c.replay(context.Background())
	log.Info("third")

	entries := processEntries(t, &stdout, &stderr)
	require.Len(t, entries, 3, "each record once")
	for i, msg := range []string{"first", "second", "third"} {
		require.Equal(t, msg, entries[i].msg)
		require.Equal(t, "stdout", entries[i].source)
		require.Equal(t, "inv-2", entries[i].rec["invocation_id"])
		require.Equal(t, "scan", entries[i].rec["function"])
	}
	require.Equal(t, "v", entries[0].rec["k"])
	require.Equal(t, map[string]any{"a": 1.0}, entries[0].rec["g"])
}

func TestCollectorLimits(t *testing.T) {
	tests := []struct {
		name        string
		lines       int
		lineLen     int
		wantKept    int
		wantDropped int
	}{
		{name: "under the limits", lines: 10, lineLen: 10, wantKept: 10},
		{name: "too many lines", lines: maxLogLines + 5, lineLen: 10, wantKept: maxLogLines, wantDropped: 5},
		{name: "too many bytes", lines: 10, lineLen: maxLogBytes / 4, wantKept: 3, wantDropped: 7},
	}
	for _, tt := range tests {
		for _, failed := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, failed %t", tt.name, failed), func(t *testing.T) {
				var stdout, stderr testenv.SyncBuffer
				c, log := newInvocation(slog.New(NewLogHandler(&stdout, &stderr, nil)), "inv-3", "scan")
				for i := range tt.lines {
					log.Info(strings.Repeat("x", tt.lineLen), "i", i)
				}
				var lines []string
				if failed {
					c.replay(context.Background())
					for _, e := range processEntries(t, &stdout, &stderr) {
						require.Equal(t, testenv.HostInformation, e.level)
						lines = append(lines, e.msg)
					}
				} else {
					lines = c.Lines()
				}
				if tt.wantDropped == 0 {
					require.Len(t, lines, tt.wantKept)
					return
				}
				require.Len(t, lines, tt.wantKept+1)
				require.Contains(t, lines[len(lines)-1], fmt.Sprintf("%d more log lines", tt.wantDropped))
				if !failed {
					require.True(t, strings.HasPrefix(lines[len(lines)-1], "level=INFO "), "the host logs it at Information")
					require.Contains(t, lines[len(lines)-1], "invocation_id=\"inv-3\"")
				}
			})
		}
	}
}

func TestCollectorLinesIsNeverNil(t *testing.T) {
	require.NotNil(t, (&collector{}).Lines())
}

// TestLazyAttrsWritesWhatTheHandlerWould: the same lines as the handler it
// wraps, attributes and groups in the same places.
func TestLazyAttrsWritesWhatTheHandlerWould(t *testing.T) {
	write := func(log *slog.Logger) {
		log.Info("plain", "n", 1)
		l := log.With("subscription_id", "sub-1").With("operation_id", "op-1")
		l.Info("with", "n", 2)
		g := l.WithGroup("cs").With("id", "c1")
		g.Info("grouped", "state", "ready")
		g.WithGroup("inner").With("x", 1).WithGroup("").Info("nested", slog.Group("g", "y", 2))
		l.With().Info("empty with")
	}
	opts := &slog.HandlerOptions{ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
		if len(groups) == 0 && a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}
	var eager, lazy bytes.Buffer
	write(slog.New(slog.NewJSONHandler(&eager, opts)))
	write(slog.New(&lazyAttrs{h: slog.NewJSONHandler(&lazy, opts)}))
	require.Equal(t, eager.String(), lazy.String())
	require.Contains(t, lazy.String(),
		`{"level":"INFO","msg":"nested","subscription_id":"sub-1","operation_id":"op-1","cs":{"id":"c1","inner":{"x":1,"g":{"y":2}}}}`)
}

// countingHandler counts WithAttrs calls.
type countingHandler struct {
	slog.Handler
	withAttrs *int
}

func (c countingHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	*c.withAttrs++
	return countingHandler{Handler: c.Handler.WithAttrs(attrs), withAttrs: c.withAttrs}
}

// TestLazyAttrsFormatsNothingUntilARecord: a logger made per operation that
// writes nothing costs its handlers no formatting.
func TestLazyAttrsFormatsNothingUntilARecord(t *testing.T) {
	n := 0
	log := slog.New(&lazyAttrs{h: countingHandler{Handler: slog.NewJSONHandler(io.Discard, nil), withAttrs: &n}})
	l := log.With("subscription_id", "sub-1").With("resource_id", "r")
	l.Debug("off")
	l.Info("written")
	require.Zero(t, n, "attributes are added to the record, not to the handler")
	l.WithGroup("g")
	require.Equal(t, 1, n, "a group takes the attributes before it")
}
