package hostemu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// QueueDataForm is how a queue message's text appears in the invocation's
// Data.
type QueueDataForm int

const (
	// QueueDataHost sends what the host's custom-handler code sends for a
	// string trigger value: the message text serialized as a JSON string,
	// and that serialization sent as a JSON string again, so the handler
	// sees "\"{\\\"a\\\":1}\"" for the message {"a":1}
	// (ScriptInvocationContextExtensions.GetHttpScriptInvocationContextValue
	// falls back to JsonConvert.SerializeObject). It is the default.
	QueueDataHost QueueDataForm = iota
	// QueueDataString sends the message text as one JSON string.
	QueueDataString
	// QueueDataJSON sends the message as JSON when its text is valid JSON,
	// else as one JSON string.
	QueueDataJSON
)

// Options configures Run. The zero value is usable.
type Options struct {
	// Instances is the number of independent host instances, each with its
	// own handler process and queue and Cosmos DB listeners, as when the
	// app scales out. Timer triggers run on instance 0 only. With Flex it is
	// the number of instances of each timer-triggered function. Default 1.
	Instances int
	// Restart makes a handler that exits on its own do what it does under
	// the host: a new one starts unless it exited with status 0, and the
	// third failure within 30 minutes of the one before stops the host,
	// which then starts again as a new host, as the platform would. Without
	// it, any exit of a handler stops Run with an error. A function timeout
	// kills the handler and starts a new one either way.
	Restart bool
	// Output receives the handlers' stdout and stderr lines; with several
	// instances each line starts with "[<instance>] ". Default os.Stderr.
	Output io.Writer
	// OnLog is called with every line the host would log for a handler: its
	// stdout and stderr lines and its responses' Logs, with the level the
	// host gives each (see LogLine). It must be safe for concurrent use and
	// return quickly.
	OnLog func(LogLine)
	// Logger receives the host's own log (invocations, retries, poison
	// messages, the handlers' Logs). Default slog.Default().
	Logger *slog.Logger
	// OnInvocation is called after every invocation, from the goroutine
	// that ran it; it must be safe for concurrent use and return quickly.
	OnInvocation func(Invocation)
	// QueueData is how queue messages appear in Data. Default QueueDataHost.
	QueueData QueueDataForm
	// Env is the handler's base environment, before the settings and the
	// host's variables. Nil means os.Environ().
	Env []string
	// Location is the host's local time zone: schedules are evaluated in
	// it, and dates read from JSON with an offset are converted to it.
	// Default UTC, as in Azure.
	Location *time.Location
	// StartTimeout bounds the wait for a new handler to answer GET /.
	// Default 30 s (HttpWorkerOptions.InitializationTimeout).
	StartTimeout time.Duration
	// StopTimeout is how long a handler has to exit after SIGTERM before it
	// gets SIGKILL. Default 10 s. Unused with Flex, which sends no SIGTERM.
	StopTimeout time.Duration
	// DrainTimeout is how long Run waits, once its context ends, for
	// invocations in flight to finish before it sends SIGTERM to the
	// handlers. Default 0: SIGTERM at once, the handler drains them.
	// Unused with Flex, which waits for them all.
	DrainTimeout time.Duration
	// InvocationTimeout bounds one invocation, its output bindings
	// included; an invocation that runs out of it fails and its handler is
	// killed and started again. Default host.json's functionTimeout.
	InvocationTimeout time.Duration
	// StorageLatency delays every request the emulator makes to Storage
	// (receive, delete, update, put, each output message included), standing
	// in for the round trip to a real account. Default 0.
	StorageLatency time.Duration
	// Flex runs the app the way the Flex Consumption plan does (see
	// FlexOptions); nil keeps the quick local form, one kind of instance
	// running every function.
	Flex *FlexOptions
	// OnScale is called after every decision of the scale controller (with
	// Flex); it must be safe for concurrent use and return quickly.
	OnScale func(ScaleDecision)
	// CosmosTrigger shortens the intervals of cosmosDBTrigger listeners;
	// nil keeps function.json's values and the extension's defaults.
	CosmosTrigger *CosmosTriggerOptions
}

