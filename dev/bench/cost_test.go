package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/hostemu"
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

func TestActivity(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	at := func(fn string, inst int, from, to time.Duration) invSpan {
		return invSpan{Function: fn, Instance: inst, Start: t0.Add(from), End: t0.Add(to)}
	}
	ms := func(v int) time.Duration { return time.Duration(v) * time.Millisecond }
	spans := []invSpan{
		// Overlapping polls on one instance are one period, whatever order
		// they are reported in; a gap starts another.
		at("poll", 0, ms(400), ms(900)),
		at("poll", 0, ms(100), ms(500)),
		at("poll", 0, ms(1200), ms(1300)),
		// The scan on the same instance bills on its own: on Flex
		// Consumption it runs on instances of its own.
		at("scan", 0, ms(0), ms(200)),
		// So does another instance's poll that overlaps instance 0's.
		at("poll", 1, ms(150), ms(2450)),
	}
	busy, bill, periods := activity(spans)
	require.Equal(t, 4, periods)
	require.Equal(t, ms(800+100+200+2300), busy)
	require.Equal(t, ms(1000+1000+1000+2300), bill)
}

// hostAtN1000 is a run at N = 1,000 with a flip, as -quick measures one.
func hostAtN1000() hostResult {
	return hostResult{
		N: 1000, Instances: 1, Run: 1, Flipped: true, UnchangedOps: 1000, Updated: 1000,
		Unchanged: requests{CS: 1000, Reads: 1000, Queries: 1},
		Changed:   requests{CS: 2000, Reads: 1000, Queries: 2001, Writes: 3000, LockOps: 500},
		Usage: &usage{Scans: 1, Polls: 10, Listed: 1000, Busy: 1100 * time.Millisecond, Billed: 2 * time.Second, Periods: 2,
			Puts: 10, Receives: 15, Deletes: 10, Lines: 12, ChangedLines: 3012},
	}
}

func TestEstimate(t *testing.T) {
	m, ok := estimate(hostAtN1000(), nil)
	require.True(t, ok)
	require.Equal(t, 259200.0, m.Intervals)

	// 2 s billed × 2 GB × 259,200 intervals at $0.000026 per GB-s.
	require.InDelta(t, 1036800, m.GBs, 1e-6)
	require.InDelta(t, 26.9568, m.ExecUSD, 1e-6)
	// 11 invocations × 259,200 at $0.40 per million.
	require.InDelta(t, 2851200, m.Executions, 1e-6)
	require.InDelta(t, 1.14048, m.CallsUSD, 1e-6)
	// 10 puts + 15 receives + 10 deletes + a third of a lease renewal,
	// × 259,200 at $0.004 per 10,000.
	require.InDelta(t, 9158400, m.Tx, 1e-6)
	require.InDelta(t, 3.66336, m.QueueUSD, 1e-6)
	// A change costs 2 more queries × 3 + 3 writes × 10.8 + 0.5 lock
	// operations × 7 RU; 1,000 operations change twice in 90 intervals.
	require.InDelta(t, 41.9, m.UpdateRU, 1e-9)
	require.InDelta(t, 200.0/9, m.Changes, 1e-9)
	// 1,000 reads + 1,000 listed + 22.2 changes × 41.9 RU = 293 RU/s,
	// provisioned at 600 RU/s for 720 h at $0.008 per 100.
	require.InDelta(t, 2000+200.0/9*41.9, m.RU, 1e-9)
	require.Equal(t, 600, m.ProvisionedRUs)
	require.InDelta(t, 34.56, m.CosmosUSD, 1e-9)
	require.InDelta(t, (2000+200.0/9*41.9)*259200/1e6*0.25, m.Serverless, 1e-6)
	// 3 + 10 × 4 host records + 12 handler lines + 22.2 changes × 3 lines,
	// 1 KB each, × 259,200 at $2.30 per GB.
	require.InDelta(t, 55+200.0/9*3, m.Records, 1e-9)
	require.InDelta(t, 31.536, m.LogGB, 1e-9)
	require.InDelta(t, 72.5328, m.LogUSD, 1e-9)

	require.InDelta(t, 26.9568+1.14048+3.66336+34.56+72.5328, m.Total, 1e-6)
	// EP1 at $0.21605 an hour for 720 h instead of the execution charges.
	require.InDelta(t, 155.556+3.66336+34.56+72.5328, m.AlwaysOn, 1e-6)
}

