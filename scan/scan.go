// Package scan is the timer-triggered function: it lists every pending
// operation and writes one queue message per operation for poll.
package scan

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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

// Function scans for pending operations.
type Function struct {
	DB database.DBClient
	// Now is the clock; default time.Now.
	Now func() time.Time
}

func (f *Function) now() time.Time {
	if f.Now != nil {
		return f.Now()
	}
	return time.Now()
}

// Handle is the functions.Handler of scan. It answers 500 if the listing
// fails part way: the messages of a partial listing are not sent, and the
// next timer tick tries again.
func (f *Function) Handle(ctx context.Context, inv *functions.Invocation) (*functions.Result, error) {
	timer, err := inv.Timer(TimerBinding)
	if err != nil {
		// The schedule only bounds the messages' life: scan all the same.
		inv.Log.Warn("unreadable timer payload", "error", err)
	} else if timer.IsPastDue {
		inv.Log.Info("timer is past due")
	}
	supersededAt := nextScan(timer, f.now())
	messages := []poll.Message{}
	for p, err := range f.DB.PendingOperations(ctx) {
		if errors.Is(err, database.ErrMalformed) {
			inv.Log.Error("skipping an operation item", "error", err)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list pending operations: %w", err)
		}
		messages = append(messages, poll.Message{SubscriptionID: p.PartitionKey, OperationID: p.ID, SupersededAt: supersededAt})
	}
	// When polls cannot keep up, the messages still queued at the next scan
	// are dropped as superseded; a fresh order each scan keeps that from
	// always falling on the same operations at the end of the listing.
	rand.Shuffle(len(messages), func(i, j int) { messages[i], messages[j] = messages[j], messages[i] })
	inv.Log.Info("scanned", "pending", len(messages))
	return &functions.Result{
		Outputs:     map[string]any{OutputBinding: messages},
		ReturnValue: len(messages),
	}, nil
}

// nextScan returns when the scan after this one is due, or the zero time when
// the timer payload does not tell. By then that scan has sent a fresher
// message for every operation still pending, and poll drops older ones.
//
// The host builds ScheduleStatus before it records the run it is making:
// Last is the previous occurrence and Next this one. The one after is a
// schedule interval later; a payload that says otherwise (first run, a stale
// status after downtime) gives no expiry.
func nextScan(timer functions.TimerInfo, now time.Time) time.Time {
	if timer.Last.IsZero() || !timer.Next.After(timer.Last) {
		return time.Time{}
	}
	next := timer.Next.Add(timer.Next.Sub(timer.Last))
	if !next.After(now) || next.Sub(now) > maxMessageLife {
		return time.Time{}
	}
	return next.UTC()
}

// maxMessageLife bounds the interval nextScan trusts: beyond it the status is
// stale (the app was stopped for a while) rather than the schedule.
const maxMessageLife = time.Hour
