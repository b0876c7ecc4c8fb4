package poll_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/internal/database/databasetesting"
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

// resourceJSON is a Resources item of sub as the frontend might write it,
// with fields, a JSON object's members, added.
func resourceJSON(id, key, fields string) []byte {
	return []byte(`{"id":"` + id + `","partitionKey":"` + sub + `","key":"` + key + `"` + fields + `}`)
}

// TestUnreadableParentDoesNotBlockTheOperation: a Resources item that does
// not decode, or two that share the key, no longer keep the operation from
// being written on every poll. A change, a deadline's included, ends the
// operation and leaves the items as they are, named in an Error line; a
// finished Delete deletes them and the children, but for an item another
// operation holds by a readable activeOperationId.
func TestUnreadableParentDoesNotBlockTheOperation(t *testing.T) {
	const child = `,"provisioningState":"Succeeded"`
	for _, tc := range []struct {
		name     string
		request  arm.Request
		status   arm.ProvisioningState
		csState  string        // "": Cluster Service answers its 404
		age      time.Duration // how long ago the operation started
		parents  [][]byte
		want     arm.ProvisioningState
		outcome  poll.Outcome
		deleted  []string // of r1, r2 and np1; the others must be left byte for byte
		wantLogs []string
	}{
		{
			name: "update, ill-typed provisioningState", request: arm.RequestUpdate, status: arm.ProvisioningStateUpdating, csState: "ready",
			parents: [][]byte{resourceJSON("r1", clusterKey, `,"activeOperationId":"op","provisioningState":[1]`)},
			want:    arm.ProvisioningStateSucceeded, outcome: poll.OutcomeUpdated,
			wantLogs: []string{"level=ERROR", "left for a person", "id=r1 key=" + clusterKey},
		},
		{
			name: "update, two items share the key", request: arm.RequestUpdate, status: arm.ProvisioningStateUpdating, csState: "ready",
			parents: [][]byte{
				resourceJSON("r1", clusterKey, `,"activeOperationId":"op","provisioningState":"Updating"`),
				resourceJSON("r2", strings.ToUpper(clusterKey), `,"activeOperationId":"op","provisioningState":"Updating"`),
			},
			want: arm.ProvisioningStateSucceeded, outcome: poll.OutcomeUpdated,
			wantLogs: []string{"level=ERROR", "left for a person", "id=r1 ", "id=r2 ", "2 items share the key"},
		},
		{
			name: "create past its deadline, ill-typed activeOperationId", request: arm.RequestCreate, status: arm.ProvisioningStateProvisioning,
			csState: "installing", age: 2 * time.Hour,
			parents: [][]byte{resourceJSON("r1", clusterKey, `,"activeOperationId":7,"provisioningState":"Provisioning"`)},
			want:    arm.ProvisioningStateFailed, outcome: poll.OutcomeUpdated,
			wantLogs: []string{"level=ERROR", "left for a person", "id=r1 "},
		},
		{
			name: "finished delete, ill-typed provisioningState", request: arm.RequestDelete, status: arm.ProvisioningStateDeleting,
			parents: [][]byte{resourceJSON("r1", clusterKey, `,"activeOperationId":"op","provisioningState":5`)},
			want:    arm.ProvisioningStateSucceeded, outcome: poll.OutcomeDeleted,
			deleted:  []string{"r1", "np1"},
			wantLogs: []string{"level=ERROR", "deleted with the finished delete", "id=r1 key=" + clusterKey},
		},
		{
			name: "finished delete, ill-typed activeOperationId", request: arm.RequestDelete, status: arm.ProvisioningStateDeleting,
			parents: [][]byte{resourceJSON("r1", clusterKey, `,"activeOperationId":{"id":"op"},"provisioningState":"Deleting"`)},
			want:    arm.ProvisioningStateSucceeded, outcome: poll.OutcomeDeleted,
			deleted:  []string{"r1", "np1"},
			wantLogs: []string{"level=ERROR", "deleted with the finished delete", "id=r1 ", "activeOperationId=(not a string)"},
		},
		{
			name: "finished delete, two items share the key", request: arm.RequestDelete, status: arm.ProvisioningStateDeleting,
			parents: [][]byte{
				resourceJSON("r1", clusterKey, `,"activeOperationId":"op","provisioningState":"Deleting"`),
				resourceJSON("r2", strings.ToUpper(clusterKey), `,"activeOperationId":"op","provisioningState":"Deleting"`),
			},
			want: arm.ProvisioningStateSucceeded, outcome: poll.OutcomeDeleted,
			deleted:  []string{"r1", "r2", "np1"},
			wantLogs: []string{"level=ERROR", "deleted with the finished delete", "id=r1 ", "id=r2 "},
		},
		{
			name: "finished delete, an unreadable item another operation holds is kept", request: arm.RequestDelete, status: arm.ProvisioningStateDeleting,
			parents: [][]byte{
				resourceJSON("r1", clusterKey, `,"activeOperationId":"op","provisioningState":"Deleting"`),
				resourceJSON("r2", clusterKey, `,"activeOperationId":"recreate","provisioningState":[1]`),
			},
			want: arm.ProvisioningStateSucceeded, outcome: poll.OutcomeDeleted,
			deleted:  []string{"r1"},
			wantLogs: []string{"level=ERROR", "left for a person", "id=r2 ", "activeOperationId=recreate"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.fn.Deadlines = poll.Deadlines{Create: time.Hour}
			start := f.now.Add(-tc.age - time.Minute)
			f.putOp(database.Operation{ID: "op", Request: tc.request, Status: tc.status, StartTime: start, LastTransitionTime: start})
			if tc.csState != "" {
				f.cs.SetStatus(clusterCS, 200, clusterStatus(tc.csState))
			}
			for _, p := range tc.parents {
				f.db.PutRawResource(p)
			}
			f.db.PutRawResource(resourceJSON("np1", clusterKey+"/nodePools/np1", child))
			before := map[string][]byte{}
			for _, id := range []string{"r1", "r2", "np1"} {
				before[id] = f.db.RawResource(sub, id)
			}

			outcome, logs := f.pollLogged(t, "op")
			require.Equal(t, tc.outcome, outcome, logs)
			require.Equal(t, tc.want, f.op(t, "op").Status)
			for _, want := range tc.wantLogs {
				require.Contains(t, logs, want)
			}
			for id, raw := range before {
				if slices.Contains(tc.deleted, id) {
					require.Nil(t, f.db.RawResource(sub, id), "%s should be deleted", id)
				} else {
					require.Equal(t, string(raw), string(f.db.RawResource(sub, id)), "%s should be left as it was", id)
				}
			}
			require.Equal(t, poll.OutcomeDone, f.poll(t, "op"), "the operation has ended")
		})
	}
}

