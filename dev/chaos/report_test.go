package chaos

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/opstatus/opstatus/dev/clustersim"
	"github.com/opstatus/opstatus/dev/faultproxy"
	"github.com/opstatus/opstatus/dev/frontend"
)

// report gathers the figures of a chaos run (RELIABILITY.md records them).
type report struct {
	cfg            chaosConfig
	seed           int64
	ops            []op
	elapsed        time.Duration
	chaosFor       time.Duration
	settledInChaos bool
	env            *env
	kill           *killer
	taker          *lockTaker
	bodies         *bodyFaults
	writes         []faultproxy.Write
	leases         []faultproxy.Lease
	violations     []faultproxy.Violation
	notified       map[string][]map[string]any
	poison         []string
	progress       map[time.Duration]int
	// opItems and bills are the Operations and Billing items at the end.
	opItems, bills map[string]item
	// flex is the run's Flex Consumption side; seeded when the run began.
	flex   *flexRun
	seeded time.Time
}

// faultTotal is the number of faults injected, of every kind.
func (r *report) faultTotal() int64 {
	p := r.env.proxy.Stats()
	n := p.Throttled + p.Unavailable + p.TimedOut + p.Dropped + p.DroppedAfterForward
	sim := r.env.s.Sim.Stats()
	for _, k := range []string{clustersim.FaultError, clustersim.FaultTimeout, clustersim.FaultSpike, clustersim.FaultOutage,
		clustersim.FaultUnknownState, clustersim.FaultCredentialNoExpiration, clustersim.FaultEndlessCredentialList} {
		n += sim.Faults[k]
	}
	return n
}

// String prints the figures.
func (r *report) String() string {
	var b strings.Builder
	f := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	e := r.env

	f("chaos run %q, seed %d", r.cfg.name, r.seed)
	kinds := countKinds(r.ops)
	var parts []string
	for _, k := range sortedKeys(kinds) {
		parts = append(parts, fmt.Sprintf("%s %d", k, kinds[k]))
	}
	f("operations: %d over %d subscriptions (%s)", len(r.ops), r.cfg.subs, strings.Join(parts, ", "))
	f("final status by kind: %s", r.finalByKind())
	f("elapsed: %s from seeding to the final checks; chaos phase %s; settled under chaos: %v",
		r.elapsed.Round(time.Second), r.chaosFor.Round(time.Second), r.settledInChaos)
	var prog []string
	for _, at := range slices.Sorted(maps.Keys(r.progress)) {
		prog = append(prog, fmt.Sprintf("%s:%d", at, r.progress[at]))
	}
	f("operations not yet settled, by time since seeding: %s", strings.Join(prog, " "))

	p := e.proxy.Stats()
	f("Cosmos faults (proxy, handler's requests): %d requests, %d forwarded; 429 %d, 503 %d, timeout %d, dropped %d, dropped after forwarding %d",
		p.Requests, p.Forwarded, p.Throttled, p.Unavailable, p.TimedOut, p.Dropped, p.DroppedAfterForward)
	sim := e.s.Sim.Stats()
	var calls int64
	for _, n := range sim.Requests {
		calls += n
	}
	var statuses []string
	for _, code := range slices.Sorted(maps.Keys(sim.Statuses)) {
		statuses = append(statuses, fmt.Sprintf("%d: %d", code, sim.Statuses[code]))
	}
	f("Cluster Service faults (simulator): %d status calls; 503 %d, timeout %d, spike %d, latency %d; answers %s",
		calls, sim.Faults[clustersim.FaultError], sim.Faults[clustersim.FaultTimeout], sim.Faults[clustersim.FaultSpike],
		sim.Faults[clustersim.FaultLatency], strings.Join(statuses, ", "))
	var byPath []string
	for _, k := range sortedKeys(sim.Requests) {
		byPath = append(byPath, fmt.Sprintf("%s %d", k, sim.Requests[k]))
	}
	f("Cluster Service calls by path: %s", strings.Join(byPath, ", "))
	if r.bodies != nil {
		f("body faults: %d windows (%s in all); answers with an unknown state %d, credentials without expiration %d, endless credential list pages %d",
			r.bodies.windows.Load(), time.Duration(r.bodies.on.Load()).Round(time.Second), sim.Faults[clustersim.FaultUnknownState],
			sim.Faults[clustersim.FaultCredentialNoExpiration], sim.Faults[clustersim.FaultEndlessCredentialList])
	}
	c := e.s.Host.Counters()
	f("handler kills (SIGKILL): %d by the test, %d by the host on a function timeout; handler restarts: %d; host restarts: %d",
		r.kill.kills.Load(), c.Timeouts, c.HandlerRestarts, c.HostRestarts)
	f("frontend: %d lock holds (%s held in total), %d of them slow requests, %d renewals, %d renewal failures, %d attempts found the lock taken, %d errors",
		r.taker.holds.Load(), time.Duration(r.taker.held.Load()).Round(time.Second), r.taker.made.Load(), r.taker.renewals.Load(),
		r.taker.renewFailures.Load(), r.taker.busy.Load(), r.taker.errors.Load())
	f("host: %d scans (%s), %d polls, %d messages enqueued, %d deleted, %d retried, %d poisoned",
		c.Calls("scan"), outcomeList(e.inv.outcomes("scan")), c.Calls("poll"),
		c.MessagesEnqueued, c.MessagesDeleted, c.MessagesRetried, c.MessagesPoisoned)
	f("poll outcomes: %s", outcomeList(e.inv.outcomes("poll")))

	total, dupOps, extra := 0, 0, 0
	var dups []string
	for _, id := range sortedKeys(r.notified) {
		n := len(r.notified[id])
		total += n
		if n > 1 {
			dupOps++
			extra += n - 1
			if len(dups) < 10 {
				dups = append(dups, fmt.Sprintf("%s×%d", id, n))
			}
		}
	}
	f("notifications: %d for %d operations; %d operations notified more than once (%d duplicates) %s",
		total, len(r.notified), dupOps, extra, strings.Join(dups, " "))

	var opsW, resW, lockW, billW, undelivered int
	for _, w := range r.writes {
		switch w.Container {
		case frontend.OperationsContainer:
			opsW++
		case frontend.ResourcesContainer:
			resW++
		case frontend.LocksContainer:
			lockW++
		case frontend.BillingContainer:
			billW++
		}
		if !w.Delivered {
			undelivered++
		}
	}
	var fe, os_ int
	for _, l := range r.leases {
		if l.Owner == frontendOwner {
			fe++
		} else {
			os_++
		}
	}
	f("write log: %d writes (Operations %d, Resources %d, Locks %d, Billing %d), %d landed without the writer learning it; leases: opstatus %d, frontend %d; lock violations: %d",
		len(r.writes), opsW, resW, lockW, billW, undelivered, os_, fe, len(r.violations))
	f("billing: %s", r.billing())
	for i, v := range r.violations {
		if i == 10 {
			f("  …")
			break
		}
		f("  violation %s: %s %s/%s by %s at [%s, %s]", v.Kind, v.Write.Kind, v.Write.Container, v.Write.ItemID, v.Writer,
			v.Write.Start.Format(time.StampMilli), v.Write.End.Format(time.StampMilli))
	}
	if log, err := os.ReadFile(e.s.LogPath); err == nil {
		s := string(log)
		f("handler log: %d locks lost (not renewed in time), %d taken over, %d renewals failed and retried",
			strings.Count(s, "subscription lock not renewed in time"), strings.Count(s, "subscription lock taken over"),
			strings.Count(s, "renewing the subscription lock failed"))
	}
	f("poison queue: %d messages (%d malformed queued on purpose)", len(r.poison), len(malformed))
	if r.flex != nil {
		log, _ := os.ReadFile(e.s.LogPath)
		r.flex.report(f, e.inv.all(), string(log), r.seeded)
	}
	return b.String()
}

