package budget

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"time"
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
	// Budget is the smallest budget of the members that wrote this epoch:
	// written only to lower it, it bounds growth while the epoch is
	// younger than ExpireAfter, so that a fence of a smaller budget holds
	// off a larger one too.
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
	// Budget is the writer's CLUSTER_SERVICE_BUDGET: targets use the
	// smallest of the live entries'; 0 (an older writer's entry) reads as
	// the ledger's.
	Budget int `json:"budget,omitempty"`
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

// Sum is the permits held in l; it saturates instead of wrapping.
func (l Ledger) Sum() int {
	n := 0
	for _, e := range l.Holders {
		n = addSat(n, e.Permits)
	}
	return n
}

func addSat(a, b int) int {
	if b > 0 && a > math.MaxInt-b {
		return math.MaxInt
	}
	return a + b
}

// MaxHolders bounds the entries of a ledger: poll and pickup at Flex
// Consumption's largest maximumInstanceCount each, twice over for a
// rolling update, fit under it.
const MaxHolders = 4096

// budgetOf is the budget e was written under.
func (l Ledger) budgetOf(e Entry) int {
	if e.Budget > 0 {
		return e.Budget
	}
	return l.Budget
}

// impossible says why l cannot have come from members that follow the
// protocol, or "": a holder count over MaxHolders, a negative budget or
// permits, or permits summing over every budget in it. Growth keeps the
// sum within the grower's budget, so the sum never exceeds the largest.
func (l Ledger) impossible() string {
	if len(l.Holders) > MaxHolders {
		return fmt.Sprintf("%d holders, over %d", len(l.Holders), MaxHolders)
	}
	if l.Budget < 0 {
		return fmt.Sprintf("budget %d", l.Budget)
	}
	largest := l.Budget
	for o, e := range l.Holders {
		if e.Permits < 0 || e.Budget < 0 {
			return fmt.Sprintf("entry %q holds %d permits of a budget of %d", o, e.Permits, e.Budget)
		}
		largest = max(largest, e.Budget)
	}
	if s := l.Sum(); s > largest {
		return fmt.Sprintf("%d permits held, over the largest budget %d", s, largest)
	}
	return ""
}

// invalid says why entry e of l is not one a member writes, or "":
// permits or floor outside its budget, negative demand or seq, an
// unchangedMs outside [0, expire]. Others treat it as expired.
func (l Ledger) invalid(e Entry, expire time.Duration) string {
	b := l.budgetOf(e)
	switch {
	case b <= 0:
		return "no budget"
	case e.Permits < 0 || e.Permits > b:
		return fmt.Sprintf("permits %d outside [0, %d]", e.Permits, b)
	case e.Floor < 0 || e.Floor > b:
		return fmt.Sprintf("floor %d outside [0, %d]", e.Floor, b)
	case e.Demand < 0:
		return fmt.Sprintf("demand %d", e.Demand)
	case e.Seq < 0:
		return fmt.Sprintf("seq %d", e.Seq)
	case e.UnchangedMs < 0 || e.UnchangedMs > expire.Milliseconds():
		return fmt.Sprintf("unchangedMs %d outside [0, %d]", e.UnchangedMs, expire.Milliseconds())
	}
	return ""
}

// Store keeps the ledger item. Every change is conditional: Replace with
// the etag read (If-Match), Create only where none exists.
type Store interface {
	// Read returns the ledger and its etag; ErrNotFound when there is none,
	// ErrUnreadable (with the etag) when the item does not decode.
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
	ErrUnreadable         = errors.New("budget ledger unreadable")
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
