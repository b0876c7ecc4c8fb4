package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/opstatus/opstatus/dev/clustersim"
	"github.com/opstatus/opstatus/dev/hostemu"
)

// scanInterval is scan/function.json's schedule, */10 * * * * *.
const scanInterval = 10 * time.Second

// nextTick returns the next occurrence of the scan schedule after t.
func nextTick(t time.Time) time.Time { return t.Truncate(scanInterval).Add(scanInterval) }

// snap is the counters at one instant of a run.
type snap struct {
	At       time.Time
	Req      requests
	Polls    int64
	Outcomes map[string]int64
	// HandlerCPU sums the handler processes; NodeCPU the Node.js servers
	// by name; SelfCPU is the harness (simulator, host emulator).
	HandlerCPU time.Duration
	NodeCPU    map[string]time.Duration
	SelfCPU    time.Duration
	// Receives and Received count the host's requests for messages and
	// the messages they returned.
	Receives, Received int64
}

// hostRun is opstatus under the host emulator on one dataset.
type hostRun struct {
	e     *env
	ds    dataset
	paths []string
	sim   *clustersim.Sim
	db    string
	drv   driver
	rec   *recorder
	node  map[string][]int
	// progress, when set, receives a line per settled pass.
	progress io.Writer
}

func simCalls(sim *clustersim.Sim) int64 {
	var n int64
	for _, v := range sim.Stats().Requests {
		n += v
	}
	return n
}

func (h *hostRun) snap(ctx context.Context) (snap, error) {
	_, polls, outcomes := h.rec.snapshot()
	at := time.Now()
	req, err := h.e.requests(ctx, h.db, h.sim)
	if err != nil {
		return snap{}, err
	}
	s := snap{
		At:         at,
		Req:        req,
		Polls:      polls,
		Outcomes:   outcomes,
		HandlerCPU: cpuOf(h.drv.PIDs()),
		NodeCPU:    map[string]time.Duration{},
		SelfCPU:    cpuOf([]int{os.Getpid()}),
	}
	s.Receives, s.Received = h.drv.Receives()
	for name, pids := range h.node {
		s.NodeCPU[name] = cpuOf(pids)
	}
	return s, nil
}

// waitFor polls cond every 50 ms until it holds, ctx ends or timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// settled is the end of a pass.
type settled struct {
	Snap snap
	// Scan is the scan that started the pass; PassEnd is when its last
	// operation's Cluster Service call arrived.
	Scan    scanRun
	PassEnd time.Time
	// Quiescent is set when the queue was empty and nothing was in flight
	// when Snap was taken; otherwise Snap was taken at PassEnd (a backlog).
	Quiescent bool
	// Complete is false when the pass did not finish within the timeout.
	Complete bool
}

// settle waits for scan number k (from 1) to finish and for every operation
// to have had a Cluster Service call since it started, then for the queue
// to drain, until shortly before the next scan.
func (h *hostRun) settle(ctx context.Context, k int, timeout time.Duration) (settled, error) {
	var s settled
	ok := waitFor(ctx, timeout, func() bool {
		scans, _, _ := h.rec.snapshot()
		if len(scans) < k {
			return false
		}
		s.Scan = scans[k-1]
		return true
	})
	if !ok {
		return s, fmt.Errorf("scan %d did not run within %s", k, timeout)
	}
	if s.Scan.Err != nil {
		return s, fmt.Errorf("scan %d failed: %w", k, s.Scan.Err)
	}
	s.Complete = waitFor(ctx, timeout, func() bool {
		end, done := passEnd(h.sim.Calls(), h.paths, s.Scan.Start)
		s.PassEnd = end
		return done
	})
	if ctx.Err() != nil {
		return s, ctx.Err()
	}
	if s.Complete {
		deadline := max(time.Until(nextTick(time.Now()))-300*time.Millisecond, 300*time.Millisecond)
		s.Quiescent = waitFor(ctx, deadline, h.drv.Quiescent)
	} else {
		// Cut short: the pass time is only known to be at least this.
		s.PassEnd = time.Now()
	}
	snapshot, err := h.snap(ctx)
	if err != nil {
		return s, err
	}
	s.Snap = snapshot
	if h.progress != nil {
		complete := "pass complete"
		if !s.Complete {
			complete = "PASS NOT COMPLETE (-pass-timeout)"
		}
		fmt.Fprintf(h.progress, "  scan %d at %s: %d messages in %s; %s +%s; %s at +%s; %d polls so far\n",
			k, s.Scan.Start.Format("15:04:05.000"), s.Scan.Messages, secs(s.Scan.End.Sub(s.Scan.Start)),
			complete, secs(s.PassEnd.Sub(s.Scan.Start)), map[bool]string{true: "drained", false: "not drained"}[s.Quiescent],
			secs(s.Snap.At.Sub(s.Scan.Start)), s.Snap.Polls)
	}
	return s, nil
}

