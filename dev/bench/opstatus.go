package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/opstatus/opstatus/dev/clustersim"
	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/dev/hostemu"
	"github.com/opstatus/opstatus/internal/testenv"
)

// scanInterval is the interval of the default SCAN_SCHEDULE, */10 * * * * *.
const scanInterval = 10 * time.Second

// nextTick returns the next occurrence of the scan schedule after t.
func nextTick(t time.Time) time.Time { return t.Truncate(scanInterval).Add(scanInterval) }

// snap is the counters at one instant of a run.
type snap struct {
	At  time.Time
	Req requests
	// Polls counts poll invocations (messages), Ops the operations they
	// reported on, Outcomes those operations by outcome.
	Polls, Ops int64
	Outcomes   map[string]int64
	// HandlerCPU sums the handler processes; NodeCPU the Node.js servers
	// by name; SelfCPU is the harness (simulator, host emulator).
	HandlerCPU time.Duration
	NodeCPU    map[string]time.Duration
	SelfCPU    time.Duration
	// Host is the host emulator's counters and Lines the lines it has
	// logged for the handlers, for the cost estimate.
	Host  hostemu.Counters
	Lines int64
	// UnderLock counts the Cosmos requests made only under a subscription
	// lock (see underLock).
	UnderLock int64
}

// hostRun is opstatus under the host emulator on one fixture.
type hostRun struct {
	e     *env
	fx    *fixture
	paths []string
	host  *hostemu.Host
	rec   *recorder
	meter *meter
	node  map[string][]int
	// progress, when set, receives a line per settled pass.
	progress io.Writer
	// scale keeps the scale controller's decisions, procs every handler
	// process's CPU time and memory; pollMax is the most poll instances
	// sampled at once, and cpu the CPU time at each sample.
	scale   *scaleLog
	procs   *procTracker
	mu      sync.Mutex
	pollMax int
	cpu     []cpuSample
}

// simCalls is every call sim has answered.
func simCalls(sim *clustersim.Sim) int64 {
	var n int64
	for _, v := range sim.Stats().Requests {
		n += v
	}
	return n
}

// pids returns the running handler processes.
func (h *hostRun) pids() []int {
	var pids []int
	for _, in := range h.host.Instances() {
		if pid := in.PID(); pid != 0 {
			pids = append(pids, pid)
		}
	}
	return pids
}

// hwm is the largest peak RSS (VmHWM) of the handler processes, those
// that have ended included.
func (h *hostRun) hwm() int64 {
	h.sample()
	return h.procs.hwm()
}

// quiescent reports whether every message written has been handled.
func (h *hostRun) quiescent() bool {
	c := h.host.Counters()
	return c.MessagesEnqueued == c.MessagesDeleted+c.MessagesPoisoned
}

func (h *hostRun) snap(ctx context.Context) (snap, error) {
	_, polls, ops, outcomes := h.rec.snapshot()
	at := time.Now()
	counts, err := h.e.cosmos.Counts(ctx, h.fx.db)
	if err != nil {
		return snap{}, err
	}
	h.sample()
	s := snap{
		At:         at,
		Req:        classify(counts, simCalls(h.fx.sim)),
		Polls:      polls,
		Ops:        ops,
		Outcomes:   outcomes,
		HandlerCPU: h.procs.cpu(),
		NodeCPU:    map[string]time.Duration{},
		SelfCPU:    cpuOf([]int{os.Getpid()}),
		Host:       h.host.Counters(),
		Lines:      h.meter.loggedLines(),
		UnderLock:  underLock(counts),
	}
	for name, pids := range h.node {
		s.NodeCPU[name] = cpuOf(pids)
	}
	return s, nil
}

// waitFor polls cond every 50 ms until it holds, ctx ends or timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, cond func() bool) bool {
	return testenv.WaitFor(ctx, timeout, 50*time.Millisecond, cond)
}

// settled is the end of a pass.
type settled struct {
	Snap snap
	// Scan is the scan that started the pass; PassEnd is when its last
	// operation's Cluster Service call arrived, or when the harness
	// stopped waiting.
	Scan    scanRun
	PassEnd time.Time
	// Checked is how many operations had a Cluster Service call from the
	// scan's start to PassEnd.
	Checked int
	// Quiescent is set when the queue was empty and nothing was in flight
	// when Snap was taken; otherwise Snap was taken at PassEnd (a backlog).
	Quiescent bool
	// Complete is false when the pass did not finish within the timeout.
	Complete bool
}

