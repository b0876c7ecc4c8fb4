// Command bench is `make bench`: it runs the design opstatus replaces (one
// serial polling loop) and opstatus itself (scan → queue → poll through the
// built handler under the host emulator) on the same data and the same
// local servers, and prints throughput, freshness and cost side by side.
// It ends with one name=value line per headline figure and draws a PNG
// plot. BENCHMARKS.md describes the method and records a run. It never
// ships.
//
// opstatus runs in the production regime: the host emulator behaves like
// the Functions host (payloads, serial output writes, queue listener) and
// delays every Storage request by -storage-latency, as a round trip to an
// Azure Storage account in the same region would; it runs the app as
// Flex Consumption does, as deploy/azuredeploy.json sets it up: scan and
// poll in instances of their own, poll's instances following the queue up
// to the maximumInstanceCount, every handler given the app-wide Cluster
// Service budget.
//
// Every figure is measured on the machine it runs on, with the harness,
// the Node.js servers and the handlers sharing its cores: they are
// figures to compare, not assertions.
//
// -cpuprofile writes a Go CPU profile of the harness process itself (host
// emulator, Cluster Service simulator, recorder) over the
// whole run, for `go tool pprof`; it costs the harness a little CPU, so
// take figures from runs without it.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/opstatus/opstatus/dev/hostemu"
	"github.com/opstatus/opstatus/dev/testenv"
)

// config is the command line.
type config struct {
	latency        time.Duration
	storageLatency time.Duration
	ns             []int
	instances      []int
	baselineNs     []int
	flipMax        int
	only           map[string]bool
	opsPerSub      int
	passTimeout    time.Duration
	freshTimeout   time.Duration
	warmupMax      int
	// fromIdle measures each opstatus run's first pass, from the host's
	// start with poll at its always-ready count (none by default): no
	// warm-up pass, no wait for a scale-out.
	fromIdle  bool
	coldRuns  int
	scanTimes int
	repeat    int

	backlogN         int
	backlogInstances int
	backlogLatency   time.Duration
	backlogSlow      time.Duration
	backlogRecover   time.Duration

	// The Flex Consumption regime: the always-ready instances by
	// function, the scale controller's period, how long a new instance
	// takes to start its handler, whether maximumInstanceCount bounds the
	// whole app rather than each function group, and the app-wide Cluster
	// Service budget (CLUSTER_SERVICE_BUDGET). instances are
	// maximumInstanceCounts.
	alwaysReady   map[string]int
	scaleInterval time.Duration
	startDelay    time.Duration
	appWide       bool
	// instanceMemory is the instances' memory, which buys their handlers'
	// CPU (hostemu.CoresOf); 0 leaves the CPU unlimited.
	instanceMemory int
	budget         int
	// budgetN is the budget scenario's operations; batch, when set,
	// replaces host.json's queue batch ("8+4").
	budgetN int
	batch   string

	holdsN, holdsSubs, holdsRounds int

	// The pickup scenario: new operations at a steady rate over a
	// background of pending ones.
	pickupN, pickupBackground int
	pickupRate                float64
	coldPickups               int

	// The mixed scenario: a backlog pass under a slow Cluster Service
	// while new operations arrive at -pickup-rate, under both readings of
	// maximumInstanceCount.
	mixedN, mixedInstances int
	mixedLatency, mixedFor time.Duration

	// hostJSON, handler and settings replace the repository's host.json
	// and handler, and add app settings, for experiments.
	hostJSON, handler string
	settings          map[string]string

	plotPath, jsonPath, logPath string
	replot                      string
	cpuProfile                  string
	command                     string
	// progress receives progress lines (stdout).
	progress io.Writer
}

// Where a full run writes its plot and results, relative to the
// repository root: an untracked directory, or with -record the files that
// BENCHMARKS.md shows.
const (
	outPlot    = "dev/bench/out/bench.png"
	outJSON    = "dev/bench/out/results.json"
	recordPlot = "dev/bench/bench.png"
	recordJSON = "dev/bench/results.json"
)

// harnessGCPercent is the harness's GOGC.
const harnessGCPercent = 400

