package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/opstatus/opstatus/dev/clustersim"
	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/dev/hostemu"
)

// Targets of the pickup scenario.
const (
	targetPickupP99      = 2 * time.Second
	targetPickupCallsPer = 1.0
)

// quietWindow is how long the pickup scenario measures the trigger's
// traffic without arrivals: longer than the extension's lease renewal
// interval (17 s), so that renewals are seen.
const quietWindow = 35 * time.Second

// pickupResult is the pickup scenario: the frontend writes new operations
// at a steady rate while the app runs as deployed, pickup included, over a
// background of pending operations that scan and poll keep checking.
type pickupResult struct {
	Arrivals, Background, Instances int
	Rate                            float64 // arrivals per second
	// Delays is, per arrival, the time from the start of the frontend's
	// write of its operation to the first Cluster Service call for it, at
	// the simulator; an arrival without a call in its first interval counts
	// as at least an interval (censored).
	Delays dist
	// Calls counts the Cluster Service calls for the arrivals within their
	// first interval [write, write + interval); MaxCalls is the most one
	// arrival got, Unchecked how many got none, ByPickup how many had their
	// first call inside a pickup invocation.
	Calls, MaxCalls, Unchecked, ByPickup int
	// Pickups counts pickup invocations, Documents the documents the
	// host's listener delivered to them.
	Pickups, Documents int64
	// The trigger's own Cosmos DB traffic: change feed reads of the
	// Operations container and requests to the lease container, per second
	// in a window without arrivals (Quiet), and beyond that rate per
	// arrival over the arrivals' window.
	Quiet                                   time.Duration
	QuietFeedReads, QuietLeaseOps           float64
	FeedReadsPerArrival, LeaseOpsPerArrival float64
	// PickupBilledPerArrival is the execution time Flex Consumption bills
	// pickup's instances for, per arrival; PickupDuration is a pickup
	// invocation's median duration.
	PickupBilledPerArrival, PickupDuration time.Duration
}

// callsPerOp is the Cluster Service calls per arrival within its first
// interval.
func (p pickupResult) callsPerOp() float64 {
	if p.Arrivals == 0 {
		return 0
	}
	return float64(p.Calls) / float64(p.Arrivals)
}

// pickupSettings are the settings that make the host run pickup: the
// containers and the host's own Cosmos DB connection to the server.
func (e *env) pickupSettings() map[string]string {
	return map[string]string{
		"COSMOS_OPERATIONS_CONTAINER": frontend.OperationsContainer,
		"COSMOS_LEASES_CONTAINER":     frontend.LeasesContainer,
		"COSMOS": fmt.Sprintf("AccountEndpoint=%s;AccountKey=%s;DisableServerCertificateValidation=True;",
			e.cosmos.Endpoint, e.cosmos.Key),
	}
}

// triggerCounts returns counters whose differences between two calls are
// the change feed reads of the Operations container and the requests to
// the lease container that database db has answered (isTrigger), less the
// budget ledger's, which share the container and are costed on their own
// (the handlers' count of those, exported every second, may lag the
// server's by a second's requests); only this database's host may run
// between the calls.
func (e *env) triggerCounts(ctx context.Context, db string) (feedReads, leaseOps int64, err error) {
	ledger := e.ledgerTotals().Requests
	counts, err := e.cosmos.Counts(ctx, db)
	if err != nil {
		return 0, 0, err
	}
	leaseOps = -int64(ledger)
	for _, c := range counts {
		switch {
		case !isTrigger(c):
		case c.Kind == "changefeed":
			feedReads += c.Count
		default:
			leaseOps += c.Count
		}
	}
	return feedReads, leaseOps, nil
}

// startPickupHost starts the host emulator over fx's database with pickup
// on and poll's instances up to instances, recording its invocations and
// metering them; stop stops it.
func (e *env) startPickupHost(ctx context.Context, cfg config, fx *fixture, instances int) (host *hostemu.Host, rec *recorder, m *meter, stop func() error, err error) {
	settings := e.flexHandlerSettings(cfg, fx.db, instances)
	maps.Copy(settings, e.pickupSettings())
	if host, err = hostemu.Load(e.app, settings); err != nil {
		return nil, nil, nil, nil, err
	}
	rec = newRecorder(func() int64 { return host.Counters().MessagesEnqueued })
	host.Options = e.hostOptions(cfg, instances, rec.record, &scaleLog{})
	m = attachMeter(host)
	return host, rec, m, launch(ctx, host), nil
}

