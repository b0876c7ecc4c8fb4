package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPickupColdP99(t *testing.T) {
	// A few arrivals: the p99 is the largest; a missed one counts as the
	// whole wait, and says so.
	r := pickupColdResult{Arrivals: []coldArrival{{Delay: 3 * time.Second}, {Delay: 9 * time.Second}, {Delay: time.Second}}}
	p99, missed := r.p99()
	require.Equal(t, 9*time.Second, p99)
	require.False(t, missed)
	r.Arrivals = append(r.Arrivals, coldArrival{Missed: true})
	p99, missed = r.p99()
	require.Equal(t, coldWait, p99)
	require.True(t, missed)
	_, ok := pickupColdResult{}.p99()
	require.False(t, ok)
}
