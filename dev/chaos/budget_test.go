package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/clustersim"
	"github.com/opstatus/opstatus/dev/faultproxy"
	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/dev/hostemu"
	"github.com/opstatus/opstatus/internal/budget"
	"github.com/opstatus/opstatus/internal/testenv"
)

// The plan of TestBudgetUnderChaos: few instances allowed, more run
// (overshoot), a budget every process would fill alone.
const (
	budgetChaosBudget    = 12
	budgetChaosMax       = 2
	budgetChaosOvershoot = 3
	// ledgerValidity is V of the ledger: a freeze longer than it outlives
	// the holder's lease.
	ledgerValidity = budget.DefaultValidity
	// ledgerExpiry is E of the ledger: a freeze longer than it has the
	// holder's entry reclaimed and its permits taken by others.
	ledgerExpiry = budget.DefaultExpireAfter
	// ledgerItemID is the ledger's id in the Leases container.
	ledgerItemID = budget.ID
)

// TestBudgetUnderChaos measures the Cluster Service requests in flight of
// every handler process together, at every change, while poll runs on
// more instances than maximumInstanceCount, rolling updates run old and
// new processes side by side, holders are SIGKILLed and frozen (SIGSTOP)
// past the ledger's validity then resumed, and the Leases container, which
// holds the ledger, throttles, fails and times out. It fails if the
// requests in flight ever exceed CLUSTER_SERVICE_BUDGET, or if the ledger
// item ever holds more permits than it.
func TestBudgetUnderChaos(t *testing.T) {
	testenv.NeedsServers(t)
	runSeed := seed(t)
	t.Logf("budget chaos, seed %d (OPSTATUS_CHAOS_SEED=%d reproduces the draws)", runSeed, runSeed)
	rng := rand.New(rand.NewPCG(uint64(runSeed), 11))
	ctx := context.Background()
	chaosFor := 90 * time.Second

	probe := &inFlightProbe{budget: budgetChaosBudget}
	plan := hostemu.FlexOptions{MaximumInstanceCount: budgetChaosMax, Overshoot: budgetChaosOvershoot,
		ScaleInterval: flexScaleInterval, ScaleInDelay: flexScaleInDelay, TimerLease: flexTimerLease, TimerLeaseRetry: flexTimerLeaseRetry}
	var scale scaleLog
	// functionTimeout stays host.json's (5 minutes), longer than any
	// freeze: a frozen holder is resumed, not killed by the host.
	e := startEnv(t, envOptions{lockTTL: 5 * time.Second, seed: runSeed, flex: &plan, onScale: scale.record,
		settings:   map[string]string{"CLUSTER_SERVICE_BUDGET": strconv.Itoa(budgetChaosBudget)},
		simHandler: probe.wrap,
		// Calls slow enough that every busy process would fill the
		// budget alone, a few past the client's 10 s timeout, which
		// Cluster Service works on after their client leaves: the probe
		// counts them at the server.
		sim: clustersim.Faults{Latency: clustersim.Duration(200 * time.Millisecond), LatencyJitter: clustersim.Duration(100 * time.Millisecond),
			SpikeRate: 0.005, Spike: clustersim.Duration(11 * time.Second), WorkAfterClientLeaves: true}})
	subs := subscriptions(8, "budget")
	// Lifecycles longer than the run: every operation stays pending, so
	// every message is work.
	ops := withoutFollowUps(scenario(rng, subs, 160, 10*time.Minute, 20*time.Minute, "b"))
	require.NoError(t, seedOps(ctx, e, ops))
	ledger := newLedgerWatch(t, e)

	chaosCtx, stopChaos := context.WithCancel(ctx)
	var actors sync.WaitGroup
	// Bursts far above what budgetChaosMax instances take: the scale
	// controller asks for more and the overshoot runs them.
	work := &backlog{e: e, ops: ops, messages: 72, perMessage: 8, minPause: 6 * time.Second, maxPause: 10 * time.Second,
		rng: rand.New(rand.NewPCG(uint64(runSeed), 12))}
	var polls instanceSampler
	polls.host = e.s.Host
	holders := &holderChaos{host: e.s.Host, rng: rand.New(rand.NewPCG(uint64(runSeed), 13))}
	ledgerFaults := &leasesFaults{proxy: e.proxy, rng: rand.New(rand.NewPCG(uint64(runSeed), 14))}
	roller := &roller{host: e.s.Host, every: 15 * time.Second}
	actors.Go(func() { work.run(chaosCtx) })
	actors.Go(func() { polls.run(chaosCtx) })
	actors.Go(func() { holders.run(chaosCtx) })
	actors.Go(func() { ledgerFaults.run(chaosCtx) })
	actors.Go(func() { roller.run(chaosCtx) })
	actors.Go(func() { ledger.run(chaosCtx) })
	testenv.Sleep(ctx, chaosFor)
	stopChaos()
	actors.Wait()
	holders.thaws.Wait()
	e.proxy.SetFaults(faultproxy.Faults{})

	st := probe.c.Stats()
	sim := e.s.Sim.Stats()
	var calls int64
	for _, n := range sim.Requests {
		calls += n
	}
	ps := e.proxy.Stats()
	t.Logf("budget chaos: %d Cluster Service calls; in flight at most %d (budget %d), mean %.1f; poll instances at most %d "+
		"(maximumInstanceCount %d + overshoot %d); %d scale decisions; %d rolling updates begun, %d finished, %d instances replaced; %d kills, %d freezes (longest %s, validity %s); "+
		"Leases faults in %d windows (%d requests throttled, %d 503, %d timed out, %d dropped after forward); %s",
		calls, st.Max, budgetChaosBudget, st.Mean, polls.most.Load(), budgetChaosMax, budgetChaosOvershoot, len(scale.all()),
		roller.started.Load(), roller.done.Load(), e.s.Host.Counters().InstancesReplaced, holders.kills.Load(), holders.freezes.Load(), time.Duration(holders.longest.Load()), ledgerValidity,
		ledgerFaults.windows.Load(), ps.Throttled, ps.Unavailable, ps.TimedOut, ps.DroppedAfterForward, ledger.summary())

	require.Positive(t, calls, "the handlers called Cluster Service")
	require.Greater(t, polls.most.Load(), int64(budgetChaosMax), "more poll instances ran than maximumInstanceCount")
	require.Positive(t, e.s.Host.Counters().InstancesReplaced, "a rolling update ran old and new processes together")
	require.Positive(t, holders.kills.Load(), "holders were SIGKILLed")
	require.Positive(t, holders.freezes.Load(), "holders were frozen")
	require.Greater(t, time.Duration(holders.longest.Load()), ledgerExpiry, "a freeze outlived the ledger's expiry: the entry was reclaimed")
	require.Positive(t, ledgerFaults.windows.Load(), "the Leases container failed")
	require.Empty(t, ledger.violations(), "the ledger never held more permits than the budget")
	require.LessOrEqual(t, st.Max, int64(budgetChaosBudget),
		"Cluster Service requests in flight, every process together, exceeded CLUSTER_SERVICE_BUDGET (first at %s)", probe.firstOver())
}

