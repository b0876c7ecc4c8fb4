package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/opstatus/opstatus/dev/clustersim"
	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/dev/hostemu"
	"github.com/opstatus/opstatus/dev/otlpsink"
	"github.com/opstatus/opstatus/internal/budget"
	"github.com/opstatus/opstatus/internal/telemetry"
)

// ledgerExpiry is E: a dead holder's entry goes after its seq has stayed
// unchanged this long, so reclaim takes at least as long.
const ledgerExpiry = budget.DefaultExpireAfter

// ledgerWatch reads the ledger of one database every 100 ms, outside the
// measured processes' path, and derives the newcomer and reclaim times.
type ledgerWatch struct {
	c *azcosmos.ContainerClient

	mu    sync.Mutex
	reads int
	begun time.Time // the first read
	last  budget.Ledger
	at    time.Time
	// seen is when each entry was first read with demand, reached when
	// its permits first reached its target after that.
	seen, reached map[string]time.Time
	// first is when each entry was first read; starts when each poll or
	// pickup handler process was first seen running (host, when set), and
	// on which instance; rec tells when the instances' invocations began.
	first      map[string]time.Time
	host       *hostemu.Host
	rec        *recorder
	pids       map[int]bool
	starts     []procStart
	lastSeq    map[string]int64
	seqAt      map[string]time.Time
	overBudget int
}

func (e *env) watchLedger(db string) (*ledgerWatch, error) {
	c, err := e.direct.NewContainer(db, frontend.LeasesContainer)
	if err != nil {
		return nil, err
	}
	return &ledgerWatch{c: c, seen: map[string]time.Time{}, reached: map[string]time.Time{}, first: map[string]time.Time{},
		pids: map[int]bool{}, lastSeq: map[string]int64{}, seqAt: map[string]time.Time{}}, nil
}

func (w *ledgerWatch) run(ctx context.Context) {
	for sleepCtx(ctx, 100*time.Millisecond) {
		w.sampleStarts()
		resp, err := w.c.ReadItem(ctx, azcosmos.NewPartitionKeyString(budget.ID), budget.ID, nil)
		now := time.Now()
		if err != nil {
			continue
		}
		var l budget.Ledger
		if json.Unmarshal(resp.Value, &l) != nil {
			continue
		}
		// What every member computes (internal/budget).
		targets := l.Targets()
		w.mu.Lock()
		if w.reads == 0 {
			w.begun = now
		}
		w.reads++
		w.last, w.at = l, now
		sum := 0
		for id, h := range l.Holders {
			sum += h.Permits
			if s, ok := w.lastSeq[id]; !ok || s != h.Seq {
				w.lastSeq[id], w.seqAt[id] = h.Seq, now
			}
			if _, ok := w.first[id]; !ok {
				w.first[id] = now
			}
			if _, ok := w.seen[id]; !ok && h.Demand > 0 {
				w.seen[id] = now
			}
			if _, ok := w.seen[id]; ok && w.reached[id].IsZero() && targets[id] > 0 && h.Permits >= targets[id] {
				w.reached[id] = now
			}
		}
		if sum > l.Budget {
			w.overBudget++
		}
		w.mu.Unlock()
	}
}

// sampleStarts records the poll and pickup handler processes that started
// since the last sample.
func (w *ledgerWatch) sampleStarts() {
	if w.host == nil {
		return
	}
	now := time.Now()
	for _, in := range w.host.Instances() {
		if g := in.Group(); g != "poll" && g != "pickup" {
			continue
		}
		if pid := in.PID(); pid != 0 && !w.pids[pid] {
			w.mu.Lock()
			w.pids[pid] = true
			w.starts = append(w.starts, procStart{At: now, Instance: in.Index()})
			w.mu.Unlock()
		}
	}
}

// snapshot returns the latest ledger read and when it was read.
func (w *ledgerWatch) snapshot() (budget.Ledger, time.Time, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last, w.at, w.reads
}

// procStart is a handler process's start, as the watch first saw it
// running, on its host instance.
type procStart struct {
	At       time.Time
	Instance int
}

