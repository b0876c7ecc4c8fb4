package e2e

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/clustersim"
	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/internal/budget"
	"github.com/opstatus/opstatus/internal/testenv"
)

// The built handler with a budget creates the ledger in Leases, where none
// is, under the fence (holding the whole budget, using none of it for
// the 30 s expiry time): a message waits for permits only until a later
// scan supersedes it, so the messages of the fence's first 30 s are
// dropped as superseded, calling nothing; the first after it is checked
// within the process's permits, and the ledger holds its entry.
func TestHandlerSharesTheBudgetThroughTheLedger(t *testing.T) {
	s := startStack(t, "CLUSTER_SERVICE_BUDGET=4", "COSMOS_LEASES_CONTAINER="+frontend.LeasesContainer)
	require.NoError(t, s.sim.AddCluster("ca", clustersim.Script{Installing: clustersim.Duration(time.Hour)}))
	s.seed(subA, "op", "Create", "Accepted", clusterKey(subA, "ca"), "/api/aro_hcp/v1alpha1/clusters/ca")
	require.Equal(t, "superseded", s.pollOp(subA, "op"))
	require.Equal(t, "Accepted", s.opStatus(subA, "op"))
	outcome := "superseded"
	for i := 0; outcome == "superseded" && i < 5; i++ {
		outcome = s.pollOp(subA, "op")
	}
	require.Equal(t, "updated", outcome)
	require.Equal(t, "Provisioning", s.opStatus(subA, "op"))

	cosmos := testenv.SharedCosmos(t)
	client, err := testenv.NewCosmosClient(cosmos.Endpoint, cosmos.Key)
	require.NoError(t, err)
	leases, err := client.NewContainer(s.db, frontend.LeasesContainer)
	require.NoError(t, err)
	resp, err := leases.ReadItem(context.Background(), testenv.PK(budget.ID), budget.ID, nil)
	require.NoError(t, err)
	var l budget.Ledger
	require.NoError(t, json.Unmarshal(resp.Value, &l))
	require.NotEmpty(t, l.Epoch)
	require.Equal(t, 4, l.Budget)
	require.Len(t, l.Holders, 1)
	for _, e := range l.Holders {
		require.Equal(t, budget.GroupPoll, e.Group)
		require.LessOrEqual(t, e.Permits, 4)
		require.Greater(t, e.Seq, int64(1), "renewed at least once while waiting out the fence")
	}
}
