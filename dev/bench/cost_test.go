package main

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/hostemu"
	"github.com/opstatus/opstatus/internal/testenv"
)

func TestBilled(t *testing.T) {
	for _, tt := range []struct {
		busy, want time.Duration
	}{
		{0, time.Second},
		{200 * time.Millisecond, time.Second},
		{time.Second, time.Second},
		{1010 * time.Millisecond, 1100 * time.Millisecond},
		{2350 * time.Millisecond, 2400 * time.Millisecond},
		{3 * time.Second, 3 * time.Second},
	} {
		require.Equal(t, tt.want, billed(tt.busy), "busy %s", tt.busy)
	}
}

var spanEpoch = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func msd(v int) time.Duration { return time.Duration(v) * time.Millisecond }

// span is an invocation of fn on instance inst from ms from to ms to.
func inv(fn string, inst, from, to int) invSpan {
	return invSpan{Function: fn, Instance: inst, Start: spanEpoch.Add(msd(from)), End: spanEpoch.Add(msd(to))}
}

func TestInstanceBill(t *testing.T) {
	// 111 invocations of 60 ms, one every 90 ms: pickup's stream at
	// N = 10,000, once billed a second each.
	var stream []invSpan
	for i := range 111 {
		stream = append(stream, inv("pickup", 0, i*90, i*90+60))
	}
	for _, tt := range []struct {
		name            string
		spans           []invSpan
		busy, bill, ran int
		periods         int
	}{
		{"nothing", nil, 0, 0, 0, 0},
		{"one short invocation is billed the minimum", []invSpan{inv("poll", 0, 0, 200)}, 200, 1000, 1000, 1},
		{"then in 100 ms steps", []invSpan{inv("poll", 0, 0, 2350)}, 2350, 2400, 2400, 1},
		{"overlapping invocations are billed once, whatever order they come in",
			[]invSpan{inv("poll", 0, 400, 900), inv("poll", 0, 100, 500), inv("poll", 0, 0, 300)}, 900, 1000, 1000, 1},
		{"an invocation inside the billed second joins its period",
			[]invSpan{inv("poll", 0, 0, 100), inv("poll", 0, 500, 600)}, 200, 1000, 1000, 1},
		{"and extends it past the second",
			[]invSpan{inv("poll", 0, 0, 100), inv("poll", 0, 900, 1500)}, 700, 1500, 1500, 1},
		{"one after the billed time starts a period of its own",
			[]invSpan{inv("poll", 0, 0, 100), inv("poll", 0, 1200, 1300)}, 200, 2000, 2200, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			busy, bill, ran, periods := instanceBill(tt.spans)
			require.Equal(t, msd(tt.busy), busy, "busy")
			require.Equal(t, msd(tt.bill), bill, "billed")
			require.Equal(t, msd(tt.ran), ran, "ran")
			require.Equal(t, tt.periods, periods, "periods")
		})
	}

	// The stream of short invocations is billed about its length, not a
	// second each: the periods it breaks into (where rounding up left the
	// next invocation outside the billed time) cost at most a step each.
	busy, bill, ran, periods := instanceBill(stream)
	require.Equal(t, msd(111*60), busy)
	require.Greater(t, periods, 1)
	require.LessOrEqual(t, bill, ran)
	require.LessOrEqual(t, ran, msd(9960)+time.Duration(periods)*billStep)
}

func TestActivity(t *testing.T) {
	groups := activity([]invSpan{
		// Two poll instances overlapping in time are billed separately.
		inv("poll", 1, 100, 500),
		inv("poll", 1, 400, 900),
		inv("poll", 2, 150, 2450),
		// The scan runs on an instance of its own.
		inv("scan", 3, 0, 200),
		// An instance that ran two functions is billed once for both.
		inv("poll", 4, 0, 300),
		inv("scan", 4, 200, 600),
	})
	require.Equal(t, []groupUsage{
		{Function: "poll", Instances: 2, Busy: msd(800 + 2300), Billed: msd(1000 + 2300), Periods: 2, Ran: msd(1000 + 2300)},
		{Function: "poll+scan", Instances: 1, Busy: msd(600), Billed: msd(1000), Periods: 1, Ran: msd(1000)},
		{Function: "scan", Instances: 1, Busy: msd(200), Billed: msd(1000), Periods: 1, Ran: msd(1000)},
	}, groups)
	require.Equal(t, groupUsage{Instances: 4, Busy: msd(3900), Billed: msd(5300), Periods: 4, Ran: msd(5300)}, total(groups))
}

