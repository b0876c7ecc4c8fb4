package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/opstatus/opstatus/dev/hostemu"
)

// price is one published price of the monthly estimate, with where and
// when it was read, so that a reader can check it and see how sure it is.
type price struct {
	What   string
	USD    float64
	Unit   string
	Source string
	Read   string
	// Doubt says what about the price is uncertain, empty when the source
	// states it outright.
	Doubt string
}

// Prices of the estimate: US pay-as-you-go, no free grants or reservations
// applied (a grant is shared by every app of a subscription).
var (
	priceFlexGBs = price{"Flex Consumption on-demand execution time", 0.000026, "GB-s",
		"https://learn.microsoft.com/azure/azure-functions/functions-consumption-costs (Flex Consumption example rate)", "2026-12-01",
		"the docs call it an example rate; regional prices differ"}
	priceFlexExecutions = price{"Flex Consumption on-demand executions", 0.40, "million executions",
		"https://learn.microsoft.com/azure/azure-functions/functions-consumption-costs (Flex Consumption example rate)", "2026-12-01",
		"the docs call it an example rate; regional prices differ"}
	priceFlexAlwaysReady = price{"Flex Consumption always-ready baseline (memory of every always-ready instance, busy or idle)", 0.000004, "GB-s",
		"Azure Retail Prices API meter \"Always Ready Baseline\" as quoted in public cost tools (EUR 0.0000038 against 0.000025 on demand); billing modes: https://learn.microsoft.com/azure/azure-functions/functions-consumption-costs", "2026-12-03",
		"not read from the pricing page; an always-ready instance's execution time is billed on top, at a lower rate than on demand, and replaces on-demand time it would have run anyway"}
	priceQueueTx = price{"Queue Storage class 1 and class 2 operations, GPv2 LRS", 0.004, "10,000 operations",
		"Azure pricing calculator estimate (East US, 2024-06-24) in microsoft/kernel-memory docs/azure/architecture.md; classes: https://azure.microsoft.com/pricing/details/storage/queues/", "2026-12-01",
		"read from a calculator estimate, not the pricing page; whether a blob lease renewal bills as a queue-priced operation is assumed"}
	priceCosmosProvisioned = price{"Cosmos DB standard provisioned throughput, single write region", 0.008, "100 RU/s per hour",
		"https://learn.microsoft.com/azure/cosmos-db/understand-your-bill", "2026-12-01",
		"the page's examples date from 2022"}
	priceCosmosServerless = price{"Cosmos DB serverless request units", 0.25, "million RU",
		"https://learn.microsoft.com/azure/cosmos-db/understand-your-bill", "2026-12-01",
		"the page's examples date from 2022"}
	priceLogsGB = price{"Log Analytics analytics-logs ingestion (workspace-based Application Insights)", 2.30, "GB",
		"https://azure.microsoft.com/pricing/details/monitor/ (as quoted by several public cost estimates; the page renders prices client-side)", "2026-12-01",
		"not read from the page itself; the first 5 GB a month per billing account are free"}
	priceEP1Hour = price{"Functions Premium EP1 (1 vCPU at $0.173/h + 3.5 GiB at $0.0123/GiB-h)", 0.173 + 3.5*0.0123, "hour",
		"https://azure.microsoft.com/pricing/details/functions/ (Premium vCPU and memory duration meters, as used by public cost tools)", "2026-12-01",
		"not read from the page itself; East US"}
)

// prices lists the table in the order the report prints it.
var prices = []price{priceFlexGBs, priceFlexExecutions, priceFlexAlwaysReady, priceQueueTx, priceCosmosProvisioned, priceCosmosServerless, priceLogsGB, priceEP1Hour}

