package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/internal/pending"
)

// The arrivals are new operations as ARO-HCP's frontend writes them, Deletes
// among them: each one is pickup's.
func TestPickupArrivalsIncludeDeletes(t *testing.T) {
	ds := newDataset("p", 4, 2)
	now := time.Now()
	requests := map[string]int{}
	for i, o := range ds.ops {
		res, op := arrivalItems(i, o, now)
		requests[op.Request]++
		require.Equal(t, op.Status, res.ProvisioningState)
		require.True(t, pending.ForPickup(op.Status, op.Request, now, now, scanInterval), "arrival %d (%s %s) is new", i, op.Request, op.Status)
	}
	require.Equal(t, map[string]int{"Create": 2, "Delete": 2}, requests)
}

func TestPickupFirstIntervals(t *testing.T) {
	ds := newDataset("p", 3, 1)
	t0 := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	written := []time.Time{t0, t0.Add(time.Second), t0.Add(2 * time.Second)}
	at := func(i int, d time.Duration) time.Time { return written[i].Add(d) }
	calls := map[string][]time.Time{
		// Checked by pickup, then by scan after its first interval.
		ds.ops[0].InternalID(): {at(0, 300*time.Millisecond), at(0, scanInterval), at(0, 12*time.Second)},
		// Checked twice in its first interval, neither time by pickup.
		ds.ops[1].InternalID(): {at(1, -time.Second), at(1, 500*time.Millisecond), at(1, 5*time.Second)},
		// ds.ops[2]: never checked.
	}
	pickups := []invSpan{{Function: "pickup", Start: at(0, 100*time.Millisecond), End: at(0, 400*time.Millisecond)}}

	var r pickupResult
	r.Arrivals = 3
	r.firstIntervals(calls, ds, written, pickups)
	require.Equal(t, 3, r.Calls)
	require.Equal(t, 2, r.MaxCalls)
	require.Equal(t, 1, r.Unchecked)
	require.Equal(t, 1, r.ByPickup)
	require.InDelta(t, 1.0, r.callsPerOp(), 1e-9)
	require.Equal(t, 3, r.Delays.N)
	require.Equal(t, 1, r.Delays.Censored)
	require.Equal(t, 500*time.Millisecond, r.Delays.P50)
	require.Equal(t, scanInterval, r.Delays.P99)
	require.True(t, r.Delays.P99AtLeast, "an unchecked arrival makes the p99 a lower bound")
}
