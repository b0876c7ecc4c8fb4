package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/clustersim"
	"github.com/opstatus/opstatus/dev/faultproxy"
	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/dev/stack"
	"github.com/opstatus/opstatus/internal/testenv"
)

// chaosConfig sizes a chaos run.
type chaosConfig struct {
	name             string
	ops, subs        int
	waves            int           // the operations arrive in this many waves, one per scan interval
	minLife, maxLife time.Duration // a lifecycle ends this long after its operation arrives
	chaosFor         time.Duration // the chaos phase ends when everything settled, or after this
	calmFor          time.Duration // then faults stop; everything must settle within this
	killMin, killMax time.Duration // pause between two kills of the handler
	lockTakers       int
	slowRequests     int // operations of the first wave the lock actor makes, one a hold
}

// configFromEnv returns the bounded run of make test, or the soak when
// OPSTATUS_SOAK or -soak asks for it.
func configFromEnv(t *testing.T) chaosConfig {
	t.Helper()
	c := chaosConfig{
		name: "bounded", ops: 500, subs: 10, waves: 1,
		minLife: 3 * time.Second, maxLife: 45 * time.Second,
		chaosFor: 90 * time.Second, calmFor: 60 * time.Second,
		killMin: 8 * time.Second, killMax: 20 * time.Second,
		lockTakers: 1, slowRequests: 4,
	}
	soak := os.Getenv("OPSTATUS_SOAK")
	if soak == "" && !*soakFlag {
		return c
	}
	d := 20 * time.Minute
	if v, err := time.ParseDuration(soak); err == nil && v > 0 {
		d = v
	}
	// Operations keep arriving over most of the soak, so that the chaos
	// always has work in flight to break.
	c.waves = max(int(d*8/10/scanInterval), 1)
	c.name, c.ops = "soak "+d.String(), 25*c.waves
	c.maxLife = 90 * time.Second
	c.chaosFor, c.calmFor = d, 3*time.Minute
	c.lockTakers, c.slowRequests = 2, 12
	return c
}

// The malformed messages queued on purpose: only they may end in the poison
// queue.
var malformed = []string{
	`not json at all`,
	`{"subscriptionId":42,"operationId":"x"}`,
	`{}`,
}

// proxyFaults are the Cosmos faults of the chaos phase, on the handler's
// requests only (its User-Agent starts with opstatus): the simulated
// frontend's lock traffic passes untouched so that its holds are what it
// decided.
func proxyFaults() faultproxy.Faults {
	return faultproxy.Faults{
		Rate429: 0.02, Rate503: 0.01, RateTimeout: 0.005, RateDrop: 0.005, RateDropAfterForward: 0.01,
		Timeout: 3 * time.Second, RetryAfter: 100 * time.Millisecond,
		Match: func(r faultproxy.Request) bool { return strings.Contains(r.Header.Get("User-Agent"), "opstatus") },
	}
}

// simFaults are the Cluster Service faults of the chaos phase: 5xx,
// timeouts past the client's 10 s, latency and spikes. None of them changes
// a lifecycle, so none may change a terminal state.
func simFaults() clustersim.Faults {
	return clustersim.Faults{
		Latency: clustersim.Duration(15 * time.Millisecond), LatencyJitter: clustersim.Duration(10 * time.Millisecond),
		ErrorRate: 0.05, TimeoutRate: 0.01, Timeout: clustersim.Duration(12 * time.Second),
		SpikeRate: 0.03, Spike: clustersim.Duration(2 * time.Second),
	}
}

