package poll

import (
	"fmt"
	"strings"
	"time"

	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/clusterservice"
	"github.com/opstatus/opstatus/internal/opkind"
)

// This file is the state mapping: one pure function per kind of operation
// from what Cluster Service said to what poll writes, as the tables of
// docs/design.md ("State mapping") give them, and decide, which applies the
// rules every kind shares.

// said is what Cluster Service said about an operation's object: what
// check gathered for the decision.
type said struct {
	// gone is Cluster Service's own 404 for the object (for a revocation,
	// for its cluster).
	gone bool
	// status is a cluster's or node pool's.
	status clusterservice.Status
	// checks are the inflight checks of a cluster in error with
	// OCM4001; checksErr says why they could not be read, for good.
	checks    []clusterservice.InflightCheck
	checksErr error
	// auth is an external auth.
	auth clusterservice.ExternalAuth
	// credential is a requested credential; credentials every credential
	// of a cluster whose credentials are being revoked.
	credential  clusterservice.Credential
	credentials []clusterservice.Credential
	// failure is a Cluster Service call that failed for good (see
	// endsOverdue): what the table would read is unknown.
	failure error
}

// facts is what a decision takes of the operation.
type facts struct {
	request arm.Request
	current arm.ProvisioningState
	// overdue is the deadline the operation has passed, zero when it has
	// not passed one.
	overdue time.Duration
	// now is the clock, for credentials' expiry.
	now time.Time
}

// billingStep is the billing write a decision needs before the operation's.
type billingStep int

const (
	billingNone  billingStep = iota
	billingOpen              // a cluster Create succeeded: its open billing item must exist
	billingClose             // a cluster Delete finished: its open billing item gets its deletionTime
)

// decision is what poll does with an operation.
type decision struct {
	// State is the status to write; it is the current one when nothing
	// changes.
	State arm.ProvisioningState
	// Error comes with State Failed.
	Error *arm.CloudErrorBody
	// Change says that something is to be written.
	Change bool
	// Problem says why Cluster Service's answer was not applied (a state
	// that is not in the tables, or that contradicts the operation); it is
	// logged and nothing is written.
	Problem string
	// DeleteResources: a finished delete removes its Resources items.
	DeleteResources bool
	// Overdue is the deadline that ends the operation, when one does.
	Overdue time.Duration
	// Billing is the billing write that must precede the operation's.
	Billing billingStep
}

// verdict is what a kind's table makes of an answer.
type verdict struct {
	state           arm.ProvisioningState
	err             *arm.CloudErrorBody
	problem         string
	deleteResources bool
}

// tables are the kinds' state tables.
var tables = map[opkind.Kind]func(facts, said) verdict{
	opkind.Cluster:              clusterVerdict,
	opkind.NodePool:             nodePoolVerdict,
	opkind.ExternalAuth:         externalAuthVerdict,
	opkind.CredentialRequest:    credentialVerdict,
	opkind.CredentialRevocation: revocationVerdict,
}

// decide applies kind's table to what Cluster Service said about the
// operation op, then the rules every kind shares: a finished operation
// never changes; one past its deadline ends Failed, unless the answer ends
// it (a call that failed for good, said.failure, ends nothing); Change says whether anything is to be written; a Failed or Canceled
// written carries an error with a code and a message (endError).
func decide(kind opkind.Kind, op facts, s said) decision {
	d := decideState(kind, op, s)
	if d.Change {
		d.Error = endError(d.State, d.Error)
	}
	return d
}

// decideState is decide without the rule on errors.
func decideState(kind opkind.Kind, op facts, s said) decision {
	unchanged := decision{State: op.current}
	table, ok := tables[kind]
	switch {
	case !ok:
		unchanged.Problem = fmt.Sprintf("unknown kind of operation %q", kind)
		return unchanged
	case !op.current.IsKnown():
		unchanged.Problem = fmt.Sprintf("unknown current status %q", op.current)
		return unchanged
	case op.current.IsTerminal():
		// check never asks; a fresh read under the lock may find it so.
		return unchanged
	}
	var v verdict
	if s.failure != nil {
		v.problem = fmt.Sprintf("Cluster Service failed: %v", s.failure)
	} else {
		v = table(op, s)
	}
	d := decision{State: v.state, Error: v.err, Problem: v.problem, DeleteResources: v.deleteResources}
	if d.State == "" {
		d.State = op.current
	}
	ends := d.Problem == "" && d.State.IsTerminal()
	if op.overdue > 0 && !ends {
		return overdue(op, s)
	}
	if d.Problem != "" {
		d.State, d.Error, d.DeleteResources = op.current, nil, false
		return d
	}
	d.Change = d.State != op.current || d.DeleteResources
	if !d.Change {
		d.Error = nil
		return d
	}
	if kind == opkind.Cluster {
		switch {
		case op.request == arm.RequestCreate && d.State == arm.ProvisioningStateSucceeded:
			d.Billing = billingOpen
		case op.request == arm.RequestDelete && d.DeleteResources:
			d.Billing = billingClose
		}
	}
	return d
}

