package main

import (
	"fmt"
	"io"
	"maps"
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

// Prices of the estimate: US pay as you go, East US where a region
// matters. The total applies no free grant (a grant is the subscription's,
// shared with every other app in it); the report states what they would
// take off.
var (
	priceFlexGBs = price{"Flex Consumption on-demand execution time", 0.000026, "GB-s",
		"https://learn.microsoft.com/azure/azure-functions/functions-consumption-costs (Flex Consumption example rate)", "2026-12-03",
		"the docs call it an example rate; regional prices differ"}
	priceFlexExecutions = price{"Flex Consumption executions (on demand and always ready)", 0.40, "million executions",
		"https://learn.microsoft.com/azure/azure-functions/functions-consumption-costs (Flex Consumption example rate)", "2026-12-03",
		"the docs call it an example rate; regional prices differ"}
	priceFlexAlwaysReady = price{"Flex Consumption always-ready baseline", 0.000004, "GB-s",
		"meter \"Always Ready Baseline\" of https://azure.microsoft.com/pricing/details/functions/, as a public North Europe table quotes it (€0.0000038 beside €0.000025 on demand), scaled by the US on-demand rate", "2026-12-03",
		"not read in USD from the pricing page"}
	priceFlexReadyGBs = price{"Flex Consumption always-ready execution time", 0.000016, "GB-s",
		"meter \"Always Ready Execution Time\" of https://azure.microsoft.com/pricing/details/functions/, as the same table quotes it (€0.0000149), scaled the same way", "2026-12-03",
		"not read in USD from the pricing page"}
	priceQueueTx = price{"Queue Storage class 1 and class 2 operations, GPv2 LRS", 0.004, "10,000 operations",
		"Azure pricing calculator estimate (East US, 2024-06-24) in microsoft/kernel-memory docs/azure/architecture.md; classes: https://azure.microsoft.com/pricing/details/storage/queues/", "2026-12-03",
		"read from a calculator estimate, not the pricing page; whether a blob lease renewal bills as a queue-priced operation is assumed"}
	priceCosmosManual = price{"Cosmos DB standard (manual) provisioned throughput, single write region", 0.008, "100 RU/s per hour",
		"https://learn.microsoft.com/azure/cosmos-db/understand-your-bill", "2026-12-03",
		"the page's examples date from 2022"}
	priceCosmosAutoscale = price{"Cosmos DB autoscale provisioned throughput, single write region: 1.5× the manual rate, each hour at the most the container scaled to, at least 10 % of its maximum", 0.012, "100 RU/s per hour",
		"https://learn.microsoft.com/azure/cosmos-db/autoscale-faq (\"How is autoscale priced?\", \"How does autoscale show up on my bill?\")", "2026-12-03",
		"derived from the manual rate, whose examples date from 2022"}
	priceLogsGB = price{"Log Analytics analytics-logs ingestion (workspace-based Application Insights)", 2.30, "GB",
		"https://azure.microsoft.com/pricing/details/monitor/ (as quoted by several public cost estimates; the page renders prices client-side)", "2026-12-03",
		"not read from the page itself"}
	priceEP1Hour = price{"Functions Premium EP1 (1 vCPU at $0.173/h + 3.5 GiB at $0.0123/GiB-h)", 0.173 + 3.5*0.0123, "hour",
		"https://azure.microsoft.com/pricing/details/functions/ (Premium vCPU and memory duration meters, as used by public cost tools)", "2026-12-03",
		"not read from the page itself; East US"}
)

// prices lists the table in the order the report prints it.
var prices = []price{priceFlexGBs, priceFlexExecutions, priceFlexAlwaysReady, priceFlexReadyGBs, priceQueueTx,
	priceCosmosManual, priceCosmosAutoscale, priceLogsGB, priceEP1Hour}

// Free grants a month, per subscription (Flex on demand) or billing
// account (logs): https://azure.microsoft.com/pricing/details/functions/
// as Microsoft's Flex billing docs describe it ("minus a free grant"; none
// for always-ready instances) and public tables quote it, and the Monitor
// page's 5 GB. The resource provider's Cosmos DB account has no free tier.
const (
	grantFlexGBs        = 100_000
	grantFlexExecutions = 250_000
	grantLogsGB         = 5
)

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
	// costMonth is the 730 hours a month that Azure's pricing pages and
	// calculator count.
	costMonth = 730 * time.Hour
	// minBilled and billStep are Flex Consumption's billing of an
	// instance's activity period: at least this long, then rounded up to
	// the step.
	minBilled = time.Second
	billStep  = 100 * time.Millisecond
	// leaseRenewal is how often the timer's holder renews its listener
	// lease: halfway through it (SingletonManager.CreateLeaseRenewalTimer).
	leaseRenewal = 30 * time.Second
	// recordBytes is the billed size assumed for one record.
	recordBytes = 1000
	// Status changes assumed per operation over its life: an operation
	// goes Accepted, then Provisioning (or Updating, Deleting), then to a
	// terminal status.
	changesPerOp = 2
	opLife       = 15 * time.Minute
	// templateMaxInstances is the template's maximumInstanceCount (the
	// bench's default -instances): the estimate takes its runs.
	templateMaxInstances = 40
	// feedPollDelay is pickup's feedPollDelay (pickup/function.json): how
	// long the trigger's feed loop waits after a read that found nothing.
	feedPollDelay = 500 * time.Millisecond
	// defaultPickupDuration is a pickup invocation's duration when the run
	// did not record it (results written before it did).
	defaultPickupDuration = 100 * time.Millisecond
	// pickupWindow is how long a stretch of the month's arrivals the
	// estimate lays out to bill pickup's instance.
	pickupWindow = time.Hour
)

