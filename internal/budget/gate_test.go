package budget_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/internal/budget"
	"github.com/opstatus/opstatus/internal/budget/budgettesting"
)

var start = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)

// member is a process of a test: its gate and its clock.
type member struct {
	*budget.Gate
	clock *budgettesting.Clock
}

func join(t *testing.T, store budget.Store, b int, opts ...func(*budget.Config)) member {
	t.Helper()
	clock := budgettesting.NewClock(start)
	clock.AutoAdvance = true
	cfg := budget.Config{Store: store, Budget: b, Ceiling: b, Clock: clock}
	for _, o := range opts {
		o(&cfg)
	}
	return member{Gate: budget.New(cfg), clock: clock}
}

func (m member) tick(t *testing.T) {
	t.Helper()
	require.NoError(t, m.Tick(context.Background()))
}

// busy joins a process with more work queued than budget b and lets it
// tick once.
func busy(t *testing.T, store budget.Store, b int) member {
	t.Helper()
	m := join(t, store, b)
	m.Queue(100)
	m.tick(t)
	return m
}

// acquire takes n permits of m, each of which must be free, and returns
// their releases.
func (m member) acquire(t *testing.T, n int) []func() {
	t.Helper()
	releases := make([]func(), 0, n)
	for range n {
		release, ok := m.TryAcquire()
		require.True(t, ok)
		releases = append(releases, release)
	}
	return releases
}

// seeded is a store holding a ledger of budget b that nobody holds yet.
func seeded(b int) *budgettesting.Store {
	s := &budgettesting.Store{}
	s.Put(budget.Ledger{ID: budget.ID, Epoch: "e0", Budget: b, Holders: map[string]budget.Entry{}})
	return s
}

func ledger(t *testing.T, s *budgettesting.Store) budget.Ledger {
	t.Helper()
	l, ok := s.Ledger()
	require.True(t, ok, "no ledger")
	return l
}

// advance moves every clock by d.
func advance(d time.Duration, ms ...member) {
	for _, m := range ms {
		m.clock.Advance(d)
	}
}

func sum(ms ...member) int {
	n := 0
	for _, m := range ms {
		n += m.Held()
	}
	return n
}

func (m member) heldOr0() int {
	if m.Gate == nil {
		return 0
	}
	return m.Held()
}

// failing is a store whose reads or writes fail on demand.
func failing(s *budgettesting.Store, reads, writes *bool) {
	s.Fail = func(op budgettesting.Op) (error, bool) {
		if op == budgettesting.OpRead && *reads || op != budgettesting.OpRead && *writes {
			return fmt.Errorf("injected 429 on %s", op), false
		}
		return nil, false
	}
}

// A Cluster Service request still in flight when the lease ends is
// canceled by its deadline, which falls DeadlineMargin before the lease's
// end and never after the client's own timeout. Real clock, real HTTP.
func TestRequestInFlightAtLeaseEndIsCanceled(t *testing.T) {
	s := seeded(4)
	g := budget.New(budget.Config{Store: s, Budget: 4, Ceiling: 4, Validity: 2 * time.Second,
		ExpireAfter: 4 * time.Second, StartMargin: time.Second, DeadlineMargin: 500 * time.Millisecond})
	g.Queue(1)
	require.NoError(t, g.Tick(context.Background()))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // Cluster Service never answers
	}))
	defer srv.Close()
	release, err := g.Acquire(context.Background(), "to call Cluster Service")
	require.NoError(t, err)
	defer release()
	before := g.LeaseLeft()
	ctx, cancel, err := g.Start(context.Background())
	require.NoError(t, err)
	defer cancel()
	deadline, ok := ctx.Deadline()
	require.True(t, ok)
	require.LessOrEqual(t, time.Until(deadline), before-500*time.Millisecond)
	// and the client's own timeout still applies beneath it
	tctx, tcancel := context.WithTimeout(context.Background(), time.Hour)
	defer tcancel()
	ctx2, cancel2, err := g.Start(tctx)
	require.NoError(t, err)
	defer cancel2()
	d2, _ := ctx2.Deadline()
	require.True(t, d2.Before(time.Now().Add(time.Hour)))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	_, err = srv.Client().Do(req)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Positive(t, g.LeaseLeft(), "canceled only after the lease ended")
}