// TestUnreadableParentChangedMeanwhileIsReadAgain: an unreadable parent
// rewritten between its listing and its delete (412) is listed again and
// deleted, not left behind nor the poll failed.
func TestUnreadableParentChangedMeanwhileIsReadAgain(t *testing.T) {
	f := newFixture(t)
	f.putOp(database.Operation{ID: "op", Request: arm.RequestDelete, Status: arm.ProvisioningStateDeleting})
	parent := resourceJSON("r1", clusterKey, `,"activeOperationId":"op","provisioningState":5`)
	f.db.PutRawResource(parent)
	f.db.PutRawResource(resourceJSON("np1", clusterKey+"/nodePools/np1", `,"provisioningState":"Succeeded"`))
	deletes := 0
	f.db.Hook = func(call databasetesting.Op) error {
		if call == databasetesting.OpDeleteResource {
			deletes++
			if deletes == 2 { // the child's delete went first
				f.db.PutRawResource(parent)
			}
		}
		return nil
	}
	require.Equal(t, poll.OutcomeDeleted, f.poll(t, "op"))
	require.Equal(t, arm.ProvisioningStateSucceeded, f.op(t, "op").Status)
	require.Nil(t, f.db.RawResource(sub, "r1"))
	require.Nil(t, f.db.RawResource(sub, "np1"))
	require.Equal(t, 3, deletes, "the child, the parent refused with 412, the parent")
}
