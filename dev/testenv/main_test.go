package testenv

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/stretchr/testify/require"
)

// One server of each kind for the whole test binary.
var (
	cosmos  *Cosmos
	azurite *Azurite
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var err error
	if cosmos, err = StartCosmos(ctx, CosmosOptions{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer stop("cosmos", cosmos.Stop)
	if azurite, err = StartAzurite(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer stop("azurite", azurite.Stop)
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "cosmos log: %s\nazurite log: %s\n", cosmos.LogPath, azurite.LogPath)
	}
	return code
}

func stop(name string, f func() error) {
	if err := f(); err != nil {
		fmt.Fprintf(os.Stderr, "stopping %s: %v\n", name, err)
	}
}

var dbCounter atomic.Int64

// testDatabase is a database of one test.
type testDatabase struct {
	Name       string
	Containers map[string]*azcosmos.ContainerClient
}

// newDatabase creates a database of its own for a test, with one container
// per spec, and returns it with a client for each container by name.
func newDatabase(t *testing.T, c *Cosmos, specs ...ContainerSpec) testDatabase {
	t.Helper()
	name := fmt.Sprintf("%s-%d", regexp.MustCompile(`[^A-Za-z0-9]+`).ReplaceAllString(t.Name(), "-"), dbCounter.Add(1))
	require.NoError(t, CreateDatabase(t.Context(), c.Endpoint, c.Key, name, specs...))
	client := newTestClient(t, c, nil)
	containers := map[string]*azcosmos.ContainerClient{}
	for _, spec := range specs {
		cc, err := client.NewContainer(name, spec.Name)
		require.NoError(t, err)
		containers[spec.Name] = cc
	}
	return testDatabase{Name: name, Containers: containers}
}

// newTestClient returns a client that skips certificate verification and
// dials through dial when it is not nil.
func newTestClient(t *testing.T, c *Cosmos, countDials *atomic.Int64) *azcosmos.Client {
	t.Helper()
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // local test server
	if countDials != nil {
		dial := transport.DialContext
		transport.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			countDials.Add(1)
			return dial(ctx, network, addr)
		}
	}
	cred, err := azcosmos.NewKeyCredential(c.Key)
	require.NoError(t, err)
	client, err := azcosmos.NewClientWithKey(c.Endpoint, cred, &azcosmos.ClientOptions{
		ClientOptions: azcore.ClientOptions{Transport: &http.Client{Transport: transport}},
	})
	require.NoError(t, err)
	return client
}

// statusOf returns the HTTP status of an azcosmos error, or 0.
func statusOf(err error) int {
	var respErr *azcore.ResponseError
	if errors.As(err, &respErr) {
		return respErr.StatusCode
	}
	return 0
}

func pk(s string) azcosmos.PartitionKey { return azcosmos.NewPartitionKeyString(s) }

func ptr[T any](v T) *T { return &v }

// mustJSON marshals v.
func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

// create writes an item and returns its etag.
func create(t *testing.T, c *azcosmos.ContainerClient, partition string, item map[string]any) azcore.ETag {
	t.Helper()
	resp, err := c.CreateItem(t.Context(), pk(partition), mustJSON(t, item), nil)
	require.NoError(t, err)
	return resp.ETag
}

// queryAll runs a query to its end and returns the items of every page and
// the number of pages.
func queryAll(t *testing.T, c *azcosmos.ContainerClient, query string, partition azcosmos.PartitionKey, opts *azcosmos.QueryOptions) ([]map[string]any, int) {
	t.Helper()
	pager := c.NewQueryItemsPager(query, partition, opts)
	var items []map[string]any
	pages := 0
	for pager.More() {
		page, err := pager.NextPage(t.Context())
		require.NoError(t, err)
		pages++
		for _, raw := range page.Items {
			var item map[string]any
			require.NoError(t, json.Unmarshal(raw, &item))
			items = append(items, item)
		}
	}
	return items, pages
}

// ids returns the sorted ids of items.
func ids(items []map[string]any) []string {
	out := make([]string, 0, len(items))
	for _, item := range items {
		out = append(out, fmt.Sprint(item["id"]))
	}
	slices.Sort(out)
	return out
}

// quoted reports whether an etag looks like a Cosmos DB etag.
func quoted(etag azcore.ETag) bool {
	s := string(etag)
	return len(s) > 2 && strings.HasPrefix(s, `"`) && strings.HasSuffix(s, `"`)
}
