package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/dev/hostemu"
	"github.com/opstatus/opstatus/internal/clusterservice"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

func ds(v ...int) []time.Duration {
	out := make([]time.Duration, len(v))
	for i, s := range v {
		out[i] = time.Duration(s) * time.Second
	}
	return out
}

func TestQuantile(t *testing.T) {
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(i+1) * time.Second
	}
	for _, tt := range []struct {
		name   string
		sorted []time.Duration
		q      float64
		want   time.Duration
	}{
		{"empty", nil, 0.5, 0},
		{"one", ds(7), 0.99, 7 * time.Second},
		{"median of four is the second", ds(1, 2, 3, 4), 0.5, 2 * time.Second},
		{"p99 of 100 is the 99th", hundred, 0.99, 99 * time.Second},
		{"p50 of 100 is the 50th", hundred, 0.5, 50 * time.Second},
		{"max", hundred, 1, 100 * time.Second},
		{"zero is the smallest", hundred, 0, time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, quantile(tt.sorted, tt.q))
		})
	}
}

func TestSummarizeCensored(t *testing.T) {
	// 97 known values 1..97 s and 3 censored at 200 s: p50 is known, p99
	// and max are only lower bounds.
	var values []time.Duration
	for i := 1; i <= 97; i++ {
		values = append(values, time.Duration(i)*time.Second)
	}
	d := summarizeCensored(values, 3, 200*time.Second)
	require.Equal(t, 100, d.N)
	require.Equal(t, 50*time.Second, d.P50)
	require.False(t, d.P50AtLeast)
	require.Equal(t, 200*time.Second, d.P99)
	require.True(t, d.P99AtLeast)
	require.True(t, d.MaxAtLeast)
	require.Equal(t, "50.0 s / ≥200 s / ≥200 s", d.triple())

	for i := 98; i <= 150; i++ {
		values = append(values, time.Duration(i)*time.Second)
	}
	d = summarizeCensored(values, 1, 200*time.Second)
	require.False(t, d.P99AtLeast, "one censored value of 151 is past p99")
	require.Equal(t, 150*time.Second, d.P99)
	require.True(t, d.MaxAtLeast)
}

func TestSummarizeAndMedian(t *testing.T) {
	d := summarize(ds(5, 1, 3, 2, 4))
	require.Equal(t, dist{N: 5, P50: 3 * time.Second, P99: 5 * time.Second, Max: 5 * time.Second}, d)
	require.Equal(t, 2*time.Second, median(ds(4, 1, 2, 3)))
	require.Equal(t, time.Duration(0), median(nil))
	require.Equal(t, 3*time.Second, span(ds(4, 1, 2)))
}

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func at(s ...float64) []time.Time {
	out := make([]time.Time, len(s))
	for i, v := range s {
		out[i] = t0.Add(time.Duration(v * float64(time.Second)))
	}
	return out
}

func TestPassEnd(t *testing.T) {
	calls := map[string][]time.Time{
		"/a": at(1, 11, 12),
		"/b": at(2, 15),
		"/c": at(3, 10),
	}
	end, ok := passEnd(calls, []string{"/a", "/b", "/c"}, t0.Add(10*time.Second))
	require.True(t, ok)
	require.Equal(t, t0.Add(15*time.Second), end, "the latest first call at or after the start")
	end, ok = passEnd(calls, []string{"/a", "/b", "/c"}, t0)
	require.True(t, ok)
	require.Equal(t, t0.Add(3*time.Second), end)
	_, ok = passEnd(calls, []string{"/a", "/b"}, t0.Add(13*time.Second))
	require.False(t, ok, "/a has no call since 13 s")
	_, ok = passEnd(calls, []string{"/missing"}, t0)
	require.False(t, ok)
}

