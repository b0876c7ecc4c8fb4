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

	now time.Duration // true time since the start
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
	thawAt time.Duration // true time a long freeze ends, if > 0
	demand int
	reqs   []*request
	// left are requests the client abandoned that Cluster Service works
	// on until then, on the process's monotonic clock.
	left []time.Duration
	cfg  budget.Config
}

// request is a check holding a permit: between calls, or with a Cluster
// Service call in flight (atCS) that ends on its own or when its deadline
// passes on its process's monotonic clock, after which Cluster Service
// works on for up to the grace.
type request struct {
	atCS     bool
	deadline time.Duration
	calls    int
	release  func()
}

// testGrace is the grace of the world's processes: what Cluster Service
// may work on after its client leaves; E − V covers it at the clock rates
// of the world (E/1.5 − V of true time).
const testGrace = 4 * time.Second

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
	p.cfg = budget.Config{Store: w.store, Budget: b, Ceiling: b, Floor: 2, Clock: p.clock, Grace: testGrace,
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
// still at Cluster Service, abandoned ones too, whichever is more. A
// killed process has only the requests it left at Cluster Service.
func (p *proc) inUse() int {
	now := p.clock.Now().Mono
	live := 0
	for _, r := range p.reqs {
		if r.atCS && now < r.deadline {
			live++
		}
	}
	for _, until := range p.left {
		if now < until {
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
			w.t.Logf("  in use %d (the gate's %d), abandoned at Cluster Service until %v", p.inUse(), p.g.InFlight(), p.left)
		}
		l, _ := w.store.Ledger()
		w.t.Fatalf("%s: %d permits in use, over the budget %d; ledger %+v", where, sum, w.bound, l)
	}
}

// advance moves true time by d: every clock runs at its rate, frozen and
// dead processes' too.
func (w *world) advance(d time.Duration) {
	w.now += d
	for _, p := range w.procs {
		p.clock.Advance(time.Duration(float64(d) * p.rate))
	}
	w.check("after time passed")
}

// call starts a Cluster Service call of r, as poll does: through Start,
// whose context's deadline ends it; false if Start refused.
func (w *world) call(p *proc, r *request) bool {
	ctx, cancel, err := p.g.Start(context.Background())
	if err != nil {
		return false
	}
	defer cancel()
	deadline, _ := ctx.Deadline() // on the real clock: what is left of it, on the process's
	r.atCS, r.calls = true, r.calls+1
	r.deadline = p.clock.Now().Mono + time.Until(deadline)
	w.check("after a call started")
	return true
}

// work moves a process's checks on: calls answered (some made a second
// call), calls past their deadline abandoned (Cluster Service works on
// for up to the grace), checks done; and starts new checks up to its
// demand, each acquiring a permit and then calling through Start.
func (w *world) work(p *proc) {
	now := p.clock.Now().Mono
	left := p.left[:0]
	for _, until := range p.left {
		if now < until {
			left = append(left, until)
		}
	}
	p.left = left
	// A new slice: checks during the loop count p.reqs as it was.
	var kept []*request
	for _, r := range p.reqs {
		switch {
		case r.atCS && now >= r.deadline: // the client gives up
			p.g.Abandoned()
			p.left = append(p.left, r.deadline+time.Duration(w.rng.Int64N(int64(testGrace))))
			r.release()
			continue
		case r.atCS && w.rng.IntN(3) == 0: // answered
			r.atCS = false
			if r.calls < 2 && w.rng.IntN(2) == 0 { // a second call to make, at a later step
				break
			}
			r.release()
			continue
		case !r.atCS && !w.call(p, r): // refused: the check ends
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
		r := &request{release: release}
		if !w.call(p, r) {
			release()
			break
		}
		p.reqs = append(p.reqs, r)
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
	case r < 12 && len(alive) > 0:
		p := alive[w.rng.IntN(len(alive))]
		p.frozen = !p.frozen // SIGSTOP, SIGCONT
		p.thawAt = 0
	case r < 13 && len(alive) > 0:
		// SIGSTOP past E, its checks holding permits, SIGCONT after
		p := alive[w.rng.IntN(len(alive))]
		p.frozen, p.thawAt = true, w.now+budget.DefaultExpireAfter+time.Duration(w.rng.IntN(15))*time.Second
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
		if p.frozen && p.thawAt > 0 && w.now >= p.thawAt {
			p.frozen, p.thawAt = false, 0
		}
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
