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
		{"accepted, _ts just under an interval and its second ago", "Accepted", now.Add(-interval - time.Second + time.Nanosecond), interval, true},
		{"accepted, _ts an interval and its second ago", "Accepted", now.Add(-interval - time.Second), interval, false},
		{"accepted, written long ago", "Accepted", now.Add(-time.Hour), interval, false},
		{"accepted, written a little ahead of this clock", "Accepted", now.Add(time.Second), interval, true},
		{"accepted, written an interval ahead of this clock", "Accepted", now.Add(interval - time.Second), interval, false},
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

func TestLeftToPickup(t *testing.T) {
	const interval = 10 * time.Second
	now := time.Date(2026, 12, 1, 12, 0, 10, 0, time.UTC)
	young, old := now.Add(-2*time.Second), now.Add(-interval-time.Second)
	tests := []struct {
		name                 string
		status               string
		startTime, lastWrite time.Time
		want                 bool
	}{
		{"new and Accepted: pickup's to check", "Accepted", young, young, true},
		{"Accepted, written just now, started long ago", "Accepted", now.Add(-time.Hour), young, true},
		{"pickup checked it and opstatus wrote the answer", "Provisioning", young, young, true},
		{"started just under an interval ago", "Provisioning", now.Add(-interval + time.Nanosecond), young, true},
		{"its answer written an interval ago (_ts and its second)", "Provisioning", young, old, false},
		{"its _ts an interval ago, the write maybe less", "Provisioning", young, now.Add(-interval), true},
		{"started an interval ago", "Provisioning", old, young, false},
		{"no startTime", "Provisioning", time.Time{}, young, false},
		{"startTime an interval ahead of this clock", "Provisioning", now.Add(interval), young, false},
		{"no _ts", "Provisioning", young, time.Time{}, false},
		{"an old operation written now", "Updating", now.Add(-time.Hour), now, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, scan.LeftToPickup(tt.status, tt.startTime, tt.lastWrite, now, interval))
			require.False(t, scan.LeftToPickup(tt.status, tt.startTime, tt.lastWrite, now, 0), "no interval")
		})
	}
}

// With pickup running, scan does not send an Accepted operation written
// less than an interval ago, nor one started and written in its first
// interval (pickup has checked it from the change feed, and opstatus wrote
// the answer). Once the interval has passed it is sent as before, and
// older operations of any other status are sent at once. Without pickup
// nothing is left.
func TestScanLeavesNewOperationsToPickup(t *testing.T) {
	const interval = 10 * time.Second
	db := databasetesting.NewMemoryClient(time.Second)
	put := func(id string, status arm.ProvisioningState) {
		db.PutOperation(&database.Operation{ID: id, PartitionKey: "sub", Request: arm.RequestCreate, Status: status, InternalID: clusterID})
	}
	written := time.Now() // the memory store's _ts is its own clock's
	put("new", arm.ProvisioningStateAccepted)
	put("provisioning", arm.ProvisioningStateProvisioning)
	db.PutOperation(&database.Operation{ID: "checked", PartitionKey: "sub", Request: arm.RequestCreate,
		Status: arm.ProvisioningStateProvisioning, InternalID: clusterID, StartTime: written.Add(-time.Second)})
	db.PutRawOperation([]byte(`{"id":"unusable","partitionKey":"sub","request":"Create","status":"Accepted","internalId":"/api/other/v1/x"}`))

	scanAt := func(at time.Time, pickupRuns bool) ([]string, string) {
		fn := &scan.Function{DB: db, Interval: interval, PickupRuns: pickupRuns, Now: func() time.Time { return at }}
		res, err, logs := scanLogged(t, fn, timer)
		require.NoError(t, err)
		return flat(res.Outputs[scan.OutputBinding].([]queuemsg.Message)), logs
	}
	got, logs := scanAt(written, true)
	require.Equal(t, []string{"sub/provisioning"}, got, "the new operation is pickup's for an interval")
	require.Contains(t, logs, "left_to_pickup=2")
	require.Contains(t, logs, "reason=internal_id", "what poll cannot act on is still skipped and logged by scan")

	got, _ = scanAt(written.Add(interval-2*time.Second), true)
	require.Equal(t, []string{"sub/provisioning"}, got)

	got, logs = scanAt(written.Add(interval+time.Second), true)
	require.Equal(t, []string{"sub/checked", "sub/new", "sub/provisioning"}, got, "an interval later, scan sends them")
	require.Contains(t, logs, "left_to_pickup=0")

	got, _ = scanAt(written, false)
	require.Equal(t, []string{"sub/checked", "sub/new", "sub/provisioning"}, got, "without pickup, scan sends everything")
}