// Invocation describes one finished invocation, for Options.OnInvocation.
type Invocation struct {
	Function string
	Instance int
	// ID is the X-Azure-Functions-InvocationId sent to the handler.
	ID string
	// Status is the handler's HTTP status, 0 when there was no response.
	Status int
	// Err is nil when the invocation succeeded (2xx, a valid response and
	// its outputs written).
	Err error
	// Start is when the invocation began; Duration how long it took, its
	// output bindings included.
	Start    time.Time
	Duration time.Duration
	// ReturnValue is the response's ReturnValue, when the body was JSON.
	ReturnValue json.RawMessage
	// DequeueCount is the message's dequeue count for queue triggers, 0
	// for timers and Cosmos DB triggers.
	DequeueCount int64
	// TraceParent is the W3C traceparent header sent to the handler.
	TraceParent string
}

// InvocationKey groups invocations in Counters.
type InvocationKey struct {
	Function string
	Status   int // the HTTP status, 0 when there was no response
}

// Counters is a snapshot of what the host has done.
type Counters struct {
	Invocations map[InvocationKey]int64
	// Failures counts failed invocations, whatever their status.
	Failures         int64
	MessagesEnqueued int64 // written by queue output bindings
	// Receives counts the pollers' requests for messages, empty answers
	// included; MessagesReceived the messages they got. Their ratio shows
	// whether messages are fetched in batches or one or two at a time.
	Receives          int64
	MessagesReceived  int64
	MessagesDeleted   int64 // deleted after a successful invocation
	MessagesRetried   int64 // made visible again after a failure
	MessagesPoisoned  int64 // moved to <queue>-poison
	TimerTicksRun     int64
	TimerTicksSkipped int64 // occurrences that passed while a run was going
	// HandlerRestarts counts the handlers started after the first of a
	// host: after a failure, an exit or a function timeout.
	HandlerRestarts int64
	// Timeouts counts the invocations that ran out of functionTimeout.
	Timeouts int64
	// HostRestarts counts the times a host stopped (three handler
	// failures) and started again.
	HostRestarts int64
	// Wakeups counts the notifications a queue write gave the listeners of
	// its own instance; writes never wake another instance's.
	Wakeups int64
	// InstancesStarted and InstancesStopped count the instances started
	// and ended (scaled in, crashed or stopped with Run), the first ones
	// included.
	InstancesStarted int64
	InstancesStopped int64
	// InstancesReplaced counts the instances a rolling update replaced:
	// each ran beside its replacement until it had drained.
	InstancesReplaced int64
	// ChangeFeedReads counts the cosmosDBTrigger listeners' reads of the
	// change feed, those that found nothing new included;
	// DocumentsDelivered the documents they handed to invocations;
	// Checkpoints the continuations written into leases; LeasesAcquired
	// the leases they took; ListenerStartFailures their failed starts.
	ChangeFeedReads       int64
	DocumentsDelivered    int64
	Checkpoints           int64
	LeasesAcquired        int64
	ListenerStartFailures int64
}

// Calls returns the number of invocations of function, whatever their
// status.
func (c Counters) Calls(function string) int64 {
	var n int64
	for k, v := range c.Invocations {
		if k.Function == function {
			n += v
		}
	}
	return n
}

// Host is a loaded function app. Set Options before calling Run.
type Host struct {
	// Options configures Run.
	Options Options

	appDir   string
	settings map[string]string
	// deployed overrides settings for the handlers of instances started
	// after a RollingUpdate; nil before any.
	deployed  map[string]string
	depMu     sync.Mutex
	config    HostConfig
	functions []Function

	queues queueClients
	cosmos cosmosClients

	mu        sync.Mutex
	started   bool
	instances []*Instance
	opts      Options // Options with defaults, fixed by Run
	log       *slog.Logger
	out       *sharedWriter

	// With Options.Flex: the groups of instances, their scale controllers,
	// the timers' leases, the instances' runs and their errors.
	nextIndex int
	shutdown  bool
	groups    []*group
	scalers   []*scaler
	leases    map[string]*timerLease
	runs      sync.WaitGroup
	fatal     chan error

	stats stats
}

// stats holds the counters.
type stats struct {
	mu          sync.Mutex
	invocations map[InvocationKey]int64
	failures    atomic.Int64
	enqueued    atomic.Int64
	receives    atomic.Int64
	received    atomic.Int64
	deleted     atomic.Int64
	retried     atomic.Int64
	poisoned    atomic.Int64
	ticksRun    atomic.Int64
	ticksSkip   atomic.Int64
	restarts    atomic.Int64
	timeouts    atomic.Int64
	hostRestart atomic.Int64
	wakeups     atomic.Int64
	started     atomic.Int64
	stopped     atomic.Int64
	replaced    atomic.Int64

	feedReads        atomic.Int64
	documents        atomic.Int64
	checkpoints      atomic.Int64
	leasesAcquired   atomic.Int64
	listenerFailures atomic.Int64
}