// newcomers returns, for every entry that first had demand after from
// and was not in the watch's first read (its process was there before),
// how long it took from its process having work to its permits at its
// fair share: reached, or still short with demand at the last read (a
// lower bound, in censored). Work begins at the process's first
// invocation, or its start if that was later: the latest handler start
// seen before the entry's first read, on its instance; at the entry's
// first read with demand, if that was earlier or no start was seen.
func (w *ledgerWatch) newcomers(from time.Time) (reached, censored []time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, s := range w.seen {
		if !s.After(from) || !w.first[id].After(w.begun) {
			continue
		}
		begin := s
		var start *procStart
		for i, st := range w.starts {
			if !st.At.After(w.first[id]) && st.At.After(from) {
				start = &w.starts[i]
			}
		}
		if start != nil {
			b := start.At
			if w.rec != nil {
				if work, ok := w.rec.firstWork(start.Instance, start.At); ok && work.After(b) {
					b = work
				}
			}
			if b.Before(begin) {
				begin = b
			}
		}
		switch r := w.reached[id]; {
		case !r.IsZero():
			reached = append(reached, r.Sub(begin))
		case w.last.Holders[id].Demand > 0:
			censored = append(censored, w.at.Sub(begin))
		}
	}
	slices.Sort(reached)
	slices.Sort(censored)
	return reached, censored
}

// ledgerTotals are the handlers' ledger metrics summed over every process
// that exported them.
type ledgerTotals struct {
	At                   time.Time
	RU                   float64
	Replaces, Replace412 float64
	Requests             float64
}

func (e *env) ledgerTotals() ledgerTotals {
	t := ledgerTotals{At: time.Now()}
	if e.sink == nil {
		return t
	}
	t.RU = e.sink.Total(telemetry.MetricLedgerCharge, nil)
	t.Requests = e.sink.Total(telemetry.MetricLedgerRequests, nil)
	t.Replaces = e.sink.Total(telemetry.MetricLedgerRequests, map[string]string{"kind": "replace"})
	t.Replace412 = e.sink.Total(telemetry.MetricLedgerRequests, map[string]string{"kind": "replace", "status_code": "412"})
	return t
}

// ledgerRate is the ledger's request units a second and its requests
// between two totals.
type ledgerRate struct {
	Seconds              float64
	RUPerS               float64
	Requests             float64
	Replaces, Replace412 float64
}

func rateBetween(a, b ledgerTotals) ledgerRate {
	s := b.At.Sub(a.At).Seconds()
	r := ledgerRate{Seconds: s, Requests: b.Requests - a.Requests, Replaces: b.Replaces - a.Replaces, Replace412: b.Replace412 - a.Replace412}
	if s > 0 {
		r.RUPerS = (b.RU - a.RU) / s
	}
	return r
}

// budgetResult is the budget scenario's figures.
type budgetResult struct {
	N, Budget int
	// Ledger is false when no handler wrote a ledger (a handler without
	// one): the other figures are then empty.
	Ledger bool
	// Newcomers is, for each process that got work after the scenario
	// began, its work → its permits at its fair share (newcomers);
	// NewcomersShort, for those still short of it at the end, a lower
	// bound.
	Newcomers, NewcomersShort []time.Duration
	// Reclaim is a crashed holder's crash → its permits held by others;
	// ReclaimAtLeast when that never happened within the wait.
	Reclaim        time.Duration
	ReclaimAtLeast bool
	ReclaimPermits int
	// Busy and Idle are the ledger's requests and charges with poll
	// scaling out and pickup busy, and with every operation settled;
	// BusyEntries and IdleEntries the ledger's entries at their ends.
	Busy, Idle               ledgerRate
	BusyEntries, IdleEntries int
	CSInFlightMax            int64
	OverBudget               int
}

