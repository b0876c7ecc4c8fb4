package pickup_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/functions"
	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/budget"
	"github.com/opstatus/opstatus/internal/clusterservice/clusterservicetesting"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/internal/database/databasetesting"
	"github.com/opstatus/opstatus/internal/lock"
	"github.com/opstatus/opstatus/internal/queuemsg"
	"github.com/opstatus/opstatus/pickup"
	"github.com/opstatus/opstatus/poll"
	"github.com/opstatus/opstatus/scan"
)

const (
	interval = 10 * time.Second
	sub      = "aaaaaaaa-0000-4000-8000-000000000001"
)

// fixture is pickup over poll, both on one clock offset from the real one
// (the memory store stamps _ts with the real clock), with a fake Cluster
// Service that answers each operation's cluster in one state.
type fixture struct {
	db     *databasetesting.MemoryClient
	cs     *clusterservicetesting.Fake
	state  string
	poll   *poll.Function
	pickup *pickup.Function
	offset time.Duration
}

func newFixture(t testing.TB, state string) *fixture {
	t.Helper()
	f := &fixture{db: databasetesting.NewMemoryClient(5 * time.Second), cs: clusterservicetesting.New(nil), state: state}
	f.poll = poll.New(poll.Config{
		DB:       f.db,
		Cluster:  f.cs.Client(t),
		Locker:   lock.New(f.db.Locks(), lock.Options{Wait: 200 * time.Millisecond, RetryInterval: 50 * time.Millisecond}),
		Notifier: arm.NewNotifier(true),
		Owner:    "opstatus-test",
		Location: "eastus",
		Interval: interval,
		Now:      f.now,
	})
	f.pickup = &pickup.Function{Poll: f.poll.Poll, Interval: interval, Now: f.now}
	return f
}

func (f *fixture) now() time.Time { return time.Now().Add(f.offset) }

func internalID(name string) string { return "/api/aro_hcp/v1alpha1/clusters/" + name }

// answer makes Cluster Service answer the cluster of operation id in the
// fixture's state.
func (f *fixture) answer(id string) {
	f.cs.SetStatus(internalID(id), http.StatusOK, `{"kind":"ClusterStatus","id":"`+id+`","state":"`+f.state+`"}`)
}

// calls counts the status calls for the cluster of operation id.
func (f *fixture) calls(id string) int { return f.cs.Requested(internalID(id) + "/status") }

// create writes an Accepted cluster Create and its resource, as the
// frontend does.
func (f *fixture) create(id string) {
	f.put(id, arm.RequestCreate, arm.ProvisioningStateAccepted)
}

// put writes a cluster operation and its resource in status.
func (f *fixture) put(id string, request arm.Request, status arm.ProvisioningState) {
	key := "/subscriptions/" + sub + "/resourceGroups/rg/providers/Microsoft.RedHatOpenShift/hcpOpenShiftClusters/" + id
	f.db.PutOperation(&database.Operation{ID: id, PartitionKey: sub, Request: request, Status: status,
		ExternalID: key, InternalID: internalID(id), StartTime: time.Now().UTC()})
	f.db.PutResource(&database.Resource{ID: "res-" + id, PartitionKey: sub, Key: key, InternalID: internalID(id),
		ActiveOperationID: id, ProvisioningState: status})
	f.answer(id)
}

// doc is the operation item as the change feed carries it, with its
// system fields; change, if given, edits it first.
func (f *fixture) doc(t testing.TB, id string, change func(map[string]any)) string {
	t.Helper()
	raw := f.db.RawOperation(sub, id)
	require.NotNil(t, raw, id)
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m))
	m["_rid"], m["_self"], m["_lsn"] = "AAAA", "dbs/x/colls/y/docs/AAAA", 7
	if change != nil {
		change(m)
	}
	b, err := json.Marshal(m)
	require.NoError(t, err)
	return string(b)
}

// payload is the invocation body's Data as the host sends it: the batch's
// compact array text, serialized as a string once more.
func payload(docs ...string) map[string]json.RawMessage {
	arr := "[" + strings.Join(docs, ",") + "]"
	once, _ := json.Marshal(arr)
	twice, _ := json.Marshal(string(once))
	return map[string]json.RawMessage{pickup.Binding: twice}
}

// invoke runs pickup on data and returns its result, error and log.
func (f *fixture) invoke(t *testing.T, data map[string]json.RawMessage) (*functions.Result, string, error) {
	t.Helper()
	var logs bytes.Buffer
	inv := &functions.Invocation{ID: "pickup-1", Function: "pickup", Data: data, Metadata: map[string]json.RawMessage{},
		Log: slog.New(slog.NewTextHandler(&logs, nil))}
	res, err := f.pickup.Handle(context.Background(), inv)
	return res, logs.String(), err
}

