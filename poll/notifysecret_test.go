package poll

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/internal/database/databasetesting"
	"github.com/opstatus/opstatus/internal/lock"
	"github.com/opstatus/opstatus/internal/queuemsg"
	"github.com/opstatus/opstatus/internal/telemetry"
)

// TestFailedNotificationLogsNoQuery: the query of a notificationUri (its
// signature) reaches neither the log lines nor the span of a failed
// delivery; its scheme, host and path do.
func TestFailedNotificationLogsNoQuery(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	t.Cleanup(telemetry.Use(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)), nil))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // a refused connection: the delivery fails
	uri := "http://" + addr + "/subscriptions/sub/notify?api-version=2020-01-01&sig=SECRET-SIGNATURE"

	db := databasetesting.NewMemoryClient(5 * time.Second)
	now := time.Now().UTC()
	f := New(Config{DB: db, Locker: lock.New(db.Locks(), lock.Options{}), Notifier: arm.NewNotifier(true), Now: func() time.Time { return now }})
	db.PutOperation(&database.Operation{ID: "op", PartitionKey: "sub", Request: arm.RequestCreate,
		Status: arm.ProvisioningStateSucceeded, LastTransitionTime: now.Add(-time.Minute), NotificationURI: uri})
	ctx := context.Background()
	op, err := db.GetOperation(ctx, "sub", "op")
	require.NoError(t, err)

	var logs bytes.Buffer
	r := &run{f: f, log: slog.New(slog.NewJSONHandler(&logs, nil)), owner: "this"}
	it := &item{msg: queuemsg.Operation{SubscriptionID: "sub", OperationID: "op"}, log: r.log, op: op, ended: op, outcome: OutcomeDone}
	r.notifyAll(ctx, []*item{it})
	require.Equal(t, OutcomeDeferred, it.outcome)

	require.Contains(t, logs.String(), "notification failed")
	require.Contains(t, logs.String(), "http://"+addr+"/subscriptions/sub/notify")
	var spans strings.Builder
	for _, s := range rec.Ended() {
		spans.WriteString(s.Status().Description + "\n")
		for _, e := range s.Events() {
			for _, kv := range e.Attributes {
				spans.WriteString(kv.Value.String() + "\n")
			}
		}
	}
	require.Contains(t, spans.String(), "/subscriptions/sub/notify", "the span records the failure")
	for _, text := range []string{logs.String(), spans.String()} {
		require.NotContains(t, text, "SECRET-SIGNATURE")
		require.NotContains(t, text, "api-version")
	}
}
