package faultproxy

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// Faults configures what goes wrong. The zero value injects nothing.
//
// Each request that Match selects draws one number u in [0, 1) from the
// proxy's random source; the rates are stacked in the order below, so that
// u < Rate429 throttles, Rate429 <= u < Rate429+Rate503 answers 503, and so
// on. Their sum should not exceed 1: rates past 1 are never reached.
type Faults struct {
	// Rate429 is the fraction answered 429 Too Many Requests (Cosmos DB
	// throttling, substatus 3200) with x-ms-retry-after-ms set to
	// RetryAfter. The request is not forwarded.
	Rate429 float64
	// Rate503 is the fraction answered 503 Service Unavailable without
	// forwarding.
	Rate503 float64
	// RateTimeout is the fraction held for Timeout and then answered 408
	// Request Timeout, or held until the client goes away when Timeout is
	// zero. They are never forwarded.
	RateTimeout float64
	// RateDrop is the fraction whose connection is reset without an answer,
	// before forwarding: the upstream never sees the request.
	RateDrop float64
	// RateDropAfterForward is the fraction forwarded upstream whose
	// connection is then reset instead of answering: the upstream did the
	// work (a write happened) but the client cannot know.
	RateDropAfterForward float64

	// Timeout is how long a timeout fault holds a request; zero holds it
	// until the client goes away.
	Timeout time.Duration
	// RetryAfter is the x-ms-retry-after-ms of a 429; zero means 100 ms.
	RetryAfter time.Duration
	// Latency delays every selected request before anything else happens
	// to it.
	Latency time.Duration
	// Match selects the requests the faults and the latency apply to; nil
	// selects every request, including the account and metadata reads.
	Match func(Request) bool
}

// fault is what happens to one request.
type fault int

const (
	faultNone fault = iota
	fault429
	fault503
	faultTimeout
	faultDrop
	faultDropAfterForward
)

var faultNames = [...]string{"none", "429", "503", "timeout", "drop", "drop-after-forward"}

func (f fault) String() string { return faultNames[f] }

const defaultRetryAfter = 100 * time.Millisecond

// SetFaults replaces the fault configuration. It applies to requests that
// arrive afterwards.
func (p *Proxy) SetFaults(f Faults) {
	p.faults.Store(&f)
	p.log.Info("faults set", "rate429", f.Rate429, "rate503", f.Rate503, "rateTimeout", f.RateTimeout,
		"rateDrop", f.RateDrop, "rateDropAfterForward", f.RateDropAfterForward,
		"timeout", f.Timeout, "latency", f.Latency, "match", f.Match != nil)
}

// pick draws the fault for one selected request.
func (p *Proxy) pick(f *Faults) fault {
	p.rngMu.Lock()
	u := p.rng.Float64()
	p.rngMu.Unlock()
	acc := 0.0
	for _, c := range []struct {
		rate  float64
		fault fault
	}{
		{f.Rate429, fault429},
		{f.Rate503, fault503},
		{f.RateTimeout, faultTimeout},
		{f.RateDrop, faultDrop},
		{f.RateDropAfterForward, faultDropAfterForward},
	} {
		if c.rate > 0 {
			acc += c.rate
		}
		if c.rate > 0 && u < acc {
			return c.fault
		}
	}
	return faultNone
}

// delayRule is one Delay call.
type delayRule struct {
	match func(Request) bool
	d     time.Duration
}

// Delay holds every request that match selects (nil selects all) for d
// before it is handled, in addition to other delays and faults; if the
// client goes away meanwhile the request is not forwarded. Rules add up
// when several select one request. Call remove to drop the rule.
func (p *Proxy) Delay(match func(Request) bool, d time.Duration) (remove func()) {
	rule := &delayRule{match: match, d: d}
	p.delayMu.Lock()
	p.delays = append(p.delays, rule)
	p.delayMu.Unlock()
	return func() {
		p.delayMu.Lock()
		defer p.delayMu.Unlock()
		for i, r := range p.delays {
			if r == rule {
				p.delays = append(p.delays[:i:i], p.delays[i+1:]...)
				return
			}
		}
	}
}