// settle waits for the first scan that starts at or after from to finish
// and for every operation to have had a Cluster Service call since it
// started, then for the queue to drain, until shortly before the next
// scan.
func (h *hostRun) settle(ctx context.Context, from time.Time, timeout time.Duration) (settled, error) {
	var s settled
	k := 0
	ok := waitFor(ctx, timeout+scanInterval, func() bool {
		scans, _, _, _ := h.rec.snapshot()
		for i, sc := range scans {
			if !sc.Start.Before(from) {
				s.Scan, k = sc, i+1
				return true
			}
		}
		return false
	})
	if !ok {
		return s, fmt.Errorf("no scan started after %s within %s", from.Format("15:04:05.000"), timeout+scanInterval)
	}
	if s.Scan.Err != nil {
		return s, fmt.Errorf("scan %d failed: %w", k, s.Scan.Err)
	}
	s.Complete = waitFor(ctx, timeout, func() bool {
		end, done := passEnd(h.fx.sim.Calls(), h.paths, s.Scan.Start)
		s.PassEnd = end
		return done
	})
	if ctx.Err() != nil {
		return s, ctx.Err()
	}
	if s.Complete {
		s.Checked = len(h.paths)
		deadline := max(time.Until(nextTick(time.Now()))-300*time.Millisecond, 300*time.Millisecond)
		s.Quiescent = waitFor(ctx, deadline, h.quiescent)
	} else {
		// Cut short: the pass time is only known to be at least this.
		s.PassEnd = time.Now()
		s.Checked = checked(h.fx.sim.Calls(), h.paths, s.Scan.Start, s.PassEnd)
	}
	snapshot, err := h.snap(ctx)
	if err != nil {
		return s, err
	}
	s.Snap = snapshot
	if h.progress != nil {
		complete := "pass complete"
		if !s.Complete {
			complete = fmt.Sprintf("PASS NOT COMPLETE (-pass-timeout): %d of %d operations checked", s.Checked, len(h.paths))
		}
		fmt.Fprintf(h.progress, "  scan %d at %s: %d operations in %d messages, %s; %s +%s; %s at +%s; %d operations polled so far\n",
			k, s.Scan.Start.Format("15:04:05.000"), s.Scan.Operations, s.Scan.Messages, secs(s.Scan.End.Sub(s.Scan.Start)),
			complete, secs(s.PassEnd.Sub(s.Scan.Start)), map[bool]string{true: "drained", false: "not drained"}[s.Quiescent],
			secs(s.Snap.At.Sub(s.Scan.Start)), s.Snap.Ops)
	}
	return s, nil
}

