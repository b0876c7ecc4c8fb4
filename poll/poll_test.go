package poll_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/functions"
	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/clusterservice/clusterservicetesting"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/internal/database/databasetesting"
	"github.com/opstatus/opstatus/internal/lock"
	"github.com/opstatus/opstatus/internal/testenv"
	"github.com/opstatus/opstatus/poll"
)

const (
	sub        = "0b5f4d52-8b0b-4d57-9a0e-6a4e0a4e0a4e"
	clusterKey = "/subscriptions/" + sub + "/resourceGroups/rg/providers/Microsoft.RedHatOpenShift/hcpOpenShiftClusters/c1"
	clusterCS  = "/api/aro_hcp/v1alpha1/clusters/abc"
)

// clusterObject is GET {internalId} of clusterCS, which a Create that
// succeeds bills from.
const clusterObject = `{"kind":"Cluster","id":"abc","creation_timestamp":"2026-11-30T11:00:00Z","azure":{"managed_resource_group_name":"abc-managed"}}`

func clusterStatus(state string) string {
	return `{"kind":"ClusterStatus","id":"abc","state":"` + state + `"}`
}

// notifications is ARM, with what it received decoded.
type notifications struct{ *testenv.ARM }

func (n notifications) got() []arm.OperationStatus {
	var out []arm.OperationStatus
	for _, r := range n.Received() {
		var st arm.OperationStatus
		_ = json.Unmarshal(r.Raw, &st)
		out = append(out, st)
	}
	return out
}

type fixture struct {
	db     *databasetesting.MemoryClient
	cs     *clusterservicetesting.Fake
	arm    notifications
	armURL string
	fn     *poll.Function
	calls  map[databasetesting.Op]int
	mu     sync.Mutex
	now    time.Time
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	f := &fixture{
		db:    databasetesting.NewMemoryClient(5 * time.Second),
		cs:    clusterservicetesting.New(map[string]clusterservicetesting.Reply{clusterCS: {Code: http.StatusOK, Body: clusterObject}}),
		arm:   notifications{&testenv.ARM{}},
		calls: map[databasetesting.Op]int{},
		now:   time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC),
	}
	f.db.Hook = func(call databasetesting.Op) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.calls[call]++
		return nil
	}
	armServer := httptest.NewServer(f.arm)
	t.Cleanup(armServer.Close)
	f.armURL = armServer.URL + "/notify"
	f.fn = poll.New(poll.Config{
		DB:       f.db,
		Cluster:  f.cs.Client(t),
		Locker:   lock.New(f.db.Locks(), lock.Options{Wait: 200 * time.Millisecond, RetryInterval: 50 * time.Millisecond}),
		Notifier: arm.NewNotifier(true),
		Owner:    "opstatus-test",
		Location: "eastus",
		Now:      func() time.Time { return f.now },
		Interval: 10 * time.Second,
	})
	return f
}

// reconfigure makes the fixture's Function again with change applied: its
// gates are sized when it is made.
func (f *fixture) reconfigure(change func(*poll.Config)) {
	cfg := f.fn.Config
	change(&cfg)
	f.fn = poll.New(cfg)
}

func (f *fixture) count(call databasetesting.Op) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[call]
}

func (f *fixture) writes() int {
	return f.count(databasetesting.OpReplaceOperation) + f.count(databasetesting.OpReplaceResource) + f.count(databasetesting.OpDeleteResource)
}

func (f *fixture) lockOps() int {
	return f.count(databasetesting.OpLockCreate) + f.count(databasetesting.OpLockRenew) + f.count(databasetesting.OpLockDelete)
}

func (f *fixture) resetCounts() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = map[databasetesting.Op]int{}
}

func (f *fixture) putOp(op database.Operation) {
	if op.PartitionKey == "" {
		op.PartitionKey = sub
	}
	if op.ExternalID == "" {
		op.ExternalID = clusterKey
	}
	if op.InternalID == "" {
		op.InternalID = clusterCS
	}
	f.db.PutOperation(&op)
}

