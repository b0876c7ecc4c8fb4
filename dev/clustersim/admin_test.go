package clustersim_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	cmv1 "github.com/openshift-online/ocm-sdk-go/clustersmgmt/v1"
	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/clustersim"
)

func startServer(t *testing.T, opts clustersim.Options) (*clustersim.Sim, *clustersim.ManualClock, *httptest.Server, *clustersim.AdminClient) {
	t.Helper()
	sim, clock := newSim(t, opts)
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	return sim, clock, srv, clustersim.NewAdminClient(srv.URL+"/", srv.Client())
}

// httpState GETs a status path over the network and returns its state
// (clusters) or 404.
func httpClusterState(t *testing.T, srv *httptest.Server, id string) (int, cmv1.ClusterState) {
	t.Helper()
	resp, err := srv.Client().Get(srv.URL + "/api/clusters_mgmt/v1/clusters/" + id + "/status")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, ""
	}
	st, err := cmv1.UnmarshalClusterStatus(b)
	require.NoError(t, err)
	return resp.StatusCode, st.State()
}

func requireAdminStatus(t *testing.T, err error, status int) {
	t.Helper()
	var ae *clustersim.AdminError
	require.ErrorAs(t, err, &ae)
	require.Equal(t, status, ae.StatusCode, ae.Message)
}

func TestAdminClientRoundTrip(t *testing.T) {
	_, clock, srv, admin := startServer(t, clustersim.Options{})
	ctx := context.Background()

	r, err := admin.PutCluster(ctx, "c1", script(time.Second, 0, time.Second))
	require.NoError(t, err)
	require.Equal(t, clustersim.StatePending, r.State)
	require.Equal(t, clustersim.PhaseCreate, r.Phase)
	require.Equal(t, []string{"/api/clusters_mgmt/v1/clusters/c1", "/api/aro_hcp/v1alpha1/clusters/c1"}, r.Paths)
	require.True(t, t0.Equal(r.Since))

	code, state := httpClusterState(t, srv, "c1")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, cmv1.ClusterStatePending, state)

	clock.Advance(time.Second)
	r, err = admin.Cluster(ctx, "c1")
	require.NoError(t, err)
	require.Equal(t, clustersim.StateInstalling, r.State)

	_, err = admin.UpdateCluster(ctx, "c1", time.Second)
	requireAdminStatus(t, err, http.StatusConflict)

	n, err := admin.ReadyAll(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	_, state = httpClusterState(t, srv, "c1")
	require.Equal(t, cmv1.ClusterStateReady, state)

	r, err = admin.UpdateCluster(ctx, "c1", time.Second)
	require.NoError(t, err)
	require.Equal(t, clustersim.StateUpdating, r.State)
	clock.Advance(time.Second)

	r, err = admin.PutNodePool(ctx, "c1", "np1", clustersim.Script{Installing: clustersim.Duration(time.Second)})
	require.NoError(t, err)
	require.Equal(t, clustersim.StateInstalling, r.State)
	require.Equal(t, []string{"/api/clusters_mgmt/v1/clusters/c1/node_pools/np1", "/api/aro_hcp/v1alpha1/clusters/c1/node_pools/np1"}, r.Paths)
	clock.Advance(time.Second)
	r, err = admin.UpdateNodePool(ctx, "c1", "np1", time.Second)
	require.NoError(t, err)
	require.Equal(t, clustersim.StateUpdating, r.State)
	r, err = admin.SetState(ctx, "/api/aro_hcp/v1alpha1/clusters/c1/node_pools/np1/status", "recoverable_error")
	require.NoError(t, err)
	require.Equal(t, "recoverable_error", r.State)
	r, err = admin.NodePool(ctx, "c1", "np1")
	require.NoError(t, err)
	require.Equal(t, clustersim.PhaseSet, r.Phase)

	list, err := admin.Resources(ctx)
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.Equal(t, "Cluster", list[0].Kind)
	require.Equal(t, "NodePool", list[1].Kind)

	r, err = admin.DeleteNodePool(ctx, "c1", "np1", 0)
	require.NoError(t, err)
	require.True(t, r.Deleted)
	_, err = admin.NodePool(ctx, "c1", "np1")
	requireAdminStatus(t, err, http.StatusNotFound)

	r, err = admin.DeleteCluster(ctx, "c1", 2*time.Second)
	require.NoError(t, err)
	require.Equal(t, clustersim.StateUninstalling, r.State)
	clock.Advance(2 * time.Second)
	code, _ = httpClusterState(t, srv, "c1")
	require.Equal(t, http.StatusNotFound, code)
	_, err = admin.Cluster(ctx, "c1")
	requireAdminStatus(t, err, http.StatusNotFound)

	f := clustersim.Faults{Latency: clustersim.Duration(50 * time.Millisecond), LatencyJitter: clustersim.Duration(10 * time.Millisecond),
		ErrorRate: 0.05, TimeoutRate: 0.01, Timeout: clustersim.Duration(30 * time.Second), SpikeRate: 0.01, Spike: clustersim.Duration(2 * time.Second)}
	require.NoError(t, admin.SetFaults(ctx, f))
	got, err := admin.Faults(ctx)
	require.NoError(t, err)
	require.Equal(t, f, got)
	requireAdminStatus(t, admin.SetFaults(ctx, clustersim.Faults{ErrorRate: 2}), http.StatusBadRequest)

	st, err := admin.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(3), st.Requests[clustersim.PathKindClustersMgmtCluster])
	require.Equal(t, map[int]int64{200: 2, 404: 1}, st.Statuses)
	require.NoError(t, admin.ResetStats(ctx))
	st, err = admin.Stats(ctx)
	require.NoError(t, err)
	require.Empty(t, st.Requests)
	require.Empty(t, st.Statuses)
}

