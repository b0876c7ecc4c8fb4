package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/opstatus/opstatus/dev/clustersim"
	"github.com/opstatus/opstatus/dev/frontend"
)

// mixedResult is the mixed scenario under one reading of
// maximumInstanceCount: poll works through a backlog while Cluster Service
// is slow and new operations arrive for pickup, so that both groups fill
// their per-process caps at once.
type mixedResult struct {
	AppWide      bool
	N, Instances int
	// Cap is each handler's ceiling (CLUSTER_SERVICE_MAX_IN_FLIGHT), Budget
	// the app's, shared through the ledger.
	Cap, Budget int
	Latency     time.Duration
	For         time.Duration
	Arrivals    int
	// PollMax and PickupMax are the most instances of each group seen at
	// once (sampled twice a second), Pickups the pickup invocations.
	PollMax, PickupMax int
	Pickups            int64
	// CSInFlightMax is the most Cluster Service requests in flight at
	// once, every handler's together, at the simulator.
	CSInFlightMax int64
	CSCalls       int64
}

// runMixed runs the mixed scenario: cfg.mixedN pending operations with
// Cluster Service at cfg.mixedLatency, maximumInstanceCount
// cfg.mixedInstances read per group or app-wide, pickup running and new
// operations arriving at cfg.pickupRate for cfg.mixedFor.
func runMixed(ctx context.Context, e *env, cfg config, appWide bool) (res mixedResult, err error) {
	cfg.appWide = appWide
	n, instances := cfg.mixedN, cfg.mixedInstances
	res = mixedResult{AppWide: appWide, N: n, Instances: instances, Budget: cfg.budget, Cap: templateMaxInFlight(cfg.instanceMemory),
		Latency: cfg.mixedLatency, For: cfg.mixedFor}
	fx, err := e.newFixture(ctx, cfg, fmt.Sprintf("mixed-n%d-%t", n, appWide), n)
	if err != nil {
		return res, err
	}
	defer e.dropDatabase(context.WithoutCancel(ctx), fx.db)
	if err := fx.sim.SetFaults(clustersim.Faults{Latency: clustersim.Duration(cfg.mixedLatency)}); err != nil {
		return res, err
	}
	if err := e.clearQueues(ctx); err != nil {
		return res, err
	}
	e.inFlight.ResetMax()
	host, _, _, stop, err := e.startPickupHost(ctx, cfg, fx, instances)
	if err != nil {
		return res, err
	}
	defer func() {
		if herr := stop(); herr != nil && err == nil {
			err = fmt.Errorf("host emulator: %w", herr)
		}
	}()
	if !waitFor(ctx, 30*time.Second, func() bool { return host.Port() != 0 }) {
		return res, errors.New("the host emulator did not start its handler")
	}

	fe, err := frontend.New(e.cosmos.Endpoint, e.cosmos.Key, fx.db)
	if err != nil {
		return res, err
	}
	res.Arrivals = max(int(cfg.pickupRate*cfg.mixedFor.Seconds()), 1)
	ds := newDataset(fmt.Sprintf("mixed-new-%t", appWide), res.Arrivals, cfg.opsPerSub)
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			counts := map[string]int{}
			for _, in := range host.Instances() {
				counts[in.Group()]++
			}
			res.PollMax, res.PickupMax = max(res.PollMax, counts["poll"]), max(res.PickupMax, counts["pickup"])
			select {
			case <-stopSampling:
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	_, err = arrive(ctx, fe, fx.sim, ds, cfg.pickupRate)
	if err == nil {
		// The requests of the last arrivals are still in flight.
		time.Sleep(cfg.mixedLatency)
	}
	close(stopSampling)
	<-sampled
	if err != nil {
		return res, err
	}
	if err := stop(); err != nil {
		return res, fmt.Errorf("host emulator: %w", err)
	}
	res.CSInFlightMax = e.inFlight.Max()
	res.CSCalls = simCalls(fx.sim)
	res.Pickups = host.Counters().Calls("pickup")
	return res, nil
}

// reading names a reading of maximumInstanceCount.
func reading(appWide bool) string {
	if appWide {
		return "app-wide"
	}
	return "per group"
}

func printMixed(w io.Writer, r mixedResult) {
	fmt.Fprintf(w, "mixed (%s): %d pending, Cluster Service at %s, %d new operations over %s; maximumInstanceCount %d, ceiling %d per handler, budget %d: at most %d poll and %d pickup instances at once, %d pickup invocations; %d Cluster Service requests in flight at most (%d calls)\n",
		reading(r.AppWide), r.N, r.Latency, r.Arrivals, r.For, r.Instances, r.Cap, r.Budget, r.PollMax, r.PickupMax, r.Pickups, r.CSInFlightMax, r.CSCalls)
}
