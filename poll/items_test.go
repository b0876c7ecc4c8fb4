package poll_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/poll"
)

// TestMalformedChildDoesNotBlockTheDelete: a node pool item with ill-typed
// fields is deleted with its finished cluster instead of failing every
// attempt (the delete would be deferred, and the lock taken, on every scan).
func TestMalformedChildDoesNotBlockTheDelete(t *testing.T) {
	f := newFixture(t)
	f.putOp(database.Operation{ID: "del", Request: arm.RequestDelete, Status: arm.ProvisioningStateDeleting})
	f.db.PutResource(&database.Resource{ID: "r1", PartitionKey: sub, Key: clusterKey, ActiveOperationID: "del", ProvisioningState: arm.ProvisioningStateDeleting})
	f.db.PutRawResource([]byte(`{"id":"np1","partitionKey":"` + sub + `","key":"` + clusterKey + `/nodePools/np1","provisioningState":5,"activeOperationId":{"x":1}}`))
	f.db.PutResource(&database.Resource{ID: "np2", PartitionKey: sub, Key: clusterKey + "/nodePools/np2", ProvisioningState: arm.ProvisioningStateSucceeded})

	// The fake Cluster Service answers an OCM 404 for a cluster it does not know.
	require.Equal(t, poll.OutcomeDeleted, f.poll(t, "del"))
	require.Equal(t, arm.ProvisioningStateSucceeded, f.op(t, "del").Status)
	ctx := context.Background()
	children, err := f.db.ChildResources(ctx, sub, clusterKey)
	require.NoError(t, err)
	require.Empty(t, children)
	_, err = f.db.GetResource(ctx, sub, clusterKey)
	require.ErrorIs(t, err, database.ErrNotFound)
}

// TestNotificationKeepsTheFrontendsError: clearing notificationUri after a
// notification writes the error back exactly as the frontend wrote it.
func TestNotificationKeepsTheFrontendsError(t *testing.T) {
	f := newFixture(t)
	const frontendError = `{"code":"Conflict","message":"m","innererror":{"trace":"t"},"details":[{"code":"d","extra":[1]}]}`
	f.db.PutRawOperation([]byte(`{"id":"op","partitionKey":"` + sub + `","request":"Create","status":"Failed",` +
		`"lastTransitionTime":"` + f.now.Format("2006-01-02T15:04:05Z") + `","notificationUri":"` + f.armURL + `","error":` + frontendError + `}`))
	require.Equal(t, poll.OutcomeNotified, f.poll(t, "op"))

	op := f.op(t, "op")
	require.Empty(t, op.NotificationURI)
	written, err := json.Marshal(op)
	require.NoError(t, err)
	var fields map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(written, &fields))
	require.JSONEq(t, frontendError, string(fields["error"]))
}
