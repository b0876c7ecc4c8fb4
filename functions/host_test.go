package functions

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/internal/testenv"
)

// hostLevelOf is the level the host gives a record logged at l, once
// it is written where it belongs.
func hostLevelOf(l slog.Level) string {
	switch {
	case l >= slog.LevelError:
		return testenv.HostError
	case l >= slog.LevelWarn:
		return testenv.HostWarning
	default:
		return testenv.HostInformation
	}
}

// hostEntry is one line the host logs, with the record it came from.
type hostEntry struct {
	level  string
	source string // stdout, stderr or Logs
	line   string
	msg    string
	rec    map[string]any // the decoded JSON line; nil for a Logs line
}

// processEntries reads the process's output as the host does: every
// stdout line at Information, every stderr line by
// testenv.HostStderrLevel. Each line must be one JSON object.
func processEntries(t *testing.T, stdout, stderr *testenv.SyncBuffer) []hostEntry {
	t.Helper()
	var out []hostEntry
	for _, s := range []struct {
		name string
		buf  *testenv.SyncBuffer
	}{{"stdout", stdout}, {"stderr", stderr}} {
		for line := range strings.Lines(s.buf.String()) {
			line = strings.TrimSuffix(line, "\n")
			var rec map[string]any
			require.NoError(t, json.Unmarshal([]byte(line), &rec), "%s: %s", s.name, line)
			level := testenv.HostInformation
			if s.name == "stderr" {
				level = testenv.HostStderrLevel(line)
			}
			msg, _ := rec["msg"].(string)
			out = append(out, hostEntry{level: level, source: s.name, line: line, msg: msg, rec: rec})
		}
	}
	return out
}

// logsEntries reads a response's Logs as the host does: each line at
// Information for a whole 2xx answer, none otherwise.
func logsEntries(t *testing.T, status int, whole bool, logs []string) []hostEntry {
	t.Helper()
	if !whole || status < 200 || status > 299 {
		return nil
	}
	var out []hostEntry
	for _, line := range logs {
		out = append(out, hostEntry{level: testenv.HostInformation, source: "Logs", line: line, msg: textMsg(t, line)})
	}
	return out
}

// textMsg returns the msg of a text line (level=INFO msg=... key=value).
func textMsg(t *testing.T, line string) string {
	t.Helper()
	_, rest, ok := strings.Cut(line, " msg=")
	require.True(t, ok, line)
	if strings.HasPrefix(rest, `"`) {
		q, err := strconv.QuotedPrefix(rest)
		require.NoError(t, err, line)
		msg, err := strconv.Unquote(q)
		require.NoError(t, err, line)
		return msg
	}
	msg, _, _ := strings.Cut(rest, " ")
	return msg
}

// entriesOf keeps the entries of one invocation: the process lines that
// carry its id, and every Logs line (a response holds its own only).
func entriesOf(t *testing.T, entries []hostEntry, id string) []hostEntry {
	t.Helper()
	var out []hostEntry
	for _, e := range entries {
		if e.rec == nil {
			require.Contains(t, e.line, "invocation_id="+id, "a Logs line of another invocation")
			out = append(out, e)
		} else if got, ok := e.rec["invocation_id"]; ok && got == id {
			out = append(out, e)
		}
	}
	return out
}