func TestIntervalCalls(t *testing.T) {
	calls := map[string][]time.Time{
		"/a": at(0, 5, 10, 25),
		"/b": at(11, 12, 13, 19.999),
		"/c": at(20),
	}
	bounds := at(0, 10, 20)
	maxCalls, over1, pairs := intervalCalls(calls, []string{"/a", "/b", "/c"}, bounds)
	// /a: [0,10) 2 calls, [10,20) 1; /b: 0, 4; /c: 0, 0 (20 is outside).
	require.Equal(t, 4, maxCalls)
	require.Equal(t, 2, over1)
	require.Equal(t, 6, pairs)
	maxCalls, over1, pairs = intervalCalls(calls, []string{"/a"}, at(0))
	require.Zero(t, maxCalls+over1+pairs, "one bound makes no interval")
}

func TestParseStatCPU(t *testing.T) {
	// Field 2 may hold spaces and parentheses; utime is 1234, stime 566.
	stat := []byte("4242 (my (odd) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 1234 566 0 0 20 0 12 0 100 1000 200")
	cpu, err := parseStatCPU(stat)
	require.NoError(t, err)
	require.Equal(t, 1800*clockTick, cpu)
	require.Equal(t, 1, parentPID(stat))
	_, err = parseStatCPU([]byte("4242 (x) S 1 2"))
	require.Error(t, err)
	_, err = parseStatCPU([]byte("no command name"))
	require.Error(t, err)
}

func TestParseStatusMemory(t *testing.T) {
	status := []byte("Name:\thandler\nVmPeak:\t  900000 kB\nVmHWM:\t   30720 kB\nVmRSS:\t   20480 kB\nThreads:\t7\n")
	hwm, rss := parseStatusMemory(status)
	require.Equal(t, int64(30<<20), hwm)
	require.Equal(t, int64(20<<20), rss)
	hwm, rss = parseStatusMemory([]byte("Name:\tkthread\n"))
	require.Zero(t, hwm+rss)
}

func TestReadProcOfThisProcess(t *testing.T) {
	s, err := readProc(os.Getpid())
	require.NoError(t, err)
	require.Positive(t, s.HWM)
	require.Positive(t, s.RSS)
	require.GreaterOrEqual(t, s.HWM, s.RSS)
}

func TestClassify(t *testing.T) {
	r := classify([]testenv.RequestCount{
		{Container: "Operations", Kind: "read", Status: http.StatusOK, Count: 10},
		{Container: "Operations", Kind: "read", Status: http.StatusNotFound, Count: 1},
		{Container: "Resources", Kind: "query", Status: http.StatusOK, Count: 3},
		{Container: "Operations", Kind: "replace", Status: http.StatusOK, Count: 2},
		{Container: "Operations", Kind: "replace", Status: http.StatusPreconditionFailed, Count: 1},
		{Container: "Resources", Kind: "delete", Status: http.StatusNoContent, Count: 1},
		{Container: "Locks", Kind: "create", Status: http.StatusCreated, Count: 2},
		{Container: "Locks", Kind: "create", Status: http.StatusConflict, Count: 5},
		{Container: "Locks", Kind: "delete", Status: http.StatusNoContent, Count: 2},
		{Container: "Locks", Kind: "upsert", Status: http.StatusTooManyRequests, Count: 1},
		{Container: "", Kind: "meta", Status: http.StatusOK, Count: 4},
		{Container: "Operations", Kind: "read", Status: 0, Count: 1},
		{Container: "Operations", Kind: "changefeed", Status: http.StatusNotModified, Count: 7},
		{Container: "Leases", Kind: "replace", Status: http.StatusOK, Count: 3},
	}, 9)
	require.Equal(t, requests{CS: 9, Reads: 12, Queries: 3, Writes: 4, LockOps: 10, LockConflicts: 5, Meta: 4, Failed: 2}, r)
	require.Equal(t, int64(29), r.Cosmos())
	require.Equal(t, requests{}, r.sub(r))
	require.Equal(t, r, requests{}.add(r))
	p := r.per(2)
	require.InDelta(t, 4.5, p.CS, 1e-9)
	require.InDelta(t, 14.5, p.Cosmos, 1e-9)
	require.Equal(t, perOp{}, r.per(0))
}

