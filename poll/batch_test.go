package poll_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/functions"
	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/clusterservice"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/internal/database/databasetesting"
	"github.com/opstatus/opstatus/poll"
)

// batch is a batch message naming ops of sub (an entry "raw:<json>" is put
// in as it is), with scannedAt when it is not zero.
func batch(scannedAt time.Time, ops ...string) string {
	var entries []string
	for _, op := range ops {
		if raw, ok := strings.CutPrefix(op, "raw:"); ok {
			entries = append(entries, raw)
			continue
		}
		sub, id, ok := strings.Cut(op, "|")
		if !ok {
			sub, id = sub2(""), op
		}
		b, _ := json.Marshal(map[string]string{"subscriptionId": sub, "operationId": id})
		entries = append(entries, string(b))
	}
	msg := `{"operations":[` + strings.Join(entries, ",") + `]`
	if !scannedAt.IsZero() {
		msg += `,"scannedAt":"` + scannedAt.Format(time.RFC3339Nano) + `"`
	}
	return msg + "}"
}

// sub2 returns sub, or the subscription named.
func sub2(s string) string {
	if s == "" {
		return sub
	}
	return s
}

// deliver runs the handler with msg as the host delivers it, inserted at
// inserted (zero: no InsertionTime).
func (f *fixture) deliver(t *testing.T, msg string, inserted time.Time) poll.Tally {
	t.Helper()
	meta := map[string]json.RawMessage{"DequeueCount": json.RawMessage(`"1"`)}
	if !inserted.IsZero() {
		meta["InsertionTime"] = json.RawMessage(`"` + inserted.Format("2006-01-02T15:04:05+00:00") + `"`)
	}
	res, err := f.fn.Handle(context.Background(), &functions.Invocation{
		ID: "inv-b", Function: "poll", Log: slog.New(slog.DiscardHandler),
		Data:     map[string]json.RawMessage{"operation": json.RawMessage(msg)},
		Metadata: meta,
	})
	require.NoError(t, err)
	return res.ReturnValue.(poll.Tally)
}

// Every operation of a message gets its own outcome; one that cannot be
// acted on never fails the others, and the ReturnValue counts them.
func TestBatchMessageOutcomes(t *testing.T) {
	f := newFixture(t)
	other := "1a2b3c4d-0000-4000-8000-000000000002"
	otherCS := "/api/aro_hcp/v1alpha1/clusters/other"
	f.putOp(database.Operation{ID: "same", Request: arm.RequestCreate, Status: arm.ProvisioningStateProvisioning})
	f.putOp(database.Operation{ID: "moves", Request: arm.RequestCreate, Status: arm.ProvisioningStateAccepted})
	f.putOp(database.Operation{ID: "fails", Request: arm.RequestCreate, Status: arm.ProvisioningStateAccepted, InternalID: otherCS})
	f.putOp(database.Operation{ID: "ended", Request: arm.RequestCreate, Status: arm.ProvisioningStateSucceeded,
		LastTransitionTime: f.now.Add(-time.Minute), NotificationURI: f.armURL})
	f.putOp(database.Operation{ID: "other-moves", PartitionKey: other, Request: arm.RequestCreate, Status: arm.ProvisioningStateAccepted,
		ExternalID: strings.Replace(clusterKey, sub, other, 1)})
	f.cs.SetStatus(clusterCS, 200, clusterStatus("installing"))
	f.cs.SetStatus(otherCS, 503, `{}`)

	tally := f.deliver(t, batch(time.Time{},
		"same", "moves", "fails", "ended", "missing", other+"|other-moves",
		"a/b", `raw:{"subscriptionId":5,"operationId":"x"}`, "raw:7"), time.Time{})
	require.Equal(t, poll.Tally{
		poll.OutcomeUnchanged: 1, poll.OutcomeUpdated: 2, poll.OutcomeDeferred: 1,
		poll.OutcomeNotified: 1, poll.OutcomeGone: 1, poll.OutcomeInvalid: 3,
	}, tally)
	require.Equal(t, arm.ProvisioningStateProvisioning, f.op(t, "moves").Status)
	require.Equal(t, arm.ProvisioningStateAccepted, f.op(t, "fails").Status)
	other2, err := f.db.GetOperation(context.Background(), other, "other-moves")
	require.NoError(t, err)
	require.Equal(t, arm.ProvisioningStateProvisioning, other2.Status)
	require.Empty(t, f.op(t, "ended").NotificationURI)
	require.Len(t, f.arm.got(), 1)
}

