package hostemu

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"
)

// FlexOptions runs the app the way the Flex Consumption plan does:
//
//   - Function groups: every function runs in instances of its own, each
//     with its own handler process (the platform sets
//     FUNCTIONS_TARGET_GROUP=function:<name> and FunctionGroupListener-
//     Decorator gives the other functions a listener that never starts),
//     so a queue write wakes no listener of another function
//     (SharedQueueWatcher is per process).
//   - Scale-out follows the queue: a scale controller sets the number of
//     instances of each queue-triggered function (see ScaleDecision).
//   - An instance stops the host's way: its listeners stop taking work,
//     the invocations in flight finish (QueueListener.StopAsync,
//     TimerListener.StopAsync), then the handler gets SIGKILL
//     (WorkerProcess.Dispose); it never gets SIGTERM. So does every
//     instance when Run's context ends.
//   - The timer is a singleton by a lease (see TimerLease), and
//     Instance.Crash ends an instance as a machine failure would.
//
// Options.Instances is the number of instances of each timer-triggered
// function. The zero value of each field takes the platform's figure;
// tests shrink the periods.
type FlexOptions struct {
	// MaximumInstanceCount bounds the instances of each queue-triggered
	// function (the app's maximumInstanceCount). Default 100.
	MaximumInstanceCount int
	// AlwaysReady is the number of instances each queue-triggered function
	// keeps however short its queue (the app's alwaysReady). Default 0:
	// the function scales to zero.
	AlwaysReady int
	// ScaleInterval is how often the scale controller decides. Default
	// 30 s, the rate Microsoft documents for new instances of non-HTTP
	// triggers (Azure Functions "Event-driven scaling").
	ScaleInterval time.Duration
	// ScaleInDelay is how long a decision's target must have stayed below
	// the instance count before instances are removed; negative removes
	// them at the first such decision. Default 1 minute, the emulator's
	// choice: the platform documents only that idle instances go after "a
	// number of minutes".
	ScaleInDelay time.Duration
	// TimerLease is the period of the timer's singleton lease
	// (SingletonOptions.ListenerLockPeriod). Default 60 s.
	TimerLease time.Duration
	// TimerLeaseRetry is how often an instance without the lease tries to
	// take it (SingletonOptions.ListenerLockRecoveryPollingInterval).
	// Default 1 minute.
	TimerLeaseRetry time.Duration
}

// withDefaults fills in the zero fields of f.
func (f FlexOptions) withDefaults() FlexOptions {
	if f.MaximumInstanceCount < 1 {
		f.MaximumInstanceCount = 100
	}
	f.AlwaysReady = min(max(f.AlwaysReady, 0), f.MaximumInstanceCount)
	if f.ScaleInterval <= 0 {
		f.ScaleInterval = 30 * time.Second
	}
	if f.ScaleInDelay == 0 {
		f.ScaleInDelay = time.Minute
	}
	if f.TimerLease <= 0 {
		f.TimerLease = 60 * time.Second
	}
	if f.TimerLeaseRetry <= 0 {
		f.TimerLeaseRetry = time.Minute
	}
	return f
}

// targetGroupSetting names the function group an instance runs
// (EnvironmentSettingNames.FunctionsTargetGroup); the handler inherits it
// from the host's environment.
const targetGroupSetting = "FUNCTIONS_TARGET_GROUP"

// maxScaleOutStep is how many instances one decision may add: Microsoft
// documents that target-based scaling "allows for scale up of four
// instances at a time" (Azure Functions "Target-based scaling").
const maxScaleOutStep = 4

// ScaleDecision is one decision of the scale controller for one
// queue-triggered function.
type ScaleDecision struct {
	Function string
	At       time.Time
	// QueueLength is the length the decision went by, as
	// QueueMetricsProvider.GetQueueLengthAsync reads it: the queue's
	// ApproximateMessagesCount, messages being processed included, but 0
	// when a peek finds no visible message.
	QueueLength int
	// Target is what QueueTargetScaler.GetScaleResultInternal asks for:
	// ceil(QueueLength / (batchSize + newBatchThreshold)).
	Target int
	// Before and After are the function's instance counts: After is the
	// Target within AlwaysReady and MaximumInstanceCount, at most four
	// more than Before, and no fewer than Before until the target has
	// stayed below it for ScaleInDelay.
	Before, After int
}

