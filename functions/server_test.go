package functions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/internal/testenv"
)

// answer is a decoded response.
type answer struct {
	Status      int
	Outputs     map[string]any
	Logs        []string
	ReturnValue any
}

// readAnswer checks the shape every response must have and decodes it.
func readAnswer(t *testing.T, resp *http.Response) answer {
	t.Helper()
	defer resp.Body.Close()
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)

	var top map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(body, &top), string(body))
	require.Contains(t, top, "Outputs")
	require.Contains(t, top, "Logs")
	require.Contains(t, top, "ReturnValue")
	require.Equal(t, "an object", kindOf(top["Outputs"]), string(body))
	require.Equal(t, "an array", kindOf(top["Logs"]), string(body))

	a := answer{Status: resp.StatusCode}
	require.NoError(t, json.Unmarshal(top["Outputs"], &a.Outputs))
	require.NoError(t, json.Unmarshal(top["Logs"], &a.Logs))
	require.NoError(t, json.Unmarshal(top["ReturnValue"], &a.ReturnValue))
	return a
}

func post(t *testing.T, url, id, body string) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if id != "" {
		req.Header.Set(InvocationIDHeader, id)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	return readAnswer(t, resp)
}

// result is the outcome of a request sent off the test's goroutine, where
// require must not be called.
type result struct {
	resp *http.Response
	err  error
}

// send POSTs body to url with the given header name/value pairs.
func send(url, body string, header ...string) result {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return result{err: err}
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	return result{resp: resp, err: err}
}

func requireLogsContain(t *testing.T, logs []string, substr string) {
	t.Helper()
	for _, l := range logs {
		if strings.Contains(l, substr) {
			return
		}
	}
	require.Failf(t, "missing log line", "no line contains %q in %q", substr, logs)
}

const pollBody = `{"Data":{"operation":"{\"subscriptionId\":\"sub-1\",\"operationId\":\"op-1\"}"},"Metadata":{"Id":"\"m-1\"","DequeueCount":"2"}}`

