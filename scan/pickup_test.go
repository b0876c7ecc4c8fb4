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

func TestForPickup(t *testing.T) {
	const interval = 10 * time.Second
	now := time.Date(2026, 12, 1, 12, 0, 10, 0, time.UTC)
	tests := []struct {
		name      string
		status    string
		lastWrite time.Time
		interval  time.Duration
		want      bool
	}{
		{"accepted, written now", "Accepted", now, interval, true},
		{"accepted, written just under an interval ago", "Accepted", now.Add(-interval + time.Nanosecond), interval, true},
		{"accepted, written an interval ago", "Accepted", now.Add(-interval), interval, false},
		{"accepted, written long ago", "Accepted", now.Add(-time.Hour), interval, false},
		{"accepted, written a little ahead of this clock", "Accepted", now.Add(time.Second), interval, true},
		{"accepted, written an interval ahead of this clock", "Accepted", now.Add(interval), interval, false},
		{"accepted, no _ts", "Accepted", time.Time{}, interval, false},
		{"accepted, no interval", "Accepted", now, 0, false},
		{"opstatus's own write", "Provisioning", now, interval, false},
		{"a terminal status", "Succeeded", now, interval, false},
		{"another case", "accepted", now, interval, false},
		{"no status", "", now, interval, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, scan.ForPickup(tt.status, tt.lastWrite, now, tt.interval))
		})
	}
}

// With pickup running, scan does not send an Accepted operation written
// less than an interval ago: pickup has checked it from the change feed.
// Once the interval has passed it is sent as before, and operations of any
// other status are sent at once. Without pickup nothing is left.
func TestScanLeavesNewOperationsToPickup(t *testing.T) {
	const interval = 10 * time.Second
	db := databasetesting.NewMemoryClient(time.Second)
	put := func(id string, status arm.ProvisioningState) {
		db.PutOperation(&database.Operation{ID: id, PartitionKey: "sub", Request: arm.RequestCreate, Status: status, InternalID: clusterID})
	}
	written := time.Now() // the memory store's _ts is its own clock's
	put("new", arm.ProvisioningStateAccepted)
	put("provisioning", arm.ProvisioningStateProvisioning)
	db.PutRawOperation([]byte(`{"id":"unusable","partitionKey":"sub","request":"Create","status":"Accepted","internalId":"/api/other/v1/x"}`))

	scanAt := func(at time.Time, pickupRuns bool) ([]string, string) {
		fn := &scan.Function{DB: db, Interval: interval, PickupRuns: pickupRuns, Now: func() time.Time { return at }}
		res, err, logs := scanLogged(t, fn, timer)
		require.NoError(t, err)
		return flat(res.Outputs[scan.OutputBinding].([]queuemsg.Message)), logs
	}
	got, logs := scanAt(written, true)
	require.Equal(t, []string{"sub/provisioning"}, got, "the new operation is pickup's for an interval")
	require.Contains(t, logs, "left_to_pickup=1")
	require.Contains(t, logs, "reason=internal_id", "what poll cannot act on is still skipped and logged by scan")

	got, _ = scanAt(written.Add(interval-2*time.Second), true)
	require.Equal(t, []string{"sub/provisioning"}, got)

	got, logs = scanAt(written.Add(interval+time.Second), true)
	require.Equal(t, []string{"sub/new", "sub/provisioning"}, got, "an interval later, scan sends it")
	require.Contains(t, logs, "left_to_pickup=0")

	got, _ = scanAt(written, false)
	require.Equal(t, []string{"sub/new", "sub/provisioning"}, got, "without pickup, scan sends everything")
}
