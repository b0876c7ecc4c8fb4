package lock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/opstatus/opstatus/internal/database/databasetesting"
	"github.com/opstatus/opstatus/internal/lock"
	"github.com/opstatus/opstatus/internal/telemetry"
)

// The wait for a lock is a span and a point of opstatus.lock.wait, whether
// it ends with the lock or without; the work under the lock is not in it.
func TestLockWaitIsTraced(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	reader := sdkmetric.NewManualReader()
	t.Cleanup(telemetry.Use(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)),
		sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))

	m := databasetesting.NewMemoryClient(lock.MinTTL)
	l := lock.New(m.Locks(), lock.Options{Wait: 100 * time.Millisecond, RetryInterval: 20 * time.Millisecond})
	ctx := context.Background()
	var work trace.SpanContext
	require.NoError(t, l.Do(ctx, "SUB-1", "me", func(ctx context.Context) error {
		work = trace.SpanContextFromContext(ctx)
		return nil
	}))
	require.False(t, work.IsValid(), "the work runs under the caller's span, not the wait's")
	m.HoldLock("sub-2", "frontend", 10*time.Second)
	require.ErrorIs(t, l.Do(ctx, "sub-2", "me", func(context.Context) error { return nil }), lock.ErrHeld)

	spans := rec.Ended()
	require.Len(t, spans, 2)
	require.Equal(t, telemetry.SpanLockWait, spans[0].Name())
	require.Contains(t, spans[0].Attributes(), telemetry.SubscriptionIDKey.String("sub-1"))
	require.Equal(t, "Unset", spans[0].Status().Code.String())
	require.Equal(t, "Error", spans[1].Status().Code.String())

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	got := map[bool]uint64{}
	for _, dp := range rm.ScopeMetrics[0].Metrics[0].Data.(metricdata.Histogram[float64]).DataPoints {
		v, _ := dp.Attributes.Value(telemetry.AcquiredKey)
		got[v.AsBool()] = dp.Count
	}
	require.Equal(t, map[bool]uint64{true: 1, false: 1}, got)
}
