// Package lock implements the subscription lock that opstatus shares with the
// ARO-HCP frontend: one Cosmos item per subscription, created to acquire,
// replaced with If-Match before its TTL runs out, deleted to release.
package lock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"

	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/internal/panics"
	"github.com/opstatus/opstatus/internal/telemetry"
)

var (
	// ErrHeld means another owner held the lock for the whole wait.
	ErrHeld = errors.New("subscription lock held by another owner")
	// ErrLost means the lock could not be renewed in time; the work under it
	// was canceled.
	ErrLost = errors.New("subscription lock lost")
	// ErrBadTTL means the Locks container's DefaultTimeToLive is missing or
	// shorter than MinTTL.
	ErrBadTTL = errors.New("invalid subscription lock TTL")
)

// MinTTL is the shortest lock TTL a Locker accepts: below it the lease
// margin would leave no lease at all.
const MinTTL = 2 * time.Second

// Lease returns how long a lock write holds the lock, counted from when the
// write was sent. Cosmos DB may expire the item at the whole second of
// its _ts plus the TTL, up to a second before the write's time plus the TTL;
// the rest of the margin covers clock drift between us and Cosmos and the
// time the work takes to stop.
func Lease(ttl time.Duration) time.Duration {
	return ttl - time.Second - min(ttl/5, 2*time.Second)
}

// renewEvery returns the pause between renewals: a third of the lease, so
// that two renewals are tried, each with a third of the lease to answer,
// before it ends.
func renewEvery(ttl time.Duration) time.Duration { return Lease(ttl) / 3 }

// Options tune a Locker; zero values take the defaults.
type Options struct {
	// Wait is how long Acquire retries while someone else holds the lock.
	Wait time.Duration // default 10s
	// RetryInterval is the pause between two attempts to acquire.
	RetryInterval time.Duration // default 1s
	Logger        *slog.Logger
}

// Locker takes subscription locks from a LockStore.
type Locker struct {
	store database.LockStore
	opts  Options

	ttlOnce sync.Mutex
	ttl     time.Duration

	// turns queues this process's own callers per subscription, so that
	// they take the Cosmos lock one after another instead of each meeting a
	// 409 and sleeping a retry interval. Entries are one small channel per
	// subscription this process has written to.
	turns sync.Map // lowercase subscription ID -> chan struct{} (capacity 1)

	// active counts the calls of Do between their first attempt to create
	// the lock item and the end of their release; idle is closed whenever
	// active is zero.
	activeMu sync.Mutex
	active   int
	idle     chan struct{}
}

// New returns a Locker; the lock TTL is read from the store on first use.
func New(store database.LockStore, opts Options) *Locker {
	if opts.Wait <= 0 {
		opts.Wait = 10 * time.Second
	}
	if opts.RetryInterval <= 0 {
		opts.RetryInterval = time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Locker{store: store, opts: opts}
}

// TTL returns the Locks container's DefaultTimeToLive, read once it is
// valid. A TTL that is missing or shorter than MinTTL is an ErrBadTTL error.
func (l *Locker) TTL(ctx context.Context) (time.Duration, error) {
	l.ttlOnce.Lock()
	defer l.ttlOnce.Unlock()
	if l.ttl > 0 {
		return l.ttl, nil
	}
	ttl, err := l.store.TTL(ctx)
	if err != nil {
		return 0, err
	}
	if ttl <= 0 {
		return 0, fmt.Errorf("%w: the Locks container has no DefaultTimeToLive; it must be at least %s", ErrBadTTL, MinTTL)
	}
	if ttl < MinTTL {
		return 0, fmt.Errorf("%w: the Locks container's DefaultTimeToLive is %s; it must be at least %s", ErrBadTTL, ttl, MinTTL)
	}
	l.ttl = ttl
	return ttl, nil
}

// Wait waits until no call of Do is acquiring, holding or releasing a lock,
// or until ctx is done. A process calls it before it exits, once nothing
// starts new work, so that no lock it took is left to block the frontend
// for a whole TTL.
func (l *Locker) Wait(ctx context.Context) error {
	l.activeMu.Lock()
	n, idle := l.active, l.idle
	l.activeMu.Unlock()
	if n == 0 {
		return nil
	}
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		l.activeMu.Lock()
		n = l.active
		l.activeMu.Unlock()
		return fmt.Errorf("waiting for %d subscription locks to be released: %w", n, context.Cause(ctx))
	}
}

func (l *Locker) begin() {
	l.activeMu.Lock()
	defer l.activeMu.Unlock()
	if l.active == 0 {
		l.idle = make(chan struct{})
	}
	l.active++
}

func (l *Locker) end() {
	l.activeMu.Lock()
	defer l.activeMu.Unlock()
	l.active--
	if l.active == 0 {
		close(l.idle)
	}
}

