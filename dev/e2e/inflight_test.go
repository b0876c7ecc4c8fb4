package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/clustersim"
	"github.com/opstatus/opstatus/internal/testenv"
)

// TestInflightChecks runs clusters that failed their inflight checks
// (provision error OCM4001) through the built handler: the operation ends
// Failed with the error built from the failed checks, in the Operations
// item and in ARM's notification alike; while the inflight checks call
// fails with a 5xx, the operation is left as it is and a later poll writes
// Failed; when it is refused (a 4xx), an Update, which has no deadline,
// ends Failed at once with the provision error.
func TestInflightChecks(t *testing.T) {
	s := startStack(t)
	ctx := context.Background()
	check := func(name, state, msg string) clustersim.InflightCheck {
		c := clustersim.InflightCheck{Name: name, State: state}
		if msg != "" {
			c.Details = map[string]any{"error": msg}
		}
		return c
	}
	failedInflight := func(api string, checks ...clustersim.InflightCheck) clustersim.Script {
		return clustersim.Script{Fail: true, ErrorCode: "OCM4001", ErrorMessage: "Inflight checks failed", API: api, InflightChecks: checks}
	}
	pollOp := func(t *testing.T, sub, op string) response {
		t.Helper()
		r := s.poll(fmt.Sprintf(`{"subscriptionId":%q,"operationId":%q}`, sub, op))
		require.Equal(t, http.StatusOK, r.Status, r.Logs)
		return r
	}
	// requireError checks the error of the Operations item and of the
	// operation's one notification.
	requireError := func(t *testing.T, sub, op, want string) {
		t.Helper()
		item, err := s.fe.Operation(ctx, sub, op)
		require.NoError(t, err)
		require.Equal(t, "Failed", item["status"])
		got, err := json.Marshal(item["error"])
		require.NoError(t, err)
		require.JSONEq(t, want, string(got))
		res, err := s.fe.Resource(ctx, sub, "res-"+op)
		require.NoError(t, err)
		require.Equal(t, "Failed", res["provisioningState"])
		var sent []map[string]any
		for _, n := range s.arm.Bodies() {
			if n["name"] == op {
				sent = append(sent, n)
			}
		}
		require.Len(t, sent, 1, "ARM is notified once")
		got, err = json.Marshal(sent[0]["error"])
		require.NoError(t, err)
		require.JSONEq(t, want, string(got))
	}

	for _, tc := range []struct {
		name, sub, cluster, internalID string
		script                         clustersim.Script
		want                           string
		log                            string // an error line the host logs; "" for none
	}{
		{name: "one failed check", sub: subA, cluster: "cone", internalID: "/api/aro_hcp/v1alpha1/clusters/cone",
			script: failedInflight(clustersim.APIAROHCP, check("dns", "passed", ""), check("egress", "failed", "egress to quay.io is blocked")),
			want:   `{"code":"InternalServerError","message":"egress to quay.io is blocked"}`},
		{name: "several failed checks", sub: subB, cluster: "cmany", internalID: "/api/clusters_mgmt/v1/clusters/cmany",
			script: failedInflight(clustersim.APIClustersMgmt, check("egress", "failed", "egress to quay.io is blocked"),
				check("dns", "passed", ""), check("subnet", "failed", "the subnet is too small"), check("quota", "running", "")),
			want: `{"code":"MultipleErrorsOccurred","message":"Cluster provisioning failed due to multiple errors","details":[
				{"code":"InternalServerError","message":"egress to quay.io is blocked"},
				{"code":"InternalServerError","message":"the subnet is too small"}]}`},
		{name: "no failed check", sub: subC, cluster: "cnone", internalID: "/api/aro_hcp/v1alpha1/clusters/cnone",
			script: failedInflight("", check("dns", "passed", "")),
			want:   `{"code":"InternalServerError","message":"Inflight checks failed"}`,
			log:    "none of the cluster's 1 inflight checks failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer s.use(t)()
			require.NoError(t, s.sim.AddCluster(tc.cluster, tc.script))
			op := "op-" + tc.cluster
			s.seed(tc.sub, op, "Create", "Provisioning", clusterKey(tc.sub, tc.cluster), tc.internalID)
			r := pollOp(t, tc.sub, op)
			require.Equal(t, "updated", outcome(t, r))
			requireError(t, tc.sub, op, tc.want)
			if tc.log != "" {
				s.requireLog(t, r, testenv.HostError, "inflight checks do not explain the failure", tc.log)
			}
			require.Equal(t, "done", outcome(t, pollOp(t, tc.sub, op)))
		})
	}

	t.Run("inflight checks call failing", func(t *testing.T) {
		defer s.use(t)()
		const path = "/api/aro_hcp/v1alpha1/clusters/cdown"
		require.NoError(t, s.sim.AddCluster("cdown", failedInflight("", check("egress", "failed", "egress to quay.io is blocked"))))
		s.seed(subA, "op-cdown", "Create", "Provisioning", clusterKey(subA, "cdown"), path)
		before := s.snapshot(opRef(subA, "op-cdown"), resRef(subA, "res-op-cdown"))
		require.NoError(t, s.sim.SetFaults(clustersim.Faults{InflightChecksStatus: http.StatusInternalServerError}))
		calls := s.sim.Stats().Requests[clustersim.PathKindAROHCPInflightChecks]
		for range 2 {
			r := pollOp(t, subA, "op-cdown")
			require.Equal(t, "deferred", outcome(t, r))
			s.requireLog(t, r, testenv.HostWarning, "operation left unchanged", "GET "+path+"/inflight_checks: HTTP 500")
		}
		require.Equal(t, calls+2, s.sim.Stats().Requests[clustersim.PathKindAROHCPInflightChecks])
		s.requireUnchanged(before)
		s.requireNoLockLeft(subA)
		for _, n := range s.arm.Bodies() {
			require.NotEqual(t, "op-cdown", n["name"], "ARM is not notified")
		}

		require.NoError(t, s.sim.SetFaults(clustersim.Faults{}))
		require.Equal(t, "updated", outcome(t, pollOp(t, subA, "op-cdown")))
		requireError(t, subA, "op-cdown", `{"code":"InternalServerError","message":"egress to quay.io is blocked"}`)
	})

	t.Run("inflight checks call refused", func(t *testing.T) {
		defer s.use(t)()
		const path = "/api/clusters_mgmt/v1/clusters/crefused"
		require.NoError(t, s.sim.AddCluster("crefused", failedInflight(clustersim.APIClustersMgmt, check("egress", "failed", "egress to quay.io is blocked"))))
		s.seed(subB, "op-crefused", "Update", "Updating", clusterKey(subB, "crefused"), path)
		require.NoError(t, s.sim.SetFaults(clustersim.Faults{InflightChecksStatus: http.StatusForbidden}))
		t.Cleanup(func() { require.NoError(t, s.sim.SetFaults(clustersim.Faults{})) })
		calls := s.sim.Stats().Requests[clustersim.PathKindClustersMgmtInflightChecks]

		r := pollOp(t, subB, "op-crefused")
		require.Equal(t, "updated", outcome(t, r))
		s.requireLog(t, r, testenv.HostError, "inflight checks unreadable; ending the operation with the provision error",
			"GET "+path+"/inflight_checks: HTTP 403")
		requireError(t, subB, "op-crefused", `{"code":"OCM4001","message":"Inflight checks failed"}`)
		require.Equal(t, calls+1, s.sim.Stats().Requests[clustersim.PathKindClustersMgmtInflightChecks])
		s.requireNoLockLeft(subB)
		require.Equal(t, "done", outcome(t, pollOp(t, subB, "op-crefused")))
	})
}