// TestNoGroupBilledMoreThanItsInstancesRan bills random timelines: each
// group's billed time stays within the time its instances ran, from each
// one's first invocation to its last one's end and at most the minimum
// period after.
func TestNoGroupBilledMoreThanItsInstancesRan(t *testing.T) {
	rng := rand.New(rand.NewPCG(30, 5))
	for round := range 200 {
		var spans []invSpan
		ran := map[string]time.Duration{}
		for inst := range 1 + rng.IntN(4) {
			fn := []string{"scan", "poll", "pickup"}[rng.IntN(3)]
			var first, last time.Time
			at := 0
			for range 1 + rng.IntN(50) {
				at += rng.IntN(1500)
				s := inv(fn, round*10+inst, at, at+1+rng.IntN(700))
				spans = append(spans, s)
				if first.IsZero() {
					first = s.Start
				}
				if s.End.After(last) {
					last = s.End
				}
			}
			ran[fn] += last.Sub(first) + minBilled
		}
		for _, g := range activity(spans) {
			require.LessOrEqual(t, g.Billed, g.Ran, "round %d, %s", round, g.Function)
			require.LessOrEqual(t, g.Ran, ran[g.Function], "round %d, %s", round, g.Function)
			require.LessOrEqual(t, g.Busy, g.Billed, "round %d, %s", round, g.Function)
		}
	}
}

func TestPickupTimeline(t *testing.T) {
	// One arrival every 2 s, invocations of 100 ms: each alone, billed the
	// minimum; the feed loop finds it within a poll delay.
	spans := pickupTimeline(0.5, msd(100), 10*time.Second)
	require.Len(t, spans, 5)
	for i, s := range spans {
		arrival := t0Unix(i * 2000)
		require.False(t, s.Start.Before(arrival), "invocation %d", i)
		require.LessOrEqual(t, s.Start.Sub(arrival), msd(100)+feedPollDelay, "invocation %d", i)
		require.Equal(t, msd(100), s.End.Sub(s.Start))
	}
	_, bill, _, periods := instanceBill(spans)
	require.Equal(t, 5*time.Second, bill)
	require.Equal(t, 5, periods)

	// Eleven a second: the loop reads again as soon as an invocation
	// ends, so the instance executes back to back.
	spans = pickupTimeline(100.0/9, msd(100), 10*time.Second)
	require.Len(t, spans, 100)
	_, bill, _, _ = instanceBill(spans)
	require.Equal(t, 10*time.Second, bill)
}

func t0Unix(ms int) time.Time { return time.Unix(0, 0).Add(msd(ms)) }

// hostAtN1000 is a run at N = 1,000 with a flip, as -quick measures one.
func hostAtN1000() hostResult {
	return hostResult{
		N: 1000, Instances: 1, Run: 1, Flipped: true, UnchangedOps: 1000, Updated: 1000, Pass: 2 * time.Second,
		Unchanged: requests{CS: 1000, Reads: 1000, Queries: 1},
		Changed:   requests{CS: 2000, Reads: 1000, Queries: 2001, Writes: 3000, LockOps: 500},
		Usage: &usage{Scans: 1, Polls: 10, Listed: 1000, Busy: 1100 * time.Millisecond, Billed: 2 * time.Second, Periods: 2,
			Groups: []groupUsage{
				{Function: "poll", Instances: 1, Busy: time.Second, Billed: time.Second, Periods: 1, Ran: time.Second},
				{Function: "scan", Instances: 1, Busy: 100 * time.Millisecond, Billed: time.Second, Periods: 1, Ran: time.Second},
			},
			Puts: 10, Receives: 15, Deletes: 10, Lines: 12, ChangedLines: 3012},
	}
}

// onDemand is a 2,048 MB deployment without always-ready instances:
// every execution at the on-demand rate, and the host logging every
// invocation's request, "Executing", "Executed" and trigger details.
var onDemand = deployment{MemoryMB: 2048, AlwaysReady: map[string]int{}, PickupLeases: 1, Host: hostLogging{Timer: 3, Queue: 4}}