// runPickup runs the pickup scenario: cfg.pickupBackground pending
// operations, then cfg.pickupN new ones written at cfg.pickupRate a
// second, with poll's instances up to the largest of cfg.instances.
func runPickup(ctx context.Context, e *env, cfg config) (res pickupResult, err error) {
	instances := slices.Max(cfg.instances)
	res = pickupResult{Arrivals: cfg.pickupN, Background: cfg.pickupBackground, Instances: instances, Rate: cfg.pickupRate}
	fx, err := e.newFixture(ctx, cfg, fmt.Sprintf("pickup-n%d", cfg.pickupBackground), cfg.pickupBackground)
	if err != nil {
		return res, err
	}
	defer e.dropDatabase(context.WithoutCancel(ctx), fx.db)
	if err := e.clearQueues(ctx); err != nil {
		return res, err
	}
	host, rec, m, stop, err := e.startPickupHost(ctx, cfg, fx, instances)
	if err != nil {
		return res, err
	}
	defer func() {
		if herr := stop(); herr != nil && err == nil {
			err = fmt.Errorf("host emulator: %w", herr)
		}
	}()
	// The listener starts from now, as the extension does without a
	// continuation; two scans make the background steady.
	ready := waitFor(ctx, time.Minute, func() bool {
		c := host.Counters()
		scans, _, _, _ := rec.snapshot()
		return c.LeasesAcquired > 0 && c.ChangeFeedReads > 0 && len(scans) >= 2
	})
	if !ready {
		return res, errors.New("pickup's listener or scan did not start")
	}

	f0, l0, err := e.triggerCounts(ctx, fx.db)
	if err != nil {
		return res, err
	}
	quietFrom := time.Now()
	select {
	case <-ctx.Done():
		return res, ctx.Err()
	case <-time.After(quietWindow):
	}
	f1, l1, err := e.triggerCounts(ctx, fx.db)
	if err != nil {
		return res, err
	}
	res.Quiet = time.Since(quietFrom)
	res.QuietFeedReads = float64(f1-f0) / res.Quiet.Seconds()
	res.QuietLeaseOps = float64(l1-l0) / res.Quiet.Seconds()

	fe, err := frontend.New(e.cosmos.Endpoint, e.cosmos.Key, fx.db)
	if err != nil {
		return res, err
	}
	ds := newDataset("pickup-new", cfg.pickupN, cfg.opsPerSub)
	written, err := arrive(ctx, fe, fx.sim, ds, cfg.pickupRate)
	if err != nil {
		return res, err
	}
	// Every arrival's first interval ends before the figures are read.
	last := written[len(written)-1]
	select {
	case <-ctx.Done():
		return res, ctx.Err()
	case <-time.After(time.Until(last.Add(scanInterval + time.Second))):
	}
	f2, l2, err := e.triggerCounts(ctx, fx.db)
	if err != nil {
		return res, err
	}
	window := time.Since(quietFrom) - res.Quiet
	res.FeedReadsPerArrival = max(float64(f2-f1)-res.QuietFeedReads*window.Seconds(), 0) / float64(cfg.pickupN)
	res.LeaseOpsPerArrival = max(float64(l2-l1)-res.QuietLeaseOps*window.Seconds(), 0) / float64(cfg.pickupN)
	res.Documents = host.Counters().DocumentsDelivered
	if err := stop(); err != nil {
		return res, fmt.Errorf("host emulator: %w", err)
	}

	var pickups []invSpan
	for _, s := range m.between(time.Time{}, time.Now()) {
		if s.Function == "pickup" {
			pickups = append(pickups, s)
		}
	}
	res.Pickups = int64(len(pickups))
	res.PickupBilledPerArrival = total(activity(pickups)).Billed / time.Duration(cfg.pickupN)
	res.PickupDuration = medianDuration(pickups)
	res.firstIntervals(fx.sim.Calls(), ds, written, pickups)
	return res, nil
}

// firstIntervals fills in the delays and calls of each arrival's first
// interval from the simulator's calls.
func (res *pickupResult) firstIntervals(calls map[string][]time.Time, ds dataset, written []time.Time, pickups []invSpan) {
	var delays []time.Duration
	censored := 0
	for i, o := range ds.ops {
		from, to := written[i], written[i].Add(scanInterval)
		n := 0
		var first time.Time
		for _, c := range calls[o.InternalID()] {
			if c.Before(from) || !c.Before(to) {
				continue
			}
			if n == 0 {
				first = c
			}
			n++
		}
		res.Calls += n
		res.MaxCalls = max(res.MaxCalls, n)
		if n == 0 {
			res.Unchecked++
			censored++
			continue
		}
		delays = append(delays, first.Sub(from))
		for _, p := range pickups {
			if !first.Before(p.Start) && !first.After(p.End) {
				res.ByPickup++
				break
			}
		}
	}
	res.Delays = summarizeCensored(delays, censored, scanInterval)
}