// The resource provider's Cosmos DB account as ARO-HCP provisions it
// (config/config.yaml frontend.cosmosDB and dev-infrastructure's
// rp-cosmos containers, read 2026-12-03): each container autoscale, no
// shared database throughput, so a container created without throughput
// (Leases, docs/deploy.md) gets its own manual 400 RU/s, Cosmos DB's
// least.
var rpAutoscaleMax = []struct {
	Container string
	RUs       int
}{{"Resources", 19000}, {"Billing", 4000}, {"Locks", 4000}, {"Fleet", 4000}}

const leasesRUs = 400

// deployment is what the estimate assumes the template deploys.
type deployment struct {
	// MemoryMB is instanceMemoryMB.
	MemoryMB int
	// AlwaysReady is the always-ready instance count of each function
	// group, billed its baseline all month whether or not the run
	// measured the group.
	AlwaysReady map[string]int
	// PickupLeases is the leases of pickup's trigger, one per physical
	// partition of the Operations container; the trigger runs at most one
	// instance per lease.
	PickupLeases int
	// Host is what host.json lets the host log per invocation.
	Host hostLogging
}

// templateDeployment is deploy/azuredeploy.json's defaults: 512 MB
// instances, one always-ready instance each for poll and pickup; one lease
// assumed (a container under 10,000 RU/s and 50 GB has one physical
// partition).
var templateDeployment = deployment{MemoryMB: 512, AlwaysReady: map[string]int{"poll": 1, "pickup": 1}, PickupLeases: 1,
	Host: repoHostLogging()}

// gb is the instance memory in the GB of the GB-s meters.
func (d deployment) gb() float64 { return float64(d.MemoryMB) / 1024 }

// usage is what opstatus used in a run's measured pass besides its Cosmos
// requests, and the handler's log lines of its changed window: the inputs
// of the estimate that the harness measures. The pass can hold more than
// one scan when it outlasts the interval, so the estimate takes it per
// scan.
type usage struct {
	// Scans and Polls count the invocations that started in the pass;
	// Listed is how many operations the scans listed.
	Scans, Polls, Listed int64
	// Busy, Billed and Periods are the totals of Groups.
	Busy, Billed time.Duration
	Periods      int
	// Groups is each function group's execution, billed per instance.
	// Runs recorded before it existed have only the totals.
	Groups []groupUsage `json:",omitempty"`
	// Puts, Receives (empty ones included) and Deletes are the host's
	// queue requests in the pass.
	Puts, Receives, Deletes int64
	// Lines counts the lines the host logged for the handlers in the pass
	// and ChangedLines in the changed window.
	Lines, ChangedLines int64
}

