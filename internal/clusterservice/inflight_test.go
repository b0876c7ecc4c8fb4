package clusterservice

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/internal/arm"
)

func TestNeedsInflightChecks(t *testing.T) {
	for _, tc := range []struct {
		name string
		kind Kind
		st   Status
		want bool
	}{
		{"cluster error OCM4001", KindCluster, Status{State: "error", ErrorCode: "OCM4001"}, true},
		{"cluster error, another code", KindCluster, Status{State: "error", ErrorCode: "OCM3001"}, false},
		{"cluster error, no code", KindCluster, Status{State: "error"}, false},
		{"cluster error, code in another case", KindCluster, Status{State: "error", ErrorCode: "ocm4001"}, false},
		{"cluster installing with the code", KindCluster, Status{State: "installing", ErrorCode: "OCM4001"}, false},
		{"cluster ready with the code", KindCluster, Status{State: "ready", ErrorCode: "OCM4001"}, false},
		{"node pool error with the code", KindNodePool, Status{State: "error", ErrorCode: "OCM4001"}, false},
		{"unknown kind", Kind(0), Status{State: "error", ErrorCode: "OCM4001"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, NeedsInflightChecks(tc.kind, tc.st))
		})
	}
}

func TestInflightError(t *testing.T) {
	st := Status{State: "error", ErrorCode: "OCM4001", ErrorMessage: "inflight checks failed", Description: "d"}
	ise := func(msg string) arm.CloudErrorBody {
		return arm.CloudErrorBody{Code: arm.CodeInternalServerError, Message: msg}
	}
	egress := InflightCheck{Name: "egress", State: "failed", Error: "egress to quay.io blocked"}
	dns := InflightCheck{Name: "dns", State: "failed", Error: "no DNS resolution"}
	for _, tc := range []struct {
		name    string
		st      Status
		checks  []InflightCheck
		want    arm.CloudErrorBody
		problem string // part of the problem; "" for none
	}{
		{name: "one failed among others", st: st,
			checks: []InflightCheck{{Name: "a", State: "passed", Error: "x"}, egress, {Name: "b", State: "running"}, {Name: "c", State: "pending"}},
			want:   ise("egress to quay.io blocked")},
		{name: "only one check, failed", st: st, checks: []InflightCheck{dns}, want: ise("no DNS resolution")},
		{name: "two failed, in the listed order", st: st,
			checks: []InflightCheck{dns, {Name: "ok", State: "passed"}, egress},
			want: arm.CloudErrorBody{Code: "MultipleErrorsOccurred", Message: "Cluster provisioning failed due to multiple errors",
				Details: []arm.CloudErrorBody{ise("no DNS resolution"), ise("egress to quay.io blocked")}}},
		{name: "three failed", st: st,
			checks: []InflightCheck{egress, dns, {Name: "net", State: "failed", Error: "subnet too small"}},
			want: arm.CloudErrorBody{Code: "MultipleErrorsOccurred", Message: "Cluster provisioning failed due to multiple errors",
				Details: []arm.CloudErrorBody{ise("egress to quay.io blocked"), ise("no DNS resolution"), ise("subnet too small")}}},
		{name: "none failed keeps the provision message", st: st,
			checks: []InflightCheck{{Name: "a", State: "passed"}, {Name: "b", State: "running"}},
			want:   ise("inflight checks failed"), problem: "none of the cluster's 2 inflight checks failed"},
		{name: "no checks at all", st: st, checks: []InflightCheck{},
			want: ise("inflight checks failed"), problem: "none of the cluster's 0 inflight checks failed"},
		{name: "none failed, no provision message: the description", st: Status{State: "error", ErrorCode: "OCM4001", Description: "install failed"},
			checks: nil, want: ise("install failed"), problem: "provision error code OCM4001"},
		{name: "a state in another case is not failed", st: st,
			checks: []InflightCheck{{Name: "a", State: "Failed", Error: "x"}},
			want:   ise("inflight checks failed"), problem: "none of the cluster's 1 inflight checks failed"},
		{name: "failed without details.error names the check", st: st,
			checks:  []InflightCheck{{Name: "egress", State: "failed"}},
			want:    ise(`Inflight check "egress" failed.`),
			problem: `failed inflight check "egress" has no details.error`},
		{name: "several, one without details.error", st: st,
			checks: []InflightCheck{dns, {Name: "net", State: "failed"}},
			want: arm.CloudErrorBody{Code: "MultipleErrorsOccurred", Message: "Cluster provisioning failed due to multiple errors",
				Details: []arm.CloudErrorBody{ise("no DNS resolution"), ise(`Inflight check "net" failed.`)}},
			problem: `failed inflight check "net" has no details.error`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, problem := InflightError(tc.st, tc.checks)
			require.NotNil(t, got)
			require.Equal(t, tc.want, *got)
			if tc.problem == "" {
				require.Empty(t, problem)
			} else {
				require.Contains(t, problem, tc.problem)
			}
		})
	}
}

func TestDecideInflight(t *testing.T) {
	st := Status{State: "error", ErrorCode: "OCM4001", ErrorMessage: "inflight checks failed"}
	failure := &arm.CloudErrorBody{Code: arm.CodeInternalServerError, Message: "egress blocked"}
	for _, tc := range []struct {
		name    string
		request arm.Request
		current arm.ProvisioningState
		want    Decision
	}{
		{"create provisioning", create, provisioning, Decision{State: failed, Error: failure, Change: true}},
		{"create accepted", create, accepted, Decision{State: failed, Error: failure, Change: true}},
		{"update updating", update, updating, Decision{State: failed, Error: failure, Change: true}},
		{"delete deleting", del, deleting, Decision{State: failed, Error: failure, Change: true}},
		{"already failed: nothing to write", create, failed, Decision{State: failed, Error: failure}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, DecideInflight(st, failure, tc.request, tc.current))
		})
	}
	t.Run("terminal statuses do not move", func(t *testing.T) {
		for _, current := range []arm.ProvisioningState{succeeded, canceled} {
			d := DecideInflight(st, failure, create, current)
			require.Equal(t, current, d.State)
			require.Nil(t, d.Error)
			require.False(t, d.Change)
			require.Contains(t, d.Problem, "terminal")
		}
	})
	t.Run("without a failure it is Decide", func(t *testing.T) {
		require.Equal(t, Decide(KindCluster, st, create, provisioning), DecideInflight(st, nil, create, provisioning))
	})
}
