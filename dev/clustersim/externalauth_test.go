package clustersim_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	arohcpv1alpha1 "github.com/openshift-online/ocm-sdk-go/arohcp/v1alpha1"
	ocmerrors "github.com/openshift-online/ocm-sdk-go/errors"
	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/clustersim"
)

// noStatus is the expected state of an external auth served without a
// status.
const noStatus = "(no status)"

func externalAuthPath(id, ea string) string {
	return "/api/aro_hcp/v1alpha1/clusters/" + id + "/external_auth_config/external_auths/" + ea
}

// externalAuthState reads an external auth through its path and the Go
// API, requires them to agree, and returns its state (gone for 404,
// noStatus for an object without status).
func externalAuthState(t *testing.T, sim *clustersim.Sim, id, ea string) string {
	t.Helper()
	path := externalAuthPath(id, ea)
	rec := get(t, sim, path)
	httpState := gone
	if rec.Code != http.StatusNotFound {
		require.Equal(t, http.StatusOK, rec.Code)
		obj, err := arohcpv1alpha1.UnmarshalExternalAuth(rec.Body.Bytes())
		require.NoError(t, err)
		require.Equal(t, arohcpv1alpha1.ExternalAuthKind, obj.Kind())
		require.Equal(t, ea, obj.ID())
		require.Equal(t, path, obj.HREF())
		httpState = noStatus
		if st, ok := obj.GetStatus(); ok {
			state, ok := st.GetState()
			require.True(t, ok, "a status always has a state")
			httpState = state.Value()
			require.NotEmpty(t, httpState)
		}
	}
	goState := gone
	r, err := sim.ExternalAuth(id, ea)
	if !errors.Is(err, clustersim.ErrNotFound) {
		require.NoError(t, err)
		goState = r.State
		if goState == "" {
			goState = noStatus
		}
	}
	require.Equal(t, httpState, goState, "HTTP and Go API disagree")
	return httpState
}

