package main

import (
	"encoding/json"
	"sync"
	"time"

	"github.com/opstatus/opstatus/dev/hostemu"
)

// scanRun is one scan invocation as the host saw it.
type scanRun struct {
	// Start is when the host called the handler; End when the invocation
	// ended, its queue messages written.
	Start, End time.Time
	// Messages is the scan's ReturnValue: how many operations it listed.
	Messages int
	Err      error
}

// recorder keeps what the host emulator reports of each invocation.
type recorder struct {
	mu       sync.Mutex
	scans    []scanRun
	outcomes map[string]int64 // poll ReturnValues; "failed" for failed invocations
	polls    int64
}

func newRecorder() *recorder { return &recorder{outcomes: map[string]int64{}} }

// record is hostemu's OnInvocation.
func (r *recorder) record(inv hostemu.Invocation) {
	end := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	switch inv.Function {
	case "scan":
		s := scanRun{Start: end.Add(-inv.Duration), End: end, Err: inv.Err}
		_ = json.Unmarshal(inv.ReturnValue, &s.Messages)
		r.scans = append(r.scans, s)
	case "poll":
		r.polls++
		outcome := "failed"
		if inv.Err == nil {
			var s string
			if json.Unmarshal(inv.ReturnValue, &s) == nil && s != "" {
				outcome = s
			}
		}
		r.outcomes[outcome]++
	}
}

// snapshot returns the scans so far, the poll count and the outcomes.
func (r *recorder) snapshot() ([]scanRun, int64, map[string]int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int64, len(r.outcomes))
	for k, v := range r.outcomes {
		out[k] = v
	}
	return append([]scanRun(nil), r.scans...), r.polls, out
}
