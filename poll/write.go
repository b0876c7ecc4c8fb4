package poll

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/clusterservice"
	"github.com/opstatus/opstatus/internal/database"
)

// maxAttempts bounds re-reads after 412s: each one means somebody else wrote
// the item in between, which under the lock should be rare.
const maxAttempts = 5

var errTooManyConflicts = fmt.Errorf("%w: item kept changing (412) under the lock", database.ErrUnavailable)

// write decides again on a fresh read and writes the decision, under the
// subscription lock. The Resources item is written before the operation: if
// the process dies in between, the operation is still pending and the next
// poll finishes the job. key is the operation's resource as first read.
func (f *Function) write(ctx context.Context, log *slog.Logger, msg Message, owner string,
	decide func(*database.Operation) clusterservice.Decision, key string, deleteResources bool) (Outcome, error) {
	outcome := OutcomeUnchanged
	var ended *database.Operation
	err := f.Locker.Do(ctx, msg.SubscriptionID, owner, func(ctx context.Context) error {
		for attempt := range maxAttempts {
			var op *database.Operation
			var pre *resourceRead
			var err error
			if attempt == 0 {
				op, pre, err = f.readTogether(ctx, msg, key)
			} else {
				op, err = f.DB.GetOperation(ctx, msg.SubscriptionID, msg.OperationID)
			}
			if errors.Is(err, database.ErrNotFound) {
				outcome = OutcomeGone
				return nil
			}
			if err != nil {
				return err
			}
			if op.Status.IsTerminal() {
				return nil
			}
			d := decide(op)
			if !d.Change || d.Problem != "" {
				return nil
			}
			if deleteResources {
				if err := f.deleteResources(ctx, log, op, pre); err != nil {
					return err
				}
			} else if err := f.followResource(ctx, log, op, d.State, pre); err != nil {
				return err
			}
			next := *op
			next.Status, next.Error = d.State, d.Error
			if d.State != op.Status {
				next.LastTransitionTime = f.now()
			}
			written, err := f.DB.ReplaceOperation(ctx, &next)
			if errors.Is(err, database.ErrPreconditionFailed) {
				continue
			}
			if err != nil {
				return err
			}
			log.Info("operation status changed", "from", op.Status, "to", written.Status)
			outcome = OutcomeUpdated
			if deleteResources {
				outcome = OutcomeDeleted
			}
			if written.Status.IsTerminal() && written.NotificationURI != "" {
				ended = written
			}
			return nil
		}
		return errTooManyConflicts
	})
	if err != nil {
		return "", err
	}
	if ended != nil {
		// The status is written either way; a notification that fails here
		// is retried by the next scan.
		if _, err := f.notify(ctx, log, ended, owner); err != nil {
			log.Warn("notification not recorded; the next scan retries it", "error", err)
		}
	}
	return outcome, nil
}

// resourceRead is a read of the Resources item of key made together with the
// operation's.
type resourceRead struct {
	key string
	r   *database.Resource
	err error
}

// readTogether reads the operation and the Resources item of key at once: a
// change needs both, and the lock is then held one round trip less.
func (f *Function) readTogether(ctx context.Context, msg Message, key string) (*database.Operation, *resourceRead, error) {
	pre := &resourceRead{key: key}
	done := make(chan struct{})
	go func() {
		defer close(done)
		pre.r, pre.err = f.DB.GetResource(ctx, msg.SubscriptionID, key)
	}()
	op, err := f.DB.GetOperation(ctx, msg.SubscriptionID, msg.OperationID)
	<-done
	return op, pre, err
}

// getResource returns op's Resources item: pre's read when there is one for
// the same key, else a new one.
func (f *Function) getResource(ctx context.Context, op *database.Operation, pre *resourceRead) (*database.Resource, error) {
	if pre != nil && strings.EqualFold(pre.key, op.ExternalID) {
		return pre.r, pre.err
	}
	return f.DB.GetResource(ctx, op.PartitionKey, op.ExternalID)
}

// followResource moves the Resources item with its active operation.
func (f *Function) followResource(ctx context.Context, log *slog.Logger, op *database.Operation, state arm.ProvisioningState, pre *resourceRead) error {
	for range maxAttempts {
		r, err := f.getResource(ctx, op, pre)
		pre = nil // a retry reads again
		if errors.Is(err, database.ErrNotFound) {
			log.Warn("no Resources item for the operation's resource")
			return nil
		}
		if err != nil {
			return err
		}
		if r.ActiveOperationID != op.ID {
			return nil
		}
		r.ProvisioningState = state
		if state.IsTerminal() {
			r.ActiveOperationID = ""
		}
		_, err = f.DB.ReplaceResource(ctx, r)
		if errors.Is(err, database.ErrPreconditionFailed) {
			continue
		}
		return err
	}
	return errTooManyConflicts
}

// deleteResources removes the Resources item of a finished delete and its
// children. An item that another operation has taken over since is kept.
func (f *Function) deleteResources(ctx context.Context, log *slog.Logger, op *database.Operation, pre *resourceRead) error {
	for range maxAttempts {
		r, err := f.getResource(ctx, op, pre)
		pre = nil // a retry reads again
		if errors.Is(err, database.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if r.ActiveOperationID != op.ID {
			log.Warn("Resources item now belongs to another operation; kept", "active_operation_id", r.ActiveOperationID)
			return nil
		}
		children, err := f.DB.ChildResources(ctx, op.PartitionKey, r.Key)
		if err != nil {
			return err
		}
		for _, c := range children {
			if err := f.DB.DeleteResource(ctx, c); err != nil && !errors.Is(err, database.ErrNotFound) {
				return err
			}
		}
		err = f.DB.DeleteResource(ctx, r.Ref())
		if errors.Is(err, database.ErrPreconditionFailed) {
			continue
		}
		if err != nil && !errors.Is(err, database.ErrNotFound) {
			return err
		}
		log.Info("deleted Resources items", "children", len(children))
		return nil
	}
	return errTooManyConflicts
}