// delayFor sums the delays of the rules that select req.
func (p *Proxy) delayFor(req Request) time.Duration {
	p.delayMu.Lock()
	rules := p.delays
	p.delayMu.Unlock()
	var d time.Duration
	for _, r := range rules {
		if r.match == nil || r.match(req) {
			d += r.d
		}
	}
	return d
}

// holdResult says how a hold ended.
type holdResult int

const (
	holdElapsed    holdResult = iota
	holdClientGone            // the client canceled or closed the connection
	holdClosing               // the proxy is closing
)

// hold waits for d (forever when d <= 0), the client going away or the
// proxy closing, whichever comes first.
func (p *Proxy) hold(ctx context.Context, d time.Duration) holdResult {
	p.stats.holding.Add(1)
	defer p.stats.holding.Add(-1)
	var elapsed <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		elapsed = t.C
	}
	select {
	case <-elapsed:
		return holdElapsed
	case <-ctx.Done():
		return holdClientGone
	case <-p.closing.Done():
		return holdClosing
	}
}

// cosmosError answers status with a Cosmos DB error body.
func cosmosError(w http.ResponseWriter, status int, code, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	body, _ := json.Marshal(map[string]string{"code": code, "message": message + " (injected by faultproxy)"})
	_, _ = w.Write(body)
}

func throttle(w http.ResponseWriter, retryAfter time.Duration) {
	if retryAfter <= 0 {
		retryAfter = defaultRetryAfter
	}
	w.Header().Set("x-ms-retry-after-ms", strconv.FormatInt(retryAfter.Milliseconds(), 10))
	w.Header().Set("x-ms-substatus", "3200")
	cosmosError(w, http.StatusTooManyRequests, "TooManyRequests",
		"Request rate is large. More Request Units may be needed, so no changes were made.")
}

// drop resets the client connection without answering: it takes the
// connection from the server and closes the TCP socket with linger 0, so
// the client reads a reset (or EOF), never a response.
func drop(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler) // net/http closes the connection unanswered
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	raw := conn
	if tc, ok := conn.(*tls.Conn); ok {
		raw = tc.NetConn() // no close_notify: the connection just breaks
	}
	if tcp, ok := raw.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0)
	}
	_ = raw.Close()
}

// stats are the proxy's counters.
type stats struct {
	requests, forwarded, upstreamErrors                  atomic.Int64
	throttled, unavailable, timedOut, dropped, droppedAF atomic.Int64
	delayed, holding, clientConns, upstreamConns         atomic.Int64
}

// Stats are the proxy's counters since it started.
type Stats struct {
	// Requests is the number of requests received.
	Requests int64
	// Forwarded is the number of requests sent upstream.
	Forwarded int64
	// UpstreamErrors counts forwarded requests that got no answer from the
	// upstream (answered 502 to the client).
	UpstreamErrors int64
	// Faults injected, by kind.
	Throttled           int64 // 429
	Unavailable         int64 // 503
	TimedOut            int64 // timeout faults, counted when the hold begins
	Dropped             int64 // dropped before forwarding
	DroppedAfterForward int64 // forwarded, then dropped
	// Delayed counts requests held by Latency or a Delay rule.
	Delayed int64
	// Holding is the number of requests being held right now (delays and
	// timeouts).
	Holding int64
	// ClientConns and UpstreamConns count connections accepted from
	// clients and dialed to the upstream.
	ClientConns, UpstreamConns int64
}

// Stats returns the counters.
func (p *Proxy) Stats() Stats {
	s := &p.stats
	return Stats{
		Requests:            s.requests.Load(),
		Forwarded:           s.forwarded.Load(),
		UpstreamErrors:      s.upstreamErrors.Load(),
		Throttled:           s.throttled.Load(),
		Unavailable:         s.unavailable.Load(),
		TimedOut:            s.timedOut.Load(),
		Dropped:             s.dropped.Load(),
		DroppedAfterForward: s.droppedAF.Load(),
		Delayed:             s.delayed.Load(),
		Holding:             s.holding.Load(),
		ClientConns:         s.clientConns.Load(),
		UpstreamConns:       s.upstreamConns.Load(),
	}
}
