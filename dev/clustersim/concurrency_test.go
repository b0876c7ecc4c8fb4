package clustersim_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/clustersim"
)

// blocking is a handler whose requests each report that they started and
// then wait for release.
type blocking struct {
	started chan string
	release chan struct{}
}

func (b *blocking) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.started <- r.URL.Path
	<-b.release
	w.WriteHeader(http.StatusOK)
}

func TestInFlightCountsConcurrentRequestsButNotAdmin(t *testing.T) {
	b := &blocking{started: make(chan string), release: make(chan struct{})}
	c := clustersim.CountInFlight(b)
	serve := func(wg *sync.WaitGroup, path string) {
		wg.Go(func() {
			c.ServeHTTP(httptest.NewRecorder(), httptest.NewRequestWithContext(context.Background(), http.MethodGet, path, nil))
		})
	}
	var wg sync.WaitGroup
	for range 5 {
		serve(&wg, "/api/aro_hcp/v1alpha1/clusters/c1/status")
	}
	serve(&wg, "/admin/stats")
	for range 6 {
		<-b.started
	}
	require.EqualValues(t, 5, c.Now(), "the admin call is not Cluster Service's")
	require.EqualValues(t, 5, c.Max())
	close(b.release)
	wg.Wait()
	require.EqualValues(t, 0, c.Now())
	require.EqualValues(t, 5, c.Max(), "the maximum outlives the requests")

	c.ResetMax()
	require.EqualValues(t, 0, c.Max())
	b.release = make(chan struct{})
	serve(&wg, "/api/aro_hcp/v1alpha1/clusters/c1/status")
	<-b.started
	c.ResetMax()
	require.EqualValues(t, 1, c.Max(), "a reset starts from the requests still served")
	close(b.release)
	wg.Wait()
}

// In front of a Sim, every answered call is counted once it ends.
func TestInFlightInFrontOfTheSimulator(t *testing.T) {
	sim, _ := newSim(t, clustersim.Options{})
	require.NoError(t, sim.AddCluster("c1", clustersim.Script{}))
	c := clustersim.CountInFlight(sim)
	require.Equal(t, http.StatusOK, get(t, c, "/api/aro_hcp/v1alpha1/clusters/c1/status").Code)
	get(t, c, "/admin/clusters")
	require.EqualValues(t, 1, c.Max())
	require.EqualValues(t, 0, c.Now())
}

// The mean is the requests in flight integrated over the window, and the
// maximum and its time are exact under any interleaving.
func TestInFlightMeanAndWindow(t *testing.T) {
	b := &blocking{started: make(chan string), release: make(chan struct{})}
	c := clustersim.CountInFlight(b)
	var seen []int64
	var mu sync.Mutex
	c.Watch(func(n int64, _ time.Time) { mu.Lock(); seen = append(seen, n); mu.Unlock() })
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			c.ServeHTTP(httptest.NewRecorder(), httptest.NewRequestWithContext(context.Background(), http.MethodGet, "/api/x", nil))
		})
	}
	for range 3 {
		<-b.started
	}
	c.ResetMax()
	s := c.Stats()
	require.EqualValues(t, 3, s.Now)
	require.EqualValues(t, 3, s.Max)
	require.InDelta(t, 3, c.Stats().Mean, 1e-9, "3 in flight throughout the window")
	close(b.release)
	wg.Wait()
	s = c.Stats()
	require.EqualValues(t, 0, s.Now)
	require.EqualValues(t, 3, s.Max)
	require.Less(t, s.Mean, 3.0, "none in flight since the release")
	require.False(t, s.MaxAt.Before(s.Since))
	mu.Lock()
	require.Len(t, seen, 6, "every change is reported")
	require.Equal(t, int64(3), slices.Max(seen))
	mu.Unlock()
}
