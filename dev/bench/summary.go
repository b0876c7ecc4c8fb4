package main

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"time"
)

// Targets of issue #4 on this machine.
const (
	targetSpeedup    = 20.0
	targetFreshSlack = 2 * time.Second
	targetColdStart  = 50 * time.Millisecond
	targetRSS        = 40 << 20
	targetCPUPerPoll = time.Millisecond
	targetScan       = 2 * time.Second
	targetScanGrowth = 1 << 20 // what "does not grow with N" allows between the smallest and the largest N
	targetFreshN     = 1000
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
func cpuMs(h hostResult) float64     { return float64(h.cpuPerPoll()) / float64(time.Millisecond) }
func speedupOver(b baselineResult) func(hostResult) float64 {
	return func(h hostResult) float64 { return ratio(b.Pass, h.Pass) }
}

// messagesPerReceive says how the host received a run's messages: its
// median over the runs shows the way most runs fell.
func messagesPerReceive(h hostResult) float64 {
	if h.UnchangedReceives == 0 {
		return 0
	}
	return float64(h.UnchangedReceived) / float64(h.UnchangedReceives)
}

// of says how many runs a figure comes from, and its range, when more
// than one.
func (s spread) of(runs int, format string) string {
	if runs < 2 {
		return ""
	}
	return fmt.Sprintf(" (median of %d runs; "+format+" to "+format+")", runs, s.Min, s.Max)
}

func (r *results) ideal(n int) (hostResult, bool) {
	for _, h := range r.Ideal {
		if h.N == n {
			return h, true
		}
	}
	return hostResult{}, false
}

func (r *results) base(n int) (baselineResult, bool) {
	for _, b := range r.Baseline {
		if b.N == n {
			return b, true
		}
	}
	return baselineResult{}, false
}

// ns and instances seen in the results, sorted.
func (r *results) dims() (ns, instances []int) {
	for _, h := range r.Opstatus {
		ns, instances = append(ns, h.N), append(instances, h.Instances)
	}
	for _, b := range r.Baseline {
		ns = append(ns, b.N)
	}
	for _, h := range r.Ideal {
		ns = append(ns, h.N)
	}
	slices.Sort(ns)
	slices.Sort(instances)
	return slices.Compact(ns), slices.Compact(instances)
}

func ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return math.NaN()
	}
	return float64(a) / float64(b)
}

func f2(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }
func f3(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }

func (r *results) add(name, value string) { r.Headline = append(r.Headline, headline{name, value}) }