func (f *fixture) op(t *testing.T, id string) *database.Operation {
	t.Helper()
	op, err := f.db.GetOperation(context.Background(), sub, id)
	require.NoError(t, err)
	return op
}

// invoke runs the handler as the host would, with msg as the queue message.
func (f *fixture) invoke(t testing.TB, msg string) (*functions.Result, error) {
	t.Helper()
	inv := &functions.Invocation{
		ID:       "inv-1",
		Function: "poll",
		Data:     map[string]json.RawMessage{"operation": json.RawMessage(msg)},
		Metadata: map[string]json.RawMessage{},
		Log:      slog.New(slog.DiscardHandler),
	}
	return f.fn.Handle(context.Background(), inv)
}

// invokeAt delivers msg as a message the queue took in at inserted.
func (f *fixture) invokeAt(t testing.TB, msg string, inserted time.Time) (*functions.Result, error) {
	t.Helper()
	inv := &functions.Invocation{
		ID:       "inv-1",
		Function: "poll",
		Data:     map[string]json.RawMessage{"operation": json.RawMessage(msg)},
		Metadata: map[string]json.RawMessage{"InsertionTime": json.RawMessage(`"` + inserted.Format(time.RFC3339) + `"`)},
		Log:      slog.New(slog.DiscardHandler),
	}
	return f.fn.Handle(context.Background(), inv)
}

// only returns the outcome of a message's one operation.
func only(t testing.TB, res *functions.Result) poll.Outcome {
	t.Helper()
	tally, ok := res.ReturnValue.(poll.Tally)
	require.True(t, ok, "ReturnValue %#v", res.ReturnValue)
	require.Len(t, tally, 1, "%v", tally)
	for o, n := range tally {
		require.Equal(t, 1, n, "%v", tally)
		return o
	}
	return ""
}

func (f *fixture) poll(t testing.TB, opID string) poll.Outcome {
	t.Helper()
	res, err := f.invoke(t, `{"subscriptionId":"`+sub+`","operationId":"`+opID+`"}`)
	require.NoError(t, err)
	return only(t, res)
}

// Ids poll will not act on answer 200 "invalid": see ids_test.go.
func TestMalformedMessagesAnswer400(t *testing.T) {
	for name, msg := range map[string]string{
		"not json":          `not json`,
		"array":             `[1,2]`,
		"missing operation": `{"subscriptionId":"s"}`,
		"missing sub":       `{"operationId":"o"}`,
		"wrong type":        `{"subscriptionId":5,"operationId":"o"}`,
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			_, err := f.invoke(t, msg)
			require.Error(t, err)
			require.Equal(t, http.StatusBadRequest, functions.StatusOf(err))
			require.Zero(t, f.cs.Calls())
			require.Zero(t, f.writes())
		})
	}
}

func TestMessageDecodesFromHostEncodings(t *testing.T) {
	f := newFixture(t)
	plain := `{"subscriptionId":"` + sub + `","operationId":"gone","extra":true}`
	quoted, _ := json.Marshal(plain)
	for _, msg := range []string{plain, string(quoted)} {
		res, err := f.invoke(t, msg)
		require.NoError(t, err)
		require.Equal(t, poll.OutcomeGone, only(t, res))
	}
}

func TestNothingToDoCallsNoOne(t *testing.T) {
	f := newFixture(t)
	f.putOp(database.Operation{ID: "done", Request: arm.RequestCreate, Status: arm.ProvisioningStateSucceeded})
	require.Equal(t, poll.OutcomeGone, f.poll(t, "missing"))
	require.Equal(t, poll.OutcomeDone, f.poll(t, "done"))
	require.Zero(t, f.cs.Calls())
	require.Zero(t, f.writes())
	require.Zero(t, f.lockOps())
}

