package testenv

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

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

func ptr[T any](v T) *T { return &v }

// create writes an item and returns its etag.
func create(t *testing.T, c *azcosmos.ContainerClient, partition string, item map[string]any) azcore.ETag {
	t.Helper()
	resp, err := c.CreateItem(t.Context(), PK(partition), MustJSON(t, item), nil)
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
