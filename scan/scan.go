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
	interval := scanInterval(timer)
	var scannedAt time.Time // this run's scheduled time: the interval's start
	if interval > 0 {
		scannedAt = timer.Next.UTC()
	}
	messages := []poll.Message{}
	for p, err := range f.DB.PendingOperations(ctx) {
		if errors.Is(err, database.ErrMalformed) {
			inv.Log.Error("skipping an operation item", "error", err)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list pending operations: %w", err)
		}
		messages = append(messages, poll.Message{SubscriptionID: p.PartitionKey, OperationID: p.ID, ScanInterval: interval, ScannedAt: scannedAt})
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
