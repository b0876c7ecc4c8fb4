package hostemu

import (
	"bytes"
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

// errHandlerStopped fails invocations once an instance's handler is gone
// for good.
var errHandlerStopped = errors.New("handler stopped")

// Instance is one host instance: a handler process and the pollers that
// feed it.
type Instance struct {
	h      *Host
	index  int
	out    io.Writer
	client *http.Client

	mu      sync.Mutex
	cur     *handlerProc  // the latest process, ready or not
	ready   bool          // cur answers requests
	stopped bool          // no process will run again
	changed chan struct{} // closed and replaced on every change above

	watchMu  sync.Mutex
	watchers map[queueKey][]*poller
}

// handlerProc is one run of the handler executable.
type handlerProc struct {
	cmd     *exec.Cmd
	port    int
	exited  chan struct{} // closed once the process has exited
	waitErr error         // valid after exited is closed
}

func newInstance(h *Host, index int, out *sharedWriter) *Instance {
	var w io.Writer = out
	if h.opts.Instances > 1 {
		w = out.prefixed(fmt.Sprintf("[%d] ", index))
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.Proxy = nil
	transport.MaxIdleConnsPerHost = 256
	return &Instance{
		h:        h,
		index:    index,
		out:      w,
		client:   &http.Client{Transport: transport},
		changed:  make(chan struct{}),
		watchers: map[queueKey][]*poller{},
	}
}

// Index returns the instance's number, from 0.
func (in *Instance) Index() int { return in.index }

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
			return nil, fmt.Errorf("waiting for the handler: %w", ctx.Err())
		}
	}
}

// supervise runs the handler until ctx ends: it starts it, reports the
// first start on ready, and starts it again after a crash when
// Options.Restart is set. On ctx end it stops the handler with SIGTERM
// (then SIGKILL after Options.StopTimeout).
func (in *Instance) supervise(ctx context.Context, ready chan<- error) error {
	log := in.h.log.With("instance", in.index)
	first := true
	failures := 0
	for {
		p, err := in.start(ctx)
		if first {
			first = false
			ready <- err
			if err != nil {
				in.setState(nil, false, true)
				return err
			}
		} else if err != nil {
			if ctx.Err() != nil {
				in.setState(nil, false, true)
				return nil
			}
			if !in.h.opts.Restart {
				in.setState(nil, false, true)
				return err
			}
			failures++
			log.Error("hostemu: handler failed to start; retrying", "err", err)
			if !sleepCtx(ctx, min(time.Duration(failures)*500*time.Millisecond, 5*time.Second)) {
				in.setState(nil, false, true)
				return nil
			}
			in.h.stats.restarts.Add(1)
			continue
		}
		failures = 0
		in.setState(p, true, false)
		log.Info("hostemu: handler ready", "pid", p.cmd.Process.Pid, "port", p.port)

		select {
		case <-p.exited:
			if ctx.Err() != nil {
				in.setState(nil, false, true)
				return nil
			}
			in.setState(nil, false, false)
			if !in.h.opts.Restart {
				in.setState(nil, false, true)
				return fmt.Errorf("instance %d: handler exited: %s", in.index, exitText(p.waitErr))
			}
			log.Error("hostemu: handler exited; restarting it", "err", exitText(p.waitErr))
			in.h.stats.restarts.Add(1)
		case <-ctx.Done():
			// Stop taking invocations, then let the handler drain the ones
			// in flight.
			in.setState(p, false, true)
			p.stop(in.h.opts.StopTimeout)
			log.Info("hostemu: handler stopped", "exit", exitText(p.waitErr))
			in.setState(nil, false, true)
			return nil
		}
	}
}

// start starts a handler process and waits until it answers GET /.
func (in *Instance) start(ctx context.Context) (*handlerProc, error) {
	h := in.h
	port, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("instance %d: starting the handler: %w", in.index, err)
	}
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
	lw := &lineFlusher{w: in.out}
	cmd.Stdout = lw
	cmd.Stderr = lw
	cmd.SysProcAttr = sysProcAttr()
	// A grandchild holding the output pipe open must not block Wait.
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("instance %d: starting the handler %s: %w", in.index, exe, err)
	}
	p := &handlerProc{cmd: cmd, port: port, exited: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		lw.flush()
		close(p.exited)
	}()
	in.mu.Lock()
	in.cur = p // visible to Kill while it starts
	in.mu.Unlock()

	if err := in.waitReady(ctx, p); err != nil {
		p.stop(in.h.opts.StopTimeout)
		return nil, fmt.Errorf("instance %d: %w", in.index, err)
	}
	return p, nil
}

// waitReady polls GET / until the handler answers. Like the host
// (DefaultHttpWorkerService.IsWorkerReady), any HTTP response means ready;
// only a refused connection means "not yet".
func (in *Instance) waitReady(ctx context.Context, p *handlerProc) error {
	deadline := time.NewTimer(in.h.opts.StartTimeout)
	defer deadline.Stop()
	url := "http://127.0.0.1:" + strconv.Itoa(p.port) + "/"
	for {
		reqCtx, cancel := context.WithTimeout(ctx, time.Second)
		req, _ := http.NewRequestWithContext(reqCtx, http.MethodGet, url, nil)
		resp, err := in.client.Do(req)
		cancel()
		if err == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
			_ = resp.Body.Close()
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("the handler exited before answering GET /: %s", exitText(p.waitErr))
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("the handler did not answer GET / on port %d within %v", p.port, in.h.opts.StartTimeout)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// environment is the handler's environment: the base, the app settings,
// then the variables the host sets.
func (in *Instance) environment(port int) []string {
	h := in.h
	env := slices.Clone(h.opts.Env)
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range h.settings {
			if !yield(k) {
				return
			}
		}
	}) {
		env = append(env, k+"="+h.settings[k])
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

// sharedWriter serializes writes from several handlers to one writer.
type sharedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func newSharedWriter(w io.Writer) *sharedWriter { return &sharedWriter{w: w} }

func (s *sharedWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// prefixed returns a writer that puts prefix before every line.
func (s *sharedWriter) prefixed(prefix string) io.Writer {
	return prefixWriter{s: s, prefix: []byte(prefix)}
}

// prefixWriter receives whole lines from a lineFlusher.
type prefixWriter struct {
	s      *sharedWriter
	prefix []byte
}

func (p prefixWriter) Write(b []byte) (int, error) {
	var buf bytes.Buffer
	for line := range bytes.Lines(b) {
		buf.Write(p.prefix)
		buf.Write(line)
	}
	if _, err := p.s.Write(buf.Bytes()); err != nil {
		return 0, err
	}
	return len(b), nil
}

// lineFlusher passes whole lines on, so that lines of several handlers do
// not interleave mid-line.
type lineFlusher struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
}

func (l *lineFlusher) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	if i := bytes.LastIndexByte(l.buf, '\n'); i >= 0 {
		_, _ = l.w.Write(l.buf[:i+1])
		l.buf = append(l.buf[:0], l.buf[i+1:]...)
	}
	return len(p), nil
}

// flush writes a last unterminated line.
func (l *lineFlusher) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) > 0 {
		_, _ = l.w.Write(append(l.buf, '\n'))
		l.buf = nil
	}
}
