package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/clustersim"
	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/internal/testenv"
)

// TestRefusedWriteIsLoggedThroughTheHandler: an Operations item the
// frontend wrote just under Cosmos DB's 2 MB, which the deadline's error
// would take over it, is refused by the Cosmos test server (413) at every
// poll: the built handler logs it at Error, once a poll, with the container
// and the answer, and leaves the operation as it was.
func TestRefusedWriteIsLoggedThroughTheHandler(t *testing.T) {
	s := startStack(t, "OPERATION_DEADLINE_CREATE=30m")
	require.NoError(t, s.sim.AddCluster("big", clustersim.Script{Installing: clustersim.Duration(24 * time.Hour)}))
	ctx := context.Background()
	start := time.Now().UTC().Add(-31 * time.Minute)
	key := clusterKey(subA, "big")
	op := frontend.Operation{ID: "big", PartitionKey: subA, Request: "Create", Status: "Provisioning",
		ExternalID: key, InternalID: "/api/aro_hcp/v1alpha1/clusters/big", StartTime: start, LastTransitionTime: start,
		Extra: map[string]any{"padding": ""}}
	// The frontend's body: the item's fields, sorted, with the padding.
	size := func() int {
		b, err := json.Marshal(op)
		require.NoError(t, err)
		var m map[string]any
		require.NoError(t, json.Unmarshal(b, &m))
		for k, v := range op.Extra {
			m[k] = v
		}
		b, err = json.Marshal(m)
		require.NoError(t, err)
		return len(b)
	}
	op.Extra["padding"] = strings.Repeat("x", testenv.MaxRequestBytes-40-size())
	require.Equal(t, testenv.MaxRequestBytes-40, size())
	require.NoError(t, s.fe.PutOperation(ctx, op))
	require.NoError(t, s.fe.PutResource(ctx, frontend.Resource{ID: "res-big", PartitionKey: subA, Key: key,
		InternalID: "/api/aro_hcp/v1alpha1/clusters/big", ActiveOperationID: "big", ProvisioningState: "Provisioning"}))
	s.clock.Advance(time.Hour) // the simulator's cluster is installing

	for range 2 {
		r := s.poll(fmt.Sprintf(`{"subscriptionId":%q,"operationId":%q}`, subA, "big"))
		require.Equal(t, http.StatusOK, r.Status, r.Logs)
		require.Equal(t, "deferred", outcome(t, r))
		s.requireLog(t, r, testenv.HostError, "Cosmos DB refused a write for good", `"container":"Operations"`,
			`"status_code":413`, "RequestEntityTooLarge: Request size is too large")
		var refusals int
		for _, l := range s.hostLines(r) {
			if l.contains("Cosmos DB refused a write for good") {
				refusals++
			}
		}
		require.Equal(t, 1, refusals, "one line per operation and poll")
		require.Equal(t, "Provisioning", s.opStatus(subA, "big"))
	}
}

// TestClusterBillsInThe2024Layout: against a Billing container keyed by
// /partitionKey, as ARO-HCP created it in 2024-10, the built handler
// writes a created cluster's billing item with its subscription in
// partitionKey, and a finished Delete closes it; the container's path is
// read at the first billing write, here after the handler started against
// another.
func TestClusterBillsInThe2024Layout(t *testing.T) {
	s := startStack(t)
	ctx := context.Background()
	cosmos := testenv.SharedCosmos(t)
	client, err := testenv.NewCosmosClient(cosmos.Endpoint, cosmos.Key)
	require.NoError(t, err)
	old, err := client.NewContainer(s.db, frontend.BillingContainer)
	require.NoError(t, err)
	_, err = old.Delete(ctx, nil)
	require.NoError(t, err)
	db, err := client.NewDatabase(s.db)
	require.NoError(t, err)
	_, err = db.CreateContainer(ctx, azcosmos.ContainerProperties{ID: frontend.BillingContainer,
		PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{Paths: []string{"/partitionKey"}}}, nil)
	require.NoError(t, err)
	billing, err := client.NewContainer(s.db, frontend.BillingContainer)
	require.NoError(t, err)

	const hcp = "/api/aro_hcp/v1alpha1/clusters/"
	key := clusterKey(subC, "bk")
	require.NoError(t, s.sim.AddCluster("bk", clustersim.Script{Installing: clustersim.Duration(5 * time.Second)}))
	s.seed(subC, "bk-create", "Create", "Accepted", key, hcp+"bk")
	s.clock.Advance(20 * time.Second)
	require.Equal(t, "updated", s.pollOp(subC, "bk-create"))
	require.Equal(t, "Succeeded", s.opStatus(subC, "bk-create"))
	id := database.BillingID(key, "bk")
	resp, err := billing.ReadItem(ctx, azcosmos.NewPartitionKeyString(subC), id, nil)
	require.NoError(t, err, "the item is in the subscription's partition")
	var item map[string]any
	require.NoError(t, json.Unmarshal(resp.Value, &item))
	require.Equal(t, subC, item["partitionKey"])
	require.Equal(t, subC, item["subscriptionId"])
	require.NotContains(t, item, "deletionTime")

	require.NoError(t, s.sim.DeleteCluster("bk", 5*time.Second))
	s.seed(subC, "bk-delete", "Delete", "Deleting", key, hcp+"bk")
	s.clock.Advance(20 * time.Second)
	require.Equal(t, "deleted", s.pollOp(subC, "bk-delete"))
	resp, err = billing.ReadItem(ctx, azcosmos.NewPartitionKeyString(subC), id, nil)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(resp.Value, &item))
	require.Contains(t, item, "deletionTime")
	require.Equal(t, subC, item["partitionKey"])
}