// A message malformed as a whole answers 400; one of the older single shape
// still works.
func TestBatchMessageShapes(t *testing.T) {
	f := newFixture(t)
	f.putOp(database.Operation{ID: "op", Request: arm.RequestCreate, Status: arm.ProvisioningStateAccepted})
	f.cs.SetStatus(clusterCS, 200, clusterStatus("installing"))
	for _, msg := range []string{`{"operations":[]}`, `{"operations":"op"}`, `{"operations":[` + strings.Repeat(`{},`, 1000) + `{}]}`} {
		_, err := f.invoke(t, msg)
		require.Equal(t, http.StatusBadRequest, functions.StatusOf(err), msg)
	}
	require.Zero(t, f.cs.Calls())
	require.Equal(t, poll.OutcomeUpdated, f.poll(t, "op"), "a single-operation message")
}

// A subscription's changed operations are written under its lock a few at
// a time: the lock is released and taken again rather than held through
// the whole message.
func TestBatchWritesHoldTheLockAFewAtATime(t *testing.T) {
	f := newFixture(t)
	f.fn.WritesPerHold = 4
	var ops []string
	for i := range 10 {
		id := fmt.Sprintf("op-%d", i)
		f.putOp(database.Operation{ID: id, Request: arm.RequestCreate, Status: arm.ProvisioningStateAccepted})
		ops = append(ops, id)
	}
	f.cs.SetStatus(clusterCS, 200, clusterStatus("installing"))
	var mu sync.Mutex
	held, writes, maxWrites := false, 0, 0
	f.db.Hook = func(call databasetesting.Op) error {
		mu.Lock()
		defer mu.Unlock()
		switch call {
		case databasetesting.OpLockCreate:
			held, writes = true, 0
		case databasetesting.OpLockDelete:
			held = false
		case databasetesting.OpReplaceOperation:
			if !held {
				return fmt.Errorf("a write outside the lock")
			}
			writes++
			maxWrites = max(maxWrites, writes)
		}
		f.calls[call]++
		return nil
	}
	require.Equal(t, poll.Tally{poll.OutcomeUpdated: 10}, f.deliver(t, batch(time.Time{}, ops...), time.Time{}))
	require.Equal(t, 3, f.count(databasetesting.OpLockCreate), "10 writes, 4 a hold")
	require.Equal(t, 4, maxWrites)
}

// slowInstalling returns a client of a Cluster Service that answers every
// status call "installing" after 5 ms, calling seen as each request
// arrives and the func it returns once the answer is written.
func slowInstalling(t *testing.T, seen func(*http.Request) (done func())) *clusterservice.Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer seen(r)()
		time.Sleep(5 * time.Millisecond)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(clusterStatus("installing")))
	}))
	t.Cleanup(srv.Close)
	client, err := clusterservice.NewClient(clusterservice.Config{URL: srv.URL})
	require.NoError(t, err)
	return client
}

// The Cluster Service requests in flight never exceed the process's cap,
// whatever the number of operations and messages.
func TestClusterServiceCallsAreCapped(t *testing.T) {
	f := newFixture(t)
	var inFlight, peak atomic.Int32
	f.reconfigure(func(c *poll.Config) {
		c.Cluster, c.MaxInFlight = slowInstalling(t, func(*http.Request) (done func()) {
			n := inFlight.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			return func() { inFlight.Add(-1) }
		}), 3
	})
	var ops []string
	for i := range 40 {
		id := fmt.Sprintf("op-%d", i)
		f.putOp(database.Operation{ID: id, Request: arm.RequestCreate, Status: arm.ProvisioningStateProvisioning})
		ops = append(ops, id)
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			require.Equal(t, poll.Tally{poll.OutcomeUnchanged: 40}, f.deliver(t, batch(time.Time{}, ops...), time.Time{}))
		})
	}
	wg.Wait()
	require.Equal(t, int32(3), peak.Load())
}

