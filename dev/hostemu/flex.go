package hostemu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
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
//   - Scale-out follows the trigger: a scale controller sets the number of
//     instances of each queue- and Cosmos DB-triggered function, from zero
//     unless AlwaysReady keeps some (see ScaleDecision).
//   - An instance stops the host's way: its listeners stop taking work,
//     the invocations in flight finish (QueueListener.StopAsync,
//     TimerListener.StopAsync), a Cosmos DB trigger checkpoints the batch
//     it was running (drain mode), then the handler gets SIGKILL
//     (WorkerProcess.Dispose); it never gets SIGTERM. So does every
//     instance when Run's context ends.
//   - The timer is a singleton by a lease (see TimerLease), and
//     Instance.Crash ends an instance as a machine failure would.
//
// Options.Instances is the number of instances of each timer-triggered
// function. The zero value of each field takes the platform's figure;
// tests shrink the periods.
type FlexOptions struct {
	// MaximumInstanceCount bounds the instances of each scaled function
	// group (the app's maximumInstanceCount, as the REST spec words it
	// since 2026-07), or with AppWideLimit the instances of every group
	// together. Default 100.
	MaximumInstanceCount int
	// AppWideLimit makes MaximumInstanceCount bound the whole app (as a
	// Microsoft PM worded it in 2026-01): a scale-out adds only as many
	// instances as the other groups leave.
	AppWideLimit bool
	// Overshoot is how many instances beyond MaximumInstanceCount a
	// scaled group may run when its target asks for more: #11790 in
	// Azure/azure-functions-host reports 30–60 transient instances with a
	// maximum of 1 (HTTP triggers); that queue- and Cosmos DB-triggered
	// groups overshoot too is an assumption. Default 0: the maximum holds.
	Overshoot int
	// AlwaysReady is, by function name, the instances a scaled function
	// keeps however little work there is (the app's alwaysReady, per
	// function group). Default none: every group scales to zero.
	AlwaysReady map[string]int
	// StartDelay is how long an instance that a scale decision adds takes
	// before its handler starts (allocating and starting a host). Default
	// 0. Flex documents no cold-start time: a value here is an assumption.
	StartDelay time.Duration
	// InstanceMemoryMB, when set, gives every instance's handler processes
	// the CPU that much memory buys on Flex (CoresOf: 512 MB a quarter of a
	// core) through a control group; Run fails where the machine allows
	// none. Default 0: no limit, the machine's cores shared.
	InstanceMemoryMB int
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
	ready := map[string]int{}
	for name, n := range f.AlwaysReady {
		ready[name] = min(max(n, 0), f.MaximumInstanceCount)
	}
	f.AlwaysReady = ready
	if f.StartDelay < 0 {
		f.StartDelay = 0
	}
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

// ScaleDecision is one decision of the scale controller for one scaled
// function.
type ScaleDecision struct {
	Function string
	At       time.Time
	// QueueLength is, for a queue trigger, the length the decision went
	// by, as QueueMetricsProvider.GetQueueLengthAsync reads it: the
	// queue's ApproximateMessagesCount, messages being processed included,
	// but 0 when a peek finds no visible message.
	QueueLength int
	// RemainingWork and Partitions are, for a Cosmos DB trigger, what
	// CosmosDBMetricsProvider.GetMetricsAsync reads: the change feed's lag
	// summed over the leases, and how many leases there are (1 and 1
	// before any lease exists).
	RemainingWork int64
	Partitions    int
	// Target is what the trigger's target scaler asks for:
	// QueueTargetScaler's ceil(QueueLength / (batchSize +
	// newBatchThreshold)), or CosmosDBTargetScaler's ceil(RemainingWork /
	// maxItemsPerInvocation), at most Partitions.
	Target int
	// Before and After are the function's instance counts: After is the
	// Target within AlwaysReady and MaximumInstanceCount plus Overshoot (with
	// AppWideLimit, what the other groups leave of it), at most four more
	// than Before, and no fewer than Before until the target has stayed
	// below it for ScaleInDelay.
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

// cosmosTarget is CosmosDBTargetScaler.GetScaleResultInternal: one
// instance per maxItemsPerInvocation documents of lag (100 when the
// trigger sets none), no more than the leases.
func cosmosTarget(remaining int64, partitions, maxItems int) int {
	if maxItems <= 0 {
		maxItems = defaultCosmosMaxItems
	}
	target := int((remaining + int64(maxItems) - 1) / int64(maxItems))
	if partitions > 0 && target > partitions {
		target = partitions
	}
	return target
}

// defaultCosmosMaxItems is CosmosDBTargetScaler.DefaultMaxItemsPerInvocation.
const defaultCosmosMaxItems = 100

// group is the instances that run one function.
type group struct {
	h  *Host
	fn *Function

	mu   sync.Mutex
	want int         // instances asked for
	live []*Instance // running and not stopping, oldest first
	// retiring are the instances a rolling update took out of live and
	// is draining.
	retiring []*Instance
}

// reconcile starts or stops instances until as many run as are wanted;
// it stops the newest first, and a new instance starts its handler after
// delay. Callers hold g.mu.
func (g *group) reconcile(delay time.Duration) {
	if g.h.stopping() {
		return
	}
	for len(g.live) < g.want {
		g.live = append(g.live, g.h.startInstance(g, delay, make(chan error, 1)))
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
	g.reconcile(g.h.opts.Flex.StartDelay)
}

// scaler is the scale controller for one queue- or Cosmos DB-triggered
// function.
type scaler struct {
	h *Host
	g *group
	// vote reads the trigger's metric into a decision (QueueLength, or
	// RemainingWork and Partitions, and Target); tests replace it.
	vote       func(ctx context.Context, d *ScaleDecision)
	mu         sync.Mutex
	belowSince time.Time // when the target fell below the count; zero when it is not below
}

func newScaler(h *Host, g *group) (*scaler, error) {
	s := &scaler{h: h, g: g}
	switch {
	case g.fn.Queue != nil:
		q, err := h.queues.get(g.fn.Queue.connectionString, g.fn.Queue.QueueName)
		if err != nil {
			return nil, err
		}
		s.vote = func(ctx context.Context, d *ScaleDecision) { s.queueVote(d, queueLength(ctx, h.log, q)) }
	case g.fn.Cosmos != nil:
		s.vote = func(ctx context.Context, d *ScaleDecision) {
			d.RemainingWork, d.Partitions = h.feedLag(ctx, g.fn.Cosmos)
			d.Target = cosmosTarget(d.RemainingWork, d.Partitions, g.fn.Cosmos.MaxItemsPerInvocation)
		}
	default:
		return nil, nil
	}
	return s, nil
}

// queueVote is QueueTargetScaler's target for a queue of length n.
func (s *scaler) queueVote(d *ScaleDecision, n int) {
	cfg := s.h.config.Queues
	per := max(cfg.BatchSize+cfg.NewBatchThreshold, 1)
	d.QueueLength, d.Target = n, (n+per-1)/per
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
	d := ScaleDecision{Function: s.g.fn.Name, At: now}
	s.vote(ctx, &d)
	room := -1
	if f := s.h.opts.Flex; f.AppWideLimit {
		room = max(f.MaximumInstanceCount+max(f.Overshoot, 0)-s.h.instancesBesides(s.g), 0)
	}
	s.g.mu.Lock()
	s.bound(&d, len(s.g.live), room)
	s.g.want = d.After
	s.g.reconcile(s.h.opts.Flex.StartDelay)
	s.g.mu.Unlock()

	level := slog.LevelDebug
	if d.After != d.Before {
		level = slog.LevelInfo
	}
	s.h.log.Log(ctx, level, "hostemu: scale decision", "function", d.Function, "queueLength", d.QueueLength,
		"remainingWork", d.RemainingWork, "partitions", d.Partitions, "target", d.Target, "before", d.Before, "after", d.After)
	if f := s.h.opts.OnScale; f != nil {
		f(d)
	}
	return d
}

// plan is the decision for a queue of length n and cur instances.
func (s *scaler) plan(n, cur int, now time.Time) ScaleDecision {
	d := ScaleDecision{Function: s.g.fn.Name, At: now}
	s.queueVote(&d, n)
	s.bound(&d, cur, -1)
	return d
}

// bound sets d.Before to cur and d.After to the count the platform sets
// for d.Target. With AppWideLimit, room is how many instances the other
// groups leave: a scale-out stops there (no group loses instances to
// another's growth); -1 without it.
func (s *scaler) bound(d *ScaleDecision, cur, room int) {
	f := s.h.opts.Flex
	ready := f.AlwaysReady[s.g.fn.Name]
	d.Before = cur
	d.After = nextInstanceCount(cur, d.Target, ready, f.MaximumInstanceCount+max(f.Overshoot, 0))
	if room >= 0 && d.After > cur {
		d.After = max(min(d.After, room), cur, min(ready, d.After))
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if d.After >= cur {
		s.belowSince = time.Time{}
		return
	}
	if s.belowSince.IsZero() {
		s.belowSince = d.At
	}
	if f.ScaleInDelay > 0 && d.At.Sub(s.belowSince) < f.ScaleInDelay {
		d.After = cur
	}
}

// instancesBesides counts the live instances of every group but g.
func (h *Host) instancesBesides(g *group) int {
	h.mu.Lock()
	groups := append([]*group(nil), h.groups...)
	h.mu.Unlock()
	n := 0
	for _, o := range groups {
		if o == g {
			continue
		}
		o.mu.Lock()
		n += len(o.live)
		o.mu.Unlock()
	}
	return n
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

// startInstance starts a new instance of g, whose handler starts after
// delay; it reports on ready whether its first handler started.
func (h *Host) startInstance(g *group, delay time.Duration, ready chan<- error) *Instance {
	h.mu.Lock()
	in := newInstance(h, h.nextIndex, g.fn.Name, h.out)
	h.nextIndex++
	h.instances = append(h.instances, in)
	h.mu.Unlock()
	if mb := h.opts.Flex.InstanceMemoryMB; mb > 0 {
		cg, err := newCPUGroup(fmt.Sprintf("hostemu-%d-%d", os.Getpid(), in.index), CoresOf(mb))
		if err != nil {
			select {
			case h.fatal <- err:
			default:
			}
		}
		in.cpu = cg
	}
	h.stats.started.Add(1)
	h.log.Info("hostemu: starting an instance", "instance", in.index, "group", in.group)

	// An instance stops when asked (stopRun), not when Run's context ends:
	// Run stops them all itself.
	ctx, cancel := context.WithCancel(context.Background())
	in.stopRun = cancel
	h.runs.Go(func() {
		defer cancel()
		var err error
		if sleepCtx(ctx, delay) {
			err = in.run(ctx, ready)
		} else {
			ready <- nil
		}
		if in.cpu != nil {
			in.cpu.remove()
		}
		h.mu.Lock()
		h.instances = deleteInstance(h.instances, in)
		h.mu.Unlock()
		h.stats.stopped.Add(1)
		close(in.done)
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
	if f.InstanceMemoryMB > 0 {
		probe, err := newCPUGroup(fmt.Sprintf("hostemu-%d-probe", os.Getpid()), CoresOf(f.InstanceMemoryMB))
		if err != nil {
			return err
		}
		probe.remove()
	}
	var groups []*group
	var scalers []*scaler
	for fi := range h.functions {
		fn := &h.functions[fi]
		if fn.Disabled {
			continue
		}
		g := &group{h: h, fn: fn, want: h.opts.Instances}
		if fn.Queue != nil || fn.Cosmos != nil {
			g.want = f.AlwaysReady[fn.Name]
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
			g.live = append(g.live, h.startInstance(g, 0, ready))
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
		for _, in := range append(g.live, g.retiring...) {
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

// ParseAlwaysReady reads always-ready instance counts written as
// "function=count,…" (the plan's alwaysReady list, by function group);
// "" is none.
func ParseAlwaysReady(s string) (map[string]int, error) {
	out := map[string]int{}
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, count, ok := strings.Cut(item, "=")
		n, err := strconv.Atoi(strings.TrimSpace(count))
		if !ok || strings.TrimSpace(name) == "" || err != nil || n < 0 {
			return nil, fmt.Errorf("always-ready %q: want function=count, count at least 0", item)
		}
		out[strings.TrimSpace(name)] = n
	}
	return out, nil
}
