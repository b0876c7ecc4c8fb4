package clustersim_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	sdk "github.com/openshift-online/ocm-sdk-go"
	arohcpv1alpha1 "github.com/openshift-online/ocm-sdk-go/arohcp/v1alpha1"
	cmv1 "github.com/openshift-online/ocm-sdk-go/clustersmgmt/v1"
	ocmerrors "github.com/openshift-online/ocm-sdk-go/errors"
	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/clustersim"
)

func TestClusterStatusParsesWithOCMSDK(t *testing.T) {
	failing := clustersim.Script{Installing: clustersim.Duration(time.Second), Fail: true,
		ErrorCode: "OCM3001", ErrorMessage: "quota exceeded", Description: "install failed"}
	tests := []struct {
		name        string
		script      clustersim.Script
		advance     time.Duration
		wantState   cmv1.ClusterState
		wantDesc    string
		wantCode    string // "" = field absent
		wantMessage string
	}{
		{name: "installing", script: clustersim.Script{Installing: clustersim.Duration(time.Second), Description: "working"},
			wantState: cmv1.ClusterStateInstalling, wantDesc: "working"},
		{name: "ready", script: clustersim.Script{}, wantState: cmv1.ClusterStateReady},
		{name: "failing before the end has no error fields", script: failing,
			wantState: cmv1.ClusterStateInstalling, wantDesc: "install failed"},
		{name: "failed", script: failing, advance: time.Second,
			wantState: cmv1.ClusterStateError, wantDesc: "install failed", wantCode: "OCM3001", wantMessage: "quota exceeded"},
	}
	for _, tt := range tests {
		for _, prefix := range []string{"/api/clusters_mgmt/v1", "/api/aro_hcp/v1alpha1"} {
			t.Run(tt.name+prefix, func(t *testing.T) {
				sim, clock := newSim(t, clustersim.Options{})
				require.NoError(t, sim.AddCluster("abc123", tt.script))
				clock.Advance(tt.advance)
				path := prefix + "/clusters/abc123/status"
				rec := get(t, sim, path)
				require.Equal(t, http.StatusOK, rec.Code)

				// Both packages read the same wire shape; check each.
				cm, err := cmv1.UnmarshalClusterStatus(rec.Body.Bytes())
				require.NoError(t, err)
				require.Equal(t, cmv1.ClusterStatusKind, cm.Kind())
				require.Equal(t, "abc123", cm.ID())
				require.Equal(t, path, cm.HREF())
				require.Equal(t, tt.wantState, cm.State())
				require.Equal(t, tt.wantDesc, cm.Description())
				code, ok := cm.GetProvisionErrorCode()
				require.Equal(t, tt.wantCode != "", ok)
				require.Equal(t, tt.wantCode, code)
				msg, ok := cm.GetProvisionErrorMessage()
				require.Equal(t, tt.wantMessage != "", ok)
				require.Equal(t, tt.wantMessage, msg)

				ah, err := arohcpv1alpha1.UnmarshalClusterStatus(rec.Body.Bytes())
				require.NoError(t, err)
				require.Equal(t, string(tt.wantState), string(ah.State()))
				require.Equal(t, tt.wantCode, ah.ProvisionErrorCode())
			})
		}
	}
}

