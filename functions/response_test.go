package functions

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// upper is a slice type with a marshaling method of its own.
type upper []string

func (u upper) MarshalJSON() ([]byte, error) {
	return json.Marshal(strings.ToUpper(strings.Join(u, ",")))
}

type entry struct {
	ID   string `json:"id"`
	Note string `json:"note,omitempty"`
}

// encodeResponse is the reference: encoding/json's rendering of a whole
// response in one go.
func encodeResponse(outputs map[string]any, logs []string, ret any) ([]byte, error) {
	if outputs == nil {
		outputs = map[string]any{}
	}
	if logs == nil {
		logs = []string{}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	err := enc.Encode(struct {
		Outputs     map[string]any `json:"Outputs"`
		Logs        []string       `json:"Logs"`
		ReturnValue any            `json:"ReturnValue"`
	}{outputs, logs, ret})
	return buf.Bytes(), err
}

// streamOf streams xs, as a handler would stream items it reads.
func streamOf[T any](xs []T) Stream {
	return func(yield func(any, error) bool) {
		for _, x := range xs {
			if !yield(x, nil) {
				return
			}
		}
	}
}

// A body must be the very bytes encoding/json renders at once, a stream
// rendering as the array of its elements.
func TestBodyMatchesEncodeResponse(t *testing.T) {
	many := make([]entry, 5000)
	for i := range many {
		many[i] = entry{ID: strings.Repeat("x", i%50)}
	}
	tests := []struct {
		name    string
		outputs map[string]any // what the handler returns
		want    map[string]any // what encoding/json is given; outputs when nil
		logs    []string
		ret     any
	}{
		{name: "nothing"},
		{name: "empty slice", outputs: map[string]any{"operations": []entry{}}, ret: 0},
		{name: "nil slice", outputs: map[string]any{"operations": []entry(nil)}},
		{name: "one", outputs: map[string]any{"operations": []entry{{ID: "a"}}}, logs: []string{"l1"}, ret: 1},
		{name: "html is not escaped", outputs: map[string]any{"o": []entry{{ID: "<a&b>", Note: "\u2028"}}}, ret: "<&>"},
		{name: "several outputs in name order", outputs: map[string]any{"b": []int{1, 2}, "a": map[string]int{"z": 1, "y": 2}, "c": "s"}},
		{name: "bytes stay base64", outputs: map[string]any{"raw": []byte("hello")}},
		{name: "raw JSON stays as it is", outputs: map[string]any{"raw": json.RawMessage(`{"k":[1,2]}`)}},
		{name: "a slice type's own marshaler", outputs: map[string]any{"u": upper{"a", "b"}}},
		{name: "many", outputs: map[string]any{"operations": many}, logs: []string{"a", "b"}, ret: len(many)},
		{name: "empty stream", outputs: map[string]any{"operations": streamOf([]entry{})}, want: map[string]any{"operations": []entry{}}},
		{name: "nil stream is null", outputs: map[string]any{"operations": Stream(nil)}, want: map[string]any{"operations": nil}},
		{
			name:    "stream of many",
			outputs: map[string]any{"operations": streamOf(many), "other": 1},
			want:    map[string]any{"operations": many, "other": 1},
			logs:    []string{"a"}, ret: len(many),
		},
		{
			name:    "stream of mixed values",
			outputs: map[string]any{"mixed": streamOf([]any{1, "<two>", nil, []string{"x"}, map[string]any{"k": true}, upper{"u"}})},
			want:    map[string]any{"mixed": []any{1, "<two>", nil, []string{"x"}, map[string]any{"k": true}, upper{"u"}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.want == nil {
				tt.want = tt.outputs
			}
			want, err := encodeResponse(tt.want, tt.logs, tt.ret)
			require.NoError(t, err)
			b, err := newBody(tt.outputs, func() []string { return tt.logs }, tt.ret)
			require.NoError(t, err)
			rec := httptest.NewRecorder()
			sent, err := b.writeTo(rec, http.StatusOK)
			require.NoError(t, err)
			require.True(t, sent)
			require.Equal(t, string(want), rec.Body.String())
			require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
		})
	}
}

// Logs and ReturnValue are read after the streams: a stream's log lines
// and a count it fills in reach the answer.
func TestStreamLogsAndCountReachTheAnswer(t *testing.T) {
	s := NewServer(nil, map[string]Handler{
		"scan": func(_ context.Context, inv *Invocation) (*Result, error) {
			n := new(int)
			stream := func(yield func(any, error) bool) {
				for i := range 3 {
					*n++
					if !yield(i, nil) {
						return
					}
				}
				inv.Log.Info("streamed", "count", *n)
			}
			return &Result{Outputs: map[string]any{"operations": Stream(stream)}, ReturnValue: n}, nil
		},
	})
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)

	a := post(t, ts.URL+"/scan", "inv-1", `{"Data":{},"Metadata":{}}`)
	require.Equal(t, http.StatusOK, a.Status)
	require.Equal(t, []any{0.0, 1.0, 2.0}, a.Outputs["operations"])
	require.Equal(t, 3.0, a.ReturnValue)
	requireLogsContain(t, a.Logs, "msg=streamed")
	requireLogsContain(t, a.Logs, "count=3")
}

// A stream that fails is a failed invocation, never a shortened output: a
// plain error answer while nothing has gone out, an aborted response after.
func TestFailingStream(t *testing.T) {
	item := map[string]any{"id": strings.Repeat("i", 40)}
	errListing := errors.New("listing broke")
	tests := []struct {
		name     string
		at       int  // the element that fails
		panics   bool // by panicking rather than yielding an error
		nan      bool // by being unencodable
		aborted  bool // the status had gone out
		errorLog string
	}{
		{name: "error before anything went out", at: 10, errorLog: "listing broke"},
		{name: "panic before anything went out", at: 10, panics: true, errorLog: "handler panicked: boom"},
		{name: "unencodable before anything went out", at: 10, nan: true, errorLog: "encoding element 10"},
		{name: "error after the status went out", at: 10000, aborted: true, errorLog: "listing broke"},
		{name: "panic after the status went out", at: 10000, panics: true, aborted: true, errorLog: "handler panicked: boom"},
		{name: "unencodable after the status went out", at: 9999, nan: true, aborted: true, errorLog: "encoding element 9999"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stream := func(yield func(any, error) bool) {
				for i := 0; ; i++ {
					switch {
					case i < tt.at:
						if !yield(item, nil) {
							return
						}
						continue
					case tt.panics:
						panic("boom")
					case tt.nan:
						yield(math.NaN(), nil)
					default:
						yield(nil, BadRequest(errListing))
					}
					return
				}
			}
			var stdout, stderr safeBuffer
			s := NewServer(slog.New(NewLogHandler(&stdout, &stderr, nil)), map[string]Handler{
				"scan": func(context.Context, *Invocation) (*Result, error) {
					return &Result{Outputs: map[string]any{"operations": Stream(stream)}}, nil
				},
			})
			ts := httptest.NewServer(s.Handler())
			t.Cleanup(ts.Close)

			r := send(ts.URL+"/scan", `{"Data":{},"Metadata":{}}`, InvocationIDHeader, "inv-x")
			require.NoError(t, r.err)
			if tt.aborted {
				defer r.resp.Body.Close()
				_, err := io.ReadAll(r.resp.Body)
				require.Error(t, err, "the body must not end as if complete")
			} else {
				a := readAnswer(t, r.resp)
				want := http.StatusInternalServerError
				if !tt.panics && !tt.nan {
					want = http.StatusBadRequest // StatusOf the stream's error
				}
				require.Equal(t, want, a.Status)
				require.Empty(t, a.Outputs, "no partial output")
				require.Empty(t, a.Logs, "the reason is on stderr: the host logs no Logs of a failure")
			}

			require.Eventually(t, func() bool { return accessLogged(&stdout, &stderr, "inv-x") },
				10*time.Second, 5*time.Millisecond, "no invocation line")
			var invocation, failure map[string]any
			var stack bool
			for _, e := range processEntries(t, &stdout, &stderr) {
				switch e.msg {
				case "invocation":
					require.Equal(t, hostWarning, e.level, "a failed invocation's access line")
					invocation = e.rec
				case "invocation failed":
					require.Equal(t, hostError, e.level)
					require.Nil(t, failure, "one line says why")
					failure = e.rec
				case "handler panicked":
					require.Equal(t, hostError, e.level)
					stack = strings.Contains(e.rec["stack"].(string), "response_test.go")
				}
			}
			require.NotNil(t, invocation, "no invocation line")
			require.NotNil(t, failure, "no line says why the invocation failed")
			require.Contains(t, failure["error"], tt.errorLog)
			if tt.aborted {
				require.Equal(t, true, invocation["aborted"])
				require.Contains(t, failure["error"], "response aborted")
			} else {
				require.NotContains(t, invocation, "aborted")
			}
			require.Equal(t, tt.panics, stack, "a panic is logged with its stack")
		})
	}
}
