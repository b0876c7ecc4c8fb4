package poll

import (
	"context"
	"errors"
	"fmt"

	"github.com/opstatus/opstatus/internal/clusterservice"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/internal/opkind"
	"github.com/opstatus/opstatus/internal/pending"
)

// change is a write an operation needs: what Cluster Service said, on which
// the decision is made again under the lock (decide), the cluster object a
// succeeded Create bills from, and the Resources item the write moves.
type change struct {
	kind     opkind.Kind
	id       clusterservice.InternalID
	said     said
	cluster  *clusterservice.Cluster // with billingOpen
	resource *resourceRead           // the Resources item as read with the operation, unless a delete's
}

// check reads one operation and asks Cluster Service about it, without the
// lock, in a place of the process's checks gate (see New). It gathers what
// the decision needs and leaves in the item the outcome, or the change to
// write under the lock, or the ended operation to notify ARM of.
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
	case errors.Is(err, database.ErrNoSubscription), errors.Is(err, database.ErrOtherSubscription):
		// Nothing can be written under the message's subscription lock.
		it.log.Error("operation is not one of the message's subscription; left as it is", "error", err)
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
	// By scan's own rule: what poll calls invalid, scan never sends.
	kind, id, err := pending.Check(pending.Item{SubscriptionID: it.msg.SubscriptionID, OperationID: it.msg.OperationID,
		Status: op.Status, Request: op.Request, InternalID: op.InternalID})
	if err != nil {
		it.log.Error("operation cannot be polled; left as it is", "error", err, "reason", pending.Reason(err))
		it.outcome = OutcomeInvalid
		return
	}
	if op.Status.IsTerminal() {
		it.outcome = OutcomeDone
		if op.NotificationURI != "" {
			it.ended = op
		}
		return
	}
	// Checked again just before the call: the wait for a slot, or the
	// read, may have lasted past the next scan's start.
	if r.superseded() {
		it.outcome = OutcomeSuperseded
		return
	}
	facts := r.facts(op)
	s, err := r.ask(ctx, it, kind, id, facts)
	if err != nil {
		err = fmt.Errorf("cluster service: %w", err)
		if !endsOverdue(facts, err) {
			it.defer_(err)
			return
		}
		s = said{failure: err}
	}
	d := decide(kind, facts, s)
	var cluster *clusterservice.Cluster
	if d.Billing == billingOpen {
		cl, err := r.f.Cluster.Cluster(ctx, id)
		switch {
		case err == nil:
			cluster = &cl
		case !endsOverdue(facts, err):
			it.defer_(fmt.Errorf("cluster service, for the cluster's billing: %w", err))
			return
		default:
			// The Create cannot be written Succeeded without its billing.
			s.failure = fmt.Errorf("cluster service, for the cluster's billing: %w", err)
			d = decide(kind, facts, s)
		}
	}
	switch {
	case d.Overdue > 0 && s.failure != nil:
		it.log.Error("operation past its deadline and Cluster Service fails for good; ending it Failed",
			"request", op.Request, "deadline", d.Overdue, "error", s.failure)
	case d.Overdue > 0:
		it.log.Warn("operation past its deadline; ending it Failed", "request", op.Request, "deadline", d.Overdue)
	case d.Problem != "":
		it.log.Warn("Cluster Service's answer not applied", "status", op.Status, "request", op.Request, "problem", d.Problem)
		it.outcome = OutcomeUnchanged
		return
	case !d.Change:
		it.outcome = OutcomeUnchanged
		return
	}
	c := &change{kind: kind, id: id, said: s, cluster: cluster}
	if kind.WritesResources() && !d.DeleteResources {
		c.resource = r.f.readResource(ctx, op)
	}
	it.change = c
}

// endsOverdue reports whether a failed Cluster Service call ends the
// operation of facts by its deadline rather than leaving it for the next
// scan: past the deadline, a failure that is not transient (a 403, a
// malformed reply, a list that does not end) never keeps it pending. A
// transient one does, as before the deadline: Cluster Service may yet
// answer with a status that ends the operation, which wins over the
// deadline, and an outage must not fail every overdue operation at once.
func endsOverdue(op facts, err error) bool {
	return op.overdue > 0 && !Transient(err)
}

