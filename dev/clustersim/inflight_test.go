package clustersim_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdk "github.com/openshift-online/ocm-sdk-go"
	arohcpv1alpha1 "github.com/openshift-online/ocm-sdk-go/arohcp/v1alpha1"
	cmv1 "github.com/openshift-online/ocm-sdk-go/clustersmgmt/v1"
	ocmerrors "github.com/openshift-online/ocm-sdk-go/errors"
	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/clustersim"
)

// failedInflight is a cluster that failed its inflight checks at once.
func failedInflight(checks ...clustersim.InflightCheck) clustersim.Script {
	return clustersim.Script{Fail: true, ErrorCode: "OCM4001", ErrorMessage: "Inflight checks failed", InflightChecks: checks}
}

var (
	egressFailed = clustersim.InflightCheck{Name: "egress", State: clustersim.InflightFailed,
		Details: map[string]any{"error": "egress to quay.io blocked", "urls": []any{"quay.io"}}}
	dnsPassed = clustersim.InflightCheck{ID: "dns-1", Name: "dns", State: clustersim.InflightPassed}
)

func TestInflightChecksBody(t *testing.T) {
	sim, _ := newSim(t, clustersim.Options{})
	require.NoError(t, sim.AddCluster("c1", failedInflight(egressFailed, dnsPassed)))
	require.NoError(t, sim.AddCluster("c2", clustersim.Script{}))
	for _, api := range []string{"clusters_mgmt/v1", "aro_hcp/v1alpha1"} {
		t.Run(api, func(t *testing.T) {
			href := "/api/" + api + "/clusters/c1/inflight_checks"
			rec := get(t, sim, href)
			require.Equal(t, http.StatusOK, rec.Code)
			require.JSONEq(t, `{"kind":"InflightCheckList","href":"`+href+`","page":1,"size":2,"total":2,"items":[
				{"kind":"InflightCheck","id":"1","href":"`+href+`/1","name":"egress","state":"failed",
				 "details":{"error":"egress to quay.io blocked","urls":["quay.io"]}},
				{"kind":"InflightCheck","id":"dns-1","href":"`+href+`/dns-1","name":"dns","state":"passed"}]}`, rec.Body.String())

			rec = get(t, sim, "/api/"+api+"/clusters/c2/inflight_checks")
			require.Equal(t, http.StatusOK, rec.Code)
			require.JSONEq(t, `{"kind":"InflightCheckList","href":"/api/`+api+`/clusters/c2/inflight_checks","page":1,"size":0,"total":0,"items":[]}`,
				rec.Body.String())
		})
	}
	rec := get(t, sim, "/api/aro_hcp/v1alpha1/clusters/c1/status")
	require.JSONEq(t, `{"kind":"ClusterStatus","id":"c1","href":"/api/aro_hcp/v1alpha1/clusters/c1/status","state":"error",
		"provision_error_code":"OCM4001","provision_error_message":"Inflight checks failed"}`, rec.Body.String())
}

// Both ocm-sdk-go APIs read the list the simulator serves.
func TestInflightChecksParseWithOCMSDK(t *testing.T) {
	sim, _ := newSim(t, clustersim.Options{})
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	conn, err := sdk.NewConnectionBuilder().URL(srv.URL).Tokens(unsignedToken()).RetryLimit(0).Build()
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ctx := context.Background()
	require.NoError(t, sim.AddCluster("c1", failedInflight(egressFailed, dnsPassed,
		clustersim.InflightCheck{Name: "net", State: clustersim.InflightRunning})))

	cm, err := conn.ClustersMgmt().V1().Clusters().Cluster("c1").InflightChecks().List().SendContext(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, cm.Total())
	items := cm.Items().Slice()
	require.Len(t, items, 3)
	require.Equal(t, cmv1.InflightCheckKind, items[0].Kind())
	require.Equal(t, "egress", items[0].Name())
	require.Equal(t, cmv1.InflightCheckStateFailed, items[0].State())
	require.Equal(t, "egress to quay.io blocked", items[0].Details().(map[string]any)["error"])
	require.Equal(t, cmv1.InflightCheckStatePassed, items[1].State())
	require.Equal(t, "dns-1", items[1].ID())
	require.Equal(t, cmv1.InflightCheckStateRunning, items[2].State())

	ah, err := conn.AroHCP().V1alpha1().Clusters().Cluster("c1").InflightChecks().List().SendContext(ctx)
	require.NoError(t, err)
	ahItems := ah.Items().Slice()
	require.Len(t, ahItems, 3)
	require.Equal(t, arohcpv1alpha1.InflightCheckStateFailed, ahItems[0].State())
	require.Equal(t, "egress to quay.io blocked", ahItems[0].Details().(map[string]any)["error"])

	_, err = conn.AroHCP().V1alpha1().Clusters().Cluster("missing").InflightChecks().List().SendContext(ctx)
	var oe *ocmerrors.Error
	require.ErrorAs(t, err, &oe)
	require.Equal(t, http.StatusNotFound, oe.Status())
}

