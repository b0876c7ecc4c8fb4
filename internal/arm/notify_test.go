package arm_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/internal/arm"
)

// TestNotifierReusesConnections sends two rounds of 32 concurrent
// notifications: the second round reuses the first round's connections
// (net/http's default keeps 2 per host, which would mean ~30 new dials, TLS
// handshakes against ARM).
func TestNotifierReusesConnections(t *testing.T) {
	const concurrent = 32
	var (
		mu      sync.Mutex
		arrived int
		cond    = sync.NewCond(&mu)
		dials   atomic.Int32
	)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		// Hold each request until its whole round has arrived, so that a
		// round needs 32 connections at once.
		mu.Lock()
		arrived++
		round := (arrived + concurrent - 1) / concurrent
		cond.Broadcast()
		for arrived < round*concurrent {
			cond.Wait()
		}
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dials.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()

	n := arm.NewNotifier(true)
	for range 2 {
		errs := make(chan error, concurrent)
		var wg sync.WaitGroup
		for range concurrent {
			wg.Go(func() {
				errs <- n.Notify(context.Background(), srv.URL+"/notify", arm.OperationStatus{Status: arm.ProvisioningStateSucceeded})
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
	}
	t.Logf("connections opened for %d notifications: %d", 2*concurrent, dials.Load())
	require.LessOrEqual(t, dials.Load(), int32(concurrent+concurrent/4))
}
