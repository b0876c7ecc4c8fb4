package main

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/opstatus/opstatus/dev/hostemu"
	"github.com/opstatus/opstatus/internal/testenv"
)

// The production regime is Flex Consumption as deploy/azuredeploy.json
// sets it up: scan and poll in instances of their own, poll's following
// the queue up to maximumInstanceCount, and every handler given the
// app-wide Cluster Service budget.
const (
	// defaultBudget is the template's clusterServiceBudget.
	defaultBudget = 256
	// opsPerMessage is the most operations a scan puts in one message.
	opsPerMessage = 100
	// scaleWaitDecisions bounds the decisions a run waits for one that
	// scales poll out before it measures.
	scaleWaitDecisions = 3
	// defaultStartDelay is the assumed time from a scale decision's new
	// instance to its host starting the handler: Flex documents none.
	defaultStartDelay = 2 * time.Second
)

// cpuText says what CPU each handler has.
func cpuText(memoryMB int) string {
	if memoryMB == 0 {
		return "no CPU limit (the machine's cores shared)"
	}
	return fmt.Sprintf("%g core each (instanceMemoryMB %d, by cgroup)", hostemu.CoresOf(memoryMB), memoryMB)
}

// limitText says how maximumInstanceCount bounds the instances.
func limitText(appWide bool) string {
	if appWide {
		return "(app-wide: every group's instances together)"
	}
	return "(per function group)"
}

// pickupReach is how many instances pickup's group can reach here: one
// per lease, and the Cosmos test server's containers have one physical
// partition.
const pickupReach = 1

// templateMaxInFlight is the per-process ceiling the template sets for an
// instance of memoryMB: 256 a core.
func templateMaxInFlight(memoryMB int) int { return 256 * memoryMB / 2048 }

// flexSettings are the Cluster Service settings as the template sets
// them for instances of memoryMB: the app-wide budget, which the handlers
// share through the ledger in the Leases container, and the per-process
// ceiling.
func flexSettings(budget, memoryMB int) map[string]string {
	return map[string]string{
		"CLUSTER_SERVICE_BUDGET":        strconv.Itoa(budget),
		"CLUSTER_SERVICE_MAX_IN_FLIGHT": strconv.Itoa(templateMaxInFlight(memoryMB)),
	}
}

// flexHandlerSettings are the handler's settings for database db under a
// Flex app as the template deploys it: pickup on (its trigger and the
// Leases container the ledger lives in), the budget, GOMAXPROCS, metrics
// to the sink; -setting still wins, for experiments.
func (e *env) flexHandlerSettings(cfg config, db string, maxInstances int) map[string]string {
	s := flexSettings(cfg.budget, cfg.instanceMemory)
	maps.Copy(s, e.pickupSettings())
	maps.Copy(s, e.telemetrySettings())
	if cfg.instanceMemory > 0 {
		// As the template sets it: the instance's cores, at least 1.
		s["GOMAXPROCS"] = strconv.Itoa(max(1, cfg.instanceMemory/2048))
	}
	maps.Copy(s, e.handlerSettings(db))
	return s
}

// hostOptions runs the app as Flex Consumption does, with poll's instances
// up to maxInstances, reporting invocations to onInvocation and scale
// decisions to scale.
func (e *env) hostOptions(cfg config, maxInstances int, onInvocation func(hostemu.Invocation), scale *scaleLog) hostemu.Options {
	return hostemu.Options{
		Instances:      1, // of scan, the timer's function
		Output:         e.log,
		Logger:         slog.New(slog.NewJSONHandler(e.log, &slog.HandlerOptions{Level: slog.LevelWarn})),
		OnInvocation:   onInvocation,
		StorageLatency: cfg.storageLatency,
		Flex: &hostemu.FlexOptions{
			MaximumInstanceCount: maxInstances,
			AppWideLimit:         cfg.appWide,
			AlwaysReady:          cfg.alwaysReady,
			StartDelay:           cfg.startDelay,
			InstanceMemoryMB:     cfg.instanceMemory,
			ScaleInterval:        cfg.scaleInterval,
		},
		OnScale: scale.record,
	}
}