func TestNewDataset(t *testing.T) {
	d := newDataset("run-1", 10, 4)
	require.Len(t, d.ops, 10)
	ids, subs := map[string]bool{}, map[string]int{}
	for i, o := range d.ops {
		require.False(t, ids[o.ID], "duplicate id %s", o.ID)
		ids[o.ID] = true
		subs[o.Sub]++
		id, err := clusterservice.ParseInternalID(o.InternalID())
		require.NoError(t, err, o.InternalID())
		require.Equal(t, o.Cluster, id.ClusterID)
		require.True(t, strings.HasPrefix(o.Key(), "/subscriptions/"+o.Sub+"/"))
		if i > 0 {
			require.NotEqual(t, d.ops[i-1].Sub, o.Sub, "neighbours belong to different subscriptions")
		}
	}
	require.Len(t, subs, 3, "ceil(10/4) subscriptions")
	require.Equal(t, []string{d.ops[0].InternalID(), d.ops[1].InternalID()}, d.paths()[:2])
	require.NotEqual(t, d.ops[0].Sub, newDataset("run-2", 1, 1).ops[0].Sub, "runs do not share subscriptions")
}

func TestParseFlags(t *testing.T) {
	cfg, err := parseFlags(nil)
	require.NoError(t, err)
	require.Equal(t, []int{1000, 10000, 50000}, cfg.ns)
	require.Equal(t, []int{40}, cfg.instances, "the template's maximumInstanceCount")
	require.Equal(t, map[string]int{"poll": 1, "pickup": 1}, cfg.alwaysReady, "the template's alwaysReady")
	require.Equal(t, 512, cfg.instanceMemory, "the template's instanceMemoryMB: 0.25 core")
	require.Equal(t, 30*time.Second, cfg.scaleInterval, "the platform's")
	require.Equal(t, 256, cfg.budget, "the template's")
	require.Equal(t, []int{1000}, cfg.baselineNs)
	require.Equal(t, 50*time.Millisecond, cfg.latency)
	require.Equal(t, 8*time.Millisecond, cfg.storageLatency, "the production regime")
	for _, sc := range scenarios {
		require.Equal(t, !slices.Contains(slowScenarios, sc), cfg.only[sc], "%s: the slow scenarios only with -all", sc)
	}
	require.Equal(t, "dev/bench/out/bench.png", cfg.plotPath, "a full run writes to an untracked place")
	require.Equal(t, "dev/bench/out/results.json", cfg.jsonPath)
	require.Equal(t, 1, cfg.repeat)
	require.Empty(t, cfg.batch, "host.json's batch")

	cfg, err = parseFlags([]string{"-all", "-batch", "1+0"})
	require.NoError(t, err)
	for _, sc := range scenarios {
		require.True(t, cfg.only[sc], sc)
	}
	require.Equal(t, "1+0", cfg.batch)

	cfg, err = parseFlags([]string{"-always-ready", ""})
	require.NoError(t, err)
	require.Empty(t, cfg.alwaysReady, "every group from zero")

	cfg, err = parseFlags([]string{"-record"})
	require.NoError(t, err)
	require.Equal(t, "dev/bench/bench.png", cfg.plotPath, "-record writes what BENCHMARKS.md shows")
	require.Equal(t, "dev/bench/results.json", cfg.jsonPath)

	cfg, err = parseFlags([]string{"-replot", "r.json"})
	require.NoError(t, err)
	require.Empty(t, cfg.jsonPath, "replotting rewrites no results unless asked")

	cfg, err = parseFlags([]string{"-quick"})
	require.NoError(t, err)
	require.Equal(t, []int{1000}, cfg.ns)
	require.Equal(t, 1, cfg.repeat)
	require.Equal(t, 5, cfg.holdsRounds)
	require.Empty(t, cfg.plotPath, "a quick run writes no plot")

	cfg, err = parseFlags([]string{"-only", "baseline", "-n", "1_000", "-latency", "200ms"})
	require.NoError(t, err)
	require.Equal(t, map[string]bool{"baseline": true}, cfg.only)
	require.Equal(t, []int{1000}, cfg.ns)
	require.Equal(t, 200*time.Millisecond, cfg.latency)
	require.Empty(t, cfg.jsonPath)
	require.Equal(t, "go run ./dev/bench -only baseline -n 1_000 -latency 200ms", cfg.command)

	cfg, err = parseFlags([]string{"-only", "opstatus", "-cpuprofile", "/tmp/bench.pprof", "-setting", "A=1", "-setting", "B=x=y"})
	require.NoError(t, err)
	require.Equal(t, "/tmp/bench.pprof", cfg.cpuProfile)
	require.Equal(t, map[string]string{"A": "1", "B": "x=y"}, cfg.settings)

	for _, bad := range [][]string{
		{"-only", "nothing"}, {"-only", "ideal"}, {"-n", "0"}, {"-n", ""}, {"-instances", "two"}, {"-latency", "-1s"},
		{"-storage-latency", "-1ms"}, {"extra"}, {"-repeat", "2"}, {"-repeat", "0"}, {"-setting", "novalue"},
		{"-only", "opstatus", "-record"}, {"-budget", "0"}, {"-budget-n", "0"}, {"-batch", "8"}, {"-batch", "0+4"}, {"-batch", "33+0"}, {"-batch", "8+-1"},
		{"-always-ready", "-1"}, {"-scale-interval", "0s"}, {"-holds-subs", "101"}, {"-holds-rounds", "0"},
		{"-pickup-n", "0"}, {"-pickup-rate", "0"}, {"-pickup-background", "0"},
	} {
		_, err := parseFlags(bad)
		require.Error(t, err, "%q", bad)
	}
}