func TestServerResponses(t *testing.T) {
	handlers := map[string]Handler{
		"scan": func(_ context.Context, inv *Invocation) (*Result, error) {
			if _, err := inv.Timer("timer"); err != nil {
				return nil, err
			}
			inv.Log.Info("scanned")
			return &Result{
				Outputs:     map[string]any{"operations": []testMessage{{SubscriptionID: "s", OperationID: "o"}}},
				ReturnValue: "done",
			}, nil
		},
		"poll": func(_ context.Context, inv *Invocation) (*Result, error) {
			var m testMessage
			if err := inv.QueueMessage("operation", &m); err != nil {
				return nil, err
			}
			md := inv.QueueMetadata()
			inv.Log.With("subscription_id", m.SubscriptionID, "operation_id", m.OperationID).
				Info("polled", "message_id", md.ID, "dequeue_count", md.DequeueCount, "function_name", inv.Function)
			return nil, nil
		},
		"bad": func(context.Context, *Invocation) (*Result, error) {
			return nil, BadRequest(errors.New("no such thing"))
		},
		"fail": func(context.Context, *Invocation) (*Result, error) {
			return nil, fmt.Errorf("cosmos: %w", errors.New("boom"))
		},
		"panic": func(context.Context, *Invocation) (*Result, error) { panic("kaboom") },
		"unencodable": func(context.Context, *Invocation) (*Result, error) {
			return &Result{Outputs: map[string]any{"x": make(chan int)}}, nil
		},
		"partial": func(context.Context, *Invocation) (*Result, error) {
			// Outputs returned with an error are not written.
			return &Result{Outputs: map[string]any{"x": 1}}, errors.New("half done")
		},
	}
	var stdout, stderr testenv.SyncBuffer
	s := NewServer(slog.New(NewLogHandler(&stdout, &stderr, nil)), handlers, WithMaxBodyBytes(4096))
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)

	const timerBody = `{"Data":{"timer":{"Schedule":{"AdjustForDST":true},"ScheduleStatus":null,"IsPastDue":false}},"Metadata":{}}`
	tests := []struct {
		name        string
		method      string // default POST
		path        string
		body        string
		wantStatus  int
		wantOutputs map[string]any
		wantReturn  any
		wantLogs    []string // substrings that some Logs line must contain
		wantStderr  []string // substrings that some stderr line of the invocation must contain
	}{
		{name: "readiness probe", method: http.MethodGet, path: "/", wantStatus: 200, wantOutputs: map[string]any{}},
		{
			name: "scan", path: "/scan", body: timerBody, wantStatus: 200,
			wantOutputs: map[string]any{"operations": []any{map[string]any{"subscriptionId": "s", "operationId": "o"}}},
			wantReturn:  "done",
			wantLogs:    []string{"msg=scanned"},
		},
		{
			name: "poll", path: "/poll", body: pollBody, wantStatus: 200, wantOutputs: map[string]any{},
			wantLogs: []string{"msg=polled", "subscription_id=sub-1 operation_id=op-1", "message_id=m-1", "dequeue_count=2", "function_name=poll"},
		},
		{name: "scan without its timer", path: "/scan", body: `{"Data":{}}`, wantStatus: 400, wantStderr: []string{`timer \"timer\": binding missing`}},
		{name: "poll with a bad message", path: "/poll", body: `{"Data":{"operation":"[1]"}}`, wantStatus: 400, wantStderr: []string{"holds an array"}},
		{name: "unknown function", path: "/nope", body: `{}`, wantStatus: 404, wantStderr: []string{"unknown function", `"path":"/nope"`}},
		{name: "nested unknown path", path: "/scan/x", body: `{}`, wantStatus: 404},
		{name: "wrong method", method: http.MethodGet, path: "/scan", wantStatus: 405, wantStderr: []string{"method not allowed"}},
		{name: "oversized body", path: "/scan", body: `{"Data":{"x":"` + strings.Repeat("a", 5000) + `"}}`, wantStatus: 413, wantStderr: []string{"larger than 4096 bytes"}},
		{name: "body not JSON", path: "/scan", body: `Data=1`, wantStatus: 400, wantStderr: []string{"request body is not valid JSON"}},
		{name: "body an array", path: "/scan", body: `[]`, wantStatus: 400, wantStderr: []string{"request body is an array"}},
		{name: "empty body", path: "/scan", body: ``, wantStatus: 400, wantStderr: []string{"request body is empty"}},
		{name: "invalid UTF-8", path: "/scan", body: "{\"Data\":{\"timer\":\"\xc3\x28\"}}", wantStatus: 400, wantStderr: []string{"not valid UTF-8"}},
		{name: "too deep", path: "/scan", body: `{"Data":{"x":` + strings.Repeat("[", 65) + strings.Repeat("]", 65) + `}}`, wantStatus: 400, wantStderr: []string{"nests deeper than 64 levels"}},
		{name: "bad request", path: "/bad", body: `{}`, wantStatus: 400, wantStderr: []string{"no such thing", `"status":400`}},
		{name: "other error", path: "/fail", body: `{}`, wantStatus: 500, wantStderr: []string{"cosmos: boom"}},
		{name: "outputs with an error are dropped", path: "/partial", body: `{}`, wantStatus: 500, wantOutputs: map[string]any{}, wantStderr: []string{"half done"}},
		{name: "panic", path: "/panic", body: `{}`, wantStatus: 500, wantStderr: []string{"handler panicked", "kaboom", `"stack":`}},
		{name: "outputs that do not encode", path: "/unencodable", body: `{}`, wantStatus: 500, wantStderr: []string{"unsupported type"}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := fmt.Sprintf("inv-%d", i)
			method := tt.method
			if method == "" {
				method = http.MethodPost
			}
			req, err := http.NewRequest(method, ts.URL+tt.path, strings.NewReader(tt.body))
			require.NoError(t, err)
			req.Header.Set(InvocationIDHeader, id)
			resp, err := ts.Client().Do(req)
			require.NoError(t, err)
			a := readAnswer(t, resp)

			require.Equal(t, tt.wantStatus, a.Status, a.Logs)
			if tt.wantOutputs != nil {
				require.Equal(t, tt.wantOutputs, a.Outputs)
			}
			if tt.wantStatus != 200 {
				require.Empty(t, a.Outputs)
				require.Empty(t, a.Logs, "the host logs no Logs line of a failed invocation")
			}
			require.Equal(t, tt.wantReturn, a.ReturnValue)
			for _, want := range tt.wantLogs {
				requireLogsContain(t, a.Logs, want)
			}
			for _, line := range a.Logs {
				require.Contains(t, line, "invocation_id="+id)
				require.NotContains(t, line, "time=")
				require.NotContains(t, line, "\n")
			}
			var lines []string
			for _, e := range entriesOf(t, processEntries(t, &stdout, &stderr), id) {
				if e.source == "stderr" {
					lines = append(lines, e.line)
				}
			}
			for _, want := range tt.wantStderr {
				requireLogsContain(t, lines, want)
			}
		})
	}

	t.Run("serves after a panic", func(t *testing.T) {
		a := post(t, ts.URL+"/panic", "p1", `{}`)
		require.Equal(t, 500, a.Status)
		a = post(t, ts.URL+"/poll", "p2", pollBody)
		require.Equal(t, 200, a.Status)
	})

	t.Run("process log", func(t *testing.T) {
		a := post(t, ts.URL+"/poll", "inv-process", pollBody)
		require.Equal(t, 200, a.Status)
		requireLogsContain(t, a.Logs, "msg=polled")
		a = post(t, ts.URL+"/panic", "inv-process-failed", `{}`)
		require.Equal(t, 500, a.Status)

		require.Eventually(t, func() bool { return accessLogged(&stdout, &stderr, "inv-process-failed") },
			10*time.Second, 5*time.Millisecond)
		for _, e := range entriesOf(t, processEntries(t, &stdout, &stderr), "inv-process") {
			require.NotEqual(t, "polled", e.msg, "a line in Logs is not in the process log too")
			require.NotEqual(t, "invocation", e.msg, "a success has no access line at Info: the host's request record shows it")
		}
		var access []hostEntry
		for _, e := range entriesOf(t, processEntries(t, &stdout, &stderr), "inv-process-failed") {
			if e.msg == "invocation" {
				access = append(access, e)
			}
		}
		require.Len(t, access, 1, "one access line per failed invocation")
		require.Equal(t, testenv.HostWarning, access[0].level)
		require.Equal(t, "panic", access[0].rec["function"])
		require.Equal(t, float64(500), access[0].rec["status"])
		require.Contains(t, access[0].rec, "duration_ms")
	})

	t.Run("panic stack in the process log", func(t *testing.T) {
		post(t, ts.URL+"/panic", "inv-stack", `{}`)
		var found bool
		for _, e := range entriesOf(t, processEntries(t, &stdout, &stderr), "inv-stack") {
			if e.msg == "handler panicked" {
				require.Equal(t, testenv.HostError, e.level)
				require.Contains(t, e.rec["stack"], "server_test.go")
				found = true
			}
		}
		require.True(t, found)
	})
}

