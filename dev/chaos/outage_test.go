package chaos

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/clustersim"
	"github.com/opstatus/opstatus/internal/testenv"
)

// TestClusterServiceOutage takes Cluster Service down for several scan
// intervals while operations are under way: every poll defers, nothing is
// poisoned, and once it is back every operation converges by the next scan
// after the first one that follows the recovery.
func TestClusterServiceOutage(t *testing.T) {
	// It runs after TestChaos (not parallel), alongside the other short one.
	t.Parallel()
	testenv.NeedsServers(t)
	runSeed := seed(t)
	rng := rand.New(rand.NewPCG(uint64(runSeed), 4))
	ctx := context.Background()
	e := startEnv(t, envOptions{lockTTL: 5 * time.Second, seed: runSeed})
	subs := subscriptions(4, "outage")
	// Every lifecycle ends within 20 s of seeding, before the outage ends.
	ops := withoutFollowUps(scenario(rng, subs, 40, 4*time.Second, 20*time.Second, "o"))
	seeded := time.Now()
	require.NoError(t, seedOps(ctx, e, ops))

	// Let a scan and its polls start the work, then take Cluster Service down.
	require.True(t, testenv.WaitFor(ctx, 2*scanInterval, 100*time.Millisecond, func() bool {
		return len(scansAfter(e.inv.all(), seeded)) > 0
	}))
	require.True(t, testenv.Sleep(ctx, 2*time.Second))
	outageFor := 3*scanInterval + scanInterval/2
	require.NoError(t, e.s.Sim.SetFaults(clustersim.Faults{Outage: true}))
	down := time.Now()
	before, err := e.db.operations(ctx)
	require.NoError(t, err)
	_, leftAtOutage := settled(before, ops)
	require.True(t, testenv.Sleep(ctx, outageFor))
	require.NoError(t, e.s.Sim.SetFaults(clustersim.Faults{}))
	recovered := time.Now()

	// Wait for the second scan that starts after the recovery.
	var after []invocation
	require.True(t, testenv.WaitFor(ctx, 4*scanInterval, 100*time.Millisecond, func() bool {
		after = scansAfter(e.inv.all(), recovered)
		return len(after) >= 2
	}), "two scans after the recovery")
	items, err := e.db.operations(ctx)
	require.NoError(t, err)
	resItems, err := e.db.resources(ctx)
	require.NoError(t, err)
	converged := lastTransition(items, ops).Sub(recovered)
	poisonLen, err := e.s.QueueLength(ctx, poisonQueue)
	require.NoError(t, err)

	var scansDown, deferredDown int
	for _, inv := range e.inv.all() {
		start := inv.At.Add(-inv.Duration)
		if start.Before(down) || !inv.At.Before(recovered) {
			continue
		}
		switch {
		case inv.Function == "scan":
			scansDown++
		default:
			deferredDown += inv.Outcomes["deferred"]
		}
	}
	sim := e.s.Sim.Stats()
	t.Logf("outage figures: %d operations, %d not settled when Cluster Service went down for %s; %d scans and %d deferred polls during it, "+
		"%d status calls answered 503 (outage); last status written %s after the recovery; scans after it found %d then %d pending; poll outcomes %s; poison queue %d",
		len(ops), leftAtOutage, outageFor, scansDown, deferredDown, sim.Faults[clustersim.FaultOutage],
		converged.Round(100*time.Millisecond), after[0].Pending, after[1].Pending, outcomeList(e.inv.outcomes("poll")), poisonLen)

	require.Positive(t, leftAtOutage, "operations were under way when the outage began")
	require.GreaterOrEqual(t, scansDown, 3, "the outage lasted several scan intervals")
	require.Positive(t, deferredDown, "polls during the outage deferred")
	require.Zero(t, poisonLen, "the outage poisoned nothing")
	require.Zero(t, e.s.Host.Counters().MessagesPoisoned)
	for outcome := range e.inv.outcomes("poll") {
		require.NotContains(t, outcome, "HTTP", "every poll answered 2xx")
	}
	require.Zero(t, after[1].Pending, "every operation converged (and was notified) within one scan interval after the recovery")
	require.Empty(t, checkOutcome(ops, items, resItems))
	require.Empty(t, notificationProblems(ops, items, notifications(e)))
}

// scansAfter returns the successful scans that started after t, in order.
func scansAfter(invs []invocation, t time.Time) []invocation {
	var out []invocation
	for _, inv := range invs {
		if inv.Function == "scan" && inv.Pending >= 0 && inv.At.Add(-inv.Duration).After(t) {
			out = append(out, inv)
		}
	}
	return out
}

// lastTransition returns the latest lastTransitionTime of ops.
func lastTransition(items map[string]item, ops []op) time.Time {
	var last time.Time
	for _, o := range ops {
		if ts, err := time.Parse(time.RFC3339Nano, items[o.ID].str("lastTransitionTime")); err == nil && ts.After(last) {
			last = ts
		}
	}
	return last
}
