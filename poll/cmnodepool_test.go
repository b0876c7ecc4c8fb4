package poll_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/clusterservice/clusterservicetesting"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/poll"
)

// A node pool as ARO-HCP's 2024-10 frontend wrote it (clusters_mgmt), and
// the same node pool under aro_hcp, where its status is read.
const (
	cmPoolKey    = clusterKey + "/nodePools/np1"
	cmPoolCS     = "/api/clusters_mgmt/v1/clusters/abc/node_pools/np1"
	cmPoolStatus = "/api/aro_hcp/v1alpha1/clusters/abc/node_pools/np1/status"
	// cmPoolObject is GET {internalId} as clusters_mgmt served it then:
	// no state in its status.
	cmPoolObject = `{"kind":"NodePool","id":"np1","href":"` + cmPoolCS + `","status":{"current_replicas":2}}`
)

func nodePoolStatus(state, message string) string {
	return `{"kind":"NodePoolStatus","id":"np1","state":{"kind":"NodePoolState","value":"` + state + `"},"message":"` + message + `"}`
}

// putCMPoolOp puts a pending operation on the clusters_mgmt node pool and
// makes it its Resources item's active one.
func (f *fixture) putCMPoolOp(id string, request arm.Request, status arm.ProvisioningState, start time.Time) {
	f.putOp(database.Operation{ID: id, Request: request, Status: status, StartTime: start, LastTransitionTime: start,
		ExternalID: cmPoolKey, InternalID: cmPoolCS, NotificationURI: f.armURL,
		OperationID: "/subscriptions/" + sub + "/providers/x/hcpOperationStatuses/" + id})
	f.db.PutResource(&database.Resource{ID: "np1", PartitionKey: sub, Key: cmPoolKey, InternalID: cmPoolCS,
		ActiveOperationID: id, ProvisioningState: status})
}

// TestClustersMgmtNodePoolOperationsEnd: a Create, an Update and a Delete of
// a node pool whose internalId is a clusters_mgmt path end as Cluster
// Service says, from the aro_hcp status of the same node pool; the Delete
// ends when the node pool's own API answers 404 too. The clusters_mgmt
// path with /status, which that API never served, is never requested.
func TestClustersMgmtNodePoolOperationsEnd(t *testing.T) {
	f := newFixture(t)
	start := f.now.Add(-time.Minute)
	f.cs.Set(cmPoolCS, http.StatusOK, cmPoolObject)

	f.putCMPoolOp("create", arm.RequestCreate, arm.ProvisioningStateAccepted, start)
	for _, step := range []struct {
		state string
		want  arm.ProvisioningState
	}{
		{"pending", arm.ProvisioningStateAccepted},
		{"installing", arm.ProvisioningStateProvisioning},
		{"ready", arm.ProvisioningStateSucceeded},
	} {
		f.cs.Set(cmPoolStatus, http.StatusOK, nodePoolStatus(step.state, ""))
		f.poll(t, "create")
		require.Equal(t, step.want, f.op(t, "create").Status, step.state)
		require.Equal(t, step.want, f.resource(t, cmPoolKey).ProvisioningState, step.state)
	}

	f.putCMPoolOp("update", arm.RequestUpdate, arm.ProvisioningStateAccepted, start)
	for _, step := range []struct {
		state string
		want  arm.ProvisioningState
	}{
		{"validating_update", arm.ProvisioningStateAccepted},
		{"updating", arm.ProvisioningStateUpdating},
		{"ready", arm.ProvisioningStateSucceeded},
	} {
		f.cs.Set(cmPoolStatus, http.StatusOK, nodePoolStatus(step.state, ""))
		f.poll(t, "update")
		require.Equal(t, step.want, f.op(t, "update").Status, step.state)
	}

	f.putCMPoolOp("delete", arm.RequestDelete, arm.ProvisioningStateDeleting, start)
	f.cs.Set(cmPoolStatus, http.StatusOK, nodePoolStatus("uninstalling", ""))
	require.Equal(t, poll.OutcomeUnchanged, f.poll(t, "delete"))
	// The aro_hcp status is gone while clusters_mgmt still has the object:
	// not finished.
	f.cs.Set(cmPoolStatus, http.StatusNotFound, ocm404Body)
	require.Equal(t, poll.OutcomeDeferred, f.poll(t, "delete"))
	require.Equal(t, arm.ProvisioningStateDeleting, f.op(t, "delete").Status)
	require.Equal(t, "delete", f.resource(t, cmPoolKey).ActiveOperationID)
	// Both answer Cluster Service's 404: done.
	f.cs.Set(cmPoolCS, http.StatusNotFound, ocm404Body)
	require.Equal(t, poll.OutcomeDeleted, f.poll(t, "delete"))
	require.Equal(t, arm.ProvisioningStateSucceeded, f.op(t, "delete").Status)
	for _, r := range f.db.Resources() {
		require.NotEqual(t, cmPoolKey, r.Key, "the node pool's Resources item is deleted")
	}

	var names []string
	for _, st := range f.arm.got() {
		names = append(names, st.Name+" "+string(st.Status))
	}
	require.Equal(t, []string{"create Succeeded", "update Succeeded", "delete Succeeded"}, names)
	require.Zero(t, f.cs.Requested(cmPoolCS+"/status"), "clusters_mgmt has no node pool status")
}

