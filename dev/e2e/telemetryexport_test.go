package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/clustersim"
	"github.com/opstatus/opstatus/dev/otlpsink"
	"github.com/opstatus/opstatus/internal/telemetry"
	"github.com/opstatus/opstatus/internal/testenv"
)

// exportMargin is the time an export itself may take after its interval,
// on a loaded machine.
const exportMargin = 2 * time.Second

// pollTraced delivers a one-operation message as poll does, with the
// traceparent header the host's HttpClient adds.
func (s *handlerStack) pollTraced(sub, op, traceparent string) response {
	s.t.Helper()
	id := fmt.Sprintf("poll-%d", time.Now().UnixNano())
	req, err := http.NewRequest(http.MethodPost, s.url+"/poll",
		strings.NewReader(string(envelope(pollData(fmt.Sprintf(`{"subscriptionId":%q,"operationId":%q}`, sub, op))))))
	require.NoError(s.t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Azure-Functions-InvocationId", id)
	req.Header.Set("Traceparent", traceparent)
	r, _ := s.do(req, id)
	require.Equal(s.t, http.StatusOK, r.Status, r.Logs)
	return r
}

// invocationSpan returns the span of invocation id, if it has arrived.
func invocationSpan(sink *otlpsink.Sink, function, id string) (otlpsink.Span, bool) {
	for _, sp := range sink.SpansNamed(function) {
		if sp.Attrs["faas.invocation_id"] == id {
			return sp, true
		}
	}
	return otlpsink.Span{}, false
}

// The host never sends SIGTERM: after its drain it SIGKILLs the handler. With
// no export setting, what a poll did reaches the receiver within
// telemetry.ExportInterval while the handler runs, and a SIGKILL right after
// the last invocation's answer loses nothing of an invocation that ended an
// interval before it, nor leaves the lock that invocation took.
func TestTelemetryLeavesTheProcessBeforeAKill(t *testing.T) {
	sink, err := otlpsink.Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = sink.Close() })
	s := startStack(t, "OTEL_EXPORTER_OTLP_ENDPOINT="+sink.URL, "OTEL_SERVICE_NAME=opstatus-kill")
	sub := "eeeeeeee-0000-4000-8000-000000000024"
	for _, c := range []string{"k1", "k2", "k3"} {
		require.NoError(t, s.sim.AddCluster(c, clustersim.Script{Installing: clustersim.Duration(time.Hour)}))
		s.seed(sub, "op-"+c, "Create", "Accepted", clusterKey(sub, c), "/api/aro_hcp/v1alpha1/clusters/"+c)
	}
	const unsampled = "00-24242424242424242424242424242424-2424242424242424-00"
	updated := func() float64 {
		return sink.Total(telemetry.MetricPollOperations, map[string]string{"outcome": "updated"})
	}

	// While the handler runs: within the interval, not at exit.
	first := s.pollTraced(sub, "op-k1", unsampled)
	require.Equal(t, "updated", outcome(t, first))
	require.True(t, testenv.WaitFor(t.Context(), telemetry.ExportInterval+exportMargin, 50*time.Millisecond, func() bool {
		_, ok := invocationSpan(sink, "poll", first.ID)
		return ok && updated() == 1
	}), "the poll's span and count arrive within %s while the handler runs", telemetry.ExportInterval)

	// An invocation that ended an interval before the kill...
	second := s.pollTraced(sub, "op-k2", unsampled)
	require.Equal(t, "updated", outcome(t, second))
	time.Sleep(telemetry.ExportInterval + exportMargin)
	// ...and the last one, which took the lock, answered just before it.
	last := s.pollTraced(sub, "op-k3", unsampled)
	require.Equal(t, "updated", outcome(t, last))
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGKILL))
	_ = s.cmd.Wait()

	// The lock was released before the answer: the frontend takes it at once.
	l, ok, err := s.fe.TryLock(context.Background(), sub, "frontend")
	require.NoError(t, err)
	require.True(t, ok, "the killed handler left the subscription lock behind")
	require.NoError(t, s.fe.Unlock(context.Background(), l))

	// Requests that were whole when the process died are decoded meanwhile.
	testenv.WaitFor(t.Context(), time.Second, 20*time.Millisecond, func() bool { return updated() >= 2 })
	_, ok = invocationSpan(sink, "poll", second.ID)
	require.True(t, ok, "the span of the poll an interval before the kill arrived")
	var opSpan bool
	for _, sp := range sink.SpansNamed(telemetry.SpanPollOperation) {
		opSpan = opSpan || sp.Attrs["aro.operation.id"] == "op-k2"
	}
	require.True(t, opSpan, "so did its operation's")
	// Counters are cumulative: any export after the second poll counts it.
	require.GreaterOrEqual(t, updated(), 2.0, "its count arrived")
}

// Whether the host's traceparent is marked sampled depends on its telemetry
// set-up (with Application Insights never): by default an invocation is
// traced whatever its flag; OTEL_TRACES_SAMPLER=parentbased_always_on
// follows the flag and records nothing under an unsampled one.
func TestUnsampledTraceparentIsTraced(t *testing.T) {
	tests := []struct {
		name    string
		env     []string
		spans   bool
		cluster string
	}{
		{name: "default", spans: true, cluster: "u1"},
		{name: "parentbased_always_on", env: []string{"OTEL_TRACES_SAMPLER=parentbased_always_on"}, cluster: "u2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sink, err := otlpsink.Start()
			require.NoError(t, err)
			t.Cleanup(func() { _ = sink.Close() })
			s := startStack(t, append([]string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + sink.URL}, tt.env...)...)
			sub := "eeeeeeee-0000-4000-8000-000000000124"
			require.NoError(t, s.sim.AddCluster(tt.cluster, clustersim.Script{Installing: clustersim.Duration(time.Hour)}))
			s.seed(sub, "op-"+tt.cluster, "Create", "Accepted", clusterKey(sub, tt.cluster), "/api/aro_hcp/v1alpha1/clusters/"+tt.cluster)
			r := s.pollTraced(sub, "op-"+tt.cluster, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00")
			require.Equal(t, "updated", outcome(t, r))

			// SIGTERM flushes all that was recorded: what is not there
			// after the exit was never recorded.
			require.NoError(t, s.cmd.Process.Signal(syscall.SIGTERM))
			require.NoError(t, s.cmd.Wait(), "the handler exits cleanly")
			require.Equal(t, 1.0, sink.Total(telemetry.MetricPollOperations, map[string]string{"outcome": "updated"}),
				"metrics, which no sampler drops, were flushed")
			if !tt.spans {
				// Only the start's reads of the containers, traces of
				// their own, were recorded: nothing of the invocation.
				start := map[string]bool{}
				for _, sp := range sink.Spans() {
					if strings.HasPrefix(sp.Name, "read_container ") {
						start[sp.TraceID] = true
					}
				}
				for _, sp := range sink.Spans() {
					require.True(t, start[sp.TraceID], "span %q of the invocation recorded", sp.Name)
				}
				return
			}
			sp, ok := invocationSpan(sink, "poll", r.ID)
			require.True(t, ok, "the invocation is traced")
			require.Equal(t, "0af7651916cd43dd8448eb211c80319c", sp.TraceID, "in the host's trace")
			require.Equal(t, "b7ad6b7169203331", sp.ParentID)
			require.NotEmpty(t, sink.SpansNamed(telemetry.SpanPollOperation))
			require.NotEmpty(t, sink.SpansNamed(telemetry.SpanClusterService))
		})
	}
}
