package clustersim_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	arohcpv1alpha1 "github.com/openshift-online/ocm-sdk-go/arohcp/v1alpha1"
	cmv1 "github.com/openshift-online/ocm-sdk-go/clustersmgmt/v1"
	ocmerrors "github.com/openshift-online/ocm-sdk-go/errors"
	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/clustersim"
)

const statusPath = "/api/clusters_mgmt/v1/clusters/c1/status"

func TestFaults(t *testing.T) {
	tests := []struct {
		name       string
		faults     clustersim.Faults
		wantStatus int
		wantFaults map[string]int64
	}{
		{name: "none", wantStatus: http.StatusOK, wantFaults: map[string]int64{}},
		{name: "error rate 1 gives 503", faults: clustersim.Faults{ErrorRate: 1},
			wantStatus: http.StatusServiceUnavailable, wantFaults: map[string]int64{clustersim.FaultError: 3}},
		{name: "outage gives 503", faults: clustersim.Faults{Outage: true},
			wantStatus: http.StatusServiceUnavailable, wantFaults: map[string]int64{clustersim.FaultOutage: 3}},
		{name: "outage wins over everything", faults: clustersim.Faults{Outage: true, ErrorRate: 1, TimeoutRate: 1, Timeout: clustersim.Duration(time.Hour)},
			wantStatus: http.StatusServiceUnavailable, wantFaults: map[string]int64{clustersim.FaultOutage: 3}},
		{name: "elapsed timeout gives 504", faults: clustersim.Faults{TimeoutRate: 1, Timeout: clustersim.Duration(time.Microsecond)},
			wantStatus: http.StatusGatewayTimeout, wantFaults: map[string]int64{clustersim.FaultTimeout: 3}},
		{name: "latency and spikes still answer", faults: clustersim.Faults{Latency: clustersim.Duration(time.Microsecond), SpikeRate: 1, Spike: clustersim.Duration(time.Microsecond)},
			wantStatus: http.StatusOK, wantFaults: map[string]int64{clustersim.FaultLatency: 3, clustersim.FaultSpike: 3}},
		{name: "error rate 0 never fails", faults: clustersim.Faults{ErrorRate: 0, SpikeRate: 0, Spike: clustersim.Duration(time.Hour)},
			wantStatus: http.StatusOK, wantFaults: map[string]int64{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sim, _ := newSim(t, clustersim.Options{})
			require.NoError(t, sim.AddCluster("c1", clustersim.Script{}))
			require.NoError(t, sim.SetFaults(tt.faults))
			for range 3 {
				rec := get(t, sim, statusPath)
				require.Equal(t, tt.wantStatus, rec.Code)
				if tt.wantStatus != http.StatusOK {
					e, err := ocmerrors.UnmarshalErrorStatus(rec.Body.Bytes(), rec.Code)
					require.NoError(t, err)
					require.NotEmpty(t, e.Reason())
				}
			}
			st := sim.Stats()
			require.Equal(t, tt.wantFaults, st.Faults)
			require.Equal(t, map[int]int64{tt.wantStatus: 3}, st.Statuses)
		})
	}
}

func TestFaultsDoNotTouchAdmin(t *testing.T) {
	sim, _ := newSim(t, clustersim.Options{Faults: clustersim.Faults{Outage: true}})
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	admin := clustersim.NewAdminClient(srv.URL, srv.Client())
	_, err := admin.PutCluster(context.Background(), "c1", clustersim.Script{})
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, get(t, sim, statusPath).Code)
}

// waitFor polls cond; the long deadline only guards against a hang.
func waitFor(t *testing.T, cond func() bool, msg string) {
	t.Helper()
	require.Eventually(t, cond, 30*time.Second, time.Millisecond, msg)
}

func TestTimeoutHonoursClientCancel(t *testing.T) {
	sim, _ := newSim(t, clustersim.Options{Faults: clustersim.Faults{TimeoutRate: 1, Timeout: clustersim.Duration(time.Hour)}})
	require.NoError(t, sim.AddCluster("c1", clustersim.Script{}))
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)

	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+statusPath, nil)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		resp, err := srv.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	waitFor(t, func() bool { return sim.Stats().Faults[clustersim.FaultTimeout] == 1 }, "request never reached the timeout fault")
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	// The handler notices the client left and gives up the hour-long hang.
	waitFor(t, func() bool { return sim.Stats().Statuses[499] == 1 }, "handler did not notice the client going away")
}

