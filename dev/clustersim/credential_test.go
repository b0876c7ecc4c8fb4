package clustersim_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	cmv1 "github.com/openshift-online/ocm-sdk-go/clustersmgmt/v1"
	ocmerrors "github.com/openshift-online/ocm-sdk-go/errors"
	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/clustersim"
)

func credentialPath(id, bgc string) string {
	return "/api/clusters_mgmt/v1/clusters/" + id + "/break_glass_credentials/" + bgc
}

// credentialStatus reads a credential through its path and the Go API,
// requires them to agree, and returns its status (gone for 404).
func credentialStatus(t *testing.T, sim *clustersim.Sim, id, bgc string) string {
	t.Helper()
	path := credentialPath(id, bgc)
	rec := get(t, sim, path)
	httpStatus := gone
	if rec.Code != http.StatusNotFound {
		require.Equal(t, http.StatusOK, rec.Code)
		cr, err := cmv1.UnmarshalBreakGlassCredential(rec.Body.Bytes())
		require.NoError(t, err)
		require.Equal(t, cmv1.BreakGlassCredentialKind, cr.Kind())
		require.Equal(t, bgc, cr.ID())
		require.Equal(t, path, cr.HREF())
		httpStatus = string(cr.Status())
		require.NotEmpty(t, httpStatus)
	}
	goStatus := gone
	r, err := sim.Credential(id, bgc)
	if !errors.Is(err, clustersim.ErrNotFound) {
		require.NoError(t, err)
		goStatus = r.State
	}
	require.Equal(t, httpStatus, goStatus, "HTTP and Go API disagree")
	return httpStatus
}

