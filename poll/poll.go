// Package poll is the queue-triggered function: it brings one operation up to
// date with Cluster Service and writes the result to Cosmos DB.
package poll

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/opstatus/opstatus/functions"
	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/clusterservice"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/internal/lock"
)

// Binding is the queue trigger's binding name in poll/function.json.
const Binding = "operation"

// defaultNotifyFor is how long a notification is retried after the operation ends.
const defaultNotifyFor = time.Hour

// Outcome says what one poll did; it is the invocation's ReturnValue.
type Outcome string

// Outcomes of a poll.
const (
	OutcomeGone       Outcome = "gone"       // the operation item does not exist
	OutcomeInvalid    Outcome = "invalid"    // the item cannot be acted on; logged
	OutcomeDone       Outcome = "done"       // terminal and nothing left to notify
	OutcomeUnchanged  Outcome = "unchanged"  // Cluster Service says nothing new
	OutcomeUpdated    Outcome = "updated"    // a new status was written
	OutcomeDeleted    Outcome = "deleted"    // a finished delete removed its resources
	OutcomeNotified   Outcome = "notified"   // ARM was notified of the end
	OutcomeDeferred   Outcome = "deferred"   // a dependency failed; the next scan retries
	OutcomeSuperseded Outcome = "superseded" // a later scan has sent a fresher message
)

// StatusGetter is the part of the Cluster Service client poll uses.
type StatusGetter interface {
	Status(ctx context.Context, id clusterservice.InternalID) (clusterservice.Status, error)
}

// Notifier is the part of the ARM notifier poll uses.
type Notifier interface {
	Notify(ctx context.Context, uri string, status arm.OperationStatus) error
}

// Function polls operations.
type Function struct {
	DB       database.DBClient
	Cluster  StatusGetter
	Locker   *lock.Locker
	Notifier Notifier
	// Owner names this process in lock items; the invocation id is appended.
	Owner string
	// NotifyFor is how long after an operation ends its notification is
	// retried before it is given up; default one hour.
	NotifyFor time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Schedule, shared with scan, gives messages without an interval the
	// one last seen; nil leaves them without.
	Schedule *Schedule

	notifying sync.Map // "subscription/operation" of notifications in flight
}

func (f *Function) now() time.Time {
	if f.Now != nil {
		return f.Now().UTC()
	}
	return time.Now().UTC()
}

// Handle is the functions.Handler of poll. A malformed message answers 400 (the
// host retries it, then moves it to the poison queue); a well-formed one whose
// ids poll will not act on (Message.CheckIDs) answers 200 with OutcomeInvalid,
// since scan never sends one and a retry cannot help; a dependency failure
// answers 200 and leaves the operation unchanged, since the next scan sends it
// again and an outage must not fill the poison queue. Transient failures log
// a warning, others (a Cluster Service answer that does not parse, a 401) an
// error.
func (f *Function) Handle(ctx context.Context, inv *functions.Invocation) (*functions.Result, error) {
	var msg Message
	if err := inv.QueueMessage(Binding, &msg); err != nil {
		inv.Log.Error("malformed queue message", "error", err)
		return nil, functions.BadRequest(fmt.Errorf("queue message: %w", err))
	}
	if err := msg.Validate(); err != nil {
		inv.Log.Error("malformed queue message", "error", err)
		return nil, functions.BadRequest(fmt.Errorf("queue message: %w", err))
	}
	if err := msg.CheckIDs(); err != nil {
		// Every retry would be refused the same way: answered, the message
		// is gone instead of cycling into the poison queue.
		inv.Log.Error("queue message names no operation poll can act on; dropped", "error", err)
		return &functions.Result{ReturnValue: OutcomeInvalid}, nil
	}
	log := inv.Log.With("subscription_id", msg.SubscriptionID, "operation_id", msg.OperationID)
	msg.inserted = inv.QueueMetadata().InsertionTime
	if msg.ScanInterval > 0 {
		f.Schedule.Observe(msg.ScanInterval)
	} else {
		msg.ScanInterval = f.Schedule.Interval()
	}
	if msg.superseded(f.now()) {
		log.Debug("message superseded by a later scan; dropped", "inserted", msg.inserted, "scanned_at", msg.ScannedAt)
		return &functions.Result{ReturnValue: OutcomeSuperseded}, nil
	}
	outcome, err := f.Poll(ctx, log, msg, f.Owner+"/"+ownerSuffix(inv.ID))
	if err != nil {
		// Poll turns every problem of the operation's own data into an
		// outcome, so an error here is a dependency's: the operation is still
		// pending and the next scan retries it. Failing the invocation would
		// only move a good message to the poison queue.
		level := slog.LevelWarn
		if !Transient(err) {
			level = slog.LevelError
		}
		log.Log(ctx, level, "operation left unchanged; the next scan retries it", "error", err)
		return &functions.Result{ReturnValue: OutcomeDeferred}, nil
	}
	// Most polls change nothing: those are Debug, so that the log at Info
	// is the record of what opstatus did (the ReturnValue has every outcome).
	level := slog.LevelDebug
	if outcome == OutcomeUpdated || outcome == OutcomeDeleted || outcome == OutcomeNotified {
		level = slog.LevelInfo
	}
	log.Log(ctx, level, "polled", "outcome", outcome)
	return &functions.Result{ReturnValue: outcome}, nil
}

