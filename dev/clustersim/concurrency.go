package clustersim

import (
	"net/http"
	"strings"
	"sync/atomic"
)

// InFlight counts the Cluster Service requests a handler is serving at
// once, admin calls aside. In front of the one simulator every handler
// process calls, it measures the app-wide load that the processes' caps
// are meant to bound, which no single client can see.
type InFlight struct {
	next      http.Handler
	now, peak atomic.Int64
}

// CountInFlight returns next (a Sim, or a handler in front of one) with
// its requests in flight counted.
func CountInFlight(next http.Handler) *InFlight { return &InFlight{next: next} }

// ServeHTTP counts the request for as long as next serves it, injected
// latency included: the client waits that long too.
func (c *InFlight) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/admin/") {
		c.next.ServeHTTP(w, r)
		return
	}
	n := c.now.Add(1)
	defer c.now.Add(-1)
	for p := c.peak.Load(); n > p && !c.peak.CompareAndSwap(p, n); p = c.peak.Load() {
	}
	c.next.ServeHTTP(w, r)
}

// Now returns the requests being served.
func (c *InFlight) Now() int64 { return c.now.Load() }

// Max returns the most requests served at once since CountInFlight or the
// last ResetMax.
func (c *InFlight) Max() int64 { return c.peak.Load() }

// ResetMax starts a new maximum from the requests being served now, so
// that each measured run gets its own.
func (c *InFlight) ResetMax() { c.peak.Store(c.now.Load()) }