// nextInstanceCount is the instance count a decision sets: scale-out goes
// towards the target by at most maxScaleOutStep; scale-in goes to the
// target at once (the platform takes the largest scale-in asked for when
// nothing asks to scale out).
func nextInstanceCount(cur, target, alwaysReady, maximum int) int {
	target = min(max(target, alwaysReady), maximum)
	if target > cur {
		return min(target, cur+maxScaleOutStep)
	}
	return target
}

// group is the instances that run one function.
type group struct {
	h  *Host
	fn *Function

	mu   sync.Mutex
	want int         // instances asked for
	live []*Instance // running and not stopping, oldest first
}

// reconcile starts or stops instances until as many run as are wanted;
// it stops the newest first. Callers hold g.mu.
func (g *group) reconcile() {
	if g.h.stopping() {
		return
	}
	for len(g.live) < g.want {
		g.live = append(g.live, g.h.startInstance(g, make(chan error, 1)))
	}
	for len(g.live) > g.want {
		in := g.live[len(g.live)-1]
		g.live = g.live[:len(g.live)-1]
		g.h.log.Info("hostemu: stopping an instance", "instance", in.index, "group", in.group)
		in.stopRun()
	}
}

// ended drops in from the live instances and replaces it when it ended
// without being asked to (a crash, a host that stopped itself).
func (g *group) ended(in *Instance) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, l := range g.live {
		if l == in {
			g.live = append(g.live[:i], g.live[i+1:]...)
			break
		}
	}
	g.reconcile()
}

// scaler is the scale controller for one queue-triggered function.
type scaler struct {
	h *Host
	g *group
	// length reads the queue's length; tests replace it.
	length     func(ctx context.Context) int
	mu         sync.Mutex
	belowSince time.Time // when the target fell below the count; zero when it is not below
}

func newScaler(h *Host, g *group) (*scaler, error) {
	q, err := h.queues.get(g.fn.Queue.connectionString, g.fn.Queue.QueueName)
	if err != nil {
		return nil, err
	}
	s := &scaler{h: h, g: g}
	s.length = func(ctx context.Context) int { return queueLength(ctx, h.log, q) }
	return s, nil
}

// run decides every ScaleInterval until ctx ends.
func (s *scaler) run(ctx context.Context) {
	t := time.NewTicker(s.h.opts.Flex.ScaleInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.decide(ctx, time.Now())
	}
}

// decide makes one decision and applies it.
func (s *scaler) decide(ctx context.Context, now time.Time) ScaleDecision {
	n := s.length(ctx)
	s.g.mu.Lock()
	d := s.plan(n, len(s.g.live), now)
	s.g.want = d.After
	s.g.reconcile()
	s.g.mu.Unlock()

	level := slog.LevelDebug
	if d.After != d.Before {
		level = slog.LevelInfo
	}
	s.h.log.Log(ctx, level, "hostemu: scale decision", "function", d.Function, "queueLength", d.QueueLength,
		"target", d.Target, "before", d.Before, "after", d.After)
	if f := s.h.opts.OnScale; f != nil {
		f(d)
	}
	return d
}

// plan is the decision for a queue of length n and cur instances.
func (s *scaler) plan(n, cur int, now time.Time) ScaleDecision {
	f := s.h.opts.Flex
	cfg := s.h.config.Queues
	per := max(cfg.BatchSize+cfg.NewBatchThreshold, 1)
	d := ScaleDecision{Function: s.g.fn.Name, At: now, QueueLength: n, Target: (n + per - 1) / per, Before: cur}
	d.After = nextInstanceCount(cur, d.Target, f.AlwaysReady, f.MaximumInstanceCount)

	s.mu.Lock()
	defer s.mu.Unlock()
	if d.After >= cur {
		s.belowSince = time.Time{}
		return d
	}
	if s.belowSince.IsZero() {
		s.belowSince = now
	}
	if f.ScaleInDelay > 0 && now.Sub(s.belowSince) < f.ScaleInDelay {
		d.After = cur
	}
	return d
}

