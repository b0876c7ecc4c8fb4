// Package opkind names the kinds of operation opstatus follows and holds the
// one rule, shared by scan and poll, that tells an operation's kind from its
// request and internalId, or why it has none.
package opkind

import (
	"errors"
	"fmt"

	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/clusterservice"
)

// Kind is a kind of operation: a row of the contract's table "Operation
// kinds and Cluster Service".
type Kind string

// The kinds of operation.
const (
	Cluster              Kind = "cluster"
	NodePool             Kind = "nodePool"
	ExternalAuth         Kind = "externalAuth"
	CredentialRequest    Kind = "credentialRequest"
	CredentialRevocation Kind = "credentialRevocation"
)

// Kinds lists every kind.
var Kinds = []Kind{Cluster, NodePool, ExternalAuth, CredentialRequest, CredentialRevocation}

// WritesResources reports whether an operation of kind k moves a Resources
// item: credentials have none, so their operations write the operation
// alone.
func (k Kind) WritesResources() bool {
	return k != CredentialRequest && k != CredentialRevocation
}

// Reasons an operation cannot be polled; they are the values of the
// `reason` attribute of opstatus.scan.skipped.
const (
	ReasonStatus     = "status"      // not one of the seven ProvisioningStates
	ReasonRequest    = "request"     // not one of the five requests
	ReasonInternalID = "internal_id" // not one of the contract's Cluster Service paths
	ReasonMismatch   = "kind"        // a path and a request that do not go together
)

// Unusable says why an operation cannot be polled.
type Unusable struct {
	Reason string // one of the Reason constants
	Err    error
}

func (u *Unusable) Error() string { return u.Err.Error() }
func (u *Unusable) Unwrap() error { return u.Err }

// Reason returns the Reason of err's Unusable, or "" when it has none.
func Reason(err error) string {
	if u, ok := errors.AsType[*Unusable](err); ok {
		return u.Reason
	}
	return ""
}

func unusable(reason, format string, args ...any) error {
	return &Unusable{Reason: reason, Err: fmt.Errorf(format, args...)}
}

// Of tells the kind of an unfinished operation from its request and
// internalId, and returns the parsed internalId with it. An error is an
// *Unusable: nothing is ever requested for such an operation.
func Of(request arm.Request, internalID string) (Kind, clusterservice.InternalID, error) {
	if !request.IsKnown() {
		return "", clusterservice.InternalID{}, unusable(ReasonRequest, "unknown request %q", truncate(string(request)))
	}
	id, err := clusterservice.ParseInternalID(internalID)
	if err != nil {
		return "", clusterservice.InternalID{}, &Unusable{Reason: ReasonInternalID, Err: err}
	}
	var k Kind
	switch id.Kind {
	case clusterservice.KindCluster:
		k = Cluster
		if request == arm.RequestRevokeCredentials {
			k = CredentialRevocation
		}
	case clusterservice.KindNodePool:
		k = NodePool
	case clusterservice.KindExternalAuth:
		k = ExternalAuth
	case clusterservice.KindBreakGlassCredential:
		k = CredentialRequest
	}
	if !k.takes(request) {
		return "", clusterservice.InternalID{}, unusable(ReasonMismatch, "a %s operation cannot be a %s (internalId %s)", id.Kind, request, id.Path)
	}
	return k, id, nil
}

// takes reports whether request goes with kind k.
func (k Kind) takes(request arm.Request) bool {
	switch k {
	case Cluster, NodePool, ExternalAuth:
		return request == arm.RequestCreate || request == arm.RequestUpdate || request == arm.RequestDelete
	case CredentialRequest:
		return request == arm.RequestRequestCredential
	case CredentialRevocation:
		return request == arm.RequestRevokeCredentials
	}
	return false
}

// Check is the rule by which poll acts on an operation item and scan sends
// it: a known status and request, and, while the operation is unfinished
// (a finished one is only notified), a kind. The kind is "" for a finished
// operation.
func Check(status arm.ProvisioningState, request arm.Request, internalID string) (Kind, clusterservice.InternalID, error) {
	if !status.IsKnown() {
		return "", clusterservice.InternalID{}, unusable(ReasonStatus, "unknown status %q", truncate(string(status)))
	}
	if status.IsTerminal() {
		if !request.IsKnown() {
			return "", clusterservice.InternalID{}, unusable(ReasonRequest, "unknown request %q", truncate(string(request)))
		}
		return "", clusterservice.InternalID{}, nil
	}
	return Of(request, internalID)
}

// truncate bounds untrusted text quoted in an error.
func truncate(s string) string {
	const limit = 64
	if len(s) > limit {
		return s[:limit] + "…"
	}
	return s
}