// inFlightProbe counts the Cluster Service requests in flight app-wide
// (clustersim.InFlight, exact at every change) and remembers when the
// count first went over the budget.
type inFlightProbe struct {
	budget int64
	c      *clustersim.InFlight
	over   atomic.Int64 // unix nanoseconds of the first count over the budget; 0 when none
}

func (p *inFlightProbe) wrap(next http.Handler) http.Handler {
	p.c = clustersim.CountInFlight(next)
	p.c.Watch(func(n int64, at time.Time) {
		if n > p.budget {
			p.over.CompareAndSwap(0, at.UnixNano())
		}
	})
	return p.c
}

func (p *inFlightProbe) firstOver() string {
	if ns := p.over.Load(); ns != 0 {
		return time.Unix(0, ns).UTC().Format(time.RFC3339Nano)
	}
	return "never"
}

// holderChaos SIGKILLs and freezes the handlers of poll and pickup
// instances, which hold the budget's permits while they have work: a kill
// leaves its permits in the ledger until others reclaim them; a freeze
// (SIGSTOP) lasts longer than the ledger's validity, every other one
// longer than its expiry (the entry reclaimed, its permits another's),
// then the process resumes (SIGCONT) and must find its lease over, or its
// permits gone, before it calls again.
type holderChaos struct {
	host *hostemu.Host
	rng  *rand.Rand

	kills, freezes, longest atomic.Int64
	// thaws waits for the frozen handlers to be resumed.
	thaws sync.WaitGroup
	// frozen are the instances frozen now, which are neither killed nor
	// frozen again before they are resumed.
	frozen sync.Map
}