// rawAdmin sends a hand-written admin request, as curl would.
func rawAdmin(t *testing.T, srv *httptest.Server, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, srv.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

func TestAdminDefaultsFillMissingFields(t *testing.T) {
	defaults := clustersim.Script{Pending: clustersim.Duration(time.Second), Installing: clustersim.Duration(3 * time.Second),
		Uninstalling: clustersim.Duration(5 * time.Second), Updating: clustersim.Duration(4 * time.Second)}
	sim, clock, srv, _ := startServer(t, clustersim.Options{Defaults: defaults})

	code, body := rawAdmin(t, srv, http.MethodPut, "/admin/clusters/c1", `{"description":"from curl","pending":"0s"}`)
	require.Equal(t, http.StatusOK, code, body)
	r, err := sim.Cluster("c1")
	require.NoError(t, err)
	want := defaults
	want.Pending, want.Description = 0, "from curl"
	require.Equal(t, want, r.Script)
	require.Equal(t, clustersim.StateInstalling, r.State)

	code, body = rawAdmin(t, srv, http.MethodPut, "/admin/clusters/c1/node_pools/np1", "")
	require.Equal(t, http.StatusOK, code, body)
	r, err = sim.NodePool("c1", "np1")
	require.NoError(t, err)
	require.Equal(t, defaults, r.Script, "an empty body takes every default")

	clock.Advance(3 * time.Second)
	code, body = rawAdmin(t, srv, http.MethodPost, "/admin/clusters/c1/update", "")
	require.Equal(t, http.StatusAccepted, code, body)
	clock.Advance(4*time.Second - 1)
	require.Equal(t, clustersim.StateUpdating, clusterState(t, sim, "c1"))
	clock.Advance(1)
	require.Equal(t, clustersim.StateReady, clusterState(t, sim, "c1"))

	// Hand-written bodies override the script's durations.
	code, body = rawAdmin(t, srv, http.MethodPost, "/admin/clusters/c1/node_pools/np1/update", `{"updating":"1s"}`)
	require.Equal(t, http.StatusAccepted, code, body)
	clock.Advance(time.Second - 1)
	require.Equal(t, clustersim.StateUpdating, nodePoolState(t, sim, "c1", "np1"))
	clock.Advance(1)
	require.Equal(t, clustersim.StateReady, nodePoolState(t, sim, "c1", "np1"))
	code, body = rawAdmin(t, srv, http.MethodDelete, "/admin/clusters/c1/node_pools/np1", `{"uninstalling":"1s"}`)
	require.Equal(t, http.StatusAccepted, code, body)
	clock.Advance(time.Second - 1)
	require.Equal(t, clustersim.StateUninstalling, nodePoolState(t, sim, "c1", "np1"))
	clock.Advance(1)
	require.Equal(t, gone, nodePoolState(t, sim, "c1", "np1"))

	code, body = rawAdmin(t, srv, http.MethodDelete, "/admin/clusters/c1", "")
	require.Equal(t, http.StatusAccepted, code, body)
	clock.Advance(5*time.Second - 1)
	require.Equal(t, clustersim.StateUninstalling, clusterState(t, sim, "c1"))
	clock.Advance(1)
	require.Equal(t, gone, clusterState(t, sim, "c1"))
}

func TestAdminRejects(t *testing.T) {
	tests := []struct {
		name, method, path, body string
		want                     int
	}{
		{"unknown field", http.MethodPut, "/admin/clusters/c2", `{"installng":"1s"}`, http.StatusBadRequest},
		{"duration as number", http.MethodPut, "/admin/clusters/c2", `{"installing":3}`, http.StatusBadRequest},
		{"bad duration", http.MethodPut, "/admin/clusters/c2", `{"installing":"soon"}`, http.StatusBadRequest},
		{"bad api", http.MethodPut, "/admin/clusters/c2", `{"api":"v2"}`, http.StatusBadRequest},
		{"trailing data", http.MethodPut, "/admin/clusters/c2", `{} {}`, http.StatusBadRequest},
		{"bad id", http.MethodPut, "/admin/clusters/a%20b", `{}`, http.StatusBadRequest},
		{"node pool of unknown cluster", http.MethodPut, "/admin/clusters/nope/node_pools/np", `{}`, http.StatusNotFound},
		{"delete unknown", http.MethodDelete, "/admin/clusters/nope", ``, http.StatusNotFound},
		{"update unknown node pool", http.MethodPost, "/admin/clusters/c1/node_pools/nope/update", ``, http.StatusNotFound},
		{"state for a bad path", http.MethodPost, "/admin/state", `{"path":"/api/v9/clusters/c1","state":"ready"}`, http.StatusBadRequest},
		{"state without state", http.MethodPost, "/admin/state", `{"path":"/api/clusters_mgmt/v1/clusters/c1"}`, http.StatusBadRequest},
		{"state for unknown cluster", http.MethodPost, "/admin/state", `{"path":"/api/clusters_mgmt/v1/clusters/x","state":"ready"}`, http.StatusNotFound},
		{"faults out of range", http.MethodPut, "/admin/faults", `{"errorRate":-1}`, http.StatusBadRequest},
		{"faults bad duration", http.MethodPut, "/admin/faults", `{"latency":"fast"}`, http.StatusBadRequest},
		{"update while installing", http.MethodPost, "/admin/clusters/c1/update", `{"updating":"1s"}`, http.StatusConflict},
		{"noStatus on a cluster", http.MethodPut, "/admin/clusters/c2", `{"noStatus":true}`, http.StatusBadRequest},
		{"noStatusFor on a node pool", http.MethodPut, "/admin/clusters/c1/node_pools/np", `{"noStatusFor":"1s"}`, http.StatusBadRequest},
		{"noStatus on a credential", http.MethodPut, "/admin/clusters/c1/break_glass_credentials/b", `{"noStatus":true}`, http.StatusBadRequest},
		{"negative expiresIn", http.MethodPut, "/admin/clusters/c1/break_glass_credentials/b", `{"expiresIn":"-1s"}`, http.StatusBadRequest},
		{"external auth of unknown cluster", http.MethodPut, "/admin/clusters/nope/external_auths/ea", `{}`, http.StatusNotFound},
		{"bad external auth id", http.MethodPut, "/admin/clusters/c1/external_auths/a%20b", `{}`, http.StatusBadRequest},
		{"delete unknown external auth", http.MethodDelete, "/admin/clusters/c1/external_auths/nope", ``, http.StatusNotFound},
		{"credential of unknown cluster", http.MethodPut, "/admin/clusters/nope/break_glass_credentials/b", `{}`, http.StatusNotFound},
		{"unknown credential", http.MethodGet, "/admin/clusters/c1/break_glass_credentials/nope", ``, http.StatusNotFound},
		{"revoke unknown credential", http.MethodPost, "/admin/clusters/c1/break_glass_credentials/nope/revoke", ``, http.StatusNotFound},
		{"revoke all of unknown cluster", http.MethodPost, "/admin/clusters/nope/break_glass_credentials/revoke", ``, http.StatusNotFound},
		{"negative revoking", http.MethodPost, "/admin/clusters/c1/break_glass_credentials/revoke", `{"revoking":"-1s"}`, http.StatusBadRequest},
		{"revoke body typo", http.MethodPost, "/admin/clusters/c1/break_glass_credentials/revoke", `{"revoke":"1s"}`, http.StatusBadRequest},
		{"state for unknown external auth", http.MethodPost, "/admin/state",
			`{"path":"/api/aro_hcp/v1alpha1/clusters/c1/external_auth_config/external_auths/nope","state":"ready"}`, http.StatusNotFound},
		{"state for unknown credential", http.MethodPost, "/admin/state",
			`{"path":"/api/clusters_mgmt/v1/clusters/c1/break_glass_credentials/nope","state":"issued"}`, http.StatusNotFound},
		{"state for a credential under aro_hcp", http.MethodPost, "/admin/state",
			`{"path":"/api/aro_hcp/v1alpha1/clusters/c1/break_glass_credentials/b","state":"issued"}`, http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sim, _, srv, _ := startServer(t, clustersim.Options{})
			require.NoError(t, sim.AddCluster("c1", clustersim.Script{Installing: clustersim.Duration(time.Hour)}))
			code, body := rawAdmin(t, srv, tt.method, tt.path, tt.body)
			require.Equal(t, tt.want, code, body)
			require.Contains(t, body, `"error":`)
			_, err := sim.Cluster("c2")
			require.True(t, errors.Is(err, clustersim.ErrNotFound), "a refused PUT creates nothing")
			_, err = sim.Credential("c1", "b")
			require.True(t, errors.Is(err, clustersim.ErrNotFound), "a refused PUT creates nothing")
			_, err = sim.NodePool("c1", "np")
			require.True(t, errors.Is(err, clustersim.ErrNotFound), "a refused PUT creates nothing")
		})
	}
}

