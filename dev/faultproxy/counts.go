package faultproxy

import (
	"maps"
	"sync"
)

// CountKey groups the requests counted by [Proxy.Counts].
type CountKey struct {
	// Container is the request's container ("Operations", "Locks", ...),
	// empty for account and database requests.
	Container string
	// Kind is one of the Kind constants.
	Kind string
	// Status is the HTTP status the client was answered, injected faults
	// included; 0 when it got no answer (a dropped connection, or a client
	// that went away while its request was held).
	Status int
}

// counts holds the per-key request counters.
type counts struct {
	mu sync.Mutex
	m  map[CountKey]int64
}

func (c *counts) add(req Request, status int) {
	k := CountKey{Container: req.Container, Kind: req.Kind, Status: status}
	c.mu.Lock()
	if c.m == nil {
		c.m = map[CountKey]int64{}
	}
	c.m[k]++
	c.mu.Unlock()
}

// Counts returns the number of requests received since the proxy started
// or since the last ResetCounts, by container, kind and answered status.
// A request is counted just before its answer is sent (or its connection
// dropped), so a client that has its answer finds the request counted, and
// a request still in flight is not counted yet.
func (p *Proxy) Counts() map[CountKey]int64 {
	p.counts.mu.Lock()
	defer p.counts.mu.Unlock()
	out := maps.Clone(p.counts.m)
	if out == nil {
		out = map[CountKey]int64{}
	}
	return out
}

// ResetCounts sets every count of Counts back to zero. Stats and the write
// log are not affected.
func (p *Proxy) ResetCounts() {
	p.counts.mu.Lock()
	p.counts.m = nil
	p.counts.mu.Unlock()
}
