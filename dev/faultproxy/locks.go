package faultproxy

import (
	"encoding/json"
	"slices"
	"strings"
	"time"
)

// LocksContainer is the default name of the lock container.
const LocksContainer = "Locks"

// Lease is one owner's tenure of a subscription lock, rebuilt from a write
// log. Because the log only brackets each write between the instants the
// proxy forwarded it and got the answer, a lease has a certain span (the
// owner held the lock throughout) inside a possible span (the owner may
// have held it at any instant of it).
type Lease struct {
	// Database and Subscription (the lock item's id, lower case) name the
	// lock; Owner is what the ownerOf function gave for the acquiring write.
	Database, Subscription, Owner string
	// CertainFrom is the answer to the acquiring write; CertainUntil is the
	// earliest instant the lease could have ended: its expiry counted from
	// the whole second in which the last renewal was forwarded (Cosmos DB
	// expires an item at its _ts, in whole seconds, plus its TTL), or the
	// forwarding of the delete
	// or of another owner's takeover. It may precede CertainFrom when the
	// lease was short.
	CertainFrom, CertainUntil time.Time
	// PossibleFrom is the forwarding of the acquiring write; PossibleUntil
	// is the latest instant the lease could have ended. A lease that never
	// expires and was not released ends in the year 9999.
	PossibleFrom, PossibleUntil time.Time
}

// Violation kinds.
const (
	// ViolationHeldByOther: the write happened while another owner
	// certainly held the subscription's lock.
	ViolationHeldByOther = "held-by-other"
	// ViolationNotHeld: the write happened while its writer certainly did
	// not hold the lock.
	ViolationNotHeld = "not-held"
)

// Violation is a write to a subscription's items that broke the lock.
type Violation struct {
	// Kind is ViolationHeldByOther or ViolationNotHeld.
	Kind string
	// Write is the offending write and Writer its owner per ownerOf.
	Write  Write
	Writer string
	// Lease is the other owner's lease, for ViolationHeldByOther.
	Lease *Lease
}

// forever stands for "no expiry".
var forever = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// DefaultOwner attributes a write for LockViolations: for a lock item write,
// the "owner" in its body (falling back to the x-opstatus-owner header);
// for any other write, the x-opstatus-owner header. Empty when unknown.
func DefaultOwner(w Write) string {
	if w.Container == LocksContainer {
		var doc struct {
			Owner string `json:"owner"`
		}
		if json.Unmarshal(w.Body, &doc) == nil && doc.Owner != "" {
			return doc.Owner
		}
	}
	return w.Owner
}

// Leases rebuilds the lock leases from writes to the Locks container (any
// order; several proxies' logs may be merged). A successful create starts a
// lease, and so does an upsert or replace by another owner (a takeover) or
// after the current lease has certainly expired; an upsert, replace or
// patch by the owner renews it; a delete ends it. A write with If-Match
// applies to the lease whose writes produced that etag, so that a release
// and the next create are paired correctly even when their windows overlap;
// other writes apply to the latest lease. The TTL is the body's
// "ttl" when positive, never when -1, else lockTTL (the container default;
// zero or negative means none).
//
// ownerOf attributes each write (nil means DefaultOwner). It is called for
// lock writes and data writes alike, so it must name owners the same way for
// both: it may map the Locks body owner, the x-opstatus-owner header, the
// User-Agent or the proxy (Write.Source) to one identity.
func Leases(writes []Write, lockTTL time.Duration, ownerOf func(Write) string) []Lease {
	if ownerOf == nil {
		ownerOf = DefaultOwner
	}
	lockWrites := make([]Write, 0, len(writes))
	for _, w := range writes {
		if w.Container == LocksContainer && w.Status/100 == 2 {
			lockWrites = append(lockWrites, w)
		}
	}
	slices.SortStableFunc(lockWrites, func(a, b Write) int { return a.Start.Compare(b.Start) })

	type key struct{ db, sub string }
	type state struct {
		*Lease
		etags map[string]bool // every etag the lease's writes produced
	}
	var leases []*Lease
	byKey := map[key][]*state{}
	current := map[key]*state{}
	// byETag finds the lease whose writes produced etag, the one an
	// If-Match write continues or releases.
	byETag := func(k key, etag string) *state {
		if etag == "" {
			return nil
		}
		for _, s := range byKey[k] {
			if s.etags[etag] {
				return s
			}
		}
		return nil
	}
	// end caps l at a write that certainly ended it (delete or takeover).
	end := func(l *state, w Write) {
		if w.Start.Before(l.CertainUntil) {
			l.CertainUntil = w.Start
		}
		if w.End.Before(l.PossibleUntil) {
			l.PossibleUntil = w.End
		}
	}
	for _, w := range lockWrites {
		k := key{w.Database, strings.ToLower(w.ItemID)}
		cur := current[k]
		owner := ownerOf(w)
		ttl := lockTTLOf(w, lockTTL)
		switch w.Kind {
		case KindDelete:
			// A conditional delete releases the lease it names, even when
			// the log's order put a newer create before it.
			target := byETag(k, w.IfMatch)
			if target == nil && w.IfMatch == "" {
				target = cur
			}
			if target != nil {
				end(target, w)
				if target == cur {
					delete(current, k)
				}
			}
		case KindCreate, KindUpsert, KindReplace, KindPatch:
			renewed := byETag(k, w.IfMatch)
			if renewed == nil && w.IfMatch == "" && cur != nil && w.Kind != KindCreate &&
				(owner == cur.Owner || w.Kind == KindPatch) && !w.Start.After(cur.PossibleUntil) {
				renewed = cur
			}
			if renewed != nil && w.Kind != KindCreate && (owner == renewed.Owner || w.Kind == KindPatch) {
				renewed.CertainUntil = later(renewed.CertainUntil, expiry(w.Start.Truncate(time.Second), ttl))
				renewed.PossibleUntil = later(renewed.PossibleUntil, expiry(w.End, ttl))
				renewed.etags[w.ETag] = true
				continue
			}
			if w.Kind == KindPatch {
				continue // patches carry no owner: they cannot start a lease
			}
			if cur != nil {
				end(cur, w)
			}
			if renewed != nil && renewed != cur {
				end(renewed, w) // another owner's write with this lease's etag: a takeover
			}
			s := &state{
				Lease: &Lease{
					Database: w.Database, Subscription: k.sub, Owner: owner,
					CertainFrom: w.End, CertainUntil: expiry(w.Start.Truncate(time.Second), ttl),
					PossibleFrom: w.Start, PossibleUntil: expiry(w.End, ttl),
				},
				etags: map[string]bool{w.ETag: true},
			}
			leases = append(leases, s.Lease)
			byKey[k] = append(byKey[k], s)
			current[k] = s
		}
	}
	out := make([]Lease, len(leases))
	for i, l := range leases {
		out[i] = *l
	}
	return out
}