// queueLength is the queue's length as QueueMetricsProvider.
// GetQueueLengthAsync reads it: ApproximateMessagesCount, set to 0 when a
// peek finds no visible message (the count is often stale); 0 on errors.
func queueLength(ctx context.Context, log *slog.Logger, q *azqueue.QueueClient) int {
	props, err := q.GetProperties(ctx, nil)
	if err != nil {
		if ctx.Err() == nil {
			log.Warn("hostemu: reading the queue's length failed", "err", err)
		}
		return 0
	}
	if props.ApproximateMessagesCount == nil || *props.ApproximateMessagesCount <= 0 {
		return 0
	}
	peek, err := q.PeekMessages(ctx, &azqueue.PeekMessagesOptions{NumberOfMessages: ptr(int32(1))})
	if err != nil || len(peek.Messages) == 0 {
		return 0
	}
	return int(*props.ApproximateMessagesCount)
}

// timerLease is the blob lease that makes a timer listener a singleton
// across instances (BlobLeaseDistributedLockManager under
// SingletonManager).
type timerLease struct {
	mu      sync.Mutex
	held    bool
	holder  int       // the holding instance's index
	expires time.Time // when the holder's lease runs out unless renewed
	// grants and refusals record what happened, for logs and tests.
	grants   []leaseGrant
	refusals int
}

// leaseGrant is one acquisition of a lease.
type leaseGrant struct {
	instance int
	at       time.Time
	// previous is when the lease taken over ran out; zero when it was
	// free.
	previous time.Time
}

// tryAcquire takes the lease for instance when it is free or has expired.
func (l *timerLease) tryAcquire(instance int, now time.Time, period time.Duration) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	var previous time.Time
	if l.held {
		if now.Before(l.expires) {
			l.refusals++
			return false
		}
		previous = l.expires
	}
	l.held, l.holder, l.expires = true, instance, now.Add(period)
	l.grants = append(l.grants, leaseGrant{instance: instance, at: now, previous: previous})
	return true
}

// renew extends the lease of its holder; it reports false when instance
// no longer holds it.
func (l *timerLease) renew(instance int, now time.Time, period time.Duration) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.held || l.holder != instance || !now.Before(l.expires) {
		return false
	}
	l.expires = now.Add(period)
	return true
}

// release frees the lease if instance holds it.
func (l *timerLease) release(instance int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held && l.holder == instance {
		l.held = false
	}
}

// leaseOf returns the lease of a timer function.
func (h *Host) leaseOf(function string) *timerLease {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.leases == nil {
		h.leases = map[string]*timerLease{}
	}
	l := h.leases[function]
	if l == nil {
		l = &timerLease{}
		h.leases[function] = l
	}
	return l
}

// errNotFlex is returned by what only Options.Flex models.
var errNotFlex = errors.New("hostemu: only with Options.Flex")

// Crash ends the instance as a machine failure would (with Options.Flex):
// its handler gets SIGKILL at once, the invocations in flight fail, their
// messages are not completed (they come back when their visibility runs
// out), and its timer lease is kept until it expires. The platform starts
// a new instance in its place.
func (in *Instance) Crash() error {
	if in.h.opts.Flex == nil {
		return errNotFlex
	}
	in.crashOnce.Do(func() { close(in.crash) })
	return nil
}

// crashed reports whether Crash was called.
func (in *Instance) crashed() bool {
	select {
	case <-in.crash:
		return true
	default:
		return false
	}
}

// Group returns the function the instance runs with Options.Flex, "" when
// it runs them all.
func (in *Instance) Group() string { return in.group }

func (h *Host) stopping() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.shutdown
}