// report prints the side-by-side tables, the ratios, the targets and the
// headline name=value lines.
func (r *results) report(w io.Writer) {
	ns, instances := r.dims()
	fmt.Fprintf(w, "\n== Summary (Cluster Service latency %s; the serial baseline above N=%d is extrapolated, marked *) ==\n\n", r.Latency, r.BaselineFull)

	fmt.Fprintf(w, "%-8s %-14s %10s %10s %28s %10s\n", "N", "design", "pass", "polls/s", "freshness p50 / p99 / max", "updates/s")
	for _, n := range ns {
		if b, ok := r.base(n); ok {
			star := ""
			if b.Extrapolated {
				star = "*"
			}
			fmt.Fprintf(w, "%-8d %-14s %10s %10.1f %28s %10.1f\n", n, "baseline"+star, secs(b.Pass), rate(n, b.Pass),
				b.Freshness.triple(),
				rate(n, b.ChangedPass))
		}
		for _, k := range instances {
			if h, ok := r.host(n, k); ok {
				fmt.Fprintf(w, "%-8d %-14s %10s %10.1f %28s %10.1f\n", n, fmt.Sprintf("opstatus ×%d", k), fresh(h.Pass, h.PassAtLeast), rate(n, h.Pass),
					h.Freshness.triple(), rate(h.N-h.Missing, h.UpdateSpan))
			}
		}
		if h, ok := r.ideal(n); ok {
			fmt.Fprintf(w, "%-8d %-14s %10s %10.1f %28s %10.1f\n", n, "opstatus ×1 IQ", secs(h.Pass), rate(n, h.Pass),
				h.Freshness.triple(), rate(h.N-h.Missing, h.UpdateSpan))
		}
	}
	if len(r.Ideal) > 0 {
		fmt.Fprintf(w, "IQ: ideal queue, an in-process channel in place of Azurite and the host emulator (same concurrency)\n")
	}

	fmt.Fprintf(w, "\nrequests per operation per pass (opstatus: per poll, the scan's query pages included)\n")
	fmt.Fprintf(w, "%-8s %-14s %-10s %6s %7s %8s %7s %6s %8s\n", "N", "design", "status", "CS", "reads", "queries", "writes", "lock", "Cosmos")
	row := func(n int, design, status string, p perOp) {
		fmt.Fprintf(w, "%-8d %-14s %-10s %6.2f %7.2f %8.3f %7.2f %6.2f %8.2f\n", n, design, status, p.CS, p.Reads, p.Queries, p.Writes, p.LockOps, p.Cosmos)
	}
	for _, n := range ns {
		if b, ok := r.base(n); ok {
			row(n, "baseline", "unchanged", b.unchangedPerOp())
			row(n, "baseline", "changed", b.changedPerOp())
		}
		for _, k := range instances {
			if h, ok := r.host(n, k); ok {
				row(n, fmt.Sprintf("opstatus ×%d", k), "unchanged", h.Unchanged.per(h.UnchangedPolls))
				row(n, fmt.Sprintf("opstatus ×%d", k), "changed", h.Changed.per(h.Updated))
			}
		}
		if h, ok := r.ideal(n); ok {
			row(n, "opstatus ×1 IQ", "unchanged", h.Unchanged.per(h.UnchangedPolls))
			row(n, "opstatus ×1 IQ", "changed", h.Changed.per(h.Updated))
		}
	}

	fmt.Fprintf(w, "\nhandler processes (opstatus)\n")
	fmt.Fprintf(w, "%-8s %-14s %10s %14s %12s %12s %12s %12s\n", "N", "design", "peak RSS", "handler CPU", "per poll", "Cosmos srv", "Azurite", "harness")
	hrow := func(n int, design string, h hostResult) {
		fmt.Fprintf(w, "%-8d %-14s %10s %14s %12s %12s %12s %12s\n", n, design, mib(h.HWM), ms(h.cpuPerPoll()*1000), ms(h.cpuPerPoll()),
			ms(per1000(h.NodeCPU["cosmos"], h.UnchangedPolls)), ms(per1000(h.NodeCPU["azurite"], h.UnchangedPolls)), ms(per1000(h.SelfCPU, h.UnchangedPolls)))
	}
	for _, n := range ns {
		for _, k := range instances {
			if h, ok := r.host(n, k); ok {
				hrow(n, fmt.Sprintf("opstatus ×%d", k), h)
			}
		}
		if h, ok := r.ideal(n); ok {
			hrow(n, "opstatus ×1 IQ", h)
		}
	}
	fmt.Fprintf(w, "(CPU per 1,000 unchanged polls: the handlers', then the Cosmos server's, Azurite's and the harness's (simulator, host emulator))\n")
	if len(r.Cold) > 0 {
		fmt.Fprintf(w, "cold start (exec → first 2xx on GET /): median %s of %d runs\n", ms(median(r.Cold)), len(r.Cold))
	}
	fmt.Fprintf(w, "binary size: %s (%d bytes)\n", mib(r.BinaryBytes), r.BinaryBytes)
	for _, s := range r.Scans {
		fmt.Fprintf(w, "scan N=%d: %s median of %d · handler peak RSS %s\n", s.N, ms(median(s.Durations)), len(s.Durations), mib(s.HWM))
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
			bu, hu := b.unchangedPerOp(), h.Unchanged.per(h.UnchangedPolls)
			fmt.Fprintf(w, "N=%-6d ×%d: pass time %s (speed-up %.1f×) · freshness p99 %s · Cosmos requests per unchanged poll %s · lock ops per unchanged poll %s\n",
				n, k, f3(ratio(h.Pass, b.Pass)), ratio(b.Pass, h.Pass), f3(ratio(h.Freshness.P99, b.Freshness.P99)),
				f2(hu.Cosmos/bu.Cosmos), f2(hu.LockOps/bu.LockOps))
		}
	}

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
				r.add(fmt.Sprintf("freshness_p99_s_opstatus_x%d_n%d", k, n), f2(h.Freshness.P99.Seconds()))
				if h.Missing > 0 {
					r.add(fmt.Sprintf("freshness_not_succeeded_opstatus_x%d_n%d", k, n), strconv.Itoa(h.Missing))
				}
			}
		}
	}
	for _, n := range ns {
		b, okb := r.base(n)
		for _, k := range instances {
			h, ok := r.host(n, k)
			if !ok || !okb {
				continue
			}
			name := fmt.Sprintf("pass_speedup_n%d", n)
			if k != 1 {
				name = fmt.Sprintf("pass_speedup_x%d_n%d", k, n)
			}
			r.add(name, f2(ratio(b.Pass, h.Pass)))
		}
	}
	for _, h := range r.Ideal {
		r.add(fmt.Sprintf("pass_s_ideal_queue_n%d", h.N), f2(h.Pass.Seconds()))
		r.add(fmt.Sprintf("freshness_p99_s_ideal_queue_n%d", h.N), f2(h.Freshness.P99.Seconds()))
		if b, ok := r.base(h.N); ok {
			r.add(fmt.Sprintf("pass_speedup_ideal_queue_n%d", h.N), f2(ratio(b.Pass, h.Pass)))
		}
	}
	if h, ok := r.host(targetFreshN, 1); ok {
		runs := r.runs(targetFreshN, 1)
		fp := spreadOf(runs, freshP99s)
		cp := spreadOf(runs, cpuMs)
		r.add("freshness_p99_s_n1000", f2(fp.Median))
		u := h.Unchanged.per(h.UnchangedPolls)
		r.add("cpu_ms_per_unchanged_poll", f3(cp.Median))
		if len(runs) > 1 {
			r.add("runs_n1000", strconv.Itoa(len(runs)))
			if b, ok := r.base(targetFreshN); ok {
				sp := spreadOf(runs, speedupOver(b))
				r.add("pass_speedup_n1000_min", f2(sp.Min))
				r.add("pass_speedup_n1000_max", f2(sp.Max))
			}
			r.add("freshness_p99_s_n1000_min", f2(fp.Min))
			r.add("freshness_p99_s_n1000_max", f2(fp.Max))
			r.add("cpu_ms_per_unchanged_poll_min", f3(cp.Min))
			r.add("cpu_ms_per_unchanged_poll_max", f3(cp.Max))
		}
		r.add("unchanged_cs_calls_per_poll", f3(u.CS))
		r.add("unchanged_cosmos_reads_per_poll", f3(u.Reads))
		r.add("unchanged_cosmos_queries_per_poll", f3(u.Queries))
		r.add("unchanged_writes_per_poll", f3(u.Writes))
		r.add("unchanged_lock_ops_per_poll", f3(u.LockOps))
		if h.UnchangedReceives > 0 {
			r.add("messages_per_host_receive_n1000", f2(spreadOf(runs, messagesPerReceive).Median))
		}
	}
	if b, ok := r.base(targetFreshN); ok {
		r.add("baseline_cosmos_per_unchanged_check", f2(b.unchangedPerOp().Cosmos))
	}
	if len(r.Cold) > 0 {
		r.add("cold_start_ms", f2(float64(median(r.Cold))/float64(time.Millisecond)))
	}
	if hwm := r.rssAt(targetFreshN); hwm > 0 {
		r.add("rss_mib", f2(float64(hwm)/(1<<20)))
	}
	r.add("binary_mib", f2(float64(r.BinaryBytes)/(1<<20)))
	for _, s := range r.Scans {
		r.add(fmt.Sprintf("scan_ms_n%d", s.N), f2(float64(median(s.Durations))/float64(time.Millisecond)))
		r.add(fmt.Sprintf("scan_hwm_mib_n%d", s.N), f2(float64(s.HWM)/(1<<20)))
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
	for _, h := range r.Opstatus {
		if h.N == n {
			hwm = max(hwm, h.HWM)
		}
	}
	return hwm
}