// Load reads appDir/host.json and every appDir/<function>/function.json.
// settings are the app settings: %NAME% expressions and connection names
// are resolved from them, and the handler gets them as its environment.
func Load(appDir string, settings map[string]string) (*Host, error) {
	abs, err := filepath.Abs(appDir)
	if err != nil {
		return nil, fmt.Errorf("loading app %s: %w", appDir, err)
	}
	settings = maps.Clone(settings)
	if settings == nil {
		settings = map[string]string{}
	}
	cfg, err := loadHostConfig(abs, settings)
	if err != nil {
		return nil, fmt.Errorf("loading app %s: %w", abs, err)
	}
	fns, err := loadFunctions(abs, settings)
	if err != nil {
		return nil, fmt.Errorf("loading app %s: %w", abs, err)
	}
	if len(fns) == 0 {
		return nil, fmt.Errorf("loading app %s: no function.json found", abs)
	}
	h := &Host{appDir: abs, settings: settings, config: cfg, functions: fns}
	h.stats.invocations = map[InvocationKey]int64{}
	return h, nil
}

// Config returns what the host read from host.json.
func (h *Host) Config() HostConfig { return h.config }

// Functions returns the app's functions, sorted by name.
func (h *Host) Functions() []Function { return append([]Function(nil), h.functions...) }

// Counters returns a snapshot of the counters.
func (h *Host) Counters() Counters {
	h.stats.mu.Lock()
	inv := maps.Clone(h.stats.invocations)
	h.stats.mu.Unlock()
	return Counters{
		Invocations:       inv,
		Failures:          h.stats.failures.Load(),
		MessagesEnqueued:  h.stats.enqueued.Load(),
		Receives:          h.stats.receives.Load(),
		MessagesReceived:  h.stats.received.Load(),
		MessagesDeleted:   h.stats.deleted.Load(),
		MessagesRetried:   h.stats.retried.Load(),
		MessagesPoisoned:  h.stats.poisoned.Load(),
		TimerTicksRun:     h.stats.ticksRun.Load(),
		TimerTicksSkipped: h.stats.ticksSkip.Load(),
		HandlerRestarts:   h.stats.restarts.Load(),
		Timeouts:          h.stats.timeouts.Load(),
		HostRestarts:      h.stats.hostRestart.Load(),
		Wakeups:           h.stats.wakeups.Load(),
		InstancesStarted:  h.stats.started.Load(),
		InstancesStopped:  h.stats.stopped.Load(),
		InstancesReplaced: h.stats.replaced.Load(),

		ChangeFeedReads:       h.stats.feedReads.Load(),
		DocumentsDelivered:    h.stats.documents.Load(),
		Checkpoints:           h.stats.checkpoints.Load(),
		LeasesAcquired:        h.stats.leasesAcquired.Load(),
		ListenerStartFailures: h.stats.listenerFailures.Load(),
	}
}

// Instances returns the running instances; nil before Run.
func (h *Host) Instances() []*Instance {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*Instance(nil), h.instances...)
}

// Port returns instance 0's current handler port, 0 when none runs.
func (h *Host) Port() int {
	in := h.instance0()
	if in == nil {
		return 0
	}
	return in.Port()
}

// Kill sends SIGKILL to instance 0's handler.
func (h *Host) Kill() error {
	in := h.instance0()
	if in == nil {
		return errors.New("hostemu: not running")
	}
	return in.Kill()
}

func (h *Host) instance0() *Instance {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.instances) == 0 {
		return nil
	}
	return h.instances[0]
}

