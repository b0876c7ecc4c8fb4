package clustersim_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/clustersim"
)

func TestCallsRecordsEveryStatusCall(t *testing.T) {
	sim, clock := newSim(t, clustersim.Options{RecordCalls: true})
	require.NoError(t, sim.AddCluster("c1", clustersim.Script{}))
	require.NoError(t, sim.AddNodePool("c1", "np1", clustersim.Script{}))

	get(t, sim, "/api/clusters_mgmt/v1/clusters/c1/status")
	clock.Advance(time.Second)
	get(t, sim, "/api/clusters_mgmt/v1/clusters/c1/status")
	get(t, sim, "/api/aro_hcp/v1alpha1/clusters/c1/node_pools/np1/status")
	// A 404 is a call too; a faulted call as well.
	get(t, sim, "/api/aro_hcp/v1alpha1/clusters/gone/status")
	require.NoError(t, sim.SetFaults(clustersim.Faults{Outage: true}))
	clock.Advance(time.Second)
	require.Equal(t, http.StatusServiceUnavailable, get(t, sim, "/api/aro_hcp/v1alpha1/clusters/c1/status").Code)
	require.NoError(t, sim.SetFaults(clustersim.Faults{}))
	// Neither a wrong method, nor an unknown path, nor the admin API is.
	do(t, sim, http.MethodPost, "/api/aro_hcp/v1alpha1/clusters/c1/status")
	get(t, sim, "/api/unknown")
	get(t, sim, "/admin/clusters")

	require.Equal(t, map[string][]time.Time{
		"/api/clusters_mgmt/v1/clusters/c1":                {t0, t0.Add(time.Second)},
		"/api/aro_hcp/v1alpha1/clusters/c1/node_pools/np1": {t0.Add(time.Second)},
		"/api/aro_hcp/v1alpha1/clusters/gone":              {t0.Add(time.Second)},
		"/api/aro_hcp/v1alpha1/clusters/c1":                {t0.Add(2 * time.Second)},
	}, sim.Calls())

	// Calls returns a copy.
	calls := sim.Calls()
	calls["/api/clusters_mgmt/v1/clusters/c1"][0] = time.Time{}
	require.Equal(t, t0, sim.Calls()["/api/clusters_mgmt/v1/clusters/c1"][0])

	sim.ResetCalls()
	require.Empty(t, sim.Calls())
	get(t, sim, "/api/clusters_mgmt/v1/clusters/c1/status")
	require.Len(t, sim.Calls()["/api/clusters_mgmt/v1/clusters/c1"], 1)
}

func TestCallsAreOffByDefault(t *testing.T) {
	sim, _ := newSim(t, clustersim.Options{})
	require.NoError(t, sim.AddCluster("c1", clustersim.Script{}))
	get(t, sim, "/api/clusters_mgmt/v1/clusters/c1/status")
	require.Empty(t, sim.Calls())
	require.Equal(t, int64(1), sim.Stats().Requests[clustersim.PathKindClustersMgmtCluster])
}

// External auth and credential reads and each credential list page are
// calls that read an operation's status; cluster object reads are not.
func TestCallsRecordNewKinds(t *testing.T) {
	sim, clock := newSim(t, clustersim.Options{RecordCalls: true})
	require.NoError(t, sim.AddCluster("c1", clustersim.Script{}))
	require.NoError(t, sim.AddExternalAuth("c1", "ea1", clustersim.Script{}))
	// An ID that reads like a status path is kept under its own path.
	require.NoError(t, sim.AddCredential("c1", "status", clustersim.Script{}))

	const (
		ea   = "/api/aro_hcp/v1alpha1/clusters/c1/external_auth_config/external_auths/ea1"
		bgc  = "/api/clusters_mgmt/v1/clusters/c1/break_glass_credentials/status"
		list = "/api/clusters_mgmt/v1/clusters/c1/break_glass_credentials"
	)
	get(t, sim, ea)
	get(t, sim, bgc)
	get(t, sim, list+"?page=1&size=1")
	clock.Advance(time.Second)
	get(t, sim, list+"?page=2&size=1")
	get(t, sim, "/api/clusters_mgmt/v1/clusters/c1")
	get(t, sim, "/api/aro_hcp/v1alpha1/clusters/c1")
	get(t, sim, "/api/aro_hcp/v1alpha1/clusters/c1/inflight_checks")

	require.Equal(t, map[string][]time.Time{
		ea:   {t0},
		bgc:  {t0},
		list: {t0, t0.Add(time.Second)},
	}, sim.Calls())
}
