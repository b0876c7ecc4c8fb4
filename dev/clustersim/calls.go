package clustersim

import (
	"slices"
	"sync"
	"time"
)

// callLog keeps the arrival time of every call that reads an operation's
// status, by resource path.
type callLog struct {
	mu    sync.Mutex
	calls map[string][]time.Time
}

func (l *callLog) record(path string, at time.Time) {
	l.mu.Lock()
	if l.calls == nil {
		l.calls = map[string][]time.Time{}
	}
	l.calls[path] = append(l.calls[path], at)
	l.mu.Unlock()
}

// Calls returns the calls that read an operation's status received since
// New or the last ResetCalls when Options.RecordCalls is set (nothing
// otherwise): for each path, the instants the calls arrived, by the
// simulator's clock, in order of arrival. A cluster's or node pool's status
// call is kept under its resource path (the internalId, that is the request
// path without "/status"); an external auth or credential read under its
// path; each page of a credential list under the list's path (without the
// query). Every such GET is recorded before faults apply, whatever it was
// answered, so a path's count is the number of Cluster Service calls made
// for it. Cluster object and inflight checks reads are not recorded.
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