func (f *fixture) status(t *testing.T, id string) arm.ProvisioningState {
	t.Helper()
	op, err := f.db.GetOperation(context.Background(), sub, id)
	require.NoError(t, err)
	return op.Status
}

// Of everything the feed carries, pickup polls only the operations only
// the frontend has written (Accepted for a Create) within the interval, that poll can
// act on; the rest is left to scan, and what is not an operation at all is
// logged and ignored. One Cluster Service call each, in the invocation.
func TestPickupPollsOnlyNewOperations(t *testing.T) {
	f := newFixture(t, "installing")
	for _, id := range []string{"new", "new-2", "provisioning", "ended", "old", "unusable"} {
		f.create(id)
	}
	docs := []string{
		f.doc(t, "new", nil),
		f.doc(t, "new-2", nil),
		f.doc(t, "new", nil), // the same write twice is polled once
		// opstatus's own write, and an ended operation.
		f.doc(t, "provisioning", func(m map[string]any) { m["status"] = "Provisioning" }),
		f.doc(t, "ended", func(m map[string]any) { m["status"] = "Succeeded"; m["notificationUri"] = "https://arm.example/n" }),
		// Accepted, but written longer ago than an interval: a replay of
		// the feed; scan has it.
		f.doc(t, "old", func(m map[string]any) { m["_ts"] = m["_ts"].(float64) - interval.Seconds() - 1 }),
		// Accepted without _ts, as no Cosmos item is: scan's.
		f.doc(t, "old", func(m map[string]any) { delete(m, "_ts") }),
		// An internalId poll refuses.
		f.doc(t, "unusable", func(m map[string]any) { m["internalId"] = "/api/other/v1/clusters/x" }),
		// Documents that are no operation at all.
		`42`, `"text"`, `null`, `[]`, `{}`, `{"id":"no-partition"}`, `{"id":7,"partitionKey":"sub"}`,
	}
	res, logs, err := f.invoke(t, payload(docs...))
	require.NoError(t, err)
	require.Equal(t, poll.Tally{poll.OutcomeUpdated: 2}, res.ReturnValue, logs)
	require.Equal(t, 1, f.calls("new"))
	require.Equal(t, 1, f.calls("new-2"))
	require.Equal(t, 2, f.cs.Calls(), "no call for anything else")
	require.Equal(t, arm.ProvisioningStateProvisioning, f.status(t, "new"))
	require.Equal(t, arm.ProvisioningStateAccepted, f.status(t, "old"), "left to scan")
	require.Contains(t, logs, "documents=15 operations=2 ignored=2 left_to_scan=2 unusable=8")
	require.Equal(t, 8, strings.Count(logs, "level=WARN"), logs)
	require.Contains(t, logs, "reason=internal_id")
}

// The frontend creates a Delete Deleting, not Accepted: a new Delete is
// pickup's as a new Create is. A Create or Update that opstatus moved to
// Deleting is opstatus's own write, and a Delete written an interval ago is
// scan's.
func TestPickupPollsNewDeletes(t *testing.T) {
	f := newFixture(t, "uninstalling")
	f.put("delete", arm.RequestDelete, arm.ProvisioningStateDeleting)
	f.put("old-delete", arm.RequestDelete, arm.ProvisioningStateDeleting)
	f.put("create", arm.RequestCreate, arm.ProvisioningStateDeleting)
	f.put("update", arm.RequestUpdate, arm.ProvisioningStateDeleting)
	docs := []string{
		f.doc(t, "delete", nil),
		f.doc(t, "old-delete", func(m map[string]any) { m["_ts"] = m["_ts"].(float64) - interval.Seconds() - 1 }),
		f.doc(t, "create", nil),
		f.doc(t, "update", nil),
	}
	res, logs, err := f.invoke(t, payload(docs...))
	require.NoError(t, err)
	require.Equal(t, poll.Tally{poll.OutcomeUnchanged: 1}, res.ReturnValue, logs)
	require.Equal(t, 1, f.calls("delete"), "the new Delete is checked in the invocation")
	require.Equal(t, 1, f.cs.Calls(), "no call for anything else")
	require.Contains(t, logs, "documents=4 operations=1 ignored=2 left_to_scan=1 unusable=0")
}

