package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/internal/database"
)

// The frontend stand-in of a changed pass: a few workers, each taking a
// random subscription's lock now and then as a customer request does,
// holding it briefly and releasing it. Light enough that its own holds
// seldom delay opstatus: it holds any one subscription's lock for a small
// fraction of the time (workers × probeHold / (probePause + probeHold),
// spread over every subscription).
const (
	probeWorkers = 4
	probePause   = 100 * time.Millisecond // mean pause between a worker's attempts
	probeHold    = 20 * time.Millisecond  // a request's writes under the lock
	// probeRetry is how often a waiting worker tries again: short, so that
	// the wait measures opstatus's hold rather than the retry interval (the
	// frontend retries about once a second: then every attempt that meets a
	// held lock waits a second or more).
	probeRetry   = 10 * time.Millisecond
	probeGiveUp  = 15 * time.Second
	probeOwner   = "bench-frontend"
	opstatusLock = "opstatus/" // the handler's lock owners start with it (main.go)
)

// lockAttempt is one wait of the frontend stand-in for a lock.
type lockAttempt struct {
	Start time.Time
	// Wait is from the first create to the one that took the lock,
	// answer included; Busy is set when the first create met a held lock.
	Wait      time.Duration
	Busy, Got bool
}

// lockProbe is the frontend stand-in.
type lockProbe struct {
	fe   *frontend.Frontend
	subs []string

	mu       sync.Mutex
	rng      *rand.Rand
	attempts []lockAttempt
	errors   int
	// requests counts its requests to the Locks container and conflicts
	// the creates answered 409, so that they can be told from opstatus's.
	requests, conflicts int64
}

func (p *lockProbe) count(requests, conflicts int64) {
	p.mu.Lock()
	p.requests += requests
	p.conflicts += conflicts
	p.mu.Unlock()
}

func newLockProbe(fe *frontend.Frontend, subs []string) *lockProbe {
	return &lockProbe{fe: fe, subs: subs, rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 16))}
}

func (p *lockProbe) pause() (time.Duration, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return time.Duration(p.rng.Int64N(int64(2 * probePause))), p.subs[p.rng.IntN(len(p.subs))]
}

// run takes locks until ctx ends.
func (p *lockProbe) run(ctx context.Context) {
	var wg sync.WaitGroup
	for range probeWorkers {
		wg.Go(func() {
			for {
				d, sub := p.pause()
				if !sleepCtx(ctx, d) {
					return
				}
				p.once(ctx, sub)
			}
		})
	}
	wg.Wait()
}

// once waits for sub's lock, holds it for probeHold and releases it.
func (p *lockProbe) once(ctx context.Context, sub string) {
	octx := database.WithOwner(ctx, probeOwner)
	a := lockAttempt{Start: time.Now()}
	var lock frontend.Lock
	for {
		l, ok, err := p.fe.TryLock(octx, sub, probeOwner)
		p.count(1, map[bool]int64{true: 0, false: 1}[ok || err != nil])
		if err != nil {
			if ctx.Err() == nil {
				p.mu.Lock()
				p.errors++
				p.mu.Unlock()
			}
			return
		}
		if ok {
			lock, a.Got = l, true
			break
		}
		a.Busy = true
		if time.Since(a.Start) > probeGiveUp || !sleepCtx(ctx, probeRetry) {
			break
		}
	}
	a.Wait = time.Since(a.Start)
	p.mu.Lock()
	p.attempts = append(p.attempts, a)
	p.mu.Unlock()
	if !a.Got {
		return
	}
	sleepCtx(ctx, probeHold)
	uctx, cancel := context.WithTimeout(context.WithoutCancel(octx), 10*time.Second)
	defer cancel()
	_ = p.fe.Unlock(uctx, lock)
	p.count(1, 0)
}

// locksRequests returns the stand-in's requests to the Locks container and
// its creates that met a held lock.
func (p *lockProbe) locksRequests() (requests, conflicts int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.requests, p.conflicts
}

// frontendWaits summarizes the stand-in's waits for a lock.
type frontendWaits struct {
	// Waits are the attempts started while opstatus was writing (from its
	// first update to its last); Busy how many of them met a held lock,
	// GaveUp how many never got it.
	Waits          dist
	Attempts, Busy int
	GaveUp, Errors int
}

// summary returns the waits of the attempts started in [from, to].
func (p *lockProbe) summary(from, to time.Time) frontendWaits {
	p.mu.Lock()
	defer p.mu.Unlock()
	var f frontendWaits
	var waits []time.Duration
	for _, a := range p.attempts {
		if a.Start.Before(from) || a.Start.After(to) {
			continue
		}
		f.Attempts++
		waits = append(waits, a.Wait)
		if a.Busy {
			f.Busy++
		}
		if !a.Got {
			f.GaveUp++
		}
	}
	f.Waits, f.Errors = summarize(waits), p.errors
	return f
}

// sleepCtx sleeps for d or until ctx ends, and reports whether ctx is
// still alive.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// lockHold is one lock item's life at the Cosmos server, from the answer to
// its create to the answer to its delete (dev/cosmosdb/lib/lockholds.js).
type lockHold struct {
	ID    string  `json:"id"`
	Owner string  `json:"owner"`
	Start float64 `json:"start"` // ms since the Unix epoch
	End   float64 `json:"end"`
}

// Duration is how long the lock was held.
func (h lockHold) Duration() time.Duration {
	return time.Duration((h.End - h.Start) * float64(time.Millisecond))
}

// lockHolds reads the lock holds the Cosmos server saw in database db, and
// how many lock items were created again without a delete in between (they
// expired).
func (e *env) lockHolds(ctx context.Context, db string) ([]lockHold, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.cosmos.Endpoint+"_opstatus/locks/"+url.PathEscape(db), nil)
	if err != nil {
		return nil, 0, err
	}
	resp, err := insecureClient.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("reading lock holds: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, 0, fmt.Errorf("reading lock holds: status %s", resp.Status)
	}
	var body struct {
		Holds   []lockHold `json:"holds"`
		Expired int        `json:"expired"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, 0, fmt.Errorf("reading lock holds: %w", err)
	}
	return body.Holds, body.Expired, nil
}

// holdsOf summarizes the holds whose owner starts with prefix.
func holdsOf(holds []lockHold, prefix string) dist {
	var d []time.Duration
	for _, h := range holds {
		if strings.HasPrefix(h.Owner, prefix) {
			d = append(d, h.Duration())
		}
	}
	slices.Sort(d)
	return summarize(d)
}
