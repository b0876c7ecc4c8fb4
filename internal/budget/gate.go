// Package budget shares the app-wide Cluster Service budget among the
// handler processes through one ledger item in the Leases container
// (docs/design.md, "The Cluster Service budget"). Each process holds
// permits in the ledger, grows only into free ones, gives back
// cooperatively, and uses them only until its own lease end, measured on
// its own clock; nobody takes permits from a live holder.
//
// A process has two parts. The Gate (this file) is its semaphore: the
// permits its requests take and give back, the requests the client gave
// up on, and the lease that bounds each request. The member (member.go,
// plan.go) is its entry in the ledger: it reads, plans, writes, reclaims
// and follows epochs, and tells the gate what it may use through a grant.
package budget

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrNoLease says that a Cluster Service request was not started: the
// process's lease has too little time left. It passes once the ledger can
// be written again.
var ErrNoLease = errors.New("budget: too little lease left to start a Cluster Service request")

// ErrNotHeld says that a Cluster Service request was not started: the
// process has more permits in use than the ledger shows it holding, as
// after its entry was reclaimed while it was frozen, or it waits out a new
// epoch. It passes once the ledger shows them again.
var ErrNotHeld = errors.New("budget: more permits in use than the ledger shows this process holding")

// Gate is the process's Cluster Service permits: a counting semaphore
// whose size is min(committed permits, Ceiling) while the lease lasts,
// sized by the process's member of the ledger. New makes one; Run keeps
// its entry. Without a Store it is a plain semaphore of Ceiling.
type Gate struct {
	cfg    Config
	member *member // nil without a Store

	mu      sync.Mutex
	changed chan struct{} // closed when a waiter may get in

	// What the process does: the member writes it into its entry.
	group     Group
	demand    int
	idleSince Instant
	inFlight  int
	abandoned []Instant // when each request the client gave up on ended

	// What the member last granted.
	grant grant
}

// grant is what the member lets the gate use: its permits while the lease
// lasts, and what Start counts as the process's own.
type grant struct {
	committed int  // permits of the last successful write
	cap       int  // at most committed: lowered first when giving back
	held      int  // committed, or 0 while waiting out an epoch or not joined
	leased    bool // send holds the send of the last successful write
	send      Instant
}

// local is what the process does, as the gate counts it at one instant.
type local struct {
	group     Group
	demand    int
	idleSince Instant
	inUse     int
}

// New makes a Gate of cfg; it holds nothing until Run (or Tick) has
// written its entry, unless cfg has no Store.
func New(cfg Config) *Gate {
	cfg = cfg.withDefaults()
	g := &Gate{cfg: cfg, changed: make(chan struct{}), group: GroupPoll, idleSince: cfg.Clock.Now()}
	if cfg.Store != nil {
		g.member = newMember(cfg, g)
	}
	return g
}

// Serve records which group the process serves, as its invocations tell:
// pickup, once seen, stays (its floor is kept while it runs).
func (g *Gate) Serve(group Group) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.group != GroupPickup {
		g.group = group
	}
}

// Queue adds n (or, negative, removes) operations queued or in flight in
// the process: its demand. Work arriving at an idle process asks for a
// tick at once, so that its permits come in one write.
func (g *Gate) Queue(n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	was := g.demand
	g.demand = max(g.demand+n, 0)
	switch {
	case was == 0 && g.demand > 0:
		g.poke()
	case was > 0 && g.demand == 0:
		g.idleSince = g.cfg.Clock.Now()
	}
}

// poke asks the member for a tick now.
func (g *Gate) poke() {
	if g.member != nil {
		g.member.poke()
	}
}

// broadcast wakes the waiters of Acquire; g.mu is held.
func (g *Gate) broadcast() {
	close(g.changed)
	g.changed = make(chan struct{})
}

// local is what the process does at now.
func (g *Gate) local(now Instant) local {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.localLocked(now)
}

func (g *Gate) localLocked(now Instant) local {
	return local{group: g.group, demand: g.demand, idleSince: g.idleSince, inUse: g.inUse(now)}
}

// settle runs decide on what the process does at now and takes the grant
// it returns at once: no permit is taken between the count decide reads
// and the lower cap it may set.
func (g *Gate) settle(now Instant, decide func(local) grant) {
	g.mu.Lock()
	defer g.mu.Unlock()
	next := decide(g.localLocked(now))
	if next != g.grant {
		g.grant = next
		g.broadcast()
	}
}

// usable is the permits the process may use at now; g.mu is held.
func (g *Gate) usable(now Instant) int {
	if g.member == nil {
		return g.cfg.Ceiling
	}
	if !g.grant.leased || heldFor(g.grant.send, now) >= g.cfg.Validity {
		return 0
	}
	return min(g.grant.cap, g.grant.committed, g.cfg.Ceiling)
}

