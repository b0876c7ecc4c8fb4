package hostemu

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// traceparentRE is a W3C traceparent as .NET's Activity writes it: version
// 00, lowercase hex ids, flags.
var traceparentRE = regexp.MustCompile(`^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$`)

// Every invocation carries a traceparent of its own, as the host's
// HttpClient sends one (DiagnosticsHandler) and the payload has none.
func TestInvocationsCarryATraceparent(t *testing.T) {
	var mu sync.Mutex
	var got []http.Header
	var bodies []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Clone())
		mu.Unlock()
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(body))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"Outputs":{},"Logs":[],"ReturnValue":null}`))
	}))
	defer srv.Close()
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	require.NoError(t, err)
	p, err := strconv.Atoi(port)
	require.NoError(t, err)

	var recorded []Invocation
	h := &Host{log: slog.New(slog.DiscardHandler)}
	h.stats.invocations = map[InvocationKey]int64{}
	h.opts.OnInvocation = func(inv Invocation) { recorded = append(recorded, inv) }
	in := &Instance{h: h, client: srv.Client(), cur: &handlerProc{port: p}, ready: true, changed: make(chan struct{})}
	fn := &Function{Name: "poll"}
	for range 2 {
		require.True(t, in.invoke(context.Background(), fn, map[string]any{"operation": "m"}, nil, 1))
	}

	require.Len(t, got, 2)
	require.Len(t, recorded, 2)
	for i, hdr := range got {
		require.Len(t, hdr.Values("Traceparent"), 1)
		tp := hdr.Get("Traceparent")
		require.Regexp(t, traceparentRE, tp)
		require.NotContains(t, tp, "-00000000000000000000000000000000-", "a valid trace id")
		require.Equal(t, recorded[i].TraceParent, tp, "the invocation records what it sent")
		require.NotContains(t, bodies[i], tp, "the payload carries no trace context")
	}
	require.NotEqual(t, got[0].Get("Traceparent")[3:35], got[1].Get("Traceparent")[3:35], "each invocation is a trace of its own")
}