func TestAdminIsLoopbackOnly(t *testing.T) {
	tests := []struct {
		remote string
		want   int
	}{
		{"127.0.0.1:5000", http.StatusOK},
		{"[::1]:5000", http.StatusOK},
		{"192.0.2.1:5000", http.StatusForbidden},
		{"10.0.0.1:5000", http.StatusForbidden},
		{"garbage", http.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.remote, func(t *testing.T) {
			sim, _ := newSim(t, clustersim.Options{})
			req := httptest.NewRequest(http.MethodGet, "/admin/stats", nil)
			req.RemoteAddr = tt.remote
			rec := httptest.NewRecorder()
			sim.ServeHTTP(rec, req)
			require.Equal(t, tt.want, rec.Code)
		})
	}
}

func TestStatsCountRequests(t *testing.T) {
	sim, _, _, admin := startServer(t, clustersim.Options{})
	require.NoError(t, sim.AddCluster("c1", clustersim.Script{}))
	require.NoError(t, sim.AddNodePool("c1", "np1", clustersim.Script{}))
	for _, path := range []string{
		"/api/clusters_mgmt/v1/clusters/c1/status",
		"/api/clusters_mgmt/v1/clusters/c2/status",
		"/api/aro_hcp/v1alpha1/clusters/c1/status",
		"/api/aro_hcp/v1alpha1/clusters/c1/node_pools/np1/status",
		"/api/aro_hcp/v1alpha1/clusters/c1/node_pools/np1/status",
		"/api/aro_hcp/v1alpha1/clusters/c1/node_pools/np2/status",
		"/api/unknown",
	} {
		get(t, sim, path)
	}
	_, err := admin.Stats(context.Background()) // admin calls are not counted
	require.NoError(t, err)
	st := sim.Stats()
	require.Equal(t, map[string]int64{
		clustersim.PathKindClustersMgmtCluster: 2,
		clustersim.PathKindAROHCPCluster:       1,
		clustersim.PathKindAROHCPNodePool:      3,
		clustersim.PathKindOther:               1,
	}, st.Requests)
	require.Equal(t, map[int]int64{200: 4, 404: 3}, st.Statuses)
	require.Empty(t, st.Faults)

	sim.ResetStats()
	require.Empty(t, sim.Stats().Requests)
}