// ownerSuffix names an invocation in lock owners: its id when that is a
// plain GUID-like string, else a short hash of it, so that whatever the
// header holds, the lock item and request headers stay small and printable.
func ownerSuffix(invocationID string) string {
	plain := len(invocationID) <= 64 && !strings.ContainsFunc(invocationID, func(r rune) bool {
		return !(r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	})
	if plain {
		return invocationID
	}
	sum := sha256.Sum256([]byte(invocationID))
	return "h" + hex.EncodeToString(sum[:8])
}

// Transient reports whether err may pass by itself: throttling, timeouts,
// 5xx, a lock held or lost.
func Transient(err error) bool {
	return errors.Is(err, database.ErrUnavailable) ||
		errors.Is(err, lock.ErrHeld) || errors.Is(err, lock.ErrLost) ||
		errors.Is(err, context.DeadlineExceeded) ||
		clusterservice.IsTransient(err)
}

// Poll brings one operation up to date. Cluster Service is called without
// the lock; the lock is taken only when there is something to write.
func (f *Function) Poll(ctx context.Context, log *slog.Logger, msg Message, owner string) (Outcome, error) {
	op, err := f.DB.GetOperation(ctx, msg.SubscriptionID, msg.OperationID)
	if errors.Is(err, database.ErrNotFound) {
		log.Info("operation item not found; nothing to do")
		return OutcomeGone, nil
	}
	if errors.Is(err, database.ErrMalformed) {
		log.Error("operation item is unreadable; left as it is", "error", err)
		return OutcomeInvalid, nil
	}
	if err != nil {
		return "", err
	}
	if err := op.Validate(); err != nil {
		log.Error("operation item is invalid; left as it is", "error", err)
		return OutcomeInvalid, nil
	}
	log = log.With("resource_id", op.ExternalID, "internal_id", op.InternalID)

	if op.Status.IsTerminal() {
		if op.NotificationURI == "" {
			return OutcomeDone, nil
		}
		return f.notify(ctx, log, op, owner)
	}

	id, err := clusterservice.ParseInternalID(op.InternalID)
	if err != nil {
		log.Error("internalId is not a Cluster Service path; left as it is", "error", err)
		return OutcomeInvalid, nil
	}
	// Checked again just before the call: the read may have waited past the
	// next scan's start.
	if msg.superseded(f.now()) {
		return OutcomeSuperseded, nil
	}
	st, err := f.Cluster.Status(ctx, id)
	if errors.Is(err, clusterservice.ErrNotFound) {
		if op.Request != arm.RequestDelete {
			log.Warn("Cluster Service does not know the resource; left as it is", "request", op.Request)
			return OutcomeUnchanged, nil
		}
		return f.write(ctx, log, msg, owner, func(op *database.Operation) clusterservice.Decision {
			return clusterservice.Decision{State: arm.ProvisioningStateSucceeded, Change: op.Status != arm.ProvisioningStateSucceeded}
		}, op.ExternalID, true)
	}
	if err != nil {
		return "", fmt.Errorf("cluster service: %w", err)
	}
	decide := func(op *database.Operation) clusterservice.Decision {
		return clusterservice.Decide(id.Kind, st, op.Request, op.Status)
	}
	d := decide(op)
	if d.Problem != "" {
		log.Warn("Cluster Service state not applied", "cs_state", st.State, "status", op.Status, "request", op.Request, "problem", d.Problem)
		return OutcomeUnchanged, nil
	}
	if !d.Change {
		return OutcomeUnchanged, nil
	}
	return f.write(ctx, log, msg, owner, decide, op.ExternalID, false)
}
