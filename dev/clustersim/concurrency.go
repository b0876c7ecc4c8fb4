package clustersim

import (
	"net/http"
	"strings"
	"sync"
	"time"
)

// InFlight counts the Cluster Service requests a handler is serving at
// once, admin calls aside. In front of the one simulator every handler
// process calls, it measures the app-wide load that CLUSTER_SERVICE_BUDGET
// bounds, which no single client can see. Every change is counted under
// one lock, so the maximum is exact, and the requests in flight are
// integrated over time for their mean.
type InFlight struct {
	next http.Handler
	now  func() time.Time

	mu     sync.Mutex
	cur    int64
	peak   int64
	peakAt time.Time
	since  time.Time // start of the window
	last   time.Time // last change
	area   float64   // request-seconds since the window's start
	watch  func(n int64, at time.Time)
}

// CountInFlight returns next (a Sim, or a handler in front of one) with
// its requests in flight counted.
func CountInFlight(next http.Handler) *InFlight {
	t := time.Now()
	return &InFlight{next: next, now: time.Now, since: t, last: t}
}

// ServeHTTP counts the request for as long as next serves it, injected
// latency included: the client waits that long too.
func (c *InFlight) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/admin/") {
		c.next.ServeHTTP(w, r)
		return
	}
	c.add(1)
	defer c.add(-1)
	c.next.ServeHTTP(w, r)
}

func (c *InFlight) add(d int64) {
	c.mu.Lock()
	t := c.now()
	c.area += float64(c.cur) * t.Sub(c.last).Seconds()
	c.last = t
	c.cur += d
	if c.cur > c.peak {
		c.peak, c.peakAt = c.cur, t
	}
	n, watch := c.cur, c.watch
	c.mu.Unlock()
	if watch != nil {
		watch(n, t)
	}
}

// Now returns the requests being served.
func (c *InFlight) Now() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur
}

// Max returns the most requests served at once since CountInFlight or the
// last ResetMax.
func (c *InFlight) Max() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.peak
}

// InFlightStats is what InFlight saw in a window.
type InFlightStats struct {
	// Now is the requests being served; Max the most at once, first
	// reached at MaxAt.
	Now, Max int64
	MaxAt    time.Time
	// Since is the window's start (CountInFlight or ResetMax); Mean the
	// requests in flight averaged over time from then to At, the time of
	// these figures.
	Since, At time.Time
	Mean      float64
}

// Area returns the request-seconds in flight between Since and At: the
// difference of two areas over their times is the mean in between.
func (s InFlightStats) Area() float64 { return s.Mean * s.At.Sub(s.Since).Seconds() }

// Stats returns the window's figures so far.
func (c *InFlight) Stats() InFlightStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.now()
	s := InFlightStats{Now: c.cur, Max: c.peak, MaxAt: c.peakAt, Since: c.since, At: t}
	s.Mean = float64(c.cur) // a window of no length
	if d := t.Sub(c.since).Seconds(); d > 0 {
		s.Mean = (c.area + float64(c.cur)*t.Sub(c.last).Seconds()) / d
	}
	return s
}

// ResetMax starts a new window from the requests being served now, so
// that each measured run gets its own maximum and mean.
func (c *InFlight) ResetMax() {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.now()
	c.peak, c.peakAt, c.since, c.last, c.area = c.cur, t, t, t, 0
}

// Watch calls f after every change of the requests in flight, with the
// new count and its time, outside the lock; nil stops it. f must be safe
// for concurrent use and quick.
func (c *InFlight) Watch(f func(n int64, at time.Time)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.watch = f
}
