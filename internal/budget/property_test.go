package budget_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/internal/budget"
	"github.com/opstatus/opstatus/internal/budget/budgettesting"
)

// world is processes sharing one ledger, stepped in true time: each has a
// clock of its own (rates 2/3 to 1.5× true time, wall jumps of ±1 h), and
// each may be killed, frozen, resumed, or meet store faults.
type world struct {
	t      *testing.T
	rng    *rand.Rand
	store  *budgettesting.Store
	procs  []*proc
	bound  int // the largest budget of any process
	ids    int
	checks int

	readFail, writeFail, touch float64 // fault rates of the store
}

// proc is one handler process of the world.
type proc struct {
	name   string
	g      *budget.Gate
	clock  *budgettesting.Clock
	rate   float64
	budget int
	dead   bool
	frozen bool
	demand int
	reqs   []*request
	cfg    budget.Config
}

// request is a Cluster Service request in flight: it ends on its own, or
// when its deadline passes on its process's monotonic clock.
type request struct {
	deadline time.Duration
	release  func()
}

var errInjected = errors.New("injected: 503")

func newWorld(t *testing.T, seed uint64, budgets ...int) *world {
	w := &world{t: t, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), store: &budgettesting.Store{}}
	for _, b := range budgets {
		w.bound = max(w.bound, b)
	}
	w.store.Fail = func(op budgettesting.Op) (error, bool) {
		rate := w.writeFail
		if op == budgettesting.OpRead {
			rate = w.readFail
		}
		if w.rng.Float64() < rate {
			return fmt.Errorf("%s: %w", op, errInjected), op != budgettesting.OpRead && w.rng.IntN(2) == 0
		}
		return nil, false
	}
	w.store.Before = func(op budgettesting.Op) {
		if op == budgettesting.OpReplace && w.rng.Float64() < w.touch {
			w.store.Touch() // another writer got in first: 412
		}
	}
	// Every write applied is a step: the bound must hold there too.
	w.store.After = func(budgettesting.Op) { w.check("after a write") }
	return w
}

func (w *world) join(b int) *proc {
	w.ids++
	rates := []float64{1, 1, 1.25, 1.5} // at most 1.5× apart
	p := &proc{name: fmt.Sprintf("p%d", w.ids), rate: rates[w.rng.IntN(len(rates))], budget: b,
		clock: budgettesting.NewClock(time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC).Add(time.Duration(w.rng.IntN(3600)) * time.Second))}
	p.clock.AutoAdvance = true
	id := 0
	p.cfg = budget.Config{Store: w.store, Budget: b, Ceiling: b, Floor: 2, Clock: p.clock,
		NewID: func() string { id++; return fmt.Sprintf("%s-%d", p.name, id) }}
	p.g = budget.New(p.cfg)
	if w.rng.IntN(4) == 0 {
		p.g.Serve(budget.GroupPickup)
	}
	w.procs = append(w.procs, p)
	return p
}

// inUse is what a process may have in flight at once now: its usable
// permits while its own clock says its lease is live, or its requests
// still in flight, whichever is more. A killed process has only the
// requests it left at Cluster Service.
func (p *proc) inUse() int {
	now := p.clock.Now().Mono
	live := 0
	for _, r := range p.reqs {
		if now < r.deadline {
			live++
		}
	}
	if p.dead {
		return live
	}
	return max(p.g.Held(), live)
}

func (w *world) check(where string) {
	w.checks++
	sum := 0
	for _, p := range w.procs {
		sum += p.inUse()
	}
	if sum > w.bound {
		for _, p := range w.procs {
			w.t.Logf("%s dead=%v frozen=%v held=%d reqs=%d figures=%+v", p.name, p.dead, p.frozen, p.g.Held(), len(p.reqs), p.g.Figures())
		}
		l, _ := w.store.Ledger()
		w.t.Fatalf("%s: %d permits in use, over the budget %d; ledger %+v", where, sum, w.bound, l)
	}
}

// advance moves true time by d: every clock runs at its rate, frozen and
// dead processes' too.
func (w *world) advance(d time.Duration) {
	for _, p := range w.procs {
		p.clock.Advance(time.Duration(float64(d) * p.rate))
	}
	w.check("after time passed")
}

