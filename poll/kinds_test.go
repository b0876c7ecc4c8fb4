package poll_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/clusterservice/clusterservicetesting"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/internal/database/databasetesting"
	"github.com/opstatus/opstatus/poll"
)

const (
	authKey = clusterKey + "/externalAuths/ea1"
	authCS  = clusterCS + "/external_auth_config/external_auths/ea1"
	credCS  = "/api/clusters_mgmt/v1/clusters/abc/break_glass_credentials/b1"
	credsCS = "/api/clusters_mgmt/v1/clusters/abc/break_glass_credentials"
)

func externalAuth(state, message string) string {
	if state == "" {
		return `{"kind":"ExternalAuth","id":"ea1"}`
	}
	return `{"kind":"ExternalAuth","id":"ea1","status":{"state":{"value":"` + state + `"},"message":"` + message + `"}}`
}

func credential(id, status string, expires time.Time) string {
	return fmt.Sprintf(`{"kind":"BreakGlassCredential","id":%q,"status":%q,"expiration_timestamp":%q}`, id, status, expires.Format(time.RFC3339))
}

func (f *fixture) resource(t *testing.T, key string) *database.Resource {
	t.Helper()
	r, err := f.db.GetResource(context.Background(), sub, key)
	require.NoError(t, err)
	return r
}

func TestExternalAuthCreateAndDelete(t *testing.T) {
	f := newFixture(t)
	f.putOp(database.Operation{ID: "create", Request: arm.RequestCreate, Status: arm.ProvisioningStateAccepted,
		ExternalID: authKey, InternalID: authCS})
	f.db.PutResource(&database.Resource{ID: "ea", PartitionKey: sub, Key: authKey, InternalID: authCS,
		ActiveOperationID: "create", ProvisioningState: arm.ProvisioningStateAccepted})

	// An object with no state at all is done (Cluster Service answered
	// with it).
	f.cs.Set(authCS, http.StatusOK, externalAuth("", ""))
	require.Equal(t, poll.OutcomeUpdated, f.poll(t, "create"))
	require.Equal(t, arm.ProvisioningStateSucceeded, f.op(t, "create").Status)
	r := f.resource(t, authKey)
	require.Equal(t, arm.ProvisioningStateSucceeded, r.ProvisioningState)
	require.Empty(t, r.ActiveOperationID)
	require.Empty(t, f.db.BillingItems(), "only clusters are billed")

	f.putOp(database.Operation{ID: "delete", Request: arm.RequestDelete, Status: arm.ProvisioningStateAccepted,
		ExternalID: authKey, InternalID: authCS})
	r.ActiveOperationID = "delete"
	f.db.PutResource(r)
	f.cs.Set(authCS, http.StatusOK, externalAuth("ready", ""))
	require.Equal(t, poll.OutcomeUnchanged, f.poll(t, "delete"), "ready during a Delete")
	f.cs.Set(authCS, http.StatusOK, externalAuth("uninstalling", ""))
	require.Equal(t, poll.OutcomeUpdated, f.poll(t, "delete"))
	require.Equal(t, arm.ProvisioningStateDeleting, f.op(t, "delete").Status)

	// Cluster Service's own 404 finishes the delete.
	f.cs.Delete(authCS)
	require.Equal(t, poll.OutcomeDeleted, f.poll(t, "delete"))
	require.Equal(t, arm.ProvisioningStateSucceeded, f.op(t, "delete").Status)
	_, err := f.db.GetResource(context.Background(), sub, authKey)
	require.ErrorIs(t, err, database.ErrNotFound)
}

func TestExternalAuthError(t *testing.T) {
	f := newFixture(t)
	f.putOp(database.Operation{ID: "op", Request: arm.RequestUpdate, Status: arm.ProvisioningStateUpdating,
		ExternalID: authKey, InternalID: authCS})
	f.cs.Set(authCS, http.StatusOK, externalAuth("error", "issuer unreachable"))
	require.Equal(t, poll.OutcomeUpdated, f.poll(t, "op"))
	op := f.op(t, "op")
	require.Equal(t, arm.ProvisioningStateFailed, op.Status)
	require.Equal(t, &arm.CloudErrorBody{Code: arm.CodeInternalServerError, Message: "issuer unreachable"}, op.Error)
}

