package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/opstatus/opstatus/dev/clustersim"
	"github.com/opstatus/opstatus/dev/hostemu"
)

// queueSample is the queue length at one instant.
type queueSample struct {
	At     time.Duration // since the host started
	Length int
}

// backlogResult is the backlog scenario: Cluster Service slower than the
// scan for a while, then back to normal.
type backlogResult struct {
	N, Instances        int
	Slow, Normal        time.Duration // latencies
	SlowFor, RecoverFor time.Duration
	Scans               int
	// Messages counts the queue messages the scans wrote, Polls the poll
	// invocations and Ops the operations they reported on.
	Messages, Polls, Ops int64
	CSCalls              int64
	Outcomes             map[string]int64
	Queue                []queueSample
	QueueMax             int
	QueueAtSlowEnd       int
	QueueAtEnd           int
	// Per scan interval [scan k start, scan k+1 start): the largest number
	// of Cluster Service calls one operation got, how many (operation,
	// interval) pairs had more than one, and how many pairs there were;
	// for the whole run and for the slow and the recovery phase.
	// Growth is the queue's growth rate over the second half of the slow
	// phase (least squares), in messages per second.
	Growth                             float64
	MaxCalls, Over1, Pairs             int
	SlowMaxCalls, SlowOver1, SlowPairs int
	RecMaxCalls, RecOver1, RecPairs    int
	// CSInFlightMax is the most Cluster Service requests in flight at
	// once, at the simulator.
	CSInFlightMax int64
}

// runBacklog runs opstatus with Cluster Service at cfg.backlogLatency for
// cfg.backlogSlow, then at cfg.latency for cfg.backlogRecover.
func runBacklog(ctx context.Context, e *env, cfg config) (res backlogResult, err error) {
	n, instances := cfg.backlogN, cfg.backlogInstances
	res = backlogResult{N: n, Instances: instances, Slow: cfg.backlogLatency, Normal: cfg.latency,
		SlowFor: cfg.backlogSlow, RecoverFor: cfg.backlogRecover}
	fx, err := e.newFixture(ctx, cfg, fmt.Sprintf("backlog-n%d", n), n)
	if err != nil {
		return res, err
	}
	defer e.dropDatabase(context.WithoutCancel(ctx), fx.db)
	sim, ds := fx.sim, fx.ds
	if err := sim.SetFaults(clustersim.Faults{Latency: clustersim.Duration(cfg.backlogLatency)}); err != nil {
		return res, err
	}
	if err := e.clearQueues(ctx); err != nil {
		return res, err
	}
	host, err := hostemu.Load(e.app, e.flexHandlerSettings(cfg, fx.db, instances))
	if err != nil {
		return res, err
	}
	rec := newRecorder(func() int64 { return host.Counters().MessagesEnqueued })
	host.Options = e.hostOptions(cfg, instances, rec.record, &scaleLog{})
	e.inFlight.ResetMax()
	stop := launch(ctx, host)
	defer func() {
		if herr := stop(); herr != nil && err == nil {
			err = fmt.Errorf("host emulator: %w", herr)
		}
	}()
	if !waitFor(ctx, 30*time.Second, func() bool { return host.Port() != 0 }) {
		return res, errors.New("the host emulator did not start its handler")
	}

	start := time.Now()
	slowEnd := start.Add(cfg.backlogSlow)
	end := slowEnd.Add(cfg.backlogRecover)
	recovered := false
	for now := time.Now(); now.Before(end); now = time.Now() {
		if !recovered && !now.Before(slowEnd) {
			if err := sim.SetFaults(clustersim.Faults{Latency: clustersim.Duration(cfg.latency)}); err != nil {
				return res, err
			}
			recovered = true
			if l, err := e.queueLength(ctx); err == nil {
				res.QueueAtSlowEnd = l
			}
		}
		if l, err := e.queueLength(ctx); err == nil {
			res.Queue = append(res.Queue, queueSample{At: now.Sub(start), Length: l})
			res.QueueMax = max(res.QueueMax, l)
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(time.Second):
		}
	}
	if l, err := e.queueLength(ctx); err == nil {
		res.QueueAtEnd = l
		res.QueueMax = max(res.QueueMax, l)
	}
	if err := stop(); err != nil {
		return res, fmt.Errorf("host emulator: %w", err)
	}

	res.Growth = growth(res.Queue, cfg.backlogSlow/2, cfg.backlogSlow)
	scans, polls, ops, outcomes := rec.snapshot()
	res.Scans, res.Polls, res.Ops, res.Outcomes = len(scans), polls, ops, outcomes
	for _, s := range scans {
		res.Messages += s.Messages
	}
	res.CSCalls = simCalls(sim)
	res.CSInFlightMax = e.inFlight.Max()
	var bounds, slowBounds, recBounds []time.Time
	for _, s := range scans {
		bounds = append(bounds, s.Start)
		if s.Start.Before(slowEnd) {
			slowBounds = append(slowBounds, s.Start)
		} else {
			recBounds = append(recBounds, s.Start)
		}
	}
	bounds = append(bounds, end)
	if len(slowBounds) > 0 && len(recBounds) > 0 {
		slowBounds = append(slowBounds, recBounds[0])
	}
	recBounds = append(recBounds, end)
	calls := sim.Calls()
	paths := ds.paths()
	res.MaxCalls, res.Over1, res.Pairs = intervalCalls(calls, paths, bounds)
	res.SlowMaxCalls, res.SlowOver1, res.SlowPairs = intervalCalls(calls, paths, slowBounds)
	res.RecMaxCalls, res.RecOver1, res.RecPairs = intervalCalls(calls, paths, recBounds)
	return res, nil
}

// launch runs host until stop, which stops it the host's way and returns
// what Run returned; stop may be called again, and then returns nil.
func launch(ctx context.Context, host *hostemu.Host) (stop func() error) {
	hostCtx, stopHost := context.WithCancel(context.WithoutCancel(ctx))
	hostDone := make(chan error, 1)
	go func() { hostDone <- host.Run(hostCtx) }()
	var once sync.Once
	return func() (err error) {
		once.Do(func() {
			stopHost()
			err = <-hostDone
		})
		return err
	}
}

// growth is how fast the queue grows, in messages per second, over the
// samples taken in [from, to): the least-squares slope of the largest
// length in each scan interval. The queue rises with every scan and falls
// as it drains; the peaks of that sawtooth stay level when it is bounded.
func growth(samples []queueSample, from, to time.Duration) float64 {
	peaks := map[int64]int{}
	for _, q := range samples {
		if q.At < from || q.At >= to {
			continue
		}
		b := int64(q.At / scanInterval)
		peaks[b] = max(peaks[b], q.Length)
	}
	var n, sx, sy, sxx, sxy float64
	for b, l := range peaks {
		x, y := (time.Duration(b) * scanInterval).Seconds(), float64(l)
		n++
		sx += x
		sy += y
		sxx += x * x
		sxy += x * y
	}
	if n < 2 {
		return 0
	}
	return (n*sxy - sx*sy) / (n*sxx - sx*sx)
}

// growthLimit is the growth rate, in messages per second, below which the
// queue counts as bounded: 5 % of the rate at which scans write messages,
// and at least one message every two scan intervals, which is within the
// noise of sampling a queue of a few messages.
func growthLimit(messagesPerScan float64) float64 {
	perInterval := scanInterval.Seconds()
	return max(0.05*messagesPerScan/perInterval, 0.5/perInterval)
}