// startedInstances is how many instances a Flex host starts with: scan's
// one, poll's and pickup's always ready.
func startedInstances(cfg config, maxInstances int) int {
	return 1 + min(cfg.alwaysReady["poll"], maxInstances) + min(cfg.alwaysReady["pickup"], maxInstances, pickupReach)
}

// mayScaleOut reports whether a scan of n operations can make the scale
// controller ask for more poll instances than are always ready.
func mayScaleOut(cfg config, hc hostemu.HostConfig, n, maxInstances int) bool {
	per := max(hc.Queues.BatchSize+hc.Queues.NewBatchThreshold, 1)
	messages := (n + opsPerMessage - 1) / opsPerMessage
	return min((messages+per-1)/per, maxInstances) > cfg.alwaysReady["poll"]
}

// scaleLog keeps the scale controller's decisions for poll.
type scaleLog struct {
	mu        sync.Mutex
	decisions []hostemu.ScaleDecision
}

// record is hostemu's OnScale.
func (s *scaleLog) record(d hostemu.ScaleDecision) {
	if d.Function != "poll" {
		return
	}
	s.mu.Lock()
	s.decisions = append(s.decisions, d)
	s.mu.Unlock()
}

func (s *scaleLog) snapshot() []hostemu.ScaleDecision {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]hostemu.ScaleDecision(nil), s.decisions...)
}

// scaledOut reports whether a decision has added poll instances, and how
// many decisions there have been.
func (s *scaleLog) scaledOut() (bool, int) {
	ds := s.snapshot()
	for _, d := range ds {
		if d.After > d.Before {
			return true, len(ds)
		}
	}
	return false, len(ds)
}

// procTracker keeps the CPU time and peak RSS of every handler process of
// a run, those ended by scale-in included: /proc forgets a process once it
// is reaped, and a sum over the live ones would lose its CPU time.
type procTracker struct {
	mu   sync.Mutex
	last map[int]procSample
}

// observe samples pids; a process that has ended keeps its last sample.
func (t *procTracker) observe(pids []int) {
	for _, pid := range pids {
		s, err := readProc(pid)
		if err != nil {
			continue
		}
		t.mu.Lock()
		if t.last == nil {
			t.last = map[int]procSample{}
		}
		t.last[pid] = s
		t.mu.Unlock()
	}
}

// cpu is the CPU time of every process observed, at its last sample.
func (t *procTracker) cpu() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	var total time.Duration
	for _, s := range t.last {
		total += s.CPU
	}
	return total
}

// hwm is the largest peak RSS observed.
func (t *procTracker) hwm() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	var hwm int64
	for _, s := range t.last {
		hwm = max(hwm, s.HWM)
	}
	return hwm
}

// machineCPU is the whole machine's CPU time from /proc/stat: every
// process's, other users' included, so that a figure taken while the
// machine was busy with something else says so.
type machineCPU struct {
	Busy, Total time.Duration
}

// readMachineCPU reads the aggregate "cpu" line of /proc/stat.
func readMachineCPU() (machineCPU, error) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return machineCPU{}, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return machineCPU{}, fmt.Errorf("/proc/stat: empty")
	}
	return parseMachineCPU(sc.Text())
}

// parseMachineCPU parses "cpu user nice system idle iowait irq softirq
// steal …" (in USER_HZ): idle and iowait are idle, the rest busy.
func parseMachineCPU(line string) (machineCPU, error) {
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return machineCPU{}, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var m machineCPU
	for i, v := range f[1:9] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return machineCPU{}, fmt.Errorf("/proc/stat: %w", err)
		}
		d := time.Duration(n) * clockTick
		m.Total += d
		if i != 3 && i != 4 {
			m.Busy += d
		}
	}
	return m, nil
}

