package clusterservice

import (
	"fmt"

	"github.com/opstatus/opstatus/internal/arm"
)

// Decision is what the poller should do with an operation after reading its
// Cluster Service status.
type Decision struct {
	// State is the status to write; it equals current when nothing changes.
	State arm.ProvisioningState
	// Error is set together with State == Failed.
	Error *arm.CloudErrorBody
	// Change is true when something must be written.
	Change bool
	// Problem is non-empty when the Cluster Service state is inconsistent with
	// the operation or not handled; the caller logs it and writes nothing.
	Problem string
}

// Cluster Service states as it sends them. The values are compared exactly:
// the API model defines them in lowercase and ocm-sdk-go passes them through
// unchanged, so a value in any other case is not one we know. Guessing would
// risk writing a wrong status; reporting it as unhandled (and writing nothing)
// is safe and visible in the logs.
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
)

// Decide maps a Cluster Service status onto the status of an operation, as
// the tables "Cluster states → ProvisioningState" and "Node pool states" of
// ARCHITECTURE.md say. request is the operation's request and current its
// status.
//
// On top of the tables, Decide never moves an operation out of a terminal
// status (Succeeded, Failed, Canceled): the contract says those never change,
// so a table result that differs from a terminal current is reported as a
// Problem instead. Unknown kinds, requests and current statuses are Problems
// too. Change is State != current: when the status stays Failed, the error
// was written when it became Failed.
func Decide(kind Kind, st Status, request arm.Request, current arm.ProvisioningState) Decision {
	unchanged := Decision{State: current}
	switch {
	case kind != KindCluster && kind != KindNodePool:
		unchanged.Problem = fmt.Sprintf("unknown object kind %s", kind)
		return unchanged
	case !request.IsKnown():
		unchanged.Problem = fmt.Sprintf("unknown request %q", request)
		return unchanged
	case !current.IsKnown():
		unchanged.Problem = fmt.Sprintf("unknown current status %q", current)
		return unchanged
	}

	var d Decision
	if kind == KindCluster {
		d = decideCluster(st, request, current)
	} else {
		d = decideNodePool(st, request, current)
	}
	if d.Problem != "" {
		return d
	}
	if d.State == current {
		d.Change = false
		return d
	}
	if current.IsTerminal() {
		unchanged.Problem = fmt.Sprintf("%s state %q would move the %s operation from terminal %s to %s; terminal statuses never change",
			kind, st.State, request, current, d.State)
		return unchanged
	}
	d.Change = true
	return d
}

// decideCluster applies the cluster table.
func decideCluster(st Status, request arm.Request, current arm.ProvisioningState) Decision {
	switch st.State {
	case csError:
		code := st.ErrorCode
		if code == "" {
			code = arm.CodeInternalServerError
		}
		message := st.ErrorMessage
		if message == "" {
			message = st.Description
		}
		return Decision{
			State: arm.ProvisioningStateFailed,
			Error: &arm.CloudErrorBody{Code: code, Message: message},
		}
	case csInstalling:
		return Decision{State: arm.ProvisioningStateProvisioning}
	case csUpdating:
		return Decision{State: arm.ProvisioningStateUpdating}
	case csReady:
		return readyDecision(request, current)
	case csUninstalling:
		return Decision{State: arm.ProvisioningStateDeleting}
	case csPending, csValidating:
		return waitingDecision(KindCluster, st.State, request, current)
	}
	return unhandled(KindCluster, st.State, current)
}

// decideNodePool applies the node pool table.
func decideNodePool(st Status, request arm.Request, current arm.ProvisioningState) Decision {
	switch st.State {
	case csError, csRecoverableError:
		return Decision{
			State: arm.ProvisioningStateFailed,
			Error: &arm.CloudErrorBody{Code: arm.CodeInternalServerError, Message: st.ErrorMessage},
		}
	case csInstalling:
		return Decision{State: arm.ProvisioningStateProvisioning}
	case csUpdating:
		return Decision{State: arm.ProvisioningStateUpdating}
	case csReady:
		return readyDecision(request, current)
	case csUninstalling:
		return Decision{State: arm.ProvisioningStateDeleting}
	case csPending, csValidating, csPendingUpdate, csValidatingUpdate:
		return waitingDecision(KindNodePool, st.State, request, current)
	}
	return unhandled(KindNodePool, st.State, current)
}

// readyDecision: ready means Succeeded, except that during a Delete the
// object is still there until Cluster Service starts uninstalling it.
func readyDecision(request arm.Request, current arm.ProvisioningState) Decision {
	if request == arm.RequestDelete {
		return Decision{State: current}
	}
	return Decision{State: arm.ProvisioningStateSucceeded}
}

// waitingDecision handles the states in which Cluster Service has not started
// yet: they leave the status as it is, and are expected only while the
// operation is Accepted or in the in-progress status that matches its request.
func waitingDecision(kind Kind, state string, request arm.Request, current arm.ProvisioningState) Decision {
	expected := current == arm.ProvisioningStateAccepted ||
		current == arm.ProvisioningStateProvisioning && request == arm.RequestCreate ||
		current == arm.ProvisioningStateUpdating && request == arm.RequestUpdate ||
		current == arm.ProvisioningStateDeleting && request == arm.RequestDelete
	d := Decision{State: current}
	if !expected {
		d.Problem = fmt.Sprintf("inconsistent: %s state %q while the %s operation is %s", kind, state, request, current)
	}
	return d
}

// unhandled reports a state that is not in the tables.
func unhandled(kind Kind, state string, current arm.ProvisioningState) Decision {
	return Decision{State: current, Problem: fmt.Sprintf("unhandled %s state %q", kind, state)}
}