func TestUnchangedStatusCostsOneReadAndOneCall(t *testing.T) {
	f := newFixture(t)
	f.putOp(database.Operation{ID: "op", Request: arm.RequestCreate, Status: arm.ProvisioningStateProvisioning})
	f.cs.SetStatus(clusterCS, 200, clusterStatus("installing"))
	f.resetCounts()
	require.Equal(t, poll.OutcomeUnchanged, f.poll(t, "op"))
	require.Equal(t, 1, f.cs.Calls())
	require.Equal(t, 1, f.count(databasetesting.OpGetOperation))
	require.Zero(t, f.writes())
	require.Zero(t, f.lockOps())
}

func TestCreateLifecycleMovesOperationAndResource(t *testing.T) {
	f := newFixture(t)
	start := f.now.Add(-time.Minute)
	f.putOp(database.Operation{ID: "op", Request: arm.RequestCreate, Status: arm.ProvisioningStateAccepted,
		StartTime: start, LastTransitionTime: start, OperationID: "/subscriptions/" + sub + "/providers/x/hcpOperationStatuses/op",
		NotificationURI: f.armURL})
	f.db.PutResource(&database.Resource{ID: "r1", PartitionKey: sub, Key: clusterKey, InternalID: clusterCS,
		ActiveOperationID: "op", ProvisioningState: arm.ProvisioningStateAccepted})

	f.cs.SetStatus(clusterCS, 200, clusterStatus("pending"))
	require.Equal(t, poll.OutcomeUnchanged, f.poll(t, "op"))

	f.cs.SetStatus(clusterCS, 200, clusterStatus("installing"))
	require.Equal(t, poll.OutcomeUpdated, f.poll(t, "op"))
	op := f.op(t, "op")
	require.Equal(t, arm.ProvisioningStateProvisioning, op.Status)
	require.Equal(t, f.now, op.LastTransitionTime)
	require.Equal(t, f.armURL, op.NotificationURI, "no notification before the end")
	r, err := f.db.GetResource(context.Background(), sub, clusterKey)
	require.NoError(t, err)
	require.Equal(t, arm.ProvisioningStateProvisioning, r.ProvisioningState)
	require.Equal(t, "op", r.ActiveOperationID)

	f.now = f.now.Add(time.Minute)
	f.cs.SetStatus(clusterCS, 200, clusterStatus("ready"))
	require.Equal(t, poll.OutcomeUpdated, f.poll(t, "op"))
	op = f.op(t, "op")
	require.Equal(t, arm.ProvisioningStateSucceeded, op.Status)
	require.Empty(t, op.NotificationURI, "notification delivered and cleared")
	r, err = f.db.GetResource(context.Background(), sub, clusterKey)
	require.NoError(t, err)
	require.Equal(t, arm.ProvisioningStateSucceeded, r.ProvisioningState)
	require.Empty(t, r.ActiveOperationID)

	got := f.arm.got()
	require.Len(t, got, 1)
	require.Equal(t, arm.ProvisioningStateSucceeded, got[0].Status)
	require.Equal(t, "op", got[0].Name)
	require.Equal(t, op.OperationID, got[0].ID)
	require.Equal(t, start, *got[0].StartTime)
	require.Equal(t, f.now, *got[0].EndTime)

	// Terminal now: nothing more to do, nobody called.
	calls := f.cs.Calls()
	require.Equal(t, poll.OutcomeDone, f.poll(t, "op"))
	require.Equal(t, calls, f.cs.Calls())
	require.Len(t, f.arm.got(), 1)
}

func TestFailedCreateRecordsTheProvisionError(t *testing.T) {
	f := newFixture(t)
	f.putOp(database.Operation{ID: "op", Request: arm.RequestCreate, Status: arm.ProvisioningStateProvisioning})
	f.cs.SetStatus(clusterCS, 200, `{"kind":"ClusterStatus","state":"error","provision_error_code":"OCM3001","provision_error_message":"quota exceeded"}`)
	require.Equal(t, poll.OutcomeUpdated, f.poll(t, "op"))
	op := f.op(t, "op")
	require.Equal(t, arm.ProvisioningStateFailed, op.Status)
	require.Equal(t, &arm.CloudErrorBody{Code: "OCM3001", Message: "quota exceeded"}, op.Error)
}