// Request-unit charges of the Cosmos requests opstatus makes, for items
// the size of its own, from the worked examples of
// https://learn.microsoft.com/azure/cosmos-db/understand-request-unit-consumption
// where there is one, else assumed as the report says.
const (
	ruPointRead = 1.0  // the page's point read
	ruReplace   = 10.8 // the page's replace that changes a few index terms
	ruLockOp    = 7.0  // the page's create or delete: the lock item is smaller than its item
	// ruListedItem is what a scan pays per operation it lists: assumed to
	// be a point read's worth, as the page says of a feed; a query also pays
	// for its index lookups.
	ruListedItem = 1.0
	// ruSmallQuery is a one-item query in a partition (the lookups of an
	// update): assumed, more than a point read.
	ruSmallQuery = 3.0
	// ruFeedRead is a read of the change feed, most of them finding
	// nothing: assumed a point read's worth. ruLeaseOp is a request of the
	// trigger to its lease container (a renewal or checkpoint replaces a
	// small item): assumed a small item's write, as ruLockOp.
	ruFeedRead = 1.0
	ruLeaseOp  = ruLockOp
)

// Shape of the month the estimate scales to.
const (
	// costMonth is in whole days, as Cosmos DB's billing examples count a
	// month.
	costMonth = 30 * 24 * time.Hour
	// instanceGB is the default instanceMemoryMB of deploy/azuredeploy.json
	// in the GB of the GB-s meter.
	instanceGB = 2.0
	// minBilled and billStep are Flex Consumption's billing of an activity
	// period: at least this long, then rounded up to the step.
	minBilled = time.Second
	billStep  = 100 * time.Millisecond
	// leaseRenewal is how often the timer's holder renews its listener
	// lease: halfway through it (SingletonManager.CreateLeaseRenewalTimer).
	leaseRenewal = 30 * time.Second
	// Host records per invocation in Application Insights besides the
	// handler's lines: the request, "Executing" and "Executed", and for a
	// queue trigger "Trigger Details".
	hostRecordsTimer = 3
	hostRecordsQueue = 4
	// hostRecordsPickup is the same for a Cosmos DB trigger's invocation,
	// assumed as a queue trigger's, plus the handler's "picked up" line.
	hostRecordsPickup = hostRecordsQueue + 1
	// recordBytes is the billed size assumed for one record.
	recordBytes = 1000
	// Status changes assumed per operation over its life: an operation
	// goes Accepted, then Provisioning (or Updating, Deleting), then to a
	// terminal status.
	changesPerOp = 2
	opLife       = 15 * time.Minute
	// cosmosHeadroom is the provisioned throughput over the average the
	// estimate buys, since each interval's work comes in one burst.
	cosmosHeadroom = 2
	// templateMaxInstances is the template's default maximumInstanceCount.
	templateMaxInstances = 4
)

// usage is what opstatus used in a run's measured pass besides its Cosmos
// requests, and the handler's log lines of its changed window: the inputs
// of the estimate that the harness measures. The pass can hold more than
// one scan when it outlasts the interval, so the estimate takes it per
// scan.
type usage struct {
	// Scans and Polls count the invocations that started in the pass;
	// Listed is how many operations the scans listed.
	Scans, Polls, Listed int64
	// Busy is the time spent executing at least one invocation, summed
	// over function groups (a function and an instance: on Flex
	// Consumption each function runs on instances of its own); Billed is
	// that time as Flex Consumption bills it, period by period.
	Busy, Billed time.Duration
	Periods      int
	// Puts, Receives (empty ones included) and Deletes are the host's
	// queue requests in the pass.
	Puts, Receives, Deletes int64
	// Lines counts the lines the host logged for the handlers in the pass
	// and ChangedLines in the changed window.
	Lines, ChangedLines int64
}

// billed returns what Flex Consumption bills for an activity period.
func billed(d time.Duration) time.Duration {
	if d <= minBilled {
		return minBilled
	}
	return (d + billStep - 1) / billStep * billStep
}

// invSpan is the span of one invocation on one instance.
type invSpan struct {
	Function   string
	Instance   int
	Start, End time.Time
}

