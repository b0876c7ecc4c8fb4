package testenv

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"
)

const (
	// startTimeout bounds how long a server may take to report that it listens.
	startTimeout = 60 * time.Second
	// stopGrace is how long a server has to exit after SIGTERM before SIGKILL.
	stopGrace = 5 * time.Second
)

// process is a running server: a child process in its own process group,
// whose stdout and stderr go to a log file.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string

	exited  chan struct{} // closed when the process has exited
	waitErr error         // valid after exited is closed

	stopOnce sync.Once
	stopErr  error
}

// startProcess runs argv in dir and waits until ready, called with each line
// of the process's stdout, returns true. Its stdout and stderr go to a log
// file under $TMPDIR/opstatus-testenv, kept for debugging.
func startProcess(ctx context.Context, name, dir string, argv []string, ready func(line string) bool) (*process, error) {
	logDir := filepath.Join(os.TempDir(), "opstatus-testenv")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	logFile, err := os.CreateTemp(logDir, name+"-*.log")
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}

	// Not CommandContext: the process must outlive ctx, which only bounds
	// the start.
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Stdout = stdoutW
	cmd.Stderr = logFile
	cmd.SysProcAttr = sysProcAttr()
	if err := spawn(cmd); err != nil {
		_ = logFile.Close()
		_ = stdoutR.Close()
		_ = stdoutW.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	_ = stdoutW.Close()

	p := &process{name: name, cmd: cmd, logPath: logFile.Name(), exited: make(chan struct{})}
	readyCh := make(chan struct{})
	var logMu sync.Mutex
	go func() {
		defer stdoutR.Close()
		scanner := bufio.NewScanner(stdoutR)
		isReady := false
		for scanner.Scan() {
			line := scanner.Text()
			logMu.Lock()
			_, _ = io.WriteString(logFile, line+"\n")
			logMu.Unlock()
			if !isReady && ready(line) {
				isReady = true
				close(readyCh)
			}
		}
		// Drain the rest so the child never blocks on a full pipe.
		_, _ = io.Copy(io.Discard, stdoutR)
	}()
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
		_ = logFile.Close()
	}()

	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	select {
	case <-readyCh:
		return p, nil
	case <-p.exited:
		return nil, fmt.Errorf("starting %s: exited before it was ready (%v); log %s:\n%s", name, p.waitErr, p.logPath, p.logTail())
	case <-ctx.Done():
		_ = p.Stop()
		return nil, fmt.Errorf("starting %s: %w", name, ctx.Err())
	case <-timer.C:
		_ = p.Stop()
		return nil, fmt.Errorf("starting %s: not ready after %v; log %s:\n%s", name, startTimeout, p.logPath, p.logTail())
	}
}

// Stop ends the process and its children, gracefully first, and waits for
// it. Calling it again returns the first result.
func (p *process) Stop() error {
	p.stopOnce.Do(func() {
		select {
		case <-p.exited:
			p.stopErr = exitError(p.name, p.waitErr)
			return
		default:
		}
		_ = signalGroup(p.cmd.Process, terminate)
		select {
		case <-p.exited:
		case <-time.After(stopGrace):
			_ = signalGroup(p.cmd.Process, kill)
			<-p.exited
		}
		// Ending by our signal is a clean stop.
		var exitErr *exec.ExitError
		if p.waitErr != nil && !errors.As(p.waitErr, &exitErr) {
			p.stopErr = fmt.Errorf("stopping %s: %w", p.name, p.waitErr)
		}
	})
	return p.stopErr
}

// exitError reports a process that ended before Stop was called.
func exitError(name string, err error) error {
	if err == nil {
		return fmt.Errorf("%s had already exited", name)
	}
	return fmt.Errorf("%s had already exited: %w", name, err)
}

// logTail returns the end of the log file, for error messages.
func (p *process) logTail() string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return ""
	}
	const max = 4000
	s := string(data)
	if len(s) > max {
		s = "…" + s[len(s)-max:]
	}
	return strings.TrimSpace(s)
}

// spawnRequest asks the spawner goroutine to start a command.
type spawnRequest struct {
	cmd  *exec.Cmd
	done chan error
}

var (
	spawnOnce     sync.Once
	spawnRequests = make(chan spawnRequest)
)

// spawn starts cmd from one goroutine locked to its OS thread for the life
// of the test binary: Linux sends the parent-death signal when the thread
// that forked the child ends, not when the process does.
func spawn(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		go func() {
			runtime.LockOSThread()
			for r := range spawnRequests {
				r.done <- r.cmd.Start()
			}
		}()
	})
	done := make(chan error, 1)
	spawnRequests <- spawnRequest{cmd: cmd, done: done}
	return <-done
}
