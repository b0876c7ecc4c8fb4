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

func TestClusterObjectParsesWithOCMSDK(t *testing.T) {
	tests := []struct {
		name      string
		script    clustersim.Script
		act       func(*clustersim.Sim) error
		wantState string
		wantRG    string
	}{
		{name: "installing, default resource group", script: clustersim.Script{Installing: clustersim.Duration(2 * time.Hour)},
			wantState: clustersim.StateInstalling, wantRG: "c1-managed"},
		{name: "ready, scripted resource group", script: clustersim.Script{ManagedResourceGroup: "arohcp-c1-x7"},
			wantState: clustersim.StateReady, wantRG: "arohcp-c1-x7"},
		{name: "uninstalling", script: clustersim.Script{},
			act:       func(s *clustersim.Sim) error { return s.DeleteCluster("c1", time.Minute) },
			wantState: clustersim.StateUninstalling, wantRG: "c1-managed"},
	}
	for _, tt := range tests {
		for _, prefix := range []string{"/api/clusters_mgmt/v1", "/api/aro_hcp/v1alpha1"} {
			t.Run(tt.name+prefix, func(t *testing.T) {
				sim, clock := newSim(t, clustersim.Options{})
				// Created between two seconds: the wire has whole seconds.
				clock.Advance(1500 * time.Millisecond)
				require.NoError(t, sim.AddCluster("c1", tt.script))
				clock.Advance(time.Hour)
				if tt.act != nil {
					require.NoError(t, tt.act(sim))
				}
				path := prefix + "/clusters/c1"
				rec := get(t, sim, path)
				require.Equal(t, http.StatusOK, rec.Code)
				wantCreated := t0.Add(time.Second)

				cm, err := cmv1.UnmarshalCluster(rec.Body.Bytes())
				require.NoError(t, err)
				require.Equal(t, cmv1.ClusterKind, cm.Kind())
				require.Equal(t, "c1", cm.ID())
				require.Equal(t, path, cm.HREF())
				require.Equal(t, tt.wantState, string(cm.State()))
				require.True(t, wantCreated.Equal(cm.CreationTimestamp()), "created %v, want %v", cm.CreationTimestamp(), wantCreated)
				require.Equal(t, tt.wantRG, cm.Azure().ManagedResourceGroupName())

				ah, err := arohcpv1alpha1.UnmarshalCluster(rec.Body.Bytes())
				require.NoError(t, err)
				require.Equal(t, tt.wantState, string(ah.State()))
				require.True(t, wantCreated.Equal(ah.CreationTimestamp()))
				require.Equal(t, tt.wantRG, ah.Azure().ManagedResourceGroupName())

				r, err := sim.Cluster("c1")
				require.NoError(t, err)
				require.True(t, wantCreated.Equal(r.CreationTimestamp), "the Go API shows what is served")
			})
		}
	}
}

func TestClusterObjectBodyIsExact(t *testing.T) {
	sim, _ := newSim(t, clustersim.Options{})
	require.NoError(t, sim.AddCluster("c1", clustersim.Script{Installing: clustersim.Duration(time.Minute), ManagedResourceGroup: "rg-1"}))
	rec := get(t, sim, "/api/aro_hcp/v1alpha1/clusters/c1")
	require.Equal(t, http.StatusOK, rec.Code)
	require.JSONEq(t, `{"kind":"Cluster","id":"c1","href":"/api/aro_hcp/v1alpha1/clusters/c1",
		"azure":{"managed_resource_group_name":"rg-1"},"creation_timestamp":"2025-06-01T12:00:00Z","state":"installing"}`,
		rec.Body.String())
}

// Billing reads creation_timestamp as the cluster's own: replacing a live
// cluster's script keeps it, a cluster created after a finished delete
// gets its own.
func TestClusterCreationTimestamp(t *testing.T) {
	sim, clock := newSim(t, clustersim.Options{})
	created := func() time.Time {
		t.Helper()
		rec := get(t, sim, "/api/clusters_mgmt/v1/clusters/c1")
		require.Equal(t, http.StatusOK, rec.Code)
		cm, err := cmv1.UnmarshalCluster(rec.Body.Bytes())
		require.NoError(t, err)
		return cm.CreationTimestamp()
	}
	require.NoError(t, sim.AddCluster("c1", clustersim.Script{}))
	clock.Advance(time.Hour)
	require.NoError(t, sim.AddCluster("c1", clustersim.Script{Installing: clustersim.Duration(time.Minute)}))
	require.True(t, t0.Equal(created()), "a replace keeps the creation time")

	require.NoError(t, sim.DeleteCluster("c1", 0))
	require.Equal(t, http.StatusNotFound, get(t, sim, "/api/clusters_mgmt/v1/clusters/c1").Code)
	clock.Advance(time.Hour)
	require.NoError(t, sim.AddCluster("c1", clustersim.Script{}))
	require.True(t, t0.Add(2*time.Hour).Equal(created()), "a new cluster has its own creation time")
}

func TestClusterObjectWithOCMSDKClient(t *testing.T) {
	sim, clock := newSim(t, clustersim.Options{})
	conn := ocmConn(t, sim)
	ctx := context.Background()
	require.NoError(t, sim.AddCluster("c1", clustersim.Script{ManagedResourceGroup: "rg-1", API: clustersim.APIAROHCP}))

	ah, err := conn.AroHCP().V1alpha1().Clusters().Cluster("c1").Get().SendContext(ctx)
	require.NoError(t, err)
	require.Equal(t, arohcpv1alpha1.ClusterStateReady, ah.Body().State())
	require.Equal(t, "rg-1", ah.Body().Azure().ManagedResourceGroupName())
	require.True(t, t0.Equal(ah.Body().CreationTimestamp()))

	// Served where the script says only.
	_, err = conn.ClustersMgmt().V1().Clusters().Cluster("c1").Get().SendContext(ctx)
	var oe *ocmerrors.Error
	require.ErrorAs(t, err, &oe)
	require.Equal(t, http.StatusNotFound, oe.Status())

	require.NoError(t, sim.DeleteCluster("c1", time.Second))
	clock.Advance(time.Second)
	_, err = conn.AroHCP().V1alpha1().Clusters().Cluster("c1").Get().SendContext(ctx)
	require.ErrorAs(t, err, &oe)
	require.Equal(t, http.StatusNotFound, oe.Status())
	require.Equal(t, "Cluster 'c1' not found", oe.Reason())
}