// activity merges the spans of each function group into the periods when
// it executed at least one invocation, and returns their total, what
// Flex Consumption bills for them, and how many there were.
func activity(spans []invSpan) (busy, bill time.Duration, periods int) {
	type group struct {
		fn   string
		inst int
	}
	by := map[group][]invSpan{}
	for _, s := range spans {
		g := group{s.Function, s.Instance}
		by[g] = append(by[g], s)
	}
	for _, ss := range by {
		slices.SortFunc(ss, func(a, b invSpan) int { return a.Start.Compare(b.Start) })
		start, end := ss[0].Start, ss[0].End
		flush := func() {
			busy += end.Sub(start)
			bill += billed(end.Sub(start))
			periods++
		}
		for _, s := range ss[1:] {
			if s.Start.After(end) {
				flush()
				start, end = s.Start, s.End
				continue
			}
			if s.End.After(end) {
				end = s.End
			}
		}
		flush()
	}
	return busy, bill, periods
}

// meter records what the estimate needs from the host emulator: every
// invocation's span and the count of lines logged for the handlers.
type meter struct {
	mu    sync.Mutex
	spans []invSpan
	lines int64
}

// attachMeter returns a meter that host reports to, besides whatever it
// reported to. Call it once host.Options is set.
func attachMeter(host *hostemu.Host) *meter {
	m := &meter{}
	onInv, onLog := host.Options.OnInvocation, host.Options.OnLog
	host.Options.OnInvocation = func(inv hostemu.Invocation) {
		if onInv != nil {
			onInv(inv)
		}
		m.invocation(inv)
	}
	host.Options.OnLog = func(l hostemu.LogLine) {
		if onLog != nil {
			onLog(l)
		}
		m.mu.Lock()
		m.lines++
		m.mu.Unlock()
	}
	return m
}

// invocation records an invocation the host reports when it ends.
func (m *meter) invocation(inv hostemu.Invocation) {
	end := time.Now()
	start := inv.Start
	if start.IsZero() {
		start = end.Add(-inv.Duration)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.spans = append(m.spans, invSpan{Function: inv.Function, Instance: inv.Instance, Start: start, End: start.Add(inv.Duration)})
}

// loggedLines returns how many lines the host has logged for the handlers.
func (m *meter) loggedLines() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lines
}

// between returns the spans of the invocations that started in [from, to).
func (m *meter) between(from, to time.Time) []invSpan {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []invSpan
	for _, s := range m.spans {
		if !s.Start.Before(from) && s.Start.Before(to) {
			out = append(out, s)
		}
	}
	return out
}

// measure fills in the usage of the window from snapshot a to snapshot b.
func (m *meter) measure(a, b snap, scans []scanRun) usage {
	spans := m.between(a.At, b.At)
	var u usage
	for _, s := range spans {
		switch s.Function {
		case "scan":
			u.Scans++
		case "poll":
			u.Polls++
		}
	}
	for _, s := range scans {
		if !s.Start.Before(a.At) && s.Start.Before(b.At) {
			u.Listed += int64(s.Operations)
		}
	}
	u.Busy, u.Billed, u.Periods = activity(spans)
	u.Puts = b.Host.MessagesEnqueued - a.Host.MessagesEnqueued
	u.Receives = b.Host.Receives - a.Host.Receives
	u.Deletes = b.Host.MessagesDeleted - a.Host.MessagesDeleted
	u.Lines = b.Lines - a.Lines
	return u
}

// monthly is the estimate at one N: each component's monthly quantity and
// dollars, scaled from one run's measured scan interval.
type monthly struct {
	N, Instances int
	Intervals    float64
	// Per scan interval.
	Polls, Periods, Billed, Busy, QueueTx, RU, Records, Changes float64
	// Per month.
	GBs, ExecUSD          float64
	Executions, CallsUSD  float64
	Tx, QueueUSD          float64
	ProvisionedRUs        int
	CosmosUSD, Serverless float64
	LogGB, LogUSD         float64
	Total, AlwaysOn       float64
	// UpdateRU is the request units of one status change; zero without a
	// changed window.
	UpdateRU float64
	// With a pickup scenario, per scan interval: the new operations
	// (Arrivals), the trigger's change feed reads and lease requests, and
	// the execution time billed for pickup's invocations.
	Arrivals, FeedReads, LeaseOps, PickupBilled float64
}

