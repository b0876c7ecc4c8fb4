package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// holdsResult is the holds scenario: the subscription lock's hold where
// the machine is not saturated. A flip of every cluster at once makes each
// pass write thousands of changes to one single-threaded Cosmos server on
// cores shared with the handlers, and each round trip of a hold waits in
// that queue; here each pass writes a few subscriptions' changes among its
// unchanged checks, as changes come in production. The holds of one pass
// run at once, and the server answers their requests one at a time, so
// the figure grows with the subscriptions changed per pass.
type holdsResult struct {
	N, Instances int
	// Subs subscriptions' clusters turn ready before each of Rounds passes.
	Subs, Rounds int
	Updated      int64
	// Holds are opstatus's holds, creation to deletion at the Cosmos
	// server; Expired counts lock items that expired instead.
	Holds   dist
	Expired int
	// RequestsPerHold is the Cosmos requests made under the lock (see
	// underLock) per hold.
	RequestsPerHold float64
	// PerRound is each round's holds and how busy the machine was while
	// they ran. Unsaturated are the holds of the UnsaturatedRounds rounds
	// in which the machine had cores to spare, and UnsaturatedCores the
	// busiest of those rounds.
	PerRound          []holdRound
	Unsaturated       dist
	UnsaturatedRounds int
	UnsaturatedCores  cores
	Elapsed           time.Duration
}

// holdRound is one round of the holds scenario.
type holdRound struct {
	Holds dist
	// Cores is how busy the machine was from the round's first hold's
	// start to its last hold's end.
	Cores cores
}

// byRound splits opstatus's holds into the rounds that began at flips (in
// order), and keeps those of the rounds in which the machine was not
// saturated, from the CPU samples.
func byRound(holds []lockHold, flips []time.Time, samples []cpuSample) (rounds []holdRound, unsaturated dist, unsaturatedRounds int, busiest cores) {
	var spare []time.Duration
	for i, flip := range flips {
		var lo, hi time.Time
		var d []time.Duration
		for _, hd := range holds {
			st, end := msTime(hd.Start), msTime(hd.End)
			if !strings.HasPrefix(hd.Owner, opstatusLock) || st.Before(flip) || i+1 < len(flips) && !st.Before(flips[i+1]) {
				continue
			}
			if lo.IsZero() || st.Before(lo) {
				lo = st
			}
			hi = maxTime(hi, end)
			d = append(d, hd.Duration())
		}
		if len(d) == 0 {
			continue
		}
		r := holdRound{Holds: summarize(d), Cores: coresIn(samples, lo, hi)}
		rounds = append(rounds, r)
		if !r.Cores.saturated() {
			spare = append(spare, d...)
			unsaturatedRounds++
			if r.Cores.Machine >= busiest.Machine {
				busiest = r.Cores
			}
		}
	}
	return rounds, summarize(spare), unsaturatedRounds, busiest
}

// cpuSample is the machine's CPU time and this benchmark's processes' at
// one instant.
type cpuSample struct {
	At      time.Time
	Machine machineCPU
	Ours    time.Duration
}

// coresIn is how busy the machine was between from and to, from the
// samples around them (sorted by time).
func coresIn(samples []cpuSample, from, to time.Time) cores {
	c := cores{Of: runtime.NumCPU()}
	if len(samples) < 2 {
		return c
	}
	i := sort.Search(len(samples), func(i int) bool { return samples[i].At.After(from) }) - 1
	j := sort.Search(len(samples), func(j int) bool { return !samples[j].At.Before(to) })
	i, j = max(i, 0), min(j, len(samples)-1)
	if j <= i {
		return c
	}
	a, b := samples[i], samples[j]
	if total := b.Machine.Total - a.Machine.Total; total > 0 {
		c.Machine = float64(c.Of) * float64(b.Machine.Busy-a.Machine.Busy) / float64(total)
	}
	if wall := b.At.Sub(a.At).Seconds(); wall > 0 {
		c.Ours = (b.Ours - a.Ours).Seconds() / wall
	}
	return c
}

// holdsSampleEvery is how often the holds scenario samples CPU time: a
// round's holds last a few hundred milliseconds.
const holdsSampleEvery = 100 * time.Millisecond

