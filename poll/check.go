package poll

import (
	"context"
	"errors"
	"fmt"

	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/clusterservice"
	"github.com/opstatus/opstatus/internal/database"
)

// change is a write an operation needs: decide says what to write on a
// fresh read of the operation (under the lock); deleteResources says that
// a finished delete removes its Resources items.
type change struct {
	decide          func(*database.Operation) clusterservice.Decision
	deleteResources bool
	pastDeadline    bool // it ends the operation for passing its deadline
}

// check reads one operation and asks Cluster Service about it, without the
// lock, in one of the process's slots (Function.places). It leaves in it the
// outcome, or the change to write under the lock, or the ended operation to
// notify ARM of.
func (r *run) check(ctx context.Context, it *item) {
	op, err := r.f.DB.GetOperation(ctx, it.msg.SubscriptionID, it.msg.OperationID)
	switch {
	case errors.Is(err, database.ErrNotFound):
		it.log.Info("operation item not found; nothing to do")
		it.outcome = OutcomeGone
		return
	case errors.Is(err, database.ErrMalformed):
		it.log.Error("operation item is unreadable; left as it is", "error", err)
		it.outcome = OutcomeInvalid
		return
	case err != nil:
		it.defer_(err)
		return
	}
	if err := op.Validate(); err != nil {
		it.log.Error("operation item is invalid; left as it is", "error", err)
		it.outcome = OutcomeInvalid
		return
	}
	it.log = it.log.With("resource_id", op.ExternalID, "internal_id", op.InternalID)
	it.op = op

	if op.Status.IsTerminal() {
		it.outcome = OutcomeDone
		if op.NotificationURI != "" {
			it.ended = op
		}
		return
	}

	id, err := clusterservice.ParseInternalID(op.InternalID)
	if err != nil {
		it.log.Error("internalId is not a Cluster Service path; left as it is", "error", err)
		it.outcome = OutcomeInvalid
		return
	}
	// Checked again just before the call: the wait for a slot, or the
	// read, may have lasted past the next scan's start.
	if r.superseded() {
		it.outcome = OutcomeSuperseded
		return
	}
	st, err := r.f.Cluster.Status(ctx, id)
	traceStatus(ctx, id, st)
	// A status that ends the operation wins over its deadline; anything
	// else past the deadline ends it Failed.
	limit := r.f.Deadlines.pastDeadline(op, r.f.now())
	if errors.Is(err, clusterservice.ErrNotFound) {
		if op.Request != arm.RequestDelete {
			if limit > 0 {
				it.log.Warn("Cluster Service does not know the resource, and the operation is past its deadline; ending it Failed",
					"request", op.Request, "deadline", limit)
				it.change = deadlineChange(limit, clusterservice.Status{})
				return
			}
			it.log.Warn("Cluster Service does not know the resource; left as it is", "request", op.Request)
			it.outcome = OutcomeUnchanged
			return
		}
		it.change = &change{deleteResources: true, decide: func(op *database.Operation) clusterservice.Decision {
			return clusterservice.Decision{State: arm.ProvisioningStateSucceeded, Change: op.Status != arm.ProvisioningStateSucceeded}
		}}
		return
	}
	if err != nil {
		it.defer_(fmt.Errorf("cluster service: %w", err))
		return
	}
	decide := func(op *database.Operation) clusterservice.Decision {
		return clusterservice.Decide(id.Kind, st, op.Request, op.Status)
	}
	if clusterservice.NeedsInflightChecks(id.Kind, st) {
		// The provision error only says that inflight checks failed; the
		// checks say which. Cluster Service has failed the cluster already,
		// so the checks only refine the error: a call that may pass by
		// itself is retried by the next scan, until the deadline; one that
		// will not ends the operation with the provision error at once,
		// all there is.
		checks, err := r.f.Cluster.InflightChecks(ctx, id)
		switch {
		case err != nil && !clusterservice.IsTransient(err):
			it.log.Error("inflight checks unreadable; ending the operation with the provision error", "error", err)
		case err != nil && limit > 0:
			it.log.Warn("inflight checks unreadable past the deadline; ending the operation with the provision error", "error", err)
		case err != nil:
			it.defer_(fmt.Errorf("cluster service: %w", err))
			return
		default:
			failure, problem := clusterservice.InflightError(st, checks)
			if problem != "" {
				it.log.Error("inflight checks do not explain the failure", "problem", problem, "cs_error_code", st.ErrorCode)
			}
			decide = func(op *database.Operation) clusterservice.Decision {
				return clusterservice.DecideInflight(st, failure, op.Request, op.Status)
			}
		}
	}
	d := decide(op)
	switch {
	case limit > 0 && !(d.Change && d.Problem == "" && d.State.IsTerminal()):
		it.log.Warn("operation past its deadline; ending it Failed", "request", op.Request, "deadline", limit, "cs_state", st.State)
		it.change = deadlineChange(limit, st)
	case d.Problem != "":
		it.log.Warn("Cluster Service state not applied", "cs_state", st.State, "status", op.Status, "request", op.Request, "problem", d.Problem)
		it.outcome = OutcomeUnchanged
	case !d.Change:
		it.outcome = OutcomeUnchanged
	default:
		it.change = &change{decide: decide}
	}
}
