// Command bench is `make bench`: it runs the design opstatus replaces (one
// serial polling loop) and opstatus itself (scan → queue → poll through the
// built handler under the host emulator) on the same data and the same
// local servers, and prints throughput, freshness and cost side by side.
// It ends with one name=value line per headline figure and draws a PNG
// plot. BENCHMARKS.md describes the method and records a run. It never
// ships. scenarios.go's table holds every scenario: what it measures, the
// figures it prints, its flags and the values no flag sets; -h prints it.
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
	"errors"
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
	"github.com/opstatus/opstatus/internal/testenv"
)

// config is a run's settings: the command line, and the values no flag
// sets (each scenario's fixed, in scenarios.go).
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

	// settings are app settings added for experiments.
	settings map[string]string

	plotPath, jsonPath string
	replot             string
	cpuProfile         string
	command            string
	// progress receives progress lines (stdout).
	progress io.Writer

	// The flags as given, before parseFlags reads them into the fields
	// above.
	nsText, instancesText, alwaysReadyText, onlyText string
	quick, all, record                               bool
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
	var cfg config
	fs, _ := flagSets(&cfg)
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if cfg.alwaysReady, err = hostemu.ParseAlwaysReady(cfg.alwaysReadyText); err != nil {
		return cfg, fmt.Errorf("-always-ready: %w", err)
	}
	if cfg.quick {
		cfg.nsText, cfg.repeat, cfg.holdsRounds = "1000", 1, min(cfg.holdsRounds, 5)
	}
	if cfg.ns, err = parseInts(cfg.nsText); err != nil {
		return cfg, fmt.Errorf("-n: %w", err)
	}
	if cfg.instances, err = parseInts(cfg.instancesText); err != nil {
		return cfg, fmt.Errorf("-instances: %w", err)
	}
	cfg.only = map[string]bool{}
	if cfg.onlyText == "" {
		for _, s := range scenarios {
			cfg.only[s] = cfg.all || !slices.Contains(slowScenarios, s)
		}
		plot, results := outPlot, outJSON
		if cfg.record {
			plot, results = recordPlot, recordJSON
		}
		if !cfg.quick && cfg.replot == "" {
			cfg.plotPath, cfg.jsonPath = plot, results
		}
	} else {
		for s := range strings.SplitSeq(cfg.onlyText, ",") {
			s = strings.TrimSpace(s)
			if !slices.Contains(scenarios, s) {
				return cfg, fmt.Errorf("-only: unknown scenario %q (want %s)", s, strings.Join(scenarios, ", "))
			}
			cfg.only[s] = true
		}
		if cfg.record {
			return cfg, fmt.Errorf("-record records a full run only (drop -only)")
		}
	}
	if cfg.latency < 0 || cfg.storageLatency < 0 || cfg.repeat < 1 {
		return cfg, fmt.Errorf("negative latency, or -repeat below 1")
	}
	if cfg.pickupN < 1 || cfg.pickupBackground < 1 || cfg.pickupRate <= 0 {
		return cfg, fmt.Errorf("-pickup-n, -pickup-background: want at least 1; -pickup-rate: want more than 0")
	}
	if subs := (cfg.holdsN + cfg.opsPerSub - 1) / cfg.opsPerSub; cfg.holdsSubs < 1 || cfg.holdsRounds < 1 || cfg.holdsSubs*cfg.holdsRounds > subs {
		return cfg, fmt.Errorf("-holds-subs × -holds-rounds: want at least 1 and at most the holds scenario's %d subscriptions", subs)
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
	if errors.Is(err, flag.ErrHelp) {
		return
	}
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
	if len(cfg.settings) > 0 || cfg.batch != "" {
		fmt.Fprintf(out, "EXPERIMENT: queue batch %q, extra settings %v\n", cfg.batch, cfg.settings)
	}
	if st, err := os.Stat(e.handler); err == nil {
		res.BinaryBytes = st.Size()
	}

	if err := runScenarios(ctx, table, e, cfg, res); err != nil {
		return err
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
	return nil
}