func TestEstimate(t *testing.T) {
	m, ok := estimate(hostAtN1000(), nil, onDemand)
	require.True(t, ok)
	require.Equal(t, 262800.0, m.Intervals, "730 h of 10 s intervals")

	// 2 s billed × 2 GB × 262,800 intervals at $0.000026 per GB-s.
	require.InDelta(t, 1051200, m.GBs, 1e-6)
	require.InDelta(t, 27.3312, m.ExecUSD, 1e-6)
	require.Zero(t, m.BaselineUSD, "no always-ready instance")
	// 11 invocations × 262,800 at $0.40 per million.
	require.InDelta(t, 2890800, m.Executions, 1e-6)
	require.InDelta(t, 1.15632, m.CallsUSD, 1e-6)
	// 10 puts + 15 receives + 10 deletes + a third of a lease renewal,
	// × 262,800 at $0.004 per 10,000.
	require.InDelta(t, 9285600, m.Tx, 1e-6)
	require.InDelta(t, 3.71424, m.QueueUSD, 1e-6)
	// A change costs 2 more queries × 3 + 3 writes × 10.8 + 0.5 lock
	// operations × 7 RU; 1,000 operations change twice in 90 intervals.
	require.InDelta(t, 41.9, m.UpdateRU, 1e-9)
	require.InDelta(t, 200.0/9, m.Changes, 1e-9)
	// 1,000 reads + 1,000 listed + 22.2 changes × 41.9 RU in the 2 s
	// pass: 1,466 RU/s on the hour's peak, 730 h at $0.012 per 100.
	ru := 2000 + 200.0/9*41.9
	require.InDelta(t, ru, m.RU, 1e-9)
	require.InDelta(t, 2.0, m.BurstSeconds, 1e-9)
	require.InDelta(t, ru/2, m.PeakRUs, 1e-9)
	require.InDelta(t, ru/2/100*730*0.012, m.CosmosUSD, 1e-9)
	require.Zero(t, m.LeasesUSD, "no pickup, no lease container")
	// 3 + 10 × 4 host records + 12 handler lines + 22.2 changes × 3 lines,
	// 1 KB each, × 262,800 at $2.30 per GB.
	require.InDelta(t, 55+200.0/9*3, m.Records, 1e-9)
	logGB := (55 + 200.0/9*3) * 1000 * 262800 / 1e9
	require.InDelta(t, logGB, m.LogGB, 1e-9)
	require.InDelta(t, logGB*2.30, m.LogUSD, 1e-9)

	rest := m.QueueUSD + m.CosmosUSD + m.LogUSD
	require.InDelta(t, 27.3312+1.15632+rest, m.Total, 1e-6)
	// EP1 at $0.21605 an hour for 730 h instead of the execution charges.
	require.InDelta(t, 157.7165+rest, m.AlwaysOn, 1e-6)
	// The grants would cover 100,000 GB-s, 250,000 executions, 5 GB.
	require.InDelta(t, 2.6+0.1+11.5, m.Grants, 1e-9)

	d := onDemand
	d.MemoryMB = 512
	small, ok := estimate(hostAtN1000(), nil, d)
	require.True(t, ok)
	require.InDelta(t, m.ExecUSD/4, small.ExecUSD, 1e-9, "a quarter of the memory, the same time")
	require.InDelta(t, m.Total-m.ExecUSD*3/4, small.Total, 1e-9)
}

func TestEstimateWithPickup(t *testing.T) {
	base, ok := estimate(hostAtN1000(), nil, onDemand)
	require.True(t, ok)
	p := &pickupResult{QuietFeedReads: 2, QuietLeaseOps: 0.1, FeedReadsPerArrival: 0.5, LeaseOpsPerArrival: 1, PickupDuration: msd(100)}
	m, ok := estimate(hostAtN1000(), p, onDemand)
	require.True(t, ok)
	// 1,000 operations arrive once in 90 intervals.
	require.InDelta(t, 100.0/9, m.Arrivals, 1e-9)
	require.InDelta(t, 20+0.5*100.0/9, m.FeedReads, 1e-9)
	require.InDelta(t, 1+100.0/9, m.LeaseOps, 1e-9)
	// The feed reads add to the resource provider's containers, spread
	// over the interval; the lease requests go to Leases, 400 RU/s manual.
	require.InDelta(t, base.RU+m.FeedReads, m.RU, 1e-9)
	require.InDelta(t, base.PeakRUs+m.FeedReads/10, m.PeakRUs, 1e-9)
	require.InDelta(t, 4*730*0.008, m.LeasesUSD, 1e-9)
	// One arrival every 0.9 s, each found within a poll delay: 11
	// invocations of 100 ms an interval, billed less than one instance can
	// run in it, not 11 s.
	g := m.group("pickup")
	require.NotNil(t, g)
	require.Equal(t, 1, g.Instances)
	require.False(t, g.Capped)
	require.InDelta(t, 100.0/9, g.Executions, 0.01, "one invocation per arrival")
	require.Greater(t, g.Billed, 5.0)
	require.Less(t, g.Billed, g.Executions, "some invocations fall in the billed second of the one before")
	require.InDelta(t, (2+g.Billed)*2*262800, m.GBs, 1e-6)
	require.InDelta(t, (11+g.Executions)*262800, m.Executions, 1e-6)
	require.InDelta(t, base.Records+g.Executions*(4+1), m.Records, 1e-9, "the host's 4 records and the handler's line per invocation")
	require.Greater(t, m.Total, base.Total)
	require.InDelta(t, m.Total-base.Total, pickupShare(hostAtN1000(), p, onDemand), 1e-9)
	require.InDelta(t, m.ExecUSD+m.BaselineUSD+m.CallsUSD+m.QueueUSD+m.CosmosUSD+m.LeasesUSD+m.LogUSD, m.Total, 1e-9)
}