func TestEstimateWithPickup(t *testing.T) {
	base, ok := estimate(hostAtN1000(), nil)
	require.True(t, ok)
	p := &pickupResult{QuietFeedReads: 2, QuietLeaseOps: 0.1, FeedReadsPerArrival: 0.5, LeaseOpsPerArrival: 1}
	m, ok := estimate(hostAtN1000(), p)
	require.True(t, ok)
	// 1,000 operations arrive once in 90 intervals.
	require.InDelta(t, 100.0/9, m.Arrivals, 1e-9)
	require.InDelta(t, 20+0.5*100.0/9, m.FeedReads, 1e-9)
	require.InDelta(t, 1+100.0/9, m.LeaseOps, 1e-9)
	require.InDelta(t, base.RU+m.FeedReads*1+m.LeaseOps*7, m.RU, 1e-9)
	// A second billed per arrival, on top of scan's and poll's 2 s.
	require.InDelta(t, 100.0/9, m.PickupBilled, 1e-9)
	require.InDelta(t, (2+100.0/9)*2*259200, m.GBs, 1e-6)
	require.InDelta(t, (11+100.0/9)*259200, m.Executions, 1e-6)
	require.InDelta(t, base.Records+100.0/9*5, m.Records, 1e-9)
	require.Greater(t, m.Total, base.Total)
	require.InDelta(t, m.Total-base.Total, pickupShare(hostAtN1000(), p), 1e-9)
	require.InDelta(t, m.ExecUSD+m.CallsUSD+m.QueueUSD+m.CosmosUSD+m.LogUSD, m.Total, 1e-9)
}

func TestEstimateWithoutAChangedWindow(t *testing.T) {
	h := hostAtN1000()
	h.Flipped, h.Updated, h.Changed = false, 0, requests{}
	m, ok := estimate(h, nil)
	require.True(t, ok)
	require.Zero(t, m.UpdateRU)
	require.Zero(t, m.Changes)
	require.InDelta(t, 2000, m.RU, 1e-9, "the unchanged pass alone")
	require.Equal(t, 400, m.ProvisionedRUs)
	require.InDelta(t, 55, m.Records, 1e-9)

	h.Usage = nil
	_, ok = estimate(h, nil)
	require.False(t, ok, "a run recorded before the estimate existed has no usage")
	h.Usage = &usage{}
	_, ok = estimate(h, nil)
	require.False(t, ok, "no scan in the pass")
}

func TestCostRunFollowsFlexScaling(t *testing.T) {
	r := &results{Opstatus: []hostResult{
		{N: 1000, Instances: 1, Pass: time.Second},
		{N: 1000, Instances: 4, Pass: time.Second},
		{N: 10000, Instances: 1, Pass: time.Second},
		{N: 10000, Instances: 4, Pass: time.Second},
	}}
	h, ok := r.costRun(1000)
	require.True(t, ok)
	require.Equal(t, 1, h.Instances, "10 messages: one poll instance")
	h, ok = r.costRun(10000)
	require.True(t, ok)
	require.Equal(t, 4, h.Instances, "100 messages want 9 poll instances; the template allows 4")
	_, ok = r.costRun(50000)
	require.False(t, ok)
}

func TestCostReport(t *testing.T) {
	r := &results{Opstatus: []hostResult{hostAtN1000()}}
	var out bytes.Buffer
	r.report(&out)
	text := out.String()
	require.Contains(t, text, "\ncost_usd_month_n1000=138.85\n")
	require.Contains(t, text, "\ncost_usd_month_always_on_n1000=266.31\n")
	require.NotContains(t, text, "cost_usd_month_n10000=")
	require.Contains(t, text, "N=10000: not measured in this run")
	require.Contains(t, text, "= 1,036,800 GB-s × $0.000026 = $26.96")
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
	host.Options.OnInvocation(hostemu.Invocation{Function: "scan", ID: "s", Start: t0.Add(time.Millisecond), Duration: 100 * time.Millisecond})
	host.Options.OnInvocation(hostemu.Invocation{Function: "poll", ID: "p", Start: t0.Add(50 * time.Millisecond), Duration: 300 * time.Millisecond})
	host.Options.OnInvocation(hostemu.Invocation{Function: "poll", ID: "late", Start: t0.Add(time.Hour), Duration: time.Millisecond})
	host.Options.OnLog(hostemu.LogLine{Text: "scanned"})
	host.Options.OnLog(hostemu.LogLine{Text: "invocation"})
	b := snap{At: t0.Add(time.Minute), Host: hostemu.Counters{MessagesEnqueued: 6, Receives: 10, MessagesDeleted: 6}, Lines: m.loggedLines()}

	require.Equal(t, []string{"s", "p", "late"}, reported, "what the host reported to before is still told")
	require.Equal(t, 2, lines)
	u := m.measure(a, b, []scanRun{{Start: t0.Add(time.Millisecond), Operations: 100}, {Start: t0.Add(-time.Minute), Operations: 7}})
	require.Equal(t, usage{Scans: 1, Polls: 1, Listed: 100, Busy: 400 * time.Millisecond, Billed: 2 * time.Second, Periods: 2,
		Puts: 1, Receives: 3, Deletes: 1, Lines: 2}, u)
}

func TestAlwaysReadyUSD(t *testing.T) {
	// 2 GB for a 30-day month at $0.000004 per GB-s.
	require.InDelta(t, 2*2_592_000*0.000004, alwaysReadyUSD(2048), 1e-9)
	require.InDelta(t, 0.5*2_592_000*0.000004, alwaysReadyUSD(512), 1e-9)
}