// runBudget measures the ledger: a newcomer's time to its share as poll
// scales out, a crashed holder's permits coming back, the ledger's cost
// busy and idle.
func runBudget(ctx context.Context, e *env, cfg config, n int) (res budgetResult, err error) {
	res = budgetResult{N: n, Budget: cfg.budget}
	slow := cfg
	slow.latency = budgetLatency
	fx, err := e.newFixture(ctx, slow, "budget", n)
	if err != nil {
		return res, err
	}
	defer e.dropDatabase(context.WithoutCancel(ctx), fx.db)
	if err := e.clearQueues(ctx); err != nil {
		return res, err
	}
	h, stop, err := e.startHost(ctx, cfg, fx, cfg.instances[0])
	if err != nil {
		return res, err
	}
	defer func() {
		if serr := stop(); serr != nil && err == nil {
			err = serr
		}
	}()
	w, err := e.watchLedger(fx.db)
	if err != nil {
		return res, err
	}
	w.host, w.rec = h.host, h.rec
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go w.run(watchCtx)
	started := time.Now()

	// Busy: poll's group scales out and newcomers take their shares, while
	// the frontend writes new operations for pickup.
	fe, err := frontend.New(e.cosmos.Endpoint, e.cosmos.Key, fx.db)
	if err != nil {
		return res, err
	}
	arrivalsCtx, stopArrivals := context.WithCancel(ctx)
	var arrivals sync.WaitGroup
	arrivals.Go(func() {
		ds := newDataset("budget-new", int(budgetArrivalRate*budgetBusyMax.Seconds()), cfg.opsPerSub)
		_, _ = arrive(arrivalsCtx, fe, fx.sim, ds, budgetArrivalRate) // stopped below, its error that
	})
	busyFrom := e.ledgerTotals()
	h.waitScaledOut(ctx, cfg)
	sleepCtx(ctx, 15*time.Second)
	res.Busy = rateBetween(busyFrom, e.ledgerTotals())
	l, _, _ := w.snapshot()
	res.BusyEntries = len(l.Holders)
	stopArrivals()
	arrivals.Wait()
	res.Newcomers, res.NewcomersShort = w.newcomers(started)

	// A holder crashes: its entry stays until others have seen it
	// unchanged for E, then its permits go to the others.
	res.Ledger = len(l.Holders) > 0
	if res.Ledger {
		res.Reclaim, res.ReclaimPermits, res.ReclaimAtLeast = crashHolder(ctx, h.host, w)
	}

	// Idle: every cluster ready, every operation settled.
	fx.sim.ReadyAll()
	waitFor(ctx, 2*time.Minute, func() bool {
		states, err := e.readStates(ctx, fx.db)
		if err != nil {
			return false
		}
		for _, s := range states {
			if s.Status != "Succeeded" {
				return false
			}
		}
		return true
	})
	sleepCtx(ctx, 5*time.Second) // idle processes write their permits back
	idleFrom := e.ledgerTotals()
	sleepCtx(ctx, 20*time.Second)
	res.Idle = rateBetween(idleFrom, e.ledgerTotals())
	l, _, _ = w.snapshot()
	res.IdleEntries = len(l.Holders)
	res.CSInFlightMax = e.inFlight.Max()
	w.mu.Lock()
	res.OverBudget = w.overBudget
	w.mu.Unlock()
	return res, nil
}

// inFlightMean is the mean of the requests in flight between two times,
// from samples of clustersim.InFlightStats: the first sample at or after
// from and the last at or before to.
func inFlightMean(samples []clustersim.InFlightStats, from, to time.Time) (float64, bool) {
	var a, b *clustersim.InFlightStats
	for i := range samples {
		s := &samples[i]
		if a == nil && !s.At.Before(from) {
			a = s
		}
		if !s.At.After(to) {
			b = s
		}
	}
	if a == nil || b == nil || !b.At.After(a.At) || !a.Since.Equal(b.Since) {
		return 0, false
	}
	return (b.Area() - a.Area()) / b.At.Sub(a.At).Seconds(), true
}

// The budget scenario: Cluster Service's latency, slow enough that every
// busy process wants more permits than it has; new operations a second
// for pickup while poll is busy, for as long as the busy phase can last.
const (
	budgetLatency     = 500 * time.Millisecond
	budgetArrivalRate = 10.0
	budgetBusyMax     = 4 * time.Minute
)

// crashHolder crashes the newest poll instance (SIGKILL, as a machine
// failure) and returns how long until its permits are back in use: its
// entry is gone and every live entry with demand holds its fair share
// (the newcomer's test), the instance's replacement included.
func crashHolder(ctx context.Context, host *hostemu.Host, w *ledgerWatch) (time.Duration, int, bool) {
	var victim *hostemu.Instance
	for _, in := range host.Instances() {
		if in.Group() == "poll" && (victim == nil || in.Index() > victim.Index()) {
			victim = in
		}
	}
	if victim == nil {
		return 0, 0, true
	}
	before, _, _ := w.snapshot()
	crashed := time.Now()
	if victim.Crash() != nil {
		return 0, 0, true
	}
	var back time.Time
	dead := ""
	waitFor(ctx, 2*ledgerExpiry+30*time.Second, func() bool {
		l, at, _ := w.snapshot()
		if !at.After(crashed) {
			return false
		}
		if dead == "" {
			// The dead entry is the one of before whose seq has not
			// moved since the crash while the others renewed.
			w.mu.Lock()
			for id := range before.Holders {
				if _, ok := l.Holders[id]; !ok || w.seqAt[id].Before(crashed) && at.Sub(crashed) > 10*time.Second {
					dead = id
				}
			}
			w.mu.Unlock()
		}
		if dead == "" {
			return false
		}
		if _, still := l.Holders[dead]; still {
			return false
		}
		targets := l.Targets()
		for id, h := range l.Holders {
			if h.Demand > 0 && h.Permits < targets[id] {
				return false
			}
		}
		back = at
		return true
	})
	permits := before.Holders[dead].Permits
	if back.IsZero() {
		return time.Since(crashed), permits, true
	}
	return back.Sub(crashed), permits, false
}

