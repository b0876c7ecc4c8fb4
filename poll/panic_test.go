package poll_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/functions"
	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/clusterservice"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/internal/lock"
	"github.com/opstatus/opstatus/internal/testenv"
	"github.com/opstatus/opstatus/poll"
)

// panicAt names the one call that panics: its name and the id it is made
// for (an operation id, a Resources key, a lock id or a Cluster Service
// path). The zero value panics nowhere.
type panicAt struct{ call, id string }

func (p *panicAt) check(call, id string) {
	if p.call == call && p.id == id {
		panic("kaboom in " + call)
	}
}

// panickyDB is a DBClient whose calls panic where at says.
type panickyDB struct {
	database.DBClient
	at *panicAt
}

func (d panickyDB) GetOperation(ctx context.Context, sub, id string) (*database.Operation, error) {
	d.at.check("GetOperation", id)
	return d.DBClient.GetOperation(ctx, sub, id)
}

func (d panickyDB) ReplaceOperation(ctx context.Context, op *database.Operation) (*database.Operation, error) {
	d.at.check("ReplaceOperation", op.ID)
	return d.DBClient.ReplaceOperation(ctx, op)
}

func (d panickyDB) GetResource(ctx context.Context, sub, key string) (*database.Resource, error) {
	d.at.check("GetResource", key)
	return d.DBClient.GetResource(ctx, sub, key)
}

func (d panickyDB) Locks() database.LockStore { return panickyLocks{d.DBClient.Locks(), d.at} }

type panickyLocks struct {
	database.LockStore
	at *panicAt
}

func (l panickyLocks) Create(ctx context.Context, id, owner string, ttl time.Duration) (azcore.ETag, error) {
	l.at.check("Lock.Create", id)
	return l.LockStore.Create(ctx, id, owner, ttl)
}

type panickyCS struct {
	poll.ClusterService
	at *panicAt
}

func (c panickyCS) Status(ctx context.Context, id clusterservice.InternalID) (clusterservice.Status, error) {
	c.at.check("Status", id.Path)
	return c.ClusterService.Status(ctx, id)
}

type panickyNotifier struct {
	poll.Notifier
	at *panicAt
}

func (n panickyNotifier) Notify(ctx context.Context, uri string, st arm.OperationStatus) error {
	n.at.check("Notify", st.Name)
	return n.Notifier.Notify(ctx, uri, st)
}

