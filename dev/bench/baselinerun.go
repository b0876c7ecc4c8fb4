package main

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/opstatus/opstatus/internal/database"
)

// baselineResult is what one run of the serial design measured, or what
// such a run would measure at another N.
type baselineResult struct {
	N int
	// Pass is the unchanged pass: from its start to the last operation's
	// Cluster Service call.
	Pass time.Duration
	// Extrapolated is set for a result scaled from the run at From
	// operations rather than measured.
	Extrapolated bool
	From         int `json:",omitempty"`
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
	// Freshness is measured from lastTransitionTime (modelled when
	// extrapolated: a serial pass reaches the operation at position i
	// after Wait + i × the time per check).
	Freshness  dist
	Missing    int
	UpdateSpan time.Duration
	// ChangedPass is the duration of the changed pass.
	ChangedPass time.Duration
	Wait        time.Duration // from the flip to the start of the changed pass
	Elapsed     time.Duration
	SeedTime    time.Duration
}

// extrapolate scales a measured run to n operations: one serial loop
// checks one operation at a time, so its passes grow linearly with N. The
// requests per check and the wait for the next pass stay as measured.
func (b baselineResult) extrapolate(n int) baselineResult {
	f := float64(n) / float64(b.N)
	scale := func(d time.Duration) time.Duration { return time.Duration(float64(d) * f) }
	out := b
	out.N, out.Extrapolated, out.From = n, true, b.N
	out.Pass, out.ChangedPass, out.List, out.UpdateSpan = scale(b.Pass), scale(b.ChangedPass), scale(b.List), scale(b.ChangedPass)
	out.Done1, out.Done2, out.Changed2 = n, n, int(float64(b.Changed2)*f)
	out.Missing, out.Elapsed, out.SeedTime = 0, 0, 0
	at := func(q float64) time.Duration { return b.Wait + time.Duration(q*float64(out.ChangedPass)) }
	out.Freshness = dist{N: n, P50: at(0.5), P99: at(0.99), Max: at(1)}
	return out
}

// runBaseline runs the serial design on n operations: one unchanged pass,
// the flip, then one changed pass, each over every operation.
func runBaseline(ctx context.Context, e *env, cfg config, n int) (res baselineResult, err error) {
	started := time.Now()
	res.N = n
	fx, err := e.newFixture(ctx, cfg, fmt.Sprintf("base-n%d", n), n)
	if err != nil {
		return res, err
	}
	defer e.dropDatabase(context.WithoutCancel(ctx), fx.db)
	db, ds, sim := fx.db, fx.ds, fx.sim
	res.SeedTime = fx.seedTime
	b, err := newBaseline(ctx, e.cosmos.Endpoint, e.cosmos.Key, db, e.simURL)
	if err != nil {
		return res, err
	}
	defer b.close()

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
	p1 := b.pass(ctx, ops)
	c1 := counts()
	res.Done1, res.Errors = p1.Done, p1.Errors
	res.Unchanged = c1.sub(c0)
	end, ok := passEnd(sim.Calls(), ds.paths(), p1.Start)
	if !ok {
		return res, fmt.Errorf("the baseline pass missed some operations")
	}
	res.Pass = end.Sub(p1.Start)

	// The flip, then the next pass on the loop's schedule: every 10 s from
	// the first pass, with a fresh listing every 30 s.
	flip := time.Now()
	sim.ReadyAll()
	next := p1.Start
	for next.Before(flip) {
		next = next.Add(baselinePassEvery)
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
	p2 := b.pass(ctx, ops)
	c2 := counts()
	res.Done2, res.Changed2 = p2.Done, p2.Changed
	res.Errors += p2.Errors
	res.Changed = c2.sub(c1)
	res.Wait = p2.Start.Sub(flip)
	res.ChangedPass = p2.End.Sub(p2.Start)

	states, err := e.readStates(ctx, db)
	if err != nil {
		return res, err
	}
	delays, missing := freshness(states, ds, flip)
	res.Freshness, res.Missing = summarize(delays), missing
	res.UpdateSpan = span(delays)
	res.Elapsed = time.Since(started)
	return res, countErr
}