func TestCloseReleasesHeldCalls(t *testing.T) {
	sim, _ := newSim(t, clustersim.Options{Faults: clustersim.Faults{TimeoutRate: 1, Timeout: clustersim.Duration(time.Hour)}})
	require.NoError(t, sim.AddCluster("c1", clustersim.Script{}))
	rec := httptest.NewRecorder()
	done := make(chan struct{})
	go func() {
		sim.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, statusPath, nil))
		close(done)
	}()
	waitFor(t, func() bool { return sim.Stats().Faults[clustersim.FaultTimeout] == 1 }, "request never reached the timeout fault")
	sim.Close()
	<-done
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
}

func TestFaultsAreReproducible(t *testing.T) {
	run := func(seed int64) []int {
		sim, _ := newSim(t, clustersim.Options{Seed: seed, Faults: clustersim.Faults{ErrorRate: 0.5}})
		require.NoError(t, sim.AddCluster("c1", clustersim.Script{}))
		codes := make([]int, 200)
		for i := range codes {
			codes[i] = get(t, sim, statusPath).Code
		}
		return codes
	}
	a, b := run(42), run(42)
	require.Equal(t, a, b, "same seed, same faults")
	require.Contains(t, a, http.StatusOK)
	require.Contains(t, a, http.StatusServiceUnavailable)
	require.NotEqual(t, a, run(43), "another seed, other faults")
}

func TestFaultsValidate(t *testing.T) {
	tests := []struct {
		name    string
		faults  clustersim.Faults
		wantErr bool
	}{
		{"zero", clustersim.Faults{}, false},
		{"full rates", clustersim.Faults{ErrorRate: 1, TimeoutRate: 1, SpikeRate: 1}, false},
		{"error rate above 1", clustersim.Faults{ErrorRate: 1.5}, true},
		{"negative timeout rate", clustersim.Faults{TimeoutRate: -0.1}, true},
		{"NaN spike rate", clustersim.Faults{SpikeRate: nan()}, true},
		{"negative latency", clustersim.Faults{Latency: -1}, true},
		{"negative spike", clustersim.Faults{Spike: -1}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sim, _ := newSim(t, clustersim.Options{Faults: clustersim.Faults{Latency: 7}})
			err := sim.SetFaults(tt.faults)
			if !tt.wantErr {
				require.NoError(t, err)
				require.Equal(t, tt.faults, sim.Faults())
				return
			}
			require.ErrorIs(t, err, clustersim.ErrInvalid)
			require.Equal(t, clustersim.Faults{Latency: 7}, sim.Faults(), "a refused config leaves the old one")
		})
	}
}

func nan() float64 {
	zero := 0.0
	return zero / zero
}

