package clustersim_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	arohcpv1alpha1 "github.com/openshift-online/ocm-sdk-go/arohcp/v1alpha1"
	cmv1 "github.com/openshift-online/ocm-sdk-go/clustersmgmt/v1"
	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/clustersim"
)

const gone = "" // expected state of a resource that answers 404

// clusterState reads cluster id's state through the Go API and both status
// paths, requires them to agree, and returns it ("" for 404).
func clusterState(t *testing.T, sim *clustersim.Sim, id string) string {
	t.Helper()
	var states []string
	for _, path := range []string{
		"/api/clusters_mgmt/v1/clusters/" + id + "/status",
		"/api/aro_hcp/v1alpha1/clusters/" + id + "/status",
	} {
		rec := get(t, sim, path)
		if rec.Code == http.StatusNotFound {
			states = append(states, gone)
			continue
		}
		require.Equal(t, http.StatusOK, rec.Code, path)
		st, err := cmv1.UnmarshalClusterStatus(rec.Body.Bytes())
		require.NoError(t, err)
		states = append(states, string(st.State()))
	}
	r, err := sim.Cluster(id)
	if errors.Is(err, clustersim.ErrNotFound) {
		states = append(states, gone)
	} else {
		require.NoError(t, err)
		states = append(states, r.State)
	}
	require.Equal(t, states[0], states[1], "clusters_mgmt and aro_hcp disagree")
	require.Equal(t, states[0], states[2], "HTTP and Go API disagree")
	return states[0]
}

// nodePoolState reads a node pool's state through the Go API and its status
// path ("" for 404).
func nodePoolState(t *testing.T, sim *clustersim.Sim, id, np string) string {
	t.Helper()
	rec := get(t, sim, "/api/aro_hcp/v1alpha1/clusters/"+id+"/node_pools/"+np+"/status")
	httpState := gone
	if rec.Code != http.StatusNotFound {
		require.Equal(t, http.StatusOK, rec.Code)
		st, err := arohcpv1alpha1.UnmarshalNodePoolStatus(rec.Body.Bytes())
		require.NoError(t, err)
		httpState = st.State().NodePoolStateValue()
		require.NotEmpty(t, httpState)
	}
	goState := gone
	r, err := sim.NodePool(id, np)
	if !errors.Is(err, clustersim.ErrNotFound) {
		require.NoError(t, err)
		goState = r.State
	}
	require.Equal(t, httpState, goState, "HTTP and Go API disagree")
	return httpState
}

// step advances the clock, optionally acts, and checks the state.
type step struct {
	advance time.Duration
	act     func(*clustersim.Sim) error
	wantErr error // of act
	want    string
}

