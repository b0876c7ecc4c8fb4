package main

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Targets of issue #16 on this machine.
const (
	targetN1k          = 1000
	targetN10k         = 10000
	targetN50k         = 50000
	targetInstances    = 4 // the pass and freshness at N = 10,000 are judged with four instances
	targetSpeedup      = 30.0
	targetCPUPerOp     = 500 * time.Microsecond
	targetRSS          = 40 << 20
	targetColdStart    = 50 * time.Millisecond
	targetScan10k      = 2 * time.Second
	targetScan50k      = 10 * time.Second
	targetPass10k      = scanInterval
	targetFreshness10k = 15 * time.Second
	targetLockHold     = 100 * time.Millisecond
	targetPass50k      = 2 * scanInterval
)

// host returns the opstatus run with n and instances, or of its repeats
// the one with the median pass.
func (r *results) host(n, instances int) (hostResult, bool) {
	runs := r.runs(n, instances)
	if len(runs) == 0 {
		return hostResult{}, false
	}
	slices.SortStableFunc(runs, func(a, b hostResult) int { return cmp.Compare(a.Pass, b.Pass) })
	return runs[(len(runs)-1)/2], true
}

// runs returns every opstatus run with n and instances, in run order.
func (r *results) runs(n, instances int) []hostResult {
	var out []hostResult
	for _, h := range r.Opstatus {
		if h.N == n && h.Instances == instances {
			out = append(out, h)
		}
	}
	return out
}

// atN returns every opstatus run with n operations.
func (r *results) atN(n int) []hostResult {
	var out []hostResult
	for _, h := range r.Opstatus {
		if h.N == n {
			out = append(out, h)
		}
	}
	return out
}

// judged returns the run the N = 10,000 targets are judged on: four
// instances, or the most that ran.
func (r *results) judged(n int) (hostResult, bool) {
	if h, ok := r.host(n, targetInstances); ok {
		return h, true
	}
	_, instances := r.dims()
	for _, k := range slices.Backward(instances) {
		if h, ok := r.host(n, k); ok {
			return h, true
		}
	}
	return hostResult{}, false
}

// spread is the median, least and largest of a figure over runs.
type spread struct{ Median, Min, Max float64 }

func spreadOf(runs []hostResult, figure func(hostResult) float64) spread {
	var v []float64
	for _, h := range runs {
		v = append(v, figure(h))
	}
	slices.Sort(v)
	return spread{Median: v[(len(v)-1)/2], Min: v[0], Max: v[len(v)-1]}
}

// The figures of a run that the targets judge, for spreadOf.
func freshP99s(h hostResult) float64 { return h.Freshness.P99.Seconds() }
func cpuMs(h hostResult) float64     { return float64(h.cpuPerOp()) / float64(time.Millisecond) }
func speedupOver(b baselineResult) func(hostResult) float64 {
	return func(h hostResult) float64 { return ratio(b.Pass, h.Pass) }
}

// of says how many runs a figure comes from, and its range, when more
// than one.
func (s spread) of(runs int, format string) string {
	if runs < 2 {
		return ""
	}
	return fmt.Sprintf(" (median of %d runs; "+format+" to "+format+")", runs, s.Min, s.Max)
}

// base returns the serial baseline at n: the run at n, or one extrapolated
// from the run with the most operations.
func (r *results) base(n int) (baselineResult, bool) {
	var from *baselineResult
	for i := range r.Baseline {
		b := &r.Baseline[i]
		if b.N == n {
			return *b, true
		}
		if from == nil || b.N > from.N {
			from = b
		}
	}
	if from == nil {
		return baselineResult{}, false
	}
	return from.extrapolate(n), true
}

// ns and instances seen in the results, sorted.
func (r *results) dims() (ns, instances []int) {
	for _, h := range r.Opstatus {
		ns, instances = append(ns, h.N), append(instances, h.Instances)
	}
	for _, b := range r.Baseline {
		ns = append(ns, b.N)
	}
	slices.Sort(ns)
	slices.Sort(instances)
	return slices.Compact(ns), slices.Compact(instances)
}