func TestStartCPUProfile(t *testing.T) {
	stop, err := startCPUProfile("")
	require.NoError(t, err)
	stop()

	path := filepath.Join(t.TempDir(), "cpu.pprof")
	stop, err = startCPUProfile(path)
	require.NoError(t, err)
	stop()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(b, []byte{0x1f, 0x8b}), "a gzipped pprof profile")

	_, err = startCPUProfile(filepath.Join(t.TempDir(), "missing", "cpu.pprof"))
	require.Error(t, err)
}

// sampleResults is a small complete result set: the baseline at N=1,000
// (extrapolated beyond), opstatus ×1 and ×4 at N=1,000, 10,000 and 50,000,
// the last without a flip.
func sampleResults() *results {
	r := &results{Latency: 50 * time.Millisecond, StorageLatency: 8 * time.Millisecond, Machine: machine{CPUs: 2}, Started: t0}
	r.Baseline = []baselineResult{{N: 1000, Pass: 60 * time.Second, ChangedPass: 60 * time.Second, Wait: 2 * time.Second,
		Freshness: dist{N: 1000, P99: 61 * time.Second}}}
	for _, n := range []int{1000, 10000, 50000} {
		scale := time.Duration(n / 1000)
		for _, k := range []int{1, 4} {
			h := hostResult{N: n, Instances: k, Pass: time.Second * scale / time.Duration(k), Flipped: n <= 10000,
				Scans:    []time.Duration{200 * time.Millisecond * scale, 100 * time.Millisecond * scale, 300 * time.Millisecond * scale},
				Messages: []int64{int64(n / 100), int64(n / 100), int64(n / 100)}}
			if h.Flipped {
				h.Freshness = dist{N: n, P99: 10*time.Second + time.Second*scale/time.Duration(k)}
				h.LockHolds = dist{N: n / 4, P99: time.Duration(k) * 20 * time.Millisecond}
				h.Frontend = frontendWaits{Waits: dist{N: 10, P99: time.Duration(k) * 5 * time.Millisecond}, Attempts: 10, Busy: k}
			}
			r.Opstatus = append(r.Opstatus, h)
		}
	}
	return r
}

// reportText is r's printed report.
func reportText(r *results) string {
	var sb strings.Builder
	r.report(&sb)
	return sb.String()
}