// Do runs fn while owner holds subscriptionID's lock. fn's context is canceled
// with ErrLost if a renewal does not succeed before the lease runs out, or
// finds the lock item gone or changed, so no write follows the loss. The
// release is always attempted, and Do returns ErrHeld (with the wait) when
// the lock could not be had. A create whose outcome is unknown is not
// retried: the item it may have written is deleted, if it is ours, before Do
// returns its error.
//
// owner must name this process alone: a lock item of owner is taken as one
// this Locker created (a create whose answer was lost) and adopted. Callers
// of one Locker take a subscription's lock one after another, so it can be
// shared by them.
func (l *Locker) Do(ctx context.Context, subscriptionID, owner string, fn func(ctx context.Context) error) error {
	ttl, err := l.TTL(ctx)
	if err != nil {
		return fmt.Errorf("lock ttl: %w", err)
	}
	ctx = database.WithOwner(ctx, owner)
	id := strings.ToLower(subscriptionID)
	log := l.opts.Logger.With("subscription_id", id, "lock_owner", owner)

	deadline := time.Now().Add(l.opts.Wait)
	waitCtx, waited := telemetry.LockWait(ctx, id)
	release, err := l.takeTurn(waitCtx, id, deadline)
	if err != nil {
		waited(err)
		return err
	}
	defer release()
	l.begin()
	defer l.end()
	etag, acquired, err := l.acquire(waitCtx, id, owner, ttl, deadline, log)
	waited(err)
	if err != nil {
		return err
	}
	held := &holding{etag: etag}

	workCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan struct{})
	kept := make(chan struct{})
	go func() {
		defer close(kept)
		// A panic in keeping the lock, a bug, loses it as a failed
		// renewal does: no write may follow a lock nobody renews.
		if p := panics.Recover(func() { l.keep(workCtx, id, owner, ttl, acquired, held, done, cancel, log) }); p != nil {
			p.Log(ctx, log, "keeping the subscription lock panicked; canceling the work under it")
			cancel(fmt.Errorf("%w: %w", ErrLost, p))
		}
	}()

	workErr := fn(workCtx)
	close(done)
	<-kept

	// Release on a fresh context: the work's may be canceled, and a lock left
	// behind blocks the frontend for a whole TTL.
	relCtx, relCancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer relCancel()
	if err := l.store.Delete(relCtx, id, held.get()); err != nil &&
		!errors.Is(err, database.ErrPreconditionFailed) && !errors.Is(err, database.ErrNotFound) {
		log.Warn("releasing the subscription lock failed; its TTL will free it", "error", err)
	}

	if cause := context.Cause(workCtx); errors.Is(cause, ErrLost) {
		return errors.Join(cause, workErr)
	}
	return workErr
}

// takeTurn waits until no other caller in this process holds or waits on
// id's lock ahead of this one, or until deadline.
func (l *Locker) takeTurn(ctx context.Context, id string, deadline time.Time) (release func(), err error) {
	v, _ := l.turns.LoadOrStore(id, make(chan struct{}, 1))
	turn := v.(chan struct{})
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case turn <- struct{}{}:
		return func() { <-turn }, nil
	case <-timer.C:
		return nil, fmt.Errorf("%w (waited %s behind this process's other work on it)", ErrHeld, l.opts.Wait)
	case <-ctx.Done():
		return nil, fmt.Errorf("acquire lock: %w", context.Cause(ctx))
	}
}

// acquire creates the lock item, retrying while someone else holds it, until
// deadline. It returns when the write that took the lock was sent: the lease
// runs from there.
func (l *Locker) acquire(ctx context.Context, id, owner string, ttl time.Duration, deadline time.Time,
	log *slog.Logger) (azcore.ETag, time.Time, error) {
	for {
		sent := time.Now()
		etag, err := l.store.Create(ctx, id, owner, ttl)
		if err == nil {
			return etag, sent, nil
		}
		if !errors.Is(err, database.ErrConflict) {
			l.removeUnknown(ctx, id, owner, log)
			return "", sent, fmt.Errorf("acquire lock: %w", err)
		}
		etag, sent, next := l.adopt(ctx, id, owner, ttl, log)
		switch next {
		case adopted:
			return etag, sent, nil
		case createAgain:
			if time.Now().Before(deadline) && ctx.Err() == nil {
				continue
			}
		}
		if !time.Now().Add(l.opts.RetryInterval).Before(deadline) {
			return "", sent, fmt.Errorf("%w (waited %s)", ErrHeld, l.opts.Wait)
		}
		select {
		case <-ctx.Done():
			return "", sent, fmt.Errorf("acquire lock: %w", context.Cause(ctx))
		case <-time.After(l.opts.RetryInterval):
		}
	}
}