func TestCredentialLifecycle(t *testing.T) {
	const id, bgc = "c1", "b1"
	revoke := func(d time.Duration) func(*clustersim.Sim) error {
		return func(s *clustersim.Sim) error { return s.RevokeCredential(id, bgc, d) }
	}
	tests := []struct {
		name   string
		script clustersim.Script
		steps  []step
	}{
		{
			name:   "issue: created, then issued",
			script: clustersim.Script{Issuing: clustersim.Duration(2 * time.Second)},
			steps: []step{
				{want: clustersim.CredentialCreated},
				{advance: 2*time.Second - 1, want: clustersim.CredentialCreated},
				{advance: 1, want: clustersim.CredentialIssued},
				{advance: time.Hour, want: clustersim.CredentialIssued},
			},
		},
		{
			name:   "failed issue cannot be revoked",
			script: clustersim.Script{Issuing: clustersim.Duration(time.Second), Fail: true},
			steps: []step{
				{want: clustersim.CredentialCreated},
				{advance: time.Second, want: clustersim.CredentialFailed},
				{act: revoke(time.Second), wantErr: clustersim.ErrConflict, want: clustersim.CredentialFailed},
			},
		},
		{
			name:   "expires after its lifetime",
			script: clustersim.Script{ExpiresIn: clustersim.Duration(time.Hour)},
			steps: []step{
				{want: clustersim.CredentialIssued},
				{advance: time.Hour - 1, want: clustersim.CredentialIssued},
				{advance: 1, want: clustersim.CredentialExpired},
				{act: revoke(time.Second), wantErr: clustersim.ErrConflict, want: clustersim.CredentialExpired},
			},
		},
		{
			name:   "the default lifetime",
			script: clustersim.Script{},
			steps: []step{
				{advance: clustersim.DefaultCredentialLifetime - 1, want: clustersim.CredentialIssued},
				{advance: 1, want: clustersim.CredentialExpired},
			},
		},
		{
			name:   "revoke: awaiting_revocation, then revoked, for good",
			script: clustersim.Script{},
			steps: []step{
				{act: revoke(2 * time.Second), want: clustersim.CredentialAwaitingRevocation},
				{advance: time.Second, act: revoke(time.Hour), want: clustersim.CredentialAwaitingRevocation},
				{advance: time.Second - 1, want: clustersim.CredentialAwaitingRevocation},
				{advance: 1, want: clustersim.CredentialRevoked},
				{advance: 2 * clustersim.DefaultCredentialLifetime, want: clustersim.CredentialRevoked},
				{act: revoke(0), wantErr: clustersim.ErrConflict, want: clustersim.CredentialRevoked},
			},
		},
		{
			name:   "a revocation that fails",
			script: clustersim.Script{RevokeFail: true},
			steps: []step{
				{act: revoke(time.Second), want: clustersim.CredentialAwaitingRevocation},
				{advance: time.Second, want: clustersim.CredentialFailed},
			},
		},
		{
			name:   "revoke while still created",
			script: clustersim.Script{Issuing: clustersim.Duration(time.Hour), Revoking: clustersim.Duration(time.Second)},
			steps: []step{
				{act: func(s *clustersim.Sim) error { return wantRevoking(s.RevokeCredentials(id, time.Second)) }, want: clustersim.CredentialAwaitingRevocation},
				{advance: time.Second, want: clustersim.CredentialRevoked},
			},
		},
		{
			name:   "a set status holds, even past the expiration",
			script: clustersim.Script{ExpiresIn: clustersim.Duration(time.Hour)},
			steps: []step{
				{act: func(s *clustersim.Sim) error { return s.SetState(credentialPath(id, bgc), "suspended") }, want: "suspended"},
				{advance: 2 * time.Hour, want: "suspended"},
				{act: func(s *clustersim.Sim) error { return s.SetState(credentialPath(id, bgc), clustersim.CredentialIssued) }, want: clustersim.CredentialIssued},
				{advance: time.Hour, want: clustersim.CredentialIssued},
			},
		},
		{
			name:   "ready-all issues, then ends a revocation",
			script: clustersim.Script{Issuing: clustersim.Duration(time.Hour)},
			steps: []step{
				{act: func(s *clustersim.Sim) error { return wantChanged(s.ReadyAll(), 1) }, want: clustersim.CredentialIssued},
				{act: revoke(time.Hour), want: clustersim.CredentialAwaitingRevocation},
				{act: func(s *clustersim.Sim) error { return wantChanged(s.ReadyAll(), 1) }, want: clustersim.CredentialRevoked},
				{act: func(s *clustersim.Sim) error { return wantChanged(s.ReadyAll(), 0) }, want: clustersim.CredentialRevoked},
			},
		},
		{
			name:   "deleting the cluster takes its credentials when it is gone",
			script: clustersim.Script{},
			steps: []step{
				{act: func(s *clustersim.Sim) error { return s.DeleteCluster(id, time.Second) }, want: clustersim.CredentialIssued},
				{act: func(s *clustersim.Sim) error { return s.AddCredential(id, "b2", clustersim.Script{}) }, wantErr: clustersim.ErrConflict, want: clustersim.CredentialIssued},
				{act: revoke(time.Hour), want: clustersim.CredentialAwaitingRevocation},
				{advance: time.Second, want: gone},
				{act: revoke(0), wantErr: clustersim.ErrNotFound, want: gone},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sim, clock := newSim(t, clustersim.Options{})
			require.NoError(t, sim.AddCluster(id, clustersim.Script{}))
			require.NoError(t, sim.AddCredential(id, bgc, tt.script))
			for i, st := range tt.steps {
				clock.Advance(st.advance)
				if st.act != nil {
					err := st.act(sim)
					if st.wantErr != nil {
						require.ErrorIs(t, err, st.wantErr, "step %d", i)
					} else {
						require.NoError(t, err, "step %d", i)
					}
				}
				require.Equal(t, st.want, credentialStatus(t, sim, id, bgc), "step %d", i)
			}
		})
	}
}

func wantRevoking(n int, err error) error {
	if err != nil {
		return err
	}
	if n != 1 {
		return fmt.Errorf("%d revocations started, want 1", n)
	}
	return nil
}