func TestReportHeadlines(t *testing.T) {
	r := sampleResults()
	r.Cold = ds(1, 2, 3)
	out := reportText(r)
	for _, want := range []string{
		"pass_speedup_n1000=60.00\n", "pass_speedup_x4_n1000=240.00\n", "freshness_p99_s_n1000=11.00\n",
		"cold_start_ms=2000.00\n",
		// Extrapolated linearly from N=1,000: the pass, and the freshness
		// from the wait and the changed pass.
		"pass_s_baseline_n10000=600.00\n", "freshness_p99_s_baseline_n10000=596.00\n", "pass_s_baseline_n50000=3000.00\n",
		"scan_s_n10000=2.00\n", "scan_s_n50000=10.00\n", "queue_messages_per_scan_n10000=100\n",
		"pass_s_n10000=2.50\n", "freshness_p99_s_n10000=12.50\n",
		"lock_hold_p99_ms=80.00\n", "frontend_lock_wait_p99_ms=20.00\n", "frontend_lock_busy_pct=25.00\n",
	} {
		require.Contains(t, out, want)
	}
	require.NotContains(t, out, "freshness_p99_s_opstatus_x1_n50000", "no flip at N=50,000")
	require.Contains(t, out, "[met] scan of 10000 pending operations under the host, queue writes included, ≤ 2.00 s: median 2.00 s of 6 scans")
	require.Contains(t, out, "[met] every one of 10000 operations checked within one scan interval with 4 instances (pass ≤ 10.0 s): pass 2.50 s with 4 instances")
	require.Contains(t, out, "[met] freshness p99 at N=10000 with 4 instances ≤ 15.0 s")
	require.Contains(t, out, "[met] scan of 50000 pending operations under the host, queue writes included, ≤ 10.0 s: median 10.0 s")
	require.Contains(t, out, "[met] pass over 1000 operations ≥ 30× faster than the serial baseline: 60.0× with one instance")
	require.Contains(t, out, "[met] subscription lock hold p99 ≤ 100.0 ms")
	require.Contains(t, out, "[not measured] handler CPU ≤ 0.5 ms per unchanged operation", "no unchanged operations were counted")
	require.Contains(t, out, "[MISSED] cold start ≤ 50 ms: median 2000.0 ms")
	require.Contains(t, out, "[not measured] handler RSS ≤ 40.0 MiB at N=10000")
	require.Contains(t, out, "10000   baseline*")
	require.Contains(t, out, "[not measured] pickup: a new operation's first Cluster Service call ≤ 2.00 s")
	require.NotContains(t, out, "pickup_p99_s=")

	r.Pickup = &pickupResult{Arrivals: 1000, Rate: 20, Calls: 1001, MaxCalls: 2, ByPickup: 1000,
		Delays: dist{N: 1000, P50: 40 * time.Millisecond, P99: 1500 * time.Millisecond, Max: 3 * time.Second}}
	out = reportText(r)
	require.Contains(t, out, "pickup_p99_s=1.50\npickup_cs_calls_per_op=1.001\npickup_max_cs_calls_per_op=2\npickup_unchecked=0\n")
	require.Contains(t, out, "[met] pickup: a new operation's first Cluster Service call ≤ 2.00 s after the frontend's write at p99: p99 1.50 s")
	require.Contains(t, out, "[MISSED] pickup: ≤ 1 Cluster Service call per new operation within its first interval: 1.001 on average, at most 2")
	r.Pickup = nil

	// A pass cut short has a bound, not a speed-up.
	r.Opstatus[4].PassAtLeast, r.Opstatus[4].Checked = true, 20000
	out = reportText(r)
	require.NotContains(t, out, "pass_speedup_n50000=")
	require.Contains(t, out, "pass_checked_opstatus_x1_n50000=20000\n")
	require.Contains(t, out, "N=50000  ×1: pass not complete (20000 of 50000 operations checked in 50.0 s)")

	r.Opstatus[3].LockHolds.P99 = 101 * time.Millisecond
	r.Opstatus[3].Pass = 11 * time.Second
	out = reportText(r)
	require.Contains(t, out, "[MISSED] subscription lock hold p99 ≤ 100.0 ms (create → delete at the Cosmos server): 101.0 ms")
	require.Contains(t, out, "[MISSED] every one of 10000 operations checked within one scan interval")
}