func TestResourceOwnedByAnotherOperationIsNotTouched(t *testing.T) {
	f := newFixture(t)
	f.putOp(database.Operation{ID: "op", Request: arm.RequestUpdate, Status: arm.ProvisioningStateAccepted})
	f.db.PutResource(&database.Resource{ID: "r1", PartitionKey: sub, Key: clusterKey,
		ActiveOperationID: "newer-op", ProvisioningState: arm.ProvisioningStateUpdating})
	f.cs.SetStatus(clusterCS, 200, clusterStatus("ready"))
	require.Equal(t, poll.OutcomeUpdated, f.poll(t, "op"))
	require.Equal(t, arm.ProvisioningStateSucceeded, f.op(t, "op").Status)
	r, err := f.db.GetResource(context.Background(), sub, clusterKey)
	require.NoError(t, err)
	require.Equal(t, "newer-op", r.ActiveOperationID)
	require.Equal(t, arm.ProvisioningStateUpdating, r.ProvisioningState)
}

func TestFinishedDeleteRemovesResourceAndChildren(t *testing.T) {
	f := newFixture(t)
	f.putOp(database.Operation{ID: "del", Request: arm.RequestDelete, Status: arm.ProvisioningStateDeleting})
	f.db.PutResource(&database.Resource{ID: "r1", PartitionKey: sub, Key: clusterKey, ActiveOperationID: "del", ProvisioningState: arm.ProvisioningStateDeleting})
	f.db.PutResource(&database.Resource{ID: "r2", PartitionKey: sub, Key: clusterKey + "/nodePools/np1", ProvisioningState: arm.ProvisioningStateSucceeded})
	f.db.PutResource(&database.Resource{ID: "r3", PartitionKey: sub, Key: clusterKey + "-other", ProvisioningState: arm.ProvisioningStateSucceeded})

	f.cs.SetStatus(clusterCS, 200, clusterStatus("uninstalling"))
	require.Equal(t, poll.OutcomeUnchanged, f.poll(t, "del"))
	f.cs.SetStatus(clusterCS, 200, clusterStatus("ready"))
	require.Equal(t, poll.OutcomeUnchanged, f.poll(t, "del"), "ready during a delete changes nothing")

	f.cs.Delete(clusterCS + "/status") // Cluster Service forgets the cluster: 404
	require.Equal(t, poll.OutcomeDeleted, f.poll(t, "del"))
	require.Equal(t, arm.ProvisioningStateSucceeded, f.op(t, "del").Status)
	var keys []string
	for _, r := range f.db.Resources() {
		keys = append(keys, r.Key)
	}
	require.Equal(t, []string{clusterKey + "-other"}, keys)
}

func TestDeleteKeepsAResourceTakenOverByAnotherOperation(t *testing.T) {
	f := newFixture(t)
	f.putOp(database.Operation{ID: "del", Request: arm.RequestDelete, Status: arm.ProvisioningStateDeleting})
	f.db.PutResource(&database.Resource{ID: "r1", PartitionKey: sub, Key: clusterKey, ActiveOperationID: "recreate", ProvisioningState: arm.ProvisioningStateAccepted})
	require.Equal(t, poll.OutcomeDeleted, f.poll(t, "del"))
	require.Len(t, f.db.Resources(), 1)
}

func TestNotFoundOutsideADeleteChangesNothing(t *testing.T) {
	f := newFixture(t)
	f.putOp(database.Operation{ID: "op", Request: arm.RequestCreate, Status: arm.ProvisioningStateAccepted})
	require.Equal(t, poll.OutcomeUnchanged, f.poll(t, "op"))
	require.Zero(t, f.writes())
}

