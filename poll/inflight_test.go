package poll_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/poll"
)

const ocm4001 = `{"kind":"ClusterStatus","id":"abc","state":"error","provision_error_code":"OCM4001","provision_error_message":"Inflight checks failed"}`

// checksJSON lists checks given as name=state or name=state:error.
func checksJSON(checks ...string) string {
	var items []string
	for _, c := range checks {
		name, rest, _ := strings.Cut(c, "=")
		state, msg, hasMsg := strings.Cut(rest, ":")
		item := `{"kind":"InflightCheck","id":"` + name + `","name":"` + name + `","state":"` + state + `"`
		if hasMsg {
			item += `,"details":{"error":"` + msg + `"}`
		}
		items = append(items, item+"}")
	}
	return `{"kind":"InflightCheckList","page":1,"size":` + strconv.Itoa(len(items)) + `,"total":` + strconv.Itoa(len(items)) +
		`,"items":[` + strings.Join(items, ",") + `]}`
}

func ise(msg string) arm.CloudErrorBody {
	return arm.CloudErrorBody{Code: arm.CodeInternalServerError, Message: msg}
}

// A cluster that failed its inflight checks (OCM4001) ends Failed with the
// error built from the failed checks, through both API forms; the Resources
// item follows and ARM gets the same error.
func TestInflightChecksMakeTheError(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status string // the cluster status body
		checks string // the inflight_checks body; "" when none must be asked for
		want   arm.CloudErrorBody
	}{
		{name: "one failed", status: ocm4001, checks: checksJSON("dns=passed", "egress=failed:egress to quay.io blocked"),
			want: ise("egress to quay.io blocked")},
		{name: "several failed", status: ocm4001,
			checks: checksJSON("egress=failed:egress blocked", "dns=passed", "net=failed:subnet too small", "quota=running"),
			want: arm.CloudErrorBody{Code: "MultipleErrorsOccurred", Message: "Cluster provisioning failed due to multiple errors",
				Details: []arm.CloudErrorBody{ise("egress blocked"), ise("subnet too small")}}},
		{name: "none failed keeps the provision message", status: ocm4001, checks: checksJSON("dns=passed"),
			want: ise("Inflight checks failed")},
		{name: "another provision error asks for no checks",
			status: `{"kind":"ClusterStatus","id":"abc","state":"error","provision_error_code":"OCM3001","provision_error_message":"quota"}`,
			want:   arm.CloudErrorBody{Code: "OCM3001", Message: "quota"}},
	} {
		for _, internalID := range []string{clusterCS, "/api/clusters_mgmt/v1/clusters/abc"} {
			t.Run(tc.name+internalID, func(t *testing.T) {
				f := newFixture(t)
				f.putOp(database.Operation{ID: "op", Request: arm.RequestCreate, Status: arm.ProvisioningStateProvisioning,
					InternalID: internalID, NotificationURI: f.armURL})
				f.db.PutResource(&database.Resource{ID: "r1", PartitionKey: sub, Key: clusterKey, InternalID: internalID,
					ActiveOperationID: "op", ProvisioningState: arm.ProvisioningStateProvisioning})
				f.cs.SetStatus(internalID, http.StatusOK, tc.status)
				if tc.checks != "" {
					f.cs.SetInflight(internalID, http.StatusOK, tc.checks)
				}

				require.Equal(t, poll.OutcomeUpdated, f.poll(t, "op"))
				op := f.op(t, "op")
				require.Equal(t, arm.ProvisioningStateFailed, op.Status)
				require.Equal(t, tc.want, *op.Error)
				r, err := f.db.GetResource(context.Background(), sub, clusterKey)
				require.NoError(t, err)
				require.Equal(t, arm.ProvisioningStateFailed, r.ProvisioningState)
				require.Empty(t, r.ActiveOperationID)
				got := f.arm.got()
				require.Len(t, got, 1)
				require.Equal(t, tc.want, *got[0].Error)

				wantCalls := 0
				if tc.checks != "" {
					wantCalls = 1
				}
				require.Equal(t, wantCalls, f.cs.Requested(internalID+"/inflight_checks"))
				require.Equal(t, 1, f.cs.Requested(internalID+"/status"))
			})
		}
	}
}