// endError is the error written with state: for Failed and Canceled, err
// with an empty code or message (its details' too) given ARO-HCP's, since
// ARM's asynchronous-operations contract requires both; nil for any other
// state.
func endError(state arm.ProvisioningState, err *arm.CloudErrorBody) *arm.CloudErrorBody {
	var code, msg string
	switch state {
	case arm.ProvisioningStateFailed:
		code, msg = arm.CodeInternalServerError, msgInternalServerError
	case arm.ProvisioningStateCanceled:
		code, msg = arm.CodeCanceled, msgSuperseded
	default:
		return nil
	}
	out := &arm.CloudErrorBody{}
	if err != nil {
		*out = *err
	}
	filled(out, code, msg)
	return out
}

// filled gives e and its details the code and message they lack; details
// get InternalServerError's, whatever e's.
func filled(e *arm.CloudErrorBody, code, msg string) {
	if e.Code == "" {
		e.Code = code
	}
	if e.Message == "" {
		e.Message = msg
	}
	if len(e.Details) == 0 {
		return
	}
	details := make([]arm.CloudErrorBody, len(e.Details))
	for i, d := range e.Details {
		filled(&d, arm.CodeInternalServerError, msgInternalServerError)
		details[i] = d
	}
	e.Details = details
}

// overdue ends an operation that has passed its deadline: Failed,
// InternalServerError, with what Cluster Service last said when it said
// anything.
func overdue(op facts, s said) decision {
	msg := fmt.Sprintf("The operation did not complete within its deadline of %s.", op.overdue)
	if last := lastWords(s); last != "" {
		msg += " Cluster Service: " + last
	}
	return decision{
		State:   arm.ProvisioningStateFailed,
		Error:   &arm.CloudErrorBody{Code: arm.CodeInternalServerError, Message: msg},
		Change:  true,
		Overdue: op.overdue,
	}
}

// lastWords is the message of what Cluster Service said, if it said one.
func lastWords(s said) string {
	for _, m := range []string{s.status.ErrorMessage, s.status.Description, s.auth.Message} {
		if m != "" {
			return m
		}
	}
	return ""
}

// Cluster Service states as it sends them, compared exactly: the API model
// defines them in lowercase and ocm-sdk-go passes them through unchanged,
// so a value in any other case is not one we know, and guessing could
// write a wrong status.
const (
	csError            = "error"
	csRecoverableError = "recoverable_error" // node pools only
	csInstalling       = "installing"
	csUpdating         = "updating"
	csReady            = "ready"
	csUninstalling     = "uninstalling"
	csPending          = "pending"
	csValidating       = "validating"
	csPendingUpdate    = "pending_update"    // node pools only
	csValidatingUpdate = "validating_update" // node pools only

	inflightFailed = "failed" // an inflight check's
)

// Break-glass credential statuses.
const (
	credCreated            = "created"
	credIssued             = "issued"
	credFailed             = "failed"
	credAwaitingRevocation = "awaiting_revocation"
	credRevoked            = "revoked"
	credExpired            = "expired"
)

// The ARM errors opstatus words itself; the first two as ARO-HCP words
// them.
const (
	msgInternalServerError    = "Internal server error."
	msgSuperseded             = "This operation was superseded by another"
	msgCredentialFailed       = "Failed to provision cluster credential"
	msgRevocationFailed       = "Failed to revoke cluster credential"
	codeMultipleErrors        = "MultipleErrorsOccurred"
	msgMultipleErrors         = "Cluster provisioning failed due to multiple errors"
	provisionErrInflightCheck = "OCM4001"
)