// Credentials have no Resources item: their operations write the
// operation alone, and never read a Resources item.
func TestCredentialRequestWritesTheOperationAlone(t *testing.T) {
	f := newFixture(t)
	f.putOp(database.Operation{ID: "op", Request: arm.RequestRequestCredential, Status: arm.ProvisioningStateAccepted,
		ExternalID: clusterKey + "/breakGlassCredentials/b1", InternalID: credCS, NotificationURI: f.armURL})
	f.db.PutResource(&database.Resource{ID: "r1", PartitionKey: sub, Key: clusterKey, InternalID: clusterCS,
		ProvisioningState: arm.ProvisioningStateSucceeded})

	f.cs.Set(credCS, http.StatusOK, credential("b1", "created", f.now.Add(time.Hour)))
	require.Equal(t, poll.OutcomeUpdated, f.poll(t, "op"))
	require.Equal(t, arm.ProvisioningStateProvisioning, f.op(t, "op").Status)

	f.cs.Set(credCS, http.StatusOK, credential("b1", "issued", f.now.Add(time.Hour)))
	require.Equal(t, poll.OutcomeUpdated, f.poll(t, "op"))
	require.Equal(t, arm.ProvisioningStateSucceeded, f.op(t, "op").Status)
	require.Zero(t, f.count(databasetesting.OpGetResource)+f.count(databasetesting.OpReplaceResource)+f.count(databasetesting.OpDeleteResource))
	require.Len(t, f.arm.got(), 1)
}

func TestCredentialRequestFailed(t *testing.T) {
	f := newFixture(t)
	f.putOp(database.Operation{ID: "op", Request: arm.RequestRequestCredential, Status: arm.ProvisioningStateProvisioning, InternalID: credCS})
	f.cs.Set(credCS, http.StatusOK, credential("b1", "failed", f.now.Add(time.Hour)))
	require.Equal(t, poll.OutcomeUpdated, f.poll(t, "op"))
	op := f.op(t, "op")
	require.Equal(t, arm.ProvisioningStateFailed, op.Status)
	require.Equal(t, &arm.CloudErrorBody{Code: arm.CodeInternalServerError, Message: "Failed to provision cluster credential"}, op.Error)
}

// A credential request that a revocation overtook ends Canceled with
// ARO-HCP's error, in the item and in ARM's notification.
func TestCredentialRequestOvertakenIsCanceledWithAnError(t *testing.T) {
	f := newFixture(t)
	f.putOp(database.Operation{ID: "op", Request: arm.RequestRequestCredential, Status: arm.ProvisioningStateProvisioning,
		ExternalID: clusterKey + "/breakGlassCredentials/b1", InternalID: credCS, NotificationURI: f.armURL})
	f.cs.Set(credCS, http.StatusOK, credential("b1", "revoked", f.now.Add(time.Hour)))
	require.Equal(t, poll.OutcomeUpdated, f.poll(t, "op"))
	want := &arm.CloudErrorBody{Code: "Canceled", Message: "This operation was superseded by another"}
	op := f.op(t, "op")
	require.Equal(t, arm.ProvisioningStateCanceled, op.Status)
	require.Equal(t, want, op.Error)
	got := f.arm.got()
	require.Len(t, got, 1)
	require.Equal(t, arm.ProvisioningStateCanceled, got[0].Status)
	require.Equal(t, want, got[0].Error)
}

