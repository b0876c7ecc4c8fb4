package database_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/internal/database"
)

func TestPendingOperationReadsDetailsLeniently(t *testing.T) {
	p := database.PendingOperation{ID: "op", PartitionKey: "sub"}
	p.ReadDetails([]byte(`{"id":"op","partitionKey":"sub","status":"Accepted","request":"Create","startTime":"2026-12-01T12:00:00.5Z","internalId":"/api/clusters_mgmt/v1/clusters/c","externalId":"/subscriptions/sub/x","_ts":1796126400}`))
	require.Equal(t, database.PendingOperation{ID: "op", PartitionKey: "sub", Status: "Accepted", Request: "Create",
		StartTime: time.Date(2026, 12, 1, 12, 0, 0, 5e8, time.UTC), InternalID: "/api/clusters_mgmt/v1/clusters/c",
		ExternalID: "/subscriptions/sub/x", LastWrite: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}, p)

	// Ill-typed or missing details are left zero; the ids stay.
	p.ReadDetails([]byte(`{"id":"op","partitionKey":"sub","status":7,"request":{"a":1},"startTime":"yesterday","internalId":1,"externalId":[],"_ts":"1796126400"}`))
	require.Equal(t, database.PendingOperation{ID: "op", PartitionKey: "sub"}, p)
	for _, ts := range []string{"-1", "0", "1e300", "null"} {
		p.ReadDetails([]byte(`{"id":"op","partitionKey":"sub","_ts":` + ts + `}`))
		require.Equal(t, database.PendingOperation{ID: "op", PartitionKey: "sub"}, p, ts)
	}
	p.ReadDetails([]byte(`{"id":"op","partitionKey":"sub"}`))
	require.Equal(t, database.PendingOperation{ID: "op", PartitionKey: "sub"}, p)
}

// The listing reads status, request, startTime, internalId and _ts: scan
// skips what poll cannot act on and what pickup has just checked by them,
// and its metrics count them.
func TestCosmosPendingOperationsReadDetails(t *testing.T) {
	ctx := context.Background()
	name, fe := newDatabase(t, 3*time.Second)
	client := newClient(t, cosmosConfig(t, name))
	start := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	before := time.Now().Truncate(time.Second)
	require.NoError(t, fe.PutOperation(ctx, frontend.Operation{ID: "op1", PartitionKey: "sub1", Request: "Delete",
		Status: "Deleting", StartTime: start, InternalID: "/api/clusters_mgmt/v1/clusters/c"}))
	after := time.Now()
	var got []database.PendingOperation
	for p, err := range client.PendingOperations(ctx) {
		require.NoError(t, err)
		got = append(got, p)
	}
	require.Len(t, got, 1)
	require.False(t, got[0].LastWrite.Before(before) || got[0].LastWrite.After(after),
		"the item's _ts %s, written between %s and %s", got[0].LastWrite, before, after)
	got[0].LastWrite = time.Time{}
	require.Equal(t, []database.PendingOperation{{ID: "op1", PartitionKey: "sub1", SubscriptionID: "sub1", Status: "Deleting", Request: "Delete", StartTime: start,
		InternalID: "/api/clusters_mgmt/v1/clusters/c"}}, got)
}