// ask makes the Cluster Service calls of kind's row for the operation and
// returns what they said. An error is a failure to be retried by the next
// scan; Cluster Service's own 404 is an answer (said.gone).
func (r *run) ask(ctx context.Context, it *item, kind opkind.Kind, id clusterservice.InternalID, op facts) (said, error) {
	var s said
	var err error
	switch kind {
	case opkind.Cluster:
		s.status, err = r.f.Cluster.Status(ctx, id)
	case opkind.NodePool:
		s.status, err = r.nodePoolStatus(ctx, id)
	case opkind.ExternalAuth:
		s.auth, err = r.f.Cluster.ExternalAuth(ctx, id)
	case opkind.CredentialRequest:
		s.credential, err = r.f.Cluster.Credential(ctx, id)
	case opkind.CredentialRevocation:
		s.credentials, err = r.f.Cluster.Credentials(ctx, id)
	default:
		return s, fmt.Errorf("no Cluster Service call for kind %q", kind)
	}
	if errors.Is(err, clusterservice.ErrNotFound) {
		return said{gone: true}, nil
	}
	if err != nil {
		return s, err
	}
	if kind != opkind.Cluster || !needsInflightChecks(s.status) {
		return s, nil
	}
	// The provision error only says that inflight checks failed; the
	// checks say which. When they cannot be read for good, or the
	// operation is past its deadline, the provision error is all there
	// is: Cluster Service has failed the cluster either way.
	s.checks, err = r.f.Cluster.InflightChecks(ctx, id)
	switch {
	case err == nil:
		if problem := inflightProblem(s.status, s.checks); problem != "" {
			it.log.Error("inflight checks do not explain the failure", "problem", problem, "cs_error_code", s.status.ErrorCode)
		}
	case Transient(err) && op.overdue == 0:
		return s, err
	default:
		it.log.Error("inflight checks unreadable; ending the operation with the provision error", "error", err)
		s.checks, s.checksErr = nil, err
	}
	return s, nil
}

// nodePoolStatus reads the status of a node pool of either form. ARO-HCP's
// 2024-10 frontend wrote node pools under clusters_mgmt, whose node pools
// have no status to GET (their NodePoolStatus then had no state), while
// Cluster Service serves one node pool under both APIs with the same ids:
// so a clusters_mgmt node pool's status is the aro_hcp one's, as ARO-HCP's
// backend read clusters_mgmt clusters' statuses under aro_hcp. Never
// clusters_mgmt's {internalId}/status: the 404 of a path that API does not
// serve can be an OCM error too, and would end a delete at once. The aro_hcp
// status's 404 is the node pool gone only when the node pool's own API
// answers 404 for the object as well (GET {internalId}): an aro_hcp API
// that does not serve the cluster says nothing about the node pool.
func (r *run) nodePoolStatus(ctx context.Context, id clusterservice.InternalID) (clusterservice.Status, error) {
	if id.API != clusterservice.APIClustersMgmtV1 {
		return r.f.Cluster.Status(ctx, id)
	}
	hcp, err := id.InAPI(clusterservice.APIAroHCPV1alpha1)
	if err != nil {
		return clusterservice.Status{}, err
	}
	st, err := r.f.Cluster.Status(ctx, hcp)
	if !errors.Is(err, clusterservice.ErrNotFound) {
		return st, err
	}
	if err := r.f.Cluster.NodePool(ctx, id); err != nil {
		return clusterservice.Status{}, err
	}
	// Not ErrNotFound: nothing is known of the node pool's state.
	return clusterservice.Status{}, fmt.Errorf("GET %s/status answered 404, yet GET %s finds the node pool: "+
		"Cluster Service's aro_hcp API does not serve it", hcp.Path, id.Path)
}

// facts is what the decision takes of op, now.
func (r *run) facts(op *database.Operation) facts {
	now := r.f.now()
	return facts{request: op.Request, current: op.Status, overdue: r.f.Deadlines.pastDeadline(op, now), now: now}
}