// Status calls race with admin changes the way a benchmark drives the
// simulator; run with -race this checks the locking.
func TestConcurrentUse(t *testing.T) {
	sim, clock, srv, admin := startServer(t, clustersim.Options{})
	ctx := context.Background()
	const n = 20
	ids := make([]string, n)
	for i := range ids {
		ids[i] = "c" + strings.Repeat("x", i)
		_, err := admin.PutCluster(ctx, ids[i], clustersim.Script{Installing: clustersim.Duration(time.Hour)})
		require.NoError(t, err)
	}
	errs := make(chan error, n)
	for _, id := range ids {
		go func() {
			for range 10 {
				resp, err := srv.Client().Get(srv.URL + "/api/aro_hcp/v1alpha1/clusters/" + id + "/status")
				if err != nil {
					errs <- err
					return
				}
				resp.Body.Close()
			}
			errs <- nil
		}()
	}
	for range 5 {
		clock.Advance(time.Minute)
		require.NoError(t, sim.SetFaults(clustersim.Faults{ErrorRate: 0.1}))
		_ = sim.Resources()
	}
	changed, err := admin.ReadyAll(ctx)
	require.NoError(t, err)
	require.Equal(t, n, changed)
	for range n {
		require.NoError(t, <-errs)
	}
	require.Equal(t, int64(n*10), sim.Stats().Requests[clustersim.PathKindAROHCPCluster])
}