// hostResult is what one opstatus run measured.
type hostResult struct {
	N, Instances int
	// Run numbers the repeats of one scenario from 1.
	Run int
	// Pass is the measured pass: from the scan's start to the last
	// operation's Cluster Service call; PassAtLeast is set when the pass
	// was cut short by -pass-timeout, making Pass a lower bound, and
	// Checked is how many operations had a call by then.
	Pass        time.Duration
	PassAtLeast bool
	Checked     int
	// Scans are the durations of the run's scans of all N operations under
	// the host, queue writes included, and Messages how many queue
	// messages each wrote.
	Scans    []time.Duration
	Messages []int64
	// The unchanged window is the measured pass; Ops counts operations,
	// Polls the poll invocations (messages) that reported on them.
	UnchangedOps, UnchangedPolls int64
	Unchanged                    requests
	UnchangedOut                 map[string]int64
	Quiescent                    bool
	Warmup                       bool // a warm-up pass ran before the measured one
	// Flipped is set when the run went on to flip every cluster to ready
	// and measure the changed window, from the flip until every operation
	// was Succeeded.
	Flipped                  bool
	ChangedOps, ChangedPolls int64
	Changed                  requests
	ChangedOut               map[string]int64
	Updated                  int64

	// Freshness is the delay from the flip to each operation's
	// lastTransitionTime; Missing counts those not Succeeded at the end.
	Freshness dist
	Missing   int
	// UpdateSpan is from the first to the last update after the flip.
	UpdateSpan time.Duration
	// LockHolds are opstatus's holds of the subscription locks, creation
	// to deletion at the Cosmos server; LockExpired counts lock items
	// that were not deleted (they expired). Frontend is the frontend
	// stand-in's waits for the same locks.
	LockHolds   dist
	LockExpired int
	Frontend    frontendWaits

	// HandlerCPU is the handlers' CPU time in the unchanged window.
	HandlerCPU time.Duration
	NodeCPU    map[string]time.Duration
	SelfCPU    time.Duration
	// ChangedCPU is every process's CPU time in the changed window, by
	// "handler", "cosmos", "azurite", "harness".
	ChangedCPU map[string]time.Duration
	// HWM is the largest handler VmHWM at the end of the run, and
	// UnchangedHWM at the end of the unchanged window.
	HWM, UnchangedHWM int64
	MaxQueue          int
	Restarts          int64
	Poisoned          int64
	Failures          int64
	Timeouts          int64
	Elapsed           time.Duration
	SeedTime          time.Duration
	WallStart         time.Time
	// Usage is what the measured pass used, for the cost estimate.
	Usage *usage `json:",omitempty"`

	// The app ran as on Flex Consumption (see hostOptions): Instances is
	// its maximumInstanceCount, AlwaysReady poll's instances kept however
	// short the queue, Budget the handlers' CLUSTER_SERVICE_BUDGET.
	// PollInstancesMax is the most poll instances that ran at once, and
	// ScaleDecisions and ScaleChanges count the scale controller's
	// decisions and those that changed the count. ScaleWaited is set when
	// the queue could ask for more poll instances than are always ready
	// and the run waited for the controller before its measured pass;
	// ScaledBeforePass when a decision had added some by then.
	Flex                bool
	AlwaysReady, Budget int
	InstanceMemoryMB    int `json:",omitempty"`
	// FromIdle is set when the measured pass was the run's first, poll
	// starting from its always-ready instances.
	FromIdle                      bool `json:",omitempty"`
	PollInstancesMax              int
	ScaleDecisions, ScaleChanges  int
	ScaleWaited, ScaledBeforePass bool
	// CSInFlightMax is the most Cluster Service requests in flight at
	// once over the run, every handler's together, at the simulator;
	// CSInFlightMean their mean over the measured pass (0 when unknown).
	CSInFlightMax  int64
	CSInFlightMean float64 `json:",omitempty"`
	// UnchangedCores is how busy the cores were during the measured pass,
	// ChangedCores while the updates were written (first to last);
	// LockHoldRequests is the Cosmos requests made under the lock per
	// hold in the changed window.
	UnchangedCores, ChangedCores cores
	LockHoldRequests             float64
}

// scanHost is the median scan under the host, queue writes included.
func (h hostResult) scanHost() time.Duration { return median(h.Scans) }

// messagesPerScan is the median number of messages a scan wrote.
func (h hostResult) messagesPerScan() int64 {
	if len(h.Messages) == 0 {
		return 0
	}
	d := make([]time.Duration, len(h.Messages))
	for i, m := range h.Messages {
		d[i] = time.Duration(m)
	}
	return int64(median(d))
}