// TestChaos runs the whole system as Flex Consumption runs it, under
// Cosmos and Cluster Service faults, handler kills, poll instances added
// and removed as the queue grows and shrinks, crashes of the scan
// instance and a frontend taking locks at random, then checks that
// every operation ended as its script implies, that the Resources items
// followed, that the billing items follow the clusters' creates and
// deletes, that no write broke a subscription lock, that only malformed
// messages were poisoned, that every operation was notified, that scans
// resumed within the timer lease's bound after each crash, and that
// Cluster Service never had more requests in flight than the budget.
func TestChaos(t *testing.T) {
	testenv.NeedsServers(t)
	cfg := configFromEnv(t)
	runSeed := seed(t)
	t.Logf("chaos run %q, seed %d (OPSTATUS_CHAOS_SEED=%d reproduces the draws)", cfg.name, runSeed, runSeed)
	rng := rand.New(rand.NewPCG(uint64(runSeed), 1))
	ctx := context.Background()
	lockTTL := 5 * time.Second

	// The host runs the app as Flex Consumption does: scan in an instance
	// of its own, poll in instances that follow the queue, each its own
	// handler process. The emulator's functionTimeout is below what a poll
	// takes when Cluster Service calls hang past the client's timeout, so
	// that the host's kill on timeout (the handler process and every
	// invocation in it) happens under chaos too, and above what a poll
	// takes that waits for permits until its message is superseded (one
	// scan interval): a kill strands its process's permits until they are
	// reclaimed, so a timeout below that wait would kill the waiters in
	// turn, which production's functionTimeout never does; there poll's
	// own deadline ends a hung poll first.
	//
	// The account is ARO-HCP's of 2024-10 (Billing on /partitionKey, every
	// Operations item in "workaround"), and a third of the cluster and node
	// pool operations are requests served as its frontend did.
	fx := newFlexRun()
	opts := fx.options(envOptions{lockTTL: lockTTL, seed: runSeed, invocationTimeout: 15 * time.Second, layout: testenv.Layout2024})
	opts.settings[stack.OperationsPartitionSetting] = frontend.FixedOperationsPartition
	e := startEnv(t, opts)
	subs := subscriptions(cfg.subs, "chaos")
	ops := scenario(rng, subs, cfg.ops, cfg.minLife, cfg.maxLife, "x")
	ops = as2024(rng, ops, 1.0/3)
	t.Logf("%d operations are requests to the 2024-10 frontend", len(slices.DeleteFunc(slices.Clone(ops), func(o op) bool { return !o.Aro2024 })))
	follow := newFollowUps(e, ops)

	// Faults first, so that the very first scans and polls meet them.
	e.proxy.SetFaults(proxyFaults())
	require.NoError(t, e.s.Sim.SetFaults(simFaults()))

	seeded := time.Now()
	for _, m := range malformed {
		e.enqueueRaw(ctx, m)
	}
	// The first wave now, the others one scan interval apart.
	perWave := (len(ops) + cfg.waves - 1) / cfg.waves
	wave := func(i int) []op { return ops[min(i*perWave, len(ops)):min((i+1)*perWave, len(ops))] }
	slow, quick := splitSlow(wave(0), cfg.slowRequests)
	require.NoError(t, seedOps(ctx, e, quick))
	t.Logf("seeded %d operations over %d subscriptions (%d waves) in %s, %d left to the lock actor: %v", len(quick), len(subs), cfg.waves,
		time.Since(seeded).Round(time.Millisecond), len(slow), countKinds(ops))
	allSeeded := make(chan error, 1)
	go func() {
		for i := 1; i < cfg.waves; i++ {
			time.Sleep(time.Until(seeded.Add(time.Duration(i) * scanInterval)))
			if err := seedOps(ctx, e, wave(i)); err != nil {
				allSeeded <- err
				return
			}
		}
		allSeeded <- nil
	}()
	var seedErr error
	seedingDone := false

	chaosCtx, stopChaos := context.WithCancel(ctx)
	var actors sync.WaitGroup
	kill := &killer{e: e, min: cfg.killMin, max: cfg.killMax, rng: rand.New(rand.NewPCG(uint64(runSeed), 2))}
	actors.Go(func() { kill.run(chaosCtx) })
	taker := &lockTaker{
		fe: e.proxiedFrontend(), subs: subs, ttl: lockTTL,
		minHold: time.Second, maxHold: 12 * time.Second, minPause: time.Second, maxPause: 5 * time.Second,
		rng:    rand.New(rand.NewPCG(uint64(runSeed), 3)),
		before: func(ctx context.Context, o op) error { return seedBefore(ctx, e, o) }, armURL: e.s.ARMURL, requests: slow,
	}
	for range cfg.lockTakers {
		actors.Go(func() { taker.run(chaosCtx) })
	}
	bodies := &bodyFaults{sim: e.s.Sim, base: simFaults(),
		minPause: 5 * time.Second, maxPause: 15 * time.Second, minWindow: 2 * time.Second, maxWindow: 6 * time.Second,
		rng: rand.New(rand.NewPCG(uint64(runSeed), 5))}
	actors.Go(func() { bodies.run(chaosCtx) })
	fx.run(chaosCtx, &actors, e, ops, runSeed)

	// settledNow reads every operation and the poison queue.
	leftWhen := map[time.Duration]int{}
	settledNow := func() bool {
		if !seedingDone {
			select {
			case seedErr = <-allSeeded:
				seedingDone = true
			default:
				return false
			}
		}
		if seedErr != nil {
			return true // reported below
		}
		items, err := e.db.operations(ctx)
		if err != nil {
			return false
		}
		if seedErr = follow.seedReady(ctx, items); seedErr != nil {
			return true // reported below
		}
		done, left := settled(items, ops)
		leftWhen[time.Since(seeded).Truncate(10*time.Second)] = left
		poison, err := e.poisoned(ctx)
		// The malformed messages reach the poison queue after five tries,
		// each behind whatever backlog the queue holds.
		return done && err == nil && len(poison) >= len(malformed)
	}
	// The chaos goes on until the scan instance has crashed and scans
	// resumed elsewhere.
	settledInChaos := testenv.WaitFor(ctx, cfg.chaosFor, 2*time.Second, func() bool {
		return settledNow() && fx.crasher.failedOver()
	})
	chaosEnded := time.Now()
	stopChaos()
	actors.Wait()
	e.proxy.SetFaults(faultproxy.Faults{})
	require.NoError(t, e.s.Sim.SetFaults(clustersim.Faults{}))
	t.Logf("chaos phase: %s, settled under chaos: %v", chaosEnded.Sub(seeded).Round(time.Second), settledInChaos)
	require.NoError(t, seedErr)

	settledCalm := settledInChaos || testenv.WaitFor(ctx, cfg.calmFor, 2*time.Second, settledNow)
	settledAt := time.Now()
	// A last scan after everything settled must find nothing pending; a
	// crash of the scan instance may delay it.
	lastScan := invocation{Pending: -1}
	scanned := testenv.WaitFor(ctx, failoverBound+2*scanInterval, 500*time.Millisecond, func() bool {
		for _, inv := range e.inv.all() {
			if inv.Function == "scan" && inv.At.After(settledAt) && inv.Pending >= 0 {
				lastScan = inv
				return true
			}
		}
		return false
	})
	elapsed := time.Since(seeded)
	opItems, err := e.db.operations(ctx)
	require.NoError(t, err)
	resItems, err := e.db.resources(ctx)
	require.NoError(t, err)
	bills, err := e.db.bills(ctx)
	require.NoError(t, err)
	created := createdClusters(e.s.Sim, ops, follow.created)
	poison, err := e.poisoned(ctx)
	require.NoError(t, err)
	// Stopping the host first completes the write log.
	require.NoError(t, e.Close())
	notified := notifications(e)
	writes := bySubscription(e.proxy.Writes())
	violations := faultproxy.LockViolations(writes, lockTTL, nil)
	leases := faultproxy.Leases(writes, lockTTL, nil)

	// The figures come first, so that a failing run still reports them.
	rep := &report{cfg: cfg, seed: runSeed, ops: ops, elapsed: elapsed, chaosFor: chaosEnded.Sub(seeded),
		settledInChaos: settledInChaos, env: e, kill: kill, taker: taker, bodies: bodies, writes: writes, leases: leases,
		violations: violations, notified: notified, poison: poison, progress: leftWhen, opItems: opItems, bills: bills,
		flex: fx, seeded: seeded}
	t.Log("\n" + rep.String())

	require.True(t, settledCalm, "every operation ends and is notified within %s of the end of the chaos", cfg.calmFor)
	require.Empty(t, checkOutcome(ops, opItems, resItems), "final items match the scripted lifecycles")
	require.Empty(t, checkBilling(ops, opItems, bills, created), "billing items follow the clusters' creates and deletes")
	require.Empty(t, violations, "no write to a subscription's items while another owner held its lock, or while its writer held none")
	require.Empty(t, writeLogProblems(ops, writes), "the write log holds only opstatus's data writes, and only the expected deletes")
	require.Equal(t, sortedCopy(malformed), poison, "the poison queue holds only the malformed messages")
	require.Equal(t, int64(len(malformed)), e.s.Host.Counters().MessagesPoisoned, "nothing else was poisoned")
	require.Zero(t, e.inv.outcomes("poll")["HTTP 500"], "no poll failed unexpectedly (500)")
	require.Empty(t, notificationProblems(ops, opItems, notified), "every terminal operation notified with its final status")
	require.True(t, scanned, "a scan ran after everything settled")
	require.Zero(t, lastScan.Pending, "the scan after settling finds nothing pending")
	require.Positive(t, kill.kills.Load(), "the handler was killed")
	require.Positive(t, e.s.Host.Counters().Timeouts, "the host killed a handler on a function timeout")
	require.Positive(t, taker.holds.Load(), "the frontend held locks")
	require.Equal(t, int64(len(slow)), taker.made.Load(), "the frontend made every slow request")
	require.Positive(t, rep.faultTotal(), "faults were injected")
	require.Positive(t, bodies.windows.Load(), "external auths and credentials were answered with faulty bodies")
	require.Zero(t, bodies.errors.Load(), "the body faults were set and cleared")

	// The platform's side: poll instances added as the queue grew and
	// removed (drained, then killed) as it shrank; the scan instance's
	// crash stopped scans only until its lease ran out; Cluster Service
	// never saw more than the budget.
	scale := summarizeScale(fx.scale.all(), seeded)
	require.Positive(t, scale.outs, "poll instances were added as the queue grew")
	require.GreaterOrEqual(t, scale.most, 2, "the queue grew past what one instance takes")
	require.Positive(t, scale.ins, "poll instances were removed as the queue shrank")
	drainedOK, _ := drained(e.inv.all(), scaleInStops(e.handlerLog()))
	require.Positive(t, drainedOK, "a scale-in waited for invocations in flight to finish before the kill")
	require.Positive(t, fx.backlog.bursts.Load(), "the queue grew in bursts")
	require.Zero(t, fx.backlog.errors.Load(), "every burst was queued")
	crashes := fx.crasher.all()
	require.NotEmpty(t, crashes, "the scan instance crashed")
	invs := e.inv.all()
	require.Empty(t, failoverProblems(failovers(crashes, invs), failoverBound+failoverSlack),
		"after each crash of the scan instance, scans resumed on another within lease + retry + interval")
	require.Empty(t, overlappingScans(invs), "no two scans ran at once")
	inFlight, _ := fx.cs.peak()
	require.LessOrEqual(t, inFlight, fx.budget, "Cluster Service never had more requests in flight than the budget")
}