func TestRepeatsAreJudgedOnTheirMedian(t *testing.T) {
	r := &results{Latency: 50 * time.Millisecond}
	r.Baseline = []baselineResult{{N: 1000, Pass: 60 * time.Second, Freshness: dist{N: 1000, P99: 60 * time.Second}}}
	// Three runs: the pass, the freshness and the CPU each have their
	// median in a different run.
	for i, f := range []struct {
		pass, p99 time.Duration
		cpu       time.Duration // per 1,000 operations
	}{{2 * time.Second, 13 * time.Second, 400 * time.Millisecond}, {4 * time.Second, 11 * time.Second, 600 * time.Millisecond}, {3 * time.Second, 12 * time.Second, 500 * time.Millisecond}} {
		r.Opstatus = append(r.Opstatus, hostResult{N: 1000, Instances: 1, Run: i + 1, Pass: f.pass, Flipped: true,
			Freshness: dist{N: 1000, P99: f.p99}, UnchangedOps: 1000, UnchangedPolls: 10, HandlerCPU: f.cpu,
			Unchanged: requests{CS: 1000, Reads: 1000}})
	}
	h, ok := r.host(1000, 1)
	require.True(t, ok)
	require.Equal(t, 3, h.Run, "the run with the median pass")
	// The median run's handler CPU over its changed window, per update.
	r.Opstatus[2].ChangedCPU = map[string]time.Duration{"handler": 2800 * time.Millisecond}
	r.Opstatus[2].Updated = 1000
	r.Opstatus[2].InstanceMemoryMB = 512

	out := reportText(r)
	for _, want := range []string{
		"pass_speedup_n1000=20.00\n", "pass_speedup_n1000_min=15.00\n", "pass_speedup_n1000_max=30.00\n",
		"freshness_p99_s_n1000=12.00\n", "freshness_p99_s_n1000_min=11.00\n", "freshness_p99_s_n1000_max=13.00\n",
		"cpu_ms_per_unchanged_poll=0.500\n", "cpu_ms_per_unchanged_poll_max=0.600\n", "runs_n1000=3\n",
		"cpu_ms_per_changed_op=2.800\n", "instance_memory_mb=512\n",
		"unchanged_cosmos_reads_per_poll=1.000\n",
		"[MISSED] pass over 1000 operations ≥ 30× faster than the serial baseline: 20.0× with one instance (3.00 s against 60.0 s) (median of 3 runs; 15.0× to 30.0×)",
		"[met] handler CPU ≤ 0.5 ms per unchanged operation (N=1000, the fewest instances): 0.500 ms (median of 3 runs; 0.400 ms to 0.600 ms)",
		"[met] an unchanged operation costs exactly 1 Cluster Service call, 1 point read, 0 writes, 0 lock operations",
	} {
		require.Contains(t, out, want)
	}
}

func TestExtrapolateBaseline(t *testing.T) {
	b := baselineResult{N: 1000, Pass: 55 * time.Second, ChangedPass: 50 * time.Second, Wait: 3 * time.Second,
		Done1: 1000, Done2: 1000, Changed2: 1000, Freshness: dist{N: 1000, P99: 52 * time.Second}}
	x := b.extrapolate(10000)
	require.True(t, x.Extrapolated)
	require.Equal(t, 1000, x.From)
	require.Equal(t, 550*time.Second, x.Pass)
	require.Equal(t, 500*time.Second, x.ChangedPass)
	require.Equal(t, 10000, x.Changed2)
	// Position i of a serial pass is reached after wait + i × the time per check.
	require.Equal(t, 3*time.Second+250*time.Second, x.Freshness.P50)
	require.Equal(t, 3*time.Second+495*time.Second, x.Freshness.P99)
	require.Equal(t, 503*time.Second, x.Freshness.Max)
	require.False(t, b.Extrapolated, "the measured run is left alone")

	r := &results{Baseline: []baselineResult{b}}
	got, ok := r.base(1000)
	require.True(t, ok)
	require.False(t, got.Extrapolated, "a measured N is not extrapolated")
	got, ok = r.base(50000)
	require.True(t, ok)
	require.Equal(t, 2750*time.Second, got.Pass)
	_, ok = (&results{}).base(1000)
	require.False(t, ok)
}

