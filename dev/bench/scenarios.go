package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// scenario is one thing bench measures: the name -only takes, what it
// measures, the headline figures (name=value lines) it yields, where <N>
// is an -n value and <k> an -instances value, its own flags and the
// values no flag sets. perN scenarios run once for each -n value, one
// after another for each N in the table's order; the others run once,
// after them.
type scenario struct {
	name     string
	measures string
	figures  []string
	slow     bool // only with -all or -only
	flags    func(fs *flag.FlagSet, c *config)
	fixed    func(c *config)
	perN     func(ctx context.Context, e *env, c config, res *results, n int) error
	run      func(ctx context.Context, e *env, c config, res *results) error
}

// everyRun is the flags and figures shared by every scenario.
var everyRun = scenario{
	name:     "every run",
	measures: "the regime every scenario runs in, and what any run reports",
	figures: []string{"binary_mib", "cs_budget", "cs_in_flight_max",
		"always_ready_usd_month_per_instance_2048mb", "always_ready_usd_month_per_instance_512mb"},
	fixed: func(c *config) {
		c.instanceMemory, c.opsPerSub, c.settings = templateDeployment.MemoryMB, 4, map[string]string{}
	},
	flags: func(fs *flag.FlagSet, c *config) {
		fs.DurationVar(&c.latency, "latency", 50*time.Millisecond, "Cluster Service simulator latency on every status call")
		fs.DurationVar(&c.storageLatency, "storage-latency", 8*time.Millisecond, "delay of every Storage queue request the host emulator makes (a round trip to Azure Storage in the region)")
		fs.StringVar(&c.nsText, "n", "1000,10000,50000", "numbers of pending operations, comma-separated")
		fs.BoolVar(&c.quick, "quick", false, "N = 1,000 only, one run of each scenario, at most 5 rounds of holds, for iteration (overrides -n and -repeat)")
		fs.StringVar(&c.instancesText, "instances", strconv.Itoa(templateMaxInstances), "maximumInstanceCount values for opstatus, comma-separated: poll's instances follow the queue up to it (the template's default)")
		fs.StringVar(&c.alwaysReadyText, "always-ready", "poll=1,pickup=1", "function=count,…: instances a function keeps however little work it has (Flex's alwaysReady; the template's default; \"\" scales poll and pickup to zero)")
		fs.DurationVar(&c.startDelay, "start-delay", defaultStartDelay, "how long an instance a scale decision adds takes before its handler starts: an ASSUMPTION, Flex documents no cold-start time")
		fs.DurationVar(&c.scaleInterval, "scale-interval", 30*time.Second, "how often the scale controller decides poll's instance count (the platform's 30 s)")
		fs.IntVar(&c.budget, "budget", defaultBudget, "CLUSTER_SERVICE_BUDGET: Cluster Service requests the whole app may have in flight, shared by the handlers through the ledger; each also has the template's ceiling CLUSTER_SERVICE_MAX_IN_FLIGHT, 256 a core of its instance")
		fs.StringVar(&c.batch, "batch", "", "experiment: BATCHSIZE+NEWBATCHTHRESHOLD (8+4, 1+0, …) replacing host.json's queues batchSize and newBatchThreshold for the run")
		fs.BoolVar(&c.all, "all", false, "run the slow scenarios too ("+strings.Join(slowScenarios, ", ")+"); without it they run only when -only names them")
		fs.StringVar(&c.onlyText, "only", "", "run only these scenarios, comma-separated: "+strings.Join(scenarios, ", ")+" (default all)")
		fs.BoolVar(&c.record, "record", false, "a full run writes its plot and results to "+recordPlot+" and "+recordJSON+" (what BENCHMARKS.md shows) instead of "+outPlot+" and "+outJSON)
		fs.StringVar(&c.replot, "replot", "", "run nothing: read the results JSON of an earlier run from this file, print its summary and draw its plot to "+outPlot)
		fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the harness process over the whole run to this file")
		fs.Func("setting", "experiment: NAME=VALUE, an app setting for every handler (repeatable)", func(v string) error {
			name, value, ok := strings.Cut(v, "=")
			if !ok || name == "" {
				return fmt.Errorf("want NAME=VALUE, got %q", v)
			}
			c.settings[name] = value
			return nil
		})
	},
}