// work ends some of a process's requests, those past their deadline
// first, and starts new ones up to its demand.
func (w *world) work(p *proc) {
	now := p.clock.Now().Mono
	kept := p.reqs[:0]
	for _, r := range p.reqs {
		if now >= r.deadline || w.rng.IntN(3) == 0 {
			r.release()
			continue
		}
		kept = append(kept, r)
	}
	p.reqs = kept
	for len(p.reqs) < p.demand {
		release, ok := p.g.TryAcquire()
		if !ok {
			break
		}
		left := p.g.LeaseLeft()
		if left < budget.DefaultStartMargin {
			release()
			break
		}
		p.reqs = append(p.reqs, &request{deadline: now + left - budget.DefaultDeadlineMargin, release: release})
		w.check("after a request started")
	}
}

func (w *world) step() {
	w.advance(time.Duration(50+w.rng.IntN(1500)) * time.Millisecond)
	alive := w.alive()
	switch r := w.rng.IntN(100); {
	case r < 6 && len(alive) < 8:
		budgets := []int{w.bound}
		if w.procs[0].budget != w.bound {
			budgets = append(budgets, w.procs[0].budget)
		}
		w.join(budgets[w.rng.IntN(len(budgets))])
	case r < 9 && len(alive) > 1:
		p := alive[w.rng.IntN(len(alive))]
		p.dead = true // SIGKILL: it never ticks again
	case r < 13 && len(alive) > 0:
		p := alive[w.rng.IntN(len(alive))]
		p.frozen = !p.frozen // SIGSTOP, SIGCONT
	case r < 16 && len(alive) > 0:
		alive[w.rng.IntN(len(alive))].clock.JumpWall(time.Duration(w.rng.IntN(3)-1) * time.Hour)
	case r < 30 && len(alive) > 0:
		p := alive[w.rng.IntN(len(alive))]
		n := []int{0, 0, 1, 3, 10, 100}[w.rng.IntN(6)]
		p.g.Queue(n - p.demand)
		p.demand = n
	case r < 35:
		w.readFail = []float64{0, 0, 0.3, 1}[w.rng.IntN(4)]
		w.writeFail = []float64{0, 0, 0.3, 1}[w.rng.IntN(4)]
		w.touch = []float64{0, 0, 0.5, 0.9}[w.rng.IntN(4)]
	case r < 36:
		w.store.Delete()
	}
	for _, p := range w.alive() {
		if p.frozen {
			continue
		}
		if w.rng.IntN(3) != 0 {
			err := p.g.Tick(context.Background())
			if os.Getenv("BUDGET_TRACE") != "" {
				l, _ := w.store.Ledger()
				w.t.Logf("%s tick mono=%v owner=%s held=%d left=%v err=%v ledger=%s %v", p.name, p.clock.Now().Mono, p.g.Figures().Owner, p.g.Held(), p.g.LeaseLeft(), err, l.Epoch, l.Holders)
			}
			w.check("after a tick")
		}
		w.work(p)
	}
}

func (w *world) alive() []*proc {
	var ps []*proc
	for _, p := range w.procs {
		if !p.dead {
			ps = append(ps, p)
		}
	}
	return ps
}

// Whatever processes join, die, freeze, and whatever the store and the
// clocks do, the permits in use never exceed the budget: checked after
// every write, tick, request and passing of time.
func TestPermitsInUseNeverExceedTheBudget(t *testing.T) {
	for seed := range seeds(60) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, seed, 12)
			w.join(12)
			used := 0
			for range 1500 {
				w.step()
				for _, p := range w.procs {
					used = max(used, p.inUse())
				}
			}
			require.Positive(t, used, "no process ever used a permit")
		})
	}
}

// Two deployments with different budgets share the ledger (a rolling
// update that changes CLUSTER_SERVICE_BUDGET): the permits in use stay
// within the larger one.
func TestTwoBudgetsStayWithinTheLarger(t *testing.T) {
	for seed := range seeds(30) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, 1000+seed, 10, 6)
			w.join(6)
			w.join(10)
			for range 1500 {
				w.step()
			}
		})
	}
}

// seeds is n worlds, or a fifth of them under -short; BUDGET_SEEDS sets
// another number, for a soak.
func seeds(n uint64) uint64 {
	if v, err := strconv.ParseUint(os.Getenv("BUDGET_SEEDS"), 10, 64); err == nil && v > 0 {
		return v
	}
	if testing.Short() {
		return max(n/5, 1)
	}
	return n
}