func TestRecorder(t *testing.T) {
	var written int64
	rec := newRecorder(func() int64 { return written })
	start := t0
	// Two scans writing 3 and then 2 messages; three polls, one failed.
	written = 3
	rec.record(hostemu.Invocation{Function: "scan", Start: start, Duration: time.Second, ReturnValue: json.RawMessage("250")})
	rec.record(hostemu.Invocation{Function: "poll", ReturnValue: json.RawMessage(`{"unchanged":97,"updated":3}`)})
	rec.record(hostemu.Invocation{Function: "poll", ReturnValue: json.RawMessage(`{"superseded":100}`)})
	rec.record(hostemu.Invocation{Function: "poll", Err: errors.New("500"), ReturnValue: json.RawMessage(`{"unchanged":100}`)})
	written = 5
	rec.record(hostemu.Invocation{Function: "scan", Start: start.Add(10 * time.Second), Duration: time.Second, ReturnValue: json.RawMessage("200")})

	scans, polls, ops, outcomes := rec.snapshot()
	require.Len(t, scans, 2)
	require.Equal(t, int64(3), scans[0].Messages)
	require.Equal(t, int64(2), scans[1].Messages, "the messages written since the scan before")
	require.Equal(t, 250, scans[0].Operations)
	require.Equal(t, start, scans[0].Start)
	require.Equal(t, int64(3), polls)
	require.Equal(t, int64(201), ops, "tallies add up; a failed invocation counts once")
	require.Equal(t, map[string]int64{"unchanged": 97, "updated": 3, "superseded": 100, "failed": 1}, outcomes)
}

func TestChecked(t *testing.T) {
	calls := map[string][]time.Time{"/a": at(1, 11), "/b": at(2), "/c": at(12, 30)}
	require.Equal(t, 2, checked(calls, []string{"/a", "/b", "/c"}, t0.Add(10*time.Second), t0.Add(20*time.Second)))
	require.Equal(t, 3, checked(calls, []string{"/a", "/b", "/c"}, t0, t0.Add(time.Minute)))
	require.Zero(t, checked(calls, []string{"/missing"}, t0, t0.Add(time.Minute)))
}

func TestHoldsOfAndProbeSummary(t *testing.T) {
	holds := []lockHold{
		{Owner: "opstatus/h/1/inv", Start: 1000, End: 1030},
		{Owner: "opstatus/h/2/inv", Start: 2000, End: 2100},
		{Owner: probeOwner, Start: 3000, End: 3500},
	}
	d := holdsOf(holds, opstatusLock)
	require.Equal(t, 2, d.N, "the stand-in's own holds are not opstatus's")
	require.Equal(t, 100*time.Millisecond, d.Max)
	require.Equal(t, 30*time.Millisecond, d.P50)

	p := &lockProbe{attempts: []lockAttempt{
		{Start: t0, Wait: time.Second, Busy: true, Got: true},
		{Start: t0.Add(time.Second), Wait: 2 * time.Millisecond, Got: true},
		{Start: t0.Add(2 * time.Second), Wait: 300 * time.Millisecond, Busy: true, Got: true},
		{Start: t0.Add(5 * time.Second), Wait: 20 * time.Second, Busy: true},
	}}
	f := p.summary(t0.Add(time.Second), t0.Add(3*time.Second))
	require.Equal(t, 2, f.Attempts, "only those started while opstatus wrote")
	require.Equal(t, 1, f.Busy)
	require.Equal(t, 300*time.Millisecond, f.Waits.P99)
	require.Zero(t, f.GaveUp)
	f = p.summary(t0, t0.Add(time.Minute))
	require.Equal(t, 1, f.GaveUp)
}