func TestLockHeldByAnotherOwnerDefersTheWrite(t *testing.T) {
	f := newFixture(t)
	f.putOp(database.Operation{ID: "op", Request: arm.RequestCreate, Status: arm.ProvisioningStateAccepted})
	f.cs.SetStatus(clusterCS, 200, clusterStatus("installing"))
	etag := f.db.HoldLock(sub, "frontend", time.Minute)
	require.Equal(t, poll.OutcomeDeferred, f.poll(t, "op"))
	require.Equal(t, arm.ProvisioningStateAccepted, f.op(t, "op").Status)
	require.Zero(t, f.writes())

	require.NoError(t, f.db.Locks().Delete(context.Background(), sub, etag))
	require.Equal(t, poll.OutcomeUpdated, f.poll(t, "op"), "the next poll writes it")
	require.Equal(t, arm.ProvisioningStateProvisioning, f.op(t, "op").Status)
}

func TestDependencyFailuresDefer(t *testing.T) {
	for name, setup := range map[string]func(f *fixture){
		"cluster service 503":      func(f *fixture) { f.cs.SetStatus(clusterCS, 503, `{}`) },
		"cluster service 429":      func(f *fixture) { f.cs.SetStatus(clusterCS, 429, `{}`) },
		"cluster service 401":      func(f *fixture) { f.cs.SetStatus(clusterCS, 401, `{"kind":"Error"}`) },
		"cluster service non-JSON": func(f *fixture) { f.cs.SetStatus(clusterCS, 200, `<html>gateway</html>`) },
		"cosmos unavailable on read": func(f *fixture) {
			f.db.Hook = func(call databasetesting.Op) error {
				if call == databasetesting.OpGetOperation {
					return database.ErrUnavailable
				}
				return nil
			}
		},
		"cosmos unavailable on write": func(f *fixture) {
			f.cs.SetStatus(clusterCS, 200, clusterStatus("installing"))
			f.db.Hook = func(call databasetesting.Op) error {
				if call == databasetesting.OpReplaceOperation {
					return database.ErrUnavailable
				}
				return nil
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			f.putOp(database.Operation{ID: "op", Request: arm.RequestCreate, Status: arm.ProvisioningStateAccepted})
			setup(f)
			res, err := f.invoke(t, `{"subscriptionId":"`+sub+`","operationId":"op"}`)
			require.NoError(t, err, "a dependency failure must not send the message to the poison queue")
			require.Equal(t, poll.OutcomeDeferred, only(t, res))
			f.db.Hook = nil
			require.Equal(t, arm.ProvisioningStateAccepted, f.op(t, "op").Status)
			_, err = f.db.Locks().Create(context.Background(), sub, "next", time.Second)
			require.NoError(t, err, "the lock was released")
		})
	}
}

func TestUnusableItemsAreLeftAlone(t *testing.T) {
	f := newFixture(t)
	f.putOp(database.Operation{ID: "traversal", Request: arm.RequestCreate, Status: arm.ProvisioningStateAccepted, InternalID: "/api/../x"})
	f.putOp(database.Operation{ID: "foreign", Request: arm.RequestCreate, Status: arm.ProvisioningStateAccepted, InternalID: "https://evil.example/api/clusters_mgmt/v1/clusters/abc"})
	f.putOp(database.Operation{ID: "badrequest", Request: "Patch", Status: arm.ProvisioningStateAccepted})
	f.putOp(database.Operation{ID: "badstatus", Request: arm.RequestCreate, Status: "Weird"})
	f.db.PutRawOperation([]byte(`{"id":"illtyped","partitionKey":"` + sub + `","status":5}`))
	for _, id := range []string{"traversal", "foreign", "badrequest", "badstatus", "illtyped"} {
		require.Equal(t, poll.OutcomeInvalid, f.poll(t, id), id)
	}
	require.Zero(t, f.cs.Calls(), "no Cluster Service call for an unusable item")
	require.Zero(t, f.writes())
}

