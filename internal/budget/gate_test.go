package budget_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
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

func TestTargets(t *testing.T) {
	for _, tc := range []struct {
		name    string
		budget  int
		holders map[string]budget.Entry
		want    map[string]int
	}{
		{"lone busy holder gets everything", 256, map[string]budget.Entry{"a": {Demand: 1000}}, map[string]int{"a": 256}},
		{"idle holder gets nothing", 256, map[string]budget.Entry{"a": {}}, map[string]int{"a": 0}},
		{"small demand filled, rest shared", 10, map[string]budget.Entry{"a": {Demand: 2}, "b": {Demand: 50}, "c": {Demand: 50}},
			map[string]int{"a": 2, "b": 4, "c": 4}},
		{"remainder by owner id", 10, map[string]budget.Entry{"b": {Demand: 50}, "a": {Demand: 50}, "c": {Demand: 50}},
			map[string]int{"a": 4, "b": 3, "c": 3}},
		{"pickup floor kept while idle", 32, map[string]budget.Entry{"p": {Group: budget.GroupPickup, Floor: 8}, "a": {Demand: 100}},
			map[string]int{"p": 8, "a": 24}},
		{"pickup floor at most a quarter of the budget", 20, map[string]budget.Entry{"p": {Group: budget.GroupPickup, Floor: 8}, "a": {Demand: 100}},
			map[string]int{"p": 5, "a": 15}},
		{"an idle pickup never takes a small budget whole", 8, map[string]budget.Entry{"p": {Group: budget.GroupPickup, Floor: 8}, "a": {Demand: 100}},
			map[string]int{"p": 2, "a": 6}},
		{"a budget too small to share keeps no floor", 3, map[string]budget.Entry{"p": {Group: budget.GroupPickup, Floor: 8}, "a": {Demand: 100}},
			map[string]int{"p": 0, "a": 3}},
		{"busy pickup gets floor and share", 20, map[string]budget.Entry{"p": {Group: budget.GroupPickup, Floor: 4, Demand: 100}, "a": {Demand: 100}},
			map[string]int{"p": 12, "a": 8}},
		{"floors over the budget shared", 24, map[string]budget.Entry{"p": {Group: budget.GroupPickup, Floor: 8}, "q": {Group: budget.GroupPickup, Floor: 8}},
			map[string]int{"p": 3, "q": 3}},
		{"pickup entries hold one floor together, the busy one's first", 32, map[string]budget.Entry{
			"p1": {Group: budget.GroupPickup, Floor: 8, Demand: 3}, "p2": {Group: budget.GroupPickup, Floor: 8},
			"p3": {Group: budget.GroupPickup, Floor: 8}, "p4": {Group: budget.GroupPickup, Floor: 8}, "a": {Demand: 64}},
			map[string]int{"p1": 3, "p2": 2, "p3": 2, "p4": 1, "a": 24}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := budget.Ledger{Budget: tc.budget, Holders: tc.holders}.Targets()
			require.Equal(t, tc.want, got)
			total := 0
			for _, n := range got {
				total += n
			}
			require.LessOrEqual(t, total, tc.budget)
		})
	}
}

func TestLoneInstanceReachesTheBudgetInOneWrite(t *testing.T) {
	s := seeded(256)
	m := join(t, s, 256)
	m.Queue(1000)
	writes := s.Writes()
	m.tick(t)
	require.Equal(t, 256, m.Held())
	require.Equal(t, writes+1, s.Writes())
}

func TestIdleDropsToZeroAndWorkGrowsAgainInOneWrite(t *testing.T) {
	s := seeded(16)
	m := join(t, s, 16)
	m.Queue(100)
	m.tick(t)
	require.Equal(t, 16, m.Held())
	m.Queue(-100)
	advance(time.Second, m)
	m.tick(t)
	require.Equal(t, 16, ledger(t, s).Holders[m.Figures().Owner].Permits, "gave back before idle for IdleAfter")
	advance(budget.DefaultIdleAfter, m)
	m.tick(t)
	require.Zero(t, m.Held())
	require.Zero(t, ledger(t, s).Holders[m.Figures().Owner].Permits)
	m.Queue(5)
	writes := s.Writes()
	m.tick(t)
	require.Equal(t, 5, m.Held())
	require.Equal(t, writes+1, s.Writes())
}

