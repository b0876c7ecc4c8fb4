package main

import (
	"bytes"
	"image/color"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/testenv"
	"github.com/opstatus/opstatus/internal/clusterservice"
)

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
	require.Equal(t, []int{100, 1000, 10000}, cfg.ns)
	require.Equal(t, []int{1, 4}, cfg.instances)
	require.Equal(t, 50*time.Millisecond, cfg.latency)
	require.Len(t, cfg.only, len(scenarios))
	require.Equal(t, "dev/bench/bench.png", cfg.plotPath)
	require.Equal(t, 3, cfg.repeat)

	cfg, err = parseFlags([]string{"-quick"})
	require.NoError(t, err)
	require.Equal(t, []int{100, 1000}, cfg.ns)
	require.Empty(t, cfg.plotPath, "a quick run leaves the committed plot alone")

	cfg, err = parseFlags([]string{"-only", "baseline", "-n", "1_000", "-latency", "200ms"})
	require.NoError(t, err)
	require.Equal(t, map[string]bool{"baseline": true}, cfg.only)
	require.Equal(t, []int{1000}, cfg.ns)
	require.Equal(t, 200*time.Millisecond, cfg.latency)
	require.Empty(t, cfg.jsonPath)
	require.Equal(t, "go run ./dev/bench -only baseline -n 1_000 -latency 200ms", cfg.command)

	cfg, err = parseFlags([]string{"-only", "opstatus", "-cpuprofile", "/tmp/bench.pprof"})
	require.NoError(t, err)
	require.Equal(t, "/tmp/bench.pprof", cfg.cpuProfile)

	for _, bad := range [][]string{
		{"-only", "nothing"}, {"-n", "0"}, {"-n", ""}, {"-instances", "two"}, {"-latency", "-1s"}, {"extra"},
		{"-repeat", "2"}, {"-repeat", "0"},
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

func TestGlyphs(t *testing.T) {
	for r, g := range glyphs {
		for _, row := range g {
			require.Len(t, row, 5, "glyph %q", r)
			require.Empty(t, strings.Trim(row, ".#"), "glyph %q", r)
		}
	}
	require.Equal(t, glyphs['A'], glyphFor('a'), "lower case is drawn upper case")
	require.Equal(t, glyphs['?'], glyphFor('€'))
}

// sampleResults is a small complete result set.
func sampleResults() *results {
	r := &results{Latency: 50 * time.Millisecond, Machine: machine{CPUs: 2}, BaselineFull: 1000, Started: t0}
	for i, n := range []int{100, 1000, 10000} {
		scale := time.Duration(n / 100)
		r.Baseline = append(r.Baseline, baselineResult{N: n, Pass: 6 * time.Second * scale, Extrapolated: i == 2,
			Freshness: dist{N: n, P99: 6 * time.Second * scale}})
		for _, k := range []int{1, 4} {
			r.Opstatus = append(r.Opstatus, hostResult{N: n, Instances: k, Pass: time.Second * scale / time.Duration(k),
				Freshness: dist{N: n, P99: 10*time.Second + time.Second*scale/time.Duration(k)}})
		}
	}
	r.Ideal = []hostResult{{N: 1000, Instances: 1, Pass: 3 * time.Second, Freshness: dist{N: 1000, P99: 12 * time.Second}}}
	return r
}

func TestPlotLabelsUseTheFont(t *testing.T) {
	pass, fresh := plotData(sampleResults())
	var labels []string
	for _, p := range []panel{pass, fresh} {
		labels = append(labels, p.Title, p.XLabel, p.YLabel, p.RefLabel)
		for _, s := range p.Series {
			labels = append(labels, s.Label)
		}
	}
	labels = append(labels, "0.01 0.1 1 10 100 1000 10000", "CLUSTER SERVICE LATENCY 50 MS · 2 CPUS · 2026-01-01",
		"HOLLOW MARKER, DASHED LINE: EXTRAPOLATED (BASELINE) OR LOWER BOUND")
	for _, l := range labels {
		for _, r := range l {
			_, ok := glyphs[[]rune(strings.ToUpper(string(r)))[0]]
			require.True(t, ok, "%q in %q has no glyph", r, l)
		}
	}
	require.Len(t, pass.Series, 4, "baseline, ×1, ×4 and the ideal queue")
	require.True(t, pass.Series[0].Pts[2].Extrapolated)
	require.False(t, pass.Series[0].Pts[1].Extrapolated)
	require.InDelta(t, 12.0, fresh.RefY, 1e-9)
}

func TestRenderPlot(t *testing.T) {
	img := renderPlot(sampleResults())
	require.Equal(t, 1400, img.Bounds().Dx())
	require.Equal(t, 700, img.Bounds().Dy())
	seen := map[color.RGBA]int{}
	for y := 0; y < img.Bounds().Dy(); y++ {
		for x := 0; x < img.Bounds().Dx(); x++ {
			seen[img.RGBAAt(x, y)]++
		}
	}
	for i := range 3 {
		require.Greater(t, seen[palette[i]], 500, "series %d is drawn", i)
	}
	require.Greater(t, seen[palette[len(palette)-1]], 100, "the ideal queue is drawn")
	require.Greater(t, seen[black], 1000, "labels and axes")

	path := t.TempDir() + "/plot.png"
	require.NoError(t, writePlot(path, sampleResults()))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "\x89PNG", string(b[:4]))
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
		"pass_speedup_n1000=6.00\n", "pass_speedup_x4_n1000=24.00\n", "freshness_p99_s_n1000=20.00\n",
		"cold_start_ms=2000.00\n", "pass_s_baseline_n10000=600.00\n", "pass_speedup_ideal_queue_n1000=20.00\n",
	} {
		require.Contains(t, out, want)
	}
	require.Contains(t, out, "[MISSED] full pass over 1,000 operations")
	require.Contains(t, out, "[not measured] handler CPU ≤ 1 ms per unchanged poll", "no unchanged polls were counted")
	require.Contains(t, out, "[MISSED] cold start ≤ 50 ms: median 2000.0 ms")
}

