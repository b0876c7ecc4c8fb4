package poll

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/database"
)

// notify tells ARM that op has ended, then clears its notificationUri so that
// it is sent once. A failed delivery is retried by later scans until NotifyFor
// has passed since the operation ended; a rejected one is given up at once.
//
// Two invocations of this process that find the same ended operation (the
// one that wrote the end and one for an older message, say) send it once:
// the second sees the first's delivery in flight, or finds the
// notificationUri cleared when it reads the operation again. Across
// processes delivery stays at least once.
func (f *Function) notify(ctx context.Context, log *slog.Logger, op *database.Operation, owner string) (Outcome, error) {
	key := op.PartitionKey + "/" + op.ID
	if _, busy := f.notifying.LoadOrStore(key, struct{}{}); busy {
		log.Debug("notification already being delivered by this process")
		return OutcomeDone, nil
	}
	defer f.notifying.Delete(key)
	cur, err := f.DB.GetOperation(ctx, op.PartitionKey, op.ID)
	switch {
	case errors.Is(err, database.ErrNotFound):
		return OutcomeGone, nil
	case err != nil:
		return "", err
	case cur.NotificationURI != op.NotificationURI:
		return OutcomeDone, nil
	}
	notifyFor := f.NotifyFor
	if notifyFor <= 0 {
		notifyFor = defaultNotifyFor
	}
	uri := op.NotificationURI
	outcome := OutcomeNotified
	if ended := endedAt(op); f.now().Sub(ended) > notifyFor {
		log.Error("notification not delivered in time; given up", "ended", ended)
		outcome = OutcomeDone
	} else {
		status := arm.OperationStatus{ID: op.OperationID, Name: op.ID, Status: op.Status, Error: op.Error}
		if !op.StartTime.IsZero() {
			status.StartTime = &op.StartTime
		}
		if !op.LastTransitionTime.IsZero() {
			status.EndTime = &op.LastTransitionTime
		}
		err := f.Notifier.Notify(ctx, uri, status)
		switch {
		case errors.Is(err, arm.ErrPermanent):
			log.Error("notification rejected; given up", "error", err)
			outcome = OutcomeDone
		case err != nil:
			log.Warn("notification failed; the next scan retries it", "error", err)
			return OutcomeDeferred, nil
		default:
			log.Info("ARM notified", "status", op.Status)
		}
	}
	err = f.Locker.Do(ctx, op.PartitionKey, owner, func(ctx context.Context) error {
		for range maxAttempts {
			cur, err := f.DB.GetOperation(ctx, op.PartitionKey, op.ID)
			if errors.Is(err, database.ErrNotFound) {
				return nil
			}
			if err != nil {
				return err
			}
			if cur.NotificationURI != uri {
				return nil
			}
			cur.NotificationURI = ""
			_, err = f.DB.ReplaceOperation(ctx, cur)
			if errors.Is(err, database.ErrPreconditionFailed) {
				continue
			}
			return err
		}
		return errTooManyConflicts
	})
	if err != nil {
		// Delivered but not recorded: a later scan sends it again.
		return "", err
	}
	return outcome, nil
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