// TestNoGroupBilledMoreThanOneInstanceAnInterval scales pickup to N where
// a second billed per new operation would be more than its instance can
// run: the month bills at most an instance per lease, continuously.
func TestNoGroupBilledMoreThanOneInstanceAnInterval(t *testing.T) {
	p := &pickupResult{QuietFeedReads: 2, QuietLeaseOps: 0.1, FeedReadsPerArrival: 0.5, LeaseOpsPerArrival: 1, PickupDuration: msd(60)}
	for _, n := range []int{1000, 10000, 100000} {
		h := hostAtN1000()
		h.N = n
		for _, leases := range []int{1, 2} {
			d := templateDeployment
			d.PickupLeases = leases
			m, ok := estimate(h, p, d)
			require.True(t, ok)
			for _, g := range m.Groups {
				require.LessOrEqual(t, g.Billed, float64(g.Instances)*scanInterval.Seconds(), "N=%d, %d leases, %s", n, leases, g.Function)
			}
			if n >= 10000 {
				// 111 or more arrivals an interval keep each lease's
				// instance in billed periods most of the interval.
				require.Greater(t, m.group("pickup").Billed, float64(leases)*8, "N=%d, %d leases", n, leases)
			}
		}
	}
	// A measured group that billed more than its instances can run in an
	// interval (a pass longer than the interval) is capped.
	h := hostAtN1000()
	h.Usage.Groups[0].Billed = 25 * time.Second
	m, ok := estimate(h, nil, templateDeployment)
	require.True(t, ok)
	require.True(t, m.group("poll").Capped)
	require.InDelta(t, 10.0, m.group("poll").Billed, 1e-9)
}

func TestAlwaysReadyUSD(t *testing.T) {
	// One always-ready instance for 730 h at $0.000004 per GB-s.
	require.InDelta(t, 2*2_628_000*0.000004, alwaysReadyUSD(2048), 1e-9)
	require.InDelta(t, 0.5*2_628_000*0.000004, alwaysReadyUSD(512), 1e-9)
}

func TestAlwaysReady(t *testing.T) {
	p := &pickupResult{QuietFeedReads: 2, QuietLeaseOps: 0.1, FeedReadsPerArrival: 0.5, LeaseOpsPerArrival: 1, PickupDuration: msd(100)}
	base, ok := estimate(hostAtN1000(), p, onDemand)
	require.True(t, ok)
	d := onDemand
	d.AlwaysReady = map[string]int{"pickup": 1, "poll": 2}
	m, ok := estimate(hostAtN1000(), p, d)
	require.True(t, ok)
	// The baseline of three instances; pickup's and poll's execution time
	// at the always-ready rate (poll has two always ready, one ran).
	require.InDelta(t, 3*21.024, m.BaselineUSD, 1e-9)
	for _, fn := range []string{"pickup", "poll"} {
		require.InDelta(t, base.group(fn).GBs*0.000016, m.group(fn).ExecUSD, 1e-9, fn)
	}
	require.InDelta(t, base.group("scan").ExecUSD, m.group("scan").ExecUSD, 1e-9)
	require.InDelta(t, base.Total-base.group("pickup").ExecUSD-base.group("poll").ExecUSD+
		m.group("pickup").ExecUSD+m.group("poll").ExecUSD+m.BaselineUSD, m.Total, 1e-9)

	// Without pickup the template buys no always-ready instance for it, so
	// pickup's share holds its baseline.
	d = onDemand
	d.AlwaysReady = templateDeployment.AlwaysReady
	require.InDelta(t, pickupShare(hostAtN1000(), p, onDemand)+21.024-
		(m.group("pickup").GBs*(0.000026-0.000016)), pickupShare(hostAtN1000(), p, d), 1e-6)
}