// A batch of unusable documents logs at most ten of them one by one, and
// counts the others in one line.
func TestPickupLogsUnusableDocumentsBounded(t *testing.T) {
	f := newFixture(t, "installing")
	docs := make([]string, 500)
	for i := range docs {
		docs[i] = fmt.Sprintf(`{"id":%d}`, i)
	}
	res, logs, err := f.invoke(t, payload(docs...))
	require.NoError(t, err)
	require.Equal(t, poll.Tally{}, res.ReturnValue)
	require.Equal(t, 11, strings.Count(logs, "level=WARN"), logs)
	require.Contains(t, logs, "more change feed documents unusable than are logged one by one\" documents=490")
	require.Zero(t, f.cs.Calls())
}

// Only a batch that is not an array answers 400; an empty one is nothing
// to do.
func TestPickupBatchShapes(t *testing.T) {
	f := newFixture(t, "installing")
	_, logs, err := f.invoke(t, map[string]json.RawMessage{pickup.Binding: json.RawMessage(`{"id":"x"}`)})
	require.Equal(t, http.StatusBadRequest, functions.StatusOf(err))
	require.Contains(t, logs, "unreadable change feed batch")
	_, _, err = f.invoke(t, map[string]json.RawMessage{"other": json.RawMessage(`[]`)})
	require.Equal(t, http.StatusBadRequest, functions.StatusOf(err))

	res, _, err := f.invoke(t, payload())
	require.NoError(t, err)
	require.Equal(t, poll.Tally{}, res.ReturnValue)
}

// A dependency that fails leaves the operation deferred and the answer
// 200: the feed is checkpointed whatever the answer, and scan sends the
// operation an interval after its write.
func TestPickupDeferredOperationIsScansAfterTheInterval(t *testing.T) {
	f := newFixture(t, "installing")
	f.create("new")
	f.cs.SetStatus(internalID("new"), http.StatusServiceUnavailable, `{"kind":"Error","reason":"down"}`)
	res, _, err := f.invoke(t, payload(f.doc(t, "new", nil)))
	require.NoError(t, err)
	require.Equal(t, poll.Tally{poll.OutcomeDeferred: 1}, res.ReturnValue)
	require.Equal(t, arm.ProvisioningStateAccepted, f.status(t, "new"))

	s := &scan.Function{DB: f.db, Interval: interval, PickupRuns: true, Now: func() time.Time { return f.now().Add(interval + time.Second) }}
	require.Equal(t, []string{sub + "/new"}, scanned(t, s))
}

// The cost rule: an operation Cluster Service keeps pending (so that it
// stays Accepted) is checked once by pickup when it is created, and then
// once an interval by scan's messages, never twice in one interval, with
// scans at every tick from a second after the pickup on (the write's _ts
// counts whole seconds, so scan waits for the interval from the end of
// that second).
func TestPickupAndScanCheckOnceAnInterval(t *testing.T) {
	f := newFixture(t, "pending")
	f.create("new")
	_, _, err := f.invoke(t, payload(f.doc(t, "new", nil)))
	require.NoError(t, err)
	require.Equal(t, 1, f.calls("new"))

	s := &scan.Function{DB: f.db, Interval: interval, PickupRuns: true, Now: f.now}
	for tick := range 4 {
		f.offset = time.Duration(tick)*interval + time.Second
		for _, m := range scanMessages(t, s) {
			body, err := json.Marshal(m)
			require.NoError(t, err)
			_, err = f.poll.Handle(context.Background(), &functions.Invocation{ID: fmt.Sprint("poll-", tick),
				Data: map[string]json.RawMessage{poll.Binding: body}, Metadata: map[string]json.RawMessage{}, Log: slog.New(slog.DiscardHandler)})
			require.NoError(t, err)
		}
		require.Equal(t, 1+tick, f.calls("new"), "calls after the scan at tick %d", tick)
	}
	require.Equal(t, arm.ProvisioningStateAccepted, f.status(t, "new"))
}

// A message poll reaches only after an interval from the oldest write it
// names is superseded: scan has the operation by then.
func TestPickupLateIsSuperseded(t *testing.T) {
	f := newFixture(t, "installing")
	f.create("new")
	doc := f.doc(t, "new", nil)
	// pickup judges the document fresh, half an interval after its write,
	// and poll, reached later, finds an interval over since the write,
	// though not since the pickup.
	f.pickup.Now = func() time.Time { return time.Now().Add(interval / 2) }
	f.offset = interval + time.Second
	res, _, err := f.invoke(t, payload(doc))
	require.NoError(t, err)
	require.Equal(t, poll.Tally{poll.OutcomeSuperseded: 1}, res.ReturnValue)
	require.Zero(t, f.cs.Calls())
}

