package hostemu

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Environment variables the host gives a custom handler
// (HttpWorkerProcess.CreateWorkerProcess).
const (
	envCustomHandlerPort = "FUNCTIONS_CUSTOMHANDLER_PORT"
	envCustomHandlerID   = "FUNCTIONS_CUSTOMHANDLER_WORKER_ID"
	envHTTPWorkerPort    = "FUNCTIONS_HTTPWORKER_PORT"
	envHTTPWorkerID      = "FUNCTIONS_HTTPWORKER_ID"
	envScriptRoot        = "AzureWebJobsScriptRoot"
)

// Worker process constants of the host.
const (
	// workerReadyPoll is how often the host asks a starting handler for
	// GET / (WorkerConstants.WorkerReadyCheckPollingIntervalMilliseconds).
	workerReadyPoll = 25 * time.Millisecond
	// crashLimit and crashWindow: the host stops at the third handler
	// failure that comes within 30 minutes of the one before
	// (HttpFunctionInvocationDispatcher.ErrorEventsThreshold,
	// AddOrUpdateErrorBucket; WorkerConstants.
	// WorkerRestartErrorIntervalThresholdInMinutes).
	crashLimit  = 3
	crashWindow = 30 * time.Minute
	// intentionalRestartExit is the exit status that asks the host for a
	// new handler without counting as a failure
	// (WorkerConstants.IntentionalRestartExitCode).
	intentionalRestartExit = 200
	// killWait is how long WorkerProcess.Dispose waits for a killed handler.
	killWait = time.Second
	// platformRestartDelay is how long after the host stops the emulator
	// starts it again with Options.Restart. The platform restarts a stopped
	// host; the host's source says nothing of when.
	platformRestartDelay = time.Second
)

var (
	// errHandlerStopped fails invocations once an instance's handler is
	// gone for good.
	errHandlerStopped = errors.New("handler stopped")
	// errHostStopped ends an instance whose handler failed crashLimit
	// times.
	errHostStopped = errors.New("exceeded http worker restart retry count: the host stopped")
	// errRestart ends a start that the host abandons for a new one.
	errRestart = errors.New("handler restart")
)

// Instance is one host instance: a handler process and the listeners that
// feed it.
type Instance struct {
	h      *Host
	index  int
	group  string // the function it runs with Options.Flex; "" for all
	out    io.Writer
	client *http.Client

	// stopRun stops a Flex instance the host's way; crash, closed by
	// Crash, ends it at once.
	stopRun   context.CancelFunc
	crash     chan struct{}
	crashOnce sync.Once
	// cpu, with FlexOptions.InstanceMemoryMB, holds the handler processes
	// to the instance's CPU.
	cpu *cpuGroup
	// settings are the app settings its handlers get: the deployment's
	// when the instance started (see Host.RollingUpdate).
	settings map[string]string
	// done is closed once a Flex instance has ended.
	done chan struct{}
	// outputs holds the output writes that go on after their invocation
	// timed out.
	outputs sync.WaitGroup

	mu      sync.Mutex
	cur     *handlerProc  // the latest process, ready or not
	ready   bool          // cur answers requests
	stopped bool          // no process will run again
	changed chan struct{} // closed and replaced on every change above

	// restarts asks the supervisor for a new handler (function timeouts).
	restarts chan string

	watchMu  sync.Mutex
	watchers map[string][]*poller // by queue name
}

// handlerProc is one run of the handler executable.
type handlerProc struct {
	cmd     *exec.Cmd
	port    int
	exited  chan struct{} // closed once the process has exited
	waitErr error         // valid after exited is closed
}

func newInstance(h *Host, index int, group string, out *sharedWriter) *Instance {
	var w io.Writer = out
	if h.opts.Instances > 1 || h.opts.Flex != nil {
		w = out.prefixed(fmt.Sprintf("[%d] ", index))
	}
	// DefaultHttpWorkerService's HttpClient puts no limit on the
	// invocations in flight to the handler; neither does this one.
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.Proxy = nil
	transport.MaxIdleConnsPerHost = 256
	return &Instance{
		h:        h,
		index:    index,
		group:    group,
		out:      w,
		client:   &http.Client{Transport: transport},
		settings: h.deployment(),
		done:     make(chan struct{}),
		crash:    make(chan struct{}),
		changed:  make(chan struct{}),
		restarts: make(chan string, 16),
		watchers: map[string][]*poller{},
	}
}