func TestRepeatsAreJudgedOnTheirMedian(t *testing.T) {
	r := &results{Latency: 50 * time.Millisecond, BaselineFull: 1000}
	r.Baseline = []baselineResult{{N: 1000, Pass: 60 * time.Second, Freshness: dist{N: 1000, P99: 60 * time.Second}}}
	// Three runs: the pass, the freshness, the CPU and the messages per
	// receive each have their median in a different run.
	for i, f := range []struct {
		pass, p99 time.Duration
		cpu       time.Duration // per 1,000 polls
		receives  int64         // for 1,000 messages
	}{{2 * time.Second, 13 * time.Second, 900 * time.Millisecond, 1000}, {4 * time.Second, 11 * time.Second, 1200 * time.Millisecond, 250}, {3 * time.Second, 12 * time.Second, 1000 * time.Millisecond, 100}} {
		r.Opstatus = append(r.Opstatus, hostResult{N: 1000, Instances: 1, Run: i + 1, Pass: f.pass,
			Freshness: dist{N: 1000, P99: f.p99}, UnchangedPolls: 1000, HandlerCPU: f.cpu,
			Unchanged: requests{CS: 1000, Reads: 1000}, UnchangedReceives: f.receives, UnchangedReceived: 1000})
	}
	h, ok := r.host(1000, 1)
	require.True(t, ok)
	require.Equal(t, 3, h.Run, "the run with the median pass")

	out := reportText(r)
	for _, want := range []string{
		"pass_speedup_n1000=20.00\n", "pass_speedup_n1000_min=15.00\n", "pass_speedup_n1000_max=30.00\n",
		"freshness_p99_s_n1000=12.00\n", "freshness_p99_s_n1000_min=11.00\n", "freshness_p99_s_n1000_max=13.00\n",
		"cpu_ms_per_unchanged_poll=1.000\n", "cpu_ms_per_unchanged_poll_max=1.200\n", "runs_n1000=3\n",
		"messages_per_host_receive_n1000=4.00\n",
		"[met] full pass over 1,000 operations at 50ms ≥ 20× faster than the baseline: 20.0× with one instance (3.00 s vs 60.0 s) (median of 3 runs; 15.0× to 30.0×)",
		"[met] freshness p99 at N=1,000 ≤ scan interval + 2 s (12.0 s): p99 12.0 s with one instance (median of 3 runs; 11.0 s to 13.0 s)",
		"[met] handler CPU ≤ 1 ms per unchanged poll: 1.00 ms (median of 3 runs; 0.90 ms to 1.20 ms)",
	} {
		require.Contains(t, out, want)
	}
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
	require.InDelta(t, 1.5, growthLimit(300), 1e-9)
	require.InDelta(t, 1.0, growthLimit(10), 1e-9)
}

func TestReplotReadsWhatARunWrites(t *testing.T) {
	dir := t.TempDir()
	r := sampleResults()
	r.Cold = ds(1)
	require.NoError(t, r.writeJSON(dir+"/results.json"))
	var sb strings.Builder
	require.NoError(t, replot(&sb, config{replot: dir + "/results.json", plotPath: dir + "/plot.png"}))
	require.Contains(t, sb.String(), "pass_speedup_ideal_queue_n1000=20.00\n")
	_, err := os.Stat(dir + "/plot.png")
	require.NoError(t, err)
}
