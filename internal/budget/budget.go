package budget

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/opstatus/opstatus/internal/telemetry"
)

// Defaults of Config (design/budget-ledger.md): read every 2 s, renew
// every 4 s, a lease valid 15 s from the send of its write, an entry
// reclaimed after 30 s without a change on the observer's clock (twice
// the validity, so clocks may run at rates up to 2× apart), a request
// started only with 2 s of lease left and ended 0.5 s before it, each
// ledger call given at most 2 s (its read interval), and a request the
// client gave up on counted for 15 s more: E − V, so that the permits of a
// process whose entry is reclaimed come back no sooner.
const (
	DefaultReadEvery      = 2 * time.Second
	DefaultRenewEvery     = 4 * time.Second
	DefaultValidity       = 15 * time.Second
	DefaultExpireAfter    = 30 * time.Second
	DefaultIdleAfter      = 2 * time.Second
	DefaultStartMargin    = 2 * time.Second
	DefaultDeadlineMargin = 500 * time.Millisecond
	DefaultFloor          = 8
	DefaultWriteTries     = 3
	DefaultCallTimeout    = 2 * time.Second
	DefaultGrace          = 15 * time.Second
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

// Config configures a Gate. Zero durations and counts take the defaults.
type Config struct {
	// Store keeps the ledger; nil means no ledger (CLUSTER_SERVICE_BUDGET
	// unset): the process has only its Ceiling, with no lease.
	Store Store
	// Budget is B, the bound on Cluster Service requests in flight across
	// every process.
	Budget int
	// Ceiling bounds the process's own requests in flight, whatever
	// permits it holds (CLUSTER_SERVICE_MAX_IN_FLIGHT).
	Ceiling int
	// Floor is the permits kept for a pickup process while it runs.
	Floor int

	ReadEvery      time.Duration // T
	RenewEvery     time.Duration // R
	Validity       time.Duration // V
	ExpireAfter    time.Duration // E, at least 2V and V + Grace
	IdleAfter      time.Duration // demand 0 this long: permits 0
	StartMargin    time.Duration // lease left needed to start a request
	DeadlineMargin time.Duration // a request ends this long before the lease
	WriteTries     int           // reads and writes a tick tries on 412
	CallTimeout    time.Duration // each ledger read or write
	// Grace keeps the permit of a request the client gave up on (timed
	// out or canceled) counted this long after, while Cluster Service may
	// still work on it (CLUSTER_SERVICE_ABANDONED_GRACE).
	Grace time.Duration

	Clock  Clock
	Logger *slog.Logger
	// NewID makes owner ids and epochs; default 16 random bytes in hex.
	NewID func() string
}

func (c Config) withDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.ReadEvery, DefaultReadEvery)
	def(&c.RenewEvery, DefaultRenewEvery)
	def(&c.Validity, DefaultValidity)
	def(&c.ExpireAfter, DefaultExpireAfter)
	def(&c.IdleAfter, DefaultIdleAfter)
	def(&c.StartMargin, DefaultStartMargin)
	def(&c.DeadlineMargin, DefaultDeadlineMargin)
	def(&c.CallTimeout, DefaultCallTimeout)
	def(&c.Grace, DefaultGrace)
	c.ExpireAfter = max(c.ExpireAfter, 2*c.Validity, c.Validity+c.Grace)
	if c.Floor <= 0 {
		c.Floor = DefaultFloor
	}
	if c.WriteTries <= 0 {
		c.WriteTries = DefaultWriteTries
	}
	if c.Ceiling <= 0 {
		c.Ceiling = 1
	}
	if c.Clock == nil {
		c.Clock = SystemClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.NewID == nil {
		c.NewID = randomID
	}
	return c
}

func randomID() string {
	var b [16]byte
	_, _ = crand.Read(b[:]) // never fails
	return hex.EncodeToString(b[:])
}

// observation is when an observer last saw another entry's seq change.
type observation struct {
	seq  int64
	at   Instant
	base time.Duration // the entry's UnchangedMs when first seen at seq
}

// unchanged is how long entry e has stayed at its seq, as far as the
// observer knows at now: what the ledger said when it first saw the seq
// plus its own monotonic time since, or what the ledger says now, if
// other observers have seen more.
func (o observation) unchanged(e Entry, now Instant) time.Duration {
	return max(o.base+seenFor(o.at, now), time.Duration(e.UnchangedMs)*time.Millisecond)
}

