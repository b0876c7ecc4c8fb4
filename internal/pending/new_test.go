package pending_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/internal/pending"
)

func TestForPickup(t *testing.T) {
	const interval = 10 * time.Second
	now := time.Date(2026, 12, 1, 12, 0, 10, 0, time.UTC)
	tests := []struct {
		name            string
		status, request string
		lastWrite       time.Time
		interval        time.Duration
		want            bool
	}{
		{"accepted, written now", "Accepted", "Create", now, interval, true},
		{"accepted, _ts just under an interval and its second ago", "Accepted", "Create", now.Add(-interval - time.Second + time.Nanosecond), interval, true},
		{"accepted, _ts an interval and its second ago", "Accepted", "Create", now.Add(-interval - time.Second), interval, false},
		{"accepted, written long ago", "Accepted", "Create", now.Add(-time.Hour), interval, false},
		{"accepted, written a little ahead of this clock", "Accepted", "Create", now.Add(time.Second), interval, true},
		{"accepted, written an interval ahead of this clock", "Accepted", "Create", now.Add(interval - time.Second), interval, false},
		{"accepted, no _ts", "Accepted", "Create", time.Time{}, interval, false},
		{"accepted, no interval", "Accepted", "Create", now, 0, false},
		{"an accepted update", "Accepted", "Update", now, interval, true},
		{"an accepted credential request", "Accepted", "RequestCredential", now, interval, true},
		{"an accepted revocation", "Accepted", "RevokeCredentials", now, interval, true},
		{"a new delete: the frontend creates it Deleting", "Deleting", "Delete", now, interval, true},
		{"a delete, _ts an interval and its second ago", "Deleting", "Delete", now.Add(-interval - time.Second), interval, false},
		{"a delete in a status the frontend never creates it in", "Accepted", "Delete", now, interval, false},
		{"a create opstatus moved to Deleting", "Deleting", "Create", now, interval, false},
		{"an update opstatus moved to Deleting", "Deleting", "Update", now, interval, false},
		{"opstatus's own write", "Provisioning", "Create", now, interval, false},
		{"a terminal status", "Succeeded", "Create", now, interval, false},
		{"a finished delete", "Succeeded", "Delete", now, interval, false},
		{"another case", "accepted", "Create", now, interval, false},
		{"a delete in another case", "Deleting", "delete", now, interval, false},
		{"no status", "", "Create", now, interval, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, pending.ForPickup(tt.status, tt.request, tt.lastWrite, now, tt.interval))
		})
	}
}

func TestLeftToPickup(t *testing.T) {
	const interval = 10 * time.Second
	now := time.Date(2026, 12, 1, 12, 0, 10, 0, time.UTC)
	young, old := now.Add(-2*time.Second), now.Add(-interval-time.Second)
	tests := []struct {
		name                 string
		status, request      string
		startTime, lastWrite time.Time
		want                 bool
	}{
		{"new and Accepted: pickup's to check", "Accepted", "Create", young, young, true},
		{"Accepted, written just now, started long ago", "Accepted", "Create", now.Add(-time.Hour), young, true},
		{"a new delete, Deleting: pickup's to check", "Deleting", "Delete", young, young, true},
		{"a delete written just now, started long ago", "Deleting", "Delete", now.Add(-time.Hour), young, true},
		{"a delete written an interval ago", "Deleting", "Delete", now.Add(-time.Hour), old, false},
		{"an old create opstatus has just moved to Deleting", "Deleting", "Create", now.Add(-time.Hour), young, false},
		{"pickup checked it and opstatus wrote the answer", "Provisioning", "Create", young, young, true},
		{"started just under an interval ago", "Provisioning", "Create", now.Add(-interval + time.Nanosecond), young, true},
		{"its answer written an interval ago (_ts and its second)", "Provisioning", "Create", young, old, false},
		{"its _ts an interval ago, the write maybe less", "Provisioning", "Create", young, now.Add(-interval), true},
		{"started an interval ago", "Provisioning", "Create", old, young, false},
		{"no startTime", "Provisioning", "Create", time.Time{}, young, false},
		{"startTime an interval ahead of this clock", "Provisioning", "Create", now.Add(interval), young, false},
		{"no _ts", "Provisioning", "Create", young, time.Time{}, false},
		{"an old operation written now", "Updating", "Update", now.Add(-time.Hour), now, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, pending.LeftToPickup(tt.status, tt.request, tt.startTime, tt.lastWrite, now, interval))
			require.False(t, pending.LeftToPickup(tt.status, tt.request, tt.startTime, tt.lastWrite, now, 0), "no interval")
		})
	}
}