func TestInflightChecksNotFound(t *testing.T) {
	sim, clock := newSim(t, clustersim.Options{})
	sc := failedInflight(egressFailed)
	sc.API = clustersim.APIAROHCP
	require.NoError(t, sim.AddCluster("c1", sc))
	require.NoError(t, sim.AddNodePool("c1", "np1", clustersim.Script{}))
	for path, reason := range map[string]string{
		"/api/aro_hcp/v1alpha1/clusters/x/inflight_checks":                 "Cluster 'x' not found",
		"/api/clusters_mgmt/v1/clusters/c1/inflight_checks":                "Cluster 'c1' not found",
		"/api/aro_hcp/v1alpha1/clusters/c1/node_pools/np1/inflight_checks": "Path '/api/aro_hcp/v1alpha1/clusters/c1/node_pools/np1/inflight_checks' not found",
	} {
		rec := get(t, sim, path)
		require.Equal(t, http.StatusNotFound, rec.Code, path)
		e, err := ocmerrors.UnmarshalErrorStatus(rec.Body.Bytes(), rec.Code)
		require.NoError(t, err)
		require.Equal(t, reason, e.Reason())
	}

	require.NoError(t, sim.DeleteCluster("c1", time.Second))
	require.Equal(t, http.StatusOK, get(t, sim, "/api/aro_hcp/v1alpha1/clusters/c1/inflight_checks").Code, "still there while uninstalling")
	clock.Advance(time.Second)
	require.Equal(t, http.StatusNotFound, get(t, sim, "/api/aro_hcp/v1alpha1/clusters/c1/inflight_checks").Code, "gone once deleted")

	rec := do(t, sim, http.MethodPost, "/api/aro_hcp/v1alpha1/clusters/x/inflight_checks")
	require.Equal(t, http.StatusMethodNotAllowed, rec.Code)
}

// The admin API puts a cluster in error with OCM4001 and its checks, and
// refuses checks it cannot serve.
func TestAdminInflightChecks(t *testing.T) {
	_, _, srv, admin := startServer(t, clustersim.Options{Defaults: clustersim.Script{
		Installing: clustersim.Duration(time.Hour), InflightChecks: []clustersim.InflightCheck{dnsPassed}}})
	ctx := context.Background()

	r, err := admin.PutCluster(ctx, "c1", failedInflight(egressFailed, dnsPassed))
	require.NoError(t, err)
	require.Equal(t, clustersim.StateError, r.State)
	require.Equal(t, []clustersim.InflightCheck{egressFailed, dnsPassed}, r.Script.InflightChecks)
	st, err := readStatus(t, srv, "/api/clusters_mgmt/v1/clusters/c1/status")
	require.NoError(t, err)
	require.Equal(t, cmv1.ClusterStateError, st.State())
	require.Equal(t, "OCM4001", st.ProvisionErrorCode())

	resp, err := srv.Client().Get(srv.URL + "/api/aro_hcp/v1alpha1/clusters/c1/inflight_checks")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	for name, checks := range map[string][]clustersim.InflightCheck{
		"unknown state":         {{Name: "egress", State: "broken"}},
		"state in another case": {{Name: "egress", State: "Failed"}},
		"no name":               {{State: clustersim.InflightFailed}},
		"bad id":                {{ID: "a/b", Name: "egress", State: clustersim.InflightFailed}},
	} {
		_, err := admin.PutCluster(ctx, "c2", failedInflight(checks...))
		requireAdminStatus(t, err, http.StatusBadRequest)
		require.Contains(t, err.Error(), "inflight check", name)
	}

	// A PUT body is decoded over the defaults: one with checks of its own
	// must leave the defaults' checks as they were for the next PUT.
	body := `{"fail":true,"errorCode":"OCM4001","inflightChecks":[{"name":"egress","state":"failed","details":{"error":"x"}}]}`
	putRaw(t, srv, "/admin/clusters/c3", body)
	putRaw(t, srv, "/admin/clusters/c4", `{}`)
	r, err = admin.Cluster(ctx, "c4")
	require.NoError(t, err)
	require.Equal(t, []clustersim.InflightCheck{dnsPassed}, r.Script.InflightChecks)
}