func TestExternalAuthLifecycle(t *testing.T) {
	const id, ea = "c1", "ea1"
	zero := clustersim.Script{}
	tests := []struct {
		name   string
		script clustersim.Script
		steps  []step
	}{
		{
			name:   "create goes pending, validating, installing, ready",
			script: script(time.Second, 2*time.Second, 3*time.Second),
			steps: []step{
				{want: clustersim.StatePending},
				{advance: time.Second, want: clustersim.StateValidating},
				{advance: 2 * time.Second, want: clustersim.StateInstalling},
				{advance: 3*time.Second - 1, want: clustersim.StateInstalling},
				{advance: 1, want: clustersim.StateReady},
			},
		},
		{
			name:   "no status at first, then its stages",
			script: clustersim.Script{NoStatusFor: clustersim.Duration(2 * time.Second), Installing: clustersim.Duration(time.Second)},
			steps: []step{
				{want: noStatus},
				{act: func(s *clustersim.Sim) error { return s.UpdateExternalAuth(id, ea, time.Second) }, wantErr: clustersim.ErrConflict, want: noStatus},
				{advance: 2*time.Second - 1, want: noStatus},
				{advance: 1, want: clustersim.StateInstalling},
				{advance: time.Second, want: clustersim.StateReady},
			},
		},
		{
			name:   "no status for its whole life; a delete still ends in 404",
			script: clustersim.Script{NoStatus: true, Installing: clustersim.Duration(time.Second)},
			steps: []step{
				{want: noStatus},
				{advance: time.Hour, want: noStatus},
				{act: func(s *clustersim.Sim) error { return s.DeleteExternalAuth(id, ea, time.Second) }, want: noStatus},
				{advance: time.Second, want: gone},
			},
		},
		{
			name:   "failing create ends in error",
			script: clustersim.Script{Installing: clustersim.Duration(time.Second), Fail: true, ErrorMessage: "issuer unreachable"},
			steps: []step{
				{want: clustersim.StateInstalling},
				{advance: time.Second, want: clustersim.StateError},
				{advance: time.Hour, want: clustersim.StateError},
			},
		},
		{
			name:   "delete uninstalls, then 404; the cluster stays",
			script: zero,
			steps: []step{
				{act: func(s *clustersim.Sim) error { return s.DeleteExternalAuth(id, ea, 2*time.Second) }, want: clustersim.StateUninstalling},
				{advance: time.Second, act: func(s *clustersim.Sim) error { return s.DeleteExternalAuth(id, ea, time.Hour) }, want: clustersim.StateUninstalling},
				{advance: time.Second, want: gone},
				{act: func(s *clustersim.Sim) error { return s.DeleteExternalAuth(id, ea, 0) }, wantErr: clustersim.ErrNotFound, want: gone},
				{act: func(s *clustersim.Sim) error { return requireState(s, id, clustersim.StateReady) }, want: gone},
			},
		},
		{
			name:   "update goes updating, then ready",
			script: zero,
			steps: []step{
				{act: func(s *clustersim.Sim) error { return s.UpdateExternalAuth(id, ea, time.Second) }, want: clustersim.StateUpdating},
				{advance: time.Second, want: clustersim.StateReady},
			},
		},
		{
			name:   "deleting the cluster takes its external auths when it is gone",
			script: zero,
			steps: []step{
				{act: func(s *clustersim.Sim) error { return s.DeleteCluster(id, time.Second) }, want: clustersim.StateReady},
				{act: func(s *clustersim.Sim) error { return s.AddExternalAuth(id, "ea2", zero) }, wantErr: clustersim.ErrConflict, want: clustersim.StateReady},
				{advance: time.Second, want: gone},
				{act: func(s *clustersim.Sim) error { return s.AddExternalAuth(id, ea, zero) }, wantErr: clustersim.ErrNotFound, want: gone},
			},
		},
		{
			name:   "set state and ready-all",
			script: script(0, 0, time.Hour),
			steps: []step{
				{act: func(s *clustersim.Sim) error { return s.SetState(externalAuthPath(id, ea), "degraded") }, want: "degraded"},
				{advance: time.Hour, want: "degraded"},
				{act: func(s *clustersim.Sim) error { return wantChanged(s.ReadyAll(), 1) }, want: clustersim.StateReady},
				{act: func(s *clustersim.Sim) error { return s.DeleteExternalAuth(id, ea, time.Hour) }, want: clustersim.StateUninstalling},
				{act: func(s *clustersim.Sim) error { return wantChanged(s.ReadyAll(), 1) }, want: gone},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sim, clock := newSim(t, clustersim.Options{})
			require.NoError(t, sim.AddCluster(id, zero))
			require.NoError(t, sim.AddExternalAuth(id, ea, tt.script))
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
				require.Equal(t, st.want, externalAuthState(t, sim, id, ea), "step %d", i)
			}
		})
	}
}

func TestExternalAuthParsesWithOCMSDK(t *testing.T) {
	tests := []struct {
		name        string
		script      clustersim.Script
		advance     time.Duration
		wantStatus  bool
		wantState   string
		wantSince   time.Time
		wantMessage string // "" = field absent
	}{
		{name: "installing with description", script: clustersim.Script{Pending: clustersim.Duration(time.Second),
			Installing: clustersim.Duration(time.Minute), Description: "configuring"},
			advance: 2 * time.Second, wantStatus: true, wantState: clustersim.StateInstalling, wantSince: t0.Add(time.Second), wantMessage: "configuring"},
		{name: "ready", script: clustersim.Script{Installing: clustersim.Duration(time.Minute)}, advance: time.Hour,
			wantStatus: true, wantState: clustersim.StateReady, wantSince: t0.Add(time.Minute)},
		{name: "failed carries the error message", script: clustersim.Script{Installing: clustersim.Duration(time.Minute), Fail: true,
			ErrorMessage: "issuer unreachable", Description: "x"},
			advance: time.Minute, wantStatus: true, wantState: clustersim.StateError, wantSince: t0.Add(time.Minute), wantMessage: "issuer unreachable"},
		{name: "no status", script: clustersim.Script{NoStatus: true}, advance: time.Hour},
		{name: "no status yet", script: clustersim.Script{NoStatusFor: clustersim.Duration(time.Minute)}, advance: time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sim, clock := newSim(t, clustersim.Options{})
			require.NoError(t, sim.AddCluster("c1", clustersim.Script{}))
			require.NoError(t, sim.AddExternalAuth("c1", "ea1", tt.script))
			clock.Advance(tt.advance)
			rec := get(t, sim, externalAuthPath("c1", "ea1"))
			require.Equal(t, http.StatusOK, rec.Code)

			obj, err := arohcpv1alpha1.UnmarshalExternalAuth(rec.Body.Bytes())
			require.NoError(t, err)
			st, ok := obj.GetStatus()
			require.Equal(t, tt.wantStatus, ok)
			if !tt.wantStatus {
				require.NotContains(t, rec.Body.String(), `"status"`)
				return
			}
			require.Equal(t, tt.wantState, st.State().Value())
			require.True(t, tt.wantSince.Equal(st.State().LastUpdatedTimestamp()), "since %v, want %v", st.State().LastUpdatedTimestamp(), tt.wantSince)
			msg, ok := st.GetMessage()
			require.Equal(t, tt.wantMessage != "", ok)
			require.Equal(t, tt.wantMessage, msg)
		})
	}
}