func (h *holderChaos) run(ctx context.Context) {
	for testenv.Sleep(ctx, 4*time.Second+time.Duration(h.rng.Int64N(int64(4*time.Second)))) {
		var holders []*hostemu.Instance
		for _, in := range h.host.Instances() {
			if _, ice := h.frozen.Load(in); ice {
				continue
			}
			if g := in.Group(); (g == "poll" || g == "pickup") && in.PID() != 0 {
				holders = append(holders, in)
			}
		}
		if len(holders) == 0 {
			continue
		}
		in := holders[h.rng.IntN(len(holders))]
		if h.rng.IntN(2) == 0 {
			// A machine failure: the handler gets SIGKILL and the platform
			// starts another instance. (Instance.Kill would count towards
			// the host's three handler failures, which stop the host.)
			if in.Crash() == nil {
				h.kills.Add(1)
			}
			continue
		}
		// Frozen past the validity, or past the expiry, then resumed; the
		// chaos goes on meanwhile.
		past := ledgerValidity
		if h.freezes.Load()%2 == 0 {
			past = ledgerExpiry
		}
		freeze := past + time.Second + time.Duration(h.rng.Int64N(int64(5*time.Second)))
		if in.Freeze() != nil {
			continue
		}
		h.freezes.Add(1)
		h.frozen.Store(in, true)
		start := time.Now()
		h.thaws.Go(func() {
			defer h.frozen.Delete(in)
			testenv.Sleep(context.WithoutCancel(ctx), freeze)
			if in.Thaw() == nil {
				d := int64(time.Since(start))
				for cur := h.longest.Load(); d > cur && !h.longest.CompareAndSwap(cur, d); cur = h.longest.Load() {
				}
			}
		})
	}
}

// leasesFaults fails the handlers' requests to the Leases container, where
// the ledger lives, in windows: throttling, 503s, timeouts, and writes
// applied whose answer is lost. Between windows the container is healthy.
type leasesFaults struct {
	proxy *faultproxy.Proxy
	rng   *rand.Rand

	windows atomic.Int64
}

func (l *leasesFaults) run(ctx context.Context) {
	for testenv.Sleep(ctx, 5*time.Second+time.Duration(l.rng.Int64N(int64(5*time.Second)))) {
		l.proxy.SetFaults(faultproxy.Faults{
			Rate429: 0.25, Rate503: 0.1, RateTimeout: 0.05, RateDropAfterForward: 0.05,
			Timeout: 3 * time.Second, RetryAfter: 200 * time.Millisecond,
			Match: func(r faultproxy.Request) bool { return r.Container == frontend.LeasesContainer },
		})
		l.windows.Add(1)
		testenv.Sleep(ctx, 2*time.Second+time.Duration(l.rng.Int64N(int64(4*time.Second))))
		l.proxy.SetFaults(faultproxy.Faults{})
	}
}

// roller runs a rolling site update every so often: each group's
// instances are replaced one by one, old and new side by side until the
// old one has drained. An update under way when the chaos ends stops its
// old instances at once.
type roller struct {
	host  *hostemu.Host
	every time.Duration

	started, done atomic.Int64
}

func (r *roller) run(ctx context.Context) {
	for testenv.Sleep(ctx, r.every) {
		r.started.Add(1)
		if err := r.host.RollingUpdate(ctx, hostemu.RollingUpdate{Overlap: 2 * time.Second}); err == nil {
			r.done.Add(1)
		}
	}
}