// cores is how many of the machine's cores were busy on average over a
// window, for the machine as a whole and for this benchmark's processes.
type cores struct {
	Machine, Ours float64
	// Of is the machine's core count.
	Of int
}

// saturated reports whether the machine had less than a tenth of a core
// to spare.
func (c cores) saturated() bool { return c.Of > 0 && c.Machine >= float64(c.Of)-0.1 }

func (c cores) String() string {
	if c.Of == 0 {
		return "not measured"
	}
	return fmt.Sprintf("%.2f of %d cores busy (this benchmark's processes %.2f)", c.Machine, c.Of, c.Ours)
}

// underLock counts the Cosmos requests that are made only under a
// subscription lock: the lock's own, but a create that met a held lock,
// every request to the Billing container, and every write of an
// Operations or Resources item.
func underLock(counts []testenv.RequestCount) int64 {
	var n int64
	for _, k := range counts {
		switch {
		case k.Kind == "meta":
		case k.Container == "Locks":
			if k.Kind != "create" || k.Status != 409 {
				n += k.Count
			}
		case k.Container == "Billing":
			n += k.Count
		case k.Kind != "read" && k.Kind != "query":
			n += k.Count
		}
	}
	return n
}

// waitScaledOut waits, with a Flex host whose queue can ask for more poll
// instances than are always ready, for the scale controller's first
// decision that adds some (at most scaleWaitDecisions decisions), and for
// the instances it added to run their handlers: the measured pass then
// runs with what the queue asked for.
func (h *hostRun) waitScaledOut(ctx context.Context, cfg config) {
	waitFor(ctx, time.Duration(scaleWaitDecisions+1)*cfg.scaleInterval, func() bool {
		out, n := h.scale.scaledOut()
		return out || n >= scaleWaitDecisions
	})
	waitFor(ctx, 30*time.Second, func() bool {
		ds := h.scale.snapshot()
		return len(ds) > 0 && h.pollInstances(true) >= ds[len(ds)-1].After
	})
}

// pollInstances counts poll's instances; with running, only those whose
// handler runs.
func (h *hostRun) pollInstances(running bool) int {
	n := 0
	for _, in := range h.host.Instances() {
		if in.Group() == "poll" && (!running || in.PID() != 0) {
			n++
		}
	}
	return n
}

// sample observes the handler processes, the poll instances and the CPU
// time; the run's sampler calls it twice a second (the holds scenario's
// ten times), and snap before each snapshot.
func (h *hostRun) sample() {
	h.procs.observe(h.pids())
	n := h.pollInstances(false)
	c := cpuSample{At: time.Now(), Ours: h.procs.cpu() + cpuOf([]int{os.Getpid()})}
	for _, pids := range h.node {
		c.Ours += cpuOf(pids)
	}
	m, err := readMachineCPU()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.pollMax = max(h.pollMax, n)
	if err == nil {
		c.Machine = m
		h.cpu = append(h.cpu, c)
	}
}

// cpuSamples returns the CPU samples so far, in time order.
func (h *hostRun) cpuSamples() []cpuSample {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.cpu)
}

// pollInstancesMax is the most poll instances seen at once, from the
// samples and the scale decisions.
func (h *hostRun) pollInstancesMax() int {
	h.mu.Lock()
	n := h.pollMax
	h.mu.Unlock()
	for _, d := range h.scale.snapshot() {
		n = max(n, d.After)
	}
	return n
}

// design names opstatus at instance count k in the tables: "≤k" when the
// app ran on Flex, poll's instances following the queue up to k; "×k" for
// k fixed instances (results of runs before the Flex regime).
func (r *results) design(k int) string {
	for _, h := range r.Opstatus {
		if h.Instances == k && h.Flex {
			return fmt.Sprintf("opstatus ≤%d", k)
		}
	}
	return fmt.Sprintf("opstatus ×%d", k)
}

