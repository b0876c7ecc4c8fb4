package database_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/faultproxy"
)

// TestCosmosConnectionsAreCapped sends a burst of 150 point reads, each held
// 300 ms by a proxy: the client opens at most 64 connections and queues the
// rest of the burst on them, instead of dialing one per waiting request
// (a burst of changed polls once started 133 TLS handshakes at once).
func TestCosmosConnectionsAreCapped(t *testing.T) {
	ctx := context.Background()
	name, _ := databaseWithOneOperation(t)
	cfg := cosmosConfig(t, name)

	proxy, err := faultproxy.New(cfg.Endpoint, faultproxy.Options{TLS: true})
	require.NoError(t, err)
	require.NoError(t, proxy.Start())
	defer proxy.Close()
	proxy.Delay(func(r faultproxy.Request) bool { return r.Kind == faultproxy.KindRead }, 300*time.Millisecond)

	cfg.Endpoint = proxy.URL()
	c := newClient(t, cfg)

	const burst = 150
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	errs := make(chan error, burst)
	var wg sync.WaitGroup
	for range burst {
		wg.Go(func() {
			_, err := c.GetOperation(ctx, "sub", "op")
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	conns := proxy.Stats().ClientConns
	t.Logf("%d concurrent point reads used %d connections", burst, conns)
	require.LessOrEqual(t, conns, int64(64))
	require.Greater(t, conns, int64(8), "the reads did run concurrently")
}