func TestAdminClientNewKinds(t *testing.T) {
	_, clock, srv, admin := startServer(t, clustersim.Options{})
	ctx := context.Background()
	_, err := admin.PutCluster(ctx, "c1", clustersim.Script{ManagedResourceGroup: "rg-1"})
	require.NoError(t, err)
	r, err := admin.Cluster(ctx, "c1")
	require.NoError(t, err)
	require.True(t, t0.Equal(r.CreationTimestamp))
	require.Equal(t, "rg-1", r.Script.ManagedResourceGroup)

	r, err = admin.PutExternalAuth(ctx, "c1", "ea1", clustersim.Script{NoStatusFor: clustersim.Duration(time.Second),
		Installing: clustersim.Duration(time.Second)})
	require.NoError(t, err)
	require.Equal(t, clustersim.KindExternalAuth, r.Kind)
	require.Equal(t, "ea1", r.ExternalAuthID)
	require.Empty(t, r.State, "no status yet")
	require.Equal(t, []string{"/api/aro_hcp/v1alpha1/clusters/c1/external_auth_config/external_auths/ea1"}, r.Paths)
	clock.Advance(2 * time.Second)
	r, err = admin.ExternalAuth(ctx, "c1", "ea1")
	require.NoError(t, err)
	require.Equal(t, clustersim.StateReady, r.State)
	r, err = admin.UpdateExternalAuth(ctx, "c1", "ea1", time.Second)
	require.NoError(t, err)
	require.Equal(t, clustersim.StateUpdating, r.State)
	clock.Advance(time.Second)
	r, err = admin.SetState(ctx, "/api/aro_hcp/v1alpha1/clusters/c1/external_auth_config/external_auths/ea1", "degraded")
	require.NoError(t, err)
	require.Equal(t, "degraded", r.State)

	r, err = admin.PutCredential(ctx, "c1", "b1", clustersim.Script{Issuing: clustersim.Duration(time.Second), ExpiresIn: clustersim.Duration(time.Hour)})
	require.NoError(t, err)
	require.Equal(t, clustersim.KindBreakGlassCredential, r.Kind)
	require.Equal(t, "b1", r.CredentialID)
	require.Equal(t, clustersim.CredentialCreated, r.State)
	require.Equal(t, []string{"/api/clusters_mgmt/v1/clusters/c1/break_glass_credentials/b1"}, r.Paths)
	require.True(t, t0.Add(3*time.Second).Equal(r.CreationTimestamp))
	require.True(t, t0.Add(time.Hour+3*time.Second).Equal(r.ExpirationTimestamp))
	_, err = admin.PutCredential(ctx, "c1", "b2", clustersim.Script{})
	require.NoError(t, err)
	r, err = admin.RevokeCredential(ctx, "c1", "b1", 2*time.Second)
	require.NoError(t, err)
	require.Equal(t, clustersim.CredentialAwaitingRevocation, r.State)
	clock.Advance(time.Second)
	rr, err := admin.RevokeCredentials(ctx, "c1", time.Second)
	require.NoError(t, err)
	require.Equal(t, 1, rr.Revoking, "b1 was revoking already")
	require.Len(t, rr.Credentials, 2)
	for _, c := range rr.Credentials {
		require.Equal(t, clustersim.CredentialAwaitingRevocation, c.State, c.CredentialID)
	}
	clock.Advance(time.Second)
	r, err = admin.Credential(ctx, "c1", "b1")
	require.NoError(t, err)
	require.Equal(t, clustersim.CredentialRevoked, r.State)
	require.True(t, t0.Add(5*time.Second).Equal(r.RevocationTimestamp))
	_, err = admin.RevokeCredential(ctx, "c1", "b1", time.Second)
	requireAdminStatus(t, err, http.StatusConflict)

	_, err = admin.PutNodePool(ctx, "c1", "np1", clustersim.Script{})
	require.NoError(t, err)
	list, err := admin.Resources(ctx)
	require.NoError(t, err)
	var kinds []string
	for _, r := range list {
		kinds = append(kinds, r.Kind)
	}
	require.Equal(t, []string{clustersim.KindCluster, clustersim.KindNodePool, clustersim.KindExternalAuth,
		clustersim.KindBreakGlassCredential, clustersim.KindBreakGlassCredential}, kinds)

	r, err = admin.DeleteExternalAuth(ctx, "c1", "ea1", time.Second)
	require.NoError(t, err)
	require.Equal(t, clustersim.StateUninstalling, r.State)
	clock.Advance(time.Second)
	_, err = admin.ExternalAuth(ctx, "c1", "ea1")
	requireAdminStatus(t, err, http.StatusNotFound)
	resp, err := srv.Client().Get(srv.URL + "/api/aro_hcp/v1alpha1/clusters/c1/external_auth_config/external_auths/ea1")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
}