// Index returns the instance's number, from 0.
func (in *Instance) Index() int { return in.index }

// runs reports whether the instance runs fn's listener: with function
// groups, only its own function's (FunctionGroupListenerDecorator gives
// the others a listener that never starts).
func (in *Instance) runs(fn *Function) bool { return in.group == "" || in.group == fn.Name }

// Port returns the current handler's port, 0 when none runs.
func (in *Instance) Port() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.cur == nil {
		return 0
	}
	return in.cur.port
}

// PID returns the current handler's process id, 0 when none runs.
func (in *Instance) PID() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.cur == nil || in.cur.cmd.Process == nil {
		return 0
	}
	return in.cur.cmd.Process.Pid
}

// Kill sends SIGKILL to the current handler (and its process group), as a
// crash would. With Options.Restart the instance starts a new one.
func (in *Instance) Kill() error {
	in.mu.Lock()
	p := in.cur
	in.mu.Unlock()
	if p == nil {
		return errors.New("hostemu: no handler running")
	}
	return p.signal(syscall.SIGKILL)
}

// restartHandler asks for the handler to be killed and a new one started.
func (in *Instance) restartHandler(reason string) {
	select {
	case in.restarts <- reason:
	default: // restarts already pending
	}
}

// setState updates the process state and wakes everyone waiting on it.
func (in *Instance) setState(p *handlerProc, ready, stopped bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.cur, in.ready, in.stopped = p, ready, stopped
	close(in.changed)
	in.changed = make(chan struct{})
}

// acquire waits until a handler answers and returns it.
func (in *Instance) acquire(ctx context.Context) (*handlerProc, error) {
	for {
		in.mu.Lock()
		p, ready, stopped, changed := in.cur, in.ready, in.stopped, in.changed
		in.mu.Unlock()
		if stopped {
			return nil, errHandlerStopped
		}
		if p != nil && ready {
			return p, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the handler: %w", context.Cause(ctx))
		}
	}
}

// completionGrace bounds how long an instance waits, after its handler has
// stopped, for message completions (deletes, releases) to finish.
const completionGrace = 30 * time.Second

// run runs the instance until ctx ends: its handler, and its listeners
// (the timer listener is a singleton: it runs on instance 0, or with
// Options.Flex on the instance that holds its lease). It reports on ready
// whether the first handler started. When ctx ends it stops taking work,
// waits up to Options.DrainTimeout for the work in flight, stops the
// handler, and waits for the message completions; with Options.Flex it
// waits for all the work in flight, then kills the handler.
//
// When the host stops itself (three handler failures) the instance ends
// with an error, or with Options.Restart starts again as a new host, as
// the platform would.
func (in *Instance) run(ctx context.Context, ready chan<- error) error {
	for first := true; ; first = false {
		err := in.runHost(ctx, first, ready)
		if in.crashed() {
			return nil
		}
		if !errors.Is(err, errHostStopped) || !in.h.opts.Restart || ctx.Err() != nil {
			return err
		}
		in.h.log.Error("hostemu: the host stopped; starting it again as the platform does", "instance", in.index, "err", err)
		in.h.stats.hostRestart.Add(1)
		if !sleepCtx(ctx, platformRestartDelay) {
			return nil
		}
	}
}