// fewest is the smallest instance count of the opstatus runs at n (1
// when none ran): the speed-up and CPU targets compare like with like.
func (r *results) fewest(n int) int {
	k := 0
	for _, h := range r.atN(n) {
		if k == 0 || h.Instances < k {
			k = h.Instances
		}
	}
	return max(k, 1)
}

// instancesText says how many instances a run had.
func (h hostResult) instancesText() string {
	switch {
	case h.Flex:
		return fmt.Sprintf("poll instances following the queue up to %d (%d at most ran)", h.Instances, h.PollInstancesMax)
	case h.Instances == 1:
		return "one instance"
	default:
		return fmt.Sprintf("%d instances", h.Instances)
	}
}

// coresText is how busy the machine was in the run's unchanged window, or
// with changed its changed window, for a target's verdict.
func (h hostResult) coresText(changed bool) string {
	c := h.UnchangedCores
	if changed {
		c = h.ChangedCores
	}
	if c.Of == 0 {
		return ""
	}
	text := "; " + c.String()
	if c.saturated() {
		text += ": the machine was saturated"
	}
	return text
}

// csInFlightMax is the most Cluster Service requests in flight at once
// over every run, and whether any run measured it.
func (r *results) csInFlightMax() (int64, bool) {
	var m int64
	ok := false
	for _, h := range r.Opstatus {
		if h.Flex {
			m, ok = max(m, h.CSInFlightMax), true
		}
	}
	if r.Backlog != nil && r.Budget > 0 {
		m, ok = max(m, r.Backlog.CSInFlightMax), true
	}
	for _, x := range r.Mixed {
		m, ok = max(m, x.CSInFlightMax), true
	}
	if r.Ledger != nil {
		m, ok = max(m, r.Ledger.CSInFlightMax), true
	}
	if r.CSInFlightMaxAll > 0 {
		m, ok = max(m, r.CSInFlightMaxAll), true
	}
	return m, ok
}

// flexHeadlines adds the Flex regime's name=value lines.
func (r *results) flexHeadlines() {
	if m, ok := r.csInFlightMax(); ok {
		r.add("cs_budget", strconv.Itoa(r.Budget))
		r.add("cs_in_flight_max", strconv.FormatInt(m, 10))
	}
	if h, ok := r.judged(targetN10k); ok && h.CSInFlightMean > 0 && r.Budget > 0 {
		r.add("cs_budget_used_mean", f2(h.CSInFlightMean/float64(r.Budget)))
	}
	r.ledgerHeadlines()
	for _, x := range r.Mixed {
		suffix := "per_group"
		if x.AppWide {
			suffix = "app_wide"
		}
		r.add("cs_in_flight_max_mixed_"+suffix, strconv.FormatInt(x.CSInFlightMax, 10))
		r.add("poll_instances_max_mixed_"+suffix, strconv.Itoa(x.PollMax))
		r.add("pickup_instances_max_mixed_"+suffix, strconv.Itoa(x.PickupMax))
	}
	ns, _ := r.dims()
	polls := 0
	for _, n := range ns {
		var inFlight int64
		pollsN, flex := 0, false
		for _, h := range r.atN(n) {
			if h.Flex {
				flex = true
				inFlight, pollsN = max(inFlight, h.CSInFlightMax), max(pollsN, h.PollInstancesMax)
			}
		}
		if flex {
			r.add(fmt.Sprintf("cs_in_flight_max_n%d", n), strconv.FormatInt(inFlight, 10))
			r.add(fmt.Sprintf("poll_instances_max_n%d", n), strconv.Itoa(pollsN))
			polls = max(polls, pollsN)
		}
	}
	if polls > 0 {
		r.add("poll_instances_max", strconv.Itoa(polls))
	}
	if h, ok := r.judged(targetN10k); ok && h.Flipped {
		r.add("lock_hold_p99_ms_n10000", f2(msf(h.LockHolds.P99)))
		if h.ChangedCores.Of > 0 {
			r.add("cores_busy_changed_n10000", f2(h.ChangedCores.Machine))
		}
		if h.LockHoldRequests > 0 {
			r.add("cosmos_requests_per_lock_hold_n10000", f2(h.LockHoldRequests))
		}
	}
	if hr := r.Holds; hr != nil && hr.Holds.N > 0 {
		r.add("lock_hold_p99_ms_holds", f2(msf(hr.Holds.P99)))
		if hr.Unsaturated.N > 0 {
			r.add("lock_hold_p99_ms_unsaturated", f2(msf(hr.Unsaturated.P99)))
			r.add("lock_hold_unsaturated_rounds", strconv.Itoa(hr.UnsaturatedRounds))
			r.add("lock_hold_cores_busy_max", f2(hr.UnsaturatedCores.Machine))
		}
		r.add("cosmos_requests_per_lock_hold", f2(hr.RequestsPerHold))
	}
}

