package functions

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/opstatus/opstatus/internal/telemetry"
)

// Each invocation runs in a span of its own that continues the host's
// traceparent, and ends with the invocation's answer.
func TestInvocationSpanContinuesTheHostTrace(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	t.Cleanup(telemetry.Use(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)), nil))
	var inHandler trace.SpanContext
	s := NewServer(nil, map[string]Handler{
		"poll": func(ctx context.Context, _ *Invocation) (*Result, error) {
			inHandler = trace.SpanContextFromContext(ctx)
			return &Result{}, nil
		},
		"scan": func(context.Context, *Invocation) (*Result, error) { return nil, BadRequest(errors.New("bad message")) },
	})
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	post := func(function string) {
		req, err := http.NewRequest(http.MethodPost, ts.URL+"/"+function, strings.NewReader(`{"Data":{},"Metadata":{}}`))
		require.NoError(t, err)
		req.Header.Set(InvocationIDHeader, "inv-"+function)
		req.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
	}
	post("poll")
	post("scan")

	spans := rec.Ended()
	require.Len(t, spans, 2)
	require.Equal(t, "poll", spans[0].Name())
	require.Equal(t, spans[0].SpanContext(), inHandler, "the handler runs in the invocation's span")
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", spans[0].SpanContext().TraceID().String())
	require.Equal(t, "00f067aa0ba902b7", spans[0].Parent().SpanID().String())
	require.Equal(t, "Unset", spans[0].Status().Code.String())
	require.Equal(t, "scan", spans[1].Name())
	require.Equal(t, "Error", spans[1].Status().Code.String(), "a 400 fails the invocation")
}

// A failed invocation is counted by function: a poll message that fails
// maxDequeueCount times goes to the poison queue, and the poison alert
// reads this count; a success counts nothing.
func TestFailedInvocationsCounted(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	t.Cleanup(telemetry.Use(nil, sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	// A function of its own: an invocation another test left in flight
	// (TestServeGivesUpAfterTheDrainTimeout's poll) may fail meanwhile,
	// counted by the same global meter.
	s := NewServer(nil, map[string]Handler{
		"counted": func(_ context.Context, inv *Invocation) (*Result, error) {
			if inv.ID == "bad" {
				return nil, BadRequest(errors.New("malformed"))
			}
			return &Result{}, nil
		},
	})
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	for _, id := range []string{"ok", "bad", "bad"} {
		req, err := http.NewRequest(http.MethodPost, ts.URL+"/counted", strings.NewReader(`{"Data":{},"Metadata":{}}`))
		require.NoError(t, err)
		req.Header.Set(InvocationIDHeader, id)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
	}
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	var got int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != telemetry.MetricInvocationsFailed {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				if fn, _ := dp.Attributes.Value(telemetry.FunctionKey); fn.AsString() == "counted" {
					got += dp.Value
				}
			}
		}
	}
	require.Equal(t, int64(2), got)
}