func TestInconsistentAndUnknownStatesWriteNothing(t *testing.T) {
	f := newFixture(t)
	f.putOp(database.Operation{ID: "op", Request: arm.RequestCreate, Status: arm.ProvisioningStateUpdating})
	for _, state := range []string{"pending", "validating", "hibernating", ""} {
		f.cs.SetStatus(clusterCS, 200, clusterStatus(state))
		require.Equal(t, poll.OutcomeUnchanged, f.poll(t, "op"), state)
	}
	require.Zero(t, f.writes())
}

func TestConcurrentWriterIsReReadAndDecidedAgain(t *testing.T) {
	f := newFixture(t)
	f.putOp(database.Operation{ID: "op", Request: arm.RequestCreate, Status: arm.ProvisioningStateAccepted})
	f.cs.SetStatus(clusterCS, 200, clusterStatus("installing"))
	raced := false
	f.db.Hook = func(call databasetesting.Op) error {
		if call == databasetesting.OpReplaceOperation && !raced {
			raced = true
			// The frontend rewrites the item between our read and our write.
			f.putOp(database.Operation{ID: "op", Request: arm.RequestCreate, Status: arm.ProvisioningStateAccepted, TenantID: "t2"})
		}
		return nil
	}
	require.Equal(t, poll.OutcomeUpdated, f.poll(t, "op"))
	op := f.op(t, "op")
	require.Equal(t, arm.ProvisioningStateProvisioning, op.Status)
	require.Equal(t, "t2", op.TenantID, "the concurrent write is kept")
}

// A Resources item the frontend gives to another operation between the
// read and the lock is not written: the If-Match fails, and the item read
// again no longer follows this operation.
func TestResourceTakenOverBeforeTheLockIsKept(t *testing.T) {
	f := newFixture(t)
	f.putOp(database.Operation{ID: "op", Request: arm.RequestCreate, Status: arm.ProvisioningStateAccepted})
	f.db.PutResource(&database.Resource{ID: "r1", PartitionKey: sub, Key: clusterKey, InternalID: clusterCS,
		ActiveOperationID: "op", ProvisioningState: arm.ProvisioningStateAccepted})
	f.cs.SetStatus(clusterCS, 200, clusterStatus("installing"))
	raced := false
	f.db.Hook = func(call databasetesting.Op) error {
		if call == databasetesting.OpReplaceResource && !raced {
			raced = true
			f.db.PutResource(&database.Resource{ID: "r1", PartitionKey: sub, Key: clusterKey, InternalID: clusterCS,
				ActiveOperationID: "next", ProvisioningState: arm.ProvisioningStateAccepted})
		}
		return nil
	}
	require.Equal(t, poll.OutcomeUpdated, f.poll(t, "op"))
	r := f.resource(t, clusterKey)
	require.Equal(t, "next", r.ActiveOperationID)
	require.Equal(t, arm.ProvisioningStateAccepted, r.ProvisioningState)
	require.Equal(t, arm.ProvisioningStateProvisioning, f.op(t, "op").Status)
}

