package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/opstatus/opstatus/dev/frontend"
)

// coldArrival is one new operation written while pickup's group had
// scaled to zero.
type coldArrival struct {
	// Delay is from the start of the write to the operation's first
	// Cluster Service call, whichever function made it; ByPickup is set
	// when pickup did. PollInstances is how many poll instances ran at the
	// write.
	Delay         time.Duration
	ByPickup      bool
	PollInstances int
	Missed        bool // no call within coldWait
}

// pickupColdResult is the pickup-from-idle scenario.
type pickupColdResult struct {
	Background, Instances int
	StartDelay            time.Duration
	Arrivals              []coldArrival
}

// coldWait bounds the wait for an arrival's first call and for pickup to
// scale to zero.
const coldWait = 3 * time.Minute

// p99 is the arrivals' 99th percentile delay (the largest of a few), a
// missed arrival counting as coldWait.
func (r pickupColdResult) p99() (time.Duration, bool) {
	var ds []time.Duration
	missed := false
	for _, a := range r.Arrivals {
		if a.Missed {
			missed = true
			ds = append(ds, coldWait)
			continue
		}
		ds = append(ds, a.Delay)
	}
	if len(ds) == 0 {
		return 0, false
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, (len(ds)*99+99)/100-1)], missed
}

// runPickupCold runs pickup from idle: over cfg.pickupBackground pending
// operations, one warm-up arrival gives the lease a checkpoint; then, for
// each of cfg.coldPickups arrivals, the harness waits for pickup's group
// to scale to zero and writes one new operation.
func runPickupCold(ctx context.Context, e *env, cfg config) (res pickupColdResult, err error) {
	// From idle means pickup without its always-ready instance.
	cfg.alwaysReady = maps.Clone(cfg.alwaysReady)
	delete(cfg.alwaysReady, "pickup")
	instances := slices.Max(cfg.instances)
	res = pickupColdResult{Background: cfg.pickupBackground, Instances: instances, StartDelay: cfg.startDelay}
	fx, err := e.newFixture(ctx, cfg, fmt.Sprintf("pickupcold-n%d", cfg.pickupBackground), cfg.pickupBackground)
	if err != nil {
		return res, err
	}
	defer e.dropDatabase(context.WithoutCancel(ctx), fx.db)
	if err := e.clearQueues(ctx); err != nil {
		return res, err
	}
	host, _, m, stop, err := e.startPickupHost(ctx, cfg, fx, instances)
	if err != nil {
		return res, err
	}
	defer func() {
		if herr := stop(); herr != nil && err == nil {
			err = fmt.Errorf("host emulator: %w", herr)
		}
	}()
	count := func(group string) int {
		n := 0
		for _, in := range host.Instances() {
			if in.Group() == group {
				n++
			}
		}
		return n
	}
	if !waitFor(ctx, 2*time.Minute, func() bool { return host.Counters().LeasesAcquired > 0 }) {
		return res, errors.New("pickup's listener did not start")
	}
	fe, err := frontend.New(e.cosmos.Endpoint, e.cosmos.Key, fx.db)
	if err != nil {
		return res, err
	}
	ds := newDataset("pickup-cold", cfg.coldPickups+1, 1)
	one := func(i int) (time.Time, error) {
		written, err := arrive(ctx, fe, fx.sim, dataset{ops: ds.ops[i : i+1]}, 1)
		if err != nil {
			return time.Time{}, err
		}
		return written[0], nil
	}
	firstCall := func(i int, after time.Time) (time.Time, bool) {
		var first time.Time
		ok := waitFor(ctx, coldWait, func() bool {
			for _, c := range fx.sim.Calls()[ds.ops[i].InternalID()] {
				if !c.Before(after) {
					first = c
					return true
				}
			}
			return false
		})
		return first, ok
	}
	// The warm-up arrival checkpoints the lease: until then the estimator
	// reads the feed from its beginning and keeps one instance.
	w, err := one(0)
	if err != nil {
		return res, err
	}
	if _, ok := firstCall(0, w); !ok {
		return res, errors.New("the warm-up arrival was never checked")
	}
	for i := 1; i <= cfg.coldPickups; i++ {
		if !waitFor(ctx, coldWait, func() bool { return count("pickup") == 0 }) {
			return res, errors.New("pickup's group did not scale to zero")
		}
		a := coldArrival{PollInstances: count("poll")}
		written, err := one(i)
		if err != nil {
			return res, err
		}
		first, ok := firstCall(i, written)
		if !ok {
			a.Missed = true
		} else {
			a.Delay = first.Sub(written)
			// An invocation is recorded when it ends, after its calls.
			a.ByPickup = waitFor(ctx, 5*time.Second, func() bool {
				for _, s := range m.between(written.Add(-time.Second), first.Add(time.Second)) {
					if s.Function == "pickup" && !first.Before(s.Start) && !first.After(s.End) {
						return true
					}
				}
				return false
			})
		}
		res.Arrivals = append(res.Arrivals, a)
		fmt.Fprintf(cfg.progress, "  cold arrival %d: first Cluster Service call after %s (by %s; %d poll instances at the write)\n",
			i, secs(a.Delay), map[bool]string{true: "pickup", false: "poll"}[a.ByPickup], a.PollInstances)
	}
	return res, nil
}

func printPickupCold(w io.Writer, r pickupColdResult) {
	var parts []string
	byPickup := 0
	for _, a := range r.Arrivals {
		parts = append(parts, secs(a.Delay))
		if a.ByPickup {
			byPickup++
		}
	}
	p99, missed := r.p99()
	fmt.Fprintf(w, "pickup from idle: %d arrivals, each written once pickup's group had scaled to zero, over %d pending operations, ≤%d poll instances, a new instance starting after %s (assumed): write → first Cluster Service call %s (p99 %s%s); %d first calls by pickup, the rest by scan and poll\n",
		len(r.Arrivals), r.Background, r.Instances, r.StartDelay, strings.Join(parts, ", "), secs(p99), map[bool]string{true: ", some missed", false: ""}[missed], byPickup)
}