func scanMessages(t *testing.T, s *scan.Function) []queuemsg.Message {
	t.Helper()
	res, err := s.Handle(context.Background(), &functions.Invocation{ID: "scan", Function: "scan",
		Data:     map[string]json.RawMessage{scan.TimerBinding: json.RawMessage(`{"ScheduleStatus":null,"IsPastDue":false}`)},
		Metadata: map[string]json.RawMessage{}, Log: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	return res.Outputs[scan.OutputBinding].([]queuemsg.Message)
}

func scanned(t *testing.T, s *scan.Function) []string {
	t.Helper()
	var out []string
	for _, m := range scanMessages(t, s) {
		for _, op := range m.Operations {
			out = append(out, op.SubscriptionID+"/"+op.OperationID)
		}
	}
	return out
}

// In a fixed Operations partition, a new operation's subscription is its
// externalId's: pickup names it in the message, and poll writes the
// Resources item of that subscription. A new operation whose externalId
// names no subscription, or a document of another partition, is one poll
// could not act on.
func TestPickupInAFixedPartition(t *testing.T) {
	const fixed = "workaround"
	f := newFixture(t, "installing")
	f.db.OperationsPartition = fixed
	f.pickup.Partition = fixed
	key := "/subscriptions/" + strings.ToUpper(sub) + "/resourceGroups/rg/providers/Microsoft.RedHatOpenShift/hcpOpenShiftClusters/c"
	f.db.PutOperation(&database.Operation{ID: "new", PartitionKey: fixed, Request: arm.RequestCreate, Status: arm.ProvisioningStateAccepted,
		ExternalID: key, InternalID: internalID("new"), StartTime: time.Now().UTC()})
	f.db.PutResource(&database.Resource{ID: "res-new", PartitionKey: sub, Key: key, InternalID: internalID("new"),
		ActiveOperationID: "new", ProvisioningState: arm.ProvisioningStateAccepted})
	f.answer("new")
	f.db.PutOperation(&database.Operation{ID: "no-sub", PartitionKey: fixed, Request: arm.RequestCreate, Status: arm.ProvisioningStateAccepted,
		ExternalID: "/resourceGroups/rg", InternalID: internalID("no-sub"), StartTime: time.Now().UTC()})
	docs := []string{
		f.doc(t, "new", nil),
		f.doc(t, "no-sub", nil),
		f.doc(t, "new", func(m map[string]any) { m["id"], m["partitionKey"] = "elsewhere", sub }),
	}
	res, logs, err := f.invoke(t, payload(docs...))
	require.NoError(t, err)
	require.Equal(t, poll.Tally{poll.OutcomeUpdated: 1}, res.ReturnValue, logs)
	require.Equal(t, 1, f.cs.Calls())
	require.Equal(t, arm.ProvisioningStateProvisioning, f.status(t, "new"))
	r, err := f.db.GetResource(context.Background(), sub, key)
	require.NoError(t, err)
	require.Equal(t, arm.ProvisioningStateProvisioning, r.ProvisioningState)
	require.Contains(t, logs, "documents=3 operations=1 ignored=0 left_to_scan=0 unusable=2")
	require.Contains(t, logs, "externalId \\\"/resourceGroups/rg\\\" is no ARM resource ID of a subscription")
	require.Contains(t, logs, "not in the Operations partition")
}

// pickup's invocations put the process in pickup's budget group, whose
// floor the ledger keeps, whatever the invocation's function is called.
func TestPickupServesThePickupGroup(t *testing.T) {
	f := newFixture(t, "installing")
	permits := budget.New(budget.Config{Ceiling: 8})
	cfg := f.poll.Config
	cfg.Cluster, cfg.Permits = f.cs.Client(t), permits
	f.poll = poll.New(cfg)
	f.pickup.Poll = f.poll.Poll
	require.Equal(t, budget.GroupPoll, permits.Figures().Group)
	f.create("new")
	inv := &functions.Invocation{ID: "pickup-1", Function: "operations-feed", Data: payload(f.doc(t, "new", nil)),
		Metadata: map[string]json.RawMessage{}, Log: slog.New(slog.DiscardHandler)}
	res, err := f.pickup.Handle(context.Background(), inv)
	require.NoError(t, err)
	require.Equal(t, poll.Tally{poll.OutcomeUpdated: 1}, res.ReturnValue)
	require.Equal(t, budget.GroupPickup, permits.Figures().Group)
}
