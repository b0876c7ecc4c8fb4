package faultproxy_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/faultproxy"
	"github.com/opstatus/opstatus/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// lockTTL is the Locks container's default time to live in tests.
const lockTTL = 60 * time.Second

// newDatabase creates a database of the test's own on upstream, directly
// (not through a proxy), with Operations and Locks containers.
func newDatabase(t *testing.T, upstream *testenv.Cosmos) string {
	t.Helper()
	ttl := int32(lockTTL / time.Second)
	return upstream.NewDatabase(t,
		testenv.ContainerSpec{Name: "Operations", PartitionKeyPath: "/partitionKey"},
		testenv.ContainerSpec{Name: "Locks", PartitionKeyPath: "/id", DefaultTTL: &ttl},
	).Name
}

// newProxy starts a proxy in front of upstream and closes it when the test
// ends.
func newProxy(t *testing.T, upstream *testenv.Cosmos, opts faultproxy.Options) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.New(upstream.Endpoint, opts)
	require.NoError(t, err)
	require.NoError(t, p.Start())
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	return p
}

// ownerPolicy sets the x-opstatus-owner header on every request.
type ownerPolicy string

func (o ownerPolicy) Do(req *policy.Request) (*http.Response, error) {
	req.Raw().Header.Set(faultproxy.HeaderOwner, string(o))
	return req.Next()
}

// clientConfig configures newClient.
type clientConfig struct {
	owner         string // x-opstatus-owner header, if set
	contentOnSave bool   // EnableContentResponseOnWrite
	plainHTTP     bool   // for setup: the proxy serves http (the upstream is https)
}

// client is an azcosmos client of one database through a proxy.
type client struct {
	ops, locks *azcosmos.ContainerClient
	dials      *atomic.Int64 // connections dialed to the proxy
}

// newClient returns a client of database db through proxy p. azcore's own
// retries are cut to 2 so that fault counts are known.
func newClient(t *testing.T, p *faultproxy.Proxy, db string, cfg clientConfig) client {
	t.Helper()
	dials := &atomic.Int64{}
	dialer := &net.Dialer{}
	transport := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return dialer.DialContext(ctx, network, addr)
		},
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the proxy's self-signed certificate
	}
	t.Cleanup(transport.CloseIdleConnections)
	opts := &azcosmos.ClientOptions{
		ClientOptions: azcore.ClientOptions{
			Transport: &http.Client{Transport: transport},
			Retry:     policy.RetryOptions{MaxRetries: 2, RetryDelay: time.Millisecond, MaxRetryDelay: time.Second},
			Telemetry: policy.TelemetryOptions{ApplicationID: "faultproxy-test"},
		},
		EnableContentResponseOnWrite: cfg.contentOnSave,
	}
	if cfg.owner != "" {
		opts.PerCallPolicies = []policy.Policy{ownerPolicy(cfg.owner)}
	}
	cred, err := azcosmos.NewKeyCredential(testenv.CosmosEmulatorKey)
	require.NoError(t, err)
	c, err := azcosmos.NewClientWithKey(p.URL(), cred, opts)
	require.NoError(t, err)
	ops, err := c.NewContainer(db, "Operations")
	require.NoError(t, err)
	locks, err := c.NewContainer(db, "Locks")
	require.NoError(t, err)
	return client{ops: ops, locks: locks, dials: dials}
}

// setup is a database, a proxy in front of the shared server and a client
// through it, warmed up: the client has read the account, so faults only
// meet the requests of the test.
func setup(t *testing.T, cfg clientConfig) (*faultproxy.Proxy, client) {
	t.Helper()
	upstream := testenv.SharedCosmos(t)
	db := newDatabase(t, upstream)
	p := newProxy(t, upstream, faultproxy.Options{TLS: !cfg.plainHTTP, Seed: 1})
	c := newClient(t, p, db, cfg)
	requireMissing(t, c.ops, "sub1", "warm-up")
	return p, c
}

// requireMissing asserts that item id does not exist.
func requireMissing(t *testing.T, c *azcosmos.ContainerClient, partition, id string) {
	t.Helper()
	_, err := c.ReadItem(t.Context(), testenv.PK(partition), id, nil)
	require.Error(t, err)
	require.Equal(t, http.StatusNotFound, testenv.StatusOf(err), "%v", err)
}

// readItem reads item id as a map.
func readItem(t *testing.T, c *azcosmos.ContainerClient, partition, id string) map[string]any {
	t.Helper()
	resp, err := c.ReadItem(t.Context(), testenv.PK(partition), id, nil)
	require.NoError(t, err)
	var item map[string]any
	require.NoError(t, json.Unmarshal(resp.Value, &item))
	return item
}

// opItem is an Operations item.
func opItem(id, partition string) map[string]any {
	return map[string]any{"id": id, "partitionKey": partition, "status": "Accepted"}
}

// onlyItems selects item requests, not the account or metadata reads.
func onlyItems(r faultproxy.Request) bool { return r.Kind != faultproxy.KindMeta }
