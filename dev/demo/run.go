package demo

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/dev/stack"
)

// ErrNotConverged means some operation was not terminal by the deadline.
var ErrNotConverged = errors.New("demo did not converge")

// LockedSubscription is the subscription whose lock the frontend holds at
// the start, for LockHold.
var LockedSubscription = Subscriptions[2]

// LockHold is how long the frontend holds LockedSubscription's lock.
const LockHold = 20 * time.Second

// Malformed is the message queued on purpose: it must end in the poison queue.
const Malformed = `{"subscriptionId":42,"operationId":"x"}`

// Run seeds the demo into a running stack, queues one malformed message, has
// the frontend hold one subscription's lock for LockHold, and watches Cosmos,
// printing every transition and billing item to out, until every operation
// is terminal and the malformed message is in the poison queue, or until
// timeout or ctx ends. Summary then says whether each ended as scripted.
// polls is the Outcomes the stack's host records into.
func Run(ctx context.Context, s *stack.Stack, out io.Writer, timeout time.Duration, polls *Outcomes) (*Watcher, error) {
	if err := s.WaitFeed(ctx); err != nil {
		return nil, err
	}
	started := time.Now()
	ops := Ops()
	// The frontend holds the lock while it writes an operation, so pickup
	// meets it as well as poll. The 2024-10 frontend's requests take the
	// lock themselves: it holds it from after them.
	aro2024 := s.Frontend.Shape == frontend.Shape2024_10
	if aro2024 {
		if err := Seed(ctx, s, ops); err != nil {
			return nil, fmt.Errorf("seed: %w", err)
		}
	}
	lock, ok, err := s.Frontend.TryLock(ctx, LockedSubscription, "frontend-demo")
	if err != nil || !ok {
		return nil, fmt.Errorf("frontend lock: held=%v: %w", !ok, err)
	}
	unlockAt := time.Now().Add(LockHold)
	renewAt := time.Now().Add(3 * time.Second)
	if !aro2024 {
		if err := Seed(ctx, s, ops); err != nil {
			return nil, fmt.Errorf("seed: %w", err)
		}
	}
	// The host's queues use base64 (host.json messageEncoding).
	if _, err := s.Queue.NewQueueClient("operations").EnqueueMessage(ctx,
		base64.StdEncoding.EncodeToString([]byte(Malformed)), nil); err != nil {
		return nil, fmt.Errorf("enqueue malformed message: %w", err)
	}
	fmt.Fprintf(out, "%d operations of %d kinds (%s) in %d subscriptions; the frontend holds the lock of %s for %s; one malformed message queued\n\n",
		len(ops), len(Kinds), strings.Join(Kinds, ", "), len(Subscriptions), Short(LockedSubscription), LockHold)

	w := NewWatcher(s, ops, out, started, polls)
	deadline := time.Now().Add(timeout)
	for !w.AllTerminal() || !w.PoisonSettled(ctx) {
		if lock.ETag != "" && time.Now().After(renewAt) && time.Now().Before(unlockAt) {
			// Renew well inside the Locks container's TTL.
			if lock, err = s.Frontend.Renew(ctx, lock); err != nil {
				return w, fmt.Errorf("frontend renew: %w", err)
			}
			renewAt = time.Now().Add(3 * time.Second)
		}
		if lock.ETag != "" && time.Now().After(unlockAt) {
			if err := s.Frontend.Unlock(ctx, lock); err != nil {
				return w, fmt.Errorf("frontend unlock: %w", err)
			}
			lock.ETag = ""
			w.Event("frontend released the lock of " + Short(LockedSubscription))
		}
		select {
		case <-ctx.Done():
			return w, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
		if err := w.Poll(ctx); err != nil && ctx.Err() == nil {
			w.Event("watch: " + err.Error())
		}
		if time.Now().After(deadline) {
			return w, fmt.Errorf("%w after %s", ErrNotConverged, timeout)
		}
	}
	return w, nil
}
