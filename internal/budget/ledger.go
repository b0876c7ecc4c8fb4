// Package budget shares the app-wide Cluster Service budget among the
// handler processes through one ledger item in the Leases container
// (ARCHITECTURE.md, "The Cluster Service budget"; the design and its
// sources: design/budget-ledger.md). Each process holds permits in the
// ledger, grows only into free ones, gives back cooperatively, and uses
// them only until its own lease end, measured on its own clock; nobody
// takes permits from a live holder.
package budget

import (
	"context"
	"errors"
	"maps"
)

// ID is the ledger item's id (and partition key) in the Leases container,
// apart from the change feed processor's lease ids.
const ID = "opstatus-budget"

// Group is the function group a process serves: poll and pickup scale on
// their own, in processes of their own, on Flex Consumption.
type Group string

// Groups.
const (
	GroupPoll   Group = "poll"
	GroupPickup Group = "pickup"
)

// Ledger is the ledger item.
type Ledger struct {
	ID    string `json:"id"`
	Epoch string `json:"epoch"`
	// Budget is the last writer's budget; every member checks the sum of
	// permits against its own.
	Budget  int              `json:"budget"`
	Holders map[string]Entry `json:"holders"`
}

// Entry is one process's share, under a random owner id new at each start.
type Entry struct {
	Group Group `json:"group"`
	// Permits are the Cluster Service requests the process may have in
	// flight while its lease lasts.
	Permits int `json:"permits"`
	// Demand is the operations queued or in flight in the process, at most
	// its ceiling: permits beyond that would go unused.
	Demand int `json:"demand"`
	// Floor is the permits kept for a pickup process while it runs.
	Floor int `json:"floor"`
	// Seq rises at every write of the entry: others reclaim an entry only
	// after it stayed the same for ExpireAfter.
	Seq int64 `json:"seq"`
	// UnchangedMs is how long, in milliseconds, observers have seen this
	// Seq unchanged, each adding what its own monotonic clock measured to
	// what the ledger said when it first saw the Seq: a lower bound that
	// outlives any one observer, so that entries of processes that died
	// are reclaimed even where no observer lives ExpireAfter.
	UnchangedMs int64 `json:"unchangedMs,omitempty"`
}

// Clone returns a copy of l whose holders can be changed apart from l's.
func (l Ledger) Clone() Ledger {
	l.Holders = maps.Clone(l.Holders)
	if l.Holders == nil {
		l.Holders = map[string]Entry{}
	}
	return l
}

// Sum is the permits held in l.
func (l Ledger) Sum() int {
	n := 0
	for _, e := range l.Holders {
		n += e.Permits
	}
	return n
}

// Store keeps the ledger item. Every change is conditional: Replace with
// the etag read (If-Match), Create only where none exists.
type Store interface {
	// Read returns the ledger and its etag; ErrNotFound when there is none.
	Read(ctx context.Context) (Ledger, string, error)
	// Replace writes l if the item's etag is still etag and returns the
	// new etag: ErrPreconditionFailed if it changed, ErrNotFound if the
	// item is gone.
	Replace(ctx context.Context, l Ledger, etag string) (string, error)
	// Create writes l where no item exists: ErrConflict if one does.
	Create(ctx context.Context, l Ledger) (string, error)
}

// Store errors; any other error is a failure that may pass (throttling,
// 5xx, a timeout).
var (
	ErrNotFound           = errors.New("budget ledger not found")
	ErrConflict           = errors.New("budget ledger already exists")
	ErrPreconditionFailed = errors.New("budget ledger changed since read")
)

// Seed creates an empty ledger of budget b in s where none exists, so
// that the first processes skip the wait of a ledger they create
// themselves. Only for a deployment that has never had one (a new
// environment, a local stack): after a deletion, holders of the old
// ledger may still run, which is what that wait is for. An existing
// ledger is left as it is.
func Seed(ctx context.Context, s Store, b int) error {
	_, err := s.Create(ctx, Ledger{ID: ID, Epoch: randomID(), Budget: b, Holders: map[string]Entry{}})
	if errors.Is(err, ErrConflict) {
		return nil
	}
	return err
}