// A cluster's revoke-all moves every created or issued credential through
// awaiting_revocation to revoked and leaves the others as they are.
func TestRevokeCredentials(t *testing.T) {
	sim, clock := newSim(t, clustersim.Options{})
	const id = "c1"
	require.NoError(t, sim.AddCluster(id, clustersim.Script{}))
	require.NoError(t, sim.AddCredential(id, "issued", clustersim.Script{}))
	require.NoError(t, sim.AddCredential(id, "created", clustersim.Script{Issuing: clustersim.Duration(time.Hour)}))
	require.NoError(t, sim.AddCredential(id, "failed", clustersim.Script{Fail: true}))
	require.NoError(t, sim.AddCredential(id, "expired", clustersim.Script{ExpiresIn: clustersim.Duration(time.Second)}))
	require.NoError(t, sim.AddCredential(id, "awaiting", clustersim.Script{}))
	require.NoError(t, sim.AddCredential(id, "revoked", clustersim.Script{}))
	require.NoError(t, sim.RevokeCredential(id, "revoked", 0))
	clock.Advance(time.Second)
	require.NoError(t, sim.RevokeCredential(id, "awaiting", 10*time.Second))
	clock.Advance(time.Second)

	n, err := sim.RevokeCredentials(id, 3*time.Second)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	statuses := func() map[string]string {
		out := map[string]string{}
		for _, bgc := range []string{"issued", "created", "failed", "expired", "awaiting", "revoked"} {
			out[bgc] = credentialStatus(t, sim, id, bgc)
		}
		return out
	}
	require.Equal(t, map[string]string{
		"issued": clustersim.CredentialAwaitingRevocation, "created": clustersim.CredentialAwaitingRevocation,
		"failed": clustersim.CredentialFailed, "expired": clustersim.CredentialExpired,
		"awaiting": clustersim.CredentialAwaitingRevocation, "revoked": clustersim.CredentialRevoked,
	}, statuses())

	clock.Advance(3 * time.Second)
	got := statuses()
	require.Equal(t, clustersim.CredentialRevoked, got["issued"])
	require.Equal(t, clustersim.CredentialRevoked, got["created"])
	require.Equal(t, clustersim.CredentialAwaitingRevocation, got["awaiting"], "an earlier revocation keeps its own time")
	clock.Advance(6 * time.Second)
	require.Equal(t, clustersim.CredentialRevoked, credentialStatus(t, sim, id, "awaiting"))

	r, err := sim.Credential(id, "issued")
	require.NoError(t, err)
	require.True(t, t0.Add(5*time.Second).Equal(r.RevocationTimestamp), "revoked %v", r.RevocationTimestamp)

	n, err = sim.RevokeCredentials(id, time.Second)
	require.NoError(t, err)
	require.Zero(t, n, "nothing left to revoke")
	_, err = sim.RevokeCredentials("nope", time.Second)
	require.ErrorIs(t, err, clustersim.ErrNotFound)
	_, err = sim.RevokeCredentials(id, -time.Second)
	require.ErrorIs(t, err, clustersim.ErrInvalid)
}