// The faults that change bodies: off by default, each changes what it
// says and is counted once per answer it changes.
func TestBodyFaults(t *testing.T) {
	const (
		eaPath   = "/api/aro_hcp/v1alpha1/clusters/c1/external_auth_config/external_auths/ea1"
		bgcPath  = "/api/clusters_mgmt/v1/clusters/c1/break_glass_credentials/b1"
		listPath = "/api/clusters_mgmt/v1/clusters/c1/break_glass_credentials"
	)
	// observed is what the typed clients read from the three bodies.
	type observed struct {
		eaState     string // "" = no status
		bgcStatus   string
		bgcExpires  bool
		listSizes   []int // of pages 1 to 3 with size=5
		listTotals  []int
		listStatus  []string
		listExpire  bool   // every item has expiration_timestamp
		listNoItems []bool // of pages 1 to 3: the page has no items field
	}
	normal := observed{eaState: clustersim.StateReady, bgcStatus: clustersim.CredentialIssued, bgcExpires: true,
		listSizes: []int{3, 0, 0}, listTotals: []int{3, 3, 3},
		listStatus: []string{clustersim.CredentialIssued, clustersim.CredentialIssued, clustersim.CredentialRevoked}, listExpire: true,
		listNoItems: []bool{false, false, false}}
	tests := []struct {
		name       string
		faults     clustersim.Faults
		want       func(observed) observed
		wantFaults map[string]int64
	}{
		{name: "none", want: func(o observed) observed { return o }, wantFaults: map[string]int64{}},
		{name: "endless credential list", faults: clustersim.Faults{EndlessCredentialList: true},
			want: func(o observed) observed {
				o.listSizes, o.listTotals = []int{5, 5, 5}, []int{10, 15, 20}
				o.listStatus = append(o.listStatus, slices.Repeat([]string{clustersim.CredentialRevoked}, 12)...)
				return o
			},
			wantFaults: map[string]int64{clustersim.FaultEndlessCredentialList: 3}},
		{name: "external auth without status", faults: clustersim.Faults{ExternalAuthNoStatus: true},
			want:       func(o observed) observed { o.eaState = ""; return o },
			wantFaults: map[string]int64{clustersim.FaultExternalAuthNoStatus: 1}},
		{name: "unknown state", faults: clustersim.Faults{UnknownState: "mystery"},
			want: func(o observed) observed {
				o.eaState, o.bgcStatus, o.listStatus = "mystery", "mystery", []string{"mystery", "mystery", "mystery"}
				return o
			},
			// The external auth, the credential and each of the three pages.
			wantFaults: map[string]int64{clustersim.FaultUnknownState: 5}},
		{name: "empty credential page without items", faults: clustersim.Faults{EmptyCredentialPageNoItems: true},
			want:       func(o observed) observed { o.listNoItems = []bool{false, true, true}; return o },
			wantFaults: map[string]int64{clustersim.FaultEmptyCredentialPageNoItems: 2}},
		{name: "credential without expiration", faults: clustersim.Faults{CredentialNoExpiration: true},
			want:       func(o observed) observed { o.bgcExpires, o.listExpire = false, false; return o },
			wantFaults: map[string]int64{clustersim.FaultCredentialNoExpiration: 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sim, _ := newSim(t, clustersim.Options{})
			require.NoError(t, sim.AddCluster("c1", clustersim.Script{}))
			require.NoError(t, sim.AddExternalAuth("c1", "ea1", clustersim.Script{}))
			for _, bgc := range []string{"b1", "b2", "b3"} {
				require.NoError(t, sim.AddCredential("c1", bgc, clustersim.Script{}))
			}
			require.NoError(t, sim.RevokeCredential("c1", "b3", 0))
			require.NoError(t, sim.SetFaults(tt.faults))

			var got observed
			rec := get(t, sim, eaPath)
			require.Equal(t, http.StatusOK, rec.Code)
			ea, err := arohcpv1alpha1.UnmarshalExternalAuth(rec.Body.Bytes())
			require.NoError(t, err)
			got.eaState = ea.Status().State().Value()

			rec = get(t, sim, bgcPath)
			require.Equal(t, http.StatusOK, rec.Code)
			cr, err := cmv1.UnmarshalBreakGlassCredential(rec.Body.Bytes())
			require.NoError(t, err)
			got.bgcStatus = string(cr.Status())
			_, got.bgcExpires = cr.GetExpirationTimestamp()

			list := ocmConn(t, sim).ClustersMgmt().V1().Clusters().Cluster("c1").BreakGlassCredentials()
			got.listExpire = true
			ids := map[string]bool{}
			for page := 1; page <= 3; page++ {
				resp, err := list.List().Page(page).Size(5).SendContext(context.Background())
				require.NoError(t, err)
				got.listSizes = append(got.listSizes, resp.Size())
				got.listTotals = append(got.listTotals, resp.Total())
				_, hasItems := resp.GetItems()
				got.listNoItems = append(got.listNoItems, !hasItems)
				for _, it := range resp.Items().Slice() {
					require.False(t, ids[it.ID()], "item %s twice", it.ID())
					ids[it.ID()] = true
					got.listStatus = append(got.listStatus, string(it.Status()))
					_, ok := it.GetExpirationTimestamp()
					got.listExpire = got.listExpire && ok
				}
			}
			require.Equal(t, tt.want(normal), got)
			require.Equal(t, tt.wantFaults, sim.Stats().Faults)
		})
	}
}

// A list that never ends must not let a large size make the simulator
// build a huge page.
func TestEndlessCredentialListBoundsPages(t *testing.T) {
	sim, _ := newSim(t, clustersim.Options{Faults: clustersim.Faults{EndlessCredentialList: true}})
	require.NoError(t, sim.AddCluster("c1", clustersim.Script{}))
	resp, err := ocmConn(t, sim).ClustersMgmt().V1().Clusters().Cluster("c1").BreakGlassCredentials().List().
		Page(1 << 40).Size(1 << 40).SendContext(context.Background())
	require.NoError(t, err)
	require.Equal(t, 10000, resp.Size())
	require.Len(t, resp.Items().Slice(), 10000)
	require.Greater(t, resp.Total(), 10000)
}

// With WorkAfterClientLeaves a call whose client went away stays in flight
// at the server for its whole latency, as counted by CountInFlight.
func TestWorkAfterClientLeaves(t *testing.T) {
	sim, _ := newSim(t, clustersim.Options{Faults: clustersim.Faults{Latency: clustersim.Duration(300 * time.Millisecond), WorkAfterClientLeaves: true}})
	require.NoError(t, sim.AddCluster("c1", clustersim.Script{}))
	c := clustersim.CountInFlight(sim)
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+statusPath, nil)
	require.NoError(t, err)
	begun := time.Now()
	_, err = srv.Client().Do(req)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, int64(1), c.Stats().Max)
	waitFor(t, func() bool { return c.Stats().Now == 0 }, "the call never ended at the server")
	require.GreaterOrEqual(t, time.Since(begun), 300*time.Millisecond, "the server stopped when the client left")
}
