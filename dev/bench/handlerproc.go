package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/dev/hostemu"
	"github.com/opstatus/opstatus/internal/testenv"
)

// handlerProc is a handler started by the harness, outside the host.
type handlerProc struct {
	cmd     *exec.Cmd
	url     string
	exited  chan struct{}
	release func() // the CPU hold's, or nil
}

// startHandler execs the handler with settings and returns once GET /
// answers 2xx, with the time from exec to that answer. With memoryMB above
// 0 the handler runs held to the CPU of a Flex instance of that memory.
func (e *env) startHandler(ctx context.Context, settings map[string]string, memoryMB int) (*handlerProc, time.Duration, error) {
	port, err := testenv.FreePort()
	if err != nil {
		return nil, 0, err
	}
	env := os.Environ()
	for k, v := range settings {
		env = append(env, k+"="+v)
	}
	env = append(env, "FUNCTIONS_CUSTOMHANDLER_PORT="+strconv.Itoa(port))
	cmd := exec.Command(e.handler)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = e.log, e.log
	p := &handlerProc{cmd: cmd, url: "http://127.0.0.1:" + strconv.Itoa(port), exited: make(chan struct{})}
	// A fresh client: a kept-alive connection from an earlier handler on
	// the same port must not answer for this one.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Second}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, 0, err
	}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	if memoryMB > 0 {
		if p.release, err = hostemu.HoldToCores(cmd.Process.Pid, memoryMB); err != nil {
			p.stop()
			return nil, 0, err
		}
	}
	deadline := start.Add(10 * time.Second)
	for {
		resp, err := client.Get(p.url + "/")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				return p, time.Since(start), nil
			}
		}
		select {
		case <-p.exited:
			return nil, 0, fmt.Errorf("the handler exited before answering GET / (log: %s)", e.logPath)
		case <-ctx.Done():
			p.stop()
			return nil, 0, ctx.Err()
		default:
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, 0, fmt.Errorf("the handler did not answer GET / within 10 s")
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// stop sends SIGTERM and waits, then SIGKILL after 10 s.
func (p *handlerProc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	if p.release != nil {
		p.release()
	}
}

// invokeScan fires the timer as the host does and returns the operations
// the scan listed (its ReturnValue), its queue messages and the response
// size.
func (p *handlerProc) invokeScan(ctx context.Context) (ops, msgs, size int, err error) {
	raw, err := p.scan(ctx)
	if err != nil {
		return 0, 0, len(raw), err
	}
	var r struct {
		Outputs     map[string][]json.RawMessage `json:"Outputs"`
		ReturnValue int                          `json:"ReturnValue"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return 0, 0, len(raw), err
	}
	return r.ReturnValue, len(r.Outputs["operations"]), len(raw), nil
}

// scan fires the timer as the host does for a schedule of under a minute
// (ScheduleStatus null) and returns the response body.
func (p *handlerProc) scan(ctx context.Context) ([]byte, error) {
	body, _ := json.Marshal(map[string]any{
		"Data": map[string]any{"timer": map[string]any{
			"Schedule":       map[string]any{"AdjustForDST": true},
			"ScheduleStatus": nil,
			"IsPastDue":      false,
		}},
		"Metadata": map[string]any{"sys": map[string]any{"MethodName": "scan", "UtcNow": time.Now().UTC().Format(time.RFC3339Nano)}},
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url+"/scan", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Azure-Functions-InvocationId", fmt.Sprintf("bench-scan-%d", time.Now().UnixNano()))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return raw, fmt.Errorf("scan answered %s", resp.Status)
	}
	return raw, nil
}

// coldStart execs the handler runs times, held to the CPU of an instance of
// memoryMB, and returns each time from exec to the first 2xx on GET /.
func coldStart(ctx context.Context, e *env, runs, memoryMB int) ([]time.Duration, error) {
	db, err := e.coldStartDatabase(ctx)
	if err != nil {
		return nil, err
	}
	defer e.dropDatabase(context.WithoutCancel(ctx), db)
	settings := e.handlerSettings(db)
	var out []time.Duration
	for range runs {
		p, d, err := e.startHandler(ctx, settings, memoryMB)
		if err != nil {
			return out, err
		}
		p.stop()
		out = append(out, d)
	}
	return out, nil
}

// coldStartDatabase creates the database the cold starts' handlers use,
// with the production containers: the handler checks them while it starts
// and stops when one is missing, which a cold start would meet before or
// after its first answer.
func (e *env) coldStartDatabase(ctx context.Context) (string, error) {
	db := e.newDatabase("coldstart")
	return db, frontend.CreateSchema(ctx, e.cosmos.Endpoint, e.cosmos.Key, db, lockTTL)
}

// scanResult is one standalone scan measurement: the listing alone, with
// no queue writes.
type scanResult struct {
	N int
	// Durations of consecutive scans on one handler (the first opens the
	// connections).
	Durations []time.Duration
	// Messages is how many queue messages a scan answered, Bytes the
	// size of its response.
	Messages, Bytes int
	// IdleRSS is the handler's RSS before the first scan, HWM its peak
	// after the last.
	IdleRSS, HWM int64
	// CPU is the handler's CPU time over all the scans.
	CPU time.Duration
}

// scanBench starts a handler against database db and times scans over its
// n pending operations.
func scanBench(ctx context.Context, e *env, db string, n, times int) (scanResult, error) {
	res := scanResult{N: n}
	p, _, err := e.startHandler(ctx, e.handlerSettings(db), 0)
	if err != nil {
		return res, err
	}
	defer p.stop()
	idle, err := readProc(p.cmd.Process.Pid)
	if err != nil {
		return res, err
	}
	res.IdleRSS = idle.RSS
	for range times {
		start := time.Now()
		ops, msgs, size, err := p.invokeScan(ctx)
		if err != nil {
			return res, err
		}
		res.Durations = append(res.Durations, time.Since(start))
		if ops != n {
			return res, fmt.Errorf("scan listed %d operations, want %d", ops, n)
		}
		res.Messages, res.Bytes = msgs, size
	}
	s, err := readProc(p.cmd.Process.Pid)
	if err != nil {
		return res, err
	}
	res.HWM = s.HWM
	res.CPU = s.CPU - idle.CPU
	return res, nil
}