// Messages take the process's slots in turn: the operations of a message
// that arrives while another is being checked are called after all of the
// first one's, so that messages finish one by one.
func TestMessagesTakeSlotsInTurn(t *testing.T) {
	f := newFixture(t)
	var mu sync.Mutex
	var order []string
	first := make(chan struct{}, 1)
	f.reconfigure(func(c *poll.Config) {
		c.Cluster, c.MaxInFlight = slowInstalling(t, func(r *http.Request) (done func()) {
			mu.Lock()
			order = append(order, path.Base(path.Dir(r.URL.Path))) // .../clusters/{id}/status
			mu.Unlock()
			select {
			case first <- struct{}{}:
			default:
			}
			return func() {}
		}), 2
	})
	ops := map[string][]string{}
	for _, m := range []string{"a", "b"} {
		for i := range 6 {
			id := fmt.Sprintf("%s-%d", m, i)
			f.putOp(database.Operation{ID: id, Request: arm.RequestCreate, Status: arm.ProvisioningStateProvisioning,
				InternalID: "/api/clusters_mgmt/v1/clusters/" + id})
			ops[m] = append(ops[m], id)
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() { f.deliver(t, batch(time.Time{}, ops["a"]...), time.Time{}) })
	<-first
	wg.Go(func() { f.deliver(t, batch(time.Time{}, ops["b"]...), time.Time{}) })
	wg.Wait()
	require.Len(t, order, 12)
	for i, got := range order {
		require.Equal(t, i < 6, strings.HasPrefix(got, "a-"), "request %d was for %s: %v", i, got, order)
	}
}

// The work of an invocation ends by its deadline, well inside the host's
// functionTimeout: what is left is deferred to the next scan.
func TestDeadlineBoundsTheWork(t *testing.T) {
	f := newFixture(t)
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	client, err := clusterservice.NewClient(clusterservice.Config{URL: srv.URL, Timeout: time.Hour})
	require.NoError(t, err)
	f.fn.Cluster, f.fn.Deadline = client, 100*time.Millisecond
	f.putOp(database.Operation{ID: "op", Request: arm.RequestCreate, Status: arm.ProvisioningStateProvisioning})
	require.Equal(t, poll.Tally{poll.OutcomeDeferred: 1}, f.deliver(t, batch(time.Time{}, "op"), time.Time{}))
}

// A message that has waited longer than a scan interval since its scan
// started is dropped without a read or a call: the next scan has sent a
// fresher one. ScheduleStatus plays no part (the host sends none for a
// schedule under a minute): the interval is the handler's own setting.
func TestSupersededMessagesAreDroppedWithoutWork(t *testing.T) {
	f := newFixture(t)
	f.putOp(database.Operation{ID: "op", Request: arm.RequestCreate, Status: arm.ProvisioningStateAccepted})
	f.cs.SetStatus(clusterCS, 200, clusterStatus("installing"))
	legacy := func(scanned time.Time) string {
		return `{"subscriptionId":"` + sub + `","operationId":"op","scanInterval":10,"scannedAt":"` + scanned.Format(time.RFC3339Nano) + `"}`
	}
	for _, tc := range []struct {
		name       string
		msg        string
		inserted   time.Time
		superseded bool
	}{
		{"batch, scan 11 s ago", batch(f.now.Add(-11*time.Second), "op"), f.now.Add(-10 * time.Second), true},
		{"earlier version's message, scan 11 s ago", legacy(f.now.Add(-11 * time.Second)), f.now.Add(-10 * time.Second), true},
		{"no scannedAt, inserted 11 s ago", batch(time.Time{}, "op"), f.now.Add(-11 * time.Second), true},
		{"reader's clock ahead: inserted 4 s ago", batch(f.now.Add(-11*time.Second), "op"), f.now.Add(-4 * time.Second), false},
		{"scan 9 s ago", batch(f.now.Add(-9*time.Second), "op"), f.now.Add(-8 * time.Second), false},
		{"no scannedAt, inserted 9 s ago", batch(time.Time{}, "op"), f.now.Add(-9 * time.Second), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.putOp(database.Operation{ID: "op", Request: arm.RequestCreate, Status: arm.ProvisioningStateAccepted})
			f.resetCounts()
			calls := f.cs.Calls()
			tally := f.deliver(t, tc.msg, tc.inserted)
			if tc.superseded {
				require.Equal(t, poll.Tally{poll.OutcomeSuperseded: 1}, tally)
				require.Equal(t, calls, f.cs.Calls())
				require.Zero(t, f.count(databasetesting.OpGetOperation))
				return
			}
			require.Equal(t, poll.Tally{poll.OutcomeUpdated: 1}, tally)
		})
	}

	f.fn.Interval = 0
	f.putOp(database.Operation{ID: "op", Request: arm.RequestCreate, Status: arm.ProvisioningStateAccepted})
	require.Equal(t, poll.Tally{poll.OutcomeUpdated: 1}, f.deliver(t, batch(f.now.Add(-time.Hour), "op"), f.now.Add(-time.Hour)),
		"no interval: never superseded")
}

// A message whose next scan comes due while its operation is read is
// dropped before the Cluster Service call, not after.
func TestMessageSupersededDuringTheReadMakesNoCall(t *testing.T) {
	f := newFixture(t)
	f.putOp(database.Operation{ID: "op", Request: arm.RequestCreate, Status: arm.ProvisioningStateAccepted})
	f.cs.SetStatus(clusterCS, 200, clusterStatus("installing"))
	scanned := f.now.Add(-9 * time.Second)
	f.db.Hook = func(call databasetesting.Op) error {
		if call == databasetesting.OpGetOperation {
			f.now = f.now.Add(2 * time.Second) // a slow read
		}
		return nil
	}
	require.Equal(t, poll.Tally{poll.OutcomeSuperseded: 1}, f.deliver(t, batch(scanned, "op"), scanned))
	require.Zero(t, f.cs.Calls())
}