// ledgerWatch reads the ledger item straight from the Cosmos test server
// (not through the fault proxy) and checks, at each read, that its
// permits add up to no more than its budget.
type ledgerWatch struct {
	c *azcosmos.ContainerClient

	mu         sync.Mutex
	reads      int
	found      int
	mostHolder int
	epochs     map[string]bool
	bad        []string
}

// seedLedger creates an empty ledger of setting (CLUSTER_SERVICE_BUDGET's
// value; none when empty) in the stack's Leases container before the host
// starts, with budget.Seed as for a new environment, so that the run does
// not begin with the wait E of a ledger its first handler created.
func seedLedger(ctx context.Context, endpoint, setting string) error {
	if setting == "" {
		return nil
	}
	b, err := strconv.Atoi(setting)
	if err != nil {
		return err
	}
	d, err := newDirect(endpoint, testenv.CosmosEmulatorKey)
	if err != nil {
		return err
	}
	return budget.Seed(ctx, budget.NewCosmos(d.leases), b)
}

func newLedgerWatch(t *testing.T, e *env) *ledgerWatch {
	t.Helper()
	d, err := newDirect(e.s.Cosmos.Endpoint, e.s.Cosmos.Key)
	require.NoError(t, err)
	return &ledgerWatch{c: d.leases, epochs: map[string]bool{}}
}

func (w *ledgerWatch) run(ctx context.Context) {
	for testenv.Sleep(ctx, 250*time.Millisecond) {
		resp, err := w.c.ReadItem(ctx, azcosmos.NewPartitionKeyString(ledgerItemID), ledgerItemID, nil)
		w.mu.Lock()
		w.reads++
		var re *azcore.ResponseError
		switch {
		case errors.As(err, &re) && re.StatusCode == http.StatusNotFound:
		case err != nil:
		default:
			var l budget.Ledger
			if err := json.Unmarshal(resp.Value, &l); err != nil {
				w.bad = append(w.bad, fmt.Sprintf("unreadable ledger: %v", err))
				break
			}
			w.found++
			w.epochs[l.Epoch] = true
			w.mostHolder = max(w.mostHolder, len(l.Holders))
			sum := 0
			for _, h := range l.Holders {
				sum += h.Permits
			}
			if sum > l.Budget || l.Budget > budgetChaosBudget {
				w.bad = append(w.bad, fmt.Sprintf("%s: %d permits held of a budget of %d (CLUSTER_SERVICE_BUDGET %d)",
					time.Now().UTC().Format(time.RFC3339Nano), sum, l.Budget, budgetChaosBudget))
			}
		}
		w.mu.Unlock()
	}
}

func (w *ledgerWatch) violations() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.bad...)
}

func (w *ledgerWatch) summary() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.found == 0 {
		return fmt.Sprintf("no ledger item in %d reads", w.reads)
	}
	return fmt.Sprintf("ledger found in %d of %d reads, at most %d holders, %d epochs", w.found, w.reads, w.mostHolder, len(w.epochs))
}

// The write log's check lets the ledger's creates and replaces through,
// which hold no lock, but not a delete of it, nor other Leases writes
// without an owner.
func TestWriteLogAllowsTheLedger(t *testing.T) {
	w := func(kind, container, id string) faultproxy.Write {
		return faultproxy.Write{Kind: kind, Container: container, ItemID: id}
	}
	require.Empty(t, writeLogProblems(nil, []faultproxy.Write{
		w(faultproxy.KindCreate, frontend.LeasesContainer, ledgerItemID),
		w(faultproxy.KindReplace, frontend.LeasesContainer, ledgerItemID),
	}))
	require.Len(t, writeLogProblems(nil, []faultproxy.Write{w(faultproxy.KindDelete, frontend.LeasesContainer, ledgerItemID)}), 2)
	require.Len(t, writeLogProblems(nil, []faultproxy.Write{w(faultproxy.KindReplace, frontend.LeasesContainer, "other")}), 1)
}
