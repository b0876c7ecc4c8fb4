package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/faultproxy"
	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/internal/lock"
	"github.com/opstatus/opstatus/internal/testenv"
)

// slowRequests delays the requests of one kind to one container of one
// subscription (for Locks, the lock item) and counts them.
func slowRequests(p *faultproxy.Proxy, container, kind, sub string, d time.Duration) (count *atomic.Int64, remove func()) {
	count = &atomic.Int64{}
	remove = p.Delay(func(r faultproxy.Request) bool {
		if r.Container == container && r.Kind == kind && strings.EqualFold(r.PartitionKey, sub) {
			count.Add(1)
			return true
		}
		return false
	}, d)
	return count, remove
}

// isData reports whether w is a write to a subscription's Operations or
// Resources items.
func isData(w faultproxy.Write, sub string) bool {
	return w.Container != frontend.LocksContainer && strings.EqualFold(w.PartitionKey, sub)
}

// writesOutsideLease returns sub's data writes that were not forwarded
// while their writer certainly held the lock: no write may follow the loss
// of a lease, whatever the writer believes.
func writesOutsideLease(writes []faultproxy.Write, leases []faultproxy.Lease, sub string) []string {
	var bad []string
	for _, w := range writes {
		if !isData(w, sub) {
			continue
		}
		held := false
		lease := "no lease"
		for _, l := range leases {
			if l.Owner != w.Owner || !strings.EqualFold(l.Subscription, sub) {
				continue
			}
			lease = fmt.Sprintf("its lease certainly held from %s to %s", l.CertainFrom.Format(time.StampMilli), l.CertainUntil.Format(time.StampMilli))
			if !w.Start.Before(l.CertainFrom) && !w.Start.After(l.CertainUntil) {
				held = true
			}
		}
		if !held {
			bad = append(bad, fmt.Sprintf("%s %s/%s by %s forwarded at %s, %s", w.Kind, w.Container, w.ItemID, w.Owner,
				w.Start.Format(time.StampMilli), lease))
		}
	}
	return bad
}

// writesPastDeadline returns sub's data writes forwarded later than lease
// after their writer's last lock write (create or renewal) was forwarded:
// internal/lock cancels the work under a lease that was not renewed by
// then, so no write may follow. slack covers a request that was on its way
// when the work was canceled.
func writesPastDeadline(writes []faultproxy.Write, sub string, lease, slack time.Duration) []string {
	var bad []string
	for _, w := range writes {
		if !isData(w, sub) {
			continue
		}
		var last time.Time
		for _, l := range writes {
			if l.Container == frontend.LocksContainer && strings.EqualFold(l.ItemID, sub) && l.Kind != faultproxy.KindDelete &&
				faultproxy.DefaultOwner(l) == w.Owner && !l.Start.After(w.Start) && l.Start.After(last) {
				last = l.Start
			}
		}
		if last.IsZero() {
			bad = append(bad, fmt.Sprintf("%s %s/%s by %s: no lock write before it", w.Kind, w.Container, w.ItemID, w.Owner))
			continue
		}
		if late := w.Start.Sub(last.Add(lease)); late > slack {
			bad = append(bad, fmt.Sprintf("%s %s/%s by %s forwarded %s after its last lock write, %s past the end of its lease",
				w.Kind, w.Container, w.ItemID, w.Owner, w.Start.Sub(last).Round(time.Millisecond), late.Round(time.Millisecond)))
		}
	}
	return bad
}

// opstatusLeases returns sub's leases held by opstatus, in order.
func opstatusLeases(leases []faultproxy.Lease, sub string) []faultproxy.Lease {
	var out []faultproxy.Lease
	for _, l := range leases {
		if strings.EqualFold(l.Subscription, sub) && strings.HasPrefix(l.Owner, "opstatus/") {
			out = append(out, l)
		}
	}
	return out
}

// logLines returns the lines of the handler log that hold every one of
// the given strings.
func logLines(log string, all ...string) []string {
	var out []string
	for line := range strings.Lines(log) {
		ok := true
		for _, s := range all {
			if !strings.Contains(line, s) {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, line)
		}
	}
	return out
}