// Hand-written bodies for the new kinds take the server's defaults.
func TestAdminDefaultsForNewKinds(t *testing.T) {
	defaults := clustersim.Script{Installing: clustersim.Duration(3 * time.Second), Uninstalling: clustersim.Duration(5 * time.Second),
		Issuing: clustersim.Duration(2 * time.Second), Revoking: clustersim.Duration(4 * time.Second)}
	sim, clock, srv, _ := startServer(t, clustersim.Options{Defaults: defaults})
	require.NoError(t, sim.AddCluster("c1", clustersim.Script{}))

	code, body := rawAdmin(t, srv, http.MethodPut, "/admin/clusters/c1/external_auths/ea1", `{"noStatusFor":"1s"}`)
	require.Equal(t, http.StatusOK, code, body)
	want := defaults
	want.NoStatusFor = clustersim.Duration(time.Second)
	r, err := sim.ExternalAuth("c1", "ea1")
	require.NoError(t, err)
	require.Equal(t, want, r.Script)
	code, body = rawAdmin(t, srv, http.MethodPut, "/admin/clusters/c1/break_glass_credentials/b1", "")
	require.Equal(t, http.StatusOK, code, body)

	clock.Advance(2 * time.Second)
	require.Equal(t, clustersim.CredentialIssued, credentialStatus(t, sim, "c1", "b1"))
	code, body = rawAdmin(t, srv, http.MethodPost, "/admin/clusters/c1/break_glass_credentials/revoke", "")
	require.Equal(t, http.StatusAccepted, code, body)
	require.JSONEq(t, `1`, jsonField(t, body, "revoking"))
	clock.Advance(4*time.Second - 1)
	require.Equal(t, clustersim.CredentialAwaitingRevocation, credentialStatus(t, sim, "c1", "b1"))
	clock.Advance(1)
	require.Equal(t, clustersim.CredentialRevoked, credentialStatus(t, sim, "c1", "b1"))

	code, body = rawAdmin(t, srv, http.MethodDelete, "/admin/clusters/c1/external_auths/ea1", "")
	require.Equal(t, http.StatusAccepted, code, body)
	clock.Advance(5*time.Second - 1)
	require.Equal(t, clustersim.StateUninstalling, externalAuthState(t, sim, "c1", "ea1"))
	clock.Advance(1)
	require.Equal(t, gone, externalAuthState(t, sim, "c1", "ea1"))
}