// goneVerdict: Cluster Service's own 404 finishes a delete, which removes
// the Resources items; for any other request nothing is known yet, and the
// deadline ends the wait.
func goneVerdict(op facts) verdict {
	if op.request == arm.RequestDelete {
		return verdict{state: arm.ProvisioningStateSucceeded, deleteResources: true}
	}
	return verdict{problem: fmt.Sprintf("Cluster Service does not know the object of this %s", op.request)}
}

// clusterVerdict is the cluster table.
func clusterVerdict(op facts, s said) verdict {
	if s.gone {
		return goneVerdict(op)
	}
	st := s.status
	switch st.State {
	case csError:
		return verdict{state: arm.ProvisioningStateFailed, err: clusterError(st, s.checks, s.checksErr)}
	case csInstalling:
		return verdict{state: arm.ProvisioningStateProvisioning}
	case csUpdating:
		return verdict{state: arm.ProvisioningStateUpdating}
	case csReady:
		return ready(op)
	case csUninstalling:
		return verdict{state: arm.ProvisioningStateDeleting}
	case csPending, csValidating:
		return waiting(op, "cluster", st.State)
	}
	return unhandled("cluster", st.State)
}

// needsInflightChecks reports whether a cluster's status st comes with
// inflight checks that say more than its provision error.
func needsInflightChecks(st clusterservice.Status) bool {
	return st.State == csError && st.ErrorCode == provisionErrInflightCheck
}

// clusterError is a failed cluster's error: its provision error, or, for
// one that failed its inflight checks and whose checks were read
// (checksErr nil), the error built from the failed checks as ARO-HCP's
// backend does (one: that check's details.error; several:
// MultipleErrorsOccurred with one detail each; none, which should not
// happen: InternalServerError with the provision message). decide gives
// an empty code or message ARO-HCP's.
func clusterError(st clusterservice.Status, checks []clusterservice.InflightCheck, checksErr error) *arm.CloudErrorBody {
	provision := &arm.CloudErrorBody{Code: st.ErrorCode, Message: st.ErrorMessage}
	if provision.Message == "" {
		provision.Message = st.Description
	}
	if !needsInflightChecks(st) || checksErr != nil {
		return provision
	}
	var failed []arm.CloudErrorBody
	for _, c := range checks {
		if c.State != inflightFailed {
			continue
		}
		msg := c.Error
		if msg == "" {
			msg = fmt.Sprintf("Inflight check %q failed.", c.Name)
		}
		failed = append(failed, arm.CloudErrorBody{Code: arm.CodeInternalServerError, Message: msg})
	}
	switch len(failed) {
	case 0:
		return &arm.CloudErrorBody{Code: arm.CodeInternalServerError, Message: provision.Message}
	case 1:
		return &failed[0]
	}
	return &arm.CloudErrorBody{Code: codeMultipleErrors, Message: msgMultipleErrors, Details: failed}
}

// inflightProblem says what is wrong with the checks of a cluster that
// failed them, for an error log; "" when they explain the failure.
func inflightProblem(st clusterservice.Status, checks []clusterservice.InflightCheck) string {
	var problems []string
	failed := 0
	for _, c := range checks {
		if c.State != inflightFailed {
			continue
		}
		failed++
		if c.Error == "" {
			problems = append(problems, fmt.Sprintf("failed inflight check %q has no details.error", c.Name))
		}
	}
	if failed == 0 {
		problems = append(problems, fmt.Sprintf("provision error code %s, but none of the cluster's %d inflight checks failed", st.ErrorCode, len(checks)))
	}
	return strings.Join(problems, "; ")
}

// nodePoolVerdict is the node pool table.
func nodePoolVerdict(op facts, s said) verdict {
	if s.gone {
		return goneVerdict(op)
	}
	st := s.status
	switch st.State {
	case csError, csRecoverableError:
		return verdict{state: arm.ProvisioningStateFailed,
			err: &arm.CloudErrorBody{Code: arm.CodeInternalServerError, Message: st.ErrorMessage}}
	case csInstalling:
		return verdict{state: arm.ProvisioningStateProvisioning}
	case csUpdating:
		return verdict{state: arm.ProvisioningStateUpdating}
	case csReady:
		return ready(op)
	case csUninstalling:
		return verdict{state: arm.ProvisioningStateDeleting}
	case csPending, csValidating, csPendingUpdate, csValidatingUpdate:
		return waiting(op, "node pool", st.State)
	}
	return unhandled("node pool", st.State)
}