// bySubscription returns writes with each write of an Operations item in
// the fixed partition given its subscription, that of its externalId, as
// partition key: the subscription whose lock covers it, as the lock
// checks take the partition key to be.
func bySubscription(writes []faultproxy.Write) []faultproxy.Write {
	out := slices.Clone(writes)
	for i := range out {
		w := &out[i]
		if w.Container != frontend.OperationsContainer || w.PartitionKey != frontend.FixedOperationsPartition {
			continue
		}
		var body struct {
			ExternalID string `json:"externalId"`
		}
		if json.Unmarshal(w.Body, &body) != nil {
			continue
		}
		if rest, ok := strings.CutPrefix(strings.ToLower(body.ExternalID), "/subscriptions/"); ok {
			w.PartitionKey, _, _ = strings.Cut(rest, "/")
		}
	}
	return out
}

// splitSlow splits ops into n that the lock actor makes, in slow
// requests, and the rest.
func splitSlow(ops []op, n int) (slow, quick []op) {
	for _, o := range ops {
		if len(slow) < n && o.After == "" && !o.Aro2024 {
			slow = append(slow, o)
		} else {
			quick = append(quick, o)
		}
	}
	return slow, quick
}

// createdClusters returns the creation_timestamp of every cluster a create
// of ops made: from the simulator for those still there, from deleted (read
// before their follow-up delete) for the others.
func createdClusters(sim *clustersim.Sim, ops []op, deleted map[string]time.Time) map[string]time.Time {
	out := maps.Clone(deleted)
	for _, o := range ops {
		if o.Kind != kindCreate {
			continue
		}
		if _, ok := out[o.Cluster]; ok {
			continue
		}
		if c, err := sim.Cluster(o.Cluster); err == nil {
			out[o.Cluster] = c.CreationTimestamp
		}
	}
	return out
}

