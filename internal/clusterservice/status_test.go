package clusterservice

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/internal/arm"
)

// The expected values below are written from the tables of ARCHITECTURE.md
// as data, independently of Decide's switch statements.

const (
	accepted     = arm.ProvisioningStateAccepted
	provisioning = arm.ProvisioningStateProvisioning
	updating     = arm.ProvisioningStateUpdating
	deleting     = arm.ProvisioningStateDeleting
	succeeded    = arm.ProvisioningStateSucceeded
	failed       = arm.ProvisioningStateFailed
	canceled     = arm.ProvisioningStateCanceled

	create = arm.RequestCreate
	update = arm.RequestUpdate
	del    = arm.RequestDelete
)

var allCurrent = []arm.ProvisioningState{accepted, provisioning, updating, deleting, succeeded, failed, canceled}

// tableRow is one row of a state table.
type tableRow struct {
	goesTo        arm.ProvisioningState // the status the row names, if any
	fails         bool                  // "Failed" with an error
	readyRule     bool                  // Succeeded, but unchanged during a Delete
	keepIfExpects bool                  // "unchanged; expected while ..."
}

var clusterTable = map[string]tableRow{
	"error":        {fails: true},
	"installing":   {goesTo: provisioning},
	"updating":     {goesTo: updating},
	"ready":        {readyRule: true},
	"uninstalling": {goesTo: deleting},
	"pending":      {keepIfExpects: true},
	"validating":   {keepIfExpects: true},
}

var nodePoolTable = map[string]tableRow{
	"error":             {fails: true},
	"recoverable_error": {fails: true},
	"installing":        {goesTo: provisioning},
	"updating":          {goesTo: updating},
	"ready":             {readyRule: true},
	"uninstalling":      {goesTo: deleting},
	"pending":           {keepIfExpects: true},
	"validating":        {keepIfExpects: true},
	"pending_update":    {keepIfExpects: true},
	"validating_update": {keepIfExpects: true},
}

// expectedWhile lists, per current status, the requests during which a
// pending/validating state is expected.
var expectedWhile = map[arm.ProvisioningState][]arm.Request{
	accepted:     {create, update, del},
	provisioning: {create},
	updating:     {update},
	deleting:     {del},
}

// expectation is an expected Decision, with the Problem given as a keyword.
type expectation struct {
	state   arm.ProvisioningState
	err     *arm.CloudErrorBody
	change  bool
	problem string // "", "inconsistent", "unhandled" or "terminal"
}

func expected(kind Kind, st Status, request arm.Request, current arm.ProvisioningState) expectation {
	table := clusterTable
	if kind == KindNodePool {
		table = nodePoolTable
	}
	row, known := table[st.State]
	if !known {
		return expectation{state: current, problem: "unhandled"}
	}

	var target arm.ProvisioningState
	var cloudErr *arm.CloudErrorBody
	switch {
	case row.keepIfExpects:
		for _, r := range expectedWhile[current] {
			if r == request {
				return expectation{state: current}
			}
		}
		return expectation{state: current, problem: "inconsistent"}
	case row.readyRule && request == del:
		return expectation{state: current}
	case row.readyRule:
		target = succeeded
	case row.fails && kind == KindCluster:
		target = failed
		cloudErr = &arm.CloudErrorBody{Code: "InternalServerError", Message: st.Description}
		if st.ErrorCode != "" {
			cloudErr.Code = st.ErrorCode
		}
		if st.ErrorMessage != "" {
			cloudErr.Message = st.ErrorMessage
		}
	case row.fails:
		target = failed
		cloudErr = &arm.CloudErrorBody{Code: "InternalServerError", Message: st.ErrorMessage}
	default:
		target = row.goesTo
	}

	if target == current {
		return expectation{state: current, err: cloudErr}
	}
	// The contract: Succeeded, Failed and Canceled never change.
	if current == succeeded || current == failed || current == canceled {
		return expectation{state: current, problem: "terminal"}
	}
	return expectation{state: target, err: cloudErr, change: true}
}

func requireDecision(t *testing.T, want expectation, got Decision) {
	t.Helper()
	require.Equal(t, want.state, got.State, "State")
	require.Equal(t, want.err, got.Error, "Error")
	require.Equal(t, want.change, got.Change, "Change")
	if want.problem == "" {
		require.Empty(t, got.Problem, "Problem")
	} else {
		require.Contains(t, got.Problem, want.problem, "Problem")
	}
	// Invariants that hold for every decision.
	if got.Problem != "" {
		require.False(t, got.Change, "a Problem never writes")
	}
	if got.Change {
		require.NotEqual(t, want.state, arm.ProvisioningState(""), "a change has a state")
	}
	require.Equal(t, got.State == failed && got.Change, got.Error != nil && got.Change, "Error comes with Failed")
}