// Gate is the process's Cluster Service permits: a counting semaphore
// whose size is min(committed permits, Ceiling) while the lease lasts, and
// the process's entry in the ledger that sizes it. New makes one; Run
// keeps its entry.
type Gate struct {
	cfg Config

	mu      sync.Mutex
	changed chan struct{} // closed when a waiter may get in
	wake    chan struct{} // a tick is wanted now

	// The process.
	group     Group
	demand    int
	inFlight  int
	abandoned []Instant // when each request the client gave up on ended
	idleSince Instant

	// Its entry.
	owner  string
	joined bool // the entry was written under owner and not lost since
	epoch  string
	// waiting: the ledger was missing or its epoch changed, so holders of
	// the one before may still be running: no permits used, none taken or
	// given, until ExpireAfter from waitFrom.
	waiting  bool
	waitFrom Instant
	// epochSeen is when this process first saw the ledger's epoch.
	epochSeen  Instant
	seq        int64
	committed  int  // permits of the last successful write
	capLocal   int  // at most committed: lowered first when giving back
	leased     bool // leaseSend holds the send of the last successful write
	leaseSend  Instant
	lastDemand int // as last written
	lastGroup  Group
	observed   map[string]observation
	target     int
}

// New makes a Gate of cfg; it holds nothing until Run (or Tick) has
// written its entry, unless cfg has no Store.
func New(cfg Config) *Gate {
	cfg = cfg.withDefaults()
	g := &Gate{
		cfg:      cfg,
		changed:  make(chan struct{}),
		wake:     make(chan struct{}, 1),
		group:    GroupPoll,
		observed: map[string]observation{},
	}
	g.owner = cfg.NewID()
	g.idleSince = cfg.Clock.Now()
	return g
}

// Serve says which group the process serves, as its invocations tell:
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

// poke asks Run for a tick now; g.mu is held.
func (g *Gate) poke() {
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// broadcast wakes the waiters of Acquire; g.mu is held.
func (g *Gate) broadcast() {
	close(g.changed)
	g.changed = make(chan struct{})
}

// usable is the permits the process may use at now; g.mu is held.
func (g *Gate) usable(now Instant) int {
	if g.cfg.Store == nil {
		return g.cfg.Ceiling
	}
	if !g.leased || heldFor(g.leaseSend, now) >= g.cfg.Validity {
		return 0
	}
	return min(g.capLocal, g.committed, g.cfg.Ceiling)
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
	if !g.leased {
		return 0
	}
	return max(g.cfg.Validity-heldFor(g.leaseSend, now), 0)
}

// Held is the permits the process may use now: 0 once its lease has run
// out.
func (g *Gate) Held() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.usable(g.cfg.Clock.Now())
}

// InFlight is the permits taken by Acquire and not yet released, and
// those of requests abandoned less than Grace ago.
func (g *Gate) InFlight() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.inUse(g.cfg.Clock.Now())
}