// hostResult is what one opstatus run measured.
type hostResult struct {
	N, Instances int
	// Run numbers the repeats of one scenario from 1 (0 in results
	// written before there were repeats).
	Run int
	// Ideal is set when an in-process queue replaced Azurite and the host
	// emulator (see ideal).
	Ideal bool
	// Pass is the measured pass: from the scan's start to the last
	// operation's Cluster Service call; PassAtLeast is set when the pass
	// was cut short by -pass-timeout, making Pass a lower bound.
	Pass        time.Duration
	PassAtLeast bool
	// ScanHost is the scan invocations' median duration under the host,
	// queue writes included.
	ScanHost time.Duration
	// Unchanged is the window of the measured pass; Changed the window from
	// the flip until every operation was Succeeded.
	UnchangedPolls int64
	Unchanged      requests
	UnchangedOut   map[string]int64
	Quiescent      bool
	Warmup         bool // a warm-up pass ran before the measured one
	ChangedPolls   int64
	Changed        requests
	ChangedOut     map[string]int64
	Updated        int64

	// UnchangedReceives and UnchangedReceived are the host's requests for
	// messages in the unchanged window and the messages they returned.
	UnchangedReceives, UnchangedReceived int64

	// Freshness is the delay from the flip to each operation's
	// lastTransitionTime; Missing counts those not Succeeded at the end.
	Freshness dist
	Missing   int
	// UpdateSpan is from the first to the last update after the flip.
	UpdateSpan time.Duration
	// HandlerCPU is the handlers' CPU time in the unchanged window.
	HandlerCPU time.Duration
	NodeCPU    map[string]time.Duration
	SelfCPU    time.Duration
	// ChangedCPU is every process's CPU time from the flip until every
	// operation was updated, by "handler", "cosmos", "azurite", "harness".
	ChangedCPU map[string]time.Duration
	// HWM is the largest handler VmHWM at the end of the run.
	HWM       int64
	MaxQueue  int
	Restarts  int64
	Poisoned  int64
	Failures  int64
	Elapsed   time.Duration
	SeedTime  time.Duration
	WallStart time.Time
	// Scan is the standalone scan measurement made before the host
	// started, when asked for.
	Scan *scanResult `json:"-"`
}