// table is every scenario, in the order a run takes them.
var table = []scenario{{
	name:     "coldstart",
	measures: "the handler's cold start, held to the CPU of the template's instance: exec to the first 2xx on GET /, the median of 11",
	figures:  []string{"cold_start_ms"},
	fixed:    func(c *config) { c.coldRuns = 11 },
	run: func(ctx context.Context, e *env, c config, res *results) error {
		runs, err := coldStart(ctx, e, c.coldRuns, c.instanceMemory)
		if err != nil {
			return fmt.Errorf("cold start: %w", err)
		}
		res.Cold = runs
		fmt.Fprintf(c.progress, "cold start (exec → first 2xx on GET /), %d runs: median %s, min %s, max %s\n",
			len(runs), ms(median(runs)), ms(slices.Min(runs)), ms(slices.Max(runs)))
		return nil
	},
}, {
	name:     "scan",
	measures: "a scan alone, queue writes included, 3 times at each N (with opstatus, on its first dataset)",
	figures:  []string{"scan_s_n<N>", "scan_ms_n<N>", "scan_hwm_mib_n<N>", "queue_messages_per_scan_n<N>"},
	fixed:    func(c *config) { c.scanTimes = 3 },
	perN: func(ctx context.Context, e *env, c config, res *results, n int) error {
		if c.only["opstatus"] {
			return nil // opstatus scans its first dataset
		}
		fx, err := e.newFixture(ctx, c, fmt.Sprintf("scan-n%d", n), n)
		if err != nil {
			return fmt.Errorf("scan N=%d: %w", n, err)
		}
		r, err := scanBench(ctx, e, fx.db, n, c.scanTimes)
		e.dropDatabase(context.WithoutCancel(ctx), fx.db)
		if err != nil {
			return fmt.Errorf("scan N=%d: %w", n, err)
		}
		res.Scans = append(res.Scans, r)
		printScan(c.progress, r)
		return nil
	},
}, {
	name: "opstatus",
	measures: "scan → queue → poll under the host emulator at each N and maximumInstanceCount: unchanged passes, " +
		"then every cluster turning ready (the flip); CPU, Cosmos and Cluster Service calls per operation, lock holds, cost",
	figures: []string{"pass_s_opstatus_x<k>_n<N>", "pass_from_idle_s_x<k>_n<N>", "pass_checked_opstatus_x<k>_n<N>",
		"freshness_p99_s_opstatus_x<k>_n<N>", "freshness_not_succeeded_opstatus_x<k>_n<N>",
		"pass_s_n10000", "freshness_p99_s_n10000", "freshness_p99_s_n1000", "freshness_p99_s_n1000_min", "freshness_p99_s_n1000_max",
		"cpu_ms_per_unchanged_poll", "cpu_ms_per_unchanged_poll_min", "cpu_ms_per_unchanged_poll_max", "cpu_ms_per_changed_op",
		"instance_memory_mb", "runs_n1000", "unchanged_cs_calls_per_poll", "unchanged_cosmos_reads_per_poll",
		"unchanged_cosmos_queries_per_poll", "unchanged_writes_per_poll", "unchanged_lock_ops_per_poll",
		"rss_mib", "rss_mib_n10000", "lock_hold_p99_ms", "frontend_lock_wait_p99_ms", "frontend_lock_busy_pct",
		"lock_hold_p99_ms_n10000", "cores_busy_changed_n10000", "cosmos_requests_per_lock_hold_n10000",
		"cs_budget_used_mean", "cs_in_flight_max_n<N>", "poll_instances_max_n<N>", "poll_instances_max",
		"cost_usd_month_n<N>", "cost_usd_month_always_on_n<N>"},
	flags: func(fs *flag.FlagSet, c *config) {
		fs.IntVar(&c.repeat, "repeat", 1, "runs of each opstatus scenario at N=1,000, where the speed-up and CPU targets are judged: tables show the run with the median pass, targets the median of each figure and its range (3 for a range)")
		fs.IntVar(&c.flipMax, "flip-max", 10000, "largest N whose opstatus runs flip the clusters and measure freshness; above it the runs measure unchanged passes only and share one dataset")
		fs.DurationVar(&c.passTimeout, "pass-timeout", time.Minute, "stop waiting for an opstatus pass after this; the pass time is then a lower bound (≥)")
		fs.IntVar(&c.warmupMax, "warmup-max", 1000, "largest N whose opstatus runs start with a warm-up pass (above it the first pass is measured)")
		fs.BoolVar(&c.fromIdle, "from-idle", false, "opstatus runs measure their first pass, poll starting from its always-ready instances (none by default), without a warm-up or a wait for scale-out")
	},
	fixed: func(c *config) { c.freshTimeout = 90 * time.Second },
	perN:  runOpstatus,
}, {
	name:     "baseline",
	measures: "the serial polling loop opstatus replaces, on the same data, at N = 1,000 (extrapolated linearly to the other N)",
	figures: []string{"pass_s_baseline_n<N>", "freshness_p99_s_baseline_n<N>", "pass_speedup_n<N>", "pass_speedup_x<k>_n<N>",
		"pass_speedup_n1000_min", "pass_speedup_n1000_max", "baseline_cosmos_per_unchanged_check"},
	fixed: func(c *config) { c.baselineNs = []int{1000} },
	perN: func(ctx context.Context, e *env, c config, res *results, n int) error {
		if !slices.Contains(c.baselineNs, n) {
			return nil
		}
		fmt.Fprintf(c.progress, "\nbaseline, N=%d …\n", n)
		r, err := runBaseline(ctx, e, c, n)
		if err != nil {
			return fmt.Errorf("baseline N=%d: %w", n, err)
		}
		res.Baseline = append(res.Baseline, r)
		printBaseline(c.progress, r)
		return nil
	},
}, {
	name:     "holds",
	measures: "the subscription lock's hold where the machine is not saturated: 400 operations, a few subscriptions' clusters ready before each pass",
	figures: []string{"lock_hold_p99_ms_holds", "lock_hold_p99_ms_unsaturated", "lock_hold_unsaturated_rounds",
		"lock_hold_cores_busy_max", "cosmos_requests_per_lock_hold"},
	fixed: func(c *config) { c.holdsN = 400 },
	flags: func(fs *flag.FlagSet, c *config) {
		fs.IntVar(&c.holdsSubs, "holds-subs", 5, "subscriptions whose clusters turn ready before each pass of the holds scenario")
		fs.IntVar(&c.holdsRounds, "holds-rounds", 10, "passes of the holds scenario that write changes")
	},
	run: func(ctx context.Context, e *env, c config, res *results) error {
		fmt.Fprintf(c.progress, "\nholds: N=%d, up to %d poll instances, %d subscriptions' clusters ready before each of %d passes …\n",
			c.holdsN, slices.Max(c.instances), c.holdsSubs, c.holdsRounds)
		r, err := runHolds(ctx, e, c)
		if err != nil {
			return fmt.Errorf("holds: %w", err)
		}
		res.Holds = &r
		printHolds(c.progress, r)
		return nil
	},
}, {
	name: "backlog",
	measures: "the queue's growth when a pass takes longer than the scan interval: 300 operations, one instance, " +
		"Cluster Service at 5 s for 2 min, then back to -latency for 30 s",
	figures: []string{"backlog_max_cs_calls_per_op_per_interval", "backlog_queue_max", "backlog_queue_growth_per_s"},
	slow:    true,
	fixed: func(c *config) {
		c.backlogN, c.backlogInstances = 300, 1
		c.backlogLatency, c.backlogSlow, c.backlogRecover = 5*time.Second, 2*time.Minute, 30*time.Second
	},
	run: func(ctx context.Context, e *env, c config, res *results) error {
		fmt.Fprintf(c.progress, "\nbacklog: N=%d, ×%d, Cluster Service at %s for %s, then %s for %s …\n",
			c.backlogN, c.backlogInstances, c.backlogLatency, c.backlogSlow, c.latency, c.backlogRecover)
		r, err := runBacklog(ctx, e, c)
		if err != nil {
			return fmt.Errorf("backlog: %w", err)
		}
		res.Backlog = &r
		printBacklog(c.progress, r)
		return nil
	},
}, {
	name:     "pickup",
	measures: "new operations the frontend writes, at a steady rate over pending ones: the write's start to pickup's first Cluster Service call",
	figures: []string{"pickup_p99_s", "pickup_cs_calls_per_op", "pickup_max_cs_calls_per_op", "pickup_unchecked",
		"cost_usd_month_pickup_n<N>"},
	flags: func(fs *flag.FlagSet, c *config) {
		fs.IntVar(&c.pickupN, "pickup-n", 1000, "new operations the frontend writes in the pickup scenario")
		fs.Float64Var(&c.pickupRate, "pickup-rate", 20, "new operations per second in the pickup and mixed scenarios")
		fs.IntVar(&c.pickupBackground, "pickup-background", 1000, "pending operations scan and poll keep checking during the pickup and pickupcold scenarios")
	},
	run: func(ctx context.Context, e *env, c config, res *results) error {
		fmt.Fprintf(c.progress, "\npickup: %d new operations at %.0f/s over %d pending, up to %d poll instances …\n",
			c.pickupN, c.pickupRate, c.pickupBackground, slices.Max(c.instances))
		r, err := runPickup(ctx, e, c)
		if err != nil {
			return fmt.Errorf("pickup: %w", err)
		}
		res.Pickup = &r
		printPickup(c.progress, r)
		return nil
	},
}, {
	name:     "pickupcold",
	measures: "pickup after its group scaled to zero: 3 arrivals over -pickup-background pending, each once pickup has no instance",
	figures:  []string{"pickup_cold_p99_s", "pickup_cold_start_delay_s"},
	slow:     true,
	fixed:    func(c *config) { c.coldPickups = 3 },
	run: func(ctx context.Context, e *env, c config, res *results) error {
		fmt.Fprintf(c.progress, "\npickup from idle: %d arrivals over %d pending, up to %d poll instances …\n", c.coldPickups, c.pickupBackground, slices.Max(c.instances))
		r, err := runPickupCold(ctx, e, c)
		if err != nil {
			return fmt.Errorf("pickupcold: %w", err)
		}
		res.PickupCold = &r
		printPickupCold(c.progress, r)
		return nil
	},
}, {
	name: "budget",
	measures: "the Cluster Service budget's ledger at Cluster Service 500 ms: poll scaling out, a holder crashed, then idle; " +
		"a newcomer's wait for its fair share, the crashed entry's reclaim, the ledger's request units",
	figures: []string{"budget_newcomer_p99_s", "budget_reclaim_s", "ledger_ru_per_s_idle", "ledger_ru_per_s_busy", "ledger_412_rate"},
	flags: func(fs *flag.FlagSet, c *config) {
		fs.IntVar(&c.budgetN, "budget-n", 8000, "pending operations in the budget scenario (newcomer, reclaim and the ledger's cost), at Cluster Service 500 ms: enough for more poll instances than the budget fills at their ceiling, so that newcomers wait for others to give back")
	},
	run: func(ctx context.Context, e *env, c config, res *results) error {
		fmt.Fprintf(c.progress, "\nbudget: N=%d at Cluster Service %s, poll scaling out, a holder crashed, then idle …\n", c.budgetN, budgetLatency)
		r, err := runBudget(ctx, e, c, c.budgetN)
		if err != nil {
			return fmt.Errorf("budget: %w", err)
		}
		res.Ledger = &r
		printBudget(c.progress, r)
		return nil
	},
}, {
	name: "mixed",
	measures: "Cluster Service requests in flight under both readings of maximumInstanceCount (per function group, app-wide): " +
		"a 4,000-operation pass at Cluster Service 3 s, at most 4 instances, new operations at -pickup-rate for 90 s",
	figures: []string{"cs_in_flight_max_mixed_per_group", "cs_in_flight_max_mixed_app_wide",
		"poll_instances_max_mixed_per_group", "poll_instances_max_mixed_app_wide",
		"pickup_instances_max_mixed_per_group", "pickup_instances_max_mixed_app_wide"},
	slow: true,
	fixed: func(c *config) {
		c.mixedN, c.mixedInstances, c.mixedLatency, c.mixedFor = 4000, 4, 3*time.Second, 90*time.Second
	},
	run: func(ctx context.Context, e *env, c config, res *results) error {
		for _, appWide := range []bool{false, true} {
			fmt.Fprintf(c.progress, "\nmixed (%s): N=%d at Cluster Service %s, maximumInstanceCount %d, %.0f new operations/s for %s …\n",
				reading(appWide), c.mixedN, c.mixedLatency, c.mixedInstances, c.pickupRate, c.mixedFor)
			r, err := runMixed(ctx, e, c, appWide)
			if err != nil {
				return fmt.Errorf("mixed (%s): %w", reading(appWide), err)
			}
			res.Mixed = append(res.Mixed, r)
			printMixed(c.progress, r)
		}
		return nil
	},
}}