// groupUsage is one function group's execution in a window, billed as
// Flex Consumption bills each of its instances.
type groupUsage struct {
	Function string
	// Instances counts the instances that executed in the window.
	Instances int
	// Busy is the time the instances executed at least one invocation,
	// Billed that time as billed, Periods the activity periods billed.
	Busy, Billed time.Duration
	Periods      int
	// Ran is the time the instances ran as far as their invocations show:
	// from each one's first invocation to the end of its last billed
	// period. Billed never exceeds it.
	Ran time.Duration
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

// instanceBill bills one instance's invocations. The instance is active
// while it executes at least one invocation, so overlapping invocations
// are billed once; an activity period is billed at least minBilled, then
// in billStep steps, and an invocation that starts before the billed end
// of the period before it extends that period: the instance is already
// billed for that time, and is never billed twice for it.
func instanceBill(spans []invSpan) (busy, bill, ran time.Duration, periods int) {
	if len(spans) == 0 {
		return 0, 0, 0, 0
	}
	ss := slices.Clone(spans)
	slices.SortFunc(ss, func(a, b invSpan) int { return a.Start.Compare(b.Start) })
	first := ss[0].Start
	start, end := ss[0].Start, ss[0].End // the period
	runEnd := end                        // the stretch executing without a gap, for busy
	runStart := start
	for _, s := range ss[1:] {
		if s.Start.After(runEnd) {
			busy += runEnd.Sub(runStart)
			runStart, runEnd = s.Start, s.End
		} else if s.End.After(runEnd) {
			runEnd = s.End
		}
		if !s.Start.Before(start.Add(billed(end.Sub(start)))) {
			bill += billed(end.Sub(start))
			periods++
			start, end = s.Start, s.End
			continue
		}
		if s.End.After(end) {
			end = s.End
		}
	}
	busy += runEnd.Sub(runStart)
	bill += billed(end.Sub(start))
	periods++
	return busy, bill, start.Add(billed(end.Sub(start))).Sub(first), periods
}

// activity bills spans per instance and adds the instances up by function
// group (on Flex Consumption each function runs on instances of its own;
// an instance that ran more than one function is a group of its own).
func activity(spans []invSpan) []groupUsage {
	byInstance := map[int][]invSpan{}
	for _, s := range spans {
		byInstance[s.Instance] = append(byInstance[s.Instance], s)
	}
	byGroup := map[string]*groupUsage{}
	for _, ss := range byInstance {
		var fns []string
		for _, s := range ss {
			if !slices.Contains(fns, s.Function) {
				fns = append(fns, s.Function)
			}
		}
		slices.Sort(fns)
		name := strings.Join(fns, "+")
		g := byGroup[name]
		if g == nil {
			g = &groupUsage{Function: name}
			byGroup[name] = g
		}
		busy, bill, ran, periods := instanceBill(ss)
		g.Instances++
		g.Busy += busy
		g.Billed += bill
		g.Ran += ran
		g.Periods += periods
	}
	var out []groupUsage
	for _, g := range byGroup {
		out = append(out, *g)
	}
	slices.SortFunc(out, func(a, b groupUsage) int { return strings.Compare(a.Function, b.Function) })
	return out
}

// total adds up groups.
func total(groups []groupUsage) (t groupUsage) {
	for _, g := range groups {
		t.Instances += g.Instances
		t.Busy += g.Busy
		t.Billed += g.Billed
		t.Ran += g.Ran
		t.Periods += g.Periods
	}
	return t
}

// meter records what the estimate needs from the host emulator: every
// invocation's span and instance, and the count of lines logged for the
// handlers.
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
	u.Groups = activity(spans)
	t := total(u.Groups)
	u.Busy, u.Billed, u.Periods = t.Busy, t.Billed, t.Periods
	u.Puts = b.Host.MessagesEnqueued - a.Host.MessagesEnqueued
	u.Receives = b.Host.Receives - a.Host.Receives
	u.Deletes = b.Host.MessagesDeleted - a.Host.MessagesDeleted
	u.Lines = b.Lines - a.Lines
	return u
}