// runHost runs opstatus with the given number of host instances on fx: a
// warm-up pass (up to -warmup-max operations), a measured pass of
// unchanged polls, then, with flip, the flip and the changed window.
func runHost(ctx context.Context, e *env, cfg config, fx *fixture, instances int, flip bool) (res hostResult, err error) {
	n := len(fx.ds.ops)
	res = hostResult{N: n, Instances: instances, WallStart: time.Now(), SeedTime: fx.seedTime, Flipped: flip,
		Flex: true, AlwaysReady: min(cfg.alwaysReady["poll"], instances), Budget: cfg.budget,
		InstanceMemoryMB: cfg.instanceMemory}
	if err := e.clearQueues(ctx); err != nil {
		return res, err
	}
	h, stopHost, err := e.startHost(ctx, cfg, fx, instances)
	if err != nil {
		return res, err
	}
	host := h.host
	defer func() {
		if herr := stopHost(); herr != nil && err == nil {
			err = herr
		}
	}()

	var qmu sync.Mutex
	var inFlight []clustersim.InFlightStats
	stopQueue := make(chan struct{})
	var qwg sync.WaitGroup
	qwg.Go(func() {
		for {
			select {
			case <-stopQueue:
				return
			case <-time.After(500 * time.Millisecond):
			}
			st := e.inFlight.Stats()
			qmu.Lock()
			inFlight = append(inFlight, st)
			qmu.Unlock()
			if l, err := e.queueLength(ctx); err == nil {
				qmu.Lock()
				res.MaxQueue = max(res.MaxQueue, l)
				qmu.Unlock()
			}
			h.sample()
		}
	})
	defer func() {
		close(stopQueue)
		qwg.Wait()
	}()

	// A warm-up pass opens the connections, unless the run is long enough
	// for that not to matter: then the window starts before the first scan.
	// When the queue can ask for more poll instances than are always
	// ready, the window starts once the scale controller has added them,
	// as they would be in a steady state.
	timeout := cfg.passTimeout
	warm := settled{Quiescent: true}
	if warm.Snap, err = h.snap(ctx); err != nil {
		return res, err
	}
	var from time.Time
	res.FromIdle = cfg.fromIdle
	if n <= cfg.warmupMax && !cfg.fromIdle {
		if warm, err = h.settle(ctx, from, timeout); err != nil {
			return res, fmt.Errorf("warm-up: %w", err)
		}
		from, res.Warmup = warm.Snap.At, true
	}
	if mayScaleOut(cfg, host.Config(), n, instances) && !cfg.fromIdle {
		h.waitScaledOut(ctx, cfg)
		res.ScaleWaited = true
		res.ScaledBeforePass, _ = h.scale.scaledOut()
		if warm.Snap, err = h.snap(ctx); err != nil {
			return res, err
		}
		warm.Quiescent = h.quiescent()
		from, res.Warmup = warm.Snap.At, true
	}
	measured, err := h.settle(ctx, from, timeout)
	if err != nil {
		return res, fmt.Errorf("measured pass: %w", err)
	}
	res.Pass = measured.PassEnd.Sub(measured.Scan.Start)
	qmu.Lock()
	res.CSInFlightMean, _ = inFlightMean(inFlight, measured.Scan.Start, measured.PassEnd)
	qmu.Unlock()
	res.PassAtLeast = !measured.Complete
	res.Checked = measured.Checked
	res.Quiescent = warm.Quiescent && measured.Quiescent
	a, b := warm.Snap, measured.Snap
	res.UnchangedOps, res.UnchangedPolls = b.Ops-a.Ops, b.Polls-a.Polls
	res.Unchanged = b.Req.sub(a.Req)
	res.UnchangedOut = diffOutcomes(b.Outcomes, a.Outcomes)
	res.HandlerCPU = b.HandlerCPU - a.HandlerCPU
	res.SelfCPU = b.SelfCPU - a.SelfCPU
	res.NodeCPU = map[string]time.Duration{}
	for k, v := range b.NodeCPU {
		res.NodeCPU[k] = v - a.NodeCPU[k]
	}
	res.UnchangedCores = coresIn(h.cpuSamples(), measured.Scan.Start, measured.PassEnd)

	scans, _, _, _ := h.rec.snapshot()
	u := h.meter.measure(a, b, scans)
	res.Usage = &u

	res.UnchangedHWM = h.hwm()
	if flip {
		if err := h.changed(ctx, cfg, &res, b); err != nil {
			return res, err
		}
	}
	res.HWM = h.hwm()
	// The scans of every pending operation: those after the flip's updates
	// list fewer.
	scans, _, _, _ = h.rec.snapshot()
	for _, s := range scans {
		if s.Err == nil && s.Operations == n {
			res.Scans = append(res.Scans, s.End.Sub(s.Start))
			res.Messages = append(res.Messages, s.Messages)
		}
	}
	c := host.Counters()
	res.Restarts, res.Poisoned, res.Failures, res.Timeouts = c.HandlerRestarts, c.MessagesPoisoned, c.Failures, c.Timeouts
	res.CSInFlightMax = e.inFlight.Max()
	res.PollInstancesMax = h.pollInstancesMax()
	for _, d := range h.scale.snapshot() {
		res.ScaleDecisions++
		if d.After != d.Before {
			res.ScaleChanges++
		}
	}
	res.Elapsed = time.Since(res.WallStart)
	return res, nil
}

