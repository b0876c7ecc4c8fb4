package poll

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/functions"
	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/internal/database/databasetesting"
	"github.com/opstatus/opstatus/internal/lock"
	"github.com/opstatus/opstatus/internal/queuemsg"
)

// notifyOne delivers the notification of one ended operation as a message
// naming it would, and returns its outcome.
func notifyOne(ctx context.Context, f *Function, op *database.Operation, owner string) Outcome {
	r := &run{f: f, log: slog.New(slog.DiscardHandler), owner: owner}
	it := &item{
		msg: queuemsg.Operation{SubscriptionID: op.PartitionKey, OperationID: op.ID},
		log: r.log, op: op, ended: op, outcome: OutcomeDone,
	}
	r.notifyAll(ctx, []*item{it})
	return it.outcome
}

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
	db := databasetesting.NewMemoryClient(5 * time.Second)
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	f := New(Config{
		DB:       db,
		Locker:   lock.New(db.Locks(), lock.Options{}),
		Notifier: arm.NewNotifier(true),
		Now:      func() time.Time { return now },
	})
	db.PutOperation(&database.Operation{ID: "op", PartitionKey: "sub", Request: arm.RequestCreate,
		Status: arm.ProvisioningStateSucceeded, LastTransitionTime: now.Add(-time.Minute), NotificationURI: srv.URL})
	ctx := context.Background()
	stale, err := db.GetOperation(ctx, "sub", "op")
	require.NoError(t, err)

	// Another invocation delivers and clears it.
	out := notifyOne(ctx, f, stale, "other")
	require.Equal(t, OutcomeNotified, out)
	require.Equal(t, int32(1), sent.Load())

	out = notifyOne(ctx, f, stale, "this")
	require.Equal(t, OutcomeDone, out)
	require.Equal(t, int32(1), sent.Load(), "sent once")

	gone := *stale
	gone.ID = "deleted-meanwhile"
	out = notifyOne(ctx, f, &gone, "this")
	require.Equal(t, OutcomeGone, out)
	require.Equal(t, int32(1), sent.Load())
}

// TestNotificationIsGivenUpWithoutLastTransitionTime: an ended operation
// whose item has no lastTransitionTime is given up an hour after its start,
// or, with no start either, after its last write (_ts), so that a failing
// ARM endpoint is not called on every scan for ever.
func TestNotificationIsGivenUpWithoutLastTransitionTime(t *testing.T) {
	written := time.Now().UTC() // the memory store stamps _ts with the real clock
	for _, tc := range []struct {
		name       string
		start, ltt time.Time
		now        time.Time
		givenUp    bool
	}{
		{name: "transition inside the hour", ltt: written.Add(-59 * time.Minute), start: written.Add(-3 * time.Hour), now: written},
		{name: "transition past the hour", ltt: written.Add(-61 * time.Minute), now: written, givenUp: true},
		{name: "no transition, start inside the hour", start: written.Add(-59 * time.Minute), now: written},
		{name: "no transition, start past the hour", start: written.Add(-61 * time.Minute), now: written, givenUp: true},
		{name: "neither, written inside the hour", now: written.Add(59 * time.Minute)},
		{name: "neither, written past the hour", now: written.Add(62 * time.Minute), givenUp: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				calls.Add(1)
				w.WriteHeader(http.StatusServiceUnavailable)
			}))
			defer srv.Close()
			db := databasetesting.NewMemoryClient(5 * time.Second)
			f := New(Config{
				DB:       db,
				Locker:   lock.New(db.Locks(), lock.Options{}),
				Notifier: arm.NewNotifier(true),
				Now:      func() time.Time { return tc.now },
			})
			db.PutOperation(&database.Operation{ID: "op", PartitionKey: "sub", Request: arm.RequestCreate,
				Status: arm.ProvisioningStateFailed, StartTime: tc.start, LastTransitionTime: tc.ltt, NotificationURI: srv.URL})
			ctx := context.Background()
			op, err := db.GetOperation(ctx, "sub", "op")
			require.NoError(t, err)

			out := notifyOne(ctx, f, op, "this")
			after, err := db.GetOperation(ctx, "sub", "op")
			require.NoError(t, err)
			if tc.givenUp {
				require.Equal(t, OutcomeDone, out)
				require.Zero(t, calls.Load(), "ARM is not called")
				require.Empty(t, after.NotificationURI, "given up for good")
				return
			}
			require.Equal(t, OutcomeDeferred, out)
			require.Equal(t, int32(1), calls.Load())
			require.Equal(t, srv.URL, after.NotificationURI, "retried by the next scan")
		})
	}
}

// heldNotifier holds every delivery until release is closed, counting
// those in flight.
type heldNotifier struct {
	release chan struct{}

	mu                   sync.Mutex
	inFlight, peak, sent int
}

func (n *heldNotifier) Notify(ctx context.Context, _ string, _ arm.OperationStatus) error {
	n.mu.Lock()
	n.inFlight++
	n.peak = max(n.peak, n.inFlight)
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		n.inFlight--
		n.sent++
		n.mu.Unlock()
	}()
	select {
	case <-n.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (n *heldNotifier) counts() (inFlight, peak, sent int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.inFlight, n.peak, n.sent
}

// TestDeliveriesAreBounded: a message whose operations have all ended
// never has more than maxDeliveries notifications in flight; the others
// wait for a place and are delivered all the same. synctest.Wait returns
// once every goroutine is blocked, so the count is read when no more can
// start.
func TestDeliveriesAreBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ops = 100
		db := databasetesting.NewMemoryClient(5 * time.Second)
		n := &heldNotifier{release: make(chan struct{})}
		f := New(Config{DB: db, Locker: lock.New(db.Locks(), lock.Options{}), Notifier: n, Owner: "test"})
		var entries []string
		for i := range ops {
			id := fmt.Sprintf("op-%03d", i)
			db.PutOperation(&database.Operation{ID: id, PartitionKey: "sub", Request: arm.RequestCreate,
				Status: arm.ProvisioningStateSucceeded, LastTransitionTime: time.Now().UTC(),
				NotificationURI: "https://arm.example/notify/" + id})
			entries = append(entries, `{"subscriptionId":"sub","operationId":"`+id+`"}`)
		}
		done := make(chan Tally, 1)
		go func() {
			res, err := f.Handle(context.Background(), &functions.Invocation{
				ID: "inv", Function: "poll", Log: slog.New(slog.DiscardHandler),
				Data:     map[string]json.RawMessage{Binding: json.RawMessage(`{"operations":[` + strings.Join(entries, ",") + `]}`)},
				Metadata: map[string]json.RawMessage{},
			})
			if err != nil {
				done <- Tally{Outcome(err.Error()): 1}
				return
			}
			done <- res.ReturnValue.(Tally)
		}()

		synctest.Wait()
		inFlight, _, _ := n.counts()
		require.Equal(t, maxDeliveries, inFlight, "notifications in flight once no more can start")
		close(n.release)
		require.Equal(t, Tally{OutcomeNotified: ops}, <-done)
		_, peak, sent := n.counts()
		require.Equal(t, maxDeliveries, peak)
		require.Equal(t, ops, sent)
	})
}