// arrive writes ds's operations as the frontend creates them, one every
// 1/rate seconds (each write in its own goroutine, so that a slow one does
// not hold up the schedule): every other one a cluster Create, Accepted,
// its cluster installing in sim, the others a Delete, Deleting, its
// cluster uninstalling (arrivalItems). It returns when each write began.
func arrive(ctx context.Context, fe *frontend.Frontend, sim *clustersim.Sim, ds dataset, rate float64) ([]time.Time, error) {
	written := make([]time.Time, len(ds.ops))
	every := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for i, o := range ds.ops {
		select {
		case <-ctx.Done():
			wg.Wait()
			return nil, ctx.Err()
		case <-time.After(time.Until(start.Add(time.Duration(i) * every))):
		}
		var err error
		if arrivalDeletes(i) {
			if err = sim.AddCluster(o.Cluster, clustersim.Script{}); err == nil {
				err = sim.DeleteCluster(o.Cluster, installing)
			}
		} else {
			err = sim.AddCluster(o.Cluster, clustersim.Script{Installing: clustersim.Duration(installing)})
		}
		if err != nil {
			wg.Wait()
			return nil, err
		}
		wg.Go(func() {
			now := time.Now()
			res, op := arrivalItems(i, o, now)
			// The Resources item first: pickup may act as soon as the
			// operation is written.
			err := fe.PutResource(ctx, res)
			written[i] = now
			if err == nil {
				err = fe.PutOperation(ctx, op)
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("arrival %s: %w", o.ID, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return written, errors.Join(errs...)
}

// arrivalDeletes reports whether arrival i is a Delete: ARO-HCP's frontend
// creates a Delete Deleting and every other request Accepted, and pickup
// must take both.
func arrivalDeletes(i int) bool { return i%2 == 1 }

// arrivalItems returns the Resources and Operations items the frontend
// writes at now for arrival i: a Create, Accepted, of a new cluster, or a
// Delete, Deleting, of an existing one.
func arrivalItems(i int, o benchOp, now time.Time) (frontend.Resource, frontend.Operation) {
	request, status, state := "Create", "Accepted", "Accepted"
	if arrivalDeletes(i) {
		request, status, state = "Delete", "Deleting", "Deleting"
	}
	return frontend.Resource{
			ID: "res-" + o.ID, PartitionKey: o.Sub, Key: o.Key(), InternalID: o.InternalID(),
			ActiveOperationID: o.ID, ProvisioningState: state,
		}, frontend.Operation{
			ID: o.ID, PartitionKey: o.Sub, TenantID: "72f988bf-86f1-41af-91ab-2d7cd011db47",
			Request: request, Status: status,
			ExternalID: o.Key(), InternalID: o.InternalID(),
			OperationID: "/subscriptions/" + o.Sub + "/providers/Microsoft.RedHatOpenShift/locations/eastus/hcpOperationStatuses/" + o.ID,
			StartTime:   now.UTC(), LastTransitionTime: now.UTC(),
		}
}

func printPickup(w io.Writer, r pickupResult) {
	fmt.Fprintf(w, "pickup: %d arrivals (every other one a Delete) at %.0f/s over %d pending operations, ≤%d poll instances: write → first Cluster Service call p50 %s, p99 %s, max %s; %d arrivals unchecked in their first interval; %.3f calls per arrival in it (max %d); %d first calls in pickup invocations; %d pickup invocations for %d documents\n",
		r.Arrivals, r.Rate, r.Background, r.Instances, secs(r.Delays.P50), fresh(r.Delays.P99, r.Delays.P99AtLeast), fresh(r.Delays.Max, r.Delays.MaxAtLeast),
		r.Unchecked, r.callsPerOp(), r.MaxCalls, r.ByPickup, r.Pickups, r.Documents)
	fmt.Fprintf(w, "pickup's trigger traffic: %.2f change feed reads/s and %.2f lease requests/s without arrivals (%s); %.2f feed reads and %.2f lease requests more per arrival; billed pickup execution %s per arrival; a pickup invocation takes %s (median)\n",
		r.QuietFeedReads, r.QuietLeaseOps, secs(r.Quiet), r.FeedReadsPerArrival, r.LeaseOpsPerArrival, ms(r.PickupBilledPerArrival), ms(r.PickupDuration))
}
