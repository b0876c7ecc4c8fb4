package testenv

import (
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
)

// RoundServer is an HTTP test server that holds each request until its
// round of Size requests has arrived, so that a round of concurrent
// requests needs Size connections at once, and counts the connections
// opened. Tests of connection reuse send rounds of Size requests.
type RoundServer struct {
	*httptest.Server
	// Size is the number of requests in a round.
	Size int

	dials   atomic.Int32
	mu      sync.Mutex
	arrived int
	cond    *sync.Cond
}

// NewRoundServer starts a RoundServer whose requests reply answers. Close
// it when done.
func NewRoundServer(size int, reply http.Handler) *RoundServer {
	s := &RoundServer{Size: size}
	s.cond = sync.NewCond(&s.mu)
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.arrived++
		if s.arrived%size == 0 {
			s.cond.Broadcast()
		}
		round := (s.arrived + size - 1) / size
		for s.arrived < round*size {
			s.cond.Wait()
		}
		s.mu.Unlock()
		reply.ServeHTTP(w, r)
	}))
	s.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			s.dials.Add(1)
		}
	}
	s.Start()
	return s
}

// Dials is the number of connections opened so far.
func (s *RoundServer) Dials() int32 { return s.dials.Load() }
