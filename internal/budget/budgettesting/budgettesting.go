// Package budgettesting holds test doubles of package budget: an
// in-memory ledger store that checks etags as Cosmos DB does and fails on
// demand, and a manual clock whose wall and monotonic readings move apart.
// Never linked into the handler.
package budgettesting

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/opstatus/opstatus/internal/budget"
)

// Op names a store operation for Store.Fail.
type Op string

// Store operations.
const (
	OpRead    Op = "read"
	OpReplace Op = "replace"
	OpCreate  Op = "create"
)

// Store is an in-memory budget.Store. Replace needs the current etag,
// Create an absent item; every success gives a new etag. The item is kept
// as JSON, so that callers share nothing with it.
type Store struct {
	mu     sync.Mutex
	item   []byte // nil: no item
	etag   string
	next   int
	writes int
	stale  int // replaces refused for their etag

	// Fail, when set, is asked before each operation: a non-nil error is
	// returned instead (a 429, a 503, a timeout). after says whether the
	// operation had been applied first (a reply lost after the write).
	Fail func(op Op) (err error, after bool)
	// Before, when set, runs before each operation, outside the store's
	// lock: tests make other writers race with it.
	Before func(op Op)
	// After, when set, runs after each operation that changed the item.
	After func(op Op)
}

var _ budget.Store = (*Store)(nil)

// Read returns the ledger and its etag.
func (s *Store) Read(ctx context.Context) (budget.Ledger, string, error) {
	if err, _ := s.fault(OpRead); err != nil {
		return budget.Ledger{}, "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.item == nil {
		return budget.Ledger{}, "", budget.ErrNotFound
	}
	var l budget.Ledger
	if err := json.Unmarshal(s.item, &l); err != nil {
		return budget.Ledger{}, s.etag, fmt.Errorf("%w: %w", budget.ErrUnreadable, err)
	}
	return l, s.etag, nil
}

// Replace writes l if etag is current.
func (s *Store) Replace(ctx context.Context, l budget.Ledger, etag string) (string, error) {
	if etag == "" {
		return "", fmt.Errorf("budgettesting: replace without an etag")
	}
	err, after := s.fault(OpReplace)
	if err != nil && !after {
		return "", err
	}
	s.mu.Lock()
	var newTag string
	switch {
	case s.item == nil:
		s.mu.Unlock()
		return "", budget.ErrNotFound
	case s.etag != etag:
		s.stale++
		s.mu.Unlock()
		return "", budget.ErrPreconditionFailed
	}
	newTag = s.put(l)
	s.mu.Unlock()
	s.changed(OpReplace)
	if err != nil {
		return "", err
	}
	return newTag, nil
}

// Create writes l if no item exists.
func (s *Store) Create(ctx context.Context, l budget.Ledger) (string, error) {
	err, after := s.fault(OpCreate)
	if err != nil && !after {
		return "", err
	}
	s.mu.Lock()
	if s.item != nil {
		s.mu.Unlock()
		return "", budget.ErrConflict
	}
	newTag := s.put(l)
	s.mu.Unlock()
	s.changed(OpCreate)
	if err != nil {
		return "", err
	}
	return newTag, nil
}

func (s *Store) fault(op Op) (error, bool) {
	if s.Before != nil {
		s.Before(op)
	}
	if s.Fail != nil {
		return s.Fail(op)
	}
	return nil, false
}

func (s *Store) changed(op Op) {
	if s.After != nil {
		s.After(op)
	}
}

// put stores l under a new etag; s.mu is held.
func (s *Store) put(l budget.Ledger) string {
	b, err := json.Marshal(l)
	if err != nil {
		panic(err)
	}
	s.item = b
	s.next++
	s.writes++
	s.etag = fmt.Sprintf(`"%d"`, s.next)
	return s.etag
}

// Delete removes the item, as an operator might.
func (s *Store) Delete() {
	s.mu.Lock()
	s.item = nil
	s.mu.Unlock()
}

// Put writes l unconditionally, as another program might.
func (s *Store) Put(l budget.Ledger) {
	s.mu.Lock()
	s.put(l)
	s.mu.Unlock()
}

// PutRaw writes body unconditionally, as a hand edit might: it need not
// decode.
func (s *Store) PutRaw(body []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.item = append([]byte(nil), body...)
	s.next++
	s.writes++
	s.etag = fmt.Sprintf(`"%d"`, s.next)
}

// Touch rewrites the item as it is under a new etag, as a concurrent
// writer's no-op would: the next Replace with the old etag meets 412.
func (s *Store) Touch() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.item != nil {
		s.next++
		s.etag = fmt.Sprintf(`"%d"`, s.next)
	}
}

// Ledger returns the item, and whether there is one.
func (s *Store) Ledger() (budget.Ledger, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.item == nil {
		return budget.Ledger{}, false
	}
	var l budget.Ledger
	if err := json.Unmarshal(s.item, &l); err != nil {
		panic(err)
	}
	return l, true
}

// PreconditionFailures counts the replaces refused with 412.
func (s *Store) PreconditionFailures() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stale
}

// Writes counts the writes applied.
func (s *Store) Writes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes
}

// Clock is a manual budget.Clock: Advance moves both readings, JumpWall
// only the wall clock (a clock set by hand or by NTP, or a suspended VM
// whose monotonic clock stood still). Timers from After fire when Advance
// reaches them.
type Clock struct {
	// AutoAdvance makes After advance the clock by its d at once: a
	// process waiting alone, such as a write's back-off in a test that
	// steps processes one at a time.
	AutoAdvance bool

	mu     sync.Mutex
	wall   time.Time
	mono   time.Duration
	timers []timer
}

type timer struct {
	at time.Duration
	c  chan time.Time
}

var _ budget.Clock = (*Clock)(nil)

// NewClock returns a clock whose wall reads start.
func NewClock(start time.Time) *Clock { return &Clock{wall: start} }

// Now reads the clock.
func (c *Clock) Now() budget.Instant {
	c.mu.Lock()
	defer c.mu.Unlock()
	return budget.Instant{Wall: c.wall, Mono: c.mono}
}

// After fires once the clock has advanced d.
func (c *Clock) After(d time.Duration) <-chan time.Time {
	if c.AutoAdvance {
		c.Advance(max(d, 0))
		ch := make(chan time.Time, 1)
		ch <- c.Now().Wall
		return ch
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.wall
		return ch
	}
	c.timers = append(c.timers, timer{at: c.mono + d, c: ch})
	return ch
}

// Advance moves both readings by d and fires the timers due.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wall = c.wall.Add(d)
	c.mono += d
	kept := c.timers[:0]
	for _, t := range c.timers {
		if t.at <= c.mono {
			t.c <- c.wall
			continue
		}
		kept = append(kept, t)
	}
	c.timers = kept
}

// JumpWall moves the wall clock alone by d, either way.
func (c *Clock) JumpWall(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wall = c.wall.Add(d)
}
