package poll_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/functions"
	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/budget"
	"github.com/opstatus/opstatus/internal/budget/budgettesting"
	"github.com/opstatus/opstatus/internal/clusterservice"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/internal/queuemsg"
	"github.com/opstatus/opstatus/poll"
)

// gated is a Cluster Service in front of the fixture's that holds every
// request until let is closed, and records the most in flight at once.
type gated struct {
	next http.Handler
	let  chan struct{}

	mu            sync.Mutex
	inFlight, max int
	started       chan struct{}
}

func (g *gated) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	g.inFlight++
	g.max = max(g.max, g.inFlight)
	g.mu.Unlock()
	g.started <- struct{}{}
	<-g.let
	g.next.ServeHTTP(w, r)
	g.mu.Lock()
	g.inFlight--
	g.mu.Unlock()
}

// withPermits makes the fixture's Function check through a budget gate of
// budget b on an in-memory ledger, kept by its Run, its Cluster Service
// behind cs.
func withPermits(t *testing.T, f *fixture, b int, cs http.Handler) (*budget.Gate, *budgettesting.Store) {
	s := &budgettesting.Store{}
	s.Put(budget.Ledger{ID: budget.ID, Epoch: "e0", Budget: b, Holders: map[string]budget.Entry{}})
	g := budget.New(budget.Config{Store: s, Budget: b, Ceiling: 64})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go g.Run(ctx)
	srv := httptest.NewServer(cs)
	t.Cleanup(srv.Close)
	client, err := clusterservice.NewClient(clusterservice.Config{URL: srv.URL})
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	f.reconfigure(func(c *poll.Config) {
		c.Permits = g
		c.Cluster = client
		c.Deadline = 5 * time.Second
	})
	return g, s
}

func batchOf(ids ...string) string {
	var ops []string
	for _, id := range ids {
		ops = append(ops, `{"subscriptionId":"`+sub+`","operationId":"`+id+`"}`)
	}
	return `{"operations":[` + strings.Join(ops, ",") + `]}`
}

// Without a lease (the ledger cannot be read) poll calls nothing and
// defers; once the ledger answers, the work arriving gets its permits in
// one write and poll calls Cluster Service.
func TestPollCallsNothingWithoutALease(t *testing.T) {
	f := newFixture(t)
	f.putOp(database.Operation{ID: "op", Request: arm.RequestCreate, Status: arm.ProvisioningStateProvisioning})
	f.cs.SetStatus(clusterCS, http.StatusOK, `{"kind":"ClusterStatus","id":"abc","state":"installing"}`)
	var broken atomic.Bool
	broken.Store(true)
	g, s := withPermits(t, f, 4, f.cs)
	s.Fail = func(budgettesting.Op) (error, bool) {
		if broken.Load() {
			return errors.New("injected 503"), false
		}
		return nil, false
	}
	f.reconfigure(func(c *poll.Config) { c.Deadline = 300 * time.Millisecond })
	require.Equal(t, poll.OutcomeDeferred, f.poll(t, "op"))
	require.Zero(t, f.cs.Calls())
	require.Zero(t, g.Figures().Permits)
	broken.Store(false)
	f.reconfigure(func(c *poll.Config) { c.Deadline = time.Minute })
	require.Equal(t, poll.OutcomeUnchanged, f.poll(t, "op"))
	require.Equal(t, 1, f.cs.Calls())
}

// A message of ten operations with three permits has at most three
// Cluster Service requests in flight; while they wait, the process's
// demand is its queued and running operations.
func TestPollStaysWithinItsPermits(t *testing.T) {
	f := newFixture(t)
	var ids []string
	for i := range 10 {
		id := fmt.Sprintf("op%d", i)
		ids = append(ids, id)
		f.putOp(database.Operation{ID: id, Request: arm.RequestCreate, Status: arm.ProvisioningStateProvisioning})
	}
	f.cs.SetStatus(clusterCS, http.StatusOK, `{"kind":"ClusterStatus","id":"abc","state":"installing"}`)
	cs := &gated{next: f.cs, let: make(chan struct{}), started: make(chan struct{}, 10)}
	g, _ := withPermits(t, f, 3, cs)
	done := make(chan *functions.Result)
	go func() {
		res, err := f.invoke(t, batchOf(ids...))
		require.NoError(t, err)
		done <- res
	}()
	for range 3 {
		<-cs.started
	}
	require.Equal(t, 10, g.Figures().Demand)
	close(cs.let)
	res := <-done
	require.Equal(t, poll.Tally{poll.OutcomeUnchanged: 10}, res.ReturnValue)
	require.LessOrEqual(t, cs.max, 3)
	require.Equal(t, 3, cs.max)
	require.Zero(t, g.Figures().Demand)
}

