// Package scan is the timer-triggered function: it lists every pending
// operation and writes queue messages for poll, each naming a batch of
// them.
package scan

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/opstatus/opstatus/functions"
	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/clusterservice"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/internal/pending"
	"github.com/opstatus/opstatus/internal/queuemsg"
	"github.com/opstatus/opstatus/internal/telemetry"
)

// Binding names in scan/function.json.
const (
	TimerBinding  = "timer"
	OutputBinding = "operations"
)

// defaultDeadline bounds the listing when Function.Deadline is zero.
const defaultDeadline = time.Minute

// Function scans for pending operations.
type Function struct {
	DB database.DBClient
	// Deadline bounds the listing. The host writes the messages after the
	// answer, one at a time, within the same functionTimeout, so the
	// listing must leave it most of that time; default one minute.
	Deadline time.Duration
	// Interval is the scan schedule's interval: a scan's metrics stand for
	// two of them; zero keeps them until the next scan of the process.
	Interval time.Duration
	// PickupRuns says that the pickup function checks new operations from
	// the change feed: scan then leaves them to it for an interval
	// (pending.LeftToPickup), so that no operation is checked twice in one.
	PickupRuns bool
	// Now is the clock; default time.Now.
	Now func() time.Time

	skipped skipLog
}

func (f *Function) now() time.Time {
	if f.Now != nil {
		return f.Now().UTC()
	}
	return time.Now().UTC()
}

// Handle is the functions.Handler of scan. It lists the pending operations,
// sorts them by subscription, so that a message's operations share few
// subscription locks, and answers them as batch messages stamped with the
// scan's start, from a message chosen at random and around. An operation
// poll could not act on is skipped, counted and logged (once an hour); one
// that is pickup's (pending.LeftToPickup) is left to it while PickupRuns. A
// listing that fails, or does not finish by the deadline, fails the
// invocation (500): the host sends none of its messages, and the next
// timer tick tries again.
func (f *Function) Handle(ctx context.Context, inv *functions.Invocation) (*functions.Result, error) {
	// The schedule is the handler's own setting (the host sends no
	// ScheduleStatus for one under a minute): the payload only says
	// whether the run is late.
	if timer, err := inv.Timer(TimerBinding); err != nil {
		inv.Log.Warn("unreadable timer payload; scanning all the same", "error", err)
	} else if timer.IsPastDue {
		inv.Log.Info("timer is past due")
	}
	started := f.now()
	deadline := f.Deadline
	if deadline <= 0 {
		deadline = defaultDeadline
	}
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()

	var ops []queuemsg.Operation
	leftToPickup := 0
	skips := map[string]int{}
	tally := telemetry.NewScanTally()
	for p, err := range f.DB.PendingOperations(ctx) {
		switch {
		case errors.Is(err, database.ErrMalformed):
			f.skip(inv, started, err.Error(), reasonItem, err)
			skips[reasonItem]++
			continue
		case errors.Is(err, database.ErrNoSubscription):
			// The operation, as read: pending.Actionable says why poll
			// cannot act on it.
		case errors.Is(ctx.Err(), context.DeadlineExceeded):
			return nil, fmt.Errorf("listing pending operations did not finish within %s (after %d); the host's functionTimeout must also leave time to write the messages", deadline, len(ops))
		case err != nil:
			return nil, fmt.Errorf("list pending operations: %w", err)
		}
		// By poll's own rules: whatever scan sends, poll acts on or
		// answers 2xx, never into the poison queue, and what poll would
		// call invalid on every scan is not sent.
		op, err := pending.Actionable(p, err)
		if err != nil { // its text quotes the ids, bounded
			reason := pending.Reason(err)
			var attrs []any
			if reason != pending.ReasonSubscription && reason != pending.ReasonID {
				attrs = []any{"subscription_id", p.SubscriptionID, "operation_id", p.ID}
			}
			f.skip(inv, started, p.PartitionKey+"/"+p.ID, reason, err, attrs...)
			skips[reason]++
			continue
		}
		if tally != nil {
			tally.Add(p.Status, p.Request, resourceType(p.InternalID), p.StartTime, !arm.ProvisioningState(p.Status).IsTerminal())
		}
		if f.PickupRuns && pending.LeftToPickup(p.Status, p.Request, p.StartTime, p.LastWrite, started, f.Interval) {
			leftToPickup++
			continue
		}
		ops = append(ops, op)
	}
	f.untoldSkips(inv.Log)
	skipped := 0
	for reason, n := range skips {
		telemetry.ScanSkipped(ctx, reason, n)
		skipped += n
	}
	telemetry.Scanned(tally, f.now(), 2*f.Interval)
	slices.SortFunc(ops, func(a, b queuemsg.Operation) int {
		return cmp.Or(cmp.Compare(a.SubscriptionID, b.SubscriptionID), cmp.Compare(a.OperationID, b.OperationID))
	})
	msgs := queuemsg.Batches(ops, started)
	// Each scan's messages start at another one: when poll falls behind,
	// the messages it drops as superseded are the last of each scan, and
	// the same order every time would leave the same operations unchecked.
	if len(msgs) > 1 {
		start := rand.IntN(len(msgs))
		msgs = append(msgs[start:], msgs[:start]...)
	}
	// Debug: the metrics carry the counts, and skips log themselves.
	inv.Log.Debug("scanned", "pending", len(ops), "messages", len(msgs), "skipped", skipped,
		"left_to_pickup", leftToPickup, "duration_ms", f.now().Sub(started).Milliseconds())
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attribute.Int("opstatus.scan.pending", len(ops)), attribute.Int("opstatus.scan.messages", len(msgs)))
	}
	return &functions.Result{
		Outputs:     map[string]any{OutputBinding: msgs},
		ReturnValue: len(ops),
	}, nil
}

// resourceType names the kind of resource an internalId is the Cluster
// Service path of, for scan's metrics.
func resourceType(internalID string) string {
	id, err := clusterservice.ParseInternalID(internalID)
	if err != nil {
		return "unknown"
	}
	return id.Kind.String()
}
