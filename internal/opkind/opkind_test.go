package opkind_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/opkind"
)

const (
	cmCluster  = "/api/clusters_mgmt/v1/clusters/c"
	hcpCluster = "/api/aro_hcp/v1alpha1/clusters/c"
	nodePool   = "/api/aro_hcp/v1alpha1/clusters/c/node_pools/np"
	cmNodePool = "/api/clusters_mgmt/v1/clusters/c/node_pools/np" // as ARO-HCP's 2024-10 frontend wrote it
	auth       = "/api/aro_hcp/v1alpha1/clusters/c/external_auth_config/external_auths/ea"
	credential = "/api/clusters_mgmt/v1/clusters/c/break_glass_credentials/b"
)

// Every row of the contract's table "Operation kinds and Cluster Service",
// and every pairing that is not one.
func TestOf(t *testing.T) {
	rows := map[string]map[arm.Request]opkind.Kind{
		cmCluster: {arm.RequestCreate: opkind.Cluster, arm.RequestUpdate: opkind.Cluster, arm.RequestDelete: opkind.Cluster,
			arm.RequestRevokeCredentials: opkind.CredentialRevocation},
		hcpCluster: {arm.RequestCreate: opkind.Cluster, arm.RequestUpdate: opkind.Cluster, arm.RequestDelete: opkind.Cluster,
			arm.RequestRevokeCredentials: opkind.CredentialRevocation},
		nodePool:   {arm.RequestCreate: opkind.NodePool, arm.RequestUpdate: opkind.NodePool, arm.RequestDelete: opkind.NodePool},
		cmNodePool: {arm.RequestCreate: opkind.NodePool, arm.RequestUpdate: opkind.NodePool, arm.RequestDelete: opkind.NodePool},
		auth:       {arm.RequestCreate: opkind.ExternalAuth, arm.RequestUpdate: opkind.ExternalAuth, arm.RequestDelete: opkind.ExternalAuth},
		credential: {arm.RequestRequestCredential: opkind.CredentialRequest},
	}
	for path, kinds := range rows {
		for _, request := range arm.Requests {
			t.Run(path+"/"+string(request), func(t *testing.T) {
				kind, id, err := opkind.Of(request, path)
				want, ok := kinds[request]
				if !ok {
					require.Error(t, err)
					require.Equal(t, opkind.ReasonMismatch, opkind.Reason(err))
					require.Empty(t, kind)
					return
				}
				require.NoError(t, err)
				require.Equal(t, want, kind)
				require.Equal(t, path, id.Path)
			})
		}
	}
}

func TestOfRefuses(t *testing.T) {
	for name, tc := range map[string]struct {
		request    arm.Request
		internalID string
		reason     string
	}{
		"unknown request":          {"Patch", cmCluster, opkind.ReasonRequest},
		"empty request":            {"", cmCluster, opkind.ReasonRequest},
		"request in another case":  {"create", cmCluster, opkind.ReasonRequest},
		"not a path":               {arm.RequestCreate, "not a path", opkind.ReasonInternalID},
		"dot segments":             {arm.RequestCreate, "/api/clusters_mgmt/v1/clusters/../c", opkind.ReasonInternalID},
		"credential under aro_hcp": {arm.RequestRequestCredential, "/api/aro_hcp/v1alpha1/clusters/c/break_glass_credentials/b", opkind.ReasonInternalID},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := opkind.Of(tc.request, tc.internalID)
			require.Error(t, err)
			require.Equal(t, tc.reason, opkind.Reason(err))
		})
	}
}

// Check is Of for an unfinished operation; a finished one is only
// notified, so its internalId does not matter, its request and status do.
func TestCheck(t *testing.T) {
	kind, _, err := opkind.Check(arm.ProvisioningStateAccepted, arm.RequestCreate, auth)
	require.NoError(t, err)
	require.Equal(t, opkind.ExternalAuth, kind)

	kind, _, err = opkind.Check(arm.ProvisioningStateSucceeded, arm.RequestRevokeCredentials, nodePool)
	require.NoError(t, err)
	require.Empty(t, kind)

	_, _, err = opkind.Check(arm.ProvisioningStateFailed, "Patch", cmCluster)
	require.Equal(t, opkind.ReasonRequest, opkind.Reason(err))
	_, _, err = opkind.Check("Running", arm.RequestCreate, cmCluster)
	require.Equal(t, opkind.ReasonStatus, opkind.Reason(err))
	_, _, err = opkind.Check(arm.ProvisioningStateDeleting, arm.RequestRevokeCredentials, nodePool)
	require.Equal(t, opkind.ReasonMismatch, opkind.Reason(err))

	// A node pool of either form is polled, whatever API its id names.
	for _, id := range []string{nodePool, cmNodePool} {
		kind, _, err = opkind.Check(arm.ProvisioningStateDeleting, arm.RequestDelete, id)
		require.NoError(t, err, id)
		require.Equal(t, opkind.NodePool, kind, id)
	}
}

func TestWritesResources(t *testing.T) {
	for _, k := range opkind.Kinds {
		want := k != opkind.CredentialRequest && k != opkind.CredentialRevocation
		require.Equal(t, want, k.WritesResources(), "%s", k)
	}
}