// The process serves the budget group of what hands it work: Poll's
// caller names it (pickup names its own), and a queue message is poll's,
// whatever the invocation's function.
func TestTheCallerNamesTheGroup(t *testing.T) {
	f := newFixture(t)
	f.putOp(database.Operation{ID: "op", Request: arm.RequestCreate, Status: arm.ProvisioningStateProvisioning})
	f.cs.SetStatus(clusterCS, http.StatusOK, `{"kind":"ClusterStatus","id":"abc","state":"installing"}`)
	g, _ := withPermits(t, f, 4, f.cs)
	inv := &functions.Invocation{ID: "inv-1", Function: "pickup",
		Data:     map[string]json.RawMessage{"operation": json.RawMessage(batchOf("op"))},
		Metadata: map[string]json.RawMessage{}, Log: slog.New(slog.DiscardHandler)}
	_, err := f.fn.Handle(context.Background(), inv)
	require.NoError(t, err)
	require.Equal(t, budget.GroupPoll, g.Figures().Group, "a queue message is poll's")

	ops := queuemsg.Message{Operations: []queuemsg.Operation{{SubscriptionID: sub, OperationID: "op"}}}
	tally := f.fn.Poll(context.Background(), slog.New(slog.DiscardHandler),
		poll.Message{Read: ops.Read(), Group: budget.GroupPickup, Invocation: "inv-2"})
	require.Equal(t, poll.Tally{poll.OutcomeUnchanged: 1}, tally)
	require.Equal(t, budget.GroupPickup, g.Figures().Group)
}

// A message waiting for permits stops waiting once a later scan has
// superseded it: its operations are superseded, not checked late, and the
// invocation ends then, not at its deadline.
func TestWaitForPermitsEndsWhenTheMessageIsSuperseded(t *testing.T) {
	f := newFixture(t)
	f.putOp(database.Operation{ID: "op1", Request: arm.RequestCreate, Status: arm.ProvisioningStateProvisioning})
	f.putOp(database.Operation{ID: "op2", Request: arm.RequestCreate, Status: arm.ProvisioningStateProvisioning})
	f.cs.SetStatus(clusterCS, http.StatusOK, `{"kind":"ClusterStatus","id":"abc","state":"installing"}`)
	g, s := withPermits(t, f, 4, f.cs)
	s.Fail = func(budgettesting.Op) (error, bool) { return errors.New("injected 503"), false }
	f.reconfigure(func(c *poll.Config) {
		c.Interval = time.Second
		c.Deadline = time.Hour
		c.Now = time.Now
	})
	scanned := time.Now().UTC()
	msg := `{"operations":[{"subscriptionId":"` + sub + `","operationId":"op1"},{"subscriptionId":"` + sub + `","operationId":"op2"}],"scannedAt":"` + scanned.Format(time.RFC3339Nano) + `"}`
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	inv := &functions.Invocation{ID: "inv-1", Function: "poll",
		Data:     map[string]json.RawMessage{"operation": json.RawMessage(msg)},
		Metadata: map[string]json.RawMessage{}, Log: slog.New(slog.DiscardHandler)}
	res, err := f.fn.Handle(ctx, inv)
	require.NoError(t, err)
	require.NoError(t, ctx.Err(), "the invocation waited for permits past the message's supersession")
	require.Equal(t, poll.Tally{poll.OutcomeSuperseded: 2}, res.ReturnValue)
	require.Zero(t, f.cs.Calls())
	require.Zero(t, g.Figures().Demand)
}

