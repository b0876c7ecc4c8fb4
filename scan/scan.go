// Package scan is the timer-triggered function: it lists every pending
// operation and writes one queue message per operation for poll.
package scan

import (
	"context"
	"errors"
	"fmt"
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
	// The next scan sends a fresher message for every operation still
	// pending; poll drops the ones it reaches after that.
	var supersededAt time.Time
	if timer.Next.After(f.now()) {
		supersededAt = timer.Next.UTC()
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
		messages = append(messages, poll.Message{SubscriptionID: p.PartitionKey, OperationID: p.ID, SupersededAt: supersededAt})
	}
	inv.Log.Info("scanned", "pending", len(messages))
	return &functions.Result{
		Outputs:     map[string]any{OutputBinding: messages},
		ReturnValue: len(messages),
	}, nil
}