// A node pool or external auth in error without a message from Cluster
// Service ends with ARO-HCP's "Internal server error.", never an empty
// message.
func TestErrorWithoutAMessageGetsOne(t *testing.T) {
	f := newFixture(t)
	f.putOp(database.Operation{ID: "pool", Request: arm.RequestCreate, Status: arm.ProvisioningStateProvisioning,
		ExternalID: clusterKey + "/nodePools/np", InternalID: clusterCS + "/node_pools/np", NotificationURI: f.armURL})
	f.cs.SetStatus(clusterCS+"/node_pools/np", http.StatusOK, `{"kind":"NodePoolStatus","id":"np","state":{"kind":"NodePoolState","value":"error"}}`)
	f.putOp(database.Operation{ID: "auth", Request: arm.RequestUpdate, Status: arm.ProvisioningStateUpdating,
		ExternalID: authKey, InternalID: authCS})
	f.cs.Set(authCS, http.StatusOK, externalAuth("error", ""))
	want := &arm.CloudErrorBody{Code: arm.CodeInternalServerError, Message: "Internal server error."}
	for _, id := range []string{"pool", "auth"} {
		require.Equal(t, poll.OutcomeUpdated, f.poll(t, id))
		op := f.op(t, id)
		require.Equal(t, arm.ProvisioningStateFailed, op.Status, id)
		require.Equal(t, want, op.Error, id)
	}
	got := f.arm.got()
	require.Len(t, got, 1)
	require.Equal(t, want, got[0].Error)
}

func TestRevocationWaitsForEveryUnexpiredCredential(t *testing.T) {
	f := newFixture(t)
	f.putOp(database.Operation{ID: "op", Request: arm.RequestRevokeCredentials, Status: arm.ProvisioningStateAccepted})
	later, earlier := f.now.Add(time.Hour), f.now.Add(-time.Hour)

	// An issued, unexpired credential: the revocation has not reached it.
	f.cs.SetCredentials(credsCS, credential("a", "revoked", later), credential("b", "issued", later), credential("c", "issued", earlier))
	require.Equal(t, poll.OutcomeUpdated, f.poll(t, "op"))
	require.Equal(t, arm.ProvisioningStateDeleting, f.op(t, "op").Status)

	f.cs.SetCredentials(credsCS, credential("a", "revoked", later), credential("b", "awaiting_revocation", later), credential("c", "issued", earlier))
	require.Equal(t, poll.OutcomeUnchanged, f.poll(t, "op"))

	// Every unexpired one revoked; the expired one counts as revoked.
	f.cs.SetCredentials(credsCS, credential("a", "revoked", later), credential("b", "revoked", later), credential("c", "issued", earlier))
	require.Equal(t, poll.OutcomeUpdated, f.poll(t, "op"))
	require.Equal(t, arm.ProvisioningStateSucceeded, f.op(t, "op").Status)
	require.Zero(t, f.count(databasetesting.OpGetResource)+f.count(databasetesting.OpReplaceResource))
}

// A credential list whose page leaves out an empty items, as ARO-HCP's
// client reads it, is an empty list: the revocation is done.
func TestRevocationEndsOnAPageWithoutItems(t *testing.T) {
	f := newFixture(t)
	f.putOp(database.Operation{ID: "op", Request: arm.RequestRevokeCredentials, Status: arm.ProvisioningStateDeleting})
	f.cs.Set(credsCS, http.StatusOK, `{"kind":"BreakGlassCredentialList","page":1,"size":0,"total":0}`)
	require.Equal(t, poll.OutcomeUpdated, f.poll(t, "op"))
	require.Equal(t, arm.ProvisioningStateSucceeded, f.op(t, "op").Status)
}