// A Cluster Service request the client abandons (here at its own
// timeout) keeps its permit counted for the grace: a Cluster Service that
// works on after its client leaves never has more requests at once than
// the budget.
func TestAbandonedRequestsStayCountedAtAServerThatWorksOn(t *testing.T) {
	f := newFixture(t)
	var ids []string
	for i := range 4 {
		id := fmt.Sprintf("op%d", i)
		ids = append(ids, id)
		f.putOp(database.Operation{ID: id, Request: arm.RequestCreate, Status: arm.ProvisioningStateProvisioning})
	}
	var mu sync.Mutex
	atServer, most := 0, 0
	var served sync.WaitGroup
	t.Cleanup(served.Wait)
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		defer served.Done()
		mu.Lock()
		atServer++
		most = max(most, atServer)
		mu.Unlock()
		time.Sleep(300 * time.Millisecond) // works on whether the client waits or not
		mu.Lock()
		atServer--
		mu.Unlock()
	})
	withPermits(t, f, 1, slow)
	srv := httptest.NewServer(slow)
	t.Cleanup(srv.Close)
	client, err := clusterservice.NewClient(clusterservice.Config{URL: srv.URL, Timeout: 50 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	f.reconfigure(func(c *poll.Config) { c.Cluster, c.Deadline = client, time.Second })
	res, err := f.invoke(t, batchOf(ids...))
	require.NoError(t, err)
	require.Equal(t, poll.Tally{poll.OutcomeDeferred: 4}, res.ReturnValue)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 1, most, "Cluster Service requests at once, with a budget of 1")
}

// A check whose process froze past the ledger's expiry between its status
// call and its inflight checks call, its entry reclaimed and its permits
// taken by another process, makes no second call once it resumes and
// rejoins: it defers.
func TestNoSecondCallAfterAReclaim(t *testing.T) {
	f := newFixture(t)
	f.putOp(database.Operation{ID: "op", Request: arm.RequestCreate, Status: arm.ProvisioningStateProvisioning})
	f.cs.SetStatus(clusterCS, http.StatusOK, `{"kind":"ClusterStatus","id":"abc","state":"error","provision_error_code":"OCM4001","provision_error_message":"inflight checks failed"}`)
	f.cs.SetInflight(clusterCS, http.StatusOK, `{"kind":"InflightCheckList","items":[]}`)
	cs := &gated{next: f.cs, let: make(chan struct{}), started: make(chan struct{}, 10)}
	s := &budgettesting.Store{}
	s.Put(budget.Ledger{ID: budget.ID, Epoch: "e0", Budget: 10, Holders: map[string]budget.Entry{}})
	clockA := budgettesting.NewClock(time.Now())
	clockB := budgettesting.NewClock(time.Now())
	a := budget.New(budget.Config{Store: s, Budget: 10, Ceiling: 10, Clock: clockA})
	b := budget.New(budget.Config{Store: s, Budget: 10, Ceiling: 10, Clock: clockB})
	srv := httptest.NewServer(cs)
	t.Cleanup(srv.Close)
	client, err := clusterservice.NewClient(clusterservice.Config{URL: srv.URL})
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	f.reconfigure(func(c *poll.Config) { c.Permits, c.Cluster, c.Deadline = a, client, time.Minute })

	done := make(chan poll.Outcome)
	go func() { done <- f.poll(t, "op") }()
	require.Eventually(t, func() bool { return a.Figures().Demand > 0 }, 5*time.Second, time.Millisecond)
	require.NoError(t, a.Tick(context.Background()))
	<-cs.started // the status call, on a's permit
	// a freezes for 40 s: b reclaims its entry and takes the whole budget.
	b.Queue(100)
	for range 40 {
		clockA.Advance(time.Second)
		clockB.Advance(time.Second)
		require.NoError(t, b.Tick(context.Background()))
	}
	require.Equal(t, 10, b.Figures().Permits)
	require.NoError(t, a.Tick(context.Background())) // resumed: a rejoins
	require.Positive(t, a.LeaseLeft())
	close(cs.let)
	require.Equal(t, poll.OutcomeDeferred, <-done)
	require.Equal(t, 1, f.cs.Calls(), "Cluster Service calls: the status only, no inflight checks on b's permit")
}