// runHost is one life of the host on this instance.
func (in *Instance) runHost(ctx context.Context, first bool, ready chan<- error) error {
	h := in.h
	fail := func(err error) error {
		if first {
			ready <- err
		}
		return err
	}
	// HttpWorkerOptionsSetup picks one port for the host's life; every
	// handler it starts listens on it.
	port, err := freePort()
	if err != nil {
		return fail(fmt.Errorf("instance %d: %w", in.index, err))
	}
	in.watchMu.Lock()
	clear(in.watchers)
	in.watchMu.Unlock()
	var pollers []*poller
	for fi := range h.functions {
		fn := &h.functions[fi]
		if fn.Disabled || fn.Queue == nil || !in.runs(fn) {
			continue
		}
		p, err := newPoller(h, in, fn)
		if err != nil {
			return fail(err)
		}
		pollers = append(pollers, p)
	}
	for len(in.restarts) > 0 {
		<-in.restarts
	}
	in.setState(nil, false, false)

	// Three lifetimes: intake (listeners take new work), handlers (the
	// process runs) and work (invocations and message completions).
	intake, stopIntake := context.WithCancel(ctx)
	defer stopIntake()
	handlers, stopHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer stopHandlers()
	work, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()

	started := make(chan error, 1)
	superDone := make(chan error, 1)
	go func() { superDone <- in.supervise(handlers, port, first, started) }()
	if first {
		err := <-started
		ready <- err
		if err != nil {
			<-superDone
			return err
		}
	}

	var wg sync.WaitGroup
	for fi := range h.functions {
		fn := &h.functions[fi]
		if fn.Disabled || fn.Timer == nil || !in.runs(fn) {
			continue
		}
		tr := &timerRunner{h: h, in: in, fn: fn}
		switch {
		case h.opts.Flex != nil:
			wg.Go(func() { tr.runSingleton(intake, work) })
		case in.index == 0:
			wg.Go(func() { tr.run(intake, work) })
		}
	}
	for _, p := range pollers {
		wg.Go(func() { p.run(intake, work, &wg) })
	}
	// Every instance runs a listener of each cosmosDBTrigger function; their
	// change feed processors share the leases.
	for fi := range h.functions {
		fn := &h.functions[fi]
		if fn.Disabled || fn.Cosmos == nil || !in.runs(fn) {
			continue
		}
		cl := newCosmosListener(h, in, fn)
		wg.Go(func() { cl.run(intake, work) })
	}

	crashed := false
	select {
	case <-ctx.Done():
	case err = <-superDone:
		superDone = nil
	case <-in.crash:
		crashed = true
	}
	stopIntake()
	allDone := make(chan struct{})
	go func() {
		wg.Wait()
		// Every invoke has returned, so no output write starts after this.
		in.outputs.Wait()
		close(allDone)
	}()
	switch {
	case crashed:
		// The invocations in flight die with the machine.
		stopWork()
	case err != nil:
	case h.opts.Flex != nil:
		// The host stops its listeners, which wait for the invocations in
		// flight (QueueListener.StopAsync awaits its processing tasks,
		// TimerListener.StopAsync its invocation lock), and only then
		// disposes of the worker.
		<-allDone
	case h.opts.DrainTimeout > 0:
		select {
		case <-allDone:
		case <-time.After(h.opts.DrainTimeout):
		}
	}
	stopHandlers()
	if superDone != nil {
		if e := <-superDone; e != nil && err == nil {
			err = e
		}
	}
	// The handler is gone, so invocations in flight end quickly; give
	// their message completions time to reach the queue.
	select {
	case <-allDone:
	case <-time.After(completionGrace):
		h.log.Warn("hostemu: work still running after the handler stopped; cancelling it", "instance", in.index)
	}
	stopWork()
	<-allDone
	return err
}