// TestTemplateDeployment checks the estimate's deployment against
// deploy/azuredeploy.json: its memory default, and no always-ready
// instance, which Flex takes from functionAppConfig.scaleAndConcurrency.
func TestTemplateDeployment(t *testing.T) {
	root, err := testenv.RepoRoot()
	require.NoError(t, err)
	b, err := os.ReadFile(filepath.Join(root, "deploy", "azuredeploy.json"))
	require.NoError(t, err)
	var tmpl struct {
		Parameters map[string]struct {
			DefaultValue json.RawMessage
		}
		Resources []struct {
			Type       string
			Properties struct {
				FunctionAppConfig struct {
					ScaleAndConcurrency map[string]json.RawMessage
				}
			}
		}
	}
	require.NoError(t, json.Unmarshal(b, &tmpl))
	require.JSONEq(t, "512", string(tmpl.Parameters["instanceMemoryMB"].DefaultValue))
	require.Equal(t, 512, templateDeployment.MemoryMB)
	sites := 0
	for _, r := range tmpl.Resources {
		if r.Type != "Microsoft.Web/sites" {
			continue
		}
		sites++
		sc := r.Properties.FunctionAppConfig.ScaleAndConcurrency
		require.Contains(t, sc, "instanceMemoryMB")
		_, set := sc["alwaysReady"]
		require.Equal(t, len(templateDeployment.AlwaysReady) > 0, set, "the estimate bills the always-ready instances the template sets")
	}
	require.Equal(t, 1, sites)
}

func TestCostRunIsTheTemplates(t *testing.T) {
	r := &results{Opstatus: []hostResult{
		{N: 1000, Instances: 1, Pass: time.Second},
		{N: 1000, Instances: 40, Pass: time.Second},
		{N: 10000, Instances: 1, Pass: time.Second},
	}}
	h, ok := r.costRun(1000)
	require.True(t, ok)
	require.Equal(t, 40, h.Instances, "the template's maximumInstanceCount, and so its per-process cap")
	h, ok = r.costRun(10000)
	require.True(t, ok)
	require.Equal(t, 1, h.Instances, "without a run in the template's regime, the judged one")
	_, ok = r.costRun(50000)
	require.False(t, ok)
}

func TestEstimateWithoutAChangedWindow(t *testing.T) {
	h := hostAtN1000()
	h.Flipped, h.Updated, h.Changed = false, 0, requests{}
	m, ok := estimate(h, nil, templateDeployment)
	require.True(t, ok)
	require.Zero(t, m.UpdateRU)
	require.Zero(t, m.Changes)
	require.InDelta(t, 2000, m.RU, 1e-9, "the unchanged pass alone")
	require.InDelta(t, 1+10+12, m.Records, 1e-9, "host.json: the request of each invocation, and the handler's lines")

	// Runs recorded before per-group usage bill their totals.
	h.Usage.Groups = nil
	m, ok = estimate(h, nil, templateDeployment)
	require.True(t, ok)
	require.Len(t, m.Groups, 1)
	require.InDelta(t, 2.0, m.Groups[0].Billed, 1e-9)
	require.Equal(t, 2, m.Groups[0].Instances)

	h.Usage = nil
	_, ok = estimate(h, nil, templateDeployment)
	require.False(t, ok, "a run recorded before the estimate existed has no usage")
	h.Usage = &usage{}
	_, ok = estimate(h, nil, templateDeployment)
	require.False(t, ok, "no scan in the pass")
}

