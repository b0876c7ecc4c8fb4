package main

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/opstatus/opstatus/internal/database"
)

// baselineResult is what one run of the serial design measured.
type baselineResult struct {
	N int
	// Pass is the unchanged pass: from its start to the last operation's
	// Cluster Service call, or extrapolated from Done operations when the
	// budget cut it short.
	Pass         time.Duration
	Extrapolated bool
	// Done1 and Done2 are the operations checked in the unchanged and the
	// changed pass.
	Done1, Done2 int
	List         time.Duration // one listing
	// Unchanged and Changed are the requests of the update checks of each
	// pass; Lists the requests of the listings, Listings how many ran.
	Unchanged, Changed requests
	Lists              requests
	Listings           int
	Changed2           int
	Errors             int
	// Freshness is measured from lastTransitionTime, or modelled from the
	// changed pass's rate when it was cut short: a serial pass reaches the
	// operation at position i after wait + i*t.
	Freshness  dist
	Missing    int
	UpdateSpan time.Duration
	// ChangedPass is the (possibly extrapolated) duration of the changed pass.
	ChangedPass time.Duration
	Wait        time.Duration // from the flip to the start of the changed pass
	Elapsed     time.Duration
	SeedTime    time.Duration
}

// runBaseline runs the serial design on n operations: one unchanged pass,
// the flip, then one changed pass. Above cfg.baselineFull operations each
// pass stops after cfg.baselineBudget and the rest is extrapolated.
func runBaseline(ctx context.Context, e *env, cfg config, n int) (res baselineResult, err error) {
	started := time.Now()
	res.N = n
	label := fmt.Sprintf("base-n%d", n)
	sim, err := e.newSim(cfg.latency)
	if err != nil {
		return res, err
	}
	db := e.newDatabase(label)
	defer e.dropDatabase(context.WithoutCancel(ctx), db)
	ds := newDataset(label, n, cfg.opsPerSub)
	if err := e.seed(ctx, db, ds, sim); err != nil {
		return res, err
	}
	res.SeedTime = time.Since(started)
	b, err := newBaseline(ctx, e.cosmos.Endpoint, e.cosmos.Key, db, e.simURL)
	if err != nil {
		return res, err
	}
	defer b.close()

	budget := time.Duration(0)
	if n > cfg.baselineFull {
		budget = cfg.baselineBudget
	}
	// counts keeps the first error, returned at the end.
	var countErr error
	counts := func() requests {
		r, err := e.requests(ctx, db, sim)
		countErr = cmp.Or(countErr, err)
		return r
	}

	// list runs the design's listing, keeping its requests apart.
	list := func() ([]*database.Operation, error) {
		before := counts()
		ops, err := b.listActive(ctx)
		res.Lists = res.Lists.add(counts().sub(before))
		res.Listings++
		return ops, err
	}

	// Unchanged pass: the listing, then every operation in order.
	listStart := time.Now()
	ops, err := list()
	if err != nil {
		return res, err
	}
	listed := time.Now()
	res.List = listed.Sub(listStart)
	c0 := counts()
	if len(ops) != n {
		return res, fmt.Errorf("listed %d active operations, want %d", len(ops), n)
	}
	p1 := b.pass(ctx, ops, budget)
	c1 := counts()
	res.Done1, res.Errors = p1.Done, p1.Errors
	res.Unchanged = c1.sub(c0)
	if p1.Truncated {
		res.Extrapolated = true
		res.Pass = time.Duration(float64(p1.End.Sub(p1.Start)) * float64(n) / float64(p1.Done))
	} else {
		end, ok := passEnd(sim.Calls(), ds.paths(), p1.Start)
		if !ok {
			return res, fmt.Errorf("the baseline pass missed some operations")
		}
		res.Pass = end.Sub(p1.Start)
	}

	// The flip, then the next pass on the loop's schedule: every 10 s from
	// the first pass, at once when overdue, with a fresh listing every 30 s.
	flip := time.Now()
	sim.ReadyAll()
	next := p1.Start
	for next.Before(flip) {
		next = next.Add(baselinePassEvery)
	}
	if p1.Truncated && res.Pass > baselinePassEvery {
		// The full pass would have overrun its 10 s: the next starts at once.
		next = flip
	}
	select {
	case <-ctx.Done():
		return res, ctx.Err()
	case <-time.After(time.Until(next)):
	}
	if time.Since(listed) >= baselineListEvery {
		if ops, err = list(); err != nil {
			return res, err
		}
	}
	c1 = counts()
	p2 := b.pass(ctx, ops, budget)
	c2 := counts()
	res.Done2, res.Changed2 = p2.Done, p2.Changed
	res.Errors += p2.Errors
	res.Changed = c2.sub(c1)
	res.Wait = p2.Start.Sub(flip)

	if p2.Truncated {
		perOp := float64(p2.End.Sub(p2.Start)) / float64(p2.Done)
		res.ChangedPass = time.Duration(perOp * float64(n))
		at := func(q float64) time.Duration { return res.Wait + time.Duration(q*float64(res.ChangedPass)) }
		res.Freshness = dist{N: n, P50: at(0.5), P99: at(0.99), Max: at(1)}
		res.UpdateSpan = res.ChangedPass
	} else {
		res.ChangedPass = p2.End.Sub(p2.Start)
		states, err := e.readStates(ctx, db)
		if err != nil {
			return res, err
		}
		delays, missing := freshness(states, ds, flip)
		res.Freshness, res.Missing = summarize(delays), missing
		res.UpdateSpan = span(delays)
	}
	res.Elapsed = time.Since(started)
	return res, countErr
}