func TestExternalAuthBodyIsExact(t *testing.T) {
	sim, clock := newSim(t, clustersim.Options{})
	require.NoError(t, sim.AddCluster("c1", clustersim.Script{}))
	require.NoError(t, sim.AddExternalAuth("c1", "ea1", clustersim.Script{Installing: clustersim.Duration(time.Second), Fail: true, ErrorMessage: "bad issuer"}))
	require.NoError(t, sim.AddExternalAuth("c1", "ea2", clustersim.Script{NoStatus: true}))
	clock.Advance(time.Second)

	rec := get(t, sim, externalAuthPath("c1", "ea1"))
	require.JSONEq(t, `{"kind":"ExternalAuth","id":"ea1","href":"/api/aro_hcp/v1alpha1/clusters/c1/external_auth_config/external_auths/ea1",
		"status":{"message":"bad issuer","state":{"last_updated_timestamp":"2025-06-01T12:00:01Z","value":"error"}}}`, rec.Body.String())
	rec = get(t, sim, externalAuthPath("c1", "ea2"))
	require.JSONEq(t, `{"kind":"ExternalAuth","id":"ea2","href":"/api/aro_hcp/v1alpha1/clusters/c1/external_auth_config/external_auths/ea2"}`, rec.Body.String())
}

func TestExternalAuthWithOCMSDKClient(t *testing.T) {
	sim, clock := newSim(t, clustersim.Options{})
	conn := ocmConn(t, sim)
	ctx := context.Background()
	require.NoError(t, sim.AddCluster("c1", clustersim.Script{}))
	require.NoError(t, sim.AddExternalAuth("c1", "ea1", clustersim.Script{Installing: clustersim.Duration(time.Minute)}))
	eas := conn.AroHCP().V1alpha1().Clusters().Cluster("c1").ExternalAuthConfig().ExternalAuths()

	resp, err := eas.ExternalAuth("ea1").Get().SendContext(ctx)
	require.NoError(t, err)
	require.Equal(t, clustersim.StateInstalling, resp.Body().Status().State().Value())

	clock.Advance(time.Minute)
	resp, err = eas.ExternalAuth("ea1").Get().SendContext(ctx)
	require.NoError(t, err)
	require.Equal(t, clustersim.StateReady, resp.Body().Status().State().Value())

	require.NoError(t, sim.DeleteExternalAuth("c1", "ea1", 0))
	_, err = eas.ExternalAuth("ea1").Get().SendContext(ctx)
	var oe *ocmerrors.Error
	require.ErrorAs(t, err, &oe)
	require.Equal(t, http.StatusNotFound, oe.Status())
	require.Equal(t, "External auth 'ea1' not found", oe.Reason())
}

func TestExternalAuthFollowsClusterAPI(t *testing.T) {
	tests := []struct {
		api  string
		want int
	}{
		{clustersim.APIBoth, http.StatusOK},
		{clustersim.APIAROHCP, http.StatusOK},
		{clustersim.APIClustersMgmt, http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run("api="+tt.api, func(t *testing.T) {
			sim, _ := newSim(t, clustersim.Options{})
			require.NoError(t, sim.AddCluster("c1", clustersim.Script{API: tt.api}))
			require.NoError(t, sim.AddExternalAuth("c1", "ea1", clustersim.Script{}))
			require.Equal(t, tt.want, get(t, sim, externalAuthPath("c1", "ea1")).Code)
		})
	}
}