// jsonField returns the JSON text of one top-level field of body.
func jsonField(t *testing.T, body, field string) string {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(body), &m))
	return string(m[field])
}

func TestStatsCountNewKinds(t *testing.T) {
	sim, _ := newSim(t, clustersim.Options{})
	require.NoError(t, sim.AddCluster("c1", clustersim.Script{}))
	require.NoError(t, sim.AddExternalAuth("c1", "ea1", clustersim.Script{}))
	require.NoError(t, sim.AddCredential("c1", "b1", clustersim.Script{}))
	for _, path := range []string{
		"/api/clusters_mgmt/v1/clusters/c1",
		"/api/aro_hcp/v1alpha1/clusters/c1",
		"/api/aro_hcp/v1alpha1/clusters/c1",
		"/api/aro_hcp/v1alpha1/clusters/c1/external_auth_config/external_auths/ea1",
		"/api/aro_hcp/v1alpha1/clusters/c1/external_auth_config/external_auths/nope",
		"/api/clusters_mgmt/v1/clusters/c1/break_glass_credentials/b1",
		"/api/clusters_mgmt/v1/clusters/c1/break_glass_credentials",
		"/api/clusters_mgmt/v1/clusters/c1/break_glass_credentials?page=2",
		"/api/clusters_mgmt/v1/clusters/c1/break_glass_credentials?page=0",
	} {
		get(t, sim, path)
	}
	st := sim.Stats()
	require.Equal(t, map[string]int64{
		clustersim.PathKindClustersMgmtClusterObject:  1,
		clustersim.PathKindAROHCPClusterObject:        2,
		clustersim.PathKindAROHCPExternalAuth:         2,
		clustersim.PathKindClustersMgmtCredential:     1,
		clustersim.PathKindClustersMgmtCredentialList: 3,
	}, st.Requests)
	require.Equal(t, map[int]int64{200: 7, 404: 1, 400: 1}, st.Statuses)
}
