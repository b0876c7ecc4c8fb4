package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/clustersim"
	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/internal/testenv"
)

// pickupEnv is what makes the handler know that the host runs pickup: the
// settings of pickup/function.json and its connection.
func pickupEnv(cosmosEndpoint string) []string {
	return []string{
		"COSMOS_OPERATIONS_CONTAINER=" + frontend.OperationsContainer,
		"COSMOS_LEASES_CONTAINER=" + frontend.LeasesContainer,
		"COSMOS__accountEndpoint=" + cosmosEndpoint,
	}
}

// pickupBody is a pickup invocation as the host sends it: the feed's
// documents as the compact text of a JSON array, serialized as a string
// once more, and no trigger metadata beside the host's own.
func pickupBody(t *testing.T, docs ...map[string]any) []byte {
	t.Helper()
	arr, err := json.Marshal(docs)
	require.NoError(t, err)
	once, err := json.Marshal(string(arr))
	require.NoError(t, err)
	twice, err := json.Marshal(string(once))
	require.NoError(t, err)
	return []byte(`{"Data":{"operations":` + string(twice) + `},"Metadata":{"sys":{"MethodName":"pickup","UtcNow":"` +
		time.Now().UTC().Format(time.RFC3339Nano) + `","RandGuid":"0f8fad5b-d9cb-469f-a165-70867728950e"}}}`)
}

// A new operation is checked once by pickup, from the documents of a
// change-feed batch as the host delivers them, in the invocation: a Create
// the frontend wrote Accepted, and a Delete it wrote Deleting. What the
// batch holds besides (opstatus's own write) is not. scan leaves the
// operations, still in their first status, to pickup until an interval has
// passed since their write, and sends them after that.
//
// The Operations items are in their subscriptions' partitions, or all in
// one fixed partition.
func TestPickupThroughTheHandler(t *testing.T) {
	for _, mode := range partitionModes {
		t.Run(mode.name, func(t *testing.T) { pickupThroughTheHandler(t, mode.env) })
	}
}

func pickupThroughTheHandler(t *testing.T, env []string) {
	s := startStack(t, slices.Concat(pickupEnv(testenv.SharedCosmos(t).Endpoint), []string{"SCAN_SCHEDULE=*/4 * * * * *"}, env)...)
	ctx := context.Background()
	hour := clustersim.Duration(time.Hour)
	require.NoError(t, s.sim.AddCluster("pending", clustersim.Script{Pending: hour}))
	require.NoError(t, s.sim.AddCluster("installing", clustersim.Script{Installing: hour}))
	require.NoError(t, s.sim.AddCluster("mine", clustersim.Script{Installing: hour}))
	require.NoError(t, s.sim.AddCluster("deleting", clustersim.Script{}))
	require.NoError(t, s.sim.DeleteCluster("deleting", time.Hour))
	s.seed(subA, "op-pending", "Create", "Accepted", clusterKey(subA, "pending"), "/api/aro_hcp/v1alpha1/clusters/pending")
	s.seed(subA, "op-installing", "Create", "Accepted", clusterKey(subA, "installing"), "/api/aro_hcp/v1alpha1/clusters/installing")
	s.seed(subB, "op-mine", "Create", "Provisioning", clusterKey(subB, "mine"), "/api/aro_hcp/v1alpha1/clusters/mine")
	s.seed(subB, "op-delete", "Delete", "Deleting", clusterKey(subB, "deleting"), "/api/aro_hcp/v1alpha1/clusters/deleting")
	// op-mine is an old operation opstatus has just written.
	mine, err := s.fe.Operation(ctx, subB, "op-mine")
	require.NoError(t, err)
	mine["startTime"] = time.Now().Add(-time.Hour).UTC().Format(time.RFC3339Nano)
	body, err := json.Marshal(mine)
	require.NoError(t, err)
	require.NoError(t, s.fe.PutRawOperation(ctx, mine["partitionKey"].(string), body))
	var docs []map[string]any
	for _, ref := range [][2]string{{subA, "op-pending"}, {subA, "op-installing"}, {subB, "op-mine"}, {subB, "op-delete"}} {
		doc, err := s.fe.Operation(ctx, ref[0], ref[1])
		require.NoError(t, err)
		require.Contains(t, doc, "_ts", "the feed's documents carry their system fields")
		docs = append(docs, doc)
	}

	r, raw := s.post("pickup", pickupBody(t, docs...))
	require.Equal(t, http.StatusOK, r.Status, string(raw))
	require.JSONEq(t, `{"unchanged":2,"updated":1}`, string(r.ReturnValue))
	require.Equal(t, int64(3), s.sim.Stats().Requests[clustersim.PathKindAROHCPCluster],
		"one call for each new operation, the Delete too, none for opstatus's own write")
	require.Equal(t, "Accepted", s.opStatus(subA, "op-pending"))
	require.Equal(t, "Provisioning", s.opStatus(subA, "op-installing"))
	require.Equal(t, "Deleting", s.opStatus(subB, "op-delete"))
	s.requireLog(t, r, anyLevel, "picked up", "documents=4", "operations=3", "ignored=1")

	listed := func() []string {
		var out []string
		for _, m := range s.scan() {
			out = append(out, m["subscriptionId"]+"/"+m["operationId"])
		}
		return out
	}
	require.Equal(t, []string{subB + "/op-mine"}, listed(),
		"the new operations pickup checked, answered or not, are not sent again within their first interval")
	require.Eventually(t, func() bool {
		l := listed()
		return slices.Contains(l, subA+"/op-pending") && slices.Contains(l, subA+"/op-installing") && slices.Contains(l, subB+"/op-delete")
	}, 20*time.Second, 500*time.Millisecond, "an interval after their writes, scan sends them")
	require.Equal(t, int64(3), s.sim.Stats().Requests[clustersim.PathKindAROHCPCluster], "scan itself calls no one")

	r, raw = s.post("pickup", []byte(`{"Data":{"operations":"{\"id\":\"x\"}"},"Metadata":{}}`))
	require.Equal(t, http.StatusBadRequest, r.Status, string(raw))
}
