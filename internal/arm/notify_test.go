package arm_test

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/testenv"
)

// TestNotifierReusesConnections sends two rounds of 32 concurrent
// notifications: the second round reuses the first round's connections
// (net/http's default keeps 2 per host, which would mean ~30 new dials, TLS
// handshakes against ARM).
func TestNotifierReusesConnections(t *testing.T) {
	const concurrent = 32
	srv := testenv.NewRoundServer(concurrent, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
	}))
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
	t.Logf("connections opened for %d notifications: %d", 2*concurrent, srv.Dials())
	require.LessOrEqual(t, srv.Dials(), int32(concurrent+concurrent/4))
}
