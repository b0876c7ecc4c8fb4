package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

// machine describes where the benchmark ran.
type machine struct {
	CPUs      int
	CPUModel  string
	MemTotal  string
	GoVersion string
	OS        string
	LoadStart string
	LoadEnd   string
}

func readMachine() machine {
	m := machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH, LoadStart: readLoad()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if name, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(name) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				m.MemTotal = strings.TrimSpace(v)
				break
			}
		}
	}
	return m
}

// readLoad returns the 1, 5 and 15 minute load averages.
func readLoad() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

func (m machine) print(w io.Writer) {
	fmt.Fprintf(w, "machine: %d CPUs (%s), %s memory, %s, %s; load average %s\n",
		m.CPUs, m.CPUModel, m.MemTotal, m.GoVersion, m.OS, m.LoadStart)
}

// results is everything one invocation measured.
type results struct {
	Command        string
	Commit         string
	HandlerSHA256  string
	Started        time.Time
	Finished       time.Time
	Machine        machine
	Latency        time.Duration
	StorageLatency time.Duration
	OpsPerSub      int
	BinaryBytes    int64
	Cold           []time.Duration
	Scans          []scanResult
	Opstatus       []hostResult
	Baseline       []baselineResult
	Backlog        *backlogResult
	Headline       []headline
	Targets        []target

	// Budget is the handlers' CLUSTER_SERVICE_BUDGET (0 in results of runs
	// before the Flex regime); Holds the holds scenario.
	Budget int
	Holds  *holdsResult
	// Pickup is the pickup scenario.
	Pickup *pickupResult `json:",omitempty"`
	// Ledger is the budget scenario.
	Ledger *budgetResult `json:",omitempty"`
	// CSInFlightMaxAll is the most Cluster Service requests in flight
	// over every scenario of the run (0 in results recorded before it).
	CSInFlightMaxAll int64 `json:",omitempty"`
	// Mixed is the mixed scenario under each reading of
	// maximumInstanceCount.
	Mixed []mixedResult `json:",omitempty"`
	// PickupCold is the pickup-from-idle scenario.
	PickupCold *pickupColdResult `json:",omitempty"`
}

type headline struct {
	Name  string
	Value string
}

type target struct {
	What    string
	Reached string
	Met     bool
	Known   bool // false when the figure was not measured in this run
}