func clusterStatuses() []Status {
	var out []Status
	for _, code := range []string{"", "OCM3001"} {
		for _, msg := range []string{"", "provision failed"} {
			for _, desc := range []string{"", "described"} {
				out = append(out, Status{State: "error", ErrorCode: code, ErrorMessage: msg, Description: desc})
			}
		}
	}
	for _, s := range []string{"installing", "updating", "ready", "uninstalling", "pending", "validating",
		"hibernating", "unknown", "READY", "Error", "recoverable_error", "pending_update", ""} {
		// Fields that the state does not use must not matter.
		out = append(out, Status{State: s}, Status{State: s, ErrorCode: "X", ErrorMessage: "m", Description: "d"})
	}
	return out
}

func nodePoolStatuses() []Status {
	var out []Status
	for _, s := range []string{"error", "recoverable_error"} {
		out = append(out, Status{State: s}, Status{State: s, ErrorMessage: "np broke"},
			Status{State: s, ErrorMessage: "np broke", ErrorCode: "ignored", Description: "ignored"})
	}
	for _, s := range []string{"installing", "updating", "ready", "uninstalling", "pending", "validating",
		"pending_update", "validating_update", "hibernating", "Ready", ""} {
		out = append(out, Status{State: s}, Status{State: s, ErrorMessage: "m"})
	}
	return out
}

func TestDecideCrossProduct(t *testing.T) {
	for _, tc := range []struct {
		kind     Kind
		statuses []Status
	}{
		{KindCluster, clusterStatuses()},
		{KindNodePool, nodePoolStatuses()},
	} {
		n := 0
		for _, st := range tc.statuses {
			for _, request := range arm.Requests {
				for _, current := range allCurrent {
					name := fmt.Sprintf("%s/%q/%+v/%s/%s", tc.kind, st.State, st, request, current)
					t.Run(name, func(t *testing.T) {
						requireDecision(t, expected(tc.kind, st, request, current), Decide(tc.kind, st, request, current))
					})
					n++
				}
			}
		}
		require.Equal(t, len(tc.statuses)*3*7, n)
	}
}