// scenarios that -only can name.
var scenarios = []string{"coldstart", "scan", "opstatus", "baseline", "holds", "backlog", "pickup", "pickupcold", "mixed", "budget"}

// slowScenarios run only with -all or -only: together they take longer
// than the rest of the run, and their figures change less often.
var slowScenarios = []string{"backlog", "pickupcold", "mixed"}

func parseInts(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(strings.ReplaceAll(f, "_", ""))
		if f == "" {
			continue
		}
		v, err := strconv.Atoi(f)
		if err != nil || v < 1 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("empty list")
	}
	return out, nil
}

func parseFlags(args []string) (config, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	var cfg config
	var ns, instances, baselineNs, only string
	var quick, record, all bool
	fs.DurationVar(&cfg.latency, "latency", 50*time.Millisecond, "Cluster Service simulator latency on every status call")
	fs.DurationVar(&cfg.storageLatency, "storage-latency", 8*time.Millisecond, "delay of every Storage queue request the host emulator makes (a round trip to Azure Storage in the region)")
	fs.StringVar(&ns, "n", "1000,10000,50000", "numbers of pending operations, comma-separated")
	fs.BoolVar(&quick, "quick", false, "N = 1,000 only, one run of each scenario, at most 5 rounds of holds, for iteration (overrides -n and -repeat)")
	fs.StringVar(&instances, "instances", strconv.Itoa(templateMaxInstances), "maximumInstanceCount values for opstatus, comma-separated: poll's instances follow the queue up to it (the template's default)")
	alwaysReady := fs.String("always-ready", "poll=1,pickup=1", "function=count,…: instances a function keeps however little work it has (Flex's alwaysReady; the template's default; \"\" scales poll and pickup to zero)")
	fs.DurationVar(&cfg.startDelay, "start-delay", defaultStartDelay, "how long an instance a scale decision adds takes before its handler starts: an ASSUMPTION, Flex documents no cold-start time")
	fs.IntVar(&cfg.instanceMemory, "instance-memory", 2048, "instanceMemoryMB: each instance's handler gets the CPU it buys on Flex (512 MB: 0.25 core, 2,048 MB: 1 core) through a cgroup; 0 shares the machine's cores unlimited")
	fs.BoolVar(&cfg.appWide, "app-wide-limit", false, "maximumInstanceCount bounds the whole app's instances (a Microsoft PM's reading) instead of each function group's (the REST spec's)")
	fs.DurationVar(&cfg.scaleInterval, "scale-interval", 30*time.Second, "how often the scale controller decides poll's instance count (the platform's 30 s)")
	fs.IntVar(&cfg.budget, "budget", defaultBudget, "CLUSTER_SERVICE_BUDGET: Cluster Service requests the whole app may have in flight, shared by the handlers through the ledger; each also has the template's ceiling CLUSTER_SERVICE_MAX_IN_FLIGHT 256")
	fs.IntVar(&cfg.budgetN, "budget-n", 8000, "pending operations in the budget scenario (newcomer, reclaim and the ledger's cost), at Cluster Service 500 ms: enough for more poll instances than the budget fills at their ceiling, so that newcomers wait for others to give back")
	fs.StringVar(&cfg.batch, "batch", "", "experiment: BATCHSIZE+NEWBATCHTHRESHOLD (8+4, 1+0, …) replacing host.json's queues batchSize and newBatchThreshold for the run")
	fs.BoolVar(&all, "all", false, "run the slow scenarios too ("+strings.Join(slowScenarios, ", ")+"); without it they run only when -only names them")
	fs.StringVar(&baselineNs, "baseline-n", "1000", "N values at which the serial baseline runs; at the other N it is extrapolated linearly from the largest of them")
	fs.IntVar(&cfg.flipMax, "flip-max", 10000, "largest N whose opstatus runs flip the clusters and measure freshness; above it the runs measure unchanged passes only and share one dataset")
	fs.StringVar(&only, "only", "", "run only these scenarios, comma-separated: "+strings.Join(scenarios, ", ")+" (default all)")
	fs.IntVar(&cfg.opsPerSub, "ops-per-sub", 4, "operations per subscription (they share its lock)")
	fs.DurationVar(&cfg.passTimeout, "pass-timeout", time.Minute, "stop waiting for an opstatus pass after this; the pass time is then a lower bound (≥)")
	fs.DurationVar(&cfg.freshTimeout, "fresh-timeout", 90*time.Second, "stop waiting for every operation to be Succeeded after the flip; the operations still pending make the freshness a lower bound (≥)")
	fs.IntVar(&cfg.warmupMax, "warmup-max", 1000, "largest N whose opstatus runs start with a warm-up pass (above it the first pass is measured)")
	fs.BoolVar(&cfg.fromIdle, "from-idle", false, "opstatus runs measure their first pass, poll starting from its always-ready instances (none by default), without a warm-up or a wait for scale-out")
	fs.IntVar(&cfg.coldRuns, "cold-runs", 11, "cold starts to time (the median is reported)")
	fs.IntVar(&cfg.scanTimes, "scan-times", 3, "standalone scans to time per N")
	fs.IntVar(&cfg.repeat, "repeat", 1, "runs of each opstatus scenario at N=1,000, where the speed-up and CPU targets are judged: tables show the run with the median pass, targets the median of each figure and its range (3 for a range)")
	fs.IntVar(&cfg.backlogN, "backlog-n", 300, "operations in the backlog scenario")
	fs.IntVar(&cfg.backlogInstances, "backlog-instances", 1, "maximumInstanceCount in the backlog scenario")
	fs.DurationVar(&cfg.backlogLatency, "backlog-latency", 5*time.Second, "Cluster Service latency during the slow phase of the backlog scenario (a pass must take longer than the scan interval)")
	fs.DurationVar(&cfg.backlogSlow, "backlog-slow", 2*time.Minute, "length of the slow phase (the queue's growth is fitted over its second half: six scan intervals)")
	fs.DurationVar(&cfg.backlogRecover, "backlog-recover", 30*time.Second, "length of the recovery phase (latency back to -latency)")
	fs.IntVar(&cfg.holdsN, "holds-n", 400, "operations in the holds scenario (the lock hold where the machine is not saturated)")
	fs.IntVar(&cfg.holdsSubs, "holds-subs", 5, "subscriptions whose clusters turn ready before each pass of the holds scenario")
	fs.IntVar(&cfg.holdsRounds, "holds-rounds", 10, "passes of the holds scenario that write changes")
	fs.IntVar(&cfg.pickupN, "pickup-n", 1000, "new operations the frontend writes in the pickup scenario")
	fs.Float64Var(&cfg.pickupRate, "pickup-rate", 20, "new operations per second in the pickup scenario")
	fs.IntVar(&cfg.pickupBackground, "pickup-background", 1000, "pending operations scan and poll keep checking during the pickup scenario")
	fs.IntVar(&cfg.coldPickups, "cold-pickups", 3, "arrivals of the pickupcold scenario, each written once pickup's group has scaled to zero")
	fs.IntVar(&cfg.mixedN, "mixed-n", 4000, "pending operations in the mixed scenario (enough messages for poll to ask for -mixed-instances)")
	fs.IntVar(&cfg.mixedInstances, "mixed-instances", 4, "maximumInstanceCount in the mixed scenario")
	fs.DurationVar(&cfg.mixedLatency, "mixed-latency", 3*time.Second, "Cluster Service latency in the mixed scenario, so that every handler fills its cap")
	fs.DurationVar(&cfg.mixedFor, "mixed-for", 90*time.Second, "how long new operations arrive in the mixed scenario")
	fs.BoolVar(&record, "record", false, "a full run writes its plot and results to "+recordPlot+" and "+recordJSON+" (what BENCHMARKS.md shows) instead of "+outPlot+" and "+outJSON)
	fs.StringVar(&cfg.plotPath, "plot", "", "write the PNG plot here (default "+outPlot+" for a full run, none with -only or -quick)")
	fs.StringVar(&cfg.jsonPath, "json", "", "write every result as JSON here (default "+outJSON+" for a full run, none with -only or -quick)")
	fs.StringVar(&cfg.replot, "replot", "", "run nothing: read the results JSON of an earlier run from this file, print its summary, draw its plot (-plot, default "+outPlot+") and, with -json, write the results again with this summary")
	fs.StringVar(&cfg.logPath, "log", "", "handler and host log file (default a temporary file)")
	fs.StringVar(&cfg.cpuProfile, "cpuprofile", "", "write a CPU profile of the harness process over the whole run to this file")
	fs.StringVar(&cfg.hostJSON, "host-json", "", "experiment: stage this host.json instead of the repository's")
	fs.StringVar(&cfg.handler, "handler", "", "experiment: stage this handler binary instead of ./handler")
	cfg.settings = map[string]string{}
	fs.Func("setting", "experiment: NAME=VALUE, an app setting for every handler (repeatable)", func(v string) error {
		name, value, ok := strings.Cut(v, "=")
		if !ok || name == "" {
			return fmt.Errorf("want NAME=VALUE")
		}
		cfg.settings[name] = value
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if cfg.alwaysReady, err = hostemu.ParseAlwaysReady(*alwaysReady); err != nil {
		return cfg, fmt.Errorf("-always-ready: %w", err)
	}
	if quick {
		ns, cfg.repeat, cfg.holdsRounds = "1000", 1, min(cfg.holdsRounds, 5)
	}
	if cfg.ns, err = parseInts(ns); err != nil {
		return cfg, fmt.Errorf("-n: %w", err)
	}
	if cfg.instances, err = parseInts(instances); err != nil {
		return cfg, fmt.Errorf("-instances: %w", err)
	}
	if cfg.baselineNs, err = parseInts(baselineNs); err != nil {
		return cfg, fmt.Errorf("-baseline-n: %w", err)
	}
	cfg.only = map[string]bool{}
	if only == "" {
		for _, s := range scenarios {
			cfg.only[s] = all || !slices.Contains(slowScenarios, s)
		}
		plot, results := outPlot, outJSON
		if record {
			plot, results = recordPlot, recordJSON
		}
		if cfg.plotPath == "" && !quick && cfg.replot == "" {
			cfg.plotPath = plot
		}
		if cfg.jsonPath == "" && !quick && cfg.replot == "" {
			cfg.jsonPath = results
		}
	} else {
		for s := range strings.SplitSeq(only, ",") {
			s = strings.TrimSpace(s)
			if !slices.Contains(scenarios, s) {
				return cfg, fmt.Errorf("-only: unknown scenario %q (want %s)", s, strings.Join(scenarios, ", "))
			}
			cfg.only[s] = true
		}
		if record {
			return cfg, fmt.Errorf("-record records a full run only (drop -only)")
		}
	}
	if cfg.latency < 0 || cfg.storageLatency < 0 || cfg.backlogLatency < 0 || cfg.opsPerSub < 1 || cfg.coldRuns < 1 || cfg.scanTimes < 1 || cfg.repeat < 1 {
		return cfg, fmt.Errorf("negative latency, or a count below 1")
	}
	if cfg.pickupN < 1 || cfg.pickupBackground < 1 || cfg.pickupRate <= 0 || cfg.coldPickups < 1 {
		return cfg, fmt.Errorf("-pickup-n, -pickup-background, -cold-pickups: want at least 1; -pickup-rate: want more than 0")
	}
	if cfg.holdsSubs < 1 || cfg.holdsRounds < 1 || cfg.holdsSubs*cfg.holdsRounds > (cfg.holdsN+cfg.opsPerSub-1)/cfg.opsPerSub {
		return cfg, fmt.Errorf("-holds-subs × -holds-rounds: want at least 1 and at most the %d subscriptions of -holds-n", (cfg.holdsN+cfg.opsPerSub-1)/cfg.opsPerSub)
	}
	if cfg.instanceMemory < 0 {
		return cfg, fmt.Errorf("-instance-memory: want 0 or more")
	}
	if cfg.scaleInterval <= 0 || cfg.startDelay < 0 {
		return cfg, fmt.Errorf("-scale-interval not positive or -start-delay negative")
	}
	if cfg.budget < 1 || cfg.budgetN < 1 {
		return cfg, fmt.Errorf("-budget, -budget-n: want at least 1")
	}
	if cfg.batch != "" {
		if _, _, err := parseBatch(cfg.batch); err != nil {
			return cfg, fmt.Errorf("-batch: %w", err)
		}
	}
	if cfg.mixedN < 1 || cfg.mixedLatency < 0 || cfg.mixedFor <= 0 {
		return cfg, fmt.Errorf("-mixed-n below 1, -mixed-latency negative or -mixed-for not positive")
	}
	if cfg.repeat%2 == 0 {
		return cfg, fmt.Errorf("-repeat %d: want an odd number, so that each median is one of the runs", cfg.repeat)
	}
	cfg.progress = os.Stdout
	cfg.command = "go run ./dev/bench"
	if len(args) > 0 {
		cfg.command += " " + strings.Join(args, " ")
	}
	return cfg, nil
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	// The harness shares the cores with what it measures: it collects
	// garbage a quarter as often, trading memory for CPU. Set here rather
	// than through the GOGC variable, which the handlers would inherit.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(harnessGCPercent)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	stopProfile, err := startCPUProfile(cfg.cpuProfile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	err = run(ctx, cfg)
	stopProfile()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// startCPUProfile starts profiling this process into path, when set, and
// returns the function that stops it and closes the file.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "bench: -cpuprofile:", err)
		}
	}, nil
}