func (r *results) targets() {
	r.Targets = nil
	add := func(what string, known, met bool, reached string) {
		r.Targets = append(r.Targets, target{What: what, Reached: reached, Met: met, Known: known})
	}
	b, okb := r.base(targetFreshN)
	h1, ok1 := r.host(targetFreshN, 1)
	runs1 := r.runs(targetFreshN, 1)
	if okb && ok1 {
		sp := spreadOf(runs1, speedupOver(b))
		s := sp.Median
		reached := fmt.Sprintf("%.1f× with one instance (%s vs %s)%s", s, secs(h1.Pass), secs(b.Pass), sp.of(len(runs1), "%.1f×"))
		if h4, ok := r.host(targetFreshN, 4); ok {
			reached += fmt.Sprintf(", %.1f× with four (%s)", ratio(b.Pass, h4.Pass), secs(h4.Pass))
		}
		if hi, ok := r.ideal(targetFreshN); ok {
			reached += fmt.Sprintf("; %.1f× with the ideal queue (%s)", ratio(b.Pass, hi.Pass), secs(hi.Pass))
		}
		add(fmt.Sprintf("full pass over 1,000 operations at %s ≥ %.0f× faster than the baseline", r.Latency, targetSpeedup), true, s >= targetSpeedup, reached)
	} else {
		add("full pass over 1,000 operations ≥ 20× faster than the baseline", false, false, "needs baseline and opstatus ×1 at N=1000")
	}
	if ok1 {
		limit := scanInterval + targetFreshSlack
		fp := spreadOf(runs1, freshP99s)
		missing := 0
		for _, h := range runs1 {
			missing += h.Missing
		}
		reached := fmt.Sprintf("p99 %.1f s with one instance%s", fp.Median, fp.of(len(runs1), "%.1f s"))
		if h4, ok := r.host(targetFreshN, 4); ok {
			reached += fmt.Sprintf(", %s with four", secs(h4.Freshness.P99))
		}
		if hi, ok := r.ideal(targetFreshN); ok {
			reached += fmt.Sprintf("; %s with the ideal queue", secs(hi.Freshness.P99))
		}
		add(fmt.Sprintf("freshness p99 at N=1,000 ≤ scan interval + 2 s (%s)", secs(limit)), true, fp.Median <= limit.Seconds() && missing == 0, reached)
		u := h1.Unchanged.per(h1.UnchangedPolls)
		exact, polled := true, true
		for _, h := range runs1 {
			u := h.Unchanged.per(h.UnchangedPolls)
			exact = exact && u.CS == 1 && u.Reads == 1 && u.Writes == 0 && u.LockOps == 0
			polled = polled && h.UnchangedPolls > 0
		}
		add("an unchanged poll costs exactly 1 Cluster Service call, 1 point read, 0 writes, 0 lock operations", polled, exact,
			fmt.Sprintf("%d polls: %.3f CS calls, %.3f point reads, %.3f writes, %.3f lock ops per poll (and %.4f query pages: the scan's)",
				h1.UnchangedPolls, u.CS, u.Reads, u.Writes, u.LockOps, u.Queries))
		cp := spreadOf(runs1, cpuMs)
		add("handler CPU ≤ 1 ms per unchanged poll", polled, cp.Median <= float64(targetCPUPerPoll)/float64(time.Millisecond),
			fmt.Sprintf("%.2f ms%s", cp.Median, cp.of(len(runs1), "%.2f ms")))
	} else {
		add("freshness p99 at N=1,000 ≤ scan interval + 2 s", false, false, "needs opstatus ×1 at N=1000")
		add("an unchanged poll costs exactly 1 CS call, 1 point read, 0 writes, 0 lock operations", false, false, "needs opstatus ×1 at N=1000")
		add("handler CPU ≤ 1 ms per unchanged poll", false, false, "needs opstatus ×1 at N=1000")
	}
	if hwm := r.rssAt(targetFreshN); hwm > 0 {
		add("handler RSS ≤ 40 MiB during the N=1,000 run", true, hwm <= targetRSS, "peak "+mib(hwm))
	} else {
		add("handler RSS ≤ 40 MiB during the N=1,000 run", false, false, "needs opstatus at N=1000")
	}
	if len(r.Cold) > 0 {
		c := median(r.Cold)
		add("cold start ≤ 50 ms", true, c <= targetColdStart, "median "+ms(c))
	} else {
		add("cold start ≤ 50 ms", false, false, "not run")
	}
	if bl := r.Backlog; bl != nil {
		limit := growthLimit(bl.N)
		add("backlog: at most one Cluster Service call per operation per scan interval", true, bl.MaxCalls <= 1,
			fmt.Sprintf("max %d (%d of %d operation-intervals above 1)", bl.MaxCalls, bl.Over1, bl.Pairs))
		add(fmt.Sprintf("backlog: queue length bounded (not growing by more than %.1f messages/s while Cluster Service is slow)", limit), true,
			bl.Growth <= limit,
			fmt.Sprintf("growing by %.1f messages/s over the second half of the slow phase; max %d (%.1f×N), %d when Cluster Service recovered, %d at the end",
				bl.Growth, bl.QueueMax, float64(bl.QueueMax)/float64(bl.N), bl.QueueAtSlowEnd, bl.QueueAtEnd))
	} else {
		add("backlog: at most one Cluster Service call per operation per scan interval; queue bounded", false, false, "not run")
	}
	var big, small *scanResult
	for i := range r.Scans {
		s := &r.Scans[i]
		if big == nil || s.N > big.N {
			big = s
		}
		if small == nil || s.N < small.N {
			small = s
		}
	}
	if big != nil && big.N >= 10000 {
		d := median(big.Durations)
		add(fmt.Sprintf("one scan over %d pending operations ≤ 2 s", big.N), true, d <= targetScan, "median "+ms(d))
	} else {
		add("one scan over 10,000 pending operations ≤ 2 s", false, false, "needs -n with 10000")
	}
	if big != nil && small != nil && big.N > small.N {
		grow := big.HWM - small.HWM
		add(fmt.Sprintf("scan memory does not grow with N (peak RSS within %s from N=%d to N=%d)", mib(targetScanGrowth), small.N, big.N), true,
			grow <= targetScanGrowth, fmt.Sprintf("%s at N=%d, %s at N=%d (%+.1f MiB)", mib(small.HWM), small.N, mib(big.HWM), big.N, float64(grow)/(1<<20)))
	}
}