// notifications groups the ARM notifications by operation (the last path
// segment of the notification URI).
func notifications(e *env) map[string][]map[string]any {
	out := map[string][]map[string]any{}
	for _, n := range e.s.ARM.Received() {
		id := n.Path[strings.LastIndex(n.Path, "/")+1:]
		out[id] = append(out[id], n.Body)
	}
	return out
}

// notificationProblems lists the terminal operations not notified, and the
// notifications whose status is not the operation's final one.
func notificationProblems(ops []op, opItems map[string]item, notified map[string][]map[string]any) []string {
	var bad []string
	known := map[string]bool{}
	for _, o := range ops {
		known[o.ID] = true
		final := opItems[o.ID].str("status")
		if !terminal(final) {
			continue
		}
		got := notified[o.ID]
		if len(got) == 0 {
			bad = append(bad, o.ID+": never notified")
		}
		for _, n := range got {
			if n["status"] != final || n["name"] != o.ID {
				bad = append(bad, fmt.Sprintf("%s: notified %v/%v, final status %s", o.ID, n["name"], n["status"], final))
			}
			// ARM's contract: a Canceled carries an error, even where the
			// frontend wrote none.
			if e, _ := n["error"].(map[string]any); o.Kind == kindCreateCanceled && (e == nil || e["code"] != "Canceled") {
				bad = append(bad, fmt.Sprintf("%s (%s): notified with error %v", o.ID, o.Kind, n["error"]))
			}
		}
	}
	for id := range notified {
		if !known[id] {
			bad = append(bad, "notification for unknown operation "+id)
		}
	}
	slices.Sort(bad)
	return bad
}