func TestNotificationRetriesAndGivingUp(t *testing.T) {
	f := newFixture(t)
	ended := f.now.Add(-time.Minute)
	f.putOp(database.Operation{ID: "op", Request: arm.RequestCreate, Status: arm.ProvisioningStateFailed,
		LastTransitionTime: ended, NotificationURI: f.armURL, Error: &arm.CloudErrorBody{Code: "X", Message: "y"}})

	f.arm.SetStatus(http.StatusServiceUnavailable)
	require.Equal(t, poll.OutcomeDeferred, f.poll(t, "op"))
	require.Equal(t, f.armURL, f.op(t, "op").NotificationURI, "kept for the next scan")

	f.arm.SetStatus(http.StatusOK)
	require.Equal(t, poll.OutcomeNotified, f.poll(t, "op"))
	require.Empty(t, f.op(t, "op").NotificationURI)
	got := f.arm.got()
	require.Len(t, got, 2)
	require.Equal(t, &arm.CloudErrorBody{Code: "X", Message: "y"}, got[1].Error)
	require.Zero(t, f.cs.Calls())

	f.putOp(database.Operation{ID: "rejected", Request: arm.RequestCreate, Status: arm.ProvisioningStateSucceeded,
		LastTransitionTime: ended, NotificationURI: f.armURL})
	f.arm.SetStatus(http.StatusBadRequest)
	require.Equal(t, poll.OutcomeDone, f.poll(t, "rejected"))
	require.Empty(t, f.op(t, "rejected").NotificationURI, "a rejected notification is given up")

	f.putOp(database.Operation{ID: "old", Request: arm.RequestCreate, Status: arm.ProvisioningStateSucceeded,
		LastTransitionTime: f.now.Add(-2 * time.Hour), NotificationURI: f.armURL})
	calls := len(f.arm.got())
	require.Equal(t, poll.OutcomeDone, f.poll(t, "old"))
	require.Empty(t, f.op(t, "old").NotificationURI)
	require.Len(t, f.arm.got(), calls, "too old: not sent")

	f.putOp(database.Operation{ID: "plainhttp", Request: arm.RequestCreate, Status: arm.ProvisioningStateSucceeded,
		LastTransitionTime: ended, NotificationURI: "ftp://arm.example/x"})
	require.Equal(t, poll.OutcomeDone, f.poll(t, "plainhttp"))
}

// TestConcurrentPollsNotifyOnce: while one invocation is delivering an
// ended operation's notification, another for the same operation (an older
// message) sends nothing; after the first has cleared notificationUri, a
// third finds nothing to send either.
func TestConcurrentPollsNotifyOnce(t *testing.T) {
	f := newFixture(t)
	f.putOp(database.Operation{ID: "op", Request: arm.RequestCreate, Status: arm.ProvisioningStateSucceeded,
		LastTransitionTime: f.now.Add(-time.Minute), NotificationURI: f.armURL})
	arrived, release := f.arm.Hold()
	t.Cleanup(release)

	start := func() <-chan poll.Outcome {
		out := make(chan poll.Outcome, 1)
		go func() {
			res, err := f.invoke(t, `{"subscriptionId":"`+sub+`","operationId":"op"}`)
			if err != nil {
				out <- poll.Outcome(err.Error())
				return
			}
			out <- only(t, res)
		}()
		return out
	}
	first := start()
	select {
	case <-arrived:
	case <-time.After(time.Minute): // a bound against hanging, not a timing assertion
		t.Fatal("the first notification never reached ARM")
	}
	second := start()
	select {
	case got := <-second:
		require.Equal(t, poll.OutcomeDone, got, "the delivery in flight is left to the first")
	case <-arrived:
		t.Fatal("the second invocation sent the notification again")
	}
	release()
	require.Equal(t, poll.OutcomeNotified, <-first)
	require.Empty(t, f.op(t, "op").NotificationURI)
	require.Equal(t, poll.OutcomeDone, f.poll(t, "op"))
	require.Len(t, f.arm.got(), 1)
}

func TestNodePoolStatus(t *testing.T) {
	f := newFixture(t)
	npCS := clusterCS + "/node_pools/np1"
	f.putOp(database.Operation{ID: "np", Request: arm.RequestCreate, Status: arm.ProvisioningStateAccepted,
		InternalID: npCS, ExternalID: clusterKey + "/nodePools/np1"})
	f.cs.SetStatus(npCS, 200, `{"kind":"NodePoolStatus","id":"np1","state":{"kind":"NodePoolState","value":"recoverable_error"},"message":"no capacity"}`)
	require.Equal(t, poll.OutcomeUpdated, f.poll(t, "np"))
	op := f.op(t, "np")
	require.Equal(t, arm.ProvisioningStateFailed, op.Status)
	require.Equal(t, &arm.CloudErrorBody{Code: arm.CodeInternalServerError, Message: "no capacity"}, op.Error)
}