func TestCredentialBodiesAreExact(t *testing.T) {
	sim, clock := newSim(t, clustersim.Options{})
	require.NoError(t, sim.AddCluster("c1", clustersim.Script{}))
	require.NoError(t, sim.AddCredential("c1", "b1", clustersim.Script{Username: "admin-1"}))
	require.NoError(t, sim.AddCredential("c1", "b2", clustersim.Script{ExpiresIn: clustersim.Duration(time.Hour), Issuing: clustersim.Duration(time.Minute)}))
	clock.Advance(time.Minute)
	require.NoError(t, sim.RevokeCredential("c1", "b2", time.Second))
	clock.Advance(time.Second)

	kubeconfig := fmt.Sprintf("%q", clustersim.SimulatedKubeconfig)
	b1 := `{"kind":"BreakGlassCredential","id":"b1","href":"/api/clusters_mgmt/v1/clusters/c1/break_glass_credentials/b1",
		"expiration_timestamp":"2025-06-02T12:00:00Z","kubeconfig":` + kubeconfig + `,"status":"issued","username":"admin-1"}`
	b2 := `{"kind":"BreakGlassCredential","id":"b2","href":"/api/clusters_mgmt/v1/clusters/c1/break_glass_credentials/b2",
		"expiration_timestamp":"2025-06-01T13:00:00Z","revocation_timestamp":"2025-06-01T12:01:01Z","status":"revoked",
		"username":"break-glass-b2"}`
	require.JSONEq(t, b1, get(t, sim, credentialPath("c1", "b1")).Body.String())
	require.JSONEq(t, b2, get(t, sim, credentialPath("c1", "b2")).Body.String())
	require.JSONEq(t, `{"kind":"BreakGlassCredentialList","href":"/api/clusters_mgmt/v1/clusters/c1/break_glass_credentials",
		"page":1,"size":2,"total":2,"items":[`+b1+`,`+b2+`]}`,
		get(t, sim, "/api/clusters_mgmt/v1/clusters/c1/break_glass_credentials").Body.String())

	cr, err := cmv1.UnmarshalBreakGlassCredential(get(t, sim, credentialPath("c1", "b2")).Body.Bytes())
	require.NoError(t, err)
	require.Equal(t, cmv1.BreakGlassCredentialStatusRevoked, cr.Status())
	require.True(t, t0.Add(time.Hour).Equal(cr.ExpirationTimestamp()))
	require.True(t, t0.Add(time.Minute+time.Second).Equal(cr.RevocationTimestamp()))
	require.Equal(t, "break-glass-b2", cr.Username())
	_, ok := cr.GetKubeconfig()
	require.False(t, ok, "only an issued credential carries a kubeconfig")
}

// Pages count from 1, hold size items (100 unless asked), the last one
// fewer, and every page tells the total; pages past the end are empty.
func TestCredentialListPaging(t *testing.T) {
	tests := []struct {
		n         int
		size      int   // 0: not sent
		wantPages []int // sizes of the pages before the first empty one
	}{
		{n: 0, wantPages: nil},
		{n: 1, wantPages: []int{1}},
		{n: 100, wantPages: []int{100}},
		{n: 250, wantPages: []int{100, 100, 50}},
		{n: 250, size: 100, wantPages: []int{100, 100, 50}},
		{n: 250, size: 7, wantPages: append(slices.Repeat([]int{7}, 35), 5)},
		{n: 250, size: 250, wantPages: []int{250}},
		{n: 250, size: 1000, wantPages: []int{250}},
		{n: 1, size: 1, wantPages: []int{1}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("n=%d,size=%d", tt.n, tt.size), func(t *testing.T) {
			sim, _ := newSim(t, clustersim.Options{})
			require.NoError(t, sim.AddCluster("c1", clustersim.Script{}))
			var want []string
			for i := range tt.n {
				bgc := fmt.Sprintf("b%04d", i)
				want = append(want, bgc)
				require.NoError(t, sim.AddCredential("c1", bgc, clustersim.Script{}))
			}
			list := ocmConn(t, sim).ClustersMgmt().V1().Clusters().Cluster("c1").BreakGlassCredentials()
			var got []string
			for page := 1; page <= len(tt.wantPages)+1; page++ {
				req := list.List().Page(page)
				if tt.size != 0 {
					req = req.Size(tt.size)
				}
				resp, err := req.SendContext(context.Background())
				require.NoError(t, err)
				wantSize := 0
				if page <= len(tt.wantPages) {
					wantSize = tt.wantPages[page-1]
				}
				require.Equal(t, page, resp.Page())
				require.Equal(t, wantSize, resp.Size(), "page %d", page)
				require.Equal(t, tt.n, resp.Total(), "page %d", page)
				items := resp.Items().Slice()
				require.Len(t, items, wantSize, "page %d", page)
				for _, it := range items {
					require.Equal(t, cmv1.BreakGlassCredentialStatusIssued, it.Status())
					got = append(got, it.ID())
				}
			}
			require.Equal(t, want, got, "every credential once, in order")
		})
	}
}