// estimate scales run h's measured scan interval to a month of N = h.N
// active operations on Flex Consumption, with pickup's trigger as p
// measured it when p is not nil. ok is false when the run measured no
// scan.
func estimate(h hostResult, p *pickupResult) (m monthly, ok bool) {
	u := h.Usage
	if u == nil || u.Scans == 0 {
		return m, false
	}
	scans := float64(u.Scans)
	per := func(v int64) float64 { return float64(v) / scans }
	m.N, m.Instances = h.N, h.Instances
	m.Intervals = float64(costMonth / scanInterval)

	m.Polls, m.Periods = per(u.Polls), float64(u.Periods)/scans
	m.Billed, m.Busy = u.Billed.Seconds()/scans, u.Busy.Seconds()/scans
	m.GBs = m.Billed * instanceGB * m.Intervals
	m.ExecUSD = m.GBs * priceFlexGBs.USD
	m.Executions = (1 + m.Polls) * m.Intervals
	m.CallsUSD = m.Executions / 1e6 * priceFlexExecutions.USD

	m.QueueTx = per(u.Puts+u.Receives+u.Deletes) + float64(scanInterval)/float64(leaseRenewal)
	m.Tx = m.QueueTx * m.Intervals
	m.QueueUSD = m.Tx / 1e4 * priceQueueTx.USD

	q := h.Unchanged
	m.RU = per(q.Reads)*ruPointRead + per(u.Listed)*ruListedItem + per(q.Writes)*ruReplace + per(q.LockOps)*ruLockOp
	m.Records = hostRecordsTimer + m.Polls*hostRecordsQueue + per(u.Lines)
	if h.Flipped && h.Updated > 0 && h.UnchangedOps > 0 {
		c, upd, ops := h.Changed, float64(h.Updated), float64(h.UnchangedOps)
		more := func(changed, unchanged int64) float64 {
			return max(float64(changed)/upd-float64(unchanged)/ops, 0)
		}
		m.UpdateRU = more(c.Reads, q.Reads)*ruPointRead + more(c.Queries, q.Queries)*ruSmallQuery +
			float64(c.Writes)/upd*ruReplace + float64(c.LockOps)/upd*ruLockOp
		m.Changes = float64(h.N) * changesPerOp * float64(scanInterval) / float64(opLife)
		m.RU += m.Changes * m.UpdateRU
		m.Records += m.Changes * more(u.ChangedLines, u.Lines)
	}
	if p != nil {
		m.addPickup(*p)
	}
	avg := m.RU / scanInterval.Seconds()
	m.ProvisionedRUs = int(math.Ceil(cosmosHeadroom*avg/100)) * 100
	hours := costMonth.Hours()
	m.CosmosUSD = float64(m.ProvisionedRUs) / 100 * hours * priceCosmosProvisioned.USD
	m.Serverless = m.RU * m.Intervals / 1e6 * priceCosmosServerless.USD

	m.LogGB = m.Records * recordBytes * m.Intervals / 1e9
	m.LogUSD = m.LogGB * priceLogsGB.USD

	rest := m.QueueUSD + m.CosmosUSD + m.LogUSD
	m.Total = m.ExecUSD + m.CallsUSD + rest
	m.AlwaysOn = priceEP1Hour.USD*hours + rest
	return m, true
}

// addPickup adds pickup's trigger to an interval's usage: every operation
// arrives once in its life (N × interval / opLife an interval); the feed
// and lease traffic is the measured quiet rate plus the measured extra per
// arrival; each arrival is one invocation billed the minimum activity
// period, as the month's arrivals come about a second apart and their
// invocations take milliseconds (the bench's steady arrivals, faster,
// share periods and are billed less).
func (m *monthly) addPickup(p pickupResult) {
	m.Arrivals = float64(m.N) * float64(scanInterval) / float64(opLife)
	m.FeedReads = p.QuietFeedReads*scanInterval.Seconds() + p.FeedReadsPerArrival*m.Arrivals
	m.LeaseOps = p.QuietLeaseOps*scanInterval.Seconds() + p.LeaseOpsPerArrival*m.Arrivals
	m.RU += m.FeedReads*ruFeedRead + m.LeaseOps*ruLeaseOp
	m.PickupBilled = m.Arrivals * minBilled.Seconds()
	m.Billed += m.PickupBilled
	m.GBs = m.Billed * instanceGB * m.Intervals
	m.ExecUSD = m.GBs * priceFlexGBs.USD
	m.Executions += m.Arrivals * m.Intervals
	m.CallsUSD = m.Executions / 1e6 * priceFlexExecutions.USD
	m.Records += m.Arrivals * hostRecordsPickup
}

