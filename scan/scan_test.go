package scan_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/functions"
	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/poll"
	"github.com/opstatus/opstatus/scan"
)

func invoke(t *testing.T, db database.DBClient, timer string) (*functions.Result, error) {
	t.Helper()
	inv := &functions.Invocation{
		ID: "inv", Function: "scan",
		Data:     map[string]json.RawMessage{"timer": json.RawMessage(timer)},
		Metadata: map[string]json.RawMessage{},
		Log:      slog.New(slog.DiscardHandler),
	}
	return (&scan.Function{DB: db}).Handle(context.Background(), inv)
}

const timer = `{"Schedule":{"AdjustForDST":true},"ScheduleStatus":null,"IsPastDue":false}`

func TestScanListsPendingOperationsAcrossSubscriptions(t *testing.T) {
	db := database.NewMemoryClient(time.Second)
	put := func(sub, id string, status arm.ProvisioningState, uri string) {
		db.PutOperation(&database.Operation{ID: id, PartitionKey: sub, Request: arm.RequestCreate, Status: status, NotificationURI: uri})
	}
	put("sub-a", "1", arm.ProvisioningStateAccepted, "")
	put("sub-a", "2", arm.ProvisioningStateSucceeded, "")
	put("sub-b", "3", arm.ProvisioningStateDeleting, "")
	put("sub-b", "4", arm.ProvisioningStateFailed, "https://arm.example/n")
	put("sub-c", "5", arm.ProvisioningStateCanceled, "")
	put("sub-c", "6", arm.ProvisioningStateUpdating, "")

	res, err := invoke(t, db, timer)
	require.NoError(t, err)
	require.ElementsMatch(t, []poll.Message{
		{SubscriptionID: "sub-a", OperationID: "1"},
		{SubscriptionID: "sub-b", OperationID: "3"},
		{SubscriptionID: "sub-b", OperationID: "4"},
		{SubscriptionID: "sub-c", OperationID: "6"},
	}, res.Outputs[scan.OutputBinding])
	require.Equal(t, 4, res.ReturnValue)

	// Messages go out as JSON objects, never as strings the host could
	// mistake for base64.
	b, err := json.Marshal(res.Outputs)
	require.NoError(t, err)
	var out struct{ Operations []map[string]any }
	require.NoError(t, json.Unmarshal(b, &out))
	require.Len(t, out.Operations, 4)
	for _, m := range out.Operations {
		require.Len(t, m, 2, "objects with subscriptionId and operationId only: %v", m)
	}
}

func TestScanWithNothingPendingOutputsAnEmptyArray(t *testing.T) {
	res, err := invoke(t, database.NewMemoryClient(time.Second), `"not even a timer"`)
	require.NoError(t, err, "an odd timer payload does not stop the scan")
	b, err := json.Marshal(res.Outputs)
	require.NoError(t, err)
	require.JSONEq(t, `{"operations":[]}`, string(b))
}

func TestScanFailsWhenTheListingFails(t *testing.T) {
	db := database.NewMemoryClient(time.Second)
	db.Hook = func(string) error { return database.ErrUnavailable }
	_, err := invoke(t, db, timer)
	require.True(t, errors.Is(err, database.ErrUnavailable))
}

func TestScanMessagesCarryTheScheduleIntervalAndScanTime(t *testing.T) {
	db := database.NewMemoryClient(time.Second)
	db.PutOperation(&database.Operation{ID: "1", PartitionKey: "s", Request: arm.RequestCreate, Status: arm.ProvisioningStateAccepted})
	fn := &scan.Function{DB: db}
	for name, tc := range map[string]struct {
		timer string
		want  int
	}{
		// The host's payload: Last is the previous occurrence, Next this one.
		"regular run":                    {`{"ScheduleStatus":{"Last":"2026-11-30T11:59:50+00:00","Next":"2026-11-30T12:00:00+00:00"},"IsPastDue":false}`, 10},
		"first run":                      {`{"ScheduleStatus":{"Last":"0001-01-01T00:00:00","Next":"2026-11-30T12:00:00+00:00"},"IsPastDue":false}`, 0},
		"no schedule status":             {`{"ScheduleStatus":null,"IsPastDue":false}`, 0},
		"stale status after downtime":    {`{"ScheduleStatus":{"Last":"2026-11-29T10:00:00+00:00","Next":"2026-11-30T12:00:00+00:00"},"IsPastDue":true}`, 0},
		"fraction of a second rounds up": {`{"ScheduleStatus":{"Last":"2026-11-30T11:59:59.5+00:00","Next":"2026-11-30T12:00:00+00:00"}}`, 1},
	} {
		t.Run(name, func(t *testing.T) {
			inv := &functions.Invocation{Function: "scan", Log: slog.New(slog.DiscardHandler),
				Data: map[string]json.RawMessage{"timer": json.RawMessage(tc.timer)}}
			res, err := fn.Handle(context.Background(), inv)
			require.NoError(t, err)
			msgs := res.Outputs[scan.OutputBinding].([]poll.Message)
			require.Len(t, msgs, 1)
			require.Equal(t, tc.want, msgs[0].ScanInterval)
			if tc.want == 0 {
				require.True(t, msgs[0].ScannedAt.IsZero(), "no interval, no scan time")
			} else {
				require.Equal(t, time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC), msgs[0].ScannedAt, "the schedule's Next: this run")
			}
		})
	}
}

func TestScanOrderChangesFromScanToScan(t *testing.T) {
	db := database.NewMemoryClient(time.Second)
	for i := range 50 {
		db.PutOperation(&database.Operation{ID: fmt.Sprint(i), PartitionKey: "s", Request: arm.RequestCreate, Status: arm.ProvisioningStateAccepted})
	}
	first := func() string {
		res, err := invoke(t, db, timer)
		require.NoError(t, err)
		return res.Outputs[scan.OutputBinding].([]poll.Message)[0].OperationID
	}
	seen := map[string]bool{}
	for range 20 {
		seen[first()] = true
	}
	// 20 scans of 50 operations all starting with the same one: 1 in 50^19.
	require.Greater(t, len(seen), 1, "every scan lists the operations in the same order")
}
