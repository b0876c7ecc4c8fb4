// Package pickup is the Cosmos DB trigger on the Operations container: it
// checks each operation the frontend has just created as soon as the change
// feed brings it, rather than at the next scan, and leaves everything else
// the feed carries (opstatus's own writes, ended operations) to scan.
package pickup

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/opstatus/opstatus/functions"
	"github.com/opstatus/opstatus/internal/budget"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/internal/pending"
	"github.com/opstatus/opstatus/internal/queuemsg"
	"github.com/opstatus/opstatus/poll"
)

// Binding is the trigger's binding name in pickup/function.json.
const Binding = "operations"

// defaultDeadline bounds an invocation's work when Function.Deadline is
// zero, as poll's does.
const defaultDeadline = 2 * time.Minute

// maxLogged bounds the documents one invocation logs one by one as unusable;
// the rest are counted in one line, so that a batch of odd documents cannot
// flood the log.
const maxLogged = 10

// Function checks new operations from the change feed.
type Function struct {
	// Poll is poll's (poll.Function.Poll). The operations pickup takes are
	// handed to it as the messages scan would write, in this invocation
	// and in pickup's budget group: a queue hop would add a write and
	// poll's receive back-off to every pickup.
	Poll func(context.Context, *slog.Logger, poll.Message) poll.Tally
	// Interval is the scan schedule's interval: an operation is pickup's
	// while its last write is younger than that (pending.ForPickup).
	Interval time.Duration
	// Partition is where the frontend writes the Operations items, which
	// tells each one's subscription, as the DBClient's.
	Partition database.OperationsPartition
	// Deadline bounds an invocation's work, well inside the host's
	// functionTimeout; default 2 minutes. What it leaves is deferred, and
	// scan sends it an interval after its write.
	Deadline time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
}

func (f *Function) now() time.Time {
	if f.Now != nil {
		return f.Now().UTC()
	}
	return time.Now().UTC()
}

// Handle is the functions.Handler of pickup. It takes from the batch the
// operations pending.ForPickup gives it (new: in their request's initial
// status, Accepted or a Delete's Deleting, and written less than an
// interval ago) that poll can act on, and polls them; every other document
// is left to scan, and one that is not an operation at all is logged (a
// bounded number a batch). Only a batch that is not a JSON array answers
// 400. The extension checkpoints the feed whatever the answer, so an
// operation left deferred or unchecked here is scan's an interval after
// its write. The ReturnValue counts the operations polled by outcome, as
// poll's does.
func (f *Function) Handle(ctx context.Context, inv *functions.Invocation) (*functions.Result, error) {
	docs, err := inv.Documents(Binding)
	if err != nil {
		inv.Log.Error("unreadable change feed batch; scan checks its operations an interval after their write", "error", err)
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(f.Deadline, defaultDeadline))
	defer cancel()
	now := f.now()
	b := batch{log: inv.Log, partition: f.Partition, seen: map[queuemsg.Operation]bool{}}
	for i, raw := range docs {
		b.take(i, raw, now, f.Interval)
	}
	if b.unlogged > 0 {
		inv.Log.Warn("more change feed documents unusable than are logged one by one", "documents", b.unlogged)
	}
	tally := poll.Tally{}
	if len(b.ops) > 0 {
		slices.SortFunc(b.ops, func(a, b queuemsg.Operation) int {
			return cmp.Or(cmp.Compare(a.SubscriptionID, b.SubscriptionID), cmp.Compare(a.OperationID, b.OperationID))
		})
		// Stamped with the oldest write: poll drops what it reaches only
		// after an interval from it (queuemsg.Superseded), when scan sends
		// it instead.
		for _, m := range queuemsg.Batches(b.ops, b.oldest) {
			for o, n := range f.Poll(ctx, inv.Log, poll.Message{Read: m.Read(), Group: budget.GroupPickup, Invocation: inv.ID}) {
				tally[o] += n
			}
		}
	}
	inv.Log.Info("picked up", "documents", len(docs), "operations", len(b.ops), "ignored", b.ignored,
		"left_to_scan", b.leftToScan, "unusable", b.unusable, "outcomes", tally)
	return &functions.Result{ReturnValue: tally}, nil
}

// batch is what one invocation takes from its documents.
type batch struct {
	log       *slog.Logger
	partition database.OperationsPartition
	ops       []queuemsg.Operation
	seen      map[queuemsg.Operation]bool
	oldest    time.Time // the oldest last write of ops

	ignored    int // not in its request's initial status: written by opstatus, or ended
	leftToScan int // in its initial status, but written too long ago (or not said when) to be pickup's
	unusable   int // not an operation, or one poll could not act on
	unlogged   int // unusable documents past maxLogged
}

// take judges document i of the batch at now and keeps it as an operation
// to poll if it is pickup's.
func (b *batch) take(i int, raw json.RawMessage, now time.Time, interval time.Duration) {
	p, subErr := b.partition.ReadPending(raw)
	if errors.Is(subErr, database.ErrMalformed) {
		b.unusable++
		b.warn("change feed document is not an operation item; ignored", "index", i, "document", fmt.Sprintf("%.200s", raw))
		return
	}
	if !pending.ForPickup(p.Status, p.Request, p.LastWrite, now, interval) {
		if pending.Initial(p.Status, p.Request) {
			b.leftToScan++
		} else {
			b.ignored++
		}
		return
	}
	// By scan's and poll's rule: scan skips it and logs it hourly, poll
	// would call it invalid.
	op, err := pending.Actionable(p, subErr)
	switch reason := pending.Reason(err); {
	case err == nil:
	case reason == pending.ReasonSubscription || reason == pending.ReasonID: // its text quotes the ids, bounded
		b.unusable++
		b.warn("new operation poll could not act on; left to scan", "index", i, "error", err)
		return
	default:
		b.unusable++
		b.warn("new operation poll could not act on; left to scan", "subscription_id", p.SubscriptionID, "operation_id", p.ID,
			"internal_id", p.InternalID, "reason", reason, "error", err)
		return
	}
	if b.seen[op] {
		return
	}
	b.seen[op] = true
	b.ops = append(b.ops, op)
	if b.oldest.IsZero() || p.LastWrite.Before(b.oldest) {
		b.oldest = p.LastWrite
	}
}

// warn logs an unusable document, up to maxLogged a batch.
func (b *batch) warn(msg string, attrs ...any) {
	if b.unusable > maxLogged {
		b.unlogged++
		return
	}
	b.log.Warn(msg, attrs...)
}