// accessLogged reports whether the access line of invocation id is in the
// process's output. It may run off the test's goroutine: it never fails.
func accessLogged(stdout, stderr *testenv.SyncBuffer, id string) bool {
	for line := range strings.Lines(stdout.String() + stderr.String()) {
		var rec struct {
			Msg          string
			InvocationID string `json:"invocation_id"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "invocation" && rec.InvocationID == id {
			return true
		}
	}
	return false
}

// TestLogsAsTheHostReadsThem runs invocations through the Server, success
// and every way of failing, and reads what the handler wrote as the host
// does: each record must be logged exactly once, at the level the host
// gives it matching its slog level, and every failure must say why at
// Error.
func TestLogsAsTheHostReadsThem(t *testing.T) {
	// logAll logs one record at each level, with texts that would mislead
	// a host reading them at the wrong place.
	records := []struct {
		level slog.Level
		msg   string
	}{
		{slog.LevelDebug, "debug"},
		{slog.LevelInfo, "info"},
		{slog.LevelInfo, "info that mentions an error, a failure and a warning"},
		{slog.LevelWarn, "warn"},
		{slog.LevelError, "error"},
		{slog.LevelError, "error about a Warning"},
	}
	logAll := func(log *slog.Logger, where string) {
		for _, r := range records {
			log.Log(context.Background(), r.level, where+" "+r.msg, "warnings", "WARN and warn")
		}
	}
	handlers := map[string]Handler{
		"ok": func(_ context.Context, inv *Invocation) (*Result, error) {
			logAll(inv.Log, "handler")
			return &Result{Outputs: map[string]any{"x": 1}}, nil
		},
		"bad": func(_ context.Context, inv *Invocation) (*Result, error) {
			logAll(inv.Log, "handler")
			return nil, BadRequest(errors.New("no such thing"))
		},
		"fail": func(_ context.Context, inv *Invocation) (*Result, error) {
			logAll(inv.Log, "handler")
			return nil, errors.New("cosmos down")
		},
		"panic": func(_ context.Context, inv *Invocation) (*Result, error) {
			logAll(inv.Log, "handler")
			panic("kaboom")
		},
		"unencodable": func(_ context.Context, inv *Invocation) (*Result, error) {
			logAll(inv.Log, "handler")
			return &Result{Outputs: map[string]any{"x": make(chan int)}}, nil
		},
	}
	var stdout, stderr testenv.SyncBuffer
	s := NewServer(slog.New(NewLogHandler(&stdout, &stderr, nil)), handlers, WithMaxBodyBytes(4096))
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)

	tests := []struct {
		name       string
		path       string
		body       string // {} if empty
		wantStatus int
		wantLogged []string // who logs the records: handler, stream
		failure    string   // in the error of "invocation failed"; "" for a success
		panics     bool
		rejected   string // the Warn record of a request that is no invocation
	}{
		{name: "success", path: "/ok", wantStatus: 200, wantLogged: []string{"handler"}},
		{name: "bad request", path: "/bad", wantStatus: 400, wantLogged: []string{"handler"}, failure: "no such thing"},
		{name: "handler error", path: "/fail", wantStatus: 500, wantLogged: []string{"handler"}, failure: "cosmos down"},
		{name: "panic", path: "/panic", wantStatus: 500, wantLogged: []string{"handler"}, failure: "handler panicked: kaboom", panics: true},
		{name: "outputs that do not encode", path: "/unencodable", wantStatus: 500, wantLogged: []string{"handler"}, failure: "unsupported type"},
		{name: "oversized body", path: "/ok", body: `{"Data":{"x":"` + strings.Repeat("a", 5000) + `"}}`, wantStatus: 413, failure: "larger than 4096 bytes"},
		{name: "body not JSON", path: "/ok", body: `Data=1`, wantStatus: 400, failure: "not valid JSON"},
		{name: "unknown function", path: "/nope", wantStatus: 404, rejected: "unknown function"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := "inv-" + strings.ReplaceAll(tt.name, " ", "-")
			body := tt.body
			if body == "" {
				body = `{}`
			}
			res := send(ts.URL+tt.path, body, InvocationIDHeader, id)
			require.NoError(t, res.err)
			require.Equal(t, tt.wantStatus, res.resp.StatusCode)
			raw, err := io.ReadAll(res.resp.Body)
			res.resp.Body.Close()
			require.NoError(t, err)
			var a struct{ Logs []string }
			require.NoError(t, json.Unmarshal(raw, &a), string(raw))
			logs := a.Logs

			// The access line is the last line of a failed invocation; a
			// success has none at Info, the host's request record shows it.
			want := map[string]string{}
			if tt.rejected == "" {
				if tt.failure != "" {
					want["invocation"] = testenv.HostWarning
					require.Eventually(t, func() bool { return accessLogged(&stdout, &stderr, id) },
						10*time.Second, 5*time.Millisecond, "no access line")
				}
			} else {
				want[tt.rejected] = testenv.HostWarning
			}
			entries := entriesOf(t, append(processEntries(t, &stdout, &stderr),
				logsEntries(t, tt.wantStatus, true, logs)...), id)

			for _, who := range tt.wantLogged {
				for _, r := range records {
					if r.level >= slog.LevelInfo { // Debug is off
						want[who+" "+r.msg] = hostLevelOf(r.level)
					}
				}
			}
			if tt.failure != "" {
				want["invocation failed"] = testenv.HostError
			}
			if tt.panics {
				want["handler panicked"] = testenv.HostError
			}

			got := map[string][]hostEntry{}
			for _, e := range entries {
				got[e.msg] = append(got[e.msg], e)
			}
			for msg, level := range want {
				require.Len(t, got[msg], 1, "%q must reach the host exactly once: %v", msg, got[msg])
				require.Equal(t, level, got[msg][0].level, "%q: %s", msg, got[msg][0].line)
			}
			for msg, es := range got {
				require.Contains(t, want, msg, "unexpected line: %s", es[0].line)
			}
			if tt.failure != "" {
				e := got["invocation failed"][0]
				require.Contains(t, e.rec["error"], tt.failure)
				require.Equal(t, float64(tt.wantStatus), e.rec["status"])
				require.Equal(t, float64(tt.wantStatus), got["invocation"][0].rec["status"])
			}
			for _, e := range entries {
				if e.rec != nil {
					require.Equal(t, id, e.rec["invocation_id"], e.line)
					if tt.rejected == "" {
						require.Equal(t, strings.Fields(strings.TrimPrefix(tt.path, "/"))[0], e.rec["function"], e.line)
					}
				}
			}
		})
	}
}
