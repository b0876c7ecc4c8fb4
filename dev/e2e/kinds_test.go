package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/clustersim"
	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/internal/testenv"
)

// billing returns the billing items of a cluster's resource ID, as the
// Cosmos client lists the open ones and reads them all.
func (s *handlerStack) billing(sub, resourceID string) (open []*database.Billing) {
	s.t.Helper()
	cosmos := testenv.SharedCosmos(s.t)
	db, err := database.NewCosmosClient(database.CosmosConfig{
		Endpoint: cosmos.Endpoint, Key: cosmos.Key, Database: s.db, InsecureSkipVerify: true,
		OperationsContainer: frontend.OperationsContainer, ResourcesContainer: frontend.ResourcesContainer,
		LocksContainer: frontend.LocksContainer, BillingContainer: frontend.BillingContainer,
	})
	require.NoError(s.t, err)
	open, err = db.OpenBilling(context.Background(), sub, resourceID)
	require.NoError(s.t, err)
	return open
}

// Every kind of operation through the built handler, against the Cluster
// Service simulator and the Cosmos test server: an external auth created
// and deleted, a clusters_mgmt node pool created and deleted, a credential
// issued, a revocation that waits for every unexpired credential, and the
// billing item of a cluster created and then deleted.
func TestEveryKindThroughTheHandler(t *testing.T) {
	s := startStack(t)
	ctx := context.Background()
	sec := time.Second
	const (
		hcp = "/api/aro_hcp/v1alpha1/clusters/"
		cm  = "/api/clusters_mgmt/v1/clusters/"
	)
	// Credentials expire by the simulator's clock; the handler judges them
	// by its own, a day later.
	lifetime := clustersim.Duration(30 * 24 * time.Hour)

	// An external auth of cluster "ha": no status for a while, then ready.
	require.NoError(t, s.sim.AddCluster("ha", clustersim.Script{API: clustersim.APIAROHCP}))
	require.NoError(t, s.sim.AddExternalAuth("ha", "ea1", clustersim.Script{NoStatusFor: clustersim.Duration(5 * sec), Installing: clustersim.Duration(5 * sec)}))
	authKey := clusterKey(subA, "ha") + "/externalAuths/ea1"
	authCS := hcp + "ha/external_auth_config/external_auths/ea1"
	s.seed(subA, "ea-create", "Create", "Accepted", authKey, authCS)
	s.clock.Advance(20 * sec)
	require.Equal(t, "updated", s.pollOp(subA, "ea-create"))
	require.Equal(t, "Succeeded", s.opStatus(subA, "ea-create"))
	require.Empty(t, s.billing(subA, clusterKey(subA, "ha")), "only a cluster's Create bills")

	// Its delete: uninstalling, then Cluster Service's 404.
	require.NoError(t, s.sim.DeleteExternalAuth("ha", "ea1", 10*sec))
	require.NoError(t, s.fe.PutOperation(ctx, frontend.Operation{ID: "ea-delete", PartitionKey: subA, Request: "Delete", Status: "Accepted",
		ExternalID: authKey, InternalID: authCS}))
	require.NoError(t, s.fe.PutResource(ctx, frontend.Resource{ID: "res-ea-create", PartitionKey: subA, Key: authKey, InternalID: authCS,
		ActiveOperationID: "ea-delete", ProvisioningState: "Deleting"}))
	require.Equal(t, "updated", s.pollOp(subA, "ea-delete"))
	require.Equal(t, "Deleting", s.opStatus(subA, "ea-delete"))
	s.clock.Advance(20 * sec)
	require.Equal(t, "deleted", s.pollOp(subA, "ea-delete"))
	require.Equal(t, "Succeeded", s.opStatus(subA, "ea-delete"))
	item, err := s.fe.Resource(ctx, subA, "res-ea-create")
	require.NoError(t, err)
	require.Nil(t, item, "the external auth's Resources item is deleted")

	// A node pool as ARO-HCP's 2024-10 frontend wrote it, under
	// clusters_mgmt: its status is read under aro_hcp, and its delete ends
	// on Cluster Service's 404 under both.
	require.NoError(t, s.sim.AddCluster("hb", clustersim.Script{}))
	require.NoError(t, s.sim.AddNodePool("hb", "np1", clustersim.Script{Installing: clustersim.Duration(5 * sec)}))
	poolKey := clusterKey(subA, "hb") + "/nodePools/np1"
	poolCS := cm + "hb/node_pools/np1"
	s.seed(subA, "np-create", "Create", "Accepted", poolKey, poolCS)
	require.Equal(t, "updated", s.pollOp(subA, "np-create"))
	require.Equal(t, "Provisioning", s.opStatus(subA, "np-create"))
	s.clock.Advance(20 * sec)
	require.Equal(t, "updated", s.pollOp(subA, "np-create"))
	require.Equal(t, "Succeeded", s.opStatus(subA, "np-create"))
	require.NoError(t, s.sim.DeleteNodePool("hb", "np1", 10*sec))
	s.seed(subA, "np-delete", "Delete", "Deleting", poolKey, poolCS)
	require.Equal(t, "unchanged", s.pollOp(subA, "np-delete"))
	s.clock.Advance(20 * sec)
	require.Equal(t, "deleted", s.pollOp(subA, "np-delete"))
	require.Equal(t, "Succeeded", s.opStatus(subA, "np-delete"))

	// A credential of cluster "cm": created, then issued. No Resources item.
	require.NoError(t, s.sim.AddCluster("cm", clustersim.Script{API: clustersim.APIClustersMgmt}))
	require.NoError(t, s.sim.AddCredential("cm", "b1", clustersim.Script{Issuing: clustersim.Duration(10 * sec), ExpiresIn: lifetime}))
	require.NoError(t, s.fe.PutOperation(ctx, frontend.Operation{ID: "cred", PartitionKey: subB, Request: "RequestCredential", Status: "Accepted",
		ExternalID: clusterKey(subB, "cm") + "/breakGlassCredentials/b1", InternalID: cm + "cm/break_glass_credentials/b1"}))
	require.Equal(t, "updated", s.pollOp(subB, "cred"))
	require.Equal(t, "Provisioning", s.opStatus(subB, "cred"))
	s.clock.Advance(20 * sec)
	require.Equal(t, "updated", s.pollOp(subB, "cred"))
	require.Equal(t, "Succeeded", s.opStatus(subB, "cred"))

	// A revocation of every credential of "cm": Deleting until the last
	// unexpired one is revoked.
	require.NoError(t, s.sim.AddCredential("cm", "b2", clustersim.Script{ExpiresIn: lifetime}))
	s.clock.Advance(sec)
	_, err = s.sim.RevokeCredentials("cm", 10*sec)
	require.NoError(t, err)
	require.NoError(t, s.fe.PutOperation(ctx, frontend.Operation{ID: "revoke", PartitionKey: subB, Request: "RevokeCredentials", Status: "Accepted",
		ExternalID: clusterKey(subB, "cm"), InternalID: cm + "cm"}))
	require.Equal(t, "updated", s.pollOp(subB, "revoke"))
	require.Equal(t, "Deleting", s.opStatus(subB, "revoke"))
	s.clock.Advance(20 * sec)
	require.Equal(t, "updated", s.pollOp(subB, "revoke"))
	require.Equal(t, "Succeeded", s.opStatus(subB, "revoke"))

	// A cluster created, then deleted: one open billing item, then closed.
	require.NoError(t, s.sim.AddCluster("bc", clustersim.Script{Installing: clustersim.Duration(5 * sec), ManagedResourceGroup: "bc-rg"}))
	s.seed(subC, "bc-create", "Create", "Accepted", clusterKey(subC, "bc"), hcp+"bc")
	s.clock.Advance(20 * sec)
	require.Equal(t, "updated", s.pollOp(subC, "bc-create"))
	require.Equal(t, "Succeeded", s.opStatus(subC, "bc-create"))
	open := s.billing(subC, clusterKey(subC, "bc"))
	require.Len(t, open, 1)
	require.Equal(t, database.BillingID(clusterKey(subC, "bc"), "bc"), open[0].ID)
	require.Equal(t, "eastus", open[0].Location)
	require.Equal(t, "/subscriptions/"+subC+"/resourceGroups/bc-rg", open[0].ManagedResourceGroup)
	require.False(t, open[0].CreationTime.IsZero())
	require.Equal(t, "done", s.pollOp(subC, "bc-create"))
	require.Len(t, s.billing(subC, clusterKey(subC, "bc")), 1, "a second poll writes no second item")

	require.NoError(t, s.sim.DeleteCluster("bc", 5*sec))
	s.seed(subC, "bc-delete", "Delete", "Deleting", clusterKey(subC, "bc"), hcp+"bc")
	s.clock.Advance(20 * sec)
	require.Equal(t, "deleted", s.pollOp(subC, "bc-delete"))
	require.Empty(t, s.billing(subC, clusterKey(subC, "bc")), "the item is closed")

	// An operation whose kind and request do not go together is never
	// sent by scan, and poll calls it invalid.
	require.NoError(t, s.fe.PutOperation(ctx, frontend.Operation{ID: "mismatch", PartitionKey: subA, Request: "RevokeCredentials", Status: "Accepted",
		ExternalID: clusterKey(subA, "ha") + "/nodePools/np", InternalID: hcp + "ha/node_pools/np"}))
	for _, m := range s.scan() {
		require.NotEqual(t, "mismatch", m["operationId"])
	}
	require.Equal(t, "invalid", s.pollOp(subA, "mismatch"))
	require.Equal(t, "Accepted", s.opStatus(subA, "mismatch"))
}