func readStatus(t *testing.T, srv *httptest.Server, path string) (*cmv1.ClusterStatus, error) {
	t.Helper()
	resp, err := srv.Client().Get(srv.URL + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	return cmv1.UnmarshalClusterStatus(resp.Body)
}

func putRaw(t *testing.T, srv *httptest.Server, path, body string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, srv.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

// The Go API keeps its own copy of a script's checks.
func TestInflightChecksAreCopied(t *testing.T) {
	sim, _ := newSim(t, clustersim.Options{})
	sc := failedInflight(clustersim.InflightCheck{Name: "egress", State: clustersim.InflightFailed, Details: map[string]any{"error": "a"}})
	require.NoError(t, sim.AddCluster("c1", sc))
	sc.InflightChecks[0].State = clustersim.InflightPassed
	sc.InflightChecks[0].Details["error"] = "b"
	r, err := sim.Cluster("c1")
	require.NoError(t, err)
	require.Equal(t, clustersim.InflightFailed, r.Script.InflightChecks[0].State)
	require.Equal(t, "a", r.Script.InflightChecks[0].Details["error"])
	r.Script.InflightChecks[0].Name = "changed"
	require.JSONEq(t, `{"kind":"InflightCheckList","href":"/api/aro_hcp/v1alpha1/clusters/c1/inflight_checks","page":1,"size":1,"total":1,
		"items":[{"kind":"InflightCheck","id":"1","href":"/api/aro_hcp/v1alpha1/clusters/c1/inflight_checks/1","name":"egress","state":"failed","details":{"error":"a"}}]}`,
		get(t, sim, "/api/aro_hcp/v1alpha1/clusters/c1/inflight_checks").Body.String())
}

// Faults.InflightChecksStatus fails the inflight checks calls only; the
// other faults reach them too. Inflight checks calls are counted by kind
// and not recorded in Calls.
func TestInflightChecksFaults(t *testing.T) {
	sim, _, _, admin := startServer(t, clustersim.Options{RecordCalls: true})
	ctx := context.Background()
	require.NoError(t, sim.AddCluster("c1", failedInflight(egressFailed)))
	const inflight = "/api/aro_hcp/v1alpha1/clusters/c1/inflight_checks"

	require.NoError(t, admin.SetFaults(ctx, clustersim.Faults{InflightChecksStatus: http.StatusInternalServerError}))
	f, err := admin.Faults(ctx)
	require.NoError(t, err)
	require.Equal(t, http.StatusInternalServerError, f.InflightChecksStatus)
	rec := get(t, sim, inflight)
	require.Equal(t, http.StatusInternalServerError, rec.Code)
	e, err := ocmerrors.UnmarshalErrorStatus(rec.Body.Bytes(), rec.Code)
	require.NoError(t, err)
	require.Equal(t, "CLUSTERS-MGMT-500", e.Code())
	require.Equal(t, http.StatusOK, get(t, sim, "/api/aro_hcp/v1alpha1/clusters/c1/status").Code, "status calls are not affected")

	require.NoError(t, sim.SetFaults(clustersim.Faults{Outage: true}))
	require.Equal(t, http.StatusServiceUnavailable, get(t, sim, "/api/clusters_mgmt/v1/clusters/c1/inflight_checks").Code)

	require.NoError(t, sim.SetFaults(clustersim.Faults{}))
	require.Equal(t, http.StatusOK, get(t, sim, inflight).Code, "recovered")

	for _, bad := range []int{-1, 200, 302, 399, 600} {
		err := admin.SetFaults(ctx, clustersim.Faults{InflightChecksStatus: bad})
		requireAdminStatus(t, err, http.StatusBadRequest)
	}

	st := sim.Stats()
	require.Equal(t, map[string]int64{
		clustersim.PathKindAROHCPInflightChecks:       2,
		clustersim.PathKindClustersMgmtInflightChecks: 1,
		clustersim.PathKindAROHCPCluster:              1,
	}, st.Requests)
	require.Equal(t, map[int]int64{200: 2, 500: 1, 503: 1}, st.Statuses)
	require.Equal(t, map[string]int64{clustersim.FaultInflightChecks: 1, clustersim.FaultOutage: 1}, st.Faults)
	require.Equal(t, []string{"/api/aro_hcp/v1alpha1/clusters/c1"}, keys(sim.Calls()), "only the status call is recorded")
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
