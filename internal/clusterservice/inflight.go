package clusterservice

import (
	"fmt"
	"strings"

	"github.com/opstatus/opstatus/internal/arm"
)

// ProvisionErrorInflightChecks is the provision_error_code of a cluster
// whose inflight checks failed. Its ARM error is built from the checks
// (InflightError), since the provision error only says that some failed.
const ProvisionErrorInflightChecks = "OCM4001"

// The ARM error of a cluster that failed more than one inflight check, as
// ARO-HCP words it.
const (
	CodeMultipleErrorsOccurred = "MultipleErrorsOccurred"
	MultipleErrorsMessage      = "Cluster provisioning failed due to multiple errors"
)

// Inflight check states as Cluster Service sends them.
const inflightFailed = "failed"

// NeedsInflightChecks reports whether the error of an object of kind with
// status st comes from its inflight checks: a cluster in state error with
// provision_error_code OCM4001.
func NeedsInflightChecks(kind Kind, st Status) bool {
	return kind == KindCluster && st.State == csError && st.ErrorCode == ProvisionErrorInflightChecks
}

// InflightError builds the ARM error of a cluster whose status st needs its
// inflight checks (NeedsInflightChecks), as ARO-HCP's backend does, each
// failed check being an InternalServerError whose message is the check's
// details.error:
//
//   - one failed check: that check's error;
//   - several: CodeMultipleErrorsOccurred with MultipleErrorsMessage, and one
//     entry in Details per failed check, in the order Cluster Service
//     listed them;
//   - none: InternalServerError with the provision error message (or the
//     description).
//
// problem is non-empty when the checks do not explain the failure (none
// failed, or a failed one has no details.error, whose message then names
// the check); the caller logs it as an error and uses the error all the
// same.
func InflightError(st Status, checks []InflightCheck) (body *arm.CloudErrorBody, problem string) {
	var failed []arm.CloudErrorBody
	var problems []string
	for _, c := range checks {
		if c.State != inflightFailed {
			continue
		}
		msg := c.Error
		if msg == "" {
			msg = fmt.Sprintf("Inflight check %q failed.", c.Name)
			problems = append(problems, fmt.Sprintf("failed inflight check %q has no details.error", c.Name))
		}
		failed = append(failed, arm.CloudErrorBody{Code: arm.CodeInternalServerError, Message: msg})
	}
	switch len(failed) {
	case 0:
		message := st.ErrorMessage
		if message == "" {
			message = st.Description
		}
		return &arm.CloudErrorBody{Code: arm.CodeInternalServerError, Message: message},
			fmt.Sprintf("provision error code %s, but none of the cluster's %d inflight checks failed", st.ErrorCode, len(checks))
	case 1:
		body = &failed[0]
	default:
		body = &arm.CloudErrorBody{Code: CodeMultipleErrorsOccurred, Message: MultipleErrorsMessage, Details: failed}
	}
	return body, strings.Join(problems, "; ")
}

// DecideInflight is Decide for a cluster whose status st needs its inflight
// checks, with failure, the error InflightError built from them, in place
// of the provision error code and message.
func DecideInflight(st Status, failure *arm.CloudErrorBody, request arm.Request, current arm.ProvisioningState) Decision {
	d := Decide(KindCluster, st, request, current)
	if d.Error != nil && failure != nil {
		d.Error = failure
	}
	return d
}