// TestDecideNotable spells out the notable cases with literal values.
func TestDecideNotable(t *testing.T) {
	ise := "InternalServerError"
	for _, tc := range []struct {
		name    string
		kind    Kind
		st      Status
		request arm.Request
		current arm.ProvisioningState
		want    Decision
		problem string
	}{
		{name: "cluster error with code and message", kind: KindCluster,
			st:      Status{State: "error", ErrorCode: "OCM3001", ErrorMessage: "m", Description: "d"},
			request: create, current: provisioning,
			want: Decision{State: failed, Error: &arm.CloudErrorBody{Code: "OCM3001", Message: "m"}, Change: true}},
		{name: "cluster error without code or message uses description", kind: KindCluster,
			st:      Status{State: "error", Description: "d"},
			request: create, current: accepted,
			want: Decision{State: failed, Error: &arm.CloudErrorBody{Code: ise, Message: "d"}, Change: true}},
		{name: "cluster error with nothing", kind: KindCluster,
			st: Status{State: "error"}, request: update, current: updating,
			want: Decision{State: failed, Error: &arm.CloudErrorBody{Code: ise}, Change: true}},
		{name: "cluster installing while accepted", kind: KindCluster,
			st: Status{State: "installing"}, request: create, current: accepted,
			want: Decision{State: provisioning, Change: true}},
		{name: "cluster installing while provisioning is no change", kind: KindCluster,
			st: Status{State: "installing"}, request: create, current: provisioning,
			want: Decision{State: provisioning}},
		{name: "cluster ready ends a create", kind: KindCluster,
			st: Status{State: "ready"}, request: create, current: provisioning,
			want: Decision{State: succeeded, Change: true}},
		{name: "cluster ready ends an update", kind: KindCluster,
			st: Status{State: "ready"}, request: update, current: updating,
			want: Decision{State: succeeded, Change: true}},
		{name: "cluster ready during delete is unchanged", kind: KindCluster,
			st: Status{State: "ready"}, request: del, current: accepted,
			want: Decision{State: accepted}},
		{name: "cluster uninstalling", kind: KindCluster,
			st: Status{State: "uninstalling"}, request: del, current: accepted,
			want: Decision{State: deleting, Change: true}},
		{name: "cluster pending while accepted", kind: KindCluster,
			st: Status{State: "pending"}, request: del, current: accepted,
			want: Decision{State: accepted}},
		{name: "cluster validating while provisioning a create", kind: KindCluster,
			st: Status{State: "validating"}, request: create, current: provisioning,
			want: Decision{State: provisioning}},
		{name: "cluster pending while updating a create is inconsistent", kind: KindCluster,
			st: Status{State: "pending"}, request: create, current: updating,
			want: Decision{State: updating}, problem: "inconsistent"},
		{name: "cluster pending while deleting an update is inconsistent", kind: KindCluster,
			st: Status{State: "pending"}, request: update, current: deleting,
			want: Decision{State: deleting}, problem: "inconsistent"},
		{name: "cluster unknown state", kind: KindCluster,
			st: Status{State: "hibernating"}, request: create, current: accepted,
			want: Decision{State: accepted}, problem: "unhandled"},
		{name: "cluster empty state", kind: KindCluster,
			st: Status{}, request: create, current: accepted,
			want: Decision{State: accepted}, problem: "unhandled"},
		{name: "cluster state in upper case is not guessed", kind: KindCluster,
			st: Status{State: "READY"}, request: create, current: provisioning,
			want: Decision{State: provisioning}, problem: "unhandled"},
		{name: "cluster recoverable_error is a node pool state only", kind: KindCluster,
			st: Status{State: "recoverable_error"}, request: create, current: provisioning,
			want: Decision{State: provisioning}, problem: "unhandled"},
		{name: "terminal operation is not reopened", kind: KindCluster,
			st: Status{State: "installing"}, request: create, current: succeeded,
			want: Decision{State: succeeded}, problem: "terminal"},
		{name: "failed stays failed without a write", kind: KindCluster,
			st: Status{State: "error", ErrorCode: "C"}, request: create, current: failed,
			want: Decision{State: failed, Error: &arm.CloudErrorBody{Code: "C"}}},
		{name: "node pool error", kind: KindNodePool,
			st: Status{State: "error", ErrorMessage: "np broke"}, request: create, current: provisioning,
			want: Decision{State: failed, Error: &arm.CloudErrorBody{Code: ise, Message: "np broke"}, Change: true}},
		{name: "node pool recoverable_error", kind: KindNodePool,
			st: Status{State: "recoverable_error", ErrorMessage: "retrying"}, request: update, current: updating,
			want: Decision{State: failed, Error: &arm.CloudErrorBody{Code: ise, Message: "retrying"}, Change: true}},
		{name: "node pool ready during delete is unchanged", kind: KindNodePool,
			st: Status{State: "ready"}, request: del, current: deleting,
			want: Decision{State: deleting}},
		{name: "node pool ready ends a create", kind: KindNodePool,
			st: Status{State: "ready"}, request: create, current: accepted,
			want: Decision{State: succeeded, Change: true}},
		{name: "node pool pending_update while updating", kind: KindNodePool,
			st: Status{State: "pending_update"}, request: update, current: updating,
			want: Decision{State: updating}},
		{name: "node pool validating_update while provisioning an update is inconsistent", kind: KindNodePool,
			st: Status{State: "validating_update"}, request: update, current: provisioning,
			want: Decision{State: provisioning}, problem: "inconsistent"},
		{name: "node pool unknown state", kind: KindNodePool,
			st: Status{State: "exploding"}, request: del, current: deleting,
			want: Decision{State: deleting}, problem: "unhandled"},
		{name: "unknown request", kind: KindCluster,
			st: Status{State: "ready"}, request: "Patch", current: accepted,
			want: Decision{State: accepted}, problem: "unknown request"},
		{name: "unknown current status", kind: KindCluster,
			st: Status{State: "ready"}, request: create, current: "Running",
			want: Decision{State: "Running"}, problem: "unknown current status"},
		{name: "unknown kind", kind: Kind(0),
			st: Status{State: "ready"}, request: create, current: accepted,
			want: Decision{State: accepted}, problem: "unknown object kind"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Decide(tc.kind, tc.st, tc.request, tc.current)
			problem := got.Problem
			got.Problem = ""
			require.Equal(t, tc.want, got)
			if tc.problem == "" {
				require.Empty(t, problem)
			} else {
				require.Contains(t, problem, tc.problem)
			}
		})
	}
}