// A panic in the work of one operation, in any of the goroutines poll
// runs it in, leaves that operation deferred with its stack in the log:
// the process lives, the invocation answers 200, the message's other
// operations get their outcomes, and the next poll finishes the work.
func TestPanicDefersOnlyItsOperation(t *testing.T) {
	const other = "1a2b3c4d-0000-4000-8000-000000000002"
	cluster := func(name string) string { return "/api/aro_hcp/v1alpha1/clusters/" + name }
	key := func(name string) string { return clusterKey + "-" + name }
	for _, tc := range []struct {
		name     string
		at       panicAt
		deferred []string // the operations left for the next poll
		logged   string   // the operation_id, else the subscription_id, of the panic's log lines
		panics   int      // how many times it panics; 0 for once
	}{
		{name: "cluster service call", at: panicAt{"Status", cluster("a")}, deferred: []string{"moves-a"}, logged: "moves-a"},
		{name: "resource read beside the operation's", at: panicAt{"GetResource", key("a")}, deferred: []string{"moves-a"}, logged: "moves-a"},
		{name: "operation write", at: panicAt{"ReplaceOperation", "moves-a"}, deferred: []string{"moves-a"}, logged: "moves-a"},
		// Once for the writes' hold and once for the notification's.
		{name: "taking the lock", at: panicAt{"Lock.Create", sub}, deferred: []string{"moves-a", "moves-b", "ended"}, logged: sub, panics: 2},
		{name: "notification", at: panicAt{"Notify", "ended"}, deferred: []string{"ended"}, logged: "ended"},
		{name: "notification record", at: panicAt{"ReplaceOperation", "ended"}, deferred: []string{"ended"}, logged: "ended"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			at := tc.at
			db := panickyDB{f.db, &at}
			f.fn.DB = db
			f.fn.Locker = lock.New(db.Locks(), lock.Options{Wait: 200 * time.Millisecond, RetryInterval: 50 * time.Millisecond})
			f.fn.Cluster = panickyCS{f.fn.Cluster, &at}
			f.fn.Notifier = panickyNotifier{f.fn.Notifier, &at}
			for _, name := range []string{"a", "b", "o", "s"} {
				f.cs.SetStatus(cluster(name), 200, clusterStatus("installing"))
			}
			for _, op := range []database.Operation{
				{ID: "moves-a", Request: arm.RequestCreate, Status: arm.ProvisioningStateAccepted, InternalID: cluster("a"), ExternalID: key("a")},
				{ID: "moves-b", Request: arm.RequestCreate, Status: arm.ProvisioningStateAccepted, InternalID: cluster("b"), ExternalID: key("b")},
				{ID: "other-moves", PartitionKey: other, Request: arm.RequestCreate, Status: arm.ProvisioningStateAccepted, InternalID: cluster("o"),
					ExternalID: strings.Replace(clusterKey, sub, other, 1)},
				{ID: "same", Request: arm.RequestCreate, Status: arm.ProvisioningStateProvisioning, InternalID: cluster("s"), ExternalID: key("s")},
				{ID: "ended", Request: arm.RequestCreate, Status: arm.ProvisioningStateSucceeded,
					LastTransitionTime: f.now.Add(-time.Minute), NotificationURI: f.armURL},
			} {
				f.putOp(op)
				if op.PartitionKey == "" {
					f.db.PutResource(&database.Resource{ID: "r-" + op.ID, PartitionKey: sub, Key: op.ExternalID,
						ActiveOperationID: op.ID, ProvisioningState: op.Status})
				}
			}
			msg := batch(time.Time{}, "moves-a", "moves-b", other+"|other-moves", "same", "ended")
			outcomes := map[string]poll.Outcome{
				"moves-a": poll.OutcomeUpdated, "moves-b": poll.OutcomeUpdated, "other-moves": poll.OutcomeUpdated,
				"same": poll.OutcomeUnchanged, "ended": poll.OutcomeNotified,
			}
			want := poll.Tally{}
			for id, o := range outcomes {
				if !slices.Contains(tc.deferred, id) {
					want[o]++
				}
			}
			want[poll.OutcomeDeferred] = len(tc.deferred)

			var logs testenv.SyncBuffer
			res, err := f.fn.Handle(context.Background(), &functions.Invocation{
				ID: "inv-panic", Function: "poll", Log: slog.New(slog.NewJSONHandler(&logs, nil)),
				Data:     map[string]json.RawMessage{"operation": json.RawMessage(msg)},
				Metadata: map[string]json.RawMessage{},
			})
			require.NoError(t, err, "a panic in one operation's work does not fail the invocation")
			require.Equal(t, want, res.ReturnValue)

			var panicked, left []map[string]any
			for line := range strings.Lines(logs.String()) {
				var rec map[string]any
				require.NoError(t, json.Unmarshal([]byte(line), &rec))
				switch rec["msg"] {
				case "poll panicked; its work is left for the next scan":
					panicked = append(panicked, rec)
				case "operation left unchanged; the next scan retries it":
					left = append(left, rec)
				}
			}
			require.Len(t, panicked, max(tc.panics, 1), logs.String())
			for _, rec := range panicked {
				require.Equal(t, "ERROR", rec["level"])
				require.Equal(t, "kaboom in "+tc.at.call, rec["panic"])
				require.Contains(t, rec["stack"], "poll/panic_test.go", "the stack reaches the panic")
				if id, ok := rec["operation_id"]; ok {
					require.Equal(t, tc.logged, id)
				} else {
					require.Equal(t, tc.logged, rec["subscription_id"])
				}
			}
			var leftIDs []string
			for _, rec := range left {
				require.Equal(t, "ERROR", rec["level"])
				require.Contains(t, rec["error"], "panicked: kaboom in "+tc.at.call)
				leftIDs = append(leftIDs, rec["operation_id"].(string))
			}
			require.ElementsMatch(t, tc.deferred, leftIDs)

			// The next poll, with the bug gone, finishes the work.
			at = panicAt{}
			require.NotContains(t, f.deliver(t, msg, time.Time{}), poll.OutcomeDeferred)
			for _, id := range []string{"moves-a", "moves-b"} {
				require.Equal(t, arm.ProvisioningStateProvisioning, f.op(t, id).Status, id)
			}
			require.Empty(t, f.op(t, "ended").NotificationURI)
			_, err = f.db.Locks().Create(context.Background(), sub, "next", time.Second)
			require.NoError(t, err, "no lock left behind")
		})
	}
}