// inUse is the permits taken and not released, and those of requests
// abandoned less than Grace ago; g.mu is held.
func (g *Gate) inUse(now Instant) int {
	kept := g.abandoned[:0]
	for _, at := range g.abandoned {
		if seenFor(at, now) < g.cfg.Grace {
			kept = append(kept, at)
		}
	}
	g.abandoned = kept
	return g.inFlight + len(g.abandoned)
}

// Abandoned counts the permit of a request the client gave up on, timed
// out or canceled, for Grace more: Cluster Service may still work on it.
func (g *Gate) Abandoned() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.abandoned = append(g.abandoned, g.cfg.Clock.Now())
	time.AfterFunc(g.cfg.Grace, func() { // wake the waiters once it may pass
		g.mu.Lock()
		defer g.mu.Unlock()
		g.broadcast()
		g.poke()
	})
}

// leaseLeft is the time until the lease ends at now; g.mu is held.
func (g *Gate) leaseLeft(now Instant) time.Duration {
	if !g.grant.leased {
		return 0
	}
	return max(g.cfg.Validity-heldFor(g.grant.send, now), 0)
}

// LeaseLeft is the time left on the process's lease by its own clock;
// without a ledger, a very long time.
func (g *Gate) LeaseLeft() time.Duration {
	if g.member == nil {
		return time.Duration(1<<63 - 1)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.leaseLeft(g.cfg.Clock.Now())
}

// Figures are what the gate's metrics report.
type Figures struct {
	Group                   Group
	Permits, Target, Demand int
	Owner                   string
}

// Figures reports the permits usable now, the target and the demand.
func (g *Gate) Figures() Figures {
	var f Figures
	if g.member != nil {
		f.Target, f.Owner = g.member.figures()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	f.Group, f.Permits, f.Demand = g.group, g.usable(g.cfg.Clock.Now()), min(g.demand, g.cfg.Ceiling)
	return f
}

// take takes a permit if one is free and a request could start now; g.mu
// is held.
func (g *Gate) take() bool {
	now := g.cfg.Clock.Now()
	if g.member != nil && g.leaseLeft(now) < g.cfg.StartMargin {
		return false
	}
	if g.inUse(now) >= g.usable(now) {
		return false
	}
	g.inFlight++
	return true
}

// release gives a permit back.
func (g *Gate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.inFlight--
	g.broadcast()
	if g.inUse(g.cfg.Clock.Now()) <= g.grant.cap && g.grant.cap < g.grant.committed {
		g.poke() // a give-back was waiting for this
	}
}

// Acquire waits for a permit and returns its release; what names the wait
// in the error of a ctx that ends first.
func (g *Gate) Acquire(ctx context.Context, what string) (release func(), err error) {
	for {
		g.mu.Lock()
		if g.take() {
			g.mu.Unlock()
			return sync.OnceFunc(g.release), nil
		}
		changed := g.changed
		g.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting %s: %w", what, context.Cause(ctx))
		}
	}
}

// Start bounds one Cluster Service request by the lease: it refuses
// (ErrNoLease) with less than StartMargin of lease left, and (ErrNotHeld)
// while the process waits out a new epoch or has more permits in use than
// the ledger shows it holding: permits taken before its entry was
// reclaimed are not its own any more, even after it rejoins and its lease
// is renewed. Otherwise it returns ctx with a deadline DeadlineMargin
// before the lease ends, so that no request outlives the permits it is
// counted in.
func (g *Gate) Start(ctx context.Context) (context.Context, context.CancelFunc, error) {
	if g.member == nil {
		return ctx, func() {}, nil
	}
	g.mu.Lock()
	now := g.cfg.Clock.Now()
	left, inUse, held := g.leaseLeft(now), g.inUse(now), min(g.grant.held, g.cfg.Ceiling)
	g.mu.Unlock()
	if left < g.cfg.StartMargin {
		return nil, nil, fmt.Errorf("%w (%v left)", ErrNoLease, left.Round(time.Millisecond))
	}
	if inUse > held {
		return nil, nil, fmt.Errorf("%w (%d in use, %d held)", ErrNotHeld, inUse, held)
	}
	ctx, cancel := context.WithTimeout(ctx, left-g.cfg.DeadlineMargin)
	return ctx, cancel, nil
}

// Run keeps the process's entry in the ledger until ctx ends; without a
// Store it returns at once.
func (g *Gate) Run(ctx context.Context) {
	if g.member != nil {
		g.member.run(ctx)
	}
}

// Tick reads the ledger once and writes the process's entry when it must
// (Run is a loop of it); without a Store it does nothing.
func (g *Gate) Tick(ctx context.Context) error {
	if g.member == nil {
		return nil
	}
	return g.member.tick(ctx)
}