// waitStatus waits until every operation in ops has status want.
func waitStatus(t *testing.T, e *env, ops []op, want string, timeout time.Duration) {
	t.Helper()
	ctx := context.Background()
	var last map[string]item
	ok := testenv.WaitFor(ctx, timeout, 500*time.Millisecond, func() bool {
		items, err := e.db.operations(ctx)
		if err != nil {
			return false
		}
		last = items
		for _, o := range ops {
			if items[o.ID].str("status") != want {
				return false
			}
		}
		return true
	})
	if !ok {
		for _, o := range ops {
			t.Logf("%s: status %q", o.ID, last[o.ID].str("status"))
		}
	}
	require.True(t, ok, "operations reach %s within %s", want, timeout)
}

// TestLockLossAndExpiry drives the subscription lock through the real
// handler: a renewal that is delayed past the TTL, and one that fails,
// cancel the work under the lock with no write after the loss; a frontend
// holder that dies, and a handler killed while it holds the lock, free the
// lock after its TTL, and the work resumes.
// lostLease is a "subscription lock not renewed in time" line of the
// handler log: the moment the handler canceled the work under owner's lease.
type lostLease struct {
	owner    string
	canceled time.Time
}

// lostLeases returns sub's lost leases from the handler log.
func lostLeases(t *testing.T, log, sub string) []lostLease {
	t.Helper()
	var out []lostLease
	for _, line := range logLines(log, "subscription lock not renewed in time", strings.ToLower(sub)) {
		var rec struct {
			Time  time.Time `json:"time"`
			Owner string    `json:"lock_owner"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &rec), line)
		out = append(out, lostLease{owner: rec.Owner, canceled: rec.Time})
	}
	return out
}

// cancelDelays returns, for each lost lease, how long after its lock item
// was created (forwarded by the proxy) the handler canceled the work.
func cancelDelays(lost []lostLease, leases []faultproxy.Lease) []time.Duration {
	var out []time.Duration
	for _, l := range lost {
		for _, lease := range leases {
			if lease.Owner == l.owner {
				out = append(out, l.canceled.Sub(lease.PossibleFrom).Round(10*time.Millisecond))
			}
		}
	}
	slices.Sort(out)
	return out
}

// TestLockLossAndExpiry drives the subscription lock through the real
// handler. A renewal that is delayed past the TTL, and one that fails,
// cancel the work under the lock before the lease runs out: a write held
// by the proxy until after the TTL is never forwarded. A frontend holder
// that dies, and a handler killed while it holds the lock, free the lock
// after its TTL, and the work resumes.
func TestLockLossAndExpiry(t *testing.T) {
	// It runs after TestChaos (not parallel), alongside the other short one.
	t.Parallel()
	testenv.NeedsServers(t)
	ctx := context.Background()
	lockTTL := 5 * time.Second
	lease := lock.Lease(lockTTL)    // internal/lock's lease of one lock write
	slack := 100 * time.Millisecond // a write on its way when the work is canceled
	e := startEnv(t, envOptions{lockTTL: lockTTL, seed: seed(t)})
	subs := subscriptions(4, "lock")
	subDelayed, subFailing, subFrontend, subKilled := subs[0], subs[1], subs[2], subs[3]
	fe := e.proxiedFrontend()

	// Phase 1, three subscriptions at once. Renewals of subDelayed's lock
	// are held (never forwarded), those of subFailing answer 503. In both,
	// the operation write is held by the proxy until past the lease (but
	// before the TTL): the work under the lease is canceled while it
	// waits, so it must never be forwarded.
	writeDelay := (lease + lockTTL) / 2
	delayedRenewals, unDelayRenewals := slowRequests(e.proxy, frontend.LocksContainer, faultproxy.KindReplace, subDelayed, time.Minute)
	slowDelayed, unSlowDelayed := slowRequests(e.proxy, frontend.OperationsContainer, faultproxy.KindReplace, subDelayed, writeDelay)
	slowFailing, unSlowFailing := slowRequests(e.proxy, frontend.OperationsContainer, faultproxy.KindReplace, subFailing, writeDelay)
	var failedRenewals atomic.Int64
	e.proxy.SetFaults(faultproxy.Faults{Rate503: 1, Match: func(r faultproxy.Request) bool {
		if r.Container == frontend.LocksContainer && r.Kind == faultproxy.KindReplace && strings.EqualFold(r.PartitionKey, subFailing) {
			failedRenewals.Add(1)
			return true
		}
		return false
	}})
	// The frontend takes subFrontend's lock and keeps it until opstatus
	// has found it taken, then dies: no more renewals, no release.
	var osAttempts atomic.Int64
	removeCount := e.proxy.Delay(func(r faultproxy.Request) bool {
		if r.Container == frontend.LocksContainer && r.Kind == faultproxy.KindCreate && strings.EqualFold(r.ItemID, subFrontend) &&
			strings.HasPrefix(r.Header.Get(faultproxy.HeaderOwner), "opstatus/") {
			osAttempts.Add(1)
		}
		return false
	}, 0)
	defer removeCount()
	feCtx := database.WithOwner(ctx, frontendOwner)
	feLock, ok, err := fe.TryLock(feCtx, subFrontend, frontendOwner)
	require.NoError(t, err)
	require.True(t, ok)
	frontendDied := make(chan time.Time, 1)
	go func() {
		// Renew as the frontend does until opstatus has tried (or for
		// long enough), then die.
		until := time.Now().Add(3 * scanInterval)
		for osAttempts.Load() == 0 && time.Now().Before(until) {
			time.Sleep(lockTTL / 3)
			if next, err := fe.Renew(feCtx, feLock); err == nil {
				feLock = next
			}
		}
		frontendDied <- time.Now()
	}()

	lossOps := []op{installingOp(subDelayed, "delayed-1"), installingOp(subDelayed, "delayed-2"),
		installingOp(subFailing, "failing-1"), installingOp(subFailing, "failing-2")}
	frontendOps := []op{installingOp(subFrontend, "frontend-1")}
	require.NoError(t, seedOps(ctx, e, lossOps))
	// The frontend's request, under the lock it then keeps until it dies.
	for _, o := range frontendOps {
		require.NoError(t, seedBefore(ctx, e, o))
		require.NoError(t, writeRequest(feCtx, e.s.Frontend, o, e.s.ARMURL, nil))
	}

	// Each poll of a loss operation is one trial: wait for several losses
	// in both subscriptions, or for an operation write that got through.
	written := func() bool {
		items, err := e.db.operations(ctx)
		if err != nil {
			return false
		}
		for _, o := range lossOps {
			if items[o.ID].str("status") != o.Start {
				return true
			}
		}
		return false
	}
	testenv.WaitFor(ctx, 4*scanInterval, 250*time.Millisecond, func() bool {
		log := e.handlerLog()
		return written() || len(lostLeases(t, log, subDelayed)) >= 3 && len(lostLeases(t, log, subFailing)) >= 3
	})
	writes := e.proxy.Writes()
	leases := faultproxy.Leases(writes, lockTTL, nil)
	log := e.handlerLog()
	lostDelayed, lostFailing := lostLeases(t, log, subDelayed), lostLeases(t, log, subFailing)
	delays := cancelDelays(slices.Concat(lostDelayed, lostFailing), leases)
	t.Logf("phase 1: %d + %d leases lost; work canceled after %v (TTL %s, lease %s); renewals delayed %d, failed %d; operation writes held %d + %d",
		len(lostDelayed), len(lostFailing), delays, lockTTL, lease, delayedRenewals.Load(), failedRenewals.Load(), slowDelayed.Load(), slowFailing.Load())
	for _, sub := range []string{subDelayed, subFailing} {
		require.Empty(t, writesPastDeadline(writes, sub, lease, slack),
			"subscription %s: no write is forwarded once the lease was not renewed in time (work canceled after %v)", sub, delays)
		require.Empty(t, writesOutsideLease(writes, leases, sub),
			"subscription %s: no write is forwarded after its writer's lease ran out (work canceled after %v)", sub, delays)
	}
	require.Empty(t, faultproxy.LockViolations(writes, lockTTL, nil))
	require.False(t, written(), "no operation write landed while the leases were being lost")
	require.NotEmpty(t, lostDelayed, "delayed renewals lose the lease")
	require.NotEmpty(t, lostFailing, "failing renewals lose the lease")
	require.NotEmpty(t, logLines(log, "renewing the subscription lock failed", strings.ToLower(subFailing)),
		"a failed renewal is retried before the lease runs out")
	require.Positive(t, e.inv.outcomes("poll")["deferred"], "a lost lease defers the operation")

	// The frontend's dead lock expired and opstatus went on.
	died := <-frontendDied
	require.Positive(t, osAttempts.Load(), "opstatus found the frontend's lock taken")
	waitStatus(t, e, frontendOps, "Provisioning", 3*scanInterval)

	// Let renewals and writes through again: the work resumes.
	unDelayRenewals()
	unSlowDelayed()
	unSlowFailing()
	e.proxy.SetFaults(faultproxy.Faults{})
	waitStatus(t, e, lossOps, "Provisioning", 3*scanInterval)

	// Phase 2: the handler dies (SIGKILL) while it holds subKilled's lock,
	// in the middle of a slow write.
	slowKilled, unSlowKilled := slowRequests(e.proxy, frontend.OperationsContainer, faultproxy.KindReplace, subKilled, time.Minute)
	killedOps := []op{installingOp(subKilled, "killed-1")}
	require.NoError(t, seedOps(ctx, e, killedOps))
	require.True(t, testenv.WaitFor(ctx, 3*scanInterval, 100*time.Millisecond, func() bool { return slowKilled.Load() > 0 }),
		"the handler reaches the slow write under the lock")
	held, err := e.db.lock(ctx, subKilled)
	require.NoError(t, err)
	require.NotNil(t, held, "the handler holds the lock during the write")
	deadOwner := held.str("owner")
	require.True(t, strings.HasPrefix(deadOwner, "opstatus/"), deadOwner)
	require.NoError(t, e.s.Host.Instances()[0].Kill())
	killedAt := time.Now()
	unSlowKilled()
	after, err := e.db.lock(ctx, subKilled)
	require.NoError(t, err)
	require.NotNil(t, after, "the dead holder's lock outlives it")
	require.Equal(t, deadOwner, after.str("owner"))
	waitStatus(t, e, killedOps, "Provisioning", 3*scanInterval)

	require.NoError(t, e.Close())
	writes = e.proxy.Writes()
	leases = faultproxy.Leases(writes, lockTTL, nil)
	require.Empty(t, faultproxy.LockViolations(writes, lockTTL, nil))
	for _, sub := range subs {
		require.Empty(t, writesPastDeadline(writes, sub, lease, slack), "subscription %s", sub)
		require.Empty(t, writesOutsideLease(writes, leases, sub), "subscription %s", sub)
	}

	// The frontend's dead lease ended by expiry (no release), and
	// opstatus's first lease on its subscription began after it.
	var feLease *faultproxy.Lease
	for i, l := range leases {
		if strings.EqualFold(l.Subscription, subFrontend) && l.Owner == frontendOwner {
			feLease = &leases[i]
		}
	}
	require.NotNil(t, feLease)
	osLeases := opstatusLeases(leases, subFrontend)
	require.NotEmpty(t, osLeases)
	require.False(t, osLeases[0].CertainFrom.Before(feLease.CertainUntil), "opstatus acquired only after the frontend's lock expired")
	frontendFreed := osLeases[0].CertainFrom.Sub(died)
	for _, w := range writes {
		require.False(t, w.Container == frontend.LocksContainer && w.Kind == faultproxy.KindDelete &&
			strings.EqualFold(w.ItemID, subFrontend) && w.Owner == frontendOwner, "the dead frontend released nothing")
	}

	// The killed handler's lease ended by expiry too; the next began after.
	var dead *faultproxy.Lease
	var next []faultproxy.Lease
	killedFreed := time.Duration(0)
	for _, l := range opstatusLeases(leases, subKilled) {
		if l.Owner == deadOwner {
			dead = &l
		} else if dead != nil {
			next = append(next, l)
		}
	}
	require.NotNil(t, dead)
	require.NotEmpty(t, next, "another owner took the lock after the dead one")
	require.False(t, next[0].CertainFrom.Before(dead.CertainUntil), "the next owner acquired only after the dead owner's lease expired")
	killedFreed = next[0].CertainFrom.Sub(killedAt)
	for _, w := range writes {
		require.False(t, w.Owner == deadOwner && isData(w, subKilled) && w.Container == frontend.OperationsContainer,
			"the killed handler's slow write never landed")
		require.False(t, w.Owner == deadOwner && w.Kind == faultproxy.KindDelete, "the killed handler released nothing")
	}

	t.Logf("lock figures: TTL %s; %d leases lost, work canceled after %v; opstatus took the lock %s after the frontend holding it died, "+
		"and %s after the handler holding it was killed",
		lockTTL, len(lostDelayed)+len(lostFailing), delays, frontendFreed.Round(100*time.Millisecond), killedFreed.Round(100*time.Millisecond))
}
