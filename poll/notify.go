package poll

import (
	"context"
	"errors"
	"log/slog"

	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/database"
)

// notify tells ARM that op has ended, then clears its notificationUri so that
// it is sent once. A failed delivery is retried by later scans until NotifyFor
// has passed since the operation ended; a rejected one is given up at once.
func (f *Function) notify(ctx context.Context, log *slog.Logger, op *database.Operation, owner string) (Outcome, error) {
	notifyFor := f.NotifyFor
	if notifyFor <= 0 {
		notifyFor = defaultNotifyFor
	}
	uri := op.NotificationURI
	outcome := OutcomeNotified
	if !op.LastTransitionTime.IsZero() && f.now().Sub(op.LastTransitionTime) > notifyFor {
		log.Error("notification not delivered in time; given up", "ended", op.LastTransitionTime)
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
	err := f.Locker.Do(ctx, op.PartitionKey, owner, func(ctx context.Context) error {
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
