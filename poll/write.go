package poll

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/database"
)

// maxAttempts bounds re-reads after 412s: each one means somebody else wrote
// the item in between, which under the lock should be rare.
const maxAttempts = 5

var errTooManyConflicts = fmt.Errorf("%w: item kept changing (412) under the lock", database.ErrUnavailable)

// writeAll writes the changes the check found, each subscription's under
// its lock, a few operations per hold.
func (r *run) writeAll(ctx context.Context, items []*item) {
	var changed []*item
	for _, it := range items {
		if it.change != nil {
			changed = append(changed, it)
		}
	}
	r.underLock(ctx, changed, func(ctx context.Context, it *item) error {
		outcome, err := r.apply(ctx, it)
		if err == nil {
			it.outcome = outcome
		}
		return err
	}, (*item).defer_)
}

// underLock runs step for each item while holding the lock of the item's
// subscription, at most WritesPerHold items per hold, concurrently: the
// frontend waits for the same lock on every customer request, so a hold
// stays short whatever the message. Subscriptions are handled in parallel,
// each in a place of the process's lockHolds gate (see New), taken before
// its goroutine starts. fail gets each item whose step failed, or that a
// hold could not run (the lock was held by someone else, or lost), with the
// error.
func (r *run) underLock(ctx context.Context, items []*item, step func(context.Context, *item) error, fail func(*item, error)) {
	bySub := map[string][]*item{}
	var subs []string
	for _, it := range items {
		sub := strings.ToLower(it.msg.SubscriptionID)
		if _, ok := bySub[sub]; !ok {
			subs = append(subs, sub)
		}
		bySub[sub] = append(bySub[sub], it)
	}
	per := orDefault(r.f.WritesPerHold, defaultWritesPerHold)
	var wg sync.WaitGroup
	for _, sub := range subs {
		release, err := r.f.lockHolds.take(ctx, "to take a subscription lock")
		if err != nil {
			for _, it := range bySub[sub] {
				fail(it, err)
			}
			continue
		}
		wg.Go(func() {
			defer release()
			for chunk := range slices.Chunk(bySub[sub], per) {
				r.holdOnce(ctx, sub, chunk, step, fail)
			}
		})
	}
	wg.Wait()
}

// holdOnce takes sub's lock once and runs step for the chunk's items at
// once: a hold lasts about one operation's writes, whatever the chunk.
// A panic before the steps began fails them all; after, each step's
// outcome stands.
func (r *run) holdOnce(ctx context.Context, sub string, chunk []*item, step func(context.Context, *item) error, fail func(*item, error)) {
	entered := false
	var err error
	safely(r.log.With("subscription_id", sub), func() {
		err = r.f.Locker.Do(chunk[0].within(ctx), sub, r.owner, func(ctx context.Context) error {
			entered = true
			var steps sync.WaitGroup
			for _, it := range chunk {
				steps.Go(func() {
					safely(it.log, func() {
						if err := step(it.within(ctx), it); err != nil {
							fail(it, err)
						}
					}, func(err error) { fail(it, err) })
				})
			}
			steps.Wait()
			return nil
		})
	}, func(p error) { err = p })
	if err != nil && !entered {
		for _, it := range chunk {
			fail(it, err)
		}
	}
}

// apply writes the decision; the caller holds the subscription lock. Its
// first attempt writes on the reads check made, without the lock, where
// the write is a replace with If-Match on what was read: it succeeds only
// if nobody wrote the item since, which is what a fresh read under the
// lock would have told, and the lock, which the frontend waits for, is
// held two round trips instead of three. A read that leads to no such
// write is made again under the lock (getResource). A 412 reads again and
// decides again. The billing
// item, then the Resources item, are written before the operation: if the
// process dies in between, the operation is still pending and the next
// poll finishes the job.
func (r *run) apply(ctx context.Context, it *item) (Outcome, error) {
	c := it.change
	return reread(func(attempt int) (Outcome, error) {
		op, pre := it.op, c.resource
		if attempt > 0 {
			var err error
			if op, err = r.f.DB.GetOperation(ctx, it.msg.SubscriptionID, it.msg.OperationID); err != nil {
				return outcomeOfRead(err)
			}
			pre = nil
		}
		facts := r.facts(op)
		d := decide(c.kind, facts, c.said)
		if !d.Change || d.Problem != "" {
			return OutcomeUnchanged, nil
		}
		d, err := r.writeBefore(ctx, it, op, facts, d, pre)
		if err != nil {
			return "", err
		}
		next := *op
		next.Status, next.Error = d.State, d.Error
		if d.State != op.Status {
			next.LastTransitionTime = r.f.now()
		}
		written, err := r.f.DB.ReplaceOperation(ctx, &next)
		if err != nil {
			return outcomeOfRead(err)
		}
		it.log.Info("operation status changed", "from", op.Status, "to", written.Status)
		it.overdue = d.Overdue > 0
		if written.Status.IsTerminal() && written.NotificationURI != "" {
			it.ended = written
		}
		if d.DeleteResources {
			return OutcomeDeleted, nil
		}
		return OutcomeUpdated, nil
	})
}

