// Package scan is the timer-triggered function: it lists every pending
// operation and writes one queue message per operation for poll.
package scan

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/opstatus/opstatus/functions"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/poll"
)

// Binding names in scan/function.json.
const (
	TimerBinding  = "timer"
	OutputBinding = "operations"
)

// Function scans for pending operations. It keeps, between scans, how many
// operations the last one listed; use it through a pointer.
type Function struct {
	DB database.DBClient
	// Schedule, shared with poll, learns the timer's interval.
	Schedule *poll.Schedule

	listed atomic.Int64 // by the last scan: the range of the next start point
	// startAt picks a scan's start point in [0, n): rand.IntN, or what a
	// test sets.
	startAt func(n int) int
}

// Handle is the functions.Handler of scan. The messages are streamed from
// the listing as the answer is written. A listing that fails part way fails
// the invocation (a 500, or an aborted response once the first messages
// have gone out): the host sends none of its messages, and the next timer
// tick tries again.
func (f *Function) Handle(ctx context.Context, inv *functions.Invocation) (*functions.Result, error) {
	timer, err := inv.Timer(TimerBinding)
	if err != nil {
		// The schedule only bounds the messages' life: scan all the same.
		inv.Log.Warn("unreadable timer payload", "error", err)
	} else if timer.IsPastDue {
		inv.Log.Info("timer is past due")
	}
	interval := scanInterval(timer)
	f.Schedule.Observe(interval)
	var scannedAt time.Time // this run's scheduled time: the interval's start
	if interval > 0 {
		scannedAt = timer.Next.UTC()
	}
	sent := new(int)
	messages := f.messages(ctx, inv.Log, sent, poll.Message{ScanInterval: interval, ScannedAt: scannedAt})
	return &functions.Result{
		Outputs:     map[string]any{OutputBinding: messages},
		ReturnValue: sent,
	}, nil
}

// spreadWindow is how many operations scan holds to reorder them (spread).
const spreadWindow = 1000

// spread reorders a window so that the operations of each subscription go
// out evenly apart: the j-th of a subscription's k operations at (j+u)/k of
// the way through, u random per subscription. Polls of one subscription
// take turns at its lock, 1 s a try across instances: in a random shuffle
// of 1,000, one pair in 16 would fall within 32 messages of each other
// (2 × 32 / 1,000); spread leaves them the window's other subscriptions
// apart. order is scratch space, returned for the next window.
func spread(window []database.PendingOperation, order []spreadSlot) []spreadSlot {
	count := make(map[string]int, len(window))
	for _, p := range window {
		count[p.PartitionKey]++
	}
	// The subscriptions' u in strata of their own, in a random order, so
	// that their operations do not bunch up.
	subs := slices.Collect(maps.Keys(count))
	rand.Shuffle(len(subs), func(i, j int) { subs[i], subs[j] = subs[j], subs[i] })
	offset := make(map[string]float64, len(subs))
	for i, s := range subs {
		offset[s] = (float64(i) + rand.Float64()) / float64(len(subs))
	}
	order = order[:0]
	for _, p := range window {
		// The offset grows by one per operation: the j-th gets j+u.
		u := offset[p.PartitionKey]
		offset[p.PartitionKey] = u + 1
		order = append(order, spreadSlot{key: u / float64(count[p.PartitionKey]), op: p})
	}
	slices.SortFunc(order, func(a, b spreadSlot) int { return cmp.Compare(a.key, b.key) })
	for i := range order {
		window[i] = order[i].op
	}
	return order
}

// spreadSlot is an operation and its place in a window, from 0 to 1.
type spreadSlot struct {
	key float64
	op  database.PendingOperation
}

// messages yields a message per pending operation, like template but for
// its ids, counting them in sent. An operation whose ids poll would refuse
// (poll.Message.CheckIDs) is logged and skipped.
//
// When polls cannot keep up, the messages still queued at the next scan are
// dropped as superseded; starting each scan at a random point of the
// listing, and wrapping around, keeps that from always falling on the same
// operations. The listing is read twice, from the start point to its end
// and then from its beginning up to the start point, so that memory stays
// one window whatever the number of operations; a window spans the two
// reads. The second read stops at the first operation the first one took,
// or after as many positions as the first read skipped: operations created
// or finished between the two reads can shift that point, so such a scan
// may miss one (or, if the first one finished, send one twice), and the
// next scan makes up for it.
func (f *Function) messages(ctx context.Context, log *slog.Logger, sent *int, template poll.Message) functions.Stream {
	return func(yield func(any, error) bool) {
		start := 0
		if last := f.listed.Load(); last > 0 {
			pick := rand.IntN
			if f.startAt != nil {
				pick = f.startAt
			}
			start = pick(int(last))
		}
		window := make([]database.PendingOperation, 0, spreadWindow)
		var order []spreadSlot
		flush := func() bool {
			order = spread(window, order)
			for _, p := range window {
				m := template
				m.SubscriptionID, m.OperationID = p.PartitionKey, p.ID
				*sent++
				if !yield(m, nil) {
					return false
				}
			}
			window = window[:0]
			return true
		}
		var first *database.PendingOperation // where the second read ends
		// read goes through the listing, sending what it finds from position
		// from on, and stops before position to (if to >= 0) or at first. It
		// returns how many positions it went through, and false if the
		// stream is over.
		read := func(from, to int) (int, bool) {
			pos := 0
			for p, err := range f.DB.PendingOperations(ctx) {
				if err != nil && !errors.Is(err, database.ErrMalformed) {
					yield(nil, fmt.Errorf("list pending operations: %w", err))
					return pos, false
				}
				if pos == to || err == nil && first != nil && p == *first {
					break
				}
				pos++
				switch {
				case pos <= from:
					// The other read sends it, or logs it if malformed.
				case err != nil:
					log.Error("skipping an operation item", "error", err)
				default:
					if first == nil {
						first = &p
					}
					// By poll's own rule: whatever scan sends, poll acts on
					// or answers 2xx, never into the poison queue.
					if err := (poll.Message{SubscriptionID: p.PartitionKey, OperationID: p.ID}).CheckIDs(); err != nil {
						log.Error("skipping an operation item whose ids poll cannot use", "error", err)
						continue
					}
					if window = append(window, p); len(window) == spreadWindow && !flush() {
						return pos, false
					}
				}
			}
			return pos, true
		}
		listed, ok := read(start, -1)
		if !ok {
			return
		}
		if start > 0 {
			if _, ok := read(0, start); !ok {
				return
			}
		}
		if !flush() {
			return
		}
		f.listed.Store(int64(listed))
		log.Info("scanned", "pending", *sent)
	}
}

// scanInterval returns the schedule's interval in whole seconds, or 0 when
// the timer payload does not tell. The host builds ScheduleStatus before it
// records the run it is making: Last is the previous occurrence and Next this
// one. A first run (no Last), or a status left stale by downtime, gives 0:
// the messages are then never dropped as superseded.
func scanInterval(timer functions.TimerInfo) int {
	if timer.Last.IsZero() || !timer.Next.After(timer.Last) {
		return 0
	}
	interval := timer.Next.Sub(timer.Last)
	if interval > maxScanInterval {
		return 0
	}
	return int((interval + time.Second - 1) / time.Second)
}

// maxScanInterval bounds the interval scanInterval trusts: beyond it the
// status is stale (the app was stopped for a while) rather than the schedule.
const maxScanInterval = time.Hour