func TestFailedWritesFailClosedAtLeaseEnd(t *testing.T) {
	s := seeded(10)
	var reads, writes bool
	failing(s, &reads, &writes)
	a := busy(t, s, 10)
	writes = true
	left := a.LeaseLeft()
	for elapsed := time.Second; elapsed <= budget.DefaultValidity; elapsed += time.Second {
		advance(time.Second, a)
		_ = a.Tick(context.Background()) // renewals fail from R on
		_, _, err := a.Start(context.Background())
		if left-elapsed >= budget.DefaultStartMargin {
			require.NoError(t, err)
			require.Equal(t, 10, a.Held())
		} else {
			require.ErrorIs(t, err, budget.ErrNoLease, "a request started with %v of lease left", left-elapsed)
			_, ok := a.TryAcquire()
			require.False(t, ok)
		}
	}
	require.Zero(t, a.Held())
	writes = false
	a.tick(t)
	require.Equal(t, 10, a.Held(), "did not recover")
}

// A holder frozen past its validity starts nothing once resumed, finds
// its entry reclaimed, and rejoins under a new owner.
func TestFrozenHolderResumedStartsNothingAndRejoins(t *testing.T) {
	s := seeded(10)
	a := busy(t, s, 10)
	old := a.Figures().Owner
	b := join(t, s, 10)
	b.Queue(100)
	for range 40 { // a is frozen: its clock runs, it does nothing
		advance(time.Second, a, b)
		b.tick(t)
	}
	require.Equal(t, 10, b.Held())
	require.Zero(t, a.Held())
	_, ok := a.TryAcquire()
	require.False(t, ok)
	_, _, err := a.Start(context.Background())
	require.ErrorIs(t, err, budget.ErrNoLease)
	a.tick(t)
	require.NotEqual(t, old, a.Figures().Owner)
	require.Contains(t, ledger(t, s).Holders, a.Figures().Owner)
	require.LessOrEqual(t, a.Held()+b.Held(), 10)
}

// A check that took its permit before its process froze past E must not
// call Cluster Service after the process rejoins: the renewed lease is
// the new entry's, which holds nothing, and the permits are another's.
func TestPermitsTakenBeforeAReclaimStartNoRequestAfterTheRejoin(t *testing.T) {
	s := seeded(10)
	a := busy(t, s, 10)
	releases := a.acquire(t, 4) // checks that made their first call before the freeze
	b := join(t, s, 10)
	b.Queue(100)
	for range 40 { // a is frozen
		advance(time.Second, a, b)
		b.tick(t)
	}
	require.Equal(t, 10, b.Held())
	a.tick(t) // resumed: finds its entry gone and rejoins with 0
	require.Contains(t, ledger(t, s).Holders, a.Figures().Owner)
	require.Positive(t, a.LeaseLeft(), "the rejoin renewed the lease")
	for range releases {
		_, _, err := a.Start(context.Background())
		require.ErrorIs(t, err, budget.ErrNotHeld, "a second call on a permit the ledger gave to b")
	}
	for _, r := range releases {
		r()
	}
	// Once its old checks are done it starts on what it holds.
	for range 40 {
		advance(time.Second, a, b)
		a.tick(t)
		b.tick(t)
	}
	release, err := a.Acquire(context.Background(), "to call Cluster Service")
	require.NoError(t, err)
	defer release()
	_, cancel, err := a.Start(context.Background())
	require.NoError(t, err)
	cancel()
	require.LessOrEqual(t, a.InFlight()+b.Held(), 10)
}

// A process that waits out a new epoch starts nothing, whatever its lease.
func TestStartRefusedWhileWaitingOutANewEpoch(t *testing.T) {
	s := seeded(10)
	a := busy(t, s, 10)
	release, ok := a.TryAcquire()
	require.True(t, ok)
	defer release()
	s.Delete()
	a.tick(t) // creates the ledger again, under the fence
	require.Positive(t, a.LeaseLeft())
	_, _, err := a.Start(context.Background())
	require.ErrorIs(t, err, budget.ErrNotHeld)
}

// A permit given back by a request the client abandoned stays counted for
// the grace: Cluster Service may still work on it.
func TestAbandonedRequestKeepsItsPermitForTheGrace(t *testing.T) {
	s := seeded(1)
	m := join(t, s, 1, func(c *budget.Config) { c.Grace = 20 * time.Second })
	m.Queue(10)
	m.tick(t)
	release, ok := m.TryAcquire()
	require.True(t, ok)
	m.Abandoned()
	release()
	require.Equal(t, 1, m.InFlight())
	_, ok = m.TryAcquire()
	require.False(t, ok, "a permit whose request Cluster Service may still work on")
	advance(19*time.Second, m)
	m.tick(t)
	_, ok = m.TryAcquire()
	require.False(t, ok)
	advance(time.Second, m)
	m.tick(t)
	require.Zero(t, m.InFlight())
	release, ok = m.TryAcquire()
	require.True(t, ok)
	release()
}