// A newcomer joins while one holder has every permit in use: the holder
// lowers its cap at once, writes its give-back only once its requests fit,
// and the newcomer takes its share only after that write.
func TestNewcomerReachesItsShareWithoutOvershoot(t *testing.T) {
	s := seeded(10)
	a := join(t, s, 10)
	a.Queue(100)
	a.tick(t)
	var releases []func()
	for range 10 {
		r, ok := a.TryAcquire()
		require.True(t, ok)
		releases = append(releases, r)
	}
	b := join(t, s, 10)
	b.Queue(100)
	b.tick(t)
	require.Zero(t, b.Held(), "no free permits")
	a.tick(t)
	require.Equal(t, 10, ledger(t, s).Holders[a.Figures().Owner].Permits, "gave back with 10 in flight")
	_, ok := a.TryAcquire()
	require.False(t, ok, "the cap was not lowered first")
	b.tick(t)
	require.Zero(t, b.Held())
	for _, r := range releases[:5] {
		r()
	}
	a.tick(t)
	require.Equal(t, 5, ledger(t, s).Holders[a.Figures().Owner].Permits)
	b.tick(t)
	require.Equal(t, 5, b.Held())
	require.LessOrEqual(t, a.InFlight()+b.Held(), 10)
}

// A holder killed with its permits is not reclaimed before E by an
// observer that watched it, nor by one started after the death, and is
// reclaimed after.
func TestKilledHolderIsReclaimedOnlyAfterE(t *testing.T) {
	s := seeded(10)
	a := join(t, s, 10)
	a.Queue(100)
	a.tick(t)
	require.Equal(t, 10, a.Held())
	dead := a.Figures().Owner
	b := join(t, s, 10)
	b.Queue(100)
	b.tick(t)
	// a is killed now. c starts 20 s later.
	var c member
	for elapsed := time.Duration(0); elapsed < budget.DefaultExpireAfter+25*time.Second; elapsed += time.Second {
		advance(time.Second, b)
		if c.Gate != nil {
			advance(time.Second, c)
		}
		if elapsed == 20*time.Second {
			c = join(t, s, 10)
			c.Queue(100)
		}
		b.tick(t)
		if c.Gate != nil {
			c.tick(t)
		}
		_, present := ledger(t, s).Holders[dead]
		if elapsed+time.Second < budget.DefaultExpireAfter {
			require.True(t, present, "reclaimed %v after the last renewal", elapsed+time.Second)
			require.Zero(t, b.Held()+c.heldOr0())
		}
	}
	_, present := ledger(t, s).Holders[dead]
	require.False(t, present, "never reclaimed")
	require.Equal(t, 10, b.Held()+c.heldOr0())
}

// A dead holder's entry is reclaimed even where no observer lives E:
// each short-lived observer hands on how long it saw the entry unchanged,
// and the next counts on from there, never reclaiming before E in all.
func TestDeadHolderIsReclaimedAcrossShortLivedObservers(t *testing.T) {
	s := seeded(10)
	a := join(t, s, 10)
	a.Queue(100)
	a.tick(t)
	require.Equal(t, 10, a.Held())
	dead := a.Figures().Owner
	// a is killed now; observers live 12 s each, one after another.
	var elapsed time.Duration
	for elapsed < budget.DefaultExpireAfter+20*time.Second {
		o := join(t, s, 10)
		o.Queue(100)
		for range 12 {
			o.tick(t)
			_, present := ledger(t, s).Holders[dead]
			if elapsed < budget.DefaultExpireAfter {
				require.True(t, present, "reclaimed %v after the last renewal", elapsed)
			}
			if !present {
				require.LessOrEqual(t, o.Held(), 10)
				return
			}
			advance(time.Second, o)
			elapsed += time.Second
		}
	}
	t.Fatalf("never reclaimed in %v of observers living 12 s each", elapsed)
}

func (m member) heldOr0() int {
	if m.Gate == nil {
		return 0
	}
	return m.Held()
}

