package poll_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/poll"
)

// fixedPartition is the one partition ARO-HCP's frontend (2024-10) wrote
// every Operations item in.
const fixedPartition = "workaround"

// otherSub is a subscription of the same fixed partition.
const otherSub = "9d2c0a11-5b8e-4c8e-8f6a-1c2d3e4f5a6b"

// In a fixed Operations partition, poll reads and writes the operation
// there, and everything else in the subscription of its externalId: the
// lock, the Resources items, the billing item.
func TestFixedOperationsPartition(t *testing.T) {
	f := newFixture(t)
	f.db.OperationsPartition = fixedPartition
	// The externalId as ARM may case it: the subscription is lowercased.
	key := strings.Replace(clusterKey, sub, strings.ToUpper(sub), 1)
	f.putOp(database.Operation{ID: "op", PartitionKey: fixedPartition, ExternalID: key,
		Request: arm.RequestCreate, Status: arm.ProvisioningStateAccepted})
	f.db.PutResource(&database.Resource{ID: "r1", PartitionKey: sub, Key: clusterKey, InternalID: clusterCS,
		ActiveOperationID: "op", ProvisioningState: arm.ProvisioningStateAccepted})
	f.db.PutResource(&database.Resource{ID: "np", PartitionKey: sub, Key: clusterKey + "/nodePools/np1", ProvisioningState: arm.ProvisioningStateSucceeded})
	f.cs.SetStatus(clusterCS, 200, clusterStatus("installing"))

	etag := f.db.HoldLock(sub, "frontend", time.Minute)
	require.Equal(t, poll.OutcomeDeferred, f.poll(t, "op"), "the lock is the subscription's, not the partition's")
	require.Zero(t, f.writes())
	require.NoError(t, f.db.Locks().Delete(context.Background(), sub, etag))

	require.Equal(t, poll.OutcomeUpdated, f.poll(t, "op"))
	require.Equal(t, arm.ProvisioningStateProvisioning, f.op(t, "op").Status)
	var written map[string]any
	require.NoError(t, json.Unmarshal(f.db.RawOperation(sub, "op"), &written))
	require.Equal(t, fixedPartition, written["partitionKey"], "written back in the fixed partition")
	r, err := f.db.GetResource(context.Background(), sub, clusterKey)
	require.NoError(t, err)
	require.Equal(t, arm.ProvisioningStateProvisioning, r.ProvisioningState, "the Resources item of the subscription follows")

	f.cs.SetStatus(clusterCS, 200, clusterStatus("ready"))
	require.Equal(t, poll.OutcomeUpdated, f.poll(t, "op"))
	require.Equal(t, arm.ProvisioningStateSucceeded, f.op(t, "op").Status)
	open, err := f.db.OpenBilling(context.Background(), sub, clusterKey)
	require.NoError(t, err)
	require.Len(t, open, 1, "billed in the subscription of the externalId")
	require.Equal(t, sub, open[0].SubscriptionID)

	// A finished Delete removes the subscription's Resources items.
	f.putOp(database.Operation{ID: "del", PartitionKey: fixedPartition, ExternalID: key,
		Request: arm.RequestDelete, Status: arm.ProvisioningStateDeleting})
	r, err = f.db.GetResource(context.Background(), sub, clusterKey)
	require.NoError(t, err)
	r.ActiveOperationID = "del"
	_, err = f.db.ReplaceResource(context.Background(), r)
	require.NoError(t, err)
	f.cs.Delete(clusterCS + "/status")
	require.Equal(t, poll.OutcomeDeleted, f.poll(t, "del"))
	require.Empty(t, f.db.Resources())
}

// A message that names another subscription than the operation's
// externalId, and an operation whose externalId names none, are invalid:
// nothing is called or written, under no subscription's lock.
func TestFixedOperationsPartitionInvalid(t *testing.T) {
	f := newFixture(t)
	f.db.OperationsPartition = fixedPartition
	f.putOp(database.Operation{ID: "op", PartitionKey: fixedPartition, Request: arm.RequestCreate, Status: arm.ProvisioningStateAccepted})
	f.putOp(database.Operation{ID: "no-sub", PartitionKey: fixedPartition, ExternalID: "/resourceGroups/rg/providers/x/y/z",
		Request: arm.RequestCreate, Status: arm.ProvisioningStateAccepted})
	f.cs.SetStatus(clusterCS, 200, clusterStatus("installing"))
	for _, msg := range []string{
		`{"subscriptionId":"` + otherSub + `","operationId":"op"}`,
		`{"subscriptionId":"` + sub + `","operationId":"no-sub"}`,
		`{"subscriptionId":"` + fixedPartition + `","operationId":"op"}`,
	} {
		res, err := f.invoke(t, msg)
		require.NoError(t, err)
		require.Equal(t, poll.OutcomeInvalid, only(t, res), msg)
	}
	require.Zero(t, f.cs.Calls())
	require.Zero(t, f.writes())
	require.Zero(t, f.lockOps())
	require.Equal(t, poll.OutcomeUpdated, f.poll(t, "op"), "the message of its own subscription is acted on")
}