func TestCostReport(t *testing.T) {
	r := &results{Opstatus: []hostResult{hostAtN1000()}}
	var out bytes.Buffer
	r.report(&out)
	text := out.String()
	m, _ := estimate(hostAtN1000(), nil, templateDeployment)
	require.Contains(t, text, "\ncost_usd_month_n1000="+f2(m.Total)+"\n")
	require.Contains(t, text, "\ncost_usd_month_always_on_n1000="+f2(m.AlwaysOn)+"\n")
	require.NotContains(t, text, "cost_usd_month_n10000=")
	require.Contains(t, text, "N=10000: not measured in this run")
	// poll's execution at the always-ready rate, scan's on demand, and the
	// two always-ready instances' baseline.
	require.Contains(t, text, "billed 1.00 s of at most 10 s, 10.0 invocations; × 0.50 GB = 131,400 GB-s = $2.10")
	require.Contains(t, text, "billed 1.00 s of at most 10 s, 1.0 invocations; × 0.50 GB = 131,400 GB-s = $3.42")
	require.Contains(t, text, "always-ready instances: function:pickup 1, function:poll 1;")
	require.Contains(t, text, "always ready    function:pickup 1, function:poll 1, each $5.26 a month in baseline = $10.51")
	require.Contains(t, text, "free grants a month")
	require.Contains(t, text, "\nalways_ready_usd_month_per_instance_2048mb=21.02\n")
	require.Contains(t, text, "\nalways_ready_usd_month_per_instance_512mb=5.26\n")
	for _, p := range prices {
		require.Contains(t, text, p.Source, "each price is printed with its source")
	}
}

func TestMeter(t *testing.T) {
	var reported []string
	var lines int
	host := &hostemu.Host{}
	host.Options.OnInvocation = func(inv hostemu.Invocation) { reported = append(reported, inv.ID) }
	host.Options.OnLog = func(hostemu.LogLine) { lines++ }
	m := attachMeter(host)

	t0 := time.Now()
	a := snap{At: t0, Host: hostemu.Counters{MessagesEnqueued: 5, Receives: 7, MessagesDeleted: 5}, Lines: m.loggedLines()}
	host.Options.OnInvocation(hostemu.Invocation{Function: "scan", Instance: 1, ID: "s", Start: t0.Add(time.Millisecond), Duration: 100 * time.Millisecond})
	host.Options.OnInvocation(hostemu.Invocation{Function: "poll", Instance: 2, ID: "p", Start: t0.Add(50 * time.Millisecond), Duration: 300 * time.Millisecond})
	host.Options.OnInvocation(hostemu.Invocation{Function: "poll", Instance: 2, ID: "late", Start: t0.Add(time.Hour), Duration: time.Millisecond})
	host.Options.OnLog(hostemu.LogLine{Text: "scanned"})
	host.Options.OnLog(hostemu.LogLine{Text: "invocation"})
	b := snap{At: t0.Add(time.Minute), Host: hostemu.Counters{MessagesEnqueued: 6, Receives: 10, MessagesDeleted: 6}, Lines: m.loggedLines()}

	require.Equal(t, []string{"s", "p", "late"}, reported, "what the host reported to before is still told")
	require.Equal(t, 2, lines)
	u := m.measure(a, b, []scanRun{{Start: t0.Add(time.Millisecond), Operations: 100}, {Start: t0.Add(-time.Minute), Operations: 7}})
	require.Equal(t, usage{Scans: 1, Polls: 1, Listed: 100, Busy: 400 * time.Millisecond, Billed: 2 * time.Second, Periods: 2,
		Groups: []groupUsage{
			{Function: "poll", Instances: 1, Busy: 300 * time.Millisecond, Billed: time.Second, Periods: 1, Ran: time.Second},
			{Function: "scan", Instances: 1, Busy: 100 * time.Millisecond, Billed: time.Second, Periods: 1, Ran: time.Second},
		},
		Puts: 1, Receives: 3, Deletes: 1, Lines: 2}, u)
}

// The ledger's busy rate and pickup's lease requests share the Leases
// container's manual throughput, provisioned in steps of 100 from 400.
func TestLedgerInTheLeasesContainer(t *testing.T) {
	m, ok := estimate(hostAtN1000(), nil, templateDeployment)
	require.True(t, ok)
	require.Zero(t, m.LeasesUSD, "no pickup, no ledger: no Leases container in the estimate")
	m.addLedger(170, 7)
	require.Equal(t, float64(leasesRUs), m.LeasesRUs, "170 RU/s fit in 400")
	at400 := m.LeasesUSD
	require.Positive(t, at400)
	total := m.Total
	m.addLedger(650, 7)
	require.Equal(t, 700.0, m.LeasesRUs)
	require.InDelta(t, at400*7/4, m.LeasesUSD, 1e-9)
	require.InDelta(t, total+at400*3/4, m.Total, 1e-9)
}
