package budget_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/internal/budget"
	"github.com/opstatus/opstatus/internal/budget/budgettesting"
)

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
	m := busy(t, s, 16)
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
	a := busy(t, s, 10)
	releases := a.acquire(t, 10)
	b := busy(t, s, 10)
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
	a := busy(t, s, 10)
	require.Equal(t, 10, a.Held())
	dead := a.Figures().Owner
	b := busy(t, s, 10)
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
	a := busy(t, s, 10)
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
	a := busy(t, s, 10)
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
		a := busy(t, s, 10)
		a.clock.JumpWall(time.Hour)
		require.Zero(t, a.Held())
		a.tick(t)
		require.Equal(t, 10, a.Held())
	})
	t.Run("holder back 1 h: its lease still ends on the monotonic clock", func(t *testing.T) {
		s := seeded(10)
		var reads, writes bool
		failing(s, &reads, &writes)
		a := busy(t, s, 10)
		writes = true
		a.clock.JumpWall(-time.Hour)
		advance(budget.DefaultValidity, a)
		require.Zero(t, a.Held())
	})
	t.Run("observer ahead 1 h: reclaims only after E on its monotonic clock", func(t *testing.T) {
		s := seeded(10)
		a := busy(t, s, 10)
		b := busy(t, s, 10)
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
	a := busy(t, s, 10)
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
	a := busy(t, s, 20)
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

// A seeded ledger lets the first process take the whole budget in one
// write; seeding again leaves a ledger in use alone.
func TestSeed(t *testing.T) {
	s := &budgettesting.Store{}
	require.NoError(t, budget.Seed(context.Background(), s, 8))
	m := busy(t, s, 8)
	require.Equal(t, 8, m.Held())
	require.NoError(t, budget.Seed(context.Background(), s, 8))
	require.Contains(t, ledger(t, s).Holders, m.Figures().Owner)
}