// Only a cluster in error with OCM4001 has its inflight checks read.
func TestInflightChecksOnlyForOCM4001Clusters(t *testing.T) {
	const poolCS = clusterCS + "/node_pools/np1"
	for _, tc := range []struct {
		name, internalID, status string
	}{
		{"cluster installing", clusterCS, `{"kind":"ClusterStatus","id":"abc","state":"installing","provision_error_code":"OCM4001"}`},
		{"cluster error without a code", clusterCS, `{"kind":"ClusterStatus","id":"abc","state":"error"}`},
		{"node pool in error", poolCS, `{"kind":"NodePoolStatus","id":"np1","state":{"kind":"NodePoolState","value":"error"},"message":"m"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.putOp(database.Operation{ID: "op", Request: arm.RequestCreate, Status: arm.ProvisioningStateAccepted, InternalID: tc.internalID})
			f.cs.SetStatus(tc.internalID, http.StatusOK, tc.status)
			f.cs.SetInflight(tc.internalID, http.StatusInternalServerError, `{"kind":"Error","reason":"must not be asked"}`)
			require.Equal(t, poll.OutcomeUpdated, f.poll(t, "op"))
			require.Zero(t, f.cs.Requested(tc.internalID+"/inflight_checks"))
		})
	}
}

// A failure of the inflight checks call that may pass by itself (5xx,
// 429) leaves the operation as it is, deferred, with no write and no lock;
// a later poll after Cluster Service recovers writes Failed. Past its
// deadline the operation ends at once with the provision error, all that
// is known.
func TestInflightChecksTransientFailureDefers(t *testing.T) {
	for _, tc := range []struct {
		name string
		code int
		body string
	}{
		{"500", http.StatusInternalServerError, `{"kind":"Error","id":"500","reason":"boom"}`},
		{"503", http.StatusServiceUnavailable, `{"kind":"Error","id":"503","reason":"unavailable"}`},
		{"429", http.StatusTooManyRequests, `{"kind":"Error","id":"429","reason":"slow down"}`},
	} {
		for _, pastDeadline := range []bool{false, true} {
			name := tc.name
			if pastDeadline {
				name += ", past the deadline"
			}
			t.Run(name, func(t *testing.T) {
				f := newFixture(t)
				f.fn.Deadlines = poll.Deadlines{Create: time.Hour}
				start := f.now.Add(-time.Minute)
				if pastDeadline {
					start = f.now.Add(-2 * time.Hour)
				}
				f.putOp(database.Operation{ID: "op", Request: arm.RequestCreate, Status: arm.ProvisioningStateProvisioning,
					StartTime: start, NotificationURI: f.armURL})
				f.cs.SetStatus(clusterCS, http.StatusOK, ocm4001)
				f.cs.SetInflight(clusterCS, tc.code, tc.body)
				f.resetCounts()

				if pastDeadline {
					require.Equal(t, poll.OutcomeUpdated, f.poll(t, "op"))
					op := f.op(t, "op")
					require.Equal(t, arm.ProvisioningStateFailed, op.Status)
					require.Equal(t, arm.CloudErrorBody{Code: "OCM4001", Message: "Inflight checks failed"}, *op.Error)
					require.Len(t, f.arm.got(), 1)
					return
				}
				require.Equal(t, poll.OutcomeDeferred, f.poll(t, "op"))
				require.Equal(t, arm.ProvisioningStateProvisioning, f.op(t, "op").Status)
				require.Nil(t, f.op(t, "op").Error)
				require.Zero(t, f.writes())
				require.Zero(t, f.lockOps())
				require.Empty(t, f.arm.got())
				require.Equal(t, 1, f.cs.Requested(clusterCS+"/inflight_checks"))

				f.cs.SetInflight(clusterCS, http.StatusOK, checksJSON("egress=failed:egress blocked"))
				require.Equal(t, poll.OutcomeUpdated, f.poll(t, "op"))
				op := f.op(t, "op")
				require.Equal(t, arm.ProvisioningStateFailed, op.Status)
				require.Equal(t, ise("egress blocked"), *op.Error, "the checks' error, not the deadline's")
				require.Len(t, f.arm.got(), 1)
			})
		}
	}
}

// A failure of the inflight checks call that will not pass by itself (a
// 4xx, Cluster Service's own 404, a 404 from something in front of it, a
// reply that does not parse, has no items or is too large) ends the
// operation Failed at once with the provision error, as its deadline
// would: Cluster Service has failed the cluster already, and an Update,
// which has no deadline, would otherwise never end. The Resources item
// follows and ARM is notified.
func TestInflightChecksPermanentFailureEndsTheOperation(t *testing.T) {
	for _, tc := range []struct {
		name string
		code int
		body string
	}{
		{"400", http.StatusBadRequest, `{"kind":"Error","id":"400","reason":"bad request"}`},
		{"401", http.StatusUnauthorized, `{"kind":"Error","id":"401","reason":"unauthorized"}`},
		{"403", http.StatusForbidden, `{"kind":"Error","id":"403","reason":"forbidden"}`},
		{"OCM 404", http.StatusNotFound, `{"kind":"Error","id":"404","reason":"not found"}`},
		{"router 404", http.StatusNotFound, `404 page not found`},
		{"no items", http.StatusOK, `{"kind":"InflightCheckList"}`},
		{"not JSON", http.StatusOK, `<html></html>`},
		{"too large", http.StatusOK, `{"kind":"InflightCheckList","items":[],"x":"` + strings.Repeat("x", 2<<20) + `"}`},
	} {
		for _, req := range []struct {
			request arm.Request
			status  arm.ProvisioningState
		}{
			{arm.RequestCreate, arm.ProvisioningStateProvisioning},
			{arm.RequestUpdate, arm.ProvisioningStateUpdating},
		} {
			t.Run(tc.name+", "+string(req.request), func(t *testing.T) {
				f := newFixture(t)
				// ARO-HCP's deadlines, none of them reached.
				f.fn.Deadlines = poll.Deadlines{Create: time.Hour, Delete: 12 * time.Hour}
				f.putOp(database.Operation{ID: "op", Request: req.request, Status: req.status,
					StartTime: f.now.Add(-time.Minute), NotificationURI: f.armURL})
				f.db.PutResource(&database.Resource{ID: "r1", PartitionKey: sub, Key: clusterKey, InternalID: clusterCS,
					ActiveOperationID: "op", ProvisioningState: req.status})
				f.cs.SetStatus(clusterCS, http.StatusOK, ocm4001)
				f.cs.SetInflight(clusterCS, tc.code, tc.body)

				require.Equal(t, poll.OutcomeUpdated, f.poll(t, "op"))
				want := arm.CloudErrorBody{Code: "OCM4001", Message: "Inflight checks failed"}
				op := f.op(t, "op")
				require.Equal(t, arm.ProvisioningStateFailed, op.Status)
				require.Equal(t, want, *op.Error)
				r, err := f.db.GetResource(context.Background(), sub, clusterKey)
				require.NoError(t, err)
				require.Equal(t, arm.ProvisioningStateFailed, r.ProvisioningState)
				require.Empty(t, r.ActiveOperationID)
				got := f.arm.got()
				require.Len(t, got, 1)
				require.Equal(t, want, *got[0].Error)
				require.Equal(t, 1, f.cs.Requested(clusterCS+"/inflight_checks"), "asked once, not retried")

				require.Equal(t, poll.OutcomeDone, f.poll(t, "op"))
				require.Equal(t, 1, f.cs.Requested(clusterCS+"/inflight_checks"))
			})
		}
	}
}