// startInstance starts a new instance of g; it reports on ready whether
// its first handler started.
func (h *Host) startInstance(g *group, ready chan<- error) *Instance {
	h.mu.Lock()
	in := newInstance(h, h.nextIndex, g.fn.Name, h.out)
	h.nextIndex++
	h.instances = append(h.instances, in)
	h.mu.Unlock()
	h.stats.started.Add(1)
	h.log.Info("hostemu: starting an instance", "instance", in.index, "group", in.group)

	// An instance stops when asked (stopRun), not when Run's context ends:
	// Run stops them all itself.
	ctx, cancel := context.WithCancel(context.Background())
	in.stopRun = cancel
	h.runs.Go(func() {
		defer cancel()
		err := in.run(ctx, ready)
		h.mu.Lock()
		h.instances = deleteInstance(h.instances, in)
		h.mu.Unlock()
		h.stats.stopped.Add(1)
		if err != nil && !in.crashed() {
			select {
			case h.fatal <- err:
			default:
			}
		}
		g.ended(in)
	})
	return in
}

func deleteInstance(list []*Instance, in *Instance) []*Instance {
	for i, l := range list {
		if l == in {
			return append(list[:i], list[i+1:]...)
		}
	}
	return list
}

// runFlex is Run with Options.Flex: a group of instances per function, a
// scale controller per queue-triggered function.
func (h *Host) runFlex(ctx context.Context) error {
	f := h.opts.Flex
	h.fatal = make(chan error, 1)
	var groups []*group
	var scalers []*scaler
	for fi := range h.functions {
		fn := &h.functions[fi]
		if fn.Disabled {
			continue
		}
		g := &group{h: h, fn: fn, want: h.opts.Instances}
		if fn.Queue != nil {
			g.want = f.AlwaysReady
			s, err := newScaler(h, g)
			if err != nil {
				return err
			}
			scalers = append(scalers, s)
		}
		groups = append(groups, g)
	}
	h.mu.Lock()
	h.groups, h.scalers = groups, scalers
	h.mu.Unlock()
	var readies []chan error
	for _, g := range groups {
		g.mu.Lock()
		for range g.want {
			ready := make(chan error, 1)
			readies = append(readies, ready)
			g.live = append(g.live, h.startInstance(g, ready))
		}
		g.mu.Unlock()
	}
	var runErr error
	for _, r := range readies {
		if err := <-r; err != nil && runErr == nil {
			runErr = err
		}
	}
	if runErr != nil {
		h.stopAll()
		return runErr
	}
	h.log.Info("hostemu: host started (Flex Consumption)", "app", h.appDir, "functions", len(h.functions))

	scaleCtx, stopScaling := context.WithCancel(ctx)
	var scaling sync.WaitGroup
	for _, s := range scalers {
		scaling.Go(func() { s.run(scaleCtx) })
	}
	select {
	case <-ctx.Done():
	case runErr = <-h.fatal:
	}
	stopScaling()
	scaling.Wait()
	h.stopAll()
	if runErr == nil {
		select {
		case runErr = <-h.fatal:
		default:
		}
	}
	h.log.Info("hostemu: host stopped")
	return runErr
}

// stopAll stops every instance the host's way and waits for them.
func (h *Host) stopAll() {
	h.mu.Lock()
	h.shutdown = true
	groups := append([]*group(nil), h.groups...)
	h.mu.Unlock()
	for _, g := range groups {
		g.mu.Lock()
		for _, in := range g.live {
			in.stopRun()
		}
		g.live, g.want = nil, 0
		g.mu.Unlock()
	}
	h.runs.Wait()
}

// scalerOf returns the scale controller of function, nil when it has none.
func (h *Host) scalerOf(function string) *scaler {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.scalers {
		if s.g.fn.Name == function {
			return s
		}
	}
	return nil
}

// groupInstances returns the live instances of function's group, by index.
func (h *Host) groupInstances(function string) []*Instance {
	h.mu.Lock()
	groups := append([]*group(nil), h.groups...)
	h.mu.Unlock()
	for _, g := range groups {
		if g.fn.Name != function {
			continue
		}
		g.mu.Lock()
		list := append([]*Instance(nil), g.live...)
		g.mu.Unlock()
		sort.Slice(list, func(i, j int) bool { return list[i].index < list[j].index })
		return list
	}
	return nil
}
