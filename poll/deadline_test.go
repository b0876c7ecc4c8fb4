package poll_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/poll"
)

// An operation still unfinished past its request's deadline ends Failed
// with InternalServerError, its Resources item follows and ARM is told;
// just inside the deadline nothing changes. Updates have no deadline
// unless one is set.
func TestDeadlines(t *testing.T) {
	deadlines := poll.Deadlines{Create: time.Hour, Delete: 12 * time.Hour}
	for _, tc := range []struct {
		name      string
		request   arm.Request
		status    arm.ProvisioningState
		csCode    int    // 0: the cluster is installing (or uninstalling for a Delete)
		csBody    string // when csCode is set
		age       time.Duration
		deadlines poll.Deadlines
		wantFail  string // "" when the operation must stay as it is
	}{
		{name: "create just inside", request: arm.RequestCreate, status: arm.ProvisioningStateProvisioning, age: time.Hour},
		{name: "create just past", request: arm.RequestCreate, status: arm.ProvisioningStateProvisioning, age: time.Hour + time.Second,
			wantFail: "did not complete within its deadline of 1h0m0s."},
		{name: "delete just inside", request: arm.RequestDelete, status: arm.ProvisioningStateDeleting, age: 12 * time.Hour},
		{name: "delete just past", request: arm.RequestDelete, status: arm.ProvisioningStateDeleting, age: 12*time.Hour + time.Second,
			wantFail: "did not complete within its deadline of 12h0m0s."},
		{name: "update: no deadline by default", request: arm.RequestUpdate, status: arm.ProvisioningStateUpdating, age: 1000 * time.Hour},
		{name: "update just inside a set deadline", request: arm.RequestUpdate, status: arm.ProvisioningStateUpdating, age: 6 * time.Hour,
			deadlines: poll.Deadlines{Update: 6 * time.Hour}},
		{name: "update just past a set deadline", request: arm.RequestUpdate, status: arm.ProvisioningStateUpdating, age: 6*time.Hour + time.Second,
			deadlines: poll.Deadlines{Update: 6 * time.Hour}, wantFail: "deadline of 6h0m0s."},
		{name: "create gone from Cluster Service, inside", request: arm.RequestCreate, status: arm.ProvisioningStateProvisioning, age: 59 * time.Minute,
			csCode: http.StatusNotFound, csBody: `{"kind":"Error","id":"404","reason":"not found"}`},
		{name: "create gone from Cluster Service, past", request: arm.RequestCreate, status: arm.ProvisioningStateProvisioning, age: 61 * time.Minute,
			csCode: http.StatusNotFound, csBody: `{"kind":"Error","id":"404","reason":"not found"}`, wantFail: "deadline of 1h0m0s."},
		{name: "pending past the deadline keeps Cluster Service's words", request: arm.RequestCreate, status: arm.ProvisioningStateAccepted,
			age: 2 * time.Hour, csCode: http.StatusOK, csBody: `{"kind":"ClusterStatus","id":"abc","state":"pending","description":"waiting for quota"}`,
			wantFail: "deadline of 1h0m0s. Cluster Service: waiting for quota"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.fn.Deadlines = deadlines
			if tc.deadlines != (poll.Deadlines{}) {
				f.fn.Deadlines = tc.deadlines
			}
			f.putOp(database.Operation{ID: "op", Request: tc.request, Status: tc.status,
				StartTime: f.now.Add(-tc.age), LastTransitionTime: f.now.Add(-time.Minute), NotificationURI: f.armURL})
			f.db.PutResource(&database.Resource{ID: "r1", PartitionKey: sub, Key: clusterKey, InternalID: clusterCS,
				ActiveOperationID: "op", ProvisioningState: tc.status})
			state := "installing"
			switch tc.status {
			case arm.ProvisioningStateDeleting:
				state = "uninstalling"
			case arm.ProvisioningStateUpdating:
				state = "updating"
			}
			if tc.csCode == 0 {
				f.cs.set(clusterCS, 200, clusterStatus(state))
			} else if tc.csCode != http.StatusNotFound { // the fake answers an OCM 404 for what it does not know
				f.cs.set(clusterCS, tc.csCode, tc.csBody)
			}

			outcome := f.poll(t, "op")
			op := f.op(t, "op")
			r, err := f.db.GetResource(context.Background(), sub, clusterKey)
			require.NoError(t, err)
			if tc.wantFail == "" {
				require.Equal(t, poll.OutcomeUnchanged, outcome)
				require.Equal(t, tc.status, op.Status)
				require.Empty(t, f.arm.got())
				return
			}
			require.Equal(t, poll.OutcomeUpdated, outcome)
			require.Equal(t, arm.ProvisioningStateFailed, op.Status)
			require.Equal(t, arm.CodeInternalServerError, op.Error.Code)
			require.Contains(t, op.Error.Message, tc.wantFail)
			require.Equal(t, arm.ProvisioningStateFailed, r.ProvisioningState, "the Resources item follows")
			require.Empty(t, r.ActiveOperationID)
			got := f.arm.got()
			require.Len(t, got, 1, "ARM is notified")
			require.Equal(t, arm.ProvisioningStateFailed, got[0].Status)
		})
	}
}

// A status that ends the operation wins over a passed deadline: a cluster
// that became ready is Succeeded, one that failed keeps its own error.
func TestTerminalStatusWinsOverTheDeadline(t *testing.T) {
	for state, want := range map[string]arm.ProvisioningState{"ready": arm.ProvisioningStateSucceeded, "error": arm.ProvisioningStateFailed} {
		t.Run(state, func(t *testing.T) {
			f := newFixture(t)
			f.fn.Deadlines = poll.Deadlines{Create: time.Hour}
			f.putOp(database.Operation{ID: "op", Request: arm.RequestCreate, Status: arm.ProvisioningStateProvisioning, StartTime: f.now.Add(-2 * time.Hour)})
			f.cs.set(clusterCS, 200, `{"kind":"ClusterStatus","id":"abc","state":"`+state+`","provision_error_code":"OCM3001","provision_error_message":"quota"}`)
			require.Equal(t, poll.OutcomeUpdated, f.poll(t, "op"))
			op := f.op(t, "op")
			require.Equal(t, want, op.Status)
			if want == arm.ProvisioningStateFailed {
				require.Equal(t, "OCM3001", op.Error.Code)
			}
		})
	}
}
