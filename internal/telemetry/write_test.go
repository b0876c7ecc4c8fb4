package telemetry

// In a file named to sort after telemetry_test.go: these tests install
// global providers, which TestSetupWithoutEndpointBuildsAndLogsNothing
// must run before.

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/opstatus/opstatus/dev/remotewritesink"
	"github.com/opstatus/opstatus/internal/entra"
	"github.com/opstatus/opstatus/internal/testenv"
)

// TestMain removes the remote-write sink the tests build.
func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// identityEndpoint stands in for the Functions host's managed identity
// endpoint (IDENTITY_ENDPOINT, IDENTITY_HEADER, App Service's protocol):
// it hands token for the resource and client id it expects, and counts the
// tokens it gave.
func identityEndpoint(t *testing.T, resource, clientID, token string) *atomic.Int32 {
	t.Helper()
	const header = "identity-header-secret"
	var issued atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if r.Header.Get("X-IDENTITY-HEADER") != header || q.Get("resource") != resource || q.Get("client_id") != clientID {
			http.Error(w, "unexpected token request "+r.URL.RawQuery, http.StatusBadRequest)
			return
		}
		issued.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{
			"access_token": token, "token_type": "Bearer", "resource": resource, "client_id": clientID,
			"expires_on": strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10),
		})
	}))
	t.Cleanup(srv.Close)
	t.Setenv("IDENTITY_ENDPOINT", srv.URL)
	t.Setenv("IDENTITY_HEADER", header)
	return &issued
}

// The default deployment's path: the handler's metrics reach the data
// collection rule with a token of the app's user-assigned identity for
// Azure Monitor, named as the alerts and dashboard query them.
func TestSetupRemoteWritesWithTheManagedIdentity(t *testing.T) {
	clearEnv(t)
	issued := identityEndpoint(t, "https://monitor.azure.com/", "00000000-0000-0000-0000-0000000000c1", "mi-token")
	cred, err := entra.Credential("00000000-0000-0000-0000-0000000000c1")
	require.NoError(t, err)
	sink := remotewritesink.Start(t, "mi-token")
	// Long intervals: only the shutdown's flush can deliver in time.
	t.Setenv("OTEL_METRIC_EXPORT_INTERVAL", "600000")
	var log bytes.Buffer
	shutdown, err := Setup(context.Background(), slog.New(slog.NewTextHandler(&log, nil)),
		WithRemoteWrite(sink.URL, cred), WithCluster("eastus"))
	require.NoError(t, err)
	t.Cleanup(func() { Use(nil, nil) })
	require.True(t, Metering())
	require.False(t, Tracing(), "remote write carries metrics only")
	require.Contains(t, log.String(), "remote_write=true")

	ctx := context.Background()
	PollOperation(ctx, "updated", "Create")
	PollOperation(ctx, "deferred", "Delete")
	PollOperation(ctx, "deferred", "Delete")
	PastDeadline(ctx, "Update")
	CosmosRefused(ctx, "Billing", 400)
	m := meters()
	m.csDuration.Record(ctx, 0.3, metric.WithAttributes(StatusCodeKey.Int(503)))
	m.csDuration.Record(ctx, 0.004, metric.WithAttributes(StatusCodeKey.Int(200)))
	now := time.Now()
	tally := NewScanTally()
	tally.Add("Provisioning", "Create", "cluster", now.Add(-25*time.Minute), true)
	Scanned(tally, now, time.Hour)

	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, shutdown(fctx))
	require.Empty(t, sink.Refused())
	require.Positive(t, sink.Requests())
	require.Positive(t, issued.Load())

	last := func(name string, labels map[string]string) float64 {
		t.Helper()
		v, ok := sink.Last(name, labels)
		require.True(t, ok, "no %s%v received", name, labels)
		return v
	}
	require.Equal(t, 1.0, last("opstatus_poll_operations_total", map[string]string{"outcome": "updated", "request": "Create", "job": "opstatus"}))
	require.Equal(t, 2.0, last("opstatus_poll_operations_total", map[string]string{"outcome": "deferred", "request": "Delete"}))
	require.Equal(t, 1.0, last("opstatus_operations_past_deadline_total", map[string]string{"request": "Update"}))
	require.Equal(t, 1.0, last("opstatus_cosmos_refused_total", map[string]string{"container": "Billing", "status_code": "400"}))
	require.Equal(t, 1.0, last("opstatus_clusterservice_duration_seconds_count", map[string]string{"status_code": "503"}))
	require.InDelta(t, 0.3, last("opstatus_clusterservice_duration_seconds_sum", map[string]string{"status_code": "503"}), 1e-9)
	require.Equal(t, 0.0, last("opstatus_clusterservice_duration_seconds_bucket", map[string]string{"status_code": "503", "le": "0.25"}))
	require.Equal(t, 1.0, last("opstatus_clusterservice_duration_seconds_bucket", map[string]string{"status_code": "503", "le": "0.5"}))
	require.Equal(t, 1.0, last("opstatus_clusterservice_duration_seconds_bucket", map[string]string{"status_code": "503", "le": "+Inf"}))
	require.Equal(t, 1.0, last("opstatus_clusterservice_duration_seconds_bucket", map[string]string{"status_code": "200", "le": "0.005"}))
	require.Equal(t, 1500.0, last("opstatus_scan_oldest_seconds", map[string]string{"request": "Create", "resource_type": "cluster"}))
	require.Equal(t, 1.0, last("opstatus_scan_pending", map[string]string{"status": "Provisioning", "request": "Create"}))
	require.InDelta(t, float64(now.UnixNano())/1e9, last("opstatus_scan_timestamp_seconds", nil), 1e-3)

	instance := ""
	for _, s := range sink.Samples() {
		require.Equal(t, "opstatus", s.Labels["job"], "%v", s.Labels)
		require.Equal(t, "eastus", s.Labels["cluster"], "the region, for the alerts' incidents: %v", s.Labels)
		require.Len(t, s.Labels["instance"], 36, "service.instance.id: %v", s.Labels)
		if instance == "" {
			instance = s.Labels["instance"]
		}
		require.Equal(t, instance, s.Labels["instance"], "one process, one instance")
	}
}