// An operation whose kind and request do not go together, or whose request
// is unknown, is invalid: nobody is called and nothing is written.
func TestKindAndRequestThatDoNotGoTogetherAreInvalid(t *testing.T) {
	for name, op := range map[string]database.Operation{
		"a node pool revocation":            {Request: arm.RequestRevokeCredentials, InternalID: clusterCS + "/node_pools/np"},
		"a credential request on a cluster": {Request: arm.RequestRequestCredential, InternalID: clusterCS},
		"a credential deleted":              {Request: arm.RequestDelete, InternalID: credCS},
		"an external auth revocation":       {Request: arm.RequestRevokeCredentials, InternalID: authCS},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			op.ID, op.Status = "op", arm.ProvisioningStateAccepted
			f.putOp(op)
			require.Equal(t, poll.OutcomeInvalid, f.poll(t, "op"))
			require.Zero(t, f.cs.Calls())
			require.Zero(t, f.writes())
			require.Zero(t, f.lockOps())
		})
	}
}

// unchangedByKind is an unfinished operation of each kind and a Cluster
// Service that says nothing new about it.
var unchangedByKind = []struct {
	kind string
	op   database.Operation
	set  func(*clusterservicetesting.Fake)
}{
	{"cluster", database.Operation{Request: arm.RequestCreate, Status: arm.ProvisioningStateProvisioning},
		func(cs *clusterservicetesting.Fake) { cs.SetStatus(clusterCS, 200, clusterStatus("installing")) }},
	{"nodePool", database.Operation{Request: arm.RequestUpdate, Status: arm.ProvisioningStateUpdating, InternalID: clusterCS + "/node_pools/np"},
		func(cs *clusterservicetesting.Fake) {
			cs.SetStatus(clusterCS+"/node_pools/np", 200, `{"kind":"NodePoolStatus","id":"np","state":{"kind":"NodePoolState","value":"updating"}}`)
		}},
	{"externalAuth", database.Operation{Request: arm.RequestDelete, Status: arm.ProvisioningStateDeleting, InternalID: authCS},
		func(cs *clusterservicetesting.Fake) { cs.Set(authCS, 200, externalAuth("uninstalling", "")) }},
	{"credentialRequest", database.Operation{Request: arm.RequestRequestCredential, Status: arm.ProvisioningStateProvisioning, InternalID: credCS},
		func(cs *clusterservicetesting.Fake) { cs.Set(credCS, 200, credential("b1", "created", farFuture)) }},
	{"credentialRevocation", database.Operation{Request: arm.RequestRevokeCredentials, Status: arm.ProvisioningStateDeleting},
		func(cs *clusterservicetesting.Fake) {
			cs.SetCredentials(credsCS, credential("b1", "awaiting_revocation", farFuture))
		}},
}

var farFuture = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// An unchanged operation costs one Cosmos read and one Cluster Service
// call, whatever its kind.
func TestUnchangedCostsOneReadAndOneCallForEveryKind(t *testing.T) {
	for _, tc := range unchangedByKind {
		t.Run(tc.kind, func(t *testing.T) {
			f := newFixture(t)
			tc.op.ID = "op"
			f.putOp(tc.op)
			tc.set(f.cs)
			f.resetCounts()
			require.Equal(t, poll.OutcomeUnchanged, f.poll(t, "op"))
			require.Equal(t, 1, f.cs.Calls())
			require.Equal(t, 1, f.count(databasetesting.OpGetOperation))
			require.Zero(t, f.writes())
			require.Zero(t, f.lockOps())
		})
	}
}

// BenchmarkUnchangedPoll is the handler's side of the common case, per
// kind, the in-memory DBClient standing in for Cosmos and an httptest
// server for Cluster Service: where its CPU and allocations go
// (go test -bench UnchangedPoll -benchmem -cpuprofile cpu.out ./poll).
func BenchmarkUnchangedPoll(b *testing.B) {
	for _, tc := range unchangedByKind {
		b.Run(tc.kind, func(b *testing.B) {
			f := newFixture(b)
			tc.op.ID = "op"
			f.putOp(tc.op)
			tc.set(f.cs)
			b.ReportAllocs()
			for b.Loop() {
				if got := f.poll(b, "op"); got != poll.OutcomeUnchanged {
					b.Fatalf("outcome %s", got)
				}
			}
		})
	}
}
