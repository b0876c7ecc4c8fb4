package chaos

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opstatus/opstatus/dev/clustersim"
	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/internal/testenv"
)

// lockTaker is the simulated frontend: it takes subscription locks at
// random, through the proxy, and holds each for a while, renewing it every
// third of the TTL as the frontend does while it works. A hold is a slow
// request: while requests are queued, each hold makes one, writing the
// operation when the lock is taken and its Resources item when the hold
// ends, so opstatus may read between the two for seconds; the other holds
// are requests refused once the lock was taken, which write nothing.
type lockTaker struct {
	fe   *frontend.Frontend
	subs []string
	ttl  time.Duration
	// hold bounds how long a lock is kept; some holds outlast opstatus's
	// 10 s wait for the lock on purpose.
	minHold, maxHold time.Duration
	// pause bounds the rest between two attempts.
	minPause, maxPause time.Duration
	// before writes what stands before a request (seedBefore); armURL is
	// where its operation is to be notified.
	before func(context.Context, op) error
	armURL string

	mu       sync.Mutex
	rng      *rand.Rand
	requests []op // not yet made, nor prepared by before

	holds, busy, renewals, renewFailures, errors, made atomic.Int64
	held                                               atomic.Int64 // nanoseconds held in total
}

func (l *lockTaker) between(lo, hi time.Duration) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return lo + time.Duration(l.rng.Int64N(int64(hi-lo)+1))
}

func (l *lockTaker) pick() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.subs[l.rng.IntN(len(l.subs))]
}

// next takes the next queued request, prepared by before.
func (l *lockTaker) next(ctx context.Context) (*op, error) {
	l.mu.Lock()
	if len(l.requests) == 0 {
		l.mu.Unlock()
		return nil, nil
	}
	o := l.requests[0]
	l.requests = l.requests[1:]
	l.mu.Unlock()
	return &o, l.before(ctx, o)
}

