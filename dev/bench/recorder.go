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
	// Operations is the scan's ReturnValue: how many operations it listed.
	Operations int
	// Messages is how many queue messages the host wrote for it.
	Messages int64
	Err      error
}

// recorder keeps what the host emulator reports of each invocation.
type recorder struct {
	// enqueued reads the host's count of queue messages written. The host
	// calls record after an invocation's messages are written, and only
	// scan writes any, so the count's growth from one scan to the next is
	// that scan's messages.
	enqueued func() int64

	mu          sync.Mutex
	scans       []scanRun
	lastWritten int64
	outcomes    map[string]int64 // operations by poll outcome; "failed" for failed invocations
	polls       int64            // poll invocations (messages handled)
	ops         int64            // operations those invocations reported on
	// work is when each poll and pickup invocation began, by instance.
	work map[int][]time.Time
}

func newRecorder(enqueued func() int64) *recorder {
	return &recorder{enqueued: enqueued, outcomes: map[string]int64{}, work: map[int][]time.Time{}}
}

// record is hostemu's OnInvocation.
func (r *recorder) record(inv hostemu.Invocation) {
	end := time.Now()
	var written int64
	if inv.Function == "scan" && r.enqueued != nil {
		written = r.enqueued()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if inv.Function == "poll" || inv.Function == "pickup" {
		r.work[inv.Instance] = append(r.work[inv.Instance], inv.Start)
	}
	switch inv.Function {
	case "scan":
		s := scanRun{Start: inv.Start, End: end, Err: inv.Err, Messages: written - r.lastWritten}
		if s.Start.IsZero() {
			s.Start = end.Add(-inv.Duration)
		}
		r.lastWritten = written
		_ = json.Unmarshal(inv.ReturnValue, &s.Operations)
		r.scans = append(r.scans, s)
	case "poll":
		r.polls++
		// A successful poll's ReturnValue counts its operations by outcome.
		var tally map[string]int64
		if inv.Err != nil || json.Unmarshal(inv.ReturnValue, &tally) != nil || len(tally) == 0 {
			tally = map[string]int64{"failed": 1}
		}
		for o, n := range tally {
			r.outcomes[o] += n
			r.ops += n
		}
	}
}

// snapshot returns the scans so far, the poll invocations, the operations
// they reported on and those operations by outcome.
func (r *recorder) snapshot() (scans []scanRun, polls, ops int64, outcomes map[string]int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int64, len(r.outcomes))
	for k, v := range r.outcomes {
		out[k] = v
	}
	return append([]scanRun(nil), r.scans...), r.polls, r.ops, out
}

// firstWork returns when the first poll or pickup invocation of instance
// at or after from that has ended began.
func (r *recorder) firstWork(instance int, from time.Time) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var first time.Time
	for _, t := range r.work[instance] {
		if !t.Before(from) && (first.IsZero() || t.Before(first)) {
			first = t
		}
	}
	return first, !first.IsZero()
}
