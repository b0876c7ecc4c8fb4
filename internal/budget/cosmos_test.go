package budget_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/opstatus/opstatus/dev/faultproxy"
	"github.com/opstatus/opstatus/internal/budget"
	"github.com/opstatus/opstatus/internal/telemetry"
	"github.com/opstatus/opstatus/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// leasesContainer is the Leases container of a new database of the
// Cosmos test server.
func leasesContainer(t *testing.T) *azcosmos.ContainerClient {
	cosmos := testenv.SharedCosmos(t)
	db := cosmos.NewDatabase(t, testenv.ContainerSpec{Name: "Leases", PartitionKeyPath: "/id"})
	return db.Containers["Leases"]
}

// leases is the ledger store of a new Leases container.
func leases(t *testing.T) *budget.Cosmos { return budget.NewCosmos(leasesContainer(t)) }

// The Cosmos store through the Cosmos test server: 404 before the ledger
// exists, 409 on a second create, 412 on a stale etag, and each request
// counted with its status and request charge.
func TestCosmosStore(t *testing.T) {
	testenv.NeedsServers(t)
	reader := sdkmetric.NewManualReader()
	t.Cleanup(telemetry.Use(nil, sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	ctx := context.Background()
	s := leases(t)

	_, _, err := s.Read(ctx)
	require.ErrorIs(t, err, budget.ErrNotFound)
	l := budget.Ledger{ID: budget.ID, Epoch: "e1", Budget: 8, Holders: map[string]budget.Entry{
		"a": {Group: budget.GroupPoll, Permits: 8, Demand: 100, Seq: 1}}}
	etag, err := s.Create(ctx, l)
	require.NoError(t, err)
	_, err = s.Create(ctx, l)
	require.ErrorIs(t, err, budget.ErrConflict)

	got, readTag, err := s.Read(ctx)
	require.NoError(t, err)
	require.Equal(t, etag, readTag)
	require.Equal(t, l, got)

	l.Holders["a"] = budget.Entry{Group: budget.GroupPoll, Permits: 4, Demand: 4, Seq: 2}
	newTag, err := s.Replace(ctx, l, etag)
	require.NoError(t, err)
	require.NotEqual(t, etag, newTag)
	_, err = s.Replace(ctx, l, etag)
	require.ErrorIs(t, err, budget.ErrPreconditionFailed)
	got, _, err = s.Read(ctx)
	require.NoError(t, err)
	require.Equal(t, 4, got.Holders["a"].Permits)

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	requests := map[string]int64{}
	charged := map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch m.Name {
			case telemetry.MetricLedgerRequests:
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					requests[enc(dp.Attributes)] += dp.Value
				}
			case telemetry.MetricLedgerCharge:
				for _, dp := range m.Data.(metricdata.Sum[float64]).DataPoints {
					charged[enc(dp.Attributes)] += dp.Value
				}
			}
		}
	}
	require.Equal(t, map[string]int64{
		"kind=read,status_code=404": 1, "kind=read,status_code=200": 2,
		"kind=create,status_code=201": 1, "kind=create,status_code=409": 1,
		"kind=replace,status_code=200": 1, "kind=replace,status_code=412": 1,
	}, requests)
	require.Positive(t, charged["kind=read"])
	require.Positive(t, charged["kind=replace"])
	require.Greater(t, charged["kind=replace"], charged["kind=read"], "a replace costs more than a point read")
}

func enc(s attribute.Set) string { return s.Encoded(attribute.DefaultEncoder()) }

// Members through the Cosmos test server: the first creates the ledger
// under the fence and waits; on a ledger that exists, a lone member takes
// the whole budget in one write and a second its share.
func TestGatesThroughCosmos(t *testing.T) {
	testenv.NeedsServers(t)
	s := leases(t)
	a := busy(t, s, 10)
	require.Zero(t, a.Held(), "took permits from a ledger it just created")
	for range 31 {
		advance(1e9, a)
		a.tick(t)
	}
	require.Equal(t, 10, a.Held())
	b := busy(t, s, 10)
	a.tick(t)
	b.tick(t)
	require.Equal(t, 5, a.Held())
	require.Equal(t, 5, b.Held())
}

// The Cosmos store's calls retry once and briefly: a throttled Leases
// container (429 with a Retry-After the client's default options would
// honour three times) fails a read within a second, for the Gate to read
// again at its next tick. Through the Cosmos test server, behind a proxy
// that throttles the ledger's requests.
func TestLedgerRetriesAreShortAndFew(t *testing.T) {
	testenv.NeedsServers(t)
	ctx := context.Background()
	cosmos := testenv.SharedCosmos(t)
	db := cosmos.NewDatabase(t, testenv.ContainerSpec{Name: "Leases", PartitionKeyPath: "/id"})
	proxy, err := faultproxy.New(cosmos.Endpoint, faultproxy.Options{TLS: true})
	require.NoError(t, err)
	require.NoError(t, proxy.Start())
	t.Cleanup(func() { _ = proxy.Close() })
	client, err := testenv.NewCosmosClient(proxy.URL(), cosmos.Key)
	require.NoError(t, err)
	c, err := client.NewContainer(db.Name, "Leases")
	require.NoError(t, err)
	s := budget.NewCosmos(c)
	require.NoError(t, budget.Seed(ctx, s, 4))
	proxy.SetFaults(faultproxy.Faults{Rate429: 1, RetryAfter: 300 * time.Millisecond,
		Match: func(r faultproxy.Request) bool { return r.ItemID == budget.ID }})
	begun := time.Now()
	_, _, err = s.Read(ctx)
	require.Error(t, err)
	require.Less(t, time.Since(begun), time.Second)
	require.LessOrEqual(t, proxy.Stats().Throttled, int64(2), "tries of one read")
}
