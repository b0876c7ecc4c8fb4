// Package arm holds the Azure Resource Manager types that opstatus reads and
// writes: provisioning states, request kinds, error bodies and the operation
// status sent to a notification URI.
package arm

import "time"

// ProvisioningState is the ARM provisioning state of a resource or the status
// of an asynchronous operation.
type ProvisioningState string

// Provisioning states as the frontend writes them.
const (
	ProvisioningStateSucceeded    ProvisioningState = "Succeeded"
	ProvisioningStateFailed       ProvisioningState = "Failed"
	ProvisioningStateCanceled     ProvisioningState = "Canceled"
	ProvisioningStateAccepted     ProvisioningState = "Accepted"
	ProvisioningStateProvisioning ProvisioningState = "Provisioning"
	ProvisioningStateUpdating     ProvisioningState = "Updating"
	ProvisioningStateDeleting     ProvisioningState = "Deleting"
)

// TerminalStates are the states after which an operation never changes.
var TerminalStates = []ProvisioningState{
	ProvisioningStateSucceeded, ProvisioningStateFailed, ProvisioningStateCanceled,
}

// IsTerminal reports whether s is Succeeded, Failed or Canceled.
func (s ProvisioningState) IsTerminal() bool {
	switch s {
	case ProvisioningStateSucceeded, ProvisioningStateFailed, ProvisioningStateCanceled:
		return true
	}
	return false
}

// IsKnown reports whether s is one of the seven states of the contract.
func (s ProvisioningState) IsKnown() bool {
	switch s {
	case ProvisioningStateAccepted, ProvisioningStateProvisioning,
		ProvisioningStateUpdating, ProvisioningStateDeleting:
		return true
	}
	return s.IsTerminal()
}

// Request is the kind of change an operation carries out.
type Request string

// Requests as the frontend writes them.
const (
	RequestCreate            Request = "Create"
	RequestUpdate            Request = "Update"
	RequestDelete            Request = "Delete"
	RequestRequestCredential Request = "RequestCredential"
	RequestRevokeCredentials Request = "RevokeCredentials"
)

// Requests lists every request kind.
var Requests = []Request{RequestCreate, RequestUpdate, RequestDelete, RequestRequestCredential, RequestRevokeCredentials}

// IsKnown reports whether r is one of Requests.
func (r Request) IsKnown() bool {
	switch r {
	case RequestCreate, RequestUpdate, RequestDelete, RequestRequestCredential, RequestRevokeCredentials:
		return true
	}
	return false
}

// CloudErrorBody is the ARM error shape stored on an operation and sent to ARM.
type CloudErrorBody struct {
	Code    string           `json:"code,omitempty"`
	Message string           `json:"message,omitempty"`
	Target  string           `json:"target,omitempty"`
	Details []CloudErrorBody `json:"details,omitempty"`
}

// Error codes opstatus itself writes, as ARO-HCP's frontend writes them.
const (
	CodeInternalServerError = "InternalServerError"
	CodeCanceled            = "Canceled"
)

// OperationStatus is the ARM asynchronous operation status resource, the body
// POSTed to an operation's notification URI.
type OperationStatus struct {
	ID        string            `json:"id"`
	Name      string            `json:"name"`
	Status    ProvisioningState `json:"status"`
	StartTime *time.Time        `json:"startTime,omitempty"`
	EndTime   *time.Time        `json:"endTime,omitempty"`
	Error     *CloudErrorBody   `json:"error,omitempty"`
}