// TestClustersMgmtNodePoolFailure: a node pool in error fails its
// operation with the status's message.
func TestClustersMgmtNodePoolFailure(t *testing.T) {
	f := newFixture(t)
	f.putCMPoolOp("create", arm.RequestCreate, arm.ProvisioningStateProvisioning, f.now.Add(-time.Minute))
	f.cs.Set(cmPoolStatus, http.StatusOK, nodePoolStatus("error", "quota exceeded"))
	require.Equal(t, poll.OutcomeUpdated, f.poll(t, "create"))
	op := f.op(t, "create")
	require.Equal(t, arm.ProvisioningStateFailed, op.Status)
	require.Equal(t, &arm.CloudErrorBody{Code: arm.CodeInternalServerError, Message: "quota exceeded"}, op.Error)
}

// TestClustersMgmtNodePoolDeleteNeedsItsOwn404: the aro_hcp status's 404
// ends a clusters_mgmt node pool's Delete only with Cluster Service's 404
// for GET {internalId}. Anything else leaves it Deleting until its
// deadline, which ends it Failed when the answer that blocks it is not
// transient.
func TestClustersMgmtNodePoolDeleteNeedsItsOwn404(t *testing.T) {
	const deadline = time.Hour
	for _, tc := range []struct {
		name             string
		status, object   clusterservicetesting.Reply // zero: Cluster Service's 404
		wantLog          string
		wantObjectAsked  bool
		transient        bool // past the deadline it still waits
		finishedByObject bool
	}{
		{name: "object still there", status: clusterservicetesting.Reply{Code: 404, Body: ocm404Body}, object: clusterservicetesting.Reply{Code: 200, Body: cmPoolObject},
			wantLog: "aro_hcp API does not serve it", wantObjectAsked: true},
		{name: "object 404 from a router", status: clusterservicetesting.Reply{Code: 404, Body: ocm404Body}, object: clusterservicetesting.Reply{Code: 404, Body: nginx404},
			wantLog: "not an OCM error", wantObjectAsked: true},
		{name: "object unavailable", status: clusterservicetesting.Reply{Code: 404, Body: ocm404Body}, object: clusterservicetesting.Reply{Code: 503, Body: `{"kind":"Error","reason":"down"}`},
			wantLog: "HTTP 503", wantObjectAsked: true, transient: true},
		{name: "status 404 from a router", status: clusterservicetesting.Reply{Code: 404, Body: nginx404},
			wantLog: "not an OCM error"},
		{name: "both Cluster Service's 404", status: clusterservicetesting.Reply{Code: 404, Body: ocm404Body}, wantObjectAsked: true, finishedByObject: true},
	} {
		for _, past := range []bool{false, true} {
			name := tc.name + " inside the deadline"
			if past {
				name = tc.name + " past the deadline"
			}
			t.Run(name, func(t *testing.T) {
				f := newFixture(t)
				f.fn.Deadlines = poll.Deadlines{Delete: deadline}
				age := deadline / 2
				if past {
					age = deadline + time.Minute
				}
				f.putCMPoolOp("delete", arm.RequestDelete, arm.ProvisioningStateDeleting, f.now.Add(-age))
				f.cs.Set(cmPoolStatus, tc.status.Code, tc.status.Body)
				if tc.object.Code != 0 {
					f.cs.Set(cmPoolCS, tc.object.Code, tc.object.Body)
				}

				outcome, logs := f.pollLogged(t, "delete")
				require.Equal(t, tc.wantObjectAsked, f.cs.Requested(cmPoolCS) > 0)
				require.Zero(t, f.cs.Requested(cmPoolCS+"/status"))
				op := f.op(t, "delete")
				switch {
				case tc.finishedByObject:
					require.Equal(t, poll.OutcomeDeleted, outcome)
					require.Equal(t, arm.ProvisioningStateSucceeded, op.Status)
				case past && !tc.transient:
					require.Equal(t, poll.OutcomeUpdated, outcome)
					require.Equal(t, arm.ProvisioningStateFailed, op.Status)
					require.Contains(t, op.Error.Message, "did not complete within its deadline")
					require.Equal(t, arm.ProvisioningStateFailed, f.resource(t, cmPoolKey).ProvisioningState,
						"the Resources item follows, and stays")
					require.Contains(t, logs, tc.wantLog)
				default:
					require.Equal(t, poll.OutcomeDeferred, outcome)
					require.Equal(t, arm.ProvisioningStateDeleting, op.Status)
					require.Equal(t, "delete", f.resource(t, cmPoolKey).ActiveOperationID)
					require.Empty(t, f.arm.got())
					require.Contains(t, logs, tc.wantLog)
					require.True(t, strings.Contains(logs, "level=ERROR") || strings.Contains(logs, "level=WARN"), logs)
				}
			})
		}
	}
}
