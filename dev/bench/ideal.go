package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opstatus/opstatus/dev/hostemu"
)

// driver is what runs the handlers for a run: the host emulator with
// Azurite, or the ideal queue.
type driver interface {
	// PIDs are the handler processes.
	PIDs() []int
	// Quiescent reports whether every queued message has been processed.
	Quiescent() bool
	// Counters returns handler restarts, poisoned messages and failed
	// invocations.
	Counters() (restarts, poisoned, failures int64)
	// Receives returns the requests made for messages and the messages
	// they returned (0, 0 for the ideal queue).
	Receives() (requests, messages int64)
}

// emulated is the host emulator as a driver.
type emulated struct{ host *hostemu.Host }

func (d emulated) PIDs() []int {
	var pids []int
	for _, in := range d.host.Instances() {
		if pid := in.PID(); pid != 0 {
			pids = append(pids, pid)
		}
	}
	return pids
}

func (d emulated) Quiescent() bool {
	c := d.host.Counters()
	return c.MessagesEnqueued == c.MessagesDeleted+c.MessagesPoisoned
}

func (d emulated) Receives() (int64, int64) {
	c := d.host.Counters()
	return c.Receives, c.MessagesReceived
}

func (d emulated) Counters() (int64, int64, int64) {
	c := d.host.Counters()
	return c.HandlerRestarts, c.MessagesPoisoned, c.Failures
}

// ideal drives the handlers the way the host does, but with an in-process
// queue in place of Azurite: it fires scan on the schedule, puts its
// messages on a channel at once, and runs as many polls at a time per
// instance as the host would (batchSize + newBatchThreshold). It shows
// what opstatus does when the queue is not the bottleneck; Azure Queue
// Storage serves thousands of messages a second per queue, Azurite on this
// machine about two hundred.
type ideal struct {
	procs    []*handlerProc
	rec      *recorder
	queue    chan queued
	inFlight atomic.Int64
	queued   atomic.Int64
	failures atomic.Int64
	client   *http.Client
}

// startIdeal starts instances handlers with settings.
func startIdeal(ctx context.Context, e *env, settings map[string]string, instances int, rec *recorder) (*ideal, error) {
	d := &ideal{rec: rec, queue: make(chan queued, 1<<18),
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}}
	for range instances {
		p, _, err := e.startHandler(ctx, settings)
		if err != nil {
			d.stop()
			return nil, err
		}
		d.procs = append(d.procs, p)
	}
	return d, nil
}

func (d *ideal) PIDs() []int {
	var pids []int
	for _, p := range d.procs {
		pids = append(pids, p.cmd.Process.Pid)
	}
	return pids
}

func (d *ideal) Quiescent() bool { return d.queued.Load() == 0 && d.inFlight.Load() == 0 }

func (d *ideal) Counters() (int64, int64, int64) { return 0, 0, d.failures.Load() }

func (d *ideal) Receives() (int64, int64) { return 0, 0 }

func (d *ideal) stop() {
	for _, p := range d.procs {
		p.stop()
	}
}

// run fires the timer and runs the pollers until ctx ends.
func (d *ideal) run(ctx context.Context, concurrency int) {
	var wg sync.WaitGroup
	for _, p := range d.procs {
		for range concurrency {
			wg.Go(func() {
				for {
					select {
					case <-ctx.Done():
						return
					case m := <-d.queue:
						d.inFlight.Add(1)
						d.queued.Add(-1)
						d.poll(ctx, p, m)
						d.inFlight.Add(-1)
					}
				}
			})
		}
	}
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return
		case <-time.After(time.Until(nextTick(time.Now()))):
		}
		start := time.Now()
		msgs, err := d.procs[0].scanMessages(ctx)
		inserted := time.Now()
		for _, m := range msgs {
			d.queued.Add(1)
			d.queue <- queued{text: m, inserted: inserted}
		}
		d.rec.record(hostemu.Invocation{Function: "scan", Duration: time.Since(start), Err: err,
			ReturnValue: json.RawMessage(strconv.Itoa(len(msgs)))})
	}
}

// queued is a message on the ideal queue.
type queued struct {
	text     string
	inserted time.Time
}

// poll invokes poll with one message as the host does and records it.
func (d *ideal) poll(ctx context.Context, p *handlerProc, msg queued) {
	start := time.Now()
	inv := hostemu.Invocation{Function: "poll"}
	// The host's DateTimeOffsets: whole seconds, "+00:00".
	const offset = "2006-01-02T15:04:05-07:00"
	inserted := msg.inserted.UTC().Truncate(time.Second)
	body, _ := json.Marshal(map[string]any{
		// The host sends a string trigger value serialized twice.
		"Data": map[string]any{"operation": mustJSON(msg.text)},
		"Metadata": map[string]any{
			"DequeueCount": "1", "Id": mustJSON(fmt.Sprintf("ideal-%d", start.UnixNano())), "PopReceipt": mustJSON("ideal"),
			"InsertionTime":   inserted.Format(offset),
			"ExpirationTime":  inserted.Add(7 * 24 * time.Hour).Format(offset),
			"NextVisibleTime": start.UTC().Add(10 * time.Minute).Truncate(time.Second).Format(offset),
			"sys":             map[string]any{"MethodName": "poll", "UtcNow": start.UTC().Format(time.RFC3339Nano)},
		},
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url+"/poll", bytes.NewReader(body))
	if err == nil {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Azure-Functions-InvocationId", fmt.Sprintf("ideal-%d", start.UnixNano()))
		var resp *http.Response
		if resp, err = d.client.Do(req); err == nil {
			var r struct {
				ReturnValue json.RawMessage `json:"ReturnValue"`
			}
			raw, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			inv.Status = resp.StatusCode
			if resp.StatusCode/100 != 2 {
				err = fmt.Errorf("poll answered %s", resp.Status)
			} else if err = json.Unmarshal(raw, &r); err == nil {
				inv.ReturnValue = r.ReturnValue
			}
		}
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		d.failures.Add(1)
	}
	inv.Err, inv.Duration = err, time.Since(start)
	d.rec.record(inv)
}

func mustJSON(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
