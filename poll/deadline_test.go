package poll_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/clusterservice"
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
				f.cs.SetStatus(clusterCS, 200, clusterStatus(state))
			} else if tc.csCode != http.StatusNotFound { // the fake answers an OCM 404 for what it does not know
				f.cs.SetStatus(clusterCS, tc.csCode, tc.csBody)
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
			f.cs.SetStatus(clusterCS, 200, `{"kind":"ClusterStatus","id":"abc","state":"`+state+`","provision_error_code":"OCM3001","provision_error_message":"quota"}`)
			require.Equal(t, poll.OutcomeUpdated, f.poll(t, "op"))
			op := f.op(t, "op")
			require.Equal(t, want, op.Status)
			if want == arm.ProvisioningStateFailed {
				require.Equal(t, "OCM3001", op.Error.Code)
			}
		})
	}
}

// A Cluster Service call that fails for good (not transient) ends an
// operation past its deadline Failed with the deadline's error, as an
// answer would; before the deadline, and for a transient failure, the
// operation is deferred and left as it is.
func TestDeadlineFiresWhenClusterServiceKeepsFailing(t *testing.T) {
	deadlines := poll.Deadlines{Create: time.Hour, RequestCredential: 30 * time.Minute, RevokeCredentials: 45 * time.Minute}
	const forbidden = `{"kind":"Error","id":"403","code":"CLUSTERS-MGMT-403","reason":"Forbidden"}`
	creds := func(body string) func(f *fixture) {
		return func(f *fixture) { f.cs.Set(credsCS, http.StatusOK, body) }
	}
	for _, tc := range []struct {
		name      string
		op        database.Operation
		cs        func(f *fixture)
		transient bool
	}{
		{name: "credential request answered 403",
			op: database.Operation{Request: arm.RequestRequestCredential, Status: arm.ProvisioningStateProvisioning, InternalID: credCS},
			cs: func(f *fixture) { f.cs.Set(credCS, http.StatusForbidden, forbidden) }},
		{name: "credential request answered with an object without an id",
			op: database.Operation{Request: arm.RequestRequestCredential, Status: arm.ProvisioningStateAccepted, InternalID: credCS},
			cs: func(f *fixture) {
				f.cs.Set(credCS, http.StatusOK, `{"kind":"BreakGlassCredential","status":"created"}`)
			}},
		{name: "cluster Create answered 403",
			op: database.Operation{Request: arm.RequestCreate, Status: arm.ProvisioningStateProvisioning},
			cs: func(f *fixture) { f.cs.SetStatus(clusterCS, http.StatusForbidden, forbidden) }},
		{name: "cluster Create ready, its object for billing answered 403",
			op: database.Operation{Request: arm.RequestCreate, Status: arm.ProvisioningStateProvisioning},
			cs: func(f *fixture) {
				f.cs.SetStatus(clusterCS, http.StatusOK, clusterStatus("ready"))
				f.cs.Set(clusterCS, http.StatusForbidden, forbidden)
			}},
		{name: "revocation whose credential list ends short of its total",
			op: database.Operation{Request: arm.RequestRevokeCredentials, Status: arm.ProvisioningStateDeleting},
			cs: creds(`{"kind":"BreakGlassCredentialList","page":1,"size":1,"total":3,"items":[{"id":"a","status":"revoked"}]}`)},
		{name: "cluster Create answered 503", transient: true,
			op: database.Operation{Request: arm.RequestCreate, Status: arm.ProvisioningStateProvisioning},
			cs: func(f *fixture) {
				f.cs.SetStatus(clusterCS, http.StatusServiceUnavailable, `{"kind":"Error","reason":"unavailable"}`)
			}},
		// A private DNS zone's outage: NXDOMAIN for Cluster Service's host.
		{name: "cluster Create whose Cluster Service host does not resolve", transient: true,
			op: database.Operation{Request: arm.RequestCreate, Status: arm.ProvisioningStateProvisioning},
			cs: func(f *fixture) {
				client, err := clusterservice.NewClient(clusterservice.Config{URL: "https://cluster-service.invalid"})
				if err != nil {
					panic(err)
				}
				f.fn.Cluster = client
			}},
	} {
		for _, age := range []time.Duration{20 * time.Minute, 2 * time.Hour} {
			past := age > time.Hour
			t.Run(fmt.Sprintf("%s/started %s ago", tc.name, age), func(t *testing.T) {
				f := newFixture(t)
				f.fn.Deadlines = deadlines
				op := tc.op
				op.ID, op.StartTime, op.NotificationURI = "op", f.now.Add(-age), f.armURL
				op.LastTransitionTime = op.StartTime
				f.putOp(op)
				tc.cs(f)
				outcome := f.poll(t, "op")
				got := f.op(t, "op")
				if !past || tc.transient {
					require.Equal(t, poll.OutcomeDeferred, outcome)
					require.Equal(t, tc.op.Status, got.Status)
					require.Nil(t, got.Error)
					require.Empty(t, f.arm.got())
					return
				}
				require.Equal(t, poll.OutcomeUpdated, outcome)
				require.Equal(t, arm.ProvisioningStateFailed, got.Status)
				require.Equal(t, arm.CodeInternalServerError, got.Error.Code)
				require.Regexp(t, `^The operation did not complete within its deadline of \S+\.`, got.Error.Message)
				require.NotContains(t, got.Error.Message, "403", "Cluster Service's failure is logged, not told the customer")
				require.Equal(t, f.now, got.LastTransitionTime)
				require.Empty(t, f.open(), "a Create ended Failed is not billed")
				sent := f.arm.got()
				require.Len(t, sent, 1)
				require.Equal(t, got.Error, sent[0].Error)
			})
		}
	}
}

// A credential list that never ends costs one bounded listing a poll, and
// past the deadline it ends the revocation.
func TestRevocationWithAListThatNeverEnds(t *testing.T) {
	f := newFixture(t)
	f.fn.Deadlines = poll.Deadlines{RevokeCredentials: 45 * time.Minute}
	f.cs.Endless(credsCS)
	f.putOp(database.Operation{ID: "op", Request: arm.RequestRevokeCredentials, Status: arm.ProvisioningStateDeleting,
		StartTime: f.now.Add(-10 * time.Minute)})
	require.Equal(t, poll.OutcomeDeferred, f.poll(t, "op"))
	listings := f.cs.Calls()
	require.Equal(t, 100, listings, "one bounded listing")

	f.now = f.now.Add(time.Hour)
	require.Equal(t, poll.OutcomeUpdated, f.poll(t, "op"))
	require.Equal(t, 2*listings, f.cs.Calls())
	op := f.op(t, "op")
	require.Equal(t, arm.ProvisioningStateFailed, op.Status)
	require.Contains(t, op.Error.Message, "deadline of 45m0s")
}