func TestClusterLifecycle(t *testing.T) {
	const id = "c1"
	zero := clustersim.Script{}
	tests := []struct {
		name   string
		script clustersim.Script
		steps  []step
	}{
		{
			name:   "create goes pending, validating, installing, ready",
			script: script(time.Second, time.Second, 3*time.Second),
			steps: []step{
				{want: clustersim.StatePending},
				{advance: time.Second - 1, want: clustersim.StatePending},
				{advance: 1, want: clustersim.StateValidating},
				{advance: time.Second, want: clustersim.StateInstalling},
				{advance: 3*time.Second - 1, want: clustersim.StateInstalling},
				{advance: 1, want: clustersim.StateReady},
				{advance: time.Hour, want: clustersim.StateReady},
			},
		},
		{
			name:   "zero durations skip their stages",
			script: script(0, 0, 2*time.Second),
			steps: []step{
				{want: clustersim.StateInstalling},
				{advance: 2 * time.Second, want: clustersim.StateReady},
			},
		},
		{
			name:   "failing create ends in error",
			script: clustersim.Script{Installing: clustersim.Duration(time.Second), Fail: true, ErrorCode: "OCM3001", ErrorMessage: "quota"},
			steps: []step{
				{want: clustersim.StateInstalling},
				{advance: time.Second, want: clustersim.StateError},
				{advance: time.Hour, want: clustersim.StateError},
			},
		},
		{
			name:   "delete uninstalls, then 404",
			script: zero,
			steps: []step{
				{want: clustersim.StateReady},
				{act: func(s *clustersim.Sim) error { return s.DeleteCluster(id, 2*time.Second) }, want: clustersim.StateUninstalling},
				{advance: 2*time.Second - 1, want: clustersim.StateUninstalling},
				{advance: 1, want: gone},
				{advance: time.Hour, want: gone},
			},
		},
		{
			name:   "delete during install; a second delete keeps the first start",
			script: script(0, 0, time.Hour),
			steps: []step{
				{want: clustersim.StateInstalling},
				{act: func(s *clustersim.Sim) error { return s.DeleteCluster(id, 2*time.Second) }, want: clustersim.StateUninstalling},
				{advance: time.Second, act: func(s *clustersim.Sim) error { return s.DeleteCluster(id, time.Hour) }, want: clustersim.StateUninstalling},
				{advance: time.Second, want: gone},
			},
		},
		{
			name:   "delete with zero uninstalling is gone at once; re-create starts over",
			script: zero,
			steps: []step{
				{act: func(s *clustersim.Sim) error { return s.DeleteCluster(id, 0) }, want: gone},
				{act: func(s *clustersim.Sim) error { return s.DeleteCluster(id, 0) }, wantErr: clustersim.ErrNotFound, want: gone},
				{act: func(s *clustersim.Sim) error { return s.AddCluster(id, script(time.Second, 0, 0)) }, want: clustersim.StatePending},
				{advance: time.Second, want: clustersim.StateReady},
			},
		},
		{
			name:   "update goes updating, then ready",
			script: zero,
			steps: []step{
				{act: func(s *clustersim.Sim) error { return s.UpdateCluster(id, 2*time.Second) }, want: clustersim.StateUpdating},
				{advance: 2*time.Second - 1, want: clustersim.StateUpdating},
				{advance: 1, want: clustersim.StateReady},
				{act: func(s *clustersim.Sim) error { return s.UpdateCluster(id, 0) }, want: clustersim.StateReady},
			},
		},
		{
			name:   "update before ready conflicts",
			script: script(0, 0, time.Second),
			steps: []step{
				{act: func(s *clustersim.Sim) error { return s.UpdateCluster(id, time.Second) }, wantErr: clustersim.ErrConflict, want: clustersim.StateInstalling},
				{advance: time.Second, want: clustersim.StateReady},
			},
		},
		{
			name:   "set state holds until the next change",
			script: script(0, 0, time.Second),
			steps: []step{
				{act: func(s *clustersim.Sim) error { return s.SetState("/api/clusters_mgmt/v1/clusters/"+id, "hibernating") }, want: "hibernating"},
				{advance: time.Hour, want: "hibernating"},
				{act: func(s *clustersim.Sim) error {
					return s.SetState("/api/aro_hcp/v1alpha1/clusters/"+id+"/status", "ready")
				}, want: clustersim.StateReady},
				{act: func(s *clustersim.Sim) error { return s.UpdateCluster(id, time.Second) }, want: clustersim.StateUpdating},
			},
		},
		{
			name:   "set state rejects bad input",
			script: zero,
			steps: []step{
				{act: func(s *clustersim.Sim) error { return s.SetState("/api/clusters_mgmt/v1/clusters/"+id, "") }, wantErr: clustersim.ErrInvalid, want: clustersim.StateReady},
				{act: func(s *clustersim.Sim) error { return s.SetState("/api/clusters_mgmt/v1/clusters/../x", "error") }, wantErr: clustersim.ErrInvalid, want: clustersim.StateReady},
				{act: func(s *clustersim.Sim) error { return s.SetState("/api/clusters_mgmt/v1/clusters/other", "error") }, wantErr: clustersim.ErrNotFound, want: clustersim.StateReady},
			},
		},
		{
			name:   "ready-all flips installing and failing clusters to ready",
			script: clustersim.Script{Installing: clustersim.Duration(time.Hour), Fail: true},
			steps: []step{
				{want: clustersim.StateInstalling},
				{act: func(s *clustersim.Sim) error { return wantChanged(s.ReadyAll(), 1) }, want: clustersim.StateReady},
				{act: func(s *clustersim.Sim) error { return wantChanged(s.ReadyAll(), 0) }, want: clustersim.StateReady},
			},
		},
		{
			name:   "ready-all finishes a delete",
			script: zero,
			steps: []step{
				{act: func(s *clustersim.Sim) error { return s.DeleteCluster(id, time.Hour) }, want: clustersim.StateUninstalling},
				{act: func(s *clustersim.Sim) error { return wantChanged(s.ReadyAll(), 1) }, want: gone},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sim, clock := newSim(t, clustersim.Options{})
			require.NoError(t, sim.AddCluster(id, tt.script))
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
				require.Equal(t, st.want, clusterState(t, sim, id), "step %d", i)
			}
		})
	}
}

func wantChanged(got, want int) error {
	if got != want {
		return errors.New("ReadyAll changed an unexpected number of resources")
	}
	return nil
}