// withDefaults fills in the zero fields of o.
func (h *Host) withDefaults(o Options) Options {
	if o.Instances < 1 {
		o.Instances = 1
	}
	if o.Output == nil {
		o.Output = os.Stderr
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Env == nil {
		o.Env = os.Environ()
	}
	if o.Location == nil {
		o.Location = time.UTC
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 30 * time.Second
	}
	if o.StopTimeout <= 0 {
		o.StopTimeout = 10 * time.Second
	}
	if o.InvocationTimeout <= 0 {
		o.InvocationTimeout = h.config.FunctionTimeout
	}
	if o.Flex != nil {
		f := o.Flex.withDefaults()
		o.Flex = &f
	}
	return o
}

// Run starts the handlers, waits until each answers, then runs the timers
// and queue listeners until ctx ends. Then it stops taking work, sends
// SIGTERM to the handlers (after Options.DrainTimeout), waits for them and
// for the message completions, and returns nil; with Options.Flex it
// stops every instance the host's way instead (see FlexOptions). It
// returns an error when a handler cannot start, when a handler exits on
// its own without Options.Restart, or when a host stops itself without
// Options.Restart. A Host runs once.
func (h *Host) Run(ctx context.Context) error {
	h.mu.Lock()
	if h.started {
		h.mu.Unlock()
		return errors.New("hostemu: Run called twice")
	}
	h.started = true
	h.opts = h.withDefaults(h.Options)
	h.log = h.opts.Logger
	h.queues.latency = h.opts.StorageLatency
	h.out = newSharedWriter(h.opts.Output)
	h.mu.Unlock()

	for _, fn := range h.functions {
		if fn.Error != nil {
			h.log.Error(fmt.Sprintf("hostemu: the '%s' function is in error", fn.Name), "err", fn.Error)
		}
	}
	if err := h.createQueues(ctx); err != nil {
		return err
	}
	if err := h.createLeaseContainers(ctx); err != nil {
		return err
	}
	if h.opts.Flex != nil {
		return h.runFlex(ctx)
	}

	h.mu.Lock()
	for i := range h.opts.Instances {
		h.instances = append(h.instances, newInstance(h, i, "", h.out))
	}
	instances := append([]*Instance(nil), h.instances...)
	h.mu.Unlock()
	h.stats.started.Add(int64(len(instances)))
	defer h.stats.stopped.Add(int64(len(instances)))

	// runCtx ends the instances: when ctx ends, or when one fails for good.
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	ready := make(chan error, len(instances))
	done := make(chan error, len(instances))
	for _, in := range instances {
		go func() { done <- in.run(runCtx, ready) }()
	}
	var runErr error
	for range instances {
		if err := <-ready; err != nil && runErr == nil {
			runErr = err
		}
	}
	if runErr != nil {
		stop()
		for range instances {
			<-done
		}
		return runErr
	}
	h.log.Info("hostemu: host started", "app", h.appDir, "instances", len(instances), "functions", len(h.functions))

	running := len(instances)
	select {
	case <-ctx.Done():
	case runErr = <-done:
		running--
	}
	stop()
	for range running {
		if err := <-done; err != nil && runErr == nil {
			runErr = err
		}
	}
	h.log.Info("hostemu: host stopped")
	return runErr
}

// createQueues creates every trigger and output queue that does not exist.
func (h *Host) createQueues(ctx context.Context) error {
	for _, fn := range h.functions {
		if fn.Queue != nil {
			if err := h.queues.ensure(ctx, fn.Queue.connectionString, fn.Queue.QueueName); err != nil {
				return fmt.Errorf("function %s: %w", fn.Name, err)
			}
		}
		for _, o := range fn.Outputs {
			if err := h.queues.ensure(ctx, o.connectionString, o.QueueName); err != nil {
				return fmt.Errorf("function %s: %w", fn.Name, err)
			}
		}
	}
	return nil
}

// createLeaseContainers creates the lease container of every
// cosmosDBTrigger with createLeaseContainerIfNotExists, as the extension
// does when it binds the trigger (CosmosDBTriggerAttributeBindingProvider.
// TryCreateAsync), before any listener starts.
func (h *Host) createLeaseContainers(ctx context.Context) error {
	for _, fn := range h.functions {
		c := fn.Cosmos
		if fn.Disabled || c == nil || !c.CreateLeaseContainerIfNotExists {
			continue
		}
		cl, err := h.cosmos.get(c.leaseAccount)
		if err != nil {
			return fmt.Errorf("function %s: %w", fn.Name, err)
		}
		if err := cl.ensureLeaseContainer(ctx, c.LeaseDatabaseName, c.LeaseContainerName); err != nil {
			return fmt.Errorf("function %s: %w", fn.Name, err)
		}
	}
	return nil
}

// record counts an invocation and calls the hook.
func (h *Host) record(inv Invocation) {
	h.stats.mu.Lock()
	h.stats.invocations[InvocationKey{Function: inv.Function, Status: inv.Status}]++
	h.stats.mu.Unlock()
	if inv.Err != nil {
		h.stats.failures.Add(1)
	}
	if h.opts.OnInvocation != nil {
		h.opts.OnInvocation(inv)
	}
}