// flexTargets judges the Flex regime's targets: the Cluster Service
// budget, and the lock hold at N = 10,000 and where the machine is not
// saturated.
func (r *results) flexTargets(add func(what string, known, met bool, reached string), notRun func(what, why string)) {
	budget := "Cluster Service requests in flight, app-wide at the simulator, never above the budget"
	if r.Budget > 0 {
		budget += fmt.Sprintf(" (CLUSTER_SERVICE_BUDGET %d)", r.Budget)
	}
	if m, ok := r.csInFlightMax(); ok && r.Budget > 0 {
		add(budget, true, m <= int64(r.Budget), fmt.Sprintf("at most %d in flight over every run", m))
	} else {
		notRun(budget, "needs a Flex run")
	}
	hold10k := fmt.Sprintf("subscription lock hold p99 at N=%d ≤ %s", targetN10k, ms(targetLockHold))
	if h, ok := r.judged(targetN10k); ok && h.Flipped && h.LockHolds.N > 0 {
		add(hold10k, true, h.LockHolds.P99 <= targetLockHold, fmt.Sprintf("%s over %d holds, %.2f Cosmos requests under the lock per hold%s",
			ms(h.LockHolds.P99), h.LockHolds.N, h.LockHoldRequests, h.coresText(true)))
	} else {
		notRun(hold10k, "needs opstatus at N=10000 with a flip")
	}
	holds := fmt.Sprintf("subscription lock hold p99 ≤ %s where the machine is not saturated (holds scenario)", ms(targetLockHold))
	switch hr := r.Holds; {
	case hr == nil || hr.Holds.N == 0:
		notRun(holds, "not run")
	case hr.Unsaturated.N == 0:
		notRun(holds, fmt.Sprintf("the machine was saturated in every round (%s over all %d holds)", ms(hr.Holds.P99), hr.Holds.N))
	default:
		u := hr.Unsaturated
		add(holds, true, u.P99 <= targetLockHold, fmt.Sprintf("%s over the %d holds of the %d of %d rounds with cores to spare (p50 %s, max %s; the busiest of them %s); %s over all %d holds; %.2f Cosmos requests under the lock per hold",
			ms(u.P99), u.N, hr.UnsaturatedRounds, len(hr.PerRound), ms(u.P50), ms(u.Max), hr.UnsaturatedCores, ms(hr.Holds.P99), hr.Holds.N, hr.RequestsPerHold))
	}
}

// scaleText says how the measured pass met the scale controller.
func (h hostResult) scaleText() string {
	switch {
	case h.FromIdle:
		return fmt.Sprintf("the measured pass was the first, from idle: poll from %d always-ready instances", h.AlwaysReady)
	case !h.ScaleWaited:
		return "the queue never asks for more than the always-ready instances"
	case h.ScaledBeforePass:
		return "the measured pass began after a scale-out"
	default:
		return fmt.Sprintf("no scale-out within %d decisions before the measured pass", scaleWaitDecisions)
	}
}