// runHolds runs opstatus on cfg.holdsN operations and, after a warm-up
// pass, turns cfg.holdsSubs subscriptions' clusters ready before each of
// cfg.holdsRounds passes.
func runHolds(ctx context.Context, e *env, cfg config) (res holdsResult, err error) {
	start := time.Now()
	res = holdsResult{N: cfg.holdsN, Instances: slices.Max(cfg.instances), Subs: cfg.holdsSubs, Rounds: cfg.holdsRounds}
	fx, err := e.newFixture(ctx, cfg, fmt.Sprintf("holds-n%d", cfg.holdsN), cfg.holdsN)
	if err != nil {
		return res, err
	}
	defer e.dropDatabase(context.WithoutCancel(ctx), fx.db)
	if err := e.clearQueues(ctx); err != nil {
		return res, err
	}
	h, stopHost, err := e.startHost(ctx, cfg, fx, res.Instances)
	if err != nil {
		return res, err
	}
	defer func() {
		if herr := stopHost(); herr != nil && err == nil {
			err = herr
		}
	}()

	sampleCtx, stopSampling := context.WithCancel(ctx)
	var swg sync.WaitGroup
	swg.Go(func() {
		for sleepCtx(sampleCtx, holdsSampleEvery) {
			h.sample()
		}
	})
	defer func() {
		stopSampling()
		swg.Wait()
	}()

	warm, err := h.settle(ctx, time.Time{}, cfg.passTimeout)
	if err != nil {
		return res, fmt.Errorf("warm-up: %w", err)
	}
	bySub := map[string][]benchOp{}
	for _, o := range fx.ds.ops {
		bySub[o.Sub] = append(bySub[o.Sub], o)
	}
	subs := fx.ds.subscriptions()
	from := warm.Snap.At
	before := warm.Snap
	var flips []time.Time
	done := map[string]bool{}
	for round := range cfg.holdsRounds {
		// A pass ends once every operation still pending has been checked:
		// those the last round finished are no longer scanned.
		h.paths = slices.DeleteFunc(h.paths, func(p string) bool { return done[p] })
		for _, sub := range subs[round*cfg.holdsSubs : (round+1)*cfg.holdsSubs] {
			for _, o := range bySub[sub] {
				if err := fx.sim.SetState(o.InternalID(), "ready"); err != nil {
					return res, err
				}
				done[o.InternalID()] = true
			}
		}
		flips = append(flips, time.Now())
		s, err := h.settle(ctx, from, cfg.passTimeout)
		if err != nil {
			return res, fmt.Errorf("round %d: %w", round+1, err)
		}
		from = s.Snap.At
	}
	after, err := h.snap(ctx)
	if err != nil {
		return res, err
	}
	res.Updated = after.Outcomes["updated"] - before.Outcomes["updated"]
	holds, expired, err := e.lockHolds(ctx, fx.db)
	if err != nil {
		return res, err
	}
	res.Holds, res.Expired = holdsOf(holds, opstatusLock), expired
	if res.Holds.N > 0 {
		res.RequestsPerHold = float64(after.UnderLock-before.UnderLock) / float64(res.Holds.N)
	}
	res.PerRound, res.Unsaturated, res.UnsaturatedRounds, res.UnsaturatedCores = byRound(holds, flips, h.cpuSamples())
	res.Elapsed = time.Since(start)
	return res, nil
}

// msTime is a time in milliseconds since the Unix epoch, as the Cosmos
// server records a lock hold.
func msTime(ms float64) time.Time { return time.Unix(0, int64(ms*float64(time.Millisecond))) }

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func printHolds(w io.Writer, r holdsResult) {
	fmt.Fprintf(w, "  %d updates · lock holds %d, p50 %s, p99 %s, max %s, %d expired · Cosmos requests under the lock per hold %.2f\n",
		r.Updated, r.Holds.N, ms(r.Holds.P50), ms(r.Holds.P99), ms(r.Holds.Max), r.Expired, r.RequestsPerHold)
	var rounds []string
	for _, rd := range r.PerRound {
		rounds = append(rounds, fmt.Sprintf("%s at %.2f", ms(rd.Holds.P99), rd.Cores.Machine))
	}
	fmt.Fprintf(w, "  each round's hold p99 at the machine's cores busy meanwhile: %s\n", strings.Join(rounds, ", "))
	fmt.Fprintf(w, "  the %d rounds with cores to spare: %d holds, p50 %s, p99 %s, max %s; the busiest of them %s · run took %s\n",
		r.UnsaturatedRounds, r.Unsaturated.N, ms(r.Unsaturated.P50), ms(r.Unsaturated.P99), ms(r.Unsaturated.Max), r.UnsaturatedCores, secs(r.Elapsed))
}