func TestStatusBodiesAreExact(t *testing.T) {
	sim, clock := newSim(t, clustersim.Options{})
	require.NoError(t, sim.AddCluster("c1", clustersim.Script{Installing: clustersim.Duration(time.Second), Fail: true,
		ErrorCode: "OCM3001", ErrorMessage: "quota exceeded", Description: "install failed"}))
	require.NoError(t, sim.AddNodePool("c1", "np1", clustersim.Script{Pending: clustersim.Duration(time.Second),
		Installing: clustersim.Duration(time.Minute), Description: "adding nodes"}))
	clock.Advance(2 * time.Second)

	rec := get(t, sim, "/api/clusters_mgmt/v1/clusters/c1/status")
	require.Equal(t, http.StatusOK, rec.Code)
	require.JSONEq(t, `{"kind":"ClusterStatus","id":"c1","href":"/api/clusters_mgmt/v1/clusters/c1/status",
		"state":"error","description":"install failed",
		"provision_error_code":"OCM3001","provision_error_message":"quota exceeded"}`, rec.Body.String())

	rec = get(t, sim, "/api/aro_hcp/v1alpha1/clusters/c1/node_pools/np1/status")
	require.Equal(t, http.StatusOK, rec.Code)
	require.JSONEq(t, `{"kind":"NodePoolStatus","id":"np1","href":"/api/aro_hcp/v1alpha1/clusters/c1/node_pools/np1/status",
		"state":{"kind":"NodePoolState","value":"installing","last_updated_timestamp":"2025-06-01T12:00:01Z"},
		"current_replicas":0,"message":"adding nodes"}`, rec.Body.String())

	// The node pool under clusters_mgmt: the object, its status without a
	// state.
	rec = get(t, sim, "/api/clusters_mgmt/v1/clusters/c1/node_pools/np1")
	require.Equal(t, http.StatusOK, rec.Code)
	require.JSONEq(t, `{"kind":"NodePool","id":"np1","href":"/api/clusters_mgmt/v1/clusters/c1/node_pools/np1","replicas":2,
		"status":{"kind":"NodePoolStatus","current_replicas":0,"message":"adding nodes"}}`, rec.Body.String())
	rec = get(t, sim, "/api/aro_hcp/v1alpha1/clusters/c1/node_pools/np1")
	require.Equal(t, http.StatusOK, rec.Code)
	require.JSONEq(t, `{"kind":"NodePool","id":"np1","href":"/api/aro_hcp/v1alpha1/clusters/c1/node_pools/np1","replicas":2,
		"status":{"kind":"NodePoolStatus","current_replicas":0,"message":"adding nodes",
			"state":{"kind":"NodePoolState","value":"installing","last_updated_timestamp":"2025-06-01T12:00:01Z"}}}`, rec.Body.String())
}

func TestNodePoolStatusParsesWithOCMSDK(t *testing.T) {
	tests := []struct {
		name        string
		script      clustersim.Script
		advance     time.Duration
		wantState   string
		wantSince   time.Time
		wantMessage string // "" = field absent
	}{
		{name: "validating", script: script(time.Second, time.Minute, time.Minute), advance: 2 * time.Second,
			wantState: clustersim.StateValidating, wantSince: t0.Add(time.Second)},
		{name: "ready with description", script: clustersim.Script{Installing: clustersim.Duration(time.Minute), Description: "done"},
			advance: time.Hour, wantState: clustersim.StateReady, wantSince: t0.Add(time.Minute), wantMessage: "done"},
		{name: "failed carries the error message",
			script:  clustersim.Script{Installing: clustersim.Duration(time.Minute), Fail: true, ErrorMessage: "no capacity", Description: "x"},
			advance: time.Minute, wantState: clustersim.StateError, wantSince: t0.Add(time.Minute), wantMessage: "no capacity"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sim, clock := newSim(t, clustersim.Options{})
			require.NoError(t, sim.AddCluster("c1", clustersim.Script{}))
			require.NoError(t, sim.AddNodePool("c1", "np1", tt.script))
			clock.Advance(tt.advance)
			rec := get(t, sim, "/api/aro_hcp/v1alpha1/clusters/c1/node_pools/np1/status")
			require.Equal(t, http.StatusOK, rec.Code)

			st, err := arohcpv1alpha1.UnmarshalNodePoolStatus(rec.Body.Bytes())
			require.NoError(t, err)
			require.Equal(t, arohcpv1alpha1.NodePoolStatusKind, st.Kind())
			require.Equal(t, "np1", st.ID())
			require.Equal(t, "/api/aro_hcp/v1alpha1/clusters/c1/node_pools/np1/status", st.HREF())
			require.Equal(t, tt.wantState, st.State().NodePoolStateValue())
			require.True(t, tt.wantSince.Equal(st.State().LastUpdatedTimestamp()), "since %v, want %v", st.State().LastUpdatedTimestamp(), tt.wantSince)
			msg, ok := st.GetMessage()
			require.Equal(t, tt.wantMessage != "", ok)
			require.Equal(t, tt.wantMessage, msg)

			cm, err := cmv1.UnmarshalNodePoolStatus(rec.Body.Bytes())
			require.NoError(t, err)
			require.Equal(t, tt.wantState, cm.State().NodePoolStateValue())
		})
	}
}