// scansAt returns the durations of every scan under the host at n, and
// the messages each wrote.
func (r *results) scansAt(n int) ([]time.Duration, []int64) {
	var d []time.Duration
	var m []int64
	for _, h := range r.atN(n) {
		d = append(d, h.Scans...)
		m = append(m, h.Messages...)
	}
	return d, m
}

// scanAt is the median scan under the host at n, queue writes included.
func (r *results) scanAt(n int) (time.Duration, bool) {
	d, _ := r.scansAt(n)
	return median(d), len(d) > 0
}

// messagesAt is the median number of queue messages a scan wrote at n.
func (r *results) messagesAt(n int) (int64, bool) {
	_, m := r.scansAt(n)
	return hostResult{Messages: m}.messagesPerScan(), len(m) > 0
}

// worstLock returns the largest per-run p99 of opstatus's lock holds and
// of the frontend stand-in's waits over the runs with a changed window,
// and the share of the stand-in's attempts that met a held lock.
func (r *results) worstLock() (hold, wait time.Duration, busy float64, ok bool) {
	attempts, busyN := 0, 0
	for _, h := range r.Opstatus {
		if !h.Flipped || h.LockHolds.N == 0 {
			continue
		}
		ok = true
		hold, wait = max(hold, h.LockHolds.P99), max(wait, h.Frontend.Waits.P99)
		attempts += h.Frontend.Attempts
		busyN += h.Frontend.Busy
	}
	if attempts > 0 {
		busy = float64(busyN) / float64(attempts)
	}
	return hold, wait, busy, ok
}

func ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return math.NaN()
	}
	return float64(a) / float64(b)
}