// writeLogProblems checks the proxy's write log: every Operations and
// Resources write carries an opstatus owner, but the upserts of the lock
// actor's requests and the budget ledger's writes (they hold no lock), no
// operation item is deleted, and the only Resources deletes are of items a
// finished delete removes.
func writeLogProblems(ops []op, writes []faultproxy.Write) []string {
	removable := map[string]bool{}
	for _, o := range ops {
		for _, it := range o.Items {
			if it.Removed {
				removable[it.ID] = true
			}
		}
	}
	var bad []string
	for _, w := range writes {
		if w.Container == frontend.LocksContainer {
			continue
		}
		// The budget ledger's creates and replaces belong to no lock.
		ledger := w.Container == frontend.LeasesContainer && w.ItemID == ledgerItemID && w.Kind != faultproxy.KindDelete
		frontendRequest := w.Owner == frontendOwner && w.Kind == faultproxy.KindUpsert
		if !ledger && !frontendRequest && !strings.HasPrefix(w.Owner, "opstatus/") {
			bad = append(bad, fmt.Sprintf("%s %s/%s by %q (User-Agent %q)", w.Kind, w.Container, w.ItemID, w.Owner, w.UserAgent))
		}
		if w.Kind == faultproxy.KindDelete && (w.Container != frontend.ResourcesContainer || !removable[w.ItemID]) {
			bad = append(bad, fmt.Sprintf("unexpected delete of %s/%s", w.Container, w.ItemID))
		}
	}
	return bad
}

func sortedCopy(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
