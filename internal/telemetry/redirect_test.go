package telemetry

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// A receiver's redirect is not followed: the bearer token goes to the
// configured receiver only, never to where a 3xx points (net/http would
// send it on to another port of the same host, or from https to http).
func TestRemoteWriteFollowsNoRedirect(t *testing.T) {
	var elsewhere atomic.Int32
	var leaked atomic.Value
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		leaked.Store(r.Header.Get("Authorization"))
	}))
	t.Cleanup(target.Close)
	for _, code := range []int{http.StatusTemporaryRedirect, http.StatusPermanentRedirect, http.StatusFound} {
		receiver := httptest.NewServer(http.RedirectHandler(target.URL+"/stolen", code))
		t.Cleanup(receiver.Close)
		w, err := newRemoteWrite(receiver.URL+"/write", &staticCredential{token: "MONITOR-TOKEN"}, nil, nil)
		require.NoError(t, err)
		now := time.Now()
		rm := &metricdata.ResourceMetrics{ScopeMetrics: []metricdata.ScopeMetrics{{
			Scope: instrumentation.Scope{Name: "opstatus"},
			Metrics: []metricdata.Metrics{{Name: "opstatus.test", Data: metricdata.Sum[int64]{
				Temporality: metricdata.CumulativeTemporality, IsMonotonic: true,
				DataPoints: []metricdata.DataPoint[int64]{{StartTime: now, Time: now, Value: 1}},
			}}},
		}}}
		err = w.Export(context.Background(), rm)
		require.ErrorContains(t, err, http.StatusText(code), "a redirect is an export error")
	}
	require.Zero(t, elsewhere.Load(), "the redirect was followed, with Authorization %v", leaked.Load())
}
