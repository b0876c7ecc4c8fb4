package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/clustersim"
	"github.com/opstatus/opstatus/internal/testenv"
)

// authOp is an operation on external auth ea0 of its own cluster whose
// lifecycle lasts an hour, with the parent cluster's Resources item beside
// its own.
func authOp(sub, id, kind, request string) op {
	o := op{Sub: sub, ID: id, Kind: kind, Request: request, Start: "Accepted", Cluster: "c-" + id, Auth: "ea0",
		API: hcpAPI, Life: time.Hour}
	o.Items = []resourceItem{
		{ID: "r-" + id, Key: o.key(), InternalID: o.internalID(), Active: id, State: o.Start},
		{ID: "r-" + id + "-parent", Key: o.clusterKey(), InternalID: o.API + o.Cluster, State: "Succeeded"},
	}
	return o
}

// TestExternalAuthWithoutStatus serves every external auth without a
// status, the simulator's fault that TestChaos leaves out because it ends a
// Create at once: a Create and an Update whose lifecycles last an hour end
// Succeeded, as the contract has it for an object without a state, while a
// Delete is left as it was until the fault ends and Cluster Service says
// uninstalling.
func TestExternalAuthWithoutStatus(t *testing.T) {
	// It runs after TestChaos (not parallel), alongside the other short ones.
	t.Parallel()
	testenv.NeedsServers(t)
	runSeed := seed(t)
	ctx := context.Background()
	e := startEnv(t, envOptions{lockTTL: 5 * time.Second, seed: runSeed, recordCalls: true,
		sim: clustersim.Faults{ExternalAuthNoStatus: true}})
	sub := subscriptions(1, "nostatus")[0]
	create, update := authOp(sub, "ns-create", kindAuthCreate, "Create"), authOp(sub, "ns-update", kindAuthUpdate, "Update")
	del := authOp(sub, "ns-delete", kindAuthDelete, "Delete")
	create.Want, update.Want, del.Want = "Succeeded", "Succeeded", "Deleting"
	done := []op{create, update}
	require.NoError(t, seedOps(ctx, e, []op{create, update, del}))

	// The delete is read twice: the poll of the first read has ended by the
	// second. A delete that ended is wrong already.
	var items map[string]item
	ended := testenv.WaitFor(ctx, 4*scanInterval, 500*time.Millisecond, func() bool {
		var err error
		if items, err = e.db.operations(ctx); err != nil {
			return false
		}
		ok, _ := settled(items, done)
		return ok && (len(e.s.Sim.Calls()[del.internalID()]) >= 2 || terminal(items[del.ID].str("status")))
	})
	require.True(t, ended, "the create and update end, and the delete is read twice")
	items, err := e.db.operations(ctx)
	require.NoError(t, err)
	resItems, err := e.db.resources(ctx)
	require.NoError(t, err)
	require.Equal(t, "Accepted", items[del.ID].str("status"), "a delete without a status is left as it was")
	require.Equal(t, "Accepted", resItems["r-"+del.ID].str("provisioningState"))
	require.Equal(t, del.ID, resItems["r-"+del.ID].str("activeOperationId"))
	require.Empty(t, notificationProblems(done, items, notifications(e)))
	require.Positive(t, e.s.Sim.Stats().Faults[clustersim.FaultExternalAuthNoStatus])

	// With the status back, the delete moves.
	require.NoError(t, e.s.Sim.SetFaults(clustersim.Faults{}))
	require.True(t, testenv.WaitFor(ctx, 4*scanInterval, 500*time.Millisecond, func() bool {
		items, err = e.db.operations(ctx)
		return err == nil && items[del.ID].str("status") == "Deleting"
	}), "the delete reads uninstalling once the status is back")
	resItems, err = e.db.resources(ctx)
	require.NoError(t, err)
	require.Equal(t, "Deleting", resItems["r-"+del.ID].str("provisioningState"))
	require.Equal(t, "Succeeded", resItems["r-"+del.ID+"-parent"].str("provisioningState"))
	for _, it := range del.Items {
		delete(resItems, it.ID)
	}
	require.Empty(t, checkOutcome(done, items, resItems))
	for outcome := range e.inv.outcomes("poll") {
		require.NotContains(t, outcome, "HTTP", "every poll answered 2xx")
	}
}
