package scan_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/internal/database/databasetesting"
	"github.com/opstatus/opstatus/internal/queuemsg"
	"github.com/opstatus/opstatus/scan"
)

// With pickup running, scan does not send a new operation (in its
// request's initial status, Accepted or a Delete's Deleting) written less
// than an interval ago, nor one started and written in its first
// interval (pickup has checked it from the change feed, and opstatus wrote
// the answer). Once the interval has passed it is sent as before, and
// older operations of any other status are sent at once. Without pickup
// nothing is left.
func TestScanLeavesNewOperationsToPickup(t *testing.T) {
	const interval = 10 * time.Second
	db := databasetesting.NewMemoryClient(time.Second)
	put := func(id string, request arm.Request, status arm.ProvisioningState) {
		db.PutOperation(&database.Operation{ID: id, PartitionKey: "sub", Request: request, Status: status, InternalID: clusterID})
	}
	written := time.Now() // the memory store's _ts is its own clock's
	put("new", arm.RequestCreate, arm.ProvisioningStateAccepted)
	put("new-delete", arm.RequestDelete, arm.ProvisioningStateDeleting)
	put("provisioning", arm.RequestCreate, arm.ProvisioningStateProvisioning)
	put("uninstalling", arm.RequestCreate, arm.ProvisioningStateDeleting)
	db.PutOperation(&database.Operation{ID: "checked", PartitionKey: "sub", Request: arm.RequestCreate,
		Status: arm.ProvisioningStateProvisioning, InternalID: clusterID, StartTime: written.Add(-time.Second)})
	db.PutRawOperation([]byte(`{"id":"unusable","partitionKey":"sub","request":"Create","status":"Accepted","internalId":"/api/other/v1/x"}`))

	scanAt := func(at time.Time, pickupRuns bool) ([]string, string) {
		fn := &scan.Function{DB: db, Interval: interval, PickupRuns: pickupRuns, Now: func() time.Time { return at }}
		res, logs, err := scanLogged(t, fn, timer)
		require.NoError(t, err)
		return flat(res.Outputs[scan.OutputBinding].([]queuemsg.Message)), logs
	}
	got, logs := scanAt(written, true)
	require.Equal(t, []string{"sub/provisioning", "sub/uninstalling"}, got,
		"the new operations, a Delete Deleting too, are pickup's for an interval; a Create opstatus moved to Deleting is not new")
	require.Contains(t, logs, "left_to_pickup=3")
	require.Contains(t, logs, "reason=internal_id", "what poll cannot act on is still skipped and logged by scan")

	got, _ = scanAt(written.Add(interval-2*time.Second), true)
	require.Equal(t, []string{"sub/provisioning", "sub/uninstalling"}, got)

	got, logs = scanAt(written.Add(interval+time.Second), true)
	require.Equal(t, []string{"sub/checked", "sub/new", "sub/new-delete", "sub/provisioning", "sub/uninstalling"}, got, "an interval later, scan sends them")
	require.Contains(t, logs, "left_to_pickup=0")

	got, _ = scanAt(written, false)
	require.Equal(t, []string{"sub/checked", "sub/new", "sub/new-delete", "sub/provisioning", "sub/uninstalling"}, got, "without pickup, scan sends everything")
}