func TestServerInvocationFields(t *testing.T) {
	got := make(chan *Invocation, 1)
	s := NewServer(nil, map[string]Handler{
		"poll": func(_ context.Context, inv *Invocation) (*Result, error) {
			got <- inv
			return nil, nil
		},
	})
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)

	a := post(t, ts.URL+"/poll", "", pollBody)
	require.Equal(t, 200, a.Status)
	inv := <-got
	require.Empty(t, inv.ID)
	require.Equal(t, "poll", inv.Function)
	require.Contains(t, inv.Data, "operation")
	require.Equal(t, `"\"m-1\""`, string(inv.Metadata["Id"]))
	require.NotNil(t, inv.Log)
}

func TestServerConcurrentInvocationsKeepTheirOwnLogs(t *testing.T) {
	s := NewServer(nil, map[string]Handler{
		"poll": func(_ context.Context, inv *Invocation) (*Result, error) {
			for i := range 5 {
				inv.Log.Info("step", "i", i)
			}
			return nil, nil
		},
	})
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)

	const n = 20
	results := make([]result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { results[i] = send(ts.URL+"/poll", `{}`, InvocationIDHeader, fmt.Sprintf("id-%d", i)) })
	}
	wg.Wait()
	for i, res := range results {
		require.NoError(t, res.err)
		a := readAnswer(t, res.resp)
		require.Equal(t, 200, a.Status)
		require.Len(t, a.Logs, 5)
		for _, line := range a.Logs {
			require.Contains(t, line, fmt.Sprintf("invocation_id=id-%d ", i))
		}
	}
}

