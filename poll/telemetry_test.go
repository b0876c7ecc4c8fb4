package poll_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/internal/telemetry"
	"github.com/opstatus/opstatus/poll"
)

// telemetryFixture is a fixture whose spans and metrics are recorded; the
// providers are installed before the Cluster Service client is built.
func telemetryFixture(t *testing.T) (*fixture, *tracetest.SpanRecorder, *sdkmetric.ManualReader) {
	rec := tracetest.NewSpanRecorder()
	reader := sdkmetric.NewManualReader()
	t.Cleanup(telemetry.Use(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)),
		sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	return newFixture(t), rec, reader
}

func attr(s sdktrace.ReadOnlySpan, k attribute.Key) string {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value.String()
		}
	}
	return ""
}

// metricPoints returns the points of every metric collected, as
// "name{k=v,...}" -> value (a histogram's count).
func metricPoints(t *testing.T, reader *sdkmetric.ManualReader) map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	out := map[string]float64{}
	key := func(name string, set attribute.Set) string {
		return name + "{" + set.Encoded(attribute.DefaultEncoder()) + "}"
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					out[key(m.Name, dp.Attributes)] = float64(dp.Value)
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					out[key(m.Name, dp.Attributes)] = float64(dp.Count)
					out[key(m.Name, dp.Attributes)+".sum"] = dp.Sum
				}
			}
		}
	}
	return out
}

// A message's operations each get a span with the ARO-HCP attributes, and
// the Cluster Service request, the lock wait and the notification are
// traced under them; the outcomes, a deadline, the message's age and the
// timings are counted.
func TestPollTracesEachOperationAndCounts(t *testing.T) {
	f, rec, reader := telemetryFixture(t)
	f.fn.Deadlines = poll.Deadlines{Create: time.Hour}
	for _, op := range []database.Operation{
		{ID: "op", Request: arm.RequestCreate, Status: arm.ProvisioningStateAccepted, StartTime: f.now.Add(-time.Minute)},
		{ID: "late", Request: arm.RequestCreate, Status: arm.ProvisioningStateAccepted, StartTime: f.now.Add(-2 * time.Hour),
			NotificationURI: f.armURL},
	} {
		f.putOp(op)
	}
	f.db.PutResource(&database.Resource{ID: "r1", PartitionKey: sub, Key: clusterKey, InternalID: clusterCS,
		ActiveOperationID: "op", ProvisioningState: arm.ProvisioningStateAccepted})
	f.cs.SetStatus(clusterCS, 200, clusterStatus("installing"))

	msg := fmt.Sprintf(`{"operations":[{"subscriptionId":%q,"operationId":"op"},{"subscriptionId":%q,"operationId":"late"}],"scannedAt":%q}`,
		sub, sub, f.now.Add(-2*time.Second).Format(time.RFC3339))
	res, err := f.invokeAt(t, msg, f.now)
	require.NoError(t, err)
	require.Equal(t, poll.Tally{poll.OutcomeUpdated: 2}, res.ReturnValue)

	ops := map[string]sdktrace.ReadOnlySpan{}
	byID := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		byID[s.SpanContext().SpanID().String()] = s
		if s.Name() == telemetry.SpanPollOperation {
			ops[attr(s, telemetry.OperationIDKey)] = s
		}
	}
	require.Len(t, ops, 2)
	for id, s := range ops {
		require.Equal(t, sub, attr(s, telemetry.SubscriptionIDKey), id)
		require.Equal(t, "Create", attr(s, telemetry.OperationTypeKey), id)
		require.Equal(t, "Accepted", attr(s, telemetry.OperationStatusKey), id)
		require.Equal(t, "c1", attr(s, telemetry.ResourceNameKey), id)
		require.Equal(t, "abc", attr(s, telemetry.ClusterIDKey), id)
		require.Equal(t, "installing", attr(s, telemetry.ClusterStateKey), id)
		require.Equal(t, "updated", attr(s, "opstatus.outcome"), id)
	}
	under := func(s sdktrace.ReadOnlySpan) string {
		return attr(byID[s.Parent().SpanID().String()], telemetry.OperationIDKey)
	}
	found := map[string][]string{}
	for _, s := range rec.Ended() {
		if s.Parent().IsValid() && byID[s.Parent().SpanID().String()] != nil && byID[s.Parent().SpanID().String()].Name() == telemetry.SpanPollOperation {
			found[s.Name()] = append(found[s.Name()], under(s))
		}
	}
	require.ElementsMatch(t, []string{"op", "late"}, found[telemetry.SpanClusterService], "each operation's Cluster Service call is under it")
	require.ElementsMatch(t, []string{"op", "late"}, found[telemetry.SpanLockWait],
		"the writes of both in one hold, under the first; then the hold that records the notification, under its operation")
	require.Equal(t, []string{"late"}, found[telemetry.SpanNotify], "the notification is under its operation")

	points := metricPoints(t, reader)
	require.Equal(t, 2.0, points[telemetry.MetricPollOperations+"{outcome=updated,request=Create}"])
	require.Equal(t, 1.0, points[telemetry.MetricPastDeadline+"{request=Create}"])
	require.Equal(t, 1.0, points[telemetry.MetricMessageAge+"{}"])
	require.Equal(t, 2.0, points[telemetry.MetricMessageAge+"{}.sum"], "scanned 2 s before the poll")
	require.Equal(t, 1.0, points[telemetry.MetricPollDuration+"{}"])
	require.Equal(t, 2.0, points[telemetry.MetricClusterServiceDuration+"{status_code=200}"])
	require.Equal(t, 2.0, points[telemetry.MetricLockWait+"{acquired=true}"], "the writes, then the notification")
}

// A message dropped whole counts its operations, with no request.
func TestPollCountsASupersededMessage(t *testing.T) {
	f, _, reader := telemetryFixture(t)
	msg := fmt.Sprintf(`{"operations":[{"subscriptionId":%q,"operationId":"a"},{"subscriptionId":%q,"operationId":"b"}],"scannedAt":%q}`,
		sub, sub, f.now.Add(-time.Minute).Format(time.RFC3339))
	res, err := f.invokeAt(t, msg, f.now.Add(-time.Minute))
	require.NoError(t, err)
	require.Equal(t, poll.Tally{poll.OutcomeSuperseded: 2}, res.ReturnValue)
	points := metricPoints(t, reader)
	require.Equal(t, 2.0, points[telemetry.MetricPollOperations+"{outcome=superseded}"])
	require.Zero(t, f.cs.Calls())
}