func f2(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }
func f3(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func (r *results) add(name, value string) { r.Headline = append(r.Headline, headline{name, value}) }

// report prints the side-by-side tables, the ratios, the targets and the
// headline name=value lines.
func (r *results) report(w io.Writer) {
	ns, instances := r.dims()
	fmt.Fprintf(w, "\n== Summary (Cluster Service %s per call, Storage %s per queue request; the serial baseline is extrapolated linearly where marked *) ==\n\n",
		r.Latency, r.StorageLatency)

	fmt.Fprintf(w, "%-7s %-12s %22s %8s %8s %6s %27s %8s %15s %17s\n", "N", "design", "pass", "ops/s", "scan", "msgs", "freshness p50 / p99 / max", "upd/s", "lock hold p99", "frontend wait p99")
	for _, n := range ns {
		if b, ok := r.base(n); ok {
			name := "baseline"
			if b.Extrapolated {
				name += "*"
			}
			fmt.Fprintf(w, "%-7d %-12s %22s %8.1f %8s %6s %27s %8.1f %15s %17s\n", n, name, secs(b.Pass), rate(n, b.Pass),
				"—", "—", b.Freshness.triple(), rate(n, b.ChangedPass), "—", "—")
		}
		for _, k := range instances {
			h, ok := r.host(n, k)
			if !ok {
				continue
			}
			fr, upd, hold, wait := "not measured", "—", "—", "—"
			if h.Flipped {
				fr, upd = h.Freshness.triple(), fmt.Sprintf("%.1f", rate(h.N-h.Missing, h.UpdateSpan))
				hold, wait = ms(h.LockHolds.P99), ms(h.Frontend.Waits.P99)
			}
			fmt.Fprintf(w, "%-7d %-12s %22s %8.1f %8s %6d %27s %8s %15s %17s\n", n, r.design(k), h.passText(), rate(n, h.Pass),
				secs(h.scanHost()), h.messagesPerScan(), fr, upd, hold, wait)
		}
	}
	fmt.Fprintf(w, "(scan: median under the host, queue writes included; msgs: queue messages per scan)\n")

	fmt.Fprintf(w, "\nrequests per operation per pass (opstatus: the scan's query pages included)\n")
	fmt.Fprintf(w, "%-7s %-12s %-10s %6s %7s %8s %7s %6s %8s\n", "N", "design", "status", "CS", "reads", "queries", "writes", "lock", "Cosmos")
	row := func(n int, design, status string, p perOp) {
		fmt.Fprintf(w, "%-7d %-12s %-10s %6.2f %7.2f %8.3f %7.2f %6.2f %8.2f\n", n, design, status, p.CS, p.Reads, p.Queries, p.Writes, p.LockOps, p.Cosmos)
	}
	for _, n := range ns {
		if b, ok := r.base(n); ok && !b.Extrapolated {
			row(n, "baseline", "unchanged", b.unchangedPerOp())
			row(n, "baseline", "changed", b.changedPerOp())
		}
		for _, k := range instances {
			if h, ok := r.host(n, k); ok {
				row(n, r.design(k), "unchanged", h.Unchanged.per(h.UnchangedOps))
				if h.Flipped {
					row(n, r.design(k), "changed", h.Changed.per(h.Updated))
				}
			}
		}
	}

	fmt.Fprintf(w, "\nhandler processes (opstatus), CPU per unchanged operation by process\n")
	fmt.Fprintf(w, "%-7s %-12s %10s %12s %12s %12s %12s %18s\n", "N", "design", "peak RSS", "handler", "Cosmos srv", "Azurite", "harness", "handler per update")
	for _, n := range ns {
		for _, k := range instances {
			h, ok := r.host(n, k)
			if !ok {
				continue
			}
			upd := "—"
			if h.Flipped && h.Updated > 0 {
				upd = ms(h.ChangedCPU["handler"] / time.Duration(h.Updated))
			}
			fmt.Fprintf(w, "%-7d %-12s %10s %12s %12s %12s %12s %18s\n", n, r.design(k), mib(h.HWM), ms(h.cpuPerOp()),
				ms(per1000(h.NodeCPU["cosmos"], h.UnchangedOps)/1000), ms(per1000(h.NodeCPU["azurite"], h.UnchangedOps)/1000),
				ms(per1000(h.SelfCPU, h.UnchangedOps)/1000), upd)
		}
	}
	fmt.Fprintf(w, "(the harness is the Cluster Service simulator and the host emulator)\n")
	if len(r.Cold) > 0 {
		fmt.Fprintf(w, "cold start (exec → first 2xx on GET /): median %s of %d runs\n", ms(median(r.Cold)), len(r.Cold))
	}
	fmt.Fprintf(w, "binary size: %s (%d bytes)\n", mib(r.BinaryBytes), r.BinaryBytes)
	for _, s := range r.Scans {
		fmt.Fprintf(w, "scan N=%d, standalone (the listing alone): %s median of %d · %d messages · handler peak RSS %s\n",
			s.N, ms(median(s.Durations)), len(s.Durations), s.Messages, mib(s.HWM))
	}

	fmt.Fprintf(w, "\nratios opstatus / baseline\n")
	for _, n := range ns {
		b, ok := r.base(n)
		if !ok {
			continue
		}
		for _, k := range instances {
			h, ok := r.host(n, k)
			if !ok {
				continue
			}
			star := ""
			if b.Extrapolated {
				star = " (baseline extrapolated)"
			}
			fresh := ""
			if h.Flipped {
				fresh = " · freshness p99 " + f3(ratio(h.Freshness.P99, b.Freshness.P99))
			}
			design := strings.TrimPrefix(r.design(k), "opstatus ")
			if h.PassAtLeast {
				fmt.Fprintf(w, "N=%-6d %s: pass not complete (%d of %d operations checked in %s)%s\n", n, design, h.Checked, h.N, secs(h.Pass), star)
				continue
			}
			fmt.Fprintf(w, "N=%-6d %s: pass time %s (speed-up %.1f×)%s%s\n", n, design, f3(ratio(h.Pass, b.Pass)), ratio(b.Pass, h.Pass), fresh, star)
		}
	}

	r.costs(w)

	r.headlines()
	r.targets()
	fmt.Fprintf(w, "\ntargets\n")
	for _, t := range r.Targets {
		verdict := "MISSED"
		switch {
		case !t.Known:
			verdict = "not measured"
		case t.Met:
			verdict = "met"
		}
		fmt.Fprintf(w, "  [%s] %s: %s\n", verdict, t.What, t.Reached)
	}
	if !r.Finished.IsZero() {
		fmt.Fprintf(w, "\nmachine load average at start %s, at end %s; %s in all\n", r.Machine.LoadStart, r.Machine.LoadEnd, secs(r.Finished.Sub(r.Started)))
	}
	fmt.Fprintln(w)
	for _, h := range r.Headline {
		fmt.Fprintf(w, "%s=%s\n", h.Name, h.Value)
	}
}

func (r *results) headlines() {
	r.Headline = nil
	ns, instances := r.dims()
	for _, n := range ns {
		if b, ok := r.base(n); ok {
			r.add(fmt.Sprintf("pass_s_baseline_n%d", n), f2(b.Pass.Seconds()))
			r.add(fmt.Sprintf("freshness_p99_s_baseline_n%d", n), f2(b.Freshness.P99.Seconds()))
		}
		for _, k := range instances {
			if h, ok := r.host(n, k); ok {
				r.add(fmt.Sprintf("pass_s_opstatus_x%d_n%d", k, n), f2(h.Pass.Seconds()))
				if h.FromIdle {
					r.add(fmt.Sprintf("pass_from_idle_s_x%d_n%d", k, n), f2(h.Pass.Seconds()))
				}
				if h.PassAtLeast {
					r.add(fmt.Sprintf("pass_checked_opstatus_x%d_n%d", k, n), strconv.Itoa(h.Checked))
				}
				if h.Flipped {
					r.add(fmt.Sprintf("freshness_p99_s_opstatus_x%d_n%d", k, n), f2(h.Freshness.P99.Seconds()))
					if h.Missing > 0 {
						r.add(fmt.Sprintf("freshness_not_succeeded_opstatus_x%d_n%d", k, n), strconv.Itoa(h.Missing))
					}
				}
			}
		}
	}
	for _, n := range ns {
		b, okb := r.base(n)
		for _, k := range instances {
			h, ok := r.host(n, k)
			if !ok || !okb || h.PassAtLeast {
				// A pass cut short has no speed-up, only a bound.
				continue
			}
			name := fmt.Sprintf("pass_speedup_n%d", n)
			if k != 1 {
				name = fmt.Sprintf("pass_speedup_x%d_n%d", k, n)
			}
			r.add(name, f2(ratio(b.Pass, h.Pass)))
		}
	}
	for _, n := range ns {
		if d, ok := r.scanAt(n); ok {
			r.add(fmt.Sprintf("scan_s_n%d", n), f2(d.Seconds()))
		}
		if m, ok := r.messagesAt(n); ok {
			r.add(fmt.Sprintf("queue_messages_per_scan_n%d", n), strconv.FormatInt(m, 10))
		}
	}
	if h, ok := r.judged(targetN10k); ok {
		r.add("pass_s_n10000", f2(h.Pass.Seconds()))
		if h.Flipped {
			r.add("freshness_p99_s_n10000", f2(h.Freshness.P99.Seconds()))
		}
	}
	if hold, wait, busy, ok := r.worstLock(); ok {
		r.add("lock_hold_p99_ms", f2(msf(hold)))
		r.add("frontend_lock_wait_p99_ms", f2(msf(wait)))
		r.add("frontend_lock_busy_pct", f2(100*busy))
	}
	k1 := r.fewest(targetN1k)
	if h, ok := r.host(targetN1k, k1); ok {
		runs := r.runs(targetN1k, k1)
		cp := spreadOf(runs, cpuMs)
		if h.Flipped {
			fp := spreadOf(runs, freshP99s)
			r.add("freshness_p99_s_n1000", f2(fp.Median))
			if len(runs) > 1 {
				r.add("freshness_p99_s_n1000_min", f2(fp.Min))
				r.add("freshness_p99_s_n1000_max", f2(fp.Max))
			}
		}
		r.add("cpu_ms_per_unchanged_poll", f3(cp.Median))
		if h.Flipped && h.Updated > 0 {
			// Every write of an update included: the handlers' CPU time over
			// the changed window, per operation updated.
			r.add("cpu_ms_per_changed_op", f3(msf(h.ChangedCPU["handler"]/time.Duration(h.Updated))))
		}
		if h.InstanceMemoryMB > 0 {
			r.add("instance_memory_mb", strconv.Itoa(h.InstanceMemoryMB))
		}
		if len(runs) > 1 {
			r.add("runs_n1000", strconv.Itoa(len(runs)))
			if b, ok := r.base(targetN1k); ok {
				sp := spreadOf(runs, speedupOver(b))
				r.add("pass_speedup_n1000_min", f2(sp.Min))
				r.add("pass_speedup_n1000_max", f2(sp.Max))
			}
			r.add("cpu_ms_per_unchanged_poll_min", f3(cp.Min))
			r.add("cpu_ms_per_unchanged_poll_max", f3(cp.Max))
		}
		u := h.Unchanged.per(h.UnchangedOps)
		r.add("unchanged_cs_calls_per_poll", f3(u.CS))
		r.add("unchanged_cosmos_reads_per_poll", f3(u.Reads))
		r.add("unchanged_cosmos_queries_per_poll", f3(u.Queries))
		r.add("unchanged_writes_per_poll", f3(u.Writes))
		r.add("unchanged_lock_ops_per_poll", f3(u.LockOps))
	}
	if b, ok := r.base(targetN1k); ok && !b.Extrapolated {
		r.add("baseline_cosmos_per_unchanged_check", f2(b.unchangedPerOp().Cosmos))
	}
	if len(r.Cold) > 0 {
		r.add("cold_start_ms", f2(msf(median(r.Cold))))
	}
	if hwm := r.rssAt(targetN1k); hwm > 0 {
		r.add("rss_mib", f2(float64(hwm)/(1<<20)))
	}
	if hwm := r.rssAt(targetN10k); hwm > 0 {
		r.add("rss_mib_n10000", f2(float64(hwm)/(1<<20)))
	}
	r.add("binary_mib", f2(float64(r.BinaryBytes)/(1<<20)))
	for _, s := range r.Scans {
		r.add(fmt.Sprintf("scan_ms_n%d", s.N), f2(msf(median(s.Durations))))
		r.add(fmt.Sprintf("scan_hwm_mib_n%d", s.N), f2(float64(s.HWM)/(1<<20)))
	}
	r.costHeadlines()
	r.flexHeadlines()
	if c := r.PickupCold; c != nil && len(c.Arrivals) > 0 {
		p99, _ := c.p99()
		r.add("pickup_cold_p99_s", f2(p99.Seconds()))
		r.add("pickup_cold_start_delay_s", f2(c.StartDelay.Seconds()))
	}
	if p := r.Pickup; p != nil {
		r.add("pickup_p99_s", f2(p.Delays.P99.Seconds()))
		r.add("pickup_cs_calls_per_op", f3(p.callsPerOp()))
		r.add("pickup_max_cs_calls_per_op", strconv.Itoa(p.MaxCalls))
		r.add("pickup_unchecked", strconv.Itoa(p.Unchecked))
	}
	if bl := r.Backlog; bl != nil {
		r.add("backlog_max_cs_calls_per_op_per_interval", strconv.Itoa(bl.MaxCalls))
		r.add("backlog_queue_max", strconv.Itoa(bl.QueueMax))
		r.add("backlog_queue_growth_per_s", f2(bl.Growth))
	}
}

// rssAt is the largest handler VmHWM over the opstatus runs with n operations.
func (r *results) rssAt(n int) int64 {
	var hwm int64
	for _, h := range r.atN(n) {
		hwm = max(hwm, h.HWM)
	}
	return hwm
}

func (r *results) targets() {
	r.Targets = nil
	add := func(what string, known, met bool, reached string) {
		r.Targets = append(r.Targets, target{What: what, Reached: reached, Met: met, Known: known})
	}
	notRun := func(what, why string) { add(what, false, false, why) }

	scanTarget := func(n int, limit time.Duration) {
		what := fmt.Sprintf("scan of %d pending operations under the host, queue writes included, ≤ %s", n, secs(limit))
		d, ok := r.scanAt(n)
		if !ok {
			notRun(what, fmt.Sprintf("needs opstatus at N=%d", n))
			return
		}
		scans, _ := r.scansAt(n)
		m, _ := r.messagesAt(n)
		add(what, true, d <= limit, fmt.Sprintf("median %s of %d scans (%s to %s), %d messages each",
			secs(d), len(scans), secs(slices.Min(scans)), secs(slices.Max(scans)), m))
	}
	scanTarget(targetN10k, targetScan10k)

	if h, ok := r.judged(targetN10k); ok {
		add(fmt.Sprintf("every one of %d operations checked within one scan interval with %d instances (pass ≤ %s)", targetN10k, targetInstances, secs(targetPass10k)),
			true, !h.PassAtLeast && h.Pass <= targetPass10k, fmt.Sprintf("pass %s with %s%s", h.passText(), h.instancesText(), h.coresText(false)))
		what := fmt.Sprintf("freshness p99 at N=%d with %d instances ≤ %s", targetN10k, targetInstances, secs(targetFreshness10k))
		if h.Flipped {
			add(what, true, h.Freshness.P99 <= targetFreshness10k && h.Missing == 0,
				fmt.Sprintf("p99 %s (p50 %s, max %s; %d not Succeeded)%s", fresh(h.Freshness.P99, h.Freshness.P99AtLeast),
					secs(h.Freshness.P50), fresh(h.Freshness.Max, h.Freshness.MaxAtLeast), h.Missing, h.coresText(true)))
		} else {
			notRun(what, "no flip at this N (-flip-max)")
		}
	} else {
		notRun(fmt.Sprintf("pass and freshness at N=%d with %d instances", targetN10k, targetInstances), "needs opstatus at N=10000")
	}
	scanTarget(targetN50k, targetScan50k)
	pass50k := fmt.Sprintf("every one of %d operations checked within two scan intervals (pass ≤ %s)", targetN50k, secs(targetPass50k))
	if h, ok := r.judged(targetN50k); ok {
		add(pass50k, true, !h.PassAtLeast && h.Pass <= targetPass50k, fmt.Sprintf("pass %s with %s%s", h.passText(), h.instancesText(), h.coresText(false)))
	} else {
		notRun(pass50k, "needs opstatus at N=50000")
	}
	r.flexTargets(add, notRun)

	b, okb := r.base(targetN1k)
	k1 := r.fewest(targetN1k)
	h1, ok1 := r.host(targetN1k, k1)
	runs1 := r.runs(targetN1k, k1)
	speed := fmt.Sprintf("pass over %d operations ≥ %.0f× faster than the serial baseline", targetN1k, targetSpeedup)
	if okb && ok1 {
		sp := spreadOf(runs1, speedupOver(b))
		reached := fmt.Sprintf("%.1f× with %s (%s against %s)%s", sp.Median, h1.instancesText(), secs(h1.Pass), secs(b.Pass), sp.of(len(runs1), "%.1f×"))
		if h4, ok := r.host(targetN1k, 4); ok && k1 != 4 {
			reached += fmt.Sprintf(", %.1f× with four (%s)", ratio(b.Pass, h4.Pass), secs(h4.Pass))
		}
		add(speed, true, sp.Median >= targetSpeedup, reached)
	} else {
		notRun(speed, "needs the baseline and opstatus at N=1000")
	}
	cpuWhat := fmt.Sprintf("handler CPU ≤ %s per unchanged operation (N=%d, the fewest instances)", ms(targetCPUPerOp), targetN1k)
	costWhat := "an unchanged operation costs exactly 1 Cluster Service call, 1 point read, 0 writes, 0 lock operations"
	if ok1 {
		exact, polled := true, true
		for _, h := range runs1 {
			u := h.Unchanged.per(h.UnchangedOps)
			exact = exact && u.CS == 1 && u.Reads == 1 && u.Writes == 0 && u.LockOps == 0
			polled = polled && h.UnchangedOps > 0
		}
		cp := spreadOf(runs1, cpuMs)
		add(cpuWhat, polled, cp.Median <= msf(targetCPUPerOp), fmt.Sprintf("%.3f ms%s", cp.Median, cp.of(len(runs1), "%.3f ms")))
		u := h1.Unchanged.per(h1.UnchangedOps)
		add(costWhat, polled, exact, fmt.Sprintf("%d operations: %.3f CS calls, %.3f point reads, %.3f writes, %.3f lock ops each (and %.4f query pages: the scan's)",
			h1.UnchangedOps, u.CS, u.Reads, u.Writes, u.LockOps, u.Queries))
	} else {
		notRun(cpuWhat, "needs opstatus at N=1000")
		notRun(costWhat, "needs opstatus at N=1000")
	}
	rssWhat := fmt.Sprintf("handler RSS ≤ %s at N=%d", mib(targetRSS), targetN10k)
	if hwm := r.rssAt(targetN10k); hwm > 0 {
		add(rssWhat, true, hwm <= targetRSS, "peak "+mib(hwm)+" (the largest handler of the runs at this N)")
	} else {
		notRun(rssWhat, "needs opstatus at N=10000")
	}
	lockWhat := fmt.Sprintf("subscription lock hold p99 ≤ %s (create → delete at the Cosmos server)", ms(targetLockHold))
	if hold, wait, busy, ok := r.worstLock(); ok {
		add(lockWhat, true, hold <= targetLockHold, fmt.Sprintf("%s, the largest p99 over the runs with a flip; the frontend stand-in waited %s at p99 (largest over those runs), %.1f %% of its attempts met a held lock",
			ms(hold), ms(wait), 100*busy))
	} else {
		notRun(lockWhat, "needs an opstatus run with a flip")
	}
	if len(r.Cold) > 0 {
		c := median(r.Cold)
		add("cold start ≤ 50 ms", true, c <= targetColdStart, "median "+ms(c))
	} else {
		notRun("cold start ≤ 50 ms", "not run")
	}
	if bl := r.Backlog; bl != nil {
		limit := growthLimit(bl.messagesPerScan())
		add("backlog: at most one Cluster Service call per operation per scan interval", true, bl.MaxCalls <= 1,
			fmt.Sprintf("max %d (%d of %d operation-intervals above 1)", bl.MaxCalls, bl.Over1, bl.Pairs))
		add(fmt.Sprintf("backlog: queue length bounded (not growing by more than %.2f messages/s while Cluster Service is slow)", limit), true,
			bl.Growth <= limit,
			fmt.Sprintf("growing by %.2f messages/s over the second half of the slow phase; max %d messages (%.1f scans' worth), %d when Cluster Service recovered, %d at the end",
				bl.Growth, bl.QueueMax, float64(bl.QueueMax)/max(bl.messagesPerScan(), 1), bl.QueueAtSlowEnd, bl.QueueAtEnd))
	} else {
		notRun("backlog: at most one Cluster Service call per operation per scan interval; queue bounded", "not run")
	}
	pickupWhat := fmt.Sprintf("pickup: a new operation's first Cluster Service call ≤ %s after the frontend's write at p99", secs(targetPickupP99))
	callsWhat := fmt.Sprintf("pickup: ≤ %g Cluster Service call per new operation within its first interval", targetPickupCallsPer)
	if p := r.Pickup; p != nil {
		add(pickupWhat, true, p.Delays.P99 <= targetPickupP99 && !p.Delays.P99AtLeast,
			fmt.Sprintf("p99 %s (p50 %s, max %s) over %d arrivals at %.0f/s; %d first calls in pickup invocations, %d unchecked in their first interval",
				fresh(p.Delays.P99, p.Delays.P99AtLeast), secs(p.Delays.P50), fresh(p.Delays.Max, p.Delays.MaxAtLeast), p.Arrivals, p.Rate, p.ByPickup, p.Unchecked))
		add(callsWhat, true, p.callsPerOp() <= targetPickupCallsPer,
			fmt.Sprintf("%.3f on average, at most %d", p.callsPerOp(), p.MaxCalls))
	} else {
		notRun(pickupWhat, "not run")
		notRun(callsWhat, "not run")
	}
}