// run takes locks until ctx ends; the lock it holds then is released, and
// the requests still queued are made at once, so that every operation of
// the scenario is written.
func (l *lockTaker) run(ctx context.Context) {
	var req *op // prepared, waiting for its subscription's lock
	for testenv.Sleep(ctx, l.between(l.minPause, l.maxPause)) {
		if req == nil {
			var err error
			if req, err = l.next(ctx); err != nil {
				l.errors.Add(1)
			}
		}
		sub := l.pick()
		if req != nil {
			sub = req.Sub
		}
		if l.holdOne(ctx, sub, req, l.between(l.minHold, l.maxHold)) {
			req = nil
		}
	}
	wctx := context.WithoutCancel(ctx)
	for {
		if req == nil {
			var err error
			if req, err = l.next(wctx); err != nil {
				l.errors.Add(1)
			}
			if req == nil {
				return
			}
		}
		if l.holdOne(wctx, req.Sub, req, 0) {
			req = nil
		} else {
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// holdOne takes sub's lock, if it is free, for about hold, making req in
// it when there is one; it reports whether it took the lock.
func (l *lockTaker) holdOne(ctx context.Context, sub string, req *op, hold time.Duration) bool {
	// Every request names its owner, as opstatus's do, so that the
	// proxy's write log attributes it.
	octx := database.WithOwner(ctx, frontendOwner)
	lock, ok, err := l.fe.TryLock(octx, sub, frontendOwner)
	if err != nil {
		l.errors.Add(1)
		return false
	}
	if !ok {
		l.busy.Add(1)
		return false
	}
	l.holds.Add(1)
	start := time.Now()
	work := func() {
		for until := start.Add(hold); time.Now().Before(until); {
			if !testenv.Sleep(ctx, min(l.ttl/3, time.Until(until))) {
				break
			}
			if !time.Now().Before(until) {
				break
			}
			next, err := l.fe.Renew(octx, lock)
			if err != nil {
				// The lease may be gone: stop "working" at once.
				l.renewFailures.Add(1)
				break
			}
			l.renewals.Add(1)
			lock = next
		}
	}
	if req == nil {
		work()
	} else {
		// The request is finished whatever ctx says: its operation is
		// written, and its Resources item must follow.
		wctx := context.WithoutCancel(octx)
		if err := writeRequest(wctx, l.fe, *req, l.armURL, work); err != nil {
			l.errors.Add(1)
		} else {
			l.made.Add(1)
		}
	}
	l.held.Add(int64(time.Since(start)))
	uctx, cancel := context.WithTimeout(database.WithOwner(context.WithoutCancel(ctx), frontendOwner), 10*time.Second)
	defer cancel()
	if err := l.fe.Unlock(uctx, lock); err != nil {
		l.errors.Add(1)
	}
	return true
}

// killer sends SIGKILL to the handler at random moments; the host emulator
// starts a new one each time.
type killer struct {
	e        *env
	min, max time.Duration
	rng      *rand.Rand

	kills atomic.Int64
	mu    sync.Mutex
	at    []time.Time
}

// run kills until ctx ends, waiting after each kill until the new handler
// answers.
func (k *killer) run(ctx context.Context) {
	for testenv.Sleep(ctx, k.min+time.Duration(k.rng.Int64N(int64(k.max-k.min)+1))) {
		instances := k.e.s.Host.Instances()
		if len(instances) == 0 {
			continue
		}
		in := instances[k.rng.IntN(len(instances))]
		pid := in.PID()
		if pid == 0 {
			continue
		}
		if err := in.Kill(); err != nil {
			continue
		}
		k.kills.Add(1)
		k.mu.Lock()
		k.at = append(k.at, time.Now())
		k.mu.Unlock()
		// An instance the platform stopped or replaced meanwhile gets no
		// new handler.
		testenv.WaitFor(ctx, time.Minute, 50*time.Millisecond, func() bool {
			return in.PID() != pid && in.PID() != 0 && in.Port() != 0 || !slices.Contains(k.e.s.Host.Instances(), in)
		})
	}
}

// bodyFaults turns on, for short windows, the simulator's faults that
// change what Cluster Service answers about external auths and
// credentials: a state it never sends, credentials without an expiration,
// a credential list that never ends. Each only defers the operations it
// touches, so none may change a terminal state. The external auth served
// without a status is left out: it ends a Create at once, which would
// overrule a scripted failure.
type bodyFaults struct {
	sim  *clustersim.Sim
	base clustersim.Faults
	// pause bounds the time between two windows, window how long one lasts.
	minPause, maxPause, minWindow, maxWindow time.Duration
	rng                                      *rand.Rand

	windows, errors atomic.Int64
	on              atomic.Int64 // nanoseconds with a window open
}

// run opens windows until ctx ends, then restores base.
func (b *bodyFaults) run(ctx context.Context) {
	defer func() {
		if b.sim.SetFaults(b.base) != nil {
			b.errors.Add(1)
		}
	}()
	for testenv.Sleep(ctx, b.between(b.minPause, b.maxPause)) {
		f := b.base
		// A non-empty subset of the three faults.
		for set := 0; set == 0; {
			set = b.rng.IntN(8)
			if set&1 != 0 {
				f.UnknownState = "chaos_unknown"
			}
			f.CredentialNoExpiration = set&2 != 0
			f.EndlessCredentialList = set&4 != 0
		}
		if b.sim.SetFaults(f) != nil {
			b.errors.Add(1)
			continue
		}
		b.windows.Add(1)
		start := time.Now()
		testenv.Sleep(ctx, b.between(b.minWindow, b.maxWindow))
		b.on.Add(int64(time.Since(start)))
		if b.sim.SetFaults(b.base) != nil {
			b.errors.Add(1)
		}
	}
}

func (b *bodyFaults) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(b.rng.Int64N(int64(hi-lo)+1))
}