// A holder frozen past its validity starts nothing once resumed, finds
// its entry reclaimed, and rejoins under a new owner.
func TestFrozenHolderResumedStartsNothingAndRejoins(t *testing.T) {
	s := seeded(10)
	a := join(t, s, 10)
	a.Queue(100)
	a.tick(t)
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

// Writers racing for the ledger (412 storms) lose no entry and keep the
// sum within the budget.
func TestSimultaneousWritersLoseNoEntry(t *testing.T) {
	s := seeded(40)
	var mu sync.Mutex
	preconditionFailed := 0
	check := func(budgettesting.Op) {
		l, _ := s.Ledger()
		require.LessOrEqual(t, l.Sum(), 40)
	}
	s.After = check
	// Each writer pauses between its read and its write, so the others get in.
	s.Before = func(op budgettesting.Op) {
		if op == budgettesting.OpReplace {
			time.Sleep(time.Millisecond)
		}
	}
	var ms []member
	for range 8 {
		m := join(t, s, 40)
		m.Queue(100)
		ms = append(ms, m)
	}
	for range 30 {
		var wg sync.WaitGroup
		for _, m := range ms {
			wg.Go(func() {
				m.clock.Advance(500 * time.Millisecond)
				if err := m.Tick(context.Background()); errors.Is(err, budget.ErrPreconditionFailed) {
					mu.Lock()
					preconditionFailed++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
	}
	l := ledger(t, s)
	for _, m := range ms {
		require.Contains(t, l.Holders, m.Figures().Owner)
	}
	require.LessOrEqual(t, sum(ms...), 40)
	require.Positive(t, s.PreconditionFailures(), "no 412 storm happened")
	t.Logf("412s: %d; ticks still meeting 412 after %d tries: %d", s.PreconditionFailures(), budget.DefaultWriteTries, preconditionFailed)
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

func TestFailedReadsNeverGrow(t *testing.T) {
	s := seeded(10)
	var reads, writes bool
	failing(s, &reads, &writes)
	a := join(t, s, 10)
	b := join(t, s, 10)
	a.Queue(100)
	b.Queue(100)
	a.tick(t)
	b.tick(t)
	a.tick(t)
	b.tick(t)
	require.Equal(t, 5, a.Held())
	b.Queue(-100)
	advance(budget.DefaultIdleAfter, a, b)
	b.tick(t) // b gives back 5: free permits for a
	reads = true
	for range 7 {
		advance(time.Second, a)
		require.Error(t, a.Tick(context.Background()))
		require.LessOrEqual(t, a.Held(), 5)
	}
	reads = false
	a.tick(t)
	require.Equal(t, 10, a.Held(), "did not recover")
}

func TestFailedWritesFailClosedAtLeaseEnd(t *testing.T) {
	s := seeded(10)
	var reads, writes bool
	failing(s, &reads, &writes)
	a := join(t, s, 10)
	a.Queue(100)
	a.tick(t)
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

// The ledger deleted: the next member creates it under a new epoch with
// its entry holding the whole budget, and nobody uses a permit for E,
// since holders of the old ledger may still run.
func TestDeletedLedgerNewEpochWaitsE(t *testing.T) {
	s := seeded(10)
	a := join(t, s, 10)
	b := join(t, s, 10)
	a.Queue(100)
	b.Queue(100)
	a.tick(t)
	b.tick(t)
	a.tick(t)
	b.tick(t)
	require.Equal(t, 10, a.Held()+b.Held())
	s.Delete()
	a.tick(t)
	l := ledger(t, s)
	require.NotEqual(t, "e0", l.Epoch)
	require.Zero(t, a.Held())
	c := join(t, s, 10) // a newcomer: the fence holds it off
	c.Queue(100)
	for elapsed := time.Second; elapsed < budget.DefaultExpireAfter; elapsed += time.Second {
		advance(time.Second, a, b, c)
		a.tick(t)
		b.tick(t)
		c.tick(t)
		require.Zero(t, a.Held()+c.Held(), "permits used %v after the new epoch", elapsed)
		if elapsed > 2*time.Second {
			require.Zero(t, b.Held())
		}
	}
	for range 10 {
		advance(time.Second, a, b, c)
		a.tick(t)
		b.tick(t)
		c.tick(t)
		require.LessOrEqual(t, sum(a, b, c), 10)
	}
	require.Equal(t, 10, sum(a, b, c))
	require.Positive(t, c.Held())
}

// The ledger replaced under a new epoch: members of the old one drop their
// permits and wait E before taking any.
func TestReplacedLedgerMembersWaitE(t *testing.T) {
	s := seeded(10)
	a := join(t, s, 10)
	a.Queue(100)
	a.tick(t)
	require.Equal(t, 10, a.Held())
	s.Put(budget.Ledger{ID: budget.ID, Epoch: "e1", Budget: 10, Holders: map[string]budget.Entry{}})
	a.tick(t)
	require.Zero(t, a.Held())
	for range 28 {
		advance(time.Second, a)
		a.tick(t)
		require.Zero(t, a.Held())
	}
	advance(3*time.Second, a)
	a.tick(t)
	a.tick(t)
	require.Equal(t, 10, a.Held())
}

func TestWallClockJumps(t *testing.T) {
	t.Run("holder ahead 1 h: its lease ends at once, then renews", func(t *testing.T) {
		s := seeded(10)
		a := join(t, s, 10)
		a.Queue(100)
		a.tick(t)
		a.clock.JumpWall(time.Hour)
		require.Zero(t, a.Held())
		a.tick(t)
		require.Equal(t, 10, a.Held())
	})
	t.Run("holder back 1 h: its lease still ends on the monotonic clock", func(t *testing.T) {
		s := seeded(10)
		var reads, writes bool
		failing(s, &reads, &writes)
		a := join(t, s, 10)
		a.Queue(100)
		a.tick(t)
		writes = true
		a.clock.JumpWall(-time.Hour)
		advance(budget.DefaultValidity, a)
		require.Zero(t, a.Held())
	})
	t.Run("observer ahead 1 h: reclaims only after E on its monotonic clock", func(t *testing.T) {
		s := seeded(10)
		a := join(t, s, 10)
		a.Queue(100)
		a.tick(t)
		b := join(t, s, 10)
		b.Queue(100)
		b.tick(t)
		b.clock.JumpWall(time.Hour)
		for range 29 {
			advance(time.Second, b)
			b.tick(t)
			require.Contains(t, ledger(t, s).Holders, a.Figures().Owner)
		}
		advance(2*time.Second, b)
		b.tick(t)
		require.NotContains(t, ledger(t, s).Holders, a.Figures().Owner)
	})
}

// An observer whose clock runs 1.5× as fast as the dead holder's reclaims
// it only once the holder's own clock says its lease has ended.
func TestClockRatesApart(t *testing.T) {
	s := seeded(10)
	a := join(t, s, 10)
	a.Queue(100)
	a.tick(t)
	b := join(t, s, 10)
	b.Queue(100)
	for {
		a.clock.Advance(100 * time.Millisecond)
		b.clock.Advance(150 * time.Millisecond)
		b.tick(t)
		if _, ok := ledger(t, s).Holders[a.Figures().Owner]; !ok {
			break
		}
	}
	require.Zero(t, a.Held(), "reclaimed while the holder's lease was live")
	require.LessOrEqual(t, a.Held()+b.Held(), 10)
}

// A pickup process keeps its floor free while poll holds the rest, even
// when poll held everything before pickup came, and takes it in one write
// when work comes.
func TestPickupFloorIsFreeForPickup(t *testing.T) {
	s := seeded(20)
	a := join(t, s, 20)
	a.Queue(100)
	a.tick(t)
	require.Equal(t, 20, a.Held())
	p := join(t, s, 20, func(c *budget.Config) { c.Floor = 4 })
	p.Serve(budget.GroupPickup)
	p.tick(t)
	a.tick(t)
	require.Equal(t, 16, a.Held(), "poll kept pickup's floor")
	p.Queue(3)
	writes := s.Writes()
	p.tick(t)
	require.Equal(t, 3, p.Held())
	require.Equal(t, writes+1, s.Writes())
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

// A seeded ledger lets the first process take the whole budget in one
// write; seeding again leaves a ledger in use alone.
func TestSeed(t *testing.T) {
	s := &budgettesting.Store{}
	require.NoError(t, budget.Seed(context.Background(), s, 8))
	m := join(t, s, 8)
	m.Queue(100)
	m.tick(t)
	require.Equal(t, 8, m.Held())
	require.NoError(t, budget.Seed(context.Background(), s, 8))
	require.Contains(t, ledger(t, s).Holders, m.Figures().Owner)
}