// finalByKind prints each kind's operations by final status.
func (r *report) finalByKind() string {
	by := map[string]map[string]int{}
	for _, o := range r.ops {
		if by[o.Kind] == nil {
			by[o.Kind] = map[string]int{}
		}
		st := r.opItems[o.ID].str("status")
		if st == "" {
			st = "missing"
		}
		by[o.Kind][st]++
	}
	var parts []string
	for _, k := range sortedKeys(by) {
		parts = append(parts, fmt.Sprintf("%s: %s", k, outcomeList(by[k])))
	}
	return strings.Join(parts, "; ")
}

// billing prints the billing figures: items open and closed, who opened
// and closed them, and where the deletionTimes fell between a delete's
// start and its Succeeded.
func (r *report) billing() string {
	byCluster := billsByCluster(r.bills)
	var open, closed, opened, closedByRun, seeded, seededClosed int
	var afterStart, beforeDone []time.Duration
	for _, o := range r.ops {
		if !o.clusterOnly() {
			continue
		}
		bs := byCluster[strings.ToLower(o.clusterKey())]
		switch {
		case o.Kind == kindCreate:
			opened += len(bs)
		case o.Kind == kindDelete && o.Billed:
			seeded++
		}
		if o.Request != "Delete" || r.opItems[o.ID].str("status") != "Succeeded" {
			continue
		}
		for _, b := range bs {
			if b.open || !b.deleted.After(billedSince) {
				continue
			}
			closedByRun++
			if o.Kind == kindDelete {
				seededClosed++
			}
			afterStart = append(afterStart, b.deleted.Sub(opTime(r.opItems[o.ID], "startTime")))
			beforeDone = append(beforeDone, opTime(r.opItems[o.ID], "lastTransitionTime").Sub(b.deleted))
		}
	}
	for _, bs := range byCluster {
		for _, b := range bs {
			if b.open {
				open++
			} else {
				closed++
			}
		}
	}
	return fmt.Sprintf("%d items over %d clusters, %d open, %d closed; %d opened by cluster creates; %d closed by finished deletes "+
		"(%d of the %d billed before the run); deletionTime after the delete's start %s, before its Succeeded %s",
		len(r.bills), len(byCluster), open, closed, opened, closedByRun, seededClosed, seeded, spread(afterStart), spread(beforeDone))
}

// spread prints the least, median and greatest of ds.
func spread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "(none)"
	}
	slices.Sort(ds)
	return fmt.Sprintf("min %s median %s max %s", ds[0].Round(time.Millisecond), ds[len(ds)/2].Round(time.Millisecond),
		ds[len(ds)-1].Round(time.Millisecond))
}

// outcomeList prints counts by outcome.
func outcomeList(m map[string]int) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}