type staticCredential struct {
	token  string
	scopes atomic.Pointer[[]string]
}

func (c *staticCredential) GetToken(_ context.Context, o policy.TokenRequestOptions) (azcore.AccessToken, error) {
	c.scopes.Store(&o.Scopes)
	return azcore.AccessToken{Token: c.token, ExpiresOn: time.Now().Add(time.Hour)}, nil
}

// A credential the handler already holds is used as given, for Azure
// Monitor's scope; a receiver that refuses the token is an export error.
func TestRemoteWriteUsesTheGivenCredential(t *testing.T) {
	clearEnv(t)
	sink := remotewritesink.Start(t, "shared")
	t.Setenv("OTEL_METRIC_EXPORT_INTERVAL", "600000")
	cred := &staticCredential{token: "shared"}
	shutdown, err := Setup(context.Background(), slog.New(slog.DiscardHandler), WithRemoteWrite(sink.URL, cred))
	require.NoError(t, err)
	t.Cleanup(func() { Use(nil, nil) })
	PollOperation(context.Background(), "unchanged", "Create")
	require.NoError(t, shutdown(context.Background()))
	require.Equal(t, []string{"https://monitor.azure.com//.default"}, *cred.scopes.Load())
	v, ok := sink.Last("opstatus_poll_operations_total", map[string]string{"outcome": "unchanged"})
	require.True(t, ok)
	require.Equal(t, 1.0, v)

	wrong, err := newRemoteWrite(sink.URL, &staticCredential{token: "someone else's"}, nil, nil)
	require.NoError(t, err)
	_, reader := recorders(t)
	PollOperation(context.Background(), "unchanged", "Create")
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	err = wrong.Export(context.Background(), &rm)
	require.ErrorContains(t, err, "401")
	require.Contains(t, sink.Refused(), "bad or missing bearer token")
}

