package clustersim_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	sdk "github.com/openshift-online/ocm-sdk-go"
	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/clustersim"
)

// t0 is the fake clock's start: fixed so that timestamps in bodies are exact.
var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func newSim(t *testing.T, opts clustersim.Options) (*clustersim.Sim, *clustersim.ManualClock) {
	t.Helper()
	clock := clustersim.NewManualClock(t0)
	if opts.Clock == nil {
		opts.Clock = clock
	}
	return clustersim.New(opts), clock
}

// get calls the handler in-process.
func get(t *testing.T, h http.Handler, path string) *httptest.ResponseRecorder {
	t.Helper()
	return do(t, h, http.MethodGet, path)
}

func do(t *testing.T, h http.Handler, method, path string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequestWithContext(context.Background(), method, path, nil))
	require.Equal(t, "application/json", rec.Header().Get("Content-Type"), "%s %s", method, path)
	return rec
}

// script returns a create script with the given stage durations.
func script(pending, validating, installing time.Duration) clustersim.Script {
	return clustersim.Script{
		Pending:    clustersim.Duration(pending),
		Validating: clustersim.Duration(validating),
		Installing: clustersim.Duration(installing),
	}
}

// ocmConn serves sim over HTTP and returns an ocm-sdk-go connection to it,
// so that tests read bodies with the typed clients opstatus uses.
func ocmConn(t *testing.T, sim *clustersim.Sim) *sdk.Connection {
	t.Helper()
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	conn, err := sdk.NewConnectionBuilder().URL(srv.URL).Tokens(unsignedToken()).RetryLimit(0).Build()
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}