// externalAuthVerdict is the external auth table. An object with no state
// at all is done for a Create or Update: Cluster Service answered with it,
// as ARO-HCP's scanner counted it before external auths had states.
func externalAuthVerdict(op facts, s said) verdict {
	if s.gone {
		return goneVerdict(op)
	}
	a := s.auth
	switch {
	case !a.HasState && op.request == arm.RequestDelete:
		return verdict{}
	case !a.HasState:
		return verdict{state: arm.ProvisioningStateSucceeded}
	}
	switch a.State {
	case csReady:
		return ready(op)
	case csError:
		return verdict{state: arm.ProvisioningStateFailed,
			err: &arm.CloudErrorBody{Code: arm.CodeInternalServerError, Message: a.Message}}
	case csUninstalling:
		return verdict{state: arm.ProvisioningStateDeleting}
	}
	return unhandled("external auth", a.State)
}

// credentialVerdict is the table of a credential request.
func credentialVerdict(op facts, s said) verdict {
	if s.gone {
		return verdict{problem: "Cluster Service does not know the credential"}
	}
	switch c := s.credential; c.Status {
	case credCreated:
		return verdict{state: arm.ProvisioningStateProvisioning}
	case credIssued:
		return verdict{state: arm.ProvisioningStateSucceeded}
	case credFailed:
		return verdict{state: arm.ProvisioningStateFailed,
			err: &arm.CloudErrorBody{Code: arm.CodeInternalServerError, Message: msgCredentialFailed}}
	case credAwaitingRevocation, credRevoked, credExpired:
		// A revocation overtook the request: ARO-HCP's frontend cancels
		// a pending credential request with this error.
		return verdict{state: arm.ProvisioningStateCanceled,
			err: &arm.CloudErrorBody{Code: arm.CodeCanceled, Message: msgSuperseded}}
	default:
		return unhandled("credential", c.Status)
	}
}

// revocationVerdict is the table of a credential revocation, over every
// credential of the cluster that has not expired; first match wins. A
// credential without an expiry is counted as unexpired: only its status
// can then say it is revoked.
func revocationVerdict(op facts, s said) verdict {
	if s.gone {
		// The cluster is gone, and its credentials with it.
		return verdict{state: arm.ProvisioningStateSucceeded}
	}
	var awaiting, failed, live int
	var unknown []string
	for _, c := range s.credentials {
		if !c.Expiration.IsZero() && !c.Expiration.After(op.now) {
			continue
		}
		switch c.Status {
		case credAwaitingRevocation:
			awaiting++
		case credFailed:
			failed++
		case credCreated, credIssued:
			live++
		case credRevoked, credExpired:
		default:
			unknown = append(unknown, fmt.Sprintf("%q", c.Status))
		}
	}
	switch {
	case awaiting > 0:
		return verdict{state: arm.ProvisioningStateDeleting}
	case failed > 0:
		return verdict{state: arm.ProvisioningStateFailed,
			err: &arm.CloudErrorBody{Code: arm.CodeInternalServerError, Message: msgRevocationFailed}}
	case live > 0:
		// The revocation has not reached them yet.
		return verdict{state: arm.ProvisioningStateDeleting}
	case len(unknown) > 0:
		return verdict{problem: "unhandled credential status " + strings.Join(unknown, ", ")}
	}
	return verdict{state: arm.ProvisioningStateSucceeded}
}

// ready: Succeeded, except that during a Delete the object is still there
// until Cluster Service starts removing it.
func ready(op facts) verdict {
	if op.request == arm.RequestDelete {
		return verdict{}
	}
	return verdict{state: arm.ProvisioningStateSucceeded}
}

// waiting handles the states in which Cluster Service has not started yet:
// they leave the status as it is, and are expected only while the
// operation is Accepted or in the in-progress status of its request.
func waiting(op facts, what, state string) verdict {
	cur := op.current
	expected := cur == arm.ProvisioningStateAccepted ||
		cur == arm.ProvisioningStateProvisioning && op.request == arm.RequestCreate ||
		cur == arm.ProvisioningStateUpdating && op.request == arm.RequestUpdate ||
		cur == arm.ProvisioningStateDeleting && op.request == arm.RequestDelete
	if !expected {
		return verdict{problem: fmt.Sprintf("inconsistent: %s state %q while the %s operation is %s", what, state, op.request, cur)}
	}
	return verdict{}
}

// unhandled reports a state that is not in the tables.
func unhandled(what, state string) verdict {
	return verdict{problem: fmt.Sprintf("unhandled %s state %q", what, state)}
}
