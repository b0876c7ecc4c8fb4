package clustersim

import (
	"slices"
	"strings"
	"sync"
	"time"
)

// callLog keeps the arrival time of every status call, by resource path.
type callLog struct {
	mu    sync.Mutex
	calls map[string][]time.Time
}

func (l *callLog) record(path string, at time.Time) {
	path = strings.TrimSuffix(path, "/status")
	l.mu.Lock()
	if l.calls == nil {
		l.calls = map[string][]time.Time{}
	}
	l.calls[path] = append(l.calls[path], at)
	l.mu.Unlock()
}

// Calls returns the status calls received since New or the last
// ResetCalls when Options.RecordCalls is set (nothing otherwise): for each
// resource path (the internalId, that is the request path without
// "/status"), the instants the calls arrived, by the simulator's clock, in
// order of arrival. Every GET of a status path is recorded before faults
// apply, whatever it was answered, so a path's count is the number of
// Cluster Service calls made for that resource.
func (s *Sim) Calls() map[string][]time.Time {
	s.callLog.mu.Lock()
	defer s.callLog.mu.Unlock()
	out := make(map[string][]time.Time, len(s.callLog.calls))
	for p, ts := range s.callLog.calls {
		out[p] = slices.Clone(ts)
	}
	return out
}

// ResetCalls forgets the recorded calls.
func (s *Sim) ResetCalls() {
	s.callLog.mu.Lock()
	s.callLog.calls = nil
	s.callLog.mu.Unlock()
}