// writeBefore makes the billing and Resources writes that decision d needs
// before the operation's, and returns the decision to write. A write that
// Cosmos DB refuses for good (database.ErrRefused) keeps the operation as
// it is until its deadline, like any failure; past it, it no longer does,
// and it.refused records it:
//   - a billing write refused: the operation ends as the deadline ends it,
//     Failed, without the billing write (a Create leaves its cluster
//     without a billing item, a Delete leaves the item open);
//   - a Resources write refused: the operation is written as decided, and
//     the Resources item is left as it is, for a person, as an unreadable
//     one is.
func (r *run) writeBefore(ctx context.Context, it *item, op *database.Operation, facts facts, d decision,
	pre *resourceRead) (decision, error) {
	c := it.change
	pastDeadline := func(err error) bool {
		return facts.overdue > 0 && errors.As(err, &it.refused)
	}
	if err := r.f.bill(ctx, it.log, op, c, d.Billing); err != nil {
		if !pastDeadline(err) {
			return d, err
		}
		d = overdue(facts, c.said)
	}
	var err error
	switch {
	case !c.kind.WritesResources():
	case d.DeleteResources:
		err = r.f.deleteResources(ctx, it.log, op)
	default:
		err = r.f.followResource(ctx, it.log, op, d.State, pre)
	}
	if err != nil && !pastDeadline(err) {
		return d, err
	}
	return d, nil
}

// outcomeOfRead is the outcome of a read or write of the operation that
// failed with err: an operation deleted meanwhile is gone.
func outcomeOfRead(err error) (Outcome, error) {
	if errors.Is(err, database.ErrNotFound) {
		return OutcomeGone, nil
	}
	return "", err
}

// errReadAgain asks reread for another read: what was read changed
// meanwhile.
var errReadAgain = errors.New("read again")

// reread runs a read-modify-write step again while it meets a 412 (someone
// wrote the item between its read and its replace) or asks to read again,
// at most maxAttempts times; under the lock that should be rare. attempt
// counts from 0.
func reread[T any](step func(attempt int) (T, error)) (T, error) {
	for attempt := range maxAttempts {
		v, err := step(attempt)
		if !errors.Is(err, database.ErrPreconditionFailed) && !errors.Is(err, errReadAgain) {
			return v, err
		}
	}
	var zero T
	return zero, errTooManyConflicts
}

// resourceRead is a read of the Resources item of key made before the lock
// was taken.
type resourceRead struct {
	key string
	r   *database.Resource
}

// readResource reads the Resources item of op's resource for a change
// that moves it, without the lock (see apply); nil when the read failed,
// which getResource then makes again under the lock.
func (f *Function) readResource(ctx context.Context, op *database.Operation) *resourceRead {
	r, err := f.DB.GetResource(ctx, op.SubscriptionID(), op.ExternalID)
	if err != nil {
		return nil
	}
	return &resourceRead{key: op.ExternalID, r: r}
}

// getResource returns op's Resources item, under the lock: pre's read when
// it found the item of op's key following op, which followResource then
// replaces with If-Match on it; else a new read. A read that finds no
// item, or another operation's, leads to no write that If-Match could
// check, and the frontend, under its lock, writes the operation before the
// Resources item: pickup can see the first write and read before the
// second.
func (f *Function) getResource(ctx context.Context, op *database.Operation, pre *resourceRead) (*database.Resource, error) {
	if pre != nil && strings.EqualFold(pre.key, op.ExternalID) && pre.r.ActiveOperationID == op.ID {
		return pre.r, nil
	}
	return f.DB.GetResource(ctx, op.SubscriptionID(), op.ExternalID)
}

// followResource moves the Resources item with its active operation.
func (f *Function) followResource(ctx context.Context, log *slog.Logger, op *database.Operation, state arm.ProvisioningState, pre *resourceRead) error {
	_, err := reread(func(int) (struct{}, error) {
		r, err := f.getResource(ctx, op, pre)
		pre = nil // a retry reads again
		if errors.Is(err, database.ErrNotFound) {
			log.Warn("no Resources item for the operation's resource")
			return struct{}{}, nil
		}
		if unreadable(err) {
			heads, herr := f.DB.ResourceHeads(ctx, op.SubscriptionID(), op.ExternalID)
			if herr != nil {
				return struct{}{}, herr
			}
			if len(heads) == 0 {
				return struct{}{}, errReadAgain // gone since
			}
			log.Error("Resources item unreadable; the operation is written without it, and the item is left for a person to fix: "+
				"its provisioningState and activeOperationId are not updated", "resource_items", describe(heads), "error", err)
			return struct{}{}, nil
		}
		if err != nil || r.ActiveOperationID != op.ID {
			return struct{}{}, err
		}
		r.ProvisioningState = state
		if state.IsTerminal() {
			r.ActiveOperationID = ""
		}
		_, err = f.DB.ReplaceResource(ctx, r)
		return struct{}{}, err
	})
	return err
}