// startHost runs the app on fx as Flex Consumption does, poll's instances
// up to instances, and returns once its first handlers answer; stop stops
// it the host's way.
func (e *env) startHost(ctx context.Context, cfg config, fx *fixture, instances int) (h *hostRun, stop func() error, err error) {
	host, err := hostemu.Load(e.app, e.flexHandlerSettings(cfg, fx.db, instances))
	if err != nil {
		return nil, nil, err
	}
	h = &hostRun{e: e, fx: fx, paths: fx.ds.paths(), host: host, node: nodeChildren(), progress: cfg.progress,
		rec: newRecorder(func() int64 { return host.Counters().MessagesEnqueued }), scale: &scaleLog{}, procs: &procTracker{}}
	host.Options = e.hostOptions(cfg, instances, h.rec.record, h.scale)
	h.meter = attachMeter(host)
	e.inFlight.ResetMax()
	hostCtx, stopHost := context.WithCancel(context.WithoutCancel(ctx))
	hostDone := make(chan error, 1)
	go func() { hostDone <- host.Run(hostCtx) }()
	stop = func() error {
		stopHost()
		if herr := <-hostDone; herr != nil {
			return fmt.Errorf("host emulator: %w", herr)
		}
		return nil
	}
	want := startedInstances(cfg, instances)
	started := waitFor(ctx, 30*time.Second, func() bool {
		select {
		case herr := <-hostDone:
			hostDone <- herr
			return true
		default:
		}
		return len(h.pids()) == want
	})
	if !started || len(h.pids()) != want {
		return nil, nil, errors.Join(errors.New("the handlers did not start"), stop())
	}
	return h, stop, nil
}

// changed flips every cluster to ready, runs the frontend stand-in while
// opstatus writes the updates, and fills in the changed window's figures;
// b is the snapshot taken at the end of the unchanged window.
func (h *hostRun) changed(ctx context.Context, cfg config, res *hostResult, b snap) error {
	e, fx, n := h.e, h.fx, len(h.paths)
	fe, err := frontend.New(e.cosmos.Endpoint, e.cosmos.Key, fx.db)
	if err != nil {
		return err
	}
	probe := newLockProbe(fe, fx.ds.subscriptions())
	probeCtx, stopProbe := context.WithCancel(ctx)
	var pwg sync.WaitGroup
	pwg.Go(func() { probe.run(probeCtx) })

	flip := time.Now()
	fx.sim.ReadyAll()
	before := b.Outcomes["updated"]
	waitFor(ctx, cfg.freshTimeout, func() bool {
		_, _, _, out := h.rec.snapshot()
		return out["updated"]-before >= int64(n)
	})
	observed := time.Since(flip)
	stopProbe()
	pwg.Wait()
	waitFor(ctx, 5*time.Second, h.quiescent)
	c, err := h.snap(ctx)
	if err != nil {
		return err
	}
	res.ChangedOps, res.ChangedPolls = c.Ops-b.Ops, c.Polls-b.Polls
	// The stand-in's own lock requests are not opstatus's.
	probeReq, probeConflicts := probe.locksRequests()
	res.Changed = c.Req.sub(b.Req)
	res.Changed.LockOps -= probeReq
	res.Changed.LockConflicts -= probeConflicts
	res.ChangedOut = diffOutcomes(c.Outcomes, b.Outcomes)
	res.Usage.ChangedLines = c.Lines - b.Lines
	res.Updated = res.ChangedOut["updated"]
	res.ChangedCPU = map[string]time.Duration{"handler": c.HandlerCPU - b.HandlerCPU, "harness": c.SelfCPU - b.SelfCPU}
	for k, v := range c.NodeCPU {
		res.ChangedCPU[k] = v - b.NodeCPU[k]
	}

	states, err := e.readStates(ctx, fx.db)
	if err != nil {
		return err
	}
	delays, missing := freshness(states, fx.ds, flip)
	res.Freshness, res.Missing = summarizeCensored(delays, missing, observed), missing
	res.UpdateSpan = span(delays)
	if len(delays) > 0 {
		lo, hi := bounds(delays)
		res.Frontend = probe.summary(flip.Add(lo), flip.Add(hi))
		res.ChangedCores = coresIn(h.cpuSamples(), flip.Add(lo), flip.Add(hi))
	}
	holds, expired, err := e.lockHolds(ctx, fx.db)
	if err != nil {
		return err
	}
	res.LockHolds, res.LockExpired = holdsOf(holds, opstatusLock), expired
	if res.LockHolds.N > 0 {
		res.LockHoldRequests = float64(c.UnderLock-b.UnderLock-(probeReq-probeConflicts)) / float64(res.LockHolds.N)
	}
	return nil
}

func diffOutcomes(after, before map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// bounds returns the smallest and the largest delay.
func bounds(delays []time.Duration) (lo, hi time.Duration) {
	if len(delays) == 0 {
		return 0, 0
	}
	lo, hi = delays[0], delays[0]
	for _, d := range delays {
		lo, hi = min(lo, d), max(hi, d)
	}
	return lo, hi
}

// span is the largest minus the smallest delay.
func span(delays []time.Duration) time.Duration {
	lo, hi := bounds(delays)
	return hi - lo
}
