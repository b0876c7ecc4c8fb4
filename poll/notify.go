package poll

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/internal/telemetry"
)

// notifyAll tells ARM of every operation of the message that has ended with
// a notificationUri, then clears the notificationUris, each subscription's
// under its lock a few at a time, so that each is sent once. A failed
// delivery is retried by later scans until NotifyFor has passed since the
// operation ended; a rejected one is given up at once. The delivery is sent
// outside the lock, so that a slow ARM does not hold it.
//
// Two invocations of this process that find the same ended operation (the
// one that wrote the end and one for an older message, say) send it once:
// the second sees the first's delivery in flight, or finds the
// notificationUri cleared when it reads the operation again. Across
// processes delivery stays at least once.
//
// Deliveries take places of the process's deliveries gate (see New) before
// their goroutines start, as the checks do.
func (r *run) notifyAll(ctx context.Context, items []*item) {
	var (
		mu      sync.Mutex
		toClear []*item
		wg      sync.WaitGroup
	)
	for _, it := range items {
		if it.ended == nil {
			continue
		}
		key := it.ended.PartitionKey + "/" + it.ended.ID
		if _, busy := r.f.notifying.LoadOrStore(key, struct{}{}); busy {
			it.log.Debug("notification already being delivered by this process")
			continue
		}
		defer r.f.notifying.Delete(key)
		release, err := r.f.deliveries.take(ctx, "to notify ARM")
		if err != nil {
			r.failNotification(it, err)
			continue
		}
		wg.Go(func() {
			defer release()
			safely(it.log, func() {
				if r.deliver(it.within(ctx), it) {
					mu.Lock()
					toClear = append(toClear, it)
					mu.Unlock()
				}
			}, func(err error) { r.failNotification(it, err) })
		})
	}
	wg.Wait()
	r.underLock(ctx, toClear, func(ctx context.Context, it *item) error {
		return r.clear(ctx, it)
	}, r.failNotification)
}

// notification is what an item's delivery did, kept until its
// notificationUri is cleared.
type notification struct {
	uri     string
	outcome Outcome
}

// deliver sends it's notification, or gives it up, and reports whether its
// notificationUri is to be cleared.
func (r *run) deliver(ctx context.Context, it *item) bool {
	op := it.ended
	cur, err := r.f.DB.GetOperation(ctx, op.SubscriptionID(), op.ID)
	switch {
	case errors.Is(err, database.ErrNotFound):
		r.settle(it, OutcomeGone)
		return false
	case err != nil:
		r.failNotification(it, err)
		return false
	case cur.NotificationURI != op.NotificationURI:
		r.settle(it, OutcomeDone)
		return false
	}
	it.note = &notification{uri: op.NotificationURI, outcome: OutcomeNotified}
	if ended := endedAt(op); r.f.now().Sub(ended) > orDefault(r.f.NotifyFor, defaultNotifyFor) {
		it.log.Error("notification not delivered in time; given up", "ended", ended)
		it.note.outcome = OutcomeDone
		return true
	}
	// By the rule opstatus writes its own ends with: the frontend ends an
	// operation too (the seed's cancels by writing status Canceled alone),
	// and ARM requires a code and message of Failed and Canceled. Its
	// item is left as the frontend wrote it.
	status := arm.OperationStatus{ID: op.OperationID, Name: op.ID, Status: op.Status, Error: endError(op.Status, op.Error)}
	if !op.StartTime.IsZero() {
		status.StartTime = &op.StartTime
	}
	if !op.LastTransitionTime.IsZero() {
		status.EndTime = &op.LastTransitionTime
	}
	nctx, span := telemetry.Start(ctx, telemetry.SpanNotify, trace.WithSpanKind(trace.SpanKindClient))
	err = r.f.Notifier.Notify(nctx, op.NotificationURI, status)
	telemetry.Fail(span, err)
	span.End()
	switch {
	case errors.Is(err, arm.ErrPermanent):
		it.log.Error("notification rejected; given up", "error", err)
		it.note.outcome = OutcomeDone
	case err != nil:
		it.log.Warn("notification failed; the next scan retries it", "error", err)
		r.settle(it, OutcomeDeferred)
		return false
	default:
		// Debug: the status change is logged where it is written, and a
		// notification that fails logs itself.
		it.log.Debug("ARM notified", "status", op.Status)
	}
	return true
}

// clear removes the notificationUri of a delivered (or given up)
// notification; the caller holds the subscription lock.
func (r *run) clear(ctx context.Context, it *item) error {
	op := it.ended
	_, err := reread(func(int) (struct{}, error) {
		cur, err := r.f.DB.GetOperation(ctx, op.SubscriptionID(), op.ID)
		switch {
		case errors.Is(err, database.ErrNotFound):
		case err != nil:
			return struct{}{}, err
		case cur.NotificationURI == it.note.uri:
			cur.NotificationURI = ""
			if _, err := r.f.DB.ReplaceOperation(ctx, cur); err != nil {
				return struct{}{}, err
			}
		}
		r.settle(it, it.note.outcome)
		return struct{}{}, nil
	})
	return err
}

// settle gives an item the outcome of its notification, unless the item
// wrote the end itself: its outcome is that write.
func (r *run) settle(it *item, o Outcome) {
	if it.change == nil {
		it.outcome = o
	}
}

// failNotification records a notification that was not delivered, or
// delivered but not recorded: a later scan sends it again.
func (r *run) failNotification(it *item, err error) {
	if it.change == nil {
		it.defer_(err)
		return
	}
	it.log.Warn("notification not recorded; the next scan retries it", "error", err)
}

// endedAt is when op ended, as far as its item tells: its last transition,
// or, for an item written without one, its start or its last write. Every
// operation thus has an end from which its notification is given up.
func endedAt(op *database.Operation) time.Time {
	switch {
	case !op.LastTransitionTime.IsZero():
		return op.LastTransitionTime
	case !op.StartTime.IsZero():
		return op.StartTime
	}
	return op.Timestamp
}
