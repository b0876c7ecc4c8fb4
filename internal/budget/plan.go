package budget

import (
	"maps"
	"time"
)

// state is what a member knows of its own entry and of the others': what
// plan reads and returns.
type state struct {
	owner string
	// spare is the owner id to rejoin under should the entry be lost,
	// drawn before plan so that plan draws nothing.
	spare  string
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

// grant is what s lets the gate use.
func (s state) grant() grant {
	g := grant{committed: s.committed, cap: s.capLocal, leased: s.leased, send: s.leaseSend}
	if s.joined && !s.waiting {
		g.held = s.committed
	}
	return g
}

// entry is the process's entry holding permits, with the next seq.
func (s state) entry(permits int, in local, cfg Config) Entry {
	e := Entry{Group: in.group, Permits: permits, Demand: min(in.demand, cfg.Ceiling), Seq: s.seq + 1, Budget: cfg.Budget}
	if in.group == GroupPickup {
		e.Floor = min(cfg.Floor, cfg.Budget/4) // as the targets cap it
	}
	return e
}

// wait starts, or starts again, the wait of a new epoch at now: each
// missing ledger or new epoch may come after holders of one this process
// never saw.
func (s state) wait(now Instant) state {
	s.waiting, s.waitFrom = true, now
	return s
}

// reset drops the process's permits at once and makes it a newcomer under
// the owner id given.
func (s state) reset(owner string) state {
	s.joined, s.leased = false, false
	s.committed, s.capLocal, s.seq = 0, 0, 0
	s.owner = owner
	return s
}

// written is s once the write of l sent at send succeeded: only now may
// the process use what it grew, until send + Validity.
func (s state) written(l Ledger, send Instant) state {
	e := l.Holders[s.owner]
	s.joined, s.seq = true, e.Seq
	grew := e.Permits > s.committed
	s.committed = e.Permits
	s.leased, s.leaseSend = true, send
	s.lastDemand, s.lastGroup = e.Demand, e.Group
	switch {
	case s.waiting:
		s.capLocal = 0
	case grew:
		s.capLocal = e.Permits
	default: // a give-back still draining keeps its lower cap
		s.capLocal = min(s.capLocal, e.Permits)
	}
	return s
}

// decision is what plan makes of a ledger read: the member's next state,
// the ledger to write if write, and what it found for the log.
type decision struct {
	state  state
	ledger Ledger
	write  bool

	newEpoch  string            // the ledger was replaced under this epoch
	reclaimed string            // the owner id whose entry another process reclaimed
	invalid   map[string]string // entries dropped as invalid: why, by owner
}

// plan reads l at now, for a process that does in, and decides the
// member's next state and the ledger to write, if any. Giving back lowers
// the cap here, before the write, and is written only once the requests
// in use fit. It reads nothing but its arguments and changes none of
// them.
func plan(s state, l Ledger, in local, now Instant, cfg Config) decision {
	var d decision
	s.observed = maps.Clone(s.observed) // plan's own from here
	if s.observed == nil {
		s.observed = map[string]observation{}
	}
	s, d.newEpoch, d.reclaimed = s.follow(l, now)
	d.invalid = s.observe(l, now, cfg)
	current := 0
	if own, present := l.Holders[s.owner]; present { // the owner id is random: an entry under it is ours, even one whose reply was lost
		current = own.Permits
		// A write whose reply was lost raised it: never write a seq twice.
		s.seq = max(s.seq, own.Seq)
		// Nor use more than the ledger says, should that write have given back.
		if own.Permits < s.committed {
			s.committed = own.Permits
			s.capLocal = min(s.capLocal, own.Permits)
		}
	}
	view, dropped := s.view(l, current, d.invalid, in, now, cfg)
	if s.waiting && seenFor(s.waitFrom, now) >= cfg.ExpireAfter {
		s.waiting = false
		s.capLocal = s.committed
	}
	var limit, p int
	view.Budget, limit = s.budgets(l, now, cfg)
	p, s.target = s.permits(view, current, limit, in, now, cfg)
	if p < current {
		s.capLocal = min(s.capLocal, p)
		if in.inUse > p {
			p = current // write once the requests in flight fit
		}
	} else if !s.waiting && s.capLocal != s.committed {
		s.capLocal = s.committed // no give-back wanted any more
	}
	e := s.entry(p, in, cfg)
	view.Holders[s.owner] = e
	write := !s.joined || p != current || dropped || view.Budget != l.Budget ||
		!s.leased || heldFor(s.leaseSend, now) >= cfg.RenewEvery ||
		(e.Demand == 0) != (s.lastDemand == 0) || e.Group != s.lastGroup
	if p > current && view.Sum() > limit {
		d.state = s
		return d // cannot happen: growth is only into free permits
	}
	if write {
		// Spent whatever the write's outcome: a reply may be lost after the
		// write was applied, and an observer that saw this seq must see the
		// next write as new.
		s.seq = e.Seq
		d.ledger = view
	}
	d.state, d.write = s, write
	return d
}

// follow is s once it has read l at now: a new epoch makes the process a
// newcomer under its spare owner id that waits the epoch out, and its own
// entry gone makes it a newcomer too. It clears s.observed, which is
// plan's own, on a new epoch.
func (s state) follow(l Ledger, now Instant) (next state, newEpoch, reclaimed string) {
	if l.Epoch != s.epoch {
		if s.epoch != "" {
			newEpoch = l.Epoch
			s = s.reset(s.spare).wait(now)
			s.spare = ""
		}
		s.epoch, s.epochSeen = l.Epoch, now
		clear(s.observed)
	}
	if _, present := l.Holders[s.owner]; s.joined && !present {
		reclaimed = s.owner
		s = s.reset(s.spare)
		s.spare = ""
	}
	return s, newEpoch, reclaimed
}

// observe records in s.observed, which is plan's own, each other entry of
// l whose seq it sees change at now, forgets the entries gone, and returns
// why each entry no member writes is not one (a hand edit, a corruption):
// those count as expired, since kept they could pin their permits for
// good.
func (s state) observe(l Ledger, now Instant, cfg Config) (invalid map[string]string) {
	invalid = map[string]string{}
	for o, e := range l.Holders {
		if o == s.owner {
			continue
		}
		if why := l.invalid(e, cfg.ExpireAfter); why != "" {
			invalid[o] = why
			continue
		}
		if obs, ok := s.observed[o]; !ok || obs.seq != e.Seq {
			s.observed[o] = observation{seq: e.Seq, at: now, base: time.Duration(e.UnchangedMs) * time.Millisecond}
		}
	}
	for o := range s.observed {
		if _, ok := l.Holders[o]; !ok {
			delete(s.observed, o)
		}
	}
	return invalid
}

// view is l as the process would write it at now: its own entry holding
// current, the other entries dropped when invalid or seen unchanged for
// ExpireAfter, the rest carrying how long they were seen unchanged;
// dropped says whether any went.
func (s state) view(l Ledger, current int, invalid map[string]string, in local, now Instant, cfg Config) (view Ledger, dropped bool) {
	view = l.Clone()
	view.Holders[s.owner] = s.entry(current, in, cfg)
	for o, e := range view.Holders {
		if o == s.owner {
			continue
		}
		if invalid[o] != "" {
			delete(view.Holders, o)
			dropped = true
			continue
		}
		unchanged := s.observed[o].unchanged(e, now)
		if unchanged >= cfg.ExpireAfter {
			delete(view.Holders, o)
			dropped = true
			continue
		}
		e.UnchangedMs = unchanged.Milliseconds()
		view.Holders[o] = e
	}
	return view, dropped
}

// budgets are the ledger's budget to write over l at now, and the limit
// growth stays within: the process's own budget, and the ledger's while
// this epoch is younger than ExpireAfter, so that a fence of a smaller
// budget holds off a larger one too. The ledger's budget is only ever
// lowered: members of two deployments never take turns setting it back
// to their own.
func (s state) budgets(l Ledger, now Instant, cfg Config) (ledger, limit int) {
	if l.Budget <= 0 {
		return cfg.Budget, cfg.Budget
	}
	limit = cfg.Budget
	if seenFor(s.epochSeen, now) < cfg.ExpireAfter {
		limit = min(limit, l.Budget)
	}
	return min(l.Budget, cfg.Budget), limit
}

// permits is what the process should hold of view, where it holds
// current, and its target. Every member computes targets with the
// smallest budget of the live entries (its own among them), so that a
// deployment that lowers it is not starved by the old one's share. It
// grows towards its need only into free permits within limit, takes
// nothing while it waits out an epoch, writes 0 once idle for IdleAfter,
// and gives back down to its target only when the free permits do not
// cover what the others lack.
func (s state) permits(view Ledger, current, limit int, in local, now Instant, cfg Config) (p, target int) {
	least := view.least()
	targets, floors := shares(least, view.Holders)
	target = targets[s.owner]
	need := min(target, view.Holders[s.owner].Demand)
	p = current
	switch {
	case s.waiting:
	case need > current:
		if free := limit - view.Sum(); free > 0 {
			p = current + min(need-current, free)
		}
	case current > need:
		if in.demand == 0 && seenFor(in.idleSince, now) >= cfg.IdleAfter {
			p = 0
		} else if short(view, targets, floors, s.owner) > least-view.Sum() {
			p = min(current, target)
		}
	}
	return p, target
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