// LeaseLeft is the time left on the process's lease by its own clock;
// without a ledger, a very long time.
func (g *Gate) LeaseLeft() time.Duration {
	if g.cfg.Store == nil {
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
	g.mu.Lock()
	defer g.mu.Unlock()
	return Figures{Group: g.group, Permits: g.usable(g.cfg.Clock.Now()), Target: g.target,
		Demand: min(g.demand, g.cfg.Ceiling), Owner: g.owner}
}

// tryAcquire takes a permit if one is free and a request could start now;
// g.mu is held.
func (g *Gate) tryAcquire() bool {
	now := g.cfg.Clock.Now()
	if g.cfg.Store != nil && g.leaseLeft(now) < g.cfg.StartMargin {
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
	if g.inUse(g.cfg.Clock.Now()) <= g.capLocal && g.capLocal < g.committed {
		g.poke() // a give-back was waiting for this
	}
}

// TryAcquire takes a permit if one is usable now.
func (g *Gate) TryAcquire() (release func(), ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.tryAcquire() {
		return nil, false
	}
	return sync.OnceFunc(g.release), true
}

// Acquire waits for a permit and returns its release; what names the wait
// in the error of a ctx that ends first.
func (g *Gate) Acquire(ctx context.Context, what string) (release func(), err error) {
	for {
		g.mu.Lock()
		if g.tryAcquire() {
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

// Start bounds one Cluster Service request: it refuses (ErrNoLease) with
// less than StartMargin of lease left, and (ErrNotHeld) while the process
// waits out a new epoch or has more permits in use than the ledger shows
// it holding: permits taken before its entry was reclaimed are not its
// own any more, even after it rejoins and its lease is renewed. Otherwise
// it returns ctx with a deadline DeadlineMargin before the lease ends, so
// that no request outlives the permits it is counted in.
func (g *Gate) Start(ctx context.Context) (context.Context, context.CancelFunc, error) {
	if g.cfg.Store == nil {
		return ctx, func() {}, nil
	}
	g.mu.Lock()
	now := g.cfg.Clock.Now()
	left, inUse, held := g.leaseLeft(now), g.inUse(now), min(g.committed, g.cfg.Ceiling)
	if g.waiting || !g.joined {
		held = 0
	}
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

// Run keeps the process's entry until ctx ends: a tick every ReadEvery
// (half that while below target with demand), and at once when work
// arrives or a give-back has drained.
func (g *Gate) Run(ctx context.Context) {
	if g.cfg.Store == nil {
		return
	}
	failing := false
	for {
		err := g.Tick(ctx)
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			failing = true
			g.cfg.Logger.Warn("budget ledger not read or written; permits last until the lease ends", "error", err)
		case err == nil && failing:
			failing = false
			g.cfg.Logger.Info("budget ledger written again")
		}
		every := g.cfg.ReadEvery
		g.mu.Lock()
		if g.demand > 0 && g.committed < min(g.target, g.demand) {
			every /= 2
		}
		g.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-g.cfg.Clock.After(every):
		case <-g.wake:
		}
	}
}

// Tick reads the ledger and writes the process's entry when it must: to
// join, grow, give back, drop dead entries or renew. A 412 reads again, up
// to WriteTries times. A failed read changes nothing (the cap stays and
// never grows); a failed write leaves the lease to run out.
func (g *Gate) Tick(ctx context.Context) error {
	if g.cfg.Store == nil {
		return nil
	}
	var err error
	for try := range g.cfg.WriteTries {
		if try > 0 {
			select {
			case <-ctx.Done():
				return err
			case <-g.cfg.Clock.After(time.Duration(rand.Int64N(int64(50 * time.Millisecond)))):
			}
		}
		var again bool
		if again, err = g.tick(ctx); !again {
			return err
		}
	}
	return err
}

// tick is one read and at most one write; again says that the write met
// a newer ledger.
func (g *Gate) tick(ctx context.Context) (again bool, err error) {
	l, etag, err := g.read(ctx)
	if errors.Is(err, ErrNotFound) {
		return g.fence(ctx, "", "")
	}
	if errors.Is(err, ErrUnreadable) && etag != "" {
		return g.fence(ctx, etag, err.Error())
	}
	if err != nil {
		return false, fmt.Errorf("read the budget ledger: %w", err)
	}
	if why := l.impossible(); why != "" {
		return g.fence(ctx, etag, why)
	}
	g.mu.Lock()
	next, write := g.plan(l, g.cfg.Clock.Now())
	g.mu.Unlock()
	if !write {
		return false, nil
	}
	send := g.cfg.Clock.Now()
	_, err = g.replace(ctx, next, etag)
	switch {
	case err == nil:
		g.written(next, send)
		return false, nil
	case errors.Is(err, ErrPreconditionFailed):
		return true, fmt.Errorf("write the budget ledger: %w", err)
	default:
		return false, fmt.Errorf("write the budget ledger: %w", err)
	}
}

// read reads the ledger within CallTimeout.
func (g *Gate) read(ctx context.Context) (Ledger, string, error) {
	ctx, cancel := context.WithTimeout(ctx, g.cfg.CallTimeout)
	defer cancel()
	return g.cfg.Store.Read(ctx)
}

// replace writes l with If-Match etag within CallTimeout.
func (g *Gate) replace(ctx context.Context, l Ledger, etag string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, g.cfg.CallTimeout)
	defer cancel()
	return g.cfg.Store.Replace(ctx, l, etag)
}

// fence makes the ledger anew under a new epoch, its own entry holding the
// whole budget as a fence: holders of the one before may still be
// running, so nobody takes permits for ExpireAfter, the creator included.
// Without etag the ledger is missing and is created (on 409 another member
// created it first: read again); with it, the ledger read at etag is
// unreadable or impossible (why) and is replaced with If-Match (on 412
// another member replaced or changed it first: read again).
func (g *Gate) fence(ctx context.Context, etag, why string) (again bool, err error) {
	g.mu.Lock()
	switch {
	case etag != "":
		g.cfg.Logger.Error("budget ledger unreadable or impossible; replacing it under a new epoch, holding no permits for the expiry time",
			"problem", why)
	case g.joined || g.leased:
		g.cfg.Logger.Warn("budget ledger missing; holding no permits until it is created again")
	}
	g.reset()
	g.wait(g.cfg.Clock.Now())
	l := Ledger{ID: ID, Epoch: g.cfg.NewID(), Budget: g.cfg.Budget, Holders: map[string]Entry{
		g.owner: g.entry(g.cfg.Budget),
	}}
	g.seq = l.Holders[g.owner].Seq
	g.mu.Unlock()
	send := g.cfg.Clock.Now()
	if etag == "" {
		cctx, cancel := context.WithTimeout(ctx, g.cfg.CallTimeout)
		_, err = g.cfg.Store.Create(cctx, l)
		cancel()
	} else {
		_, err = g.replace(ctx, l, etag)
		if err == nil {
			telemetry.LedgerReplaced(ctx)
		}
	}
	switch {
	case err == nil:
		g.mu.Lock()
		g.epoch, g.epochSeen = l.Epoch, send
		clear(g.observed)
		g.mu.Unlock()
		g.written(l, send)
		return false, nil
	case errors.Is(err, ErrConflict), errors.Is(err, ErrPreconditionFailed), etag != "" && errors.Is(err, ErrNotFound):
		return true, nil
	case etag != "":
		return false, fmt.Errorf("replace the budget ledger: %w", err)
	default:
		return false, fmt.Errorf("create the budget ledger: %w", err)
	}
}

// entry is the process's entry holding permits, with the next seq; g.mu
// is held.
func (g *Gate) entry(permits int) Entry {
	e := Entry{Group: g.group, Permits: permits, Demand: min(g.demand, g.cfg.Ceiling), Seq: g.seq + 1, Budget: g.cfg.Budget}
	if g.group == GroupPickup {
		e.Floor = min(g.cfg.Floor, g.cfg.Budget/4) // as Targets caps it
	}
	return e
}

// wait starts, or starts again, the wait of a new epoch at now: each
// missing ledger or new epoch may come after holders of one this process
// never saw; g.mu is held.
func (g *Gate) wait(now Instant) {
	g.waiting, g.waitFrom = true, now
}

// reset drops the process's permits at once and makes it a newcomer under
// a new owner id; g.mu is held.
func (g *Gate) reset() {
	g.joined, g.leased = false, false
	g.committed, g.capLocal, g.seq = 0, 0, 0
	g.owner = g.cfg.NewID()
	g.broadcast()
}

// plan reads l at now and returns the ledger to write, if any; g.mu is
// held. Giving back lowers the local cap here, before the write.
func (g *Gate) plan(l Ledger, now Instant) (Ledger, bool) {
	if l.Epoch != g.epoch {
		if g.epoch != "" {
			g.cfg.Logger.Warn("budget ledger replaced under a new epoch; holding no permits for the expiry time",
				"epoch", l.Epoch)
			g.reset()
			g.wait(now)
		}
		g.epoch, g.epochSeen = l.Epoch, now
		clear(g.observed)
	}
	own, present := l.Holders[g.owner]
	if g.joined && !present {
		g.cfg.Logger.Warn("own budget entry reclaimed by another process; rejoining", "owner", g.owner)
		g.reset()
	}
	// An entry no member writes (a hand edit, a corruption) counts as
	// expired: kept, it could pin its permits for good.
	bad := map[string]bool{}
	for o, e := range l.Holders {
		if o == g.owner {
			continue
		}
		if why := l.invalid(e, g.cfg.ExpireAfter); why != "" {
			g.cfg.Logger.Error("budget ledger entry invalid; dropping it as expired", "owner", o, "problem", why)
			bad[o] = true
		}
	}
	for o, e := range l.Holders {
		if obs, ok := g.observed[o]; o != g.owner && !bad[o] && (!ok || obs.seq != e.Seq) {
			g.observed[o] = observation{seq: e.Seq, at: now, base: time.Duration(e.UnchangedMs) * time.Millisecond}
		}
	}
	for o := range g.observed {
		if _, ok := l.Holders[o]; !ok {
			delete(g.observed, o)
		}
	}
	current := 0
	if present { // the owner id is random: an entry under it is ours, even one whose reply was lost
		current = own.Permits
		// A write whose reply was lost raised it: never write a seq twice.
		g.seq = max(g.seq, own.Seq)
		// Nor use more than the ledger says, should that write have given back.
		if own.Permits < g.committed {
			g.committed = own.Permits
			g.capLocal = min(g.capLocal, own.Permits)
		}
	}
	view := l.Clone()
	view.Holders[g.owner] = g.entry(current)
	dropped := false
	for o, e := range view.Holders {
		if o == g.owner {
			continue
		}
		if bad[o] {
			delete(view.Holders, o)
			dropped = true
			continue
		}
		unchanged := g.observed[o].unchanged(e, now)
		if unchanged >= g.cfg.ExpireAfter {
			delete(view.Holders, o)
			dropped = true
			continue
		}
		e.UnchangedMs = unchanged.Milliseconds()
		view.Holders[o] = e
	}
	if g.waiting && seenFor(g.waitFrom, now) >= g.cfg.ExpireAfter {
		g.waiting = false
		g.capLocal = g.committed
		g.broadcast()
	}
	// Growth stays within the process's own budget, and within the
	// ledger's while this epoch is younger than ExpireAfter, so that a
	// fence of a smaller budget holds off a larger one too. The ledger's
	// budget is only ever lowered: members of two deployments never take
	// turns setting it back to their own.
	limit := g.cfg.Budget
	if l.Budget > 0 {
		view.Budget = min(l.Budget, g.cfg.Budget)
		if seenFor(g.epochSeen, now) < g.cfg.ExpireAfter {
			limit = min(limit, l.Budget)
		}
	} else {
		view.Budget = g.cfg.Budget
	}
	// Every member computes targets with the smallest budget of the live
	// entries, so that a deployment that lowers it is not starved by the
	// old one's share.
	least := g.cfg.Budget
	for _, e := range view.Holders {
		least = min(least, view.budgetOf(e))
	}
	targets, floors := shares(least, view.Holders)
	g.target = targets[g.owner]
	need := min(g.target, view.Holders[g.owner].Demand)
	p := current
	switch {
	case g.waiting:
	case need > current:
		if free := limit - view.Sum(); free > 0 {
			p = current + min(need-current, free)
		}
	case current > need:
		if g.demand == 0 && seenFor(g.idleSince, now) >= g.cfg.IdleAfter {
			p = 0
		} else if short(view, targets, floors, g.owner) > least-view.Sum() {
			p = min(current, g.target)
		}
	}
	if p < current {
		g.capLocal = min(g.capLocal, p)
		if g.inUse(now) > p {
			p = current // write once the requests in flight fit
		}
	} else if !g.waiting && g.capLocal != g.committed {
		g.capLocal = g.committed // no give-back wanted any more
		g.broadcast()
	}
	e := g.entry(p)
	view.Holders[g.owner] = e
	write := !g.joined || p != current || dropped || view.Budget != l.Budget ||
		!g.leased || heldFor(g.leaseSend, now) >= g.cfg.RenewEvery ||
		(e.Demand == 0) != (g.lastDemand == 0) || e.Group != g.lastGroup
	if p > current && view.Sum() > limit {
		return Ledger{}, false // cannot happen: growth is only into free permits
	}
	if write {
		// Spent whatever the write's outcome: a reply may be lost after the
		// write was applied, and an observer that saw this seq must see the
		// next write as new.
		g.seq = e.Seq
	}
	return view, write
}

// short is what the holders other than owner lack of what they should
// have: their demand up to their target, and a pickup process its floor
// even while idle, so that its next work finds the permits free. A holder
// over its target gives back only when the free permits do not cover it.
func short(l Ledger, targets, floors map[string]int, owner string) int {
	n := 0
	for o, e := range l.Holders {
		if o != owner {
			want := max(min(e.Demand, targets[o]), floors[o])
			n += max(want-e.Permits, 0)
		}
	}
	return n
}

// written records the successful write of l sent at send: only now may
// the process use what it grew, until send + Validity.
func (g *Gate) written(l Ledger, send Instant) {
	g.mu.Lock()
	defer g.mu.Unlock()
	e := l.Holders[g.owner]
	g.joined, g.seq = true, e.Seq
	grew := e.Permits > g.committed
	g.committed = e.Permits
	g.leased, g.leaseSend = true, send
	g.lastDemand, g.lastGroup = e.Demand, e.Group
	switch {
	case g.waiting:
		g.capLocal = 0
	case grew:
		g.capLocal = e.Permits
	default: // a give-back still draining keeps its lower cap
		g.capLocal = min(g.capLocal, e.Permits)
	}
	g.broadcast()
}