// LockViolations returns the writes to subscription items (any container but
// Locks, partition key = subscription) that certainly broke the lock
// protocol: those made while another owner certainly held the
// subscription's lock, and those made while their writer certainly held no
// lease, ordered by Write.Start. A write is judged only when ownerOf
// attributes it.
//
// Precision: every violation returned is certain, given that the log holds
// every successful lock write (merge the logs of every proxy the writers
// use) and that the upstream expires lock items TTL after their last write.
// A write whose window straddles a lease boundary is not reported. See
// Leases for ownerOf and lockTTL.
func LockViolations(writes []Write, lockTTL time.Duration, ownerOf func(w Write) string) []Violation {
	if ownerOf == nil {
		ownerOf = DefaultOwner
	}
	leases := Leases(writes, lockTTL, ownerOf)
	type key struct{ db, sub string }
	bySub := map[key][]Lease{}
	for _, l := range leases {
		k := key{l.Database, l.Subscription}
		bySub[k] = append(bySub[k], l)
	}
	var out []Violation
	for _, w := range writes {
		if w.Container == LocksContainer || w.PartitionKey == "" || w.Status/100 != 2 {
			continue
		}
		writer := ownerOf(w)
		if writer == "" {
			continue
		}
		subLeases := bySub[key{w.Database, strings.ToLower(w.PartitionKey)}]
		if v, ok := judge(w, writer, subLeases); ok {
			out = append(out, v)
		}
	}
	slices.SortStableFunc(out, func(a, b Violation) int { return a.Write.Start.Compare(b.Write.Start) })
	return out
}

// judge decides one data write against its subscription's leases.
func judge(w Write, writer string, leases []Lease) (Violation, bool) {
	mayHold := false
	for i := range leases {
		l := &leases[i]
		if l.Owner != writer {
			// The write happened inside [w.Start, w.End]; it is certainly
			// inside another's tenure when that window is.
			if !w.Start.Before(l.CertainFrom) && !w.End.After(l.CertainUntil) {
				return Violation{Kind: ViolationHeldByOther, Write: w, Writer: writer, Lease: l}, true
			}
			continue
		}
		if !w.End.Before(l.PossibleFrom) && !w.Start.After(l.PossibleUntil) {
			mayHold = true
		}
	}
	if !mayHold {
		return Violation{Kind: ViolationNotHeld, Write: w, Writer: writer}, true
	}
	return Violation{}, false
}

// lockTTLOf returns a lock write's TTL: the body's ttl when positive, none
// when -1, else the container default; <= 0 means none.
func lockTTLOf(w Write, def time.Duration) time.Duration {
	var doc struct {
		TTL *float64 `json:"ttl"`
	}
	if json.Unmarshal(w.Body, &doc) == nil && doc.TTL != nil {
		switch {
		case *doc.TTL > 0:
			return time.Duration(*doc.TTL * float64(time.Second))
		case *doc.TTL == -1:
			return 0
		}
	}
	return def
}

func expiry(t time.Time, ttl time.Duration) time.Time {
	if ttl <= 0 {
		return forever
	}
	return t.Add(ttl)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
