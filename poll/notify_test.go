package poll

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/internal/lock"
)

// TestStaleReadDoesNotNotifyAgain: an invocation that read the ended
// operation before another one delivered its notification and cleared
// notificationUri reads it again before sending, and sends nothing.
func TestStaleReadDoesNotNotifyAgain(t *testing.T) {
	var sent atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		sent.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	db := database.NewMemoryClient(5 * time.Second)
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	f := &Function{
		DB:       db,
		Locker:   lock.New(db.Locks(), lock.Options{}),
		Notifier: arm.NewNotifier(true),
		Now:      func() time.Time { return now },
	}
	db.PutOperation(&database.Operation{ID: "op", PartitionKey: "sub", Request: arm.RequestCreate,
		Status: arm.ProvisioningStateSucceeded, LastTransitionTime: now.Add(-time.Minute), NotificationURI: srv.URL})
	ctx := context.Background()
	stale, err := db.GetOperation(ctx, "sub", "op")
	require.NoError(t, err)

	// Another invocation delivers and clears it.
	out, err := f.notify(ctx, slog.New(slog.DiscardHandler), stale, "other")
	require.NoError(t, err)
	require.Equal(t, OutcomeNotified, out)
	require.Equal(t, int32(1), sent.Load())

	out, err = f.notify(ctx, slog.New(slog.DiscardHandler), stale, "this")
	require.NoError(t, err)
	require.Equal(t, OutcomeDone, out)
	require.Equal(t, int32(1), sent.Load(), "sent once")

	gone := *stale
	gone.ID = "deleted-meanwhile"
	out, err = f.notify(ctx, slog.New(slog.DiscardHandler), &gone, "this")
	require.NoError(t, err)
	require.Equal(t, OutcomeGone, out)
	require.Equal(t, int32(1), sent.Load())
}