func printBudget(out io.Writer, r budgetResult) {
	if !r.Ledger {
		fmt.Fprintf(out, "  no ledger item was written (a handler without the budget ledger): no newcomer, reclaim or ledger figures\n")
		return
	}
	p, short := r.newcomerP99()
	fmt.Fprintf(out, "  newcomers: %d (%d still short of their share at the end), work → fair share p99 %s%s, all [%s]; crashed holder's %d permits back in use after %s%s\n",
		len(r.Newcomers)+len(r.NewcomersShort), len(r.NewcomersShort), durText(p), atLeast(short), durList(r.Newcomers),
		r.ReclaimPermits, durText(r.Reclaim), atLeast(r.ReclaimAtLeast))
	fmt.Fprintf(out, "  ledger: %.1f RU/s busy (poll scaling out to %d entries with pickup's; %.0f requests, %.0f of %.0f replaces 412), %.1f RU/s idle (%d entries, each read every %s and renewed every %s); in flight at most %d of %d\n",
		r.Busy.RUPerS, r.BusyEntries, r.Busy.Requests, r.Busy.Replace412, r.Busy.Replaces, r.Idle.RUPerS, r.IdleEntries,
		budget.DefaultReadEvery, budget.DefaultRenewEvery, r.CSInFlightMax, r.Budget)
}

func atLeast(b bool) string {
	if b {
		return " (at least: not back within the wait)"
	}
	return ""
}

func durText(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

// newcomerP99 is the newcomers' p99, the lower bounds of those still short
// sorted in with the others; short says it is a lower bound: one of them
// sorts at or below it.
func (r budgetResult) newcomerP99() (p time.Duration, short bool) {
	all := slices.Concat(r.Newcomers, r.NewcomersShort)
	slices.Sort(all)
	p = p99(all)
	return p, len(r.NewcomersShort) > 0 && slices.Min(r.NewcomersShort) <= p
}

// p99 is the nearest-rank 99th percentile of sorted durations, 0 for none.
func p99(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	i := (len(d)*99 + 99) / 100
	return d[min(max(i-1, 0), len(d)-1)]
}

// seedLedger creates an empty ledger in database db's Leases container, as
// budget.Seed does for a new environment: every run's database is one,
// and a ledger the first handler created itself would have every member
// wait E before taking permits, which a deployment meets once, not every
// run. An existing ledger is left as it is.
func (e *env) seedLedger(ctx context.Context, db string) error {
	c, err := e.direct.NewContainer(db, frontend.LeasesContainer)
	if err != nil {
		return err
	}
	return budget.Seed(ctx, budget.NewCosmos(c), e.budget)
}

// startSink starts the OTLP receiver the handlers export their metrics to.
func (e *env) startSink() error {
	s, err := otlpsink.Start()
	if err != nil {
		return err
	}
	e.sink = s
	return nil
}

// telemetrySettings send the handlers' metrics (not their spans) to the
// sink every second.
func (e *env) telemetrySettings() map[string]string {
	if e.sink == nil {
		return nil
	}
	return map[string]string{
		"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": e.sink.URL + "/v1/metrics",
		"OTEL_METRIC_EXPORT_INTERVAL":         "1000",
		"OTEL_SERVICE_NAME":                   "opstatus-bench",
	}
}

// ledgerHeadlines adds the budget ledger's name=value lines.
func (r *results) ledgerHeadlines() {
	l := r.Ledger
	if l == nil || !l.Ledger {
		return
	}
	if len(l.Newcomers)+len(l.NewcomersShort) > 0 {
		p, short := l.newcomerP99()
		v := f2(p.Seconds())
		if short {
			v = "≥" + v
		}
		r.add("budget_newcomer_p99_s", v)
	}
	v := f2(l.Reclaim.Seconds())
	if l.ReclaimAtLeast {
		v = "≥" + v
	}
	r.add("budget_reclaim_s", v)
	r.add("ledger_ru_per_s_idle", f2(l.Idle.RUPerS))
	r.add("ledger_ru_per_s_busy", f2(l.Busy.RUPerS))
	if l.Busy.Replaces > 0 {
		r.add("ledger_412_rate", f2(l.Busy.Replace412/l.Busy.Replaces))
	}
}
