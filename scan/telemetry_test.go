package scan_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/internal/database/databasetesting"
	"github.com/opstatus/opstatus/internal/telemetry"
	"github.com/opstatus/opstatus/scan"
)

// A scan publishes what it listed: pending operations by status and
// request, and the age of the oldest unfinished one by request and
// resource type.
func TestScanReportsPendingGauges(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	t.Cleanup(telemetry.Use(nil, sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))

	db := databasetesting.NewMemoryClient(time.Second)
	const (
		cluster  = "/api/clusters_mgmt/v1/clusters/c"
		nodePool = "/api/aro_hcp/v1alpha1/clusters/c/node_pools/np"
		auth     = "/api/aro_hcp/v1alpha1/clusters/c/external_auth_config/external_auths/ea"
		cred     = "/api/clusters_mgmt/v1/clusters/c/break_glass_credentials/b"
	)
	put := func(id string, req arm.Request, status arm.ProvisioningState, age time.Duration, uri, internalID string) {
		db.PutOperation(&database.Operation{ID: id, PartitionKey: "sub", Request: req, Status: status,
			StartTime: scanStart.Add(-age), NotificationURI: uri, InternalID: internalID})
	}
	put("1", arm.RequestCreate, arm.ProvisioningStateAccepted, time.Minute, "", cluster)
	put("2", arm.RequestCreate, arm.ProvisioningStateProvisioning, 90*time.Minute, "", cluster)
	put("3", arm.RequestDelete, arm.ProvisioningStateDeleting, time.Hour, "", cluster)
	put("4", arm.RequestCreate, arm.ProvisioningStateFailed, 5*time.Hour, "https://arm.example/n", cluster) // ended, to notify
	put("5", arm.RequestCreate, arm.ProvisioningStateSucceeded, 9*time.Hour, "", cluster)                   // not listed
	put("6", arm.RequestCreate, arm.ProvisioningStateProvisioning, 30*time.Minute, "", nodePool)
	put("7", arm.RequestUpdate, arm.ProvisioningStateUpdating, 10*time.Minute, "", "not a path") // skipped
	put("8", arm.RequestUpdate, arm.ProvisioningStateUpdating, 10*time.Minute, "", auth)
	put("9", arm.RequestRequestCredential, arm.ProvisioningStateAccepted, 2*time.Minute, "", cred)
	put("10", arm.RequestRevokeCredentials, arm.ProvisioningStateDeleting, 3*time.Minute, "", cluster)
	put("11", arm.RequestRevokeCredentials, arm.ProvisioningStateDeleting, 3*time.Minute, "", nodePool) // skipped
	put("12", "Patch", arm.ProvisioningStateAccepted, 3*time.Minute, "", cluster)                       // skipped

	messages(t, &scan.Function{DB: db})

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	got := map[string]int64{}
	oldest := map[string]float64{}
	skipped := map[string]int64{}
	var stamp []float64
	for _, m := range rm.ScopeMetrics[0].Metrics {
		switch m.Name {
		case telemetry.MetricScanTimestamp:
			for _, dp := range m.Data.(metricdata.Gauge[float64]).DataPoints {
				stamp = append(stamp, dp.Value)
			}
		case telemetry.MetricScanPending:
			for _, dp := range m.Data.(metricdata.Gauge[int64]).DataPoints {
				st, _ := dp.Attributes.Value(telemetry.StatusKey)
				req, _ := dp.Attributes.Value(telemetry.RequestKey)
				got[st.AsString()+"/"+req.AsString()] = dp.Value
			}
		case telemetry.MetricScanOldest:
			for _, dp := range m.Data.(metricdata.Gauge[float64]).DataPoints {
				req, _ := dp.Attributes.Value(telemetry.RequestKey)
				typ, _ := dp.Attributes.Value(telemetry.ResourceTypeKey)
				oldest[req.AsString()+"/"+typ.AsString()] = dp.Value
			}
		case telemetry.MetricScanSkipped:
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				reason, _ := dp.Attributes.Value(telemetry.ReasonKey)
				skipped[reason.AsString()] = dp.Value
			}
		}
	}
	require.Equal(t, map[string]int64{"Accepted/Create": 1, "Provisioning/Create": 2, "Deleting/Delete": 1, "Failed/Create": 1,
		"Updating/Update": 1, "Accepted/RequestCredential": 1, "Deleting/RevokeCredentials": 1}, got)
	require.Equal(t, map[string]float64{
		"Create/cluster":                         (90 * time.Minute).Seconds(), // an ended one waiting for its notification does not count
		"Create/nodePool":                        (30 * time.Minute).Seconds(),
		"Delete/cluster":                         time.Hour.Seconds(),
		"Update/externalAuth":                    (10 * time.Minute).Seconds(),
		"RequestCredential/breakGlassCredential": (2 * time.Minute).Seconds(),
		"RevokeCredentials/cluster":              (3 * time.Minute).Seconds(),
	}, oldest)
	require.Equal(t, map[string]int64{"internal_id": 1, "kind": 1, "request": 1}, skipped)
	require.Len(t, stamp, 1, "the scan reports when it ran")
}
