package telemetry

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// The budget gauges report what the source gives at each collection, by
// group, and nothing without a source; the ledger's requests and charges
// are counted by kind.
func TestBudgetMetrics(t *testing.T) {
	_, reader := recorders(t)
	t.Cleanup(func() { ObserveBudget(nil) })
	got := collect(t, reader)
	require.NotContains(t, got, MetricBudgetPermits)

	fig := BudgetFigures{Group: "pickup", Permits: 6, Target: 8, Demand: 3}
	ObserveBudget(func() BudgetFigures { return fig })
	LedgerRequest(context.Background(), "replace", 412, 1)
	LedgerRequest(context.Background(), "replace", 200, 10.8)
	got = collect(t, reader)
	for name, want := range map[string]int64{MetricBudgetPermits: 6, MetricBudgetTarget: 8, MetricBudgetDemand: 3} {
		points := got[name].(metricdata.Gauge[int64]).DataPoints
		require.Len(t, points, 1, name)
		require.Equal(t, want, points[0].Value, name)
		require.Equal(t, "pickup", attrValue(points[0].Attributes, GroupKey), name)
	}
	fig.Permits = 0 // the lease ran out
	got = collect(t, reader)
	require.Zero(t, got[MetricBudgetPermits].(metricdata.Gauge[int64]).DataPoints[0].Value)

	requests := map[int64]int64{}
	for _, p := range got[MetricLedgerRequests].(metricdata.Sum[int64]).DataPoints {
		require.Equal(t, "replace", attrValue(p.Attributes, KindKey))
		code, _ := p.Attributes.Value(StatusCodeKey)
		requests[code.AsInt64()] += p.Value
	}
	require.Equal(t, map[int64]int64{200: 1, 412: 1}, requests)
	charge := got[MetricLedgerCharge].(metricdata.Sum[float64]).DataPoints
	require.Len(t, charge, 1)
	require.InDelta(t, 11.8, charge[0].Value, 1e-9)
}