func TestInvocationContextIsCanceledWhenTheCallerGoes(t *testing.T) {
	started := make(chan struct{})
	canceled := make(chan struct{})
	s := NewServer(nil, map[string]Handler{
		"poll": func(ctx context.Context, _ *Invocation) (*Result, error) {
			close(started)
			<-ctx.Done()
			close(canceled)
			return nil, ctx.Err()
		},
	})
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)

	ctx, cancel := context.WithCancel(t.Context())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/poll", strings.NewReader(`{}`))
	require.NoError(t, err)
	errc := make(chan error, 1)
	go func() {
		resp, err := ts.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	waitFor(t, started, "the handler to start")
	cancel()
	require.ErrorIs(t, <-errc, context.Canceled)
	waitFor(t, canceled, "the handler's context to be canceled")
}

// waitFor fails the test if ch is not closed within a generous bound, so
// that a broken server fails the test instead of hanging it.
func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		require.FailNow(t, "timed out waiting for "+what)
	}
}

// startServer runs s on a loopback listener until the returned cancel is
// called; done receives Serve's result.
func startServer(t *testing.T, s *Server) (url string, cancel context.CancelFunc, done <-chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(ctx, ln) }()
	t.Cleanup(cancel)
	return "http://" + ln.Addr().String(), cancel, errc
}

func TestServeDrainsInFlightInvocations(t *testing.T) {
	started := make(chan struct{})
	release := make(chan struct{})
	var returned atomic.Bool
	s := NewServer(nil, map[string]Handler{
		"poll": func(ctx context.Context, _ *Invocation) (*Result, error) {
			close(started)
			<-release
			defer returned.Store(true)
			// Shutting down must not cancel an invocation in flight.
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			return &Result{Outputs: map[string]any{"finished": true}}, nil
		},
	})
	url, stop, done := startServer(t, s)

	answers := make(chan result, 1)
	go func() { answers <- send(url+"/poll", `{}`) }()
	waitFor(t, started, "the handler to start")
	stop()

	// Serve is still draining: it has not returned, and new connections are
	// refused once the listener has closed.
	select {
	case err := <-done:
		require.Failf(t, "Serve returned while an invocation was in flight", "%v", err)
	default:
	}
	require.Eventually(t, func() bool {
		conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
		if err == nil {
			conn.Close()
		}
		return err != nil
	}, 10*time.Second, 10*time.Millisecond)

	close(release)
	res := <-answers
	require.NoError(t, res.err)
	a := readAnswer(t, res.resp)
	require.Equal(t, 200, a.Status, a.Logs)
	require.Equal(t, map[string]any{"finished": true}, a.Outputs)
	require.NoError(t, <-done)
	require.True(t, returned.Load(), "Serve returned after the invocation")
}