func TestCredentialListRejectsBadPaging(t *testing.T) {
	for _, query := range []string{"page=0", "size=0", "page=-1", "size=-5", "page=x", "size=1.5"} {
		t.Run(query, func(t *testing.T) {
			sim, _ := newSim(t, clustersim.Options{})
			require.NoError(t, sim.AddCluster("c1", clustersim.Script{}))
			rec := get(t, sim, "/api/clusters_mgmt/v1/clusters/c1/break_glass_credentials?"+query)
			require.Equal(t, http.StatusBadRequest, rec.Code)
			e, err := ocmerrors.UnmarshalErrorStatus(rec.Body.Bytes(), rec.Code)
			require.NoError(t, err)
			require.Equal(t, "CLUSTERS-MGMT-400", e.Code())
		})
	}
}

func TestCredentialWithOCMSDKClient(t *testing.T) {
	sim, clock := newSim(t, clustersim.Options{})
	conn := ocmConn(t, sim)
	ctx := context.Background()
	require.NoError(t, sim.AddCluster("c1", clustersim.Script{}))
	require.NoError(t, sim.AddCredential("c1", "b1", clustersim.Script{Issuing: clustersim.Duration(time.Second)}))
	creds := conn.ClustersMgmt().V1().Clusters().Cluster("c1").BreakGlassCredentials()

	resp, err := creds.BreakGlassCredential("b1").Get().SendContext(ctx)
	require.NoError(t, err)
	require.Equal(t, cmv1.BreakGlassCredentialStatusCreated, resp.Body().Status())
	clock.Advance(time.Second)
	resp, err = creds.BreakGlassCredential("b1").Get().SendContext(ctx)
	require.NoError(t, err)
	require.Equal(t, cmv1.BreakGlassCredentialStatusIssued, resp.Body().Status())
	require.Equal(t, clustersim.SimulatedKubeconfig, resp.Body().Kubeconfig())

	_, err = creds.BreakGlassCredential("nope").Get().SendContext(ctx)
	var oe *ocmerrors.Error
	require.ErrorAs(t, err, &oe)
	require.Equal(t, http.StatusNotFound, oe.Status())
	require.Equal(t, "Break glass credential 'nope' not found", oe.Reason())

	// Once the cluster is gone, so is its list: an OCM 404.
	require.NoError(t, sim.DeleteCluster("c1", 0))
	_, err = creds.List().SendContext(ctx)
	require.ErrorAs(t, err, &oe)
	require.Equal(t, http.StatusNotFound, oe.Status())
	require.Equal(t, "Cluster 'c1' not found", oe.Reason())
}

func TestCredentialsFollowClusterAPI(t *testing.T) {
	tests := []struct {
		api  string
		want int
	}{
		{clustersim.APIBoth, http.StatusOK},
		{clustersim.APIClustersMgmt, http.StatusOK},
		{clustersim.APIAROHCP, http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run("api="+tt.api, func(t *testing.T) {
			sim, _ := newSim(t, clustersim.Options{})
			require.NoError(t, sim.AddCluster("c1", clustersim.Script{API: tt.api}))
			require.NoError(t, sim.AddCredential("c1", "b1", clustersim.Script{}))
			require.Equal(t, tt.want, get(t, sim, credentialPath("c1", "b1")).Code)
			require.Equal(t, tt.want, get(t, sim, "/api/clusters_mgmt/v1/clusters/c1/break_glass_credentials").Code)
		})
	}
}