// The model declares NodePoolStateValue with @json(name="value"): a body
// using "node_pool_state_value" parses without error but yields no state.
// This guards the simulator's choice of "value".
func TestOCMSDKReadsNodePoolStateFromValue(t *testing.T) {
	st, err := arohcpv1alpha1.UnmarshalNodePoolStatus(`{"kind":"NodePoolStatus","id":"np","state":{"kind":"NodePoolState","node_pool_state_value":"ready"}}`)
	require.NoError(t, err)
	require.Empty(t, st.State().NodePoolStateValue())
	st, err = arohcpv1alpha1.UnmarshalNodePoolStatus(`{"kind":"NodePoolStatus","id":"np","state":{"kind":"NodePoolState","value":"ready"}}`)
	require.NoError(t, err)
	require.Equal(t, "ready", st.State().NodePoolStateValue())
}

func TestNotFoundBodies(t *testing.T) {
	tests := []struct {
		name       string
		path       string
		wantReason string
	}{
		{"unknown cluster, clusters_mgmt", "/api/clusters_mgmt/v1/clusters/x/status", "Cluster 'x' not found"},
		{"unknown cluster, aro_hcp", "/api/aro_hcp/v1alpha1/clusters/x/status", "Cluster 'x' not found"},
		{"node pool of unknown cluster", "/api/aro_hcp/v1alpha1/clusters/x/node_pools/np1/status", "Cluster 'x' not found"},
		{"unknown node pool", "/api/aro_hcp/v1alpha1/clusters/c1/node_pools/nope/status", "Node pool 'nope' not found"},
		{"unknown subresource", "/api/clusters_mgmt/v1/clusters/c1/nope", "Path '/api/clusters_mgmt/v1/clusters/c1/nope' not found"},
		{"node pools under clusters_mgmt", "/api/clusters_mgmt/v1/clusters/c1/node_pools/np1/status", "Path '/api/clusters_mgmt/v1/clusters/c1/node_pools/np1/status' not found"},
		{"unknown cluster object, clusters_mgmt", "/api/clusters_mgmt/v1/clusters/x", "Cluster 'x' not found"},
		{"unknown cluster object, aro_hcp", "/api/aro_hcp/v1alpha1/clusters/x", "Cluster 'x' not found"},
		{"external auth of unknown cluster", "/api/aro_hcp/v1alpha1/clusters/x/external_auth_config/external_auths/ea1", "Cluster 'x' not found"},
		{"unknown external auth", "/api/aro_hcp/v1alpha1/clusters/c1/external_auth_config/external_auths/nope", "External auth 'nope' not found"},
		{"external auths have no status path", "/api/aro_hcp/v1alpha1/clusters/c1/external_auth_config/external_auths/ea1/status",
			"Path '/api/aro_hcp/v1alpha1/clusters/c1/external_auth_config/external_auths/ea1/status' not found"},
		{"external auths under clusters_mgmt", "/api/clusters_mgmt/v1/clusters/c1/external_auth_config/external_auths/ea1",
			"Path '/api/clusters_mgmt/v1/clusters/c1/external_auth_config/external_auths/ea1' not found"},
		{"credential of unknown cluster", "/api/clusters_mgmt/v1/clusters/x/break_glass_credentials/b1", "Cluster 'x' not found"},
		{"unknown credential", "/api/clusters_mgmt/v1/clusters/c1/break_glass_credentials/nope", "Break glass credential 'nope' not found"},
		{"credential list of unknown cluster", "/api/clusters_mgmt/v1/clusters/x/break_glass_credentials?page=1", "Cluster 'x' not found"},
		{"credentials under aro_hcp", "/api/aro_hcp/v1alpha1/clusters/c1/break_glass_credentials/b1",
			"Path '/api/aro_hcp/v1alpha1/clusters/c1/break_glass_credentials/b1' not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sim, _ := newSim(t, clustersim.Options{})
			require.NoError(t, sim.AddCluster("c1", clustersim.Script{}))
			require.NoError(t, sim.AddNodePool("c1", "np1", clustersim.Script{}))
			require.NoError(t, sim.AddExternalAuth("c1", "ea1", clustersim.Script{}))
			require.NoError(t, sim.AddCredential("c1", "b1", clustersim.Script{}))
			rec := get(t, sim, tt.path)
			require.Equal(t, http.StatusNotFound, rec.Code)
			require.JSONEq(t, fmt.Sprintf(`{"kind":"Error","id":"404","href":"/api/clusters_mgmt/v1/errors/404",
				"code":"CLUSTERS-MGMT-404","reason":%q}`, tt.wantReason), rec.Body.String())
			e, err := ocmerrors.UnmarshalErrorStatus(rec.Body.Bytes(), rec.Code)
			require.NoError(t, err)
			require.Equal(t, http.StatusNotFound, e.Status())
			require.Equal(t, "CLUSTERS-MGMT-404", e.Code())
			require.Equal(t, tt.wantReason, e.Reason())
		})
	}
}