func TestServeGivesUpAfterTheDrainTimeout(t *testing.T) {
	started := make(chan struct{})
	canceled := make(chan struct{})
	s := NewServer(nil, map[string]Handler{
		"poll": func(ctx context.Context, _ *Invocation) (*Result, error) {
			close(started)
			<-ctx.Done()
			close(canceled)
			return nil, ctx.Err()
		},
	}, WithDrainTimeout(50*time.Millisecond))
	url, stop, done := startServer(t, s)

	go func() {
		resp, err := http.Post(url+"/poll", "application/json", strings.NewReader(`{}`))
		if err == nil {
			resp.Body.Close()
		}
	}()
	waitFor(t, started, "the handler to start")
	stop()
	err := <-done
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "draining")
	waitFor(t, canceled, "closing the connections to cancel the invocation")
}

func TestServeReturnsWhenTheListenerFails(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	require.NoError(t, ln.Close())
	err = NewServer(nil, nil).Serve(t.Context(), ln)
	require.ErrorContains(t, err, "serving on")
}

func TestNewServerRejectsBadRegistrations(t *testing.T) {
	ok := func(context.Context, *Invocation) (*Result, error) { return nil, nil }
	tests := []struct {
		name     string
		handlers map[string]Handler
	}{
		{name: "empty name", handlers: map[string]Handler{"": ok}},
		{name: "name with a slash", handlers: map[string]Handler{"a/b": ok}},
		{name: "name with a pattern", handlers: map[string]Handler{"{x}": ok}},
		{name: "nil handler", handlers: map[string]Handler{"scan": nil}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Panics(t, func() { NewServer(nil, tt.handlers) })
		})
	}
}

func TestOptions(t *testing.T) {
	tests := []struct {
		name      string
		opts      []Option
		wantBody  int64
		wantDrain time.Duration
	}{
		{name: "defaults", wantBody: 1 << 20, wantDrain: 30 * time.Second},
		{name: "set", opts: []Option{WithMaxBodyBytes(10), WithDrainTimeout(time.Second)}, wantBody: 10, wantDrain: time.Second},
		{name: "non-positive keeps defaults", opts: []Option{WithMaxBodyBytes(0), WithDrainTimeout(-1)}, wantBody: 1 << 20, wantDrain: 30 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewServer(nil, nil, tt.opts...)
			require.Equal(t, tt.wantBody, s.maxBodyBytes)
			require.Equal(t, tt.wantDrain, s.drainTimeout)
		})
	}
}

func TestListenAddr(t *testing.T) {
	tests := []struct {
		port    string
		want    string
		wantErr string
	}{
		{port: "7071", want: "127.0.0.1:7071"},
		{port: "1", want: "127.0.0.1:1"},
		{port: "65535", want: "127.0.0.1:65535"},
		{port: "08080", want: "127.0.0.1:8080"},
		{port: "", wantErr: "FUNCTIONS_CUSTOMHANDLER_PORT is not set"},
		{port: "0", wantErr: "FUNCTIONS_CUSTOMHANDLER_PORT"},
		{port: "65536", wantErr: "FUNCTIONS_CUSTOMHANDLER_PORT"},
		{port: "-1", wantErr: "FUNCTIONS_CUSTOMHANDLER_PORT"},
		{port: "+80", wantErr: "FUNCTIONS_CUSTOMHANDLER_PORT"},
		{port: " 80", wantErr: "FUNCTIONS_CUSTOMHANDLER_PORT"},
		{port: "http", wantErr: "FUNCTIONS_CUSTOMHANDLER_PORT"},
		{port: "0.0.0.0:80", wantErr: "FUNCTIONS_CUSTOMHANDLER_PORT"},
	}
	for _, tt := range tests {
		t.Run(tt.port, func(t *testing.T) {
			got, err := ListenAddr(tt.port)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}