// removeUnknown deletes the lock item that a create with an unknown outcome
// (a timeout, a dropped connection, the caller's context ending) may have
// written, if it is there and ours: nobody would release it, and it would
// lock the frontend out for a whole TTL. It runs on a short context of its
// own, since the caller's may have ended, and before Do returns, so that Wait
// covers it and the next caller here does not meet the item. An item of
// another owner is never touched.
func (l *Locker) removeUnknown(ctx context.Context, id, owner string, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	cur, etag, err := l.store.Get(ctx, id)
	switch {
	case errors.Is(err, database.ErrNotFound):
		return
	case err != nil:
		log.Warn("looking for a subscription lock item a failed create may have written failed; its TTL will free it", "error", err)
		return
	case cur != owner:
		return
	}
	err = l.store.Delete(ctx, id, etag)
	switch {
	case err == nil:
		log.Info("deleted the subscription lock item a failed create had written")
	case errors.Is(err, database.ErrPreconditionFailed) || errors.Is(err, database.ErrNotFound):
		// It changed or expired meanwhile: nothing of ours is left.
	default:
		log.Warn("deleting the subscription lock item a failed create had written failed; its TTL will free it", "error", err)
	}
}

type adoptResult int

const (
	stillHeld   adoptResult = iota // someone else holds the lock: wait
	createAgain                    // the item is gone: create it at once
	adopted                        // the item is ours and renewed
)

// adopt looks at the lock item a create met. When its owner is exactly
// ours, the item is our own create whose answer was lost (and whose retry
// met 409): adopt takes it by renewing it with If-Match, so that the lease
// runs from that renewal's send time, never from the unknown time of the
// first write.
func (l *Locker) adopt(ctx context.Context, id, owner string, ttl time.Duration, log *slog.Logger) (azcore.ETag, time.Time, adoptResult) {
	cur, etag, err := l.store.Get(ctx, id)
	switch {
	case errors.Is(err, database.ErrNotFound):
		return "", time.Time{}, createAgain
	case err != nil:
		log.Warn("reading the subscription lock held by someone failed; will retry", "error", err)
		return "", time.Time{}, stillHeld
	case cur != owner:
		return "", time.Time{}, stillHeld
	}
	sent := time.Now()
	etag, err = l.store.Renew(ctx, id, owner, ttl, etag)
	switch {
	case err == nil:
		log.Info("adopted this owner's own subscription lock item")
		return etag, sent, adopted
	case errors.Is(err, database.ErrNotFound) || errors.Is(err, database.ErrPreconditionFailed):
		return "", time.Time{}, createAgain // it changed under us: look again
	default:
		log.Warn("adopting this owner's own subscription lock item failed; will retry", "error", err)
		return "", time.Time{}, stillHeld
	}
}

type holding struct {
	mu   sync.Mutex
	etag azcore.ETag
}

func (h *holding) get() azcore.ETag {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.etag
}

func (h *holding) set(e azcore.ETag) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.etag = e
}

// keep renews the lock every renewEvery(ttl) until done. The lease is
// counted from the moment the last successful write was sent and lasts
// Lease(ttl); no renewal may outlast it, and the work is canceled as soon
// as it ends, whatever the store says.
func (l *Locker) keep(ctx context.Context, id, owner string, ttl time.Duration, since time.Time,
	held *holding, done <-chan struct{}, cancel context.CancelCauseFunc, log *slog.Logger) {
	lease, interval := Lease(ttl), renewEvery(ttl)
	leaseEnd := since.Add(lease)
	lost := func(msg string, err error) {
		log.Error(msg+"; canceling the work under it", "error", err)
		cancel(fmt.Errorf("%w: %w", ErrLost, err))
	}
	late := fmt.Errorf("not renewed within %s", lease)
	expiry := time.NewTimer(time.Until(leaseEnd))
	defer expiry.Stop()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-expiry.C:
			lost("subscription lock not renewed in time", late)
			return
		case <-tick.C:
		}
		sent := time.Now()
		if !sent.Before(leaseEnd) { // the tick won a race with the expiry
			lost("subscription lock not renewed in time", late)
			return
		}
		rctx, rcancel := context.WithDeadline(ctx, minTime(sent.Add(interval), leaseEnd))
		etag, err := l.store.Renew(rctx, id, owner, ttl, held.get())
		rcancel()
		switch {
		case err == nil:
			held.set(etag)
			leaseEnd = sent.Add(lease)
			expiry.Reset(time.Until(leaseEnd))
		case errors.Is(err, database.ErrPreconditionFailed) || errors.Is(err, database.ErrNotFound):
			lost("subscription lock taken over", err)
			return
		case !time.Now().Before(leaseEnd):
			lost("subscription lock not renewed in time", fmt.Errorf("%w: %w", late, err))
			return
		default:
			log.Warn("renewing the subscription lock failed; will retry", "error", err)
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