// pickupShare is what pickup adds to the monthly total of run h: what a
// person saves by disabling it.
func pickupShare(h hostResult, p *pickupResult) float64 {
	with, _ := estimate(h, p)
	without, _ := estimate(h, nil)
	return with.Total - without.Total
}

// costRun returns the run a month at n is estimated from: the instance
// count Flex Consumption would scale poll to (one per 12 queued messages
// of 100 operations, up to the template's limit), or the judged run.
func (r *results) costRun(n int) (hostResult, bool) {
	k := min(max((n+1199)/1200, 1), templateMaxInstances)
	if h, ok := r.host(n, k); ok {
		return h, true
	}
	return r.judged(n)
}

// costNs are the N the report estimates a month for.
var costNs = []int{targetN1k, targetN10k}

// usd formats a price without an exponent.
func usd(v float64) string { return "$" + strconv.FormatFloat(v, 'f', -1, 64) }

// grouped formats v rounded to an integer, with thousands separators.
func grouped(v float64) string {
	digits := strconv.FormatFloat(math.Round(v), 'f', 0, 64)
	var b strings.Builder
	for i, d := range digits {
		if i > 0 && (len(digits)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(d)
	}
	return b.String()
}

// costs prints the monthly estimate at each of costNs that ran, with its
// inputs, and what is missing for the others.
func (r *results) costs(w io.Writer) {
	fmt.Fprintf(w, "\nwhat it costs a month on Flex Consumption (%.0f GB instances, the template's default; a month is %s scans, one every %s, each active operation polled once per scan; US prices, no free grants)\n",
		instanceGB, grouped(float64(costMonth/scanInterval)), secs(scanInterval))
	for _, p := range prices {
		note := ""
		if p.Doubt != "" {
			note = " [uncertain: " + p.Doubt + "]"
		}
		fmt.Fprintf(w, "  price: %s: %s per %s (%s, read %s)%s\n", p.What, usd(p.USD), p.Unit, p.Source, p.Read, note)
	}
	for _, n := range costNs {
		h, ok := r.costRun(n)
		m, measured := estimate(h, r.Pickup)
		if !ok || !measured {
			fmt.Fprintf(w, "N=%d: not measured in this run (needs opstatus at N=%d: the full run, make bench)\n", n, n)
			continue
		}
		u := h.Usage
		per := func(v int64) float64 { return float64(v) / float64(u.Scans) }
		fmt.Fprintf(w, "N=%d, from opstatus ×%d (run %d, its measured pass), per scan interval, × %s intervals:\n", n, h.Instances, h.Run, grouped(m.Intervals))
		fmt.Fprintf(w, "  execution time  busy %.2f s in %.1f activity periods of scan and poll instances, billed %.2f s with pickup's %.1f s (%s at least, then in %s steps) × %.0f GB = %s GB-s × %s = $%.2f\n",
			m.Busy, m.Periods, m.Billed, m.PickupBilled, secs(minBilled), ms(billStep), instanceGB, grouped(m.GBs), usd(priceFlexGBs.USD), m.ExecUSD)
		fmt.Fprintf(w, "  executions      1 scan + %.1f polls + %.1f pickups = %s × %s per million = $%.2f\n",
			m.Polls, m.Arrivals, grouped(m.Executions), usd(priceFlexExecutions.USD), m.CallsUSD)
		fmt.Fprintf(w, "  queue           %.1f requests (%.1f puts, %.1f receives counting the empty ones, %.1f deletes, %.2f timer lease renewals) = %s × %s per 10,000 = $%.2f\n",
			m.QueueTx, per(u.Puts), per(u.Receives), per(u.Deletes), float64(scanInterval)/float64(leaseRenewal), grouped(m.Tx), usd(priceQueueTx.USD), m.QueueUSD)
		changes := "no changed window, so no status changes"
		if m.UpdateRU > 0 {
			changes = fmt.Sprintf("%.1f status changes (%d in an operation's %.0f min, assumed) × %.1f RU", m.Changes, changesPerOp, opLife.Minutes(), m.UpdateRU)
		}
		fmt.Fprintf(w, "  Cosmos DB       %s RU (%s point reads × %g, %s listed × %g, %s writes × %g; %s) = %.0f RU/s on average; provisioned %d RU/s (%d× the average: the work comes in a burst) × %.0f h × %s per 100 = $%.2f (serverless: $%.2f)\n",
			grouped(m.RU), grouped(per(h.Unchanged.Reads)), ruPointRead, grouped(per(u.Listed)), ruListedItem, grouped(per(h.Unchanged.Writes)), ruReplace,
			changes, m.RU/scanInterval.Seconds(), m.ProvisionedRUs, cosmosHeadroom, costMonth.Hours(), usd(priceCosmosProvisioned.USD), m.CosmosUSD, m.Serverless)
		if m.Arrivals > 0 {
			fmt.Fprintf(w, "  pickup          %.1f new operations (each once in its %.0f min, assumed): %.1f s billed (one minimum activity period each) and %.1f invocations, included above; its trigger's %.1f change feed reads × %g and %.1f lease requests × %g RU, included in Cosmos DB (the pickup scenario's rates)\n",
				m.Arrivals, opLife.Minutes(), m.PickupBilled, m.Arrivals, m.FeedReads, ruFeedRead, m.LeaseOps, ruLeaseOp)
		}
		fmt.Fprintf(w, "  logs            %.1f records (%d per scan and %d per poll from the host, %.1f handler lines, those of the status changes) × %d bytes (assumed) = %.1f GB × %s = $%.2f\n",
			m.Records, hostRecordsTimer, hostRecordsQueue, per(u.Lines), recordBytes, m.LogGB, usd(priceLogsGB.USD), m.LogUSD)
		share := ""
		if m.Arrivals > 0 {
			share = fmt.Sprintf(" (pickup's share $%.2f: without it $%.2f)", pickupShare(h, r.Pickup), m.Total-pickupShare(h, r.Pickup))
		}
		fmt.Fprintf(w, "  total           $%.2f a month%s; the same work on one always-on EP1 instance: $%.2f ($%.2f of compute, the same queue, Cosmos DB and logs)\n",
			m.Total, share, m.AlwaysOn, priceEP1Hour.USD*costMonth.Hours())
	}
}

// costHeadlines adds the monthly estimates to the headline lines.
// alwaysReadyUSD is what one always-ready instance of memoryMB costs a
// month in baseline alone.
func alwaysReadyUSD(memoryMB int) float64 {
	return float64(memoryMB) / 1024 * costMonth.Seconds() * priceFlexAlwaysReady.USD
}

func (r *results) costHeadlines() {
	r.add("always_ready_usd_month_per_instance_2048mb", f2(alwaysReadyUSD(2048)))
	r.add("always_ready_usd_month_per_instance_512mb", f2(alwaysReadyUSD(512)))
	for _, n := range costNs {
		h, ok := r.costRun(n)
		if !ok {
			continue
		}
		if m, measured := estimate(h, r.Pickup); measured {
			r.add(fmt.Sprintf("cost_usd_month_n%d", n), f2(m.Total))
			r.add(fmt.Sprintf("cost_usd_month_always_on_n%d", n), f2(m.AlwaysOn))
			if r.Pickup != nil {
				r.add(fmt.Sprintf("cost_usd_month_pickup_n%d", n), f2(pickupShare(h, r.Pickup)))
			}
		}
	}
}