// scenarios are the names -only takes; slowScenarios run only with -all or
// -only: together they take longer than the rest of the run, and their
// figures change less often.
var scenarios, slowScenarios = func() (all, slow []string) {
	for _, s := range table {
		all = append(all, s.name)
		if s.slow {
			slow = append(slow, s.name)
		}
	}
	return all, slow
}()

// runScenarios runs the scenarios of tab that c.only selects in tab's
// order, the perN ones for each N in turn.
func runScenarios(ctx context.Context, tab []scenario, e *env, c config, res *results) error {
	for i := 0; i < len(tab); i++ {
		if tab[i].perN == nil {
			if c.only[tab[i].name] {
				if err := tab[i].run(ctx, e, c, res); err != nil {
					return err
				}
			}
			continue
		}
		j := i
		for j < len(tab) && tab[j].perN != nil {
			j++
		}
		for _, n := range c.ns {
			for _, s := range tab[i:j] {
				if c.only[s.name] {
					if err := s.perN(ctx, e, c, res, n); err != nil {
						return err
					}
				}
			}
		}
		i = j - 1
	}
	return nil
}

// flagSets sets c to every scenario's fixed values and returns the flag set
// that parses the command line into c, and each scenario's own flags by
// name for the help.
func flagSets(c *config) (*flag.FlagSet, map[string]*flag.FlagSet) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	sets := map[string]*flag.FlagSet{}
	for _, s := range append([]scenario{everyRun}, table...) {
		if s.fixed != nil {
			s.fixed(c)
		}
		if s.flags == nil {
			continue
		}
		set := flag.NewFlagSet(s.name, flag.ContinueOnError)
		s.flags(set, c)
		set.VisitAll(func(f *flag.Flag) { fs.Var(f.Value, f.Name, f.Usage) })
		sets[s.name] = set
	}
	fs.Usage = func() { printUsage(fs.Output(), sets) }
	return fs, sets
}

// printUsage prints the scenarios, each with what it measures, the figures it
// prints and its flags.
func printUsage(w io.Writer, sets map[string]*flag.FlagSet) {
	fmt.Fprintln(w, "usage: go run ./dev/bench [flags]")
	fmt.Fprintln(w, "\nA run takes every scenario but the slow ones (-all adds them, -only picks); it prints progress, tables, targets, then one name=value line per figure.")
	for _, s := range append([]scenario{everyRun}, table...) {
		slow := ""
		if s.slow {
			slow = " (slow: -all or -only)"
		}
		fmt.Fprintf(w, "\n%s%s\n  %s\n  figures: %s\n", s.name, slow, s.measures, strings.Join(s.figures, ", "))
		if fs := sets[s.name]; fs != nil {
			fs.SetOutput(w)
			fs.PrintDefaults()
		}
	}
}