// supervise runs the handler until ctx ends. It starts it, reports the
// first start on started when report is set, and then does what the host
// does when the handler exits or an invocation times out:
//
//   - a function timeout kills the process (WorkerProcess.Dispose:
//     Process.Kill, SIGKILL to the process alone) and starts a new one;
//     that is no failure;
//   - exit status 0 raises nothing (WorkerProcess.OnProcessExited): the
//     host keeps sending invocations to the dead port;
//   - exit status 200 starts a new one (HttpWorkerProcess.
//     HandleWorkerProcessRestart);
//   - any other exit, and a start that fails, is a failure
//     (HttpWorkerProcess.HandleWorkerProcessExitError, HttpWorkerChannel.
//     DelayUntilWokerInitialized): a new one starts at once, and the third
//     failure within 30 minutes of the one before stops the host
//     (HttpFunctionInvocationDispatcher.RestartWorkerChannel).
//
// Without Options.Restart any exit ends supervise with an error. On ctx
// end it stops the handler with SIGTERM (then SIGKILL after
// Options.StopTimeout); with Options.Flex, or after Crash, it kills it as
// the host disposes of a worker.
func (in *Instance) supervise(ctx context.Context, port int, report bool, started chan<- error) error {
	h := in.h
	log := h.log.With("instance", in.index)
	var failures []time.Time
	// failed counts a failure and reports whether the host gives up.
	failed := func(why string) bool {
		now := time.Now()
		if n := len(failures); n > 0 && now.Sub(failures[n-1]) > crashWindow {
			failures = failures[:0]
		}
		failures = append(failures, now)
		if len(failures) >= crashLimit {
			log.Error("hostemu: exceeded http worker restart retry count; the host stops", "reason", why)
			return true
		}
		log.Error("hostemu: handler failed; starting a new one", "reason", why)
		return false
	}
	stop := func(err error) error {
		in.setState(nil, false, true)
		return err
	}
	for {
		p, err := in.start(ctx, port)
		switch {
		case err == nil:
		case ctx.Err() != nil:
			if report {
				started <- err
			}
			return stop(nil)
		case report:
			started <- err
			return stop(err)
		case errors.Is(err, errRestart):
			h.stats.restarts.Add(1)
			continue
		case !h.opts.Restart:
			return stop(err)
		default:
			if failed(err.Error()) {
				return stop(fmt.Errorf("instance %d: %w (last: %v)", in.index, errHostStopped, err))
			}
			h.stats.restarts.Add(1)
			continue
		}
		if report {
			started <- nil
			report = false
		}
		in.setState(p, true, false)
		log.Info("hostemu: handler ready", "pid", p.cmd.Process.Pid, "port", p.port)

		select {
		case <-p.exited:
			if ctx.Err() != nil {
				return stop(nil)
			}
			why := exitText(p.waitErr)
			if !h.opts.Restart {
				return stop(fmt.Errorf("instance %d: handler exited: %s", in.index, why))
			}
			switch p.cmd.ProcessState.ExitCode() {
			case 0:
				log.Error("hostemu: handler exited with status 0; the host does not start a new one")
				select {
				case reason := <-in.restarts:
					log.Warn("hostemu: starting a new handler", "reason", reason)
				case <-ctx.Done():
					return stop(nil)
				}
			case intentionalRestartExit:
				log.Info("hostemu: handler exited to be restarted")
			default:
				if failed(why) {
					return stop(fmt.Errorf("instance %d: %w (last: handler exited: %s)", in.index, errHostStopped, why))
				}
			}
		case reason := <-in.restarts:
			log.Warn("hostemu: killing the handler and starting a new one", "reason", reason, "pid", p.cmd.Process.Pid)
			in.setState(nil, false, false)
			p.kill()
		case <-ctx.Done():
			in.setState(p, false, true)
			if h.opts.Flex != nil || in.crashed() {
				// HttpFunctionInvocationDispatcher.Dispose disposes of the
				// channel, whose WorkerProcess.Dispose kills the process; the
				// host never signals it otherwise.
				p.kill()
				<-p.exited
			} else {
				// Stop taking invocations, then let the handler drain the
				// ones in flight.
				p.stop(h.opts.StopTimeout)
			}
			log.Info("hostemu: handler stopped", "exit", exitText(p.waitErr))
			return stop(nil)
		}
		in.setState(nil, false, false)
		h.stats.restarts.Add(1)
	}
}

// start starts a handler process and waits until it answers GET /.
func (in *Instance) start(ctx context.Context, port int) (*handlerProc, error) {
	h := in.h
	exe := h.config.Handler.ExecutablePath
	if !filepath.IsAbs(exe) {
		// Like HttpWorkerDescription: relative to the app, else on PATH.
		if local := filepath.Join(h.appDir, exe); fileExists(local) {
			exe = local
		}
	}
	cmd := exec.Command(exe, h.config.Handler.Arguments...)
	cmd.Dir = h.config.Handler.WorkingDirectory
	cmd.Env = in.environment(port)
	stdout := &lineSplitter{line: func(s string) { in.processLine(SourceStdout, s) }}
	stderr := &lineSplitter{line: func(s string) { in.processLine(SourceStderr, s) }}
	cmd.Stdout = stdout
	cmd.Stderr = stderr
	cmd.SysProcAttr = sysProcAttr()
	// A grandchild holding the output pipe open must not block Wait.
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("instance %d: starting the handler %s: %w", in.index, exe, err)
	}
	p := &handlerProc{cmd: cmd, port: port, exited: make(chan struct{})}
	if in.cpu != nil {
		if err := in.cpu.add(cmd.Process.Pid); err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return nil, fmt.Errorf("instance %d: %w", in.index, err)
		}
	}
	go func() {
		p.waitErr = cmd.Wait()
		stdout.flush()
		stderr.flush()
		close(p.exited)
	}()
	in.mu.Lock()
	in.cur = p // visible to Kill while it starts
	in.mu.Unlock()

	if err := in.waitReady(ctx, p); err != nil {
		p.kill()
		return nil, fmt.Errorf("instance %d: %w", in.index, err)
	}
	return p, nil
}

