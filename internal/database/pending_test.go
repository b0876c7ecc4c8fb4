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
	p.ReadDetails([]byte(`{"id":"op","partitionKey":"sub","status":"Accepted","request":"Create","startTime":"2026-12-01T12:00:00.5Z","internalId":"/api/clusters_mgmt/v1/clusters/c"}`))
	require.Equal(t, database.PendingOperation{ID: "op", PartitionKey: "sub", Status: "Accepted", Request: "Create",
		StartTime: time.Date(2026, 12, 1, 12, 0, 0, 5e8, time.UTC), InternalID: "/api/clusters_mgmt/v1/clusters/c"}, p)

	// Ill-typed or missing details are left zero; the ids stay.
	p.ReadDetails([]byte(`{"id":"op","partitionKey":"sub","status":7,"request":{"a":1},"startTime":"yesterday","internalId":1}`))
	require.Equal(t, database.PendingOperation{ID: "op", PartitionKey: "sub"}, p)
	p.ReadDetails([]byte(`{"id":"op","partitionKey":"sub"}`))
	require.Equal(t, database.PendingOperation{ID: "op", PartitionKey: "sub"}, p)
}

// The listing reads status, request, startTime and internalId: scan skips
// what poll cannot act on by them, and its metrics count them.
func TestCosmosPendingOperationsReadDetails(t *testing.T) {
	ctx := context.Background()
	name, fe := newDatabase(t, 3*time.Second)
	client := newClient(t, cosmosConfig(t, name))
	start := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	require.NoError(t, fe.PutOperation(ctx, frontend.Operation{ID: "op1", PartitionKey: "sub1", Request: "Delete",
		Status: "Deleting", StartTime: start, InternalID: "/api/clusters_mgmt/v1/clusters/c"}))
	var got []database.PendingOperation
	for p, err := range client.PendingOperations(ctx) {
		require.NoError(t, err)
		got = append(got, p)
	}
	require.Equal(t, []database.PendingOperation{{ID: "op1", PartitionKey: "sub1", Status: "Deleting", Request: "Delete", StartTime: start,
		InternalID: "/api/clusters_mgmt/v1/clusters/c"}}, got)
}