func run(ctx context.Context, cfg config) error {
	out := os.Stdout
	if cfg.replot != "" {
		return replot(out, cfg)
	}
	res := &results{Command: cfg.command, Started: time.Now(), Machine: readMachine(), Latency: cfg.latency,
		StorageLatency: cfg.storageLatency, OpsPerSub: cfg.opsPerSub, Budget: cfg.budget}
	fmt.Fprintf(out, "opstatus benchmarks: %s\n", cfg.command)
	res.Machine.print(out)
	fmt.Fprintf(out, "Cluster Service latency %s · Storage latency %s per queue request · N %v · opstatus maximumInstanceCount %v · %d operations per subscription\n",
		cfg.latency, cfg.storageLatency, cfg.ns, cfg.instances, cfg.opsPerSub)
	fmt.Fprintf(out, "Flex Consumption: scan in one instance; poll's instances follow the queue and pickup's the change feed's lag, from the always-ready %v up to the maximum %s, a scale decision every %s, a new instance's handler starting %s after it (assumed); handlers held to %s; CLUSTER_SERVICE_BUDGET %d\n",
		cfg.alwaysReady, limitText(cfg.appWide), cfg.scaleInterval, cfg.startDelay, cpuText(cfg.instanceMemory), cfg.budget)
	if cfg.only["baseline"] {
		fmt.Fprintf(out, "serial baseline: runs at N %v; at the other N it is extrapolated linearly (a serial pass grows with N), marked *\n", cfg.baselineNs)
	}
	fmt.Fprintln(out)

	e, err := startEnv(ctx, cfg)
	if err != nil {
		return err
	}
	defer e.close()
	res.Commit, res.HandlerSHA256 = e.commit, e.handlerSum
	fmt.Fprintf(out, "servers up · handler and host log: %s\n", e.logPath)
	fmt.Fprintf(out, "handler: sha256 %s, copied at start (repository HEAD %s; uncommitted changes are not shown)\n", e.handlerSum, e.commit)
	if cfg.hostJSON != "" || cfg.handler != "" || len(cfg.settings) > 0 || cfg.batch != "" {
		fmt.Fprintf(out, "EXPERIMENT: host.json %q, queue batch %q, handler %q, extra settings %v\n", cfg.hostJSON, cfg.batch, cfg.handler, cfg.settings)
	}
	if st, err := os.Stat(e.handler); err == nil {
		res.BinaryBytes = st.Size()
	}

	if cfg.only["coldstart"] {
		runs, err := coldStart(ctx, e, cfg.coldRuns)
		if err != nil {
			return fmt.Errorf("cold start: %w", err)
		}
		res.Cold = runs
		fmt.Fprintf(out, "cold start (exec → first 2xx on GET /), %d runs: median %s, min %s, max %s\n",
			len(runs), ms(median(runs)), ms(slices.Min(runs)), ms(slices.Max(runs)))
	}
	for _, n := range cfg.ns {
		if cfg.only["scan"] && !cfg.only["opstatus"] {
			fx, err := e.newFixture(ctx, cfg, fmt.Sprintf("scan-n%d", n), n)
			if err != nil {
				return fmt.Errorf("scan N=%d: %w", n, err)
			}
			r, err := scanBench(ctx, e, fx.db, n, cfg.scanTimes)
			e.dropDatabase(context.WithoutCancel(ctx), fx.db)
			if err != nil {
				return fmt.Errorf("scan N=%d: %w", n, err)
			}
			res.Scans = append(res.Scans, r)
			printScan(out, r)
		}
		if cfg.only["opstatus"] {
			if err := runOpstatus(ctx, e, cfg, res, n); err != nil {
				return err
			}
		}
		if cfg.only["baseline"] && slices.Contains(cfg.baselineNs, n) {
			fmt.Fprintf(out, "\nbaseline, N=%d …\n", n)
			r, err := runBaseline(ctx, e, cfg, n)
			if err != nil {
				return fmt.Errorf("baseline N=%d: %w", n, err)
			}
			res.Baseline = append(res.Baseline, r)
			printBaseline(out, r)
		}
	}
	if cfg.only["holds"] {
		fmt.Fprintf(out, "\nholds: N=%d, up to %d poll instances, %d subscriptions' clusters ready before each of %d passes …\n",
			cfg.holdsN, slices.Max(cfg.instances), cfg.holdsSubs, cfg.holdsRounds)
		r, err := runHolds(ctx, e, cfg)
		if err != nil {
			return fmt.Errorf("holds: %w", err)
		}
		res.Holds = &r
		printHolds(out, r)
	}
	if cfg.only["backlog"] {
		fmt.Fprintf(out, "\nbacklog: N=%d, ×%d, Cluster Service at %s for %s, then %s for %s …\n",
			cfg.backlogN, cfg.backlogInstances, cfg.backlogLatency, cfg.backlogSlow, cfg.latency, cfg.backlogRecover)
		r, err := runBacklog(ctx, e, cfg)
		if err != nil {
			return fmt.Errorf("backlog: %w", err)
		}
		res.Backlog = &r
		printBacklog(out, r)
	}
	if cfg.only["pickup"] {
		fmt.Fprintf(out, "\npickup: %d new operations at %.0f/s over %d pending, up to %d poll instances …\n",
			cfg.pickupN, cfg.pickupRate, cfg.pickupBackground, slices.Max(cfg.instances))
		r, err := runPickup(ctx, e, cfg)
		if err != nil {
			return fmt.Errorf("pickup: %w", err)
		}
		res.Pickup = &r
		printPickup(out, r)
	}
	if cfg.only["pickupcold"] {
		fmt.Fprintf(out, "\npickup from idle: %d arrivals over %d pending, up to %d poll instances …\n", cfg.coldPickups, cfg.pickupBackground, slices.Max(cfg.instances))
		r, err := runPickupCold(ctx, e, cfg)
		if err != nil {
			return fmt.Errorf("pickupcold: %w", err)
		}
		res.PickupCold = &r
		printPickupCold(out, r)
	}
	if cfg.only["budget"] {
		fmt.Fprintf(out, "\nbudget: N=%d at Cluster Service %s, poll scaling out, a holder crashed, then idle …\n", cfg.budgetN, budgetLatency)
		r, err := runBudget(ctx, e, cfg, cfg.budgetN)
		if err != nil {
			return fmt.Errorf("budget: %w", err)
		}
		res.Ledger = &r
		printBudget(out, r)
	}
	if cfg.only["mixed"] {
		for _, appWide := range []bool{false, true} {
			fmt.Fprintf(out, "\nmixed (%s): N=%d at Cluster Service %s, maximumInstanceCount %d, %.0f new operations/s for %s …\n",
				reading(appWide), cfg.mixedN, cfg.mixedLatency, cfg.mixedInstances, cfg.pickupRate, cfg.mixedFor)
			r, err := runMixed(ctx, e, cfg, appWide)
			if err != nil {
				return fmt.Errorf("mixed (%s): %w", reading(appWide), err)
			}
			res.Mixed = append(res.Mixed, r)
			printMixed(out, r)
		}
	}
	res.CSInFlightMaxAll = e.inFlightAll.Load()
	res.Finished = time.Now()
	res.Machine.LoadEnd = readLoad()
	res.report(out)
	for _, p := range []*string{&cfg.plotPath, &cfg.jsonPath} {
		if *p != "" && !filepath.IsAbs(*p) && slices.Contains([]string{outPlot, outJSON, recordPlot, recordJSON}, *p) {
			*p = filepath.Join(e.root, *p)
		}
	}
	if cfg.plotPath != "" {
		if err := writePlot(cfg.plotPath, res); err != nil {
			return err
		}
		fmt.Fprintf(out, "plot: %s\n", cfg.plotPath)
	}
	if cfg.jsonPath != "" {
		if err := res.writeJSON(cfg.jsonPath); err != nil {
			return err
		}
		fmt.Fprintf(out, "results: %s\n", cfg.jsonPath)
	}
	return nil
}