// waitReady asks the handler for GET / every 25 ms until it answers, as
// DefaultHttpWorkerService.IsWorkerReady does: any HTTP response, or any
// failure but a refused connection, means ready; the host gives up after
// Options.StartTimeout's worth of polling intervals (30 s). A handler that
// exits with a failure status ends the wait at once; one that exits with
// status 0 raises nothing, and the polling runs on.
func (in *Instance) waitReady(ctx context.Context, p *handlerProc) error {
	polls := int(in.h.opts.StartTimeout / workerReadyPoll)
	url := "http://127.0.0.1:" + strconv.Itoa(p.port) + "/"
	exited := p.exited
	for i := 0; ; i++ {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := in.client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
			_ = resp.Body.Close()
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return nil
		}
		if i >= polls {
			return fmt.Errorf("the handler did not answer GET / on port %d within %v", p.port, in.h.opts.StartTimeout)
		}
		t := time.NewTimer(workerReadyPoll)
		for waiting := true; waiting; {
			select {
			case <-exited:
				switch p.cmd.ProcessState.ExitCode() {
				case 0:
					exited = nil
				case intentionalRestartExit:
					t.Stop()
					return errRestart
				default:
					t.Stop()
					return fmt.Errorf("the handler exited before answering GET /: %s", exitText(p.waitErr))
				}
			case reason := <-in.restarts:
				t.Stop()
				return fmt.Errorf("%w: %s", errRestart, reason)
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
				waiting = false
			}
		}
	}
}

// environment is the handler's environment: the base, the app settings,
// then the variables the host sets.
func (in *Instance) environment(port int) []string {
	h := in.h
	env := slices.Clone(h.opts.Env)
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range in.settings {
			if !yield(k) {
				return
			}
		}
	}) {
		env = append(env, k+"="+in.settings[k])
	}
	if in.group != "" {
		// The platform sets it in the host's environment
		// (FunctionGroups.ForFunction), which the handler inherits.
		env = append(env, targetGroupSetting+"=function:"+in.group)
	}
	id := newUUID()
	p := strconv.Itoa(port)
	// exec.Cmd keeps the last value of a repeated name.
	return append(env,
		envCustomHandlerPort+"="+p,
		envHTTPWorkerPort+"="+p,
		envCustomHandlerID+"="+id,
		envHTTPWorkerID+"="+id,
		envScriptRoot+"="+h.appDir,
	)
}

// signal sends sig to the handler's process group.
func (p *handlerProc) signal(sig syscall.Signal) error {
	select {
	case <-p.exited:
		return errors.New("hostemu: the handler has already exited")
	default:
	}
	return signalGroup(p.cmd.Process, sig)
}

// kill is WorkerProcess.Dispose: Process.Kill (SIGKILL to the process,
// not its group), then a wait of up to a second.
func (p *handlerProc) kill() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	t := time.NewTimer(killWait)
	defer t.Stop()
	select {
	case <-p.exited:
	case <-t.C:
	}
}

// stop sends SIGTERM, waits up to grace, then SIGKILL, and waits for exit.
func (p *handlerProc) stop(grace time.Duration) {
	_ = p.signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.exited:
	case <-t.C:
		_ = p.signal(syscall.SIGKILL)
		<-p.exited
	}
}

// exitText describes how a process ended.
func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func fileExists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir()
}

// sleepCtx sleeps for d; it returns false when ctx ends first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