// deleteResources removes the Resources item of a finished delete and its
// children. An item that another operation has taken over since is kept.
// It reads the item under the lock: the children go before the item, and
// no If-Match on the item would guard their deletes.
func (f *Function) deleteResources(ctx context.Context, log *slog.Logger, op *database.Operation) error {
	_, err := reread(func(int) (struct{}, error) {
		r, err := f.DB.GetResource(ctx, op.SubscriptionID(), op.ExternalID)
		if errors.Is(err, database.ErrNotFound) {
			return struct{}{}, nil
		}
		if unreadable(err) {
			return struct{}{}, f.deleteUnreadable(ctx, log, op, err)
		}
		if err != nil {
			return struct{}{}, err
		}
		if r.ActiveOperationID != op.ID {
			log.Warn("Resources item now belongs to another operation; kept", "active_operation_id", r.ActiveOperationID)
			return struct{}{}, nil
		}
		children, err := f.DB.ChildResources(ctx, op.SubscriptionID(), r.Key)
		if err != nil {
			return struct{}{}, err
		}
		if err := f.deleteAll(ctx, children...); err != nil {
			return struct{}{}, err
		}
		if err := f.deleteAll(ctx, r.Ref()); err != nil {
			return struct{}{}, err
		}
		log.Info("deleted Resources items", "children", len(children))
		return struct{}{}, nil
	})
	return err
}

// deleteAll deletes the Resources items refs name, in order; one already
// gone is no error.
func (f *Function) deleteAll(ctx context.Context, refs ...database.ResourceRef) error {
	for _, ref := range refs {
		if err := f.DB.DeleteResource(ctx, ref); err != nil && !errors.Is(err, database.ErrNotFound) {
			return err
		}
	}
	return nil
}

// unreadable reports a read of a Resources item that failed for what the
// items hold, which no retry mends: one does not decode, or several share
// the key. The operation goes on without it, as without a missing one.
func unreadable(err error) bool {
	return errors.Is(err, database.ErrMalformed) || errors.Is(err, database.ErrDuplicateKey)
}

// deleteUnreadable deletes, for a finished delete, the Resources items of
// op's key that GetResource could not return, and the children, by the
// refs children are deleted by. An item whose activeOperationId names
// another operation is kept, as a readable one is, and the children with
// it; one whose activeOperationId is not a string is deleted: the frontend
// cannot read it either, so no later operation can have taken it over.
// It asks for another read (errReadAgain) when the items changed meanwhile.
func (f *Function) deleteUnreadable(ctx context.Context, log *slog.Logger, op *database.Operation, cause error) error {
	heads, err := f.DB.ResourceHeads(ctx, op.SubscriptionID(), op.ExternalID)
	if err != nil {
		return err
	}
	if len(heads) == 0 {
		return errReadAgain
	}
	var mine, kept []database.ResourceHead
	for _, h := range heads {
		if h.OwnerUnreadable || h.ActiveOperationID == op.ID {
			mine = append(mine, h)
		} else {
			kept = append(kept, h)
		}
	}
	var children []database.ResourceRef
	if len(kept) == 0 {
		if children, err = f.DB.ChildResources(ctx, op.SubscriptionID(), op.ExternalID); err != nil {
			return err
		}
		if err := f.deleteAll(ctx, children...); err != nil {
			return err
		}
	}
	for _, h := range mine {
		// A 412 reads them again.
		if err := f.deleteAll(ctx, h.ResourceRef); err != nil {
			return err
		}
	}
	if len(kept) == 0 {
		log.Error("Resources items unreadable; deleted with the finished delete, nothing is left for a person",
			"resource_items", describe(mine), "children", len(children), "error", cause)
	} else {
		log.Error("Resources items unreadable; those whose activeOperationId is not this operation's are kept with the children "+
			"and left for a person to fix, the others deleted",
			"kept", describe(kept), "deleted", describe(mine), "error", cause)
	}
	return nil
}

// describe names Resources items for a person who has to find them.
func describe(heads []database.ResourceHead) []string {
	out := make([]string, len(heads))
	for i, h := range heads {
		owner := h.ActiveOperationID
		if h.OwnerUnreadable {
			owner = "(not a string)"
		}
		out[i] = fmt.Sprintf("id=%s key=%s activeOperationId=%s", h.ID, h.Key, owner)
	}
	return out
}