// runOpstatus runs opstatus at n operations with each instance count
// (-repeat times at N=1,000). Up to -flip-max each run seeds a dataset of
// its own, which its flip changes; above it the runs measure unchanged
// passes only and share one dataset, whose seeding would otherwise take
// longer than the runs. With the scan scenario, the first dataset is also
// scanned by a handler of its own before the host starts.
func runOpstatus(ctx context.Context, e *env, cfg config, res *results, n int) error {
	out := cfg.progress
	flip := n <= cfg.flipMax
	runs := 1
	if n == targetN1k {
		runs = cfg.repeat
	}
	var shared *fixture
	defer func() {
		if shared != nil {
			e.dropDatabase(context.WithoutCancel(ctx), shared.db)
		}
	}()
	scanned := !cfg.only["scan"]
	for _, k := range cfg.instances {
		for run := 1; run <= runs; run++ {
			of := ""
			if runs > 1 {
				of = fmt.Sprintf(", run %d of %d", run, runs)
			}
			mode := "unchanged passes, then the flip"
			if !flip {
				mode = "unchanged passes only (above -flip-max)"
			}
			fmt.Fprintf(out, "\nopstatus ≤%d, N=%d%s: %s …\n", k, n, of, mode)
			fx := shared
			if fx == nil {
				var err error
				if fx, err = e.newFixture(ctx, cfg, fmt.Sprintf("ops%d-n%d-r%d", k, n, run), n); err != nil {
					return fmt.Errorf("opstatus ×%d N=%d: %w", k, n, err)
				}
				if !flip {
					shared = fx
				}
			}
			if !scanned {
				scanned = true
				sr, err := scanBench(ctx, e, fx.db, n, cfg.scanTimes)
				if err != nil {
					return fmt.Errorf("scan N=%d: %w", n, err)
				}
				res.Scans = append(res.Scans, sr)
				printScan(out, sr)
			}
			r, err := runHost(ctx, e, cfg, fx, k, flip)
			if flip {
				e.dropDatabase(context.WithoutCancel(ctx), fx.db)
			}
			if err != nil {
				return fmt.Errorf("opstatus ×%d N=%d: %w", k, n, err)
			}
			r.Run = run
			res.Opstatus = append(res.Opstatus, r)
			printHost(out, r)
		}
	}
	return nil
}

// replot prints the summary of a results file and draws its plot again.
func replot(out io.Writer, cfg config) error {
	b, err := os.ReadFile(cfg.replot)
	if err != nil {
		return err
	}
	var res results
	if err := json.Unmarshal(b, &res); err != nil {
		return fmt.Errorf("%s: %w", cfg.replot, err)
	}
	res.report(out)
	path := cfg.plotPath
	if path == "" {
		path = outPlot
		if root, err := testenv.RepoRoot(); err == nil {
			path = filepath.Join(root, outPlot)
		}
	}
	if err := writePlot(path, &res); err != nil {
		return err
	}
	fmt.Fprintf(out, "plot: %s\n", path)
	if cfg.jsonPath != "" {
		// The results again, with the summary of this version.
		if err := res.writeJSON(cfg.jsonPath); err != nil {
			return err
		}
		fmt.Fprintf(out, "results: %s\n", cfg.jsonPath)
	}
	return nil
}
