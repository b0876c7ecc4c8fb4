package clustersim_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	arohcpv1alpha1 "github.com/openshift-online/ocm-sdk-go/arohcp/v1alpha1"
	cmv1 "github.com/openshift-online/ocm-sdk-go/clustersmgmt/v1"
	ocmerrors "github.com/openshift-online/ocm-sdk-go/errors"
	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/clustersim"
)

// A node pool is one object under both APIs, served where its cluster is:
// clusters_mgmt serves the object alone, its status without a state (as in
// 2024-10), and answers a 404 for a /status it does not have even while
// the node pool lives; aro_hcp serves the object and its /status. Once the
// delete finishes both answer Cluster Service's 404 for the node pool.
func TestNodePoolServedUnderBothAPIs(t *testing.T) {
	const (
		cmPath  = "/api/clusters_mgmt/v1/clusters/c1/node_pools/np1"
		hcpPath = "/api/aro_hcp/v1alpha1/clusters/c1/node_pools/np1"
	)
	sim, clock := newSim(t, clustersim.Options{})
	conn := ocmConn(t, sim)
	ctx := context.Background()
	require.NoError(t, sim.AddCluster("c1", clustersim.Script{}))
	require.NoError(t, sim.AddNodePool("c1", "np1", clustersim.Script{Installing: clustersim.Duration(time.Minute)}))

	cm := conn.ClustersMgmt().V1().Clusters().Cluster("c1").NodePools().NodePool("np1")
	hcp := conn.AroHCP().V1alpha1().Clusters().Cluster("c1").NodePools().NodePool("np1")
	for _, step := range []struct {
		advance  time.Duration
		state    string
		replicas int
	}{
		{0, clustersim.StateInstalling, 0},
		{time.Minute, clustersim.StateReady, 2},
	} {
		clock.Advance(step.advance)
		got, err := cm.Get().SendContext(ctx)
		require.NoError(t, err)
		require.Equal(t, cmv1.NodePoolKind, got.Body().Kind())
		require.Equal(t, "np1", got.Body().ID())
		require.Equal(t, cmPath, got.Body().HREF())
		require.Equal(t, step.replicas, got.Body().Status().CurrentReplicas())
		_, hasState := got.Body().Status().GetState()
		require.False(t, hasState, "clusters_mgmt's node pool status had no state")

		obj, err := hcp.Get().SendContext(ctx)
		require.NoError(t, err)
		require.Equal(t, hcpPath, obj.Body().HREF())
		require.Equal(t, step.state, obj.Body().Status().State().NodePoolStateValue())
		st, err := hcp.Status().Get().SendContext(ctx)
		require.NoError(t, err)
		require.Equal(t, step.state, st.Body().State().NodePoolStateValue())
		require.Equal(t, step.replicas, st.Body().CurrentReplicas())

		rec := get(t, sim, cmPath+"/status")
		require.Equal(t, http.StatusNotFound, rec.Code, "clusters_mgmt has no node pool status")
		require.Contains(t, rec.Body.String(), `"kind":"Error"`)
	}

	require.NoError(t, sim.DeleteNodePool("c1", "np1", time.Minute))
	st, err := hcp.Status().Get().SendContext(ctx)
	require.NoError(t, err)
	require.Equal(t, clustersim.StateUninstalling, st.Body().State().NodePoolStateValue())
	_, err = cm.Get().SendContext(ctx)
	require.NoError(t, err, "the object stays while it uninstalls")

	clock.Advance(time.Minute)
	for _, send := range []func() error{
		func() error { _, err := cm.Get().SendContext(ctx); return err },
		func() error { _, err := hcp.Get().SendContext(ctx); return err },
		func() error { _, err := hcp.Status().Get().SendContext(ctx); return err },
	} {
		var oe *ocmerrors.Error
		require.ErrorAs(t, send(), &oe)
		require.Equal(t, http.StatusNotFound, oe.Status())
		require.Equal(t, "Node pool 'np1' not found", oe.Reason())
	}
}

// A node pool is served under an API only where its cluster is.
func TestNodePoolFollowsItsClustersAPIs(t *testing.T) {
	for _, tc := range []struct {
		api          string
		cm, hcp      int // GET {node pool} under each API
		status       int // aro_hcp's {node pool}/status
		wantResource []string
	}{
		{clustersim.APIBoth, 200, 200, 200, []string{"/api/clusters_mgmt/v1/clusters/c1/node_pools/np1", "/api/aro_hcp/v1alpha1/clusters/c1/node_pools/np1"}},
		{clustersim.APIClustersMgmt, 200, 404, 404, []string{"/api/clusters_mgmt/v1/clusters/c1/node_pools/np1"}},
		{clustersim.APIAROHCP, 404, 200, 200, []string{"/api/aro_hcp/v1alpha1/clusters/c1/node_pools/np1"}},
	} {
		t.Run(tc.api, func(t *testing.T) {
			sim, _ := newSim(t, clustersim.Options{})
			require.NoError(t, sim.AddCluster("c1", clustersim.Script{API: tc.api}))
			require.NoError(t, sim.AddNodePool("c1", "np1", clustersim.Script{}))
			require.Equal(t, tc.cm, get(t, sim, "/api/clusters_mgmt/v1/clusters/c1/node_pools/np1").Code)
			require.Equal(t, tc.hcp, get(t, sim, "/api/aro_hcp/v1alpha1/clusters/c1/node_pools/np1").Code)
			require.Equal(t, tc.status, get(t, sim, "/api/aro_hcp/v1alpha1/clusters/c1/node_pools/np1/status").Code)
			r, err := sim.NodePool("c1", "np1")
			require.NoError(t, err)
			require.Equal(t, tc.wantResource, r.Paths)
			for _, p := range r.Paths {
				require.NoError(t, sim.SetState(p, "recoverable_error"), "SetState takes every path the node pool has")
			}
		})
	}
}

// The node pool objects count in Stats by API, and the reads are recorded
// in Calls under their paths.
func TestNodePoolObjectCalls(t *testing.T) {
	sim, _ := newSim(t, clustersim.Options{RecordCalls: true})
	require.NoError(t, sim.AddCluster("c1", clustersim.Script{}))
	require.NoError(t, sim.AddNodePool("c1", "np1", clustersim.Script{}))
	for _, p := range []string{
		"/api/clusters_mgmt/v1/clusters/c1/node_pools/np1",
		"/api/clusters_mgmt/v1/clusters/c1/node_pools/np1",
		"/api/aro_hcp/v1alpha1/clusters/c1/node_pools/np1",
		"/api/aro_hcp/v1alpha1/clusters/c1/node_pools/np1/status",
	} {
		get(t, sim, p)
	}
	require.Equal(t, map[string]int64{
		clustersim.PathKindClustersMgmtNodePoolObject: 2,
		clustersim.PathKindAROHCPNodePoolObject:       1,
		clustersim.PathKindAROHCPNodePool:             1,
	}, sim.Stats().Requests)
	calls := sim.Calls()
	require.Len(t, calls["/api/clusters_mgmt/v1/clusters/c1/node_pools/np1"], 2)
	require.Len(t, calls["/api/aro_hcp/v1alpha1/clusters/c1/node_pools/np1"], 2, "the object and the status")

	// The SDK types of both APIs read the same status.
	rec := get(t, sim, "/api/aro_hcp/v1alpha1/clusters/c1/node_pools/np1")
	np, err := arohcpv1alpha1.UnmarshalNodePool(rec.Body.Bytes())
	require.NoError(t, err)
	require.Equal(t, clustersim.StateReady, np.Status().State().NodePoolStateValue())
}