// medianDuration returns the median length of spans, zero without any.
func medianDuration(spans []invSpan) time.Duration {
	if len(spans) == 0 {
		return 0
	}
	ds := make([]time.Duration, len(spans))
	for i, s := range spans {
		ds[i] = s.End.Sub(s.Start)
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// pickupTimeline lays out one lease's pickup invocations over window when
// new operations arrive evenly at rate a second: the trigger's feed loop
// reads again as soon as an invocation ends, waits feedPollDelay after a
// read that found nothing, and gives each invocation what arrived since
// its last read, each invocation taking dur. All on one instance.
func pickupTimeline(rate float64, dur, window time.Duration) []invSpan {
	if rate <= 0 || dur <= 0 {
		return nil
	}
	t0 := time.Unix(0, 0)
	every := time.Duration(float64(time.Second) / rate)
	var out []invSpan
	var next time.Duration // the next arrival
	for t := time.Duration(0); t < window; {
		if next > t {
			t += feedPollDelay
			continue
		}
		for next <= t {
			next += every
		}
		out = append(out, invSpan{Function: "pickup", Start: t0.Add(t), End: t0.Add(t + dur)})
		t += dur
	}
	return out
}

// groupMonth is one function group's share of the monthly estimate.
type groupMonth struct {
	Function string
	// Instances ran the group's measured (or, for pickup, laid out) work;
	// AlwaysReady of them are always ready.
	Instances, AlwaysReady int
	// Per scan interval: the time billed, busy, the cap (instances ×
	// interval) and whether the billed time reached it, and the
	// executions.
	Billed, Busy, Cap float64
	Capped            bool
	Executions        float64
	// Per month.
	GBs, ExecUSD, BaselineUSD float64
}

// monthly is the estimate at one N: each component's monthly quantity and
// dollars, scaled from one run's measured scan interval.
type monthly struct {
	N, Instances int
	Deployment   deployment
	Intervals    float64
	Groups       []groupMonth
	// Per scan interval.
	Polls, QueueTx, RU, Records, Changes float64
	// Per month.
	GBs, ExecUSD, BaselineUSD float64
	Executions, CallsUSD      float64
	Tx, QueueUSD              float64
	// Cosmos DB: the request units the handlers spend per interval (RU)
	// come in a burst of BurstSeconds (the pass); PeakRUs is opstatus's
	// request units a second in it, plus pickup's feed reads spread over
	// the interval: what opstatus adds to the hour's peak of the
	// resource provider's autoscale containers. CosmosUSD is that peak
	// every hour at the autoscale rate: the most opstatus adds, when its
	// burst lands on the hour's peak; nothing when the resource provider's
	// own peak and opstatus's stay under the containers' 10 % floor.
	// LeasesUSD is pickup's lease container, opstatus's own.
	BurstSeconds, PeakRUs float64
	CosmosUSD, LeasesUSD  float64
	LogGB, LogUSD         float64
	Total, AlwaysOn       float64
	// Grants is what the free grants would take off Total if nothing else
	// in the subscription used them.
	Grants float64
	// UpdateRU is the request units of one status change; zero without a
	// changed window.
	UpdateRU float64
	// With a pickup scenario, per scan interval: the new operations
	// (Arrivals), the trigger's change feed reads and lease requests, and
	// pickup's invocation duration.
	Arrivals, FeedReads, LeaseOps float64
	PickupDuration                time.Duration
	// LedgerBusyRUs and LedgerIdleRUs are the budget ledger's request
	// units a second, measured with the groups busy and idle (addLedger);
	// LeasesRUs the manual throughput the Leases container then needs for
	// the ledger at its busy rate and pickup's lease requests, at least
	// Cosmos DB's least.
	LedgerBusyRUs, LedgerIdleRUs float64
	LeasesRUs                    float64
}

// addLedger adds the budget ledger's measured request units a second,
// busy and idle, and prices the month again.
func (m *monthly) addLedger(busy, idle float64) {
	m.LedgerBusyRUs, m.LedgerIdleRUs = busy, idle
	m.price()
}

// group returns the estimate's group named fn, or nil.
func (m *monthly) group(fn string) *groupMonth {
	for i := range m.Groups {
		if m.Groups[i].Function == fn {
			return &m.Groups[i]
		}
	}
	return nil
}

// estimate scales run h's measured scan interval to a month of N = h.N
// active operations on Flex Consumption deployed as d, with pickup's
// trigger as p measured it when p is not nil. ok is false when the run
// measured no scan.
func estimate(h hostResult, p *pickupResult, d deployment) (m monthly, ok bool) {
	u := h.Usage
	if u == nil || u.Scans == 0 {
		return m, false
	}
	scans := float64(u.Scans)
	per := func(v int64) float64 { return float64(v) / scans }
	m.N, m.Instances, m.Deployment = h.N, h.Instances, d
	m.Intervals = float64(costMonth / scanInterval)
	interval := scanInterval.Seconds()

	groups := u.Groups
	if len(groups) == 0 {
		// Recorded before per-group usage: the totals, on scan's and poll's
		// instances.
		groups = []groupUsage{{Function: "scan+poll", Instances: h.Instances + 1, Busy: u.Busy, Billed: u.Billed, Periods: u.Periods}}
	}
	m.Polls = per(u.Polls)
	for _, g := range groups {
		gm := groupMonth{Function: g.Function, Instances: g.Instances, Billed: g.Billed.Seconds() / scans, Busy: g.Busy.Seconds() / scans}
		switch g.Function {
		case "scan":
			gm.Executions = 1
		case "poll":
			gm.Executions = m.Polls
		default:
			gm.Executions = 1 + m.Polls
		}
		m.Groups = append(m.Groups, gm)
	}
	m.QueueTx = per(u.Puts+u.Receives+u.Deletes) + float64(scanInterval)/float64(leaseRenewal)

	q := h.Unchanged
	m.RU = per(q.Reads)*ruPointRead + per(u.Listed)*ruListedItem + per(q.Writes)*ruReplace + per(q.LockOps)*ruLockOp
	m.Records = float64(d.Host.Timer) + m.Polls*float64(d.Host.Queue) + per(u.Lines)
	if h.Flipped && h.Updated > 0 && h.UnchangedOps > 0 {
		c, upd, ops := h.Changed, float64(h.Updated), float64(h.UnchangedOps)
		more := func(changed, unchanged int64) float64 {
			return max(float64(changed)/upd-float64(unchanged)/ops, 0)
		}
		m.UpdateRU = more(c.Reads, q.Reads)*ruPointRead + more(c.Queries, q.Queries)*ruSmallQuery +
			float64(c.Writes)/upd*ruReplace + float64(c.LockOps)/upd*ruLockOp
		m.Changes = float64(h.N) * changesPerOp * interval / opLife.Seconds()
		m.RU += m.Changes * m.UpdateRU
		m.Records += m.Changes * more(u.ChangedLines, u.Lines)
	}
	m.BurstSeconds = min(max(h.Pass.Seconds(), minBilled.Seconds()), interval)
	m.PeakRUs = m.RU / m.BurstSeconds
	if p != nil {
		m.addPickup(*p)
	}
	m.price()
	return m, true
}

// addPickup adds pickup's trigger to an interval's usage: every operation
// arrives once in its life (N × interval / opLife an interval); the feed
// and lease traffic is the measured quiet rate plus the measured extra per
// arrival; pickup's instance is billed as its lease's feed loop would run
// the month's arrivals (pickupTimeline), at most one instance per lease.
func (m *monthly) addPickup(p pickupResult) {
	interval := scanInterval.Seconds()
	m.Arrivals = float64(m.N) * interval / opLife.Seconds()
	m.FeedReads = p.QuietFeedReads*interval + p.FeedReadsPerArrival*m.Arrivals
	m.LeaseOps = p.QuietLeaseOps*interval + p.LeaseOpsPerArrival*m.Arrivals
	// The feed reads are of the resource provider's Operations container,
	// spread over the interval; the lease requests are of Leases.
	m.RU += m.FeedReads * ruFeedRead
	m.PeakRUs += m.FeedReads * ruFeedRead / interval
	m.PickupDuration = p.PickupDuration
	if m.PickupDuration <= 0 {
		m.PickupDuration = defaultPickupDuration
	}
	leases := max(m.Deployment.PickupLeases, 1)
	spans := pickupTimeline(m.Arrivals/interval/float64(leases), m.PickupDuration, pickupWindow)
	_, bill, _, _ := instanceBill(spans)
	scale := float64(leases) * interval / pickupWindow.Seconds()
	gm := groupMonth{Function: "pickup", Instances: leases, Billed: bill.Seconds() * scale, Executions: float64(len(spans)) * scale}
	for _, s := range spans {
		gm.Busy += s.End.Sub(s.Start).Seconds() * scale
	}
	m.Groups = append(m.Groups, gm)
	// Each invocation's own line ("picked up"); its changes are poll's.
	m.Records += gm.Executions * float64(m.Deployment.Host.Queue+1)
}

// price turns the interval's usage into the month's dollars.
func (m *monthly) price() {
	interval := scanInterval.Seconds()
	gb := m.Deployment.gb()
	m.GBs, m.ExecUSD, m.BaselineUSD, m.Executions = 0, 0, 0, 0
	onDemandGBs := 0.0
	for i := range m.Groups {
		g := &m.Groups[i]
		g.Cap = float64(g.Instances) * interval
		if g.Billed > g.Cap {
			g.Billed, g.Capped = g.Cap, true
		}
		g.AlwaysReady = m.Deployment.AlwaysReady[g.Function]
		g.GBs = g.Billed * gb * m.Intervals
		// The always-ready instances take their share of the group's work.
		ready := 0.0
		if g.Instances > 0 {
			ready = float64(min(g.AlwaysReady, g.Instances)) / float64(g.Instances)
		}
		g.ExecUSD = g.GBs * ((1-ready)*priceFlexGBs.USD + ready*priceFlexReadyGBs.USD)
		g.BaselineUSD = float64(g.AlwaysReady) * alwaysReadyUSD(m.Deployment.MemoryMB)
		onDemandGBs += g.GBs * (1 - ready)
		m.GBs += g.GBs
		m.ExecUSD += g.ExecUSD
		m.Executions += g.Executions * m.Intervals
	}
	for _, n := range m.Deployment.AlwaysReady {
		m.BaselineUSD += float64(n) * alwaysReadyUSD(m.Deployment.MemoryMB)
	}
	m.CallsUSD = m.Executions / 1e6 * priceFlexExecutions.USD

	m.Tx = m.QueueTx * m.Intervals
	m.QueueUSD = m.Tx / 1e4 * priceQueueTx.USD

	hours := costMonth.Hours()
	m.CosmosUSD = m.PeakRUs / 100 * hours * priceCosmosAutoscale.USD
	// Leases holds pickup's leases and the budget ledger; manual
	// throughput is provisioned for the busiest second, in steps of 100.
	load := m.LedgerBusyRUs + m.LeaseOps*ruLeaseOp/interval
	m.LeasesRUs = max(leasesRUs, math.Ceil(load/100)*100)
	m.LeasesUSD = 0
	if m.Arrivals > 0 || m.LedgerBusyRUs > 0 {
		m.LeasesUSD = m.LeasesRUs / 100 * hours * priceCosmosManual.USD
	}

	m.LogGB = m.Records * recordBytes * m.Intervals / 1e9
	m.LogUSD = m.LogGB * priceLogsGB.USD

	rest := m.QueueUSD + m.CosmosUSD + m.LeasesUSD + m.LogUSD
	m.Total = m.ExecUSD + m.BaselineUSD + m.CallsUSD + rest
	m.AlwaysOn = priceEP1Hour.USD*hours + rest
	m.Grants = min(onDemandGBs, grantFlexGBs)*priceFlexGBs.USD +
		min(m.Executions, grantFlexExecutions)/1e6*priceFlexExecutions.USD +
		min(m.LogGB, grantLogsGB)*priceLogsGB.USD
}

// alwaysReadyUSD is what one always-ready instance of memoryMB costs a
// month in baseline alone.
func alwaysReadyUSD(memoryMB int) float64 {
	return float64(memoryMB) / 1024 * costMonth.Seconds() * priceFlexAlwaysReady.USD
}

// rpFloorRUs is the least the resource provider's autoscale containers
// bill each hour: 10 % of each one's maximum.
func rpFloorRUs() int {
	n := 0
	for _, c := range rpAutoscaleMax {
		n += c.RUs / 10
	}
	return n
}

// pickupShare is what pickup adds to the monthly total of run h: what a
// person saves by disabling it.
func pickupShare(h hostResult, p *pickupResult, d deployment) float64 {
	with, _ := estimate(h, p, d)
	// Without pickup the template buys no always-ready instance for it.
	d.AlwaysReady = maps.Clone(d.AlwaysReady)
	delete(d.AlwaysReady, "pickup")
	without, _ := estimate(h, nil, d)
	return with.Total - without.Total
}

// costRun returns the run a month at n is estimated from: one at the
// template's maximumInstanceCount, whose per-process cap is the template's,
// or the judged run.
func (r *results) costRun(n int) (hostResult, bool) {
	if h, ok := r.host(n, templateMaxInstances); ok {
		return h, true
	}
	return r.judged(n)
}

// costNs are the N the report estimates a month for.
var costNs = []int{targetN1k, targetN10k}

// readyList formats always-ready counts as the template names them.
func readyList(ready map[string]int) string {
	var parts []string
	for _, fn := range slices.Sorted(maps.Keys(ready)) {
		parts = append(parts, fmt.Sprintf("function:%s %d", fn, ready[fn]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

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
	d := templateDeployment
	fmt.Fprintf(w, "\nwhat it costs a month on Flex Consumption, as deploy/azuredeploy.json deploys it (%d MB instances; always-ready instances: %s; a month is %.0f h: %s scans, one every %s, each active operation polled once per scan; US prices; no free grant in the totals)\n",
		d.MemoryMB, readyList(d.AlwaysReady), costMonth.Hours(), grouped(float64(costMonth/scanInterval)), secs(scanInterval))
	fmt.Fprintf(w, "  billing: each instance billed memory × the time it executes at least one invocation (concurrent invocations once), each activity period at least %s then in %s steps, an invocation inside a period's billed time extending it; pickup's instance laid out from the month's arrivals, at most one per lease (%d assumed)\n",
		secs(minBilled), ms(billStep), d.PickupLeases)
	for _, p := range prices {
		note := ""
		if p.Doubt != "" {
			note = " [uncertain: " + p.Doubt + "]"
		}
		fmt.Fprintf(w, "  price: %s: %s per %s (%s, read %s)%s\n", p.What, usd(p.USD), p.Unit, p.Source, p.Read, note)
	}
	fmt.Fprintf(w, "  free grants a month, not in the totals (the subscription's, shared with its other apps): Flex on demand %s GB-s and %s executions (none for always-ready instances); Log Analytics %d GB; the resource provider's Cosmos DB account has no free tier\n",
		grouped(grantFlexGBs), grouped(grantFlexExecutions), grantLogsGB)
	fmt.Fprintf(w, "  Cosmos DB as ARO-HCP provisions the resource provider's account: every container autoscale (maximum RU/s:")
	for _, c := range rpAutoscaleMax {
		fmt.Fprintf(w, " %s %s", c.Container, grouped(float64(c.RUs)))
	}
	fmt.Fprintf(w, "), so it already pays %s RU/s every hour (10 %% of each maximum: $%.2f a month, not opstatus's); opstatus adds its request units a second to each hour's peak\n",
		grouped(float64(rpFloorRUs())), float64(rpFloorRUs())/100*costMonth.Hours()*priceCosmosAutoscale.USD)
	fmt.Fprintf(w, "  an always-ready instance costs $%.2f a month at %d MB, $%.2f at 2048 MB (baseline, in the totals; its execution time then bills at %s per GB-s)\n",
		alwaysReadyUSD(d.MemoryMB), d.MemoryMB, alwaysReadyUSD(2048), usd(priceFlexReadyGBs.USD))
	for _, n := range costNs {
		h, ok := r.costRun(n)
		m, measured := r.estimate(h, d)
		if !ok || !measured {
			fmt.Fprintf(w, "N=%d: not measured in this run (needs opstatus at N=%d: the full run, make bench)\n", n, n)
			continue
		}
		u := h.Usage
		per := func(v int64) float64 { return float64(v) / float64(u.Scans) }
		fmt.Fprintf(w, "N=%d, from opstatus ×%d (run %d, its measured pass), per scan interval, × %s intervals:\n", n, h.Instances, h.Run, grouped(m.Intervals))
		for _, g := range m.Groups {
			capped := ""
			if g.Capped {
				capped = " (capped: its instances cannot run longer)"
			}
			from := "measured"
			if g.Function == "pickup" {
				from = fmt.Sprintf("%.1f arrivals laid out, %s an invocation", m.Arrivals, ms(m.PickupDuration))
			}
			fmt.Fprintf(w, "  %-15s %d instance(s), %s: busy %.2f s, billed %.2f s of at most %.0f s%s, %.1f invocations; × %.2f GB = %s GB-s = $%.2f\n",
				g.Function, g.Instances, from, g.Busy, g.Billed, g.Cap, capped, g.Executions, d.gb(), grouped(g.GBs), g.ExecUSD)
		}
		if m.BaselineUSD > 0 {
			fmt.Fprintf(w, "  always ready    %s, each $%.2f a month in baseline = $%.2f\n", readyList(d.AlwaysReady), alwaysReadyUSD(d.MemoryMB), m.BaselineUSD)
		}
		fmt.Fprintf(w, "  executions      %s × %s per million = $%.2f\n", grouped(m.Executions), usd(priceFlexExecutions.USD), m.CallsUSD)
		fmt.Fprintf(w, "  queue           %.1f requests (%.1f puts, %.1f receives counting the empty ones, %.1f deletes, %.2f timer lease renewals) = %s × %s per 10,000 = $%.2f\n",
			m.QueueTx, per(u.Puts), per(u.Receives), per(u.Deletes), float64(scanInterval)/float64(leaseRenewal), grouped(m.Tx), usd(priceQueueTx.USD), m.QueueUSD)
		changes := "no changed window, so no status changes"
		if m.UpdateRU > 0 {
			changes = fmt.Sprintf("%.1f status changes (%d in an operation's %.0f min, assumed) × %.1f RU", m.Changes, changesPerOp, opLife.Minutes(), m.UpdateRU)
		}
		feed := ""
		if m.Arrivals > 0 {
			feed = fmt.Sprintf(" + pickup's %.1f change feed reads × %g RU over the interval", m.FeedReads, ruFeedRead)
		}
		fmt.Fprintf(w, "  Cosmos DB       %s RU (%s point reads × %g, %s listed × %g, %s writes × %g; %s) in a %.1f s pass%s = %s RU/s added to the hour's peak × %.0f h × %s per 100 = $%.2f at most (nothing while the resource provider's own peak and this stay under its containers' floors)\n",
			grouped(m.RU-m.FeedReads*ruFeedRead), grouped(per(h.Unchanged.Reads)), ruPointRead, grouped(per(u.Listed)), ruListedItem, grouped(per(h.Unchanged.Writes)), ruReplace,
			changes, m.BurstSeconds, feed, grouped(m.PeakRUs), costMonth.Hours(), usd(priceCosmosAutoscale.USD), m.CosmosUSD)
		if m.Arrivals > 0 || m.LedgerBusyRUs > 0 {
			fmt.Fprintf(w, "  Leases          pickup's %.1f lease requests × %g RU an interval (%.1f RU/s) + the budget ledger's %.1f RU/s busy (%.1f idle, measured) on the container's own %.0f RU/s (at least %d): $%.2f\n",
				m.LeaseOps, ruLeaseOp, m.LeaseOps*ruLeaseOp/scanInterval.Seconds(), m.LedgerBusyRUs, m.LedgerIdleRUs, m.LeasesRUs, leasesRUs, m.LeasesUSD)
		}
		fmt.Fprintf(w, "  logs            %.1f records (%d per scan and %d per poll or pickup invocation from the host under host.json's logLevel, %.1f handler lines, those of the status changes and one per pickup invocation) × %d bytes (assumed) = %.1f GB × %s = $%.2f\n",
			m.Records, d.Host.Timer, d.Host.Queue, per(u.Lines), recordBytes, m.LogGB, usd(priceLogsGB.USD), m.LogUSD)
		share := ""
		if m.Arrivals > 0 {
			s := pickupShare(h, r.Pickup, d)
			share = fmt.Sprintf(" (pickup's share $%.2f: without it $%.2f)", s, m.Total-s)
		}
		fmt.Fprintf(w, "  total           $%.2f a month%s; the free grants, unused elsewhere, would take off $%.2f; the same work on one always-on EP1 instance: $%.2f ($%.2f of compute, the same queue, Cosmos DB and logs)\n",
			m.Total, share, m.Grants, m.AlwaysOn, priceEP1Hour.USD*costMonth.Hours())
	}
}

// costHeadlines adds the monthly estimates to the headline lines.
func (r *results) costHeadlines() {
	r.add("always_ready_usd_month_per_instance_2048mb", f2(alwaysReadyUSD(2048)))
	r.add("always_ready_usd_month_per_instance_512mb", f2(alwaysReadyUSD(512)))
	for _, n := range costNs {
		h, ok := r.costRun(n)
		if !ok {
			continue
		}
		m, measured := r.estimate(h, templateDeployment)
		if !measured {
			continue
		}
		r.add(fmt.Sprintf("cost_usd_month_n%d", n), f2(m.Total))
		r.add(fmt.Sprintf("cost_usd_month_always_on_n%d", n), f2(m.AlwaysOn))
		if r.Pickup != nil {
			r.add(fmt.Sprintf("cost_usd_month_pickup_n%d", n), f2(pickupShare(h, r.Pickup, templateDeployment)))
		}
	}
}

// estimate is estimate with the run's pickup scenario and, when the budget
// scenario measured it, the ledger's request units.
func (r *results) estimate(h hostResult, d deployment) (monthly, bool) {
	m, ok := estimate(h, r.Pickup, d)
	if ok && r.Ledger != nil && r.Ledger.Ledger {
		m.addLedger(r.Ledger.Busy.RUPerS, r.Ledger.Idle.RUPerS)
	}
	return m, ok
}