func TestStatusMethodNotAllowed(t *testing.T) {
	sim, _ := newSim(t, clustersim.Options{})
	require.NoError(t, sim.AddCluster("c1", clustersim.Script{}))
	require.NoError(t, sim.AddExternalAuth("c1", "ea1", clustersim.Script{}))
	require.NoError(t, sim.AddCredential("c1", "b1", clustersim.Script{}))
	for _, path := range []string{
		"/api/clusters_mgmt/v1/clusters/c1/status",
		"/api/clusters_mgmt/v1/clusters/c1",
		"/api/aro_hcp/v1alpha1/clusters/c1/external_auth_config/external_auths/ea1",
		"/api/clusters_mgmt/v1/clusters/c1/break_glass_credentials/b1",
		"/api/clusters_mgmt/v1/clusters/c1/break_glass_credentials",
	} {
		rec := do(t, sim, http.MethodDelete, path)
		require.Equal(t, http.StatusMethodNotAllowed, rec.Code, path)
		require.Equal(t, http.MethodGet, rec.Header().Get("Allow"))
		e, err := ocmerrors.UnmarshalError(rec.Body.Bytes())
		require.NoError(t, err)
		require.Equal(t, "CLUSTERS-MGMT-405", e.Code())
	}
	_, err := sim.Credential("c1", "b1")
	require.NoError(t, err, "a refused DELETE changes nothing")
	r, err := sim.Cluster("c1")
	require.NoError(t, err)
	require.Equal(t, clustersim.StateReady, r.State)
}

// unsignedToken is a JWT the SDK accepts as an access token; the simulator
// does not check authentication.
func unsignedToken() string {
	enc := base64.RawURLEncoding.EncodeToString
	claims := fmt.Sprintf(`{"typ":"Bearer","exp":%d}`, time.Now().Add(time.Hour).Unix())
	return enc([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + enc([]byte(claims)) + "."
}

func TestOCMSDKClientEndToEnd(t *testing.T) {
	sim, clock := newSim(t, clustersim.Options{})
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	conn, err := sdk.NewConnectionBuilder().URL(srv.URL).Tokens(unsignedToken()).RetryLimit(0).Build()
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ctx := context.Background()

	require.NoError(t, sim.AddCluster("c1", clustersim.Script{Installing: clustersim.Duration(time.Minute), Fail: true,
		ErrorCode: "OCM3001", ErrorMessage: "quota exceeded"}))
	require.NoError(t, sim.AddNodePool("c1", "np1", clustersim.Script{Installing: clustersim.Duration(time.Minute)}))

	cm, err := conn.ClustersMgmt().V1().Clusters().Cluster("c1").Status().Get().SendContext(ctx)
	require.NoError(t, err)
	require.Equal(t, cmv1.ClusterStateInstalling, cm.Body().State())

	clock.Advance(time.Minute)
	ah, err := conn.AroHCP().V1alpha1().Clusters().Cluster("c1").Status().Get().SendContext(ctx)
	require.NoError(t, err)
	require.Equal(t, arohcpv1alpha1.ClusterStateError, ah.Body().State())
	require.Equal(t, "OCM3001", ah.Body().ProvisionErrorCode())
	require.Equal(t, "quota exceeded", ah.Body().ProvisionErrorMessage())

	np, err := conn.AroHCP().V1alpha1().Clusters().Cluster("c1").NodePools().NodePool("np1").Status().Get().SendContext(ctx)
	require.NoError(t, err)
	require.Equal(t, clustersim.StateReady, np.Body().State().NodePoolStateValue())

	_, err = conn.ClustersMgmt().V1().Clusters().Cluster("missing").Status().Get().SendContext(ctx)
	var oe *ocmerrors.Error
	require.ErrorAs(t, err, &oe)
	require.Equal(t, http.StatusNotFound, oe.Status())
	require.Equal(t, "CLUSTERS-MGMT-404", oe.Code())
}