// runHost runs opstatus with the given number of host instances on n
// operations: a warm-up pass, a measured pass of unchanged polls, then the
// flip and the freshness of the changed polls.
//
// With scan set it first times scans on a handler of its own over the same
// operations, before the host starts (see scanBench). With idealQueue an
// in-process queue replaces Azurite and the host emulator (see ideal).
func runHost(ctx context.Context, e *env, cfg config, n, instances int, scan, idealQueue bool) (res hostResult, err error) {
	res = hostResult{N: n, Instances: instances, Ideal: idealQueue, WallStart: time.Now()}
	label := fmt.Sprintf("ops%d-n%d", instances, n)
	if idealQueue {
		label = "ideal-" + label
	}
	sim, err := e.newSim(cfg.latency)
	if err != nil {
		return res, err
	}
	db := e.newDatabase(label)
	defer e.dropDatabase(context.WithoutCancel(ctx), db)
	ds := newDataset(label, n, cfg.opsPerSub)
	seedStart := time.Now()
	if err := e.seed(ctx, db, ds, sim); err != nil {
		return res, err
	}
	res.SeedTime = time.Since(seedStart)
	if scan {
		sr, err := scanBench(ctx, e, db, n, cfg.scanTimes)
		if err != nil {
			return res, fmt.Errorf("scan: %w", err)
		}
		res.Scan = &sr
	}
	if err := e.clearQueues(ctx); err != nil {
		return res, err
	}

	h := &hostRun{e: e, ds: ds, paths: ds.paths(), sim: sim, db: db, rec: newRecorder(), node: nodeChildren(), progress: cfg.progress}
	settings := e.handlerSettings(db)
	host, err := hostemu.Load(e.app, settings)
	if err != nil {
		return res, err
	}
	driveCtx, stopDriving := context.WithCancel(context.WithoutCancel(ctx))
	driveDone := make(chan error, 1)
	if idealQueue {
		d, err := startIdeal(ctx, e, settings, instances, h.rec)
		if err != nil {
			stopDriving()
			return res, err
		}
		h.drv = d
		q := host.Config().Queues
		go func() { d.run(driveCtx, q.BatchSize+q.NewBatchThreshold); d.stop(); driveDone <- nil }()
	} else {
		host.Options = hostemu.Options{
			Instances:    instances,
			Output:       e.log,
			Logger:       slog.New(slog.NewJSONHandler(e.log, &slog.HandlerOptions{Level: slog.LevelWarn})),
			OnInvocation: h.rec.record,
		}
		h.drv = emulated{host: host}
		go func() { driveDone <- host.Run(driveCtx) }()
	}
	defer func() {
		stopDriving()
		if derr := <-driveDone; derr != nil && err == nil {
			err = fmt.Errorf("host emulator: %w", derr)
		}
	}()
	started := waitFor(ctx, 30*time.Second, func() bool {
		select {
		case derr := <-driveDone:
			driveDone <- derr
			return true
		default:
		}
		return len(h.drv.PIDs()) == instances
	})
	if !started {
		return res, errors.New("the handlers did not start")
	}

	var qmu sync.Mutex
	stopQueue := make(chan struct{})
	var qwg sync.WaitGroup
	qwg.Go(func() {
		for {
			select {
			case <-stopQueue:
				return
			case <-time.After(500 * time.Millisecond):
			}
			l, err := 0, error(nil)
			if d, ok := h.drv.(*ideal); ok {
				l = int(d.queued.Load())
			} else {
				l, err = e.queueLength(ctx)
			}
			if err == nil {
				qmu.Lock()
				res.MaxQueue = max(res.MaxQueue, l)
				qmu.Unlock()
			}
		}
	})
	defer func() {
		close(stopQueue)
		qwg.Wait()
	}()

	// A warm-up pass opens the connections, unless the run is long enough
	// for that not to matter: then the window starts before the first scan.
	timeout := cfg.passTimeout
	warm := settled{Quiescent: true}
	if warm.Snap, err = h.snap(ctx); err != nil {
		return res, err
	}
	k := 1
	if n <= cfg.warmupMax {
		if warm, err = h.settle(ctx, k, timeout); err != nil {
			return res, fmt.Errorf("warm-up: %w", err)
		}
		k++
	}
	measured, err := h.settle(ctx, k, timeout)
	if err != nil {
		return res, fmt.Errorf("measured pass: %w", err)
	}
	res.Warmup = k > 1
	res.Pass = measured.PassEnd.Sub(measured.Scan.Start)
	res.PassAtLeast = !measured.Complete
	res.Quiescent = warm.Quiescent && measured.Quiescent
	a, b := warm.Snap, measured.Snap
	res.UnchangedPolls = b.Polls - a.Polls
	res.Unchanged = b.Req.sub(a.Req)
	res.UnchangedOut = diffOutcomes(b.Outcomes, a.Outcomes)
	res.UnchangedReceives, res.UnchangedReceived = b.Receives-a.Receives, b.Received-a.Received
	res.HandlerCPU = b.HandlerCPU - a.HandlerCPU
	res.SelfCPU = b.SelfCPU - a.SelfCPU
	res.NodeCPU = map[string]time.Duration{}
	for k, v := range b.NodeCPU {
		res.NodeCPU[k] = v - a.NodeCPU[k]
	}

	// The flip: every cluster is ready from now on.
	flip := time.Now()
	sim.ReadyAll()
	before := b.Outcomes["updated"]
	waitFor(ctx, cfg.freshTimeout, func() bool {
		_, _, out := h.rec.snapshot()
		return out["updated"]-before >= int64(n)
	})
	observed := time.Since(flip)
	waitFor(ctx, 5*time.Second, h.drv.Quiescent)
	c, err := h.snap(ctx)
	if err != nil {
		return res, err
	}
	res.ChangedPolls = c.Polls - b.Polls
	res.Changed = c.Req.sub(b.Req)
	res.ChangedOut = diffOutcomes(c.Outcomes, b.Outcomes)
	res.Updated = res.ChangedOut["updated"]
	res.ChangedCPU = map[string]time.Duration{"handler": c.HandlerCPU - b.HandlerCPU, "harness": c.SelfCPU - b.SelfCPU}
	for k, v := range c.NodeCPU {
		res.ChangedCPU[k] = v - b.NodeCPU[k]
	}

	for _, pid := range h.drv.PIDs() {
		if s, err := readProc(pid); err == nil {
			res.HWM = max(res.HWM, s.HWM)
		}
	}
	scans, _, _ := h.rec.snapshot()
	var durs []time.Duration
	for _, s := range scans {
		durs = append(durs, s.End.Sub(s.Start))
	}
	res.ScanHost = median(durs)
	res.Restarts, res.Poisoned, res.Failures = h.drv.Counters()

	states, err := e.readStates(ctx, db)
	if err != nil {
		return res, err
	}
	delays, missing := freshness(states, ds, flip)
	res.Freshness, res.Missing = summarizeCensored(delays, missing, observed), missing
	res.UpdateSpan = span(delays)
	res.Elapsed = time.Since(res.WallStart)
	return res, nil
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

// span is the largest minus the smallest delay.
func span(delays []time.Duration) time.Duration {
	if len(delays) == 0 {
		return 0
	}
	lo, hi := delays[0], delays[0]
	for _, d := range delays {
		lo, hi = min(lo, d), max(hi, d)
	}
	return hi - lo
}