func TestRemoteWriteRefusesBadSettings(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"http://monitor.example/write", "not an https URL"},
		{"://", "missing protocol scheme"},
		{"https:///path", "not an https URL"},
	} {
		_, err := newRemoteWrite(tc.url, &staticCredential{}, nil, nil)
		require.ErrorContains(t, err, tc.want, tc.url)
		require.ErrorContains(t, err, RemoteWriteURLSetting)
	}
	_, err := newRemoteWrite("https://dce.example/write", nil, nil, nil)
	require.ErrorContains(t, err, "no credential")
}

// TestSetupRemoteWriteNeedsTheCredential: Setup builds no credential of
// its own; a URL without one is a setting it cannot honour.
func TestSetupRemoteWriteNeedsTheCredential(t *testing.T) {
	clearEnv(t)
	_, err := Setup(context.Background(), slog.New(slog.DiscardHandler), WithRemoteWrite("https://dce.example/write", nil))
	require.ErrorContains(t, err, RemoteWriteURLSetting)
	require.ErrorContains(t, err, "no credential")

	// OTEL_SDK_DISABLED turns the remote write off too: nothing is built.
	t.Setenv("OTEL_SDK_DISABLED", "true")
	shutdown, err := Setup(context.Background(), slog.New(slog.DiscardHandler), WithRemoteWrite("https://dce.example/write", nil))
	require.NoError(t, err)
	require.NoError(t, shutdown(context.Background()))
	require.False(t, Metering())
}

// countingCredential hands out token-1, token-2, … living an hour, or
// fails with a 503 of the identity endpoint while down is set.
type countingCredential struct {
	calls atomic.Int32
	down  atomic.Bool
}

func (c *countingCredential) GetToken(context.Context, policy.TokenRequestOptions) (azcore.AccessToken, error) {
	n := c.calls.Add(1)
	if c.down.Load() {
		return azcore.AccessToken{}, &azidentity.AuthenticationFailedError{RawResponse: &http.Response{
			StatusCode: http.StatusServiceUnavailable, Body: http.NoBody, Request: &http.Request{}}}
	}
	return azcore.AccessToken{Token: "token-" + strconv.Itoa(int(n)), ExpiresOn: time.Now().Add(time.Hour)}, nil
}

// TestRemoteWriteTokens: pushes share one token of entra's source, and a
// failing identity endpoint fails the push with its status alone.
func TestRemoteWriteTokens(t *testing.T) {
	sink := remotewritesink.Start(t, "token-1")
	cred := &countingCredential{}
	w, err := newRemoteWrite(sink.URL, cred, nil, nil)
	require.NoError(t, err)
	_, reader := recorders(t)
	PollOperation(context.Background(), "unchanged", "Create")
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	for range 3 {
		require.NoError(t, w.Export(context.Background(), &rm))
	}
	require.Equal(t, 3, sink.Requests())
	require.Equal(t, int32(1), cred.calls.Load(), "one token for every push")

	cred.down.Store(true)
	down, err := newRemoteWrite(sink.URL, cred, nil, nil)
	require.NoError(t, err)
	err = down.Export(context.Background(), &rm)
	require.ErrorContains(t, err, "remote write: token for https://monitor.azure.com//.default: managed identity token: HTTP 503 Service Unavailable")
	require.Equal(t, 3, sink.Requests(), "nothing sent without a token")
}

func TestPrometheusName(t *testing.T) {
	for _, tc := range []struct{ name, unit, want string }{
		{"opstatus.scan.oldest", "s", "opstatus_scan_oldest_seconds"},
		{"opstatus.scan.pending", "{operation}", "opstatus_scan_pending"},
		{"opstatus.lock.wait_seconds", "s", "opstatus_lock_wait_seconds"},
		{"opstatus.budget-ratio", "1", "opstatus_budget_ratio"},
		{"opstatus.budget.use", "1", "opstatus_budget_use_ratio"},
		{"9lives", "", "_lives"},
	} {
		require.Equal(t, tc.want, PrometheusName(tc.name, tc.unit), tc.name)
	}
}