func (r *results) writeJSON(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// Formatting.

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

func secs(d time.Duration) string {
	switch {
	case d >= 100*time.Second:
		return fmt.Sprintf("%.0f s", d.Seconds())
	case d >= 10*time.Second:
		return fmt.Sprintf("%.1f s", d.Seconds())
	default:
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
}

// fresh formats a freshness quantile, "≥" when it is a lower bound.
func fresh(d time.Duration, atLeast bool) string {
	if atLeast {
		return "≥" + secs(d)
	}
	return secs(d)
}

// triple is p50 / p99 / max.
func (d dist) triple() string {
	return fmt.Sprintf("%s / %s / %s", fresh(d.P50, d.P50AtLeast), fresh(d.P99, d.P99AtLeast), fresh(d.Max, d.MaxAtLeast))
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func rate(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

func outcomes(m map[string]int64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func (p perOp) String() string {
	return fmt.Sprintf("CS %.2f · Cosmos %.2f (reads %.2f, queries %.3f, writes %.2f, lock %.2f)",
		p.CS, p.Cosmos, p.Reads, p.Queries, p.Writes, p.LockOps)
}

// cpuPerOp is the handlers' CPU time per operation in the unchanged
// window (the scans' included).
func (h hostResult) cpuPerOp() time.Duration {
	if h.UnchangedOps == 0 {
		return 0
	}
	return h.HandlerCPU / time.Duration(h.UnchangedOps)
}

func printScan(w io.Writer, r scanResult) {
	fmt.Fprintf(w, "scan (standalone handler, the listing alone, no queue writes) N=%d: %s · %d messages, %s response · handler CPU %s per scan · RSS idle %s, peak %s\n",
		r.N, durList(r.Durations), r.Messages, mib(int64(r.Bytes)), ms(r.CPU/time.Duration(max(len(r.Durations), 1))), mib(r.IdleRSS), mib(r.HWM))
}

func durList(ds []time.Duration) string {
	var parts []string
	for _, d := range ds {
		parts = append(parts, ms(d))
	}
	return strings.Join(parts, ", ")
}

// passText is the pass time, with how many operations were checked when
// the harness stopped waiting for it.
func (h hostResult) passText() string {
	if !h.PassAtLeast {
		return secs(h.Pass)
	}
	return fmt.Sprintf("≥%s (%d of %d checked)", secs(h.Pass), h.Checked, h.N)
}

func printHost(w io.Writer, r hostResult) {
	mode := "queue drained between passes"
	if !r.Quiescent {
		mode = "BACKLOG: the queue never drained; windows end at pass completion"
	}
	fmt.Fprintf(w, "  seeded in %s · pass %s (%.0f operations/s) · scans under the host (queue writes included): median %s of %d, %d messages each · %s\n",
		secs(r.SeedTime), r.passText(), rate(r.N, r.Pass), secs(r.scanHost()), len(r.Scans), r.messagesPerScan(), mode)
	fmt.Fprintf(w, "  unchanged: %d operations in %d messages [%s] · per operation %s · lock conflicts %d\n",
		r.UnchangedOps, r.UnchangedPolls, outcomes(r.UnchangedOut), r.Unchanged.per(r.UnchangedOps), r.Unchanged.LockConflicts)
	fmt.Fprintf(w, "  handlers: peak RSS %s (%s by the end of the unchanged window) · CPU %s per unchanged operation · Cosmos server %s, Azurite %s, harness %s per 1,000 operations\n",
		mib(r.HWM), mib(r.UnchangedHWM), ms(r.cpuPerOp()),
		ms(per1000(r.NodeCPU["cosmos"], r.UnchangedOps)), ms(per1000(r.NodeCPU["azurite"], r.UnchangedOps)),
		ms(per1000(r.SelfCPU, r.UnchangedOps)))
	if r.Flipped {
		fmt.Fprintf(w, "  changed: %d operations in %d messages [%s] · per update %s · lock conflicts %d\n",
			r.ChangedOps, r.ChangedPolls, outcomes(r.ChangedOut), r.Changed.per(r.Updated), r.Changed.LockConflicts)
		fmt.Fprintf(w, "  freshness after the flip (p50 / p99 / max): %s (%d Succeeded, %d not when the harness stopped waiting) · updates over %s (%.0f/s)\n",
			r.Freshness.triple(), r.N-r.Missing, r.Missing, secs(r.UpdateSpan), rate(r.N-r.Missing, r.UpdateSpan))
		fmt.Fprintf(w, "  lock holds (create → delete at the Cosmos server): %d, p50 %s, p99 %s, max %s, %d expired · frontend stand-in: %d attempts while opstatus wrote, %d met a held lock, wait p50 %s, p99 %s, max %s\n",
			r.LockHolds.N, ms(r.LockHolds.P50), ms(r.LockHolds.P99), ms(r.LockHolds.Max), r.LockExpired,
			r.Frontend.Attempts, r.Frontend.Busy, ms(r.Frontend.Waits.P50), ms(r.Frontend.Waits.P99), ms(r.Frontend.Waits.Max))
		fmt.Fprintf(w, "  changed window CPU per 1,000 updates: handlers %s · Cosmos server %s, Azurite %s, harness %s\n",
			ms(per1000(r.ChangedCPU["handler"], r.Updated)), ms(per1000(r.ChangedCPU["cosmos"], r.Updated)),
			ms(per1000(r.ChangedCPU["azurite"], r.Updated)), ms(per1000(r.ChangedCPU["harness"], r.Updated)))
	}
	if r.Flex {
		fmt.Fprintf(w, "  Flex: poll instances at most %d of %d (%d always ready), %d scale decisions, %d changed the count, %s · Cluster Service requests in flight at most %d (budget %d)\n",
			r.PollInstancesMax, r.Instances, r.AlwaysReady, r.ScaleDecisions, r.ScaleChanges,
			r.scaleText(),
			r.CSInFlightMax, r.Budget)
		fmt.Fprintf(w, "  CPU: unchanged window %s", r.UnchangedCores)
		if r.Flipped {
			fmt.Fprintf(w, " · changed window %s · Cosmos requests under the lock per hold %.2f", r.ChangedCores, r.LockHoldRequests)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "  queue max %d messages · failures %d, poisoned %d, timeouts %d, handler restarts %d · run took %s\n",
		r.MaxQueue, r.Failures, r.Poisoned, r.Timeouts, r.Restarts, secs(r.Elapsed))
}

func per1000(d time.Duration, n int64) time.Duration {
	if n == 0 {
		return 0
	}
	return d * 1000 / time.Duration(n)
}

// unchangedPerOp is the baseline's requests per operation in an unchanged
// pass: its checks and its share of the listings.
func (b baselineResult) unchangedPerOp() perOp {
	return b.Unchanged.per(int64(b.Done1)).plus(b.Lists.per(int64(b.Done1) * int64(max(b.Listings, 1))))
}

func (b baselineResult) changedPerOp() perOp { return b.Changed.per(int64(b.Done2)) }

func (p perOp) plus(o perOp) perOp {
	return perOp{CS: p.CS + o.CS, Reads: p.Reads + o.Reads, Queries: p.Queries + o.Queries,
		Writes: p.Writes + o.Writes, LockOps: p.LockOps + o.LockOps, Cosmos: p.Cosmos + o.Cosmos}
}

func printBaseline(w io.Writer, r baselineResult) {
	fmt.Fprintf(w, "  seeded in %s · listing %s · pass %s (%.1f checks/s) · errors %d\n",
		secs(r.SeedTime), secs(r.List), secs(r.Pass), rate(r.N, r.Pass), r.Errors)
	fmt.Fprintf(w, "  unchanged per check (listing included): %s\n", r.unchangedPerOp())
	fmt.Fprintf(w, "  changed: %d checks, %d written · per check %s\n", r.Done2, r.Changed2, r.changedPerOp())
	fmt.Fprintf(w, "  freshness after the flip: p50 %s, p99 %s, max %s · changed pass %s after a wait of %s · run took %s\n",
		secs(r.Freshness.P50), secs(r.Freshness.P99), secs(r.Freshness.Max), secs(r.ChangedPass), secs(r.Wait), secs(r.Elapsed))
}

func printBacklog(w io.Writer, r backlogResult) {
	fmt.Fprintf(w, "  %d scans wrote %d messages; %d poll invocations reported on %d operations [%s]; %d Cluster Service calls\n",
		r.Scans, r.Messages, r.Polls, r.Ops, outcomes(r.Outcomes), r.CSCalls)
	fmt.Fprintf(w, "  queue length: max %d, %d when Cluster Service recovered, %d at the end; growing by %.2f messages/s over the second half of the slow phase\n",
		r.QueueMax, r.QueueAtSlowEnd, r.QueueAtEnd, r.Growth)
	var series []string
	for _, s := range r.Queue {
		if int(s.At.Round(time.Second)/time.Second)%5 == 0 {
			series = append(series, fmt.Sprintf("%ds:%d", int(s.At.Round(time.Second).Seconds()), s.Length))
		}
	}
	fmt.Fprintf(w, "  queue every 5 s: %s\n", strings.Join(series, " "))
	fmt.Fprintf(w, "  Cluster Service calls per operation per scan interval: max %d overall; slow phase max %d (%d of %d operation-intervals above 1); recovery max %d (%d of %d above 1)\n",
		r.MaxCalls, r.SlowMaxCalls, r.SlowOver1, r.SlowPairs, r.RecMaxCalls, r.RecOver1, r.RecPairs)
	fmt.Fprintf(w, "  Cluster Service requests in flight at most %d\n", r.CSInFlightMax)
}

// messagesPerScan is the backlog's mean number of messages per scan.
func (r backlogResult) messagesPerScan() float64 {
	if r.Scans == 0 {
		return 0
	}
	return float64(r.Messages) / float64(r.Scans)
}