func TestNodePoolLifecycle(t *testing.T) {
	const id, np = "c1", "np1"
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
			name:   "failing create ends in error",
			script: clustersim.Script{Installing: clustersim.Duration(time.Second), Fail: true, ErrorMessage: "no capacity"},
			steps: []step{
				{want: clustersim.StateInstalling},
				{advance: time.Second, want: clustersim.StateError},
			},
		},
		{
			name:   "delete uninstalls, then 404; the cluster stays",
			script: zero,
			steps: []step{
				{act: func(s *clustersim.Sim) error { return s.DeleteNodePool(id, np, time.Second) }, want: clustersim.StateUninstalling},
				{advance: time.Second, want: gone},
				{act: func(s *clustersim.Sim) error { return s.UpdateNodePool(id, np, time.Second) }, wantErr: clustersim.ErrNotFound, want: gone},
				{act: func(s *clustersim.Sim) error { return requireState(s, id, clustersim.StateReady) }, want: gone},
			},
		},
		{
			name:   "update goes updating, then ready",
			script: zero,
			steps: []step{
				{act: func(s *clustersim.Sim) error { return s.UpdateNodePool(id, np, time.Second) }, want: clustersim.StateUpdating},
				{advance: time.Second, want: clustersim.StateReady},
			},
		},
		{
			name:   "update before ready conflicts",
			script: script(time.Second, 0, 0),
			steps: []step{
				{act: func(s *clustersim.Sim) error { return s.UpdateNodePool(id, np, time.Second) }, wantErr: clustersim.ErrConflict, want: clustersim.StatePending},
			},
		},
		{
			name:   "deleting the cluster takes its node pools when it is gone",
			script: zero,
			steps: []step{
				{act: func(s *clustersim.Sim) error { return s.DeleteCluster(id, time.Second) }, want: clustersim.StateReady},
				{act: func(s *clustersim.Sim) error { return s.AddNodePool(id, "np2", zero) }, wantErr: clustersim.ErrConflict, want: clustersim.StateReady},
				{advance: time.Second, want: gone},
				{act: func(s *clustersim.Sim) error { return s.AddNodePool(id, np, zero) }, wantErr: clustersim.ErrNotFound, want: gone},
			},
		},
		{
			name:   "set state and ready-all",
			script: script(0, 0, time.Hour),
			steps: []step{
				{act: func(s *clustersim.Sim) error {
					return s.SetState("/api/aro_hcp/v1alpha1/clusters/"+id+"/node_pools/"+np, "recoverable_error")
				}, want: "recoverable_error"},
				{act: func(s *clustersim.Sim) error { return wantChanged(s.ReadyAll(), 1) }, want: clustersim.StateReady},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sim, clock := newSim(t, clustersim.Options{})
			require.NoError(t, sim.AddCluster(id, zero))
			require.NoError(t, sim.AddNodePool(id, np, tt.script))
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
				require.Equal(t, st.want, nodePoolState(t, sim, id, np), "step %d", i)
			}
		})
	}
}

func requireState(s *clustersim.Sim, id, want string) error {
	r, err := s.Cluster(id)
	if err != nil {
		return err
	}
	if r.State != want {
		return errors.New("cluster is " + r.State + ", want " + want)
	}
	return nil
}

func TestAddRejectsBadInput(t *testing.T) {
	tests := []struct {
		name string
		add  func(*clustersim.Sim) error
		want error
	}{
		{"empty id", func(s *clustersim.Sim) error { return s.AddCluster("", clustersim.Script{}) }, clustersim.ErrInvalid},
		{"slash in id", func(s *clustersim.Sim) error { return s.AddCluster("a/b", clustersim.Script{}) }, clustersim.ErrInvalid},
		{"dot-dot id", func(s *clustersim.Sim) error { return s.AddCluster("..", clustersim.Script{}) }, clustersim.ErrInvalid},
		{"negative duration", func(s *clustersim.Sim) error {
			return s.AddCluster("c", clustersim.Script{Installing: -1})
		}, clustersim.ErrInvalid},
		{"unknown api", func(s *clustersim.Sim) error { return s.AddCluster("c", clustersim.Script{API: "v2"}) }, clustersim.ErrInvalid},
		{"node pool of missing cluster", func(s *clustersim.Sim) error { return s.AddNodePool("nope", "np", clustersim.Script{}) }, clustersim.ErrNotFound},
		{"bad node pool id", func(s *clustersim.Sim) error { return s.AddNodePool("c0", "n p", clustersim.Script{}) }, clustersim.ErrInvalid},
		{"negative uninstalling", func(s *clustersim.Sim) error { return s.DeleteCluster("c0", -time.Second) }, clustersim.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sim, _ := newSim(t, clustersim.Options{})
			require.NoError(t, sim.AddCluster("c0", clustersim.Script{}))
			require.ErrorIs(t, tt.add(sim), tt.want)
		})
	}
}

func TestAPIChoosesPaths(t *testing.T) {
	tests := []struct {
		api          string
		wantCM       int
		wantAROHCP   int
		wantNodePool int
	}{
		{"", http.StatusOK, http.StatusOK, http.StatusOK},
		{clustersim.APIBoth, http.StatusOK, http.StatusOK, http.StatusOK},
		{clustersim.APIClustersMgmt, http.StatusOK, http.StatusNotFound, http.StatusNotFound},
		{clustersim.APIAROHCP, http.StatusNotFound, http.StatusOK, http.StatusOK},
	}
	for _, tt := range tests {
		t.Run("api="+tt.api, func(t *testing.T) {
			sim, _ := newSim(t, clustersim.Options{})
			require.NoError(t, sim.AddCluster("c1", clustersim.Script{API: tt.api}))
			require.NoError(t, sim.AddNodePool("c1", "np1", clustersim.Script{}))
			require.Equal(t, tt.wantCM, get(t, sim, "/api/clusters_mgmt/v1/clusters/c1/status").Code)
			require.Equal(t, tt.wantAROHCP, get(t, sim, "/api/aro_hcp/v1alpha1/clusters/c1/status").Code)
			require.Equal(t, tt.wantNodePool, get(t, sim, "/api/aro_hcp/v1alpha1/clusters/c1/node_pools/np1/status").Code)
		})
	}
}
