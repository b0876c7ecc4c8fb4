package clustersim_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

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