// TestLockHoldsAtTheServer takes locks through the Cosmos test server and
// reads back what it timed: the holds by owner, the stand-in's wait for a
// lock someone holds, and an item that expired instead of being deleted.
func TestLockHoldsAtTheServer(t *testing.T) {
	ctx := t.Context()
	cosmos := testenv.SharedCosmos(t)
	e := &env{cosmos: cosmos}
	db := testenv.DatabaseName(t)
	require.NoError(t, frontend.CreateSchema(ctx, cosmos.Endpoint, cosmos.Key, db, lockTTL))
	fe, err := frontend.New(cosmos.Endpoint, cosmos.Key, db)
	require.NoError(t, err)

	// opstatus holds sub-a's lock for 200 ms; the stand-in waits for it.
	octx := database.WithOwner(ctx, "opstatus/test/1/inv")
	l, ok, err := fe.TryLock(octx, "sub-a", "opstatus/test/1/inv")
	require.NoError(t, err)
	require.True(t, ok)
	probe := newLockProbe(fe, []string{"sub-a"})
	done := make(chan struct{})
	go func() { probe.once(ctx, "sub-a"); close(done) }()
	time.Sleep(200 * time.Millisecond)
	require.NoError(t, fe.Unlock(octx, l))
	<-done
	f := probe.summary(t0, time.Now())
	require.Equal(t, 1, f.Attempts)
	require.Equal(t, 1, f.Busy)
	require.Greater(t, f.Waits.Max, 100*time.Millisecond, "it waited for the hold")
	requests, conflicts := probe.locksRequests()
	require.Positive(t, conflicts)
	require.Equal(t, conflicts+2, requests, "its creates that met the lock, the one that took it, and its delete")

	// sub-b's lock item, of a second, is never deleted: the next create
	// finds it expired.
	client, err := testenv.NewCosmosClient(cosmos.Endpoint, cosmos.Key)
	require.NoError(t, err)
	locks, err := client.NewContainer(db, frontend.LocksContainer)
	require.NoError(t, err)
	_, err = locks.CreateItem(octx, azcosmos.NewPartitionKeyString("sub-b"), []byte(`{"id":"sub-b","owner":"opstatus/test/1/inv","ttl":1}`), nil)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, ok, err := fe.TryLock(ctx, "sub-b", "other")
		return err == nil && ok
	}, 10*time.Second, 100*time.Millisecond)

	holds, expired, err := e.lockHolds(ctx, db)
	require.NoError(t, err)
	require.Equal(t, 1, expired)
	op := holdsOf(holds, opstatusLock)
	require.Equal(t, 1, op.N, "sub-a's; sub-b's expired")
	require.GreaterOrEqual(t, op.Max, 190*time.Millisecond)
	require.Less(t, op.Max, 2*time.Second)
	require.Equal(t, 1, holdsOf(holds, probeOwner).N)
	_, _, err = e.lockHolds(ctx, "no-such-database")
	require.NoError(t, err, "an unknown database has no holds")
}

func TestGrowth(t *testing.T) {
	var rising, sawtooth []queueSample
	for i := range 60 {
		at := time.Duration(i) * time.Second
		rising = append(rising, queueSample{At: at, Length: 24 * i})
		sawtooth = append(sawtooth, queueSample{At: at, Length: 100 * (i % 10)})
	}
	require.InDelta(t, 24.0, growth(rising, 30*time.Second, 60*time.Second), 1e-9)
	require.InDelta(t, 0.0, growth(sawtooth, 30*time.Second, 60*time.Second), 1e-9, "a level sawtooth does not grow")
	require.Zero(t, growth(rising[:5], 0, time.Minute), "one scan interval has no slope")
	require.InDelta(t, 5.0, growthLimit(1000), 1e-9, "5 % of 1,000 messages per 10 s")
	require.InDelta(t, 0.05, growthLimit(3), 1e-9, "at least one message per two intervals")
}

func TestReplotReadsWhatARunWrites(t *testing.T) {
	dir := t.TempDir()
	r := sampleResults()
	r.Cold = ds(1)
	require.NoError(t, r.writeJSON(dir+"/results.json"))
	var sb strings.Builder
	require.NoError(t, replot(&sb, config{replot: dir + "/results.json", plotPath: dir + "/plot.png"}))
	require.Contains(t, sb.String(), "lock_hold_p99_ms=80.00\n")
	_, err := os.Stat(dir + "/plot.png")
	require.NoError(t, err)
}
