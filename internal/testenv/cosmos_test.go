package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/stretchr/testify/require"
)

var operations = ContainerSpec{Name: "Operations", PartitionKeyPath: "/partitionKey"}

func TestMissingItemIs404(t *testing.T) {
	t.Parallel()
	cosmos := SharedCosmos(t)
	c := cosmos.NewDatabase(t, operations).Containers["Operations"]
	create(t, c, "sub", map[string]any{"id": "present", "partitionKey": "sub"})

	tests := []struct {
		name string
		call func() error
	}{
		{"read", func() error {
			_, err := c.ReadItem(t.Context(), PK("sub"), "missing", nil)
			return err
		}},
		{"read in another partition", func() error {
			_, err := c.ReadItem(t.Context(), PK("other"), "present", nil)
			return err
		}},
		{"replace", func() error {
			_, err := c.ReplaceItem(t.Context(), PK("sub"), "missing", []byte(`{"id":"missing","partitionKey":"sub"}`), nil)
			return err
		}},
		{"delete", func() error {
			_, err := c.DeleteItem(t.Context(), PK("sub"), "missing", nil)
			return err
		}},
		{"patch", func() error {
			ops := azcosmos.PatchOperations{}
			ops.AppendSet("/status", "Failed")
			_, err := c.PatchItem(t.Context(), PK("sub"), "missing", ops, nil)
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			require.Error(t, err)
			require.Equal(t, http.StatusNotFound, StatusOf(err), "%v", err)
		})
	}
}

// A request to a container or database that does not exist answers 404
// with sub-status 1003 (owner resource not found), as Cosmos DB does, so
// that a client can tell it from a missing item, which has none.
func TestMissingContainerIs404WithSubStatus1003(t *testing.T) {
	t.Parallel()
	cosmos := SharedCosmos(t)
	db := cosmos.NewDatabase(t, operations)
	client, err := NewCosmosClient(cosmos.Endpoint, cosmos.Key)
	require.NoError(t, err)
	present := db.Containers["Operations"]
	create(t, present, "sub", map[string]any{"id": "present", "partitionKey": "sub"})
	missingContainer, err := client.NewContainer(db.Name, "Missing")
	require.NoError(t, err)
	missingDatabase, err := client.NewContainer(db.Name+"-missing", "Operations")
	require.NoError(t, err)

	calls := []struct {
		name string
		call func(c *azcosmos.ContainerClient) error
	}{
		{"read", func(c *azcosmos.ContainerClient) error {
			_, err := c.ReadItem(t.Context(), PK("sub"), "present", nil)
			return err
		}},
		{"query", func(c *azcosmos.ContainerClient) error {
			_, err := c.NewQueryItemsPager("SELECT * FROM c", PK("sub"), nil).NextPage(t.Context())
			return err
		}},
		{"cross-partition query", func(c *azcosmos.ContainerClient) error {
			_, err := c.NewQueryItemsPager("SELECT * FROM c", azcosmos.NewPartitionKey(), nil).NextPage(t.Context())
			return err
		}},
		{"create", func(c *azcosmos.ContainerClient) error {
			_, err := c.CreateItem(t.Context(), PK("sub"), []byte(`{"id":"new","partitionKey":"sub"}`), nil)
			return err
		}},
		{"replace", func(c *azcosmos.ContainerClient) error {
			_, err := c.ReplaceItem(t.Context(), PK("sub"), "present", []byte(`{"id":"present","partitionKey":"sub"}`), nil)
			return err
		}},
		{"delete", func(c *azcosmos.ContainerClient) error {
			_, err := c.DeleteItem(t.Context(), PK("sub"), "present", nil)
			return err
		}},
	}
	for _, target := range []struct {
		name string
		c    *azcosmos.ContainerClient
	}{{"missing container", missingContainer}, {"missing database", missingDatabase}} {
		for _, tc := range calls {
			t.Run(target.name+"/"+tc.name, func(t *testing.T) {
				err := tc.call(target.c)
				var re *azcore.ResponseError
				require.ErrorAs(t, err, &re)
				require.Equal(t, http.StatusNotFound, re.StatusCode, "%v", err)
				require.Equal(t, "1003", re.RawResponse.Header.Get("x-ms-substatus"))
			})
		}
	}

	// A missing item of a container that exists is a plain 404.
	_, err = present.ReadItem(t.Context(), PK("sub"), "missing", nil)
	var re *azcore.ResponseError
	require.ErrorAs(t, err, &re)
	require.Equal(t, http.StatusNotFound, re.StatusCode)
	require.Empty(t, re.RawResponse.Header.Get("x-ms-substatus"))
}

func TestQueriesArePartitionScoped(t *testing.T) {
	t.Parallel()
	cosmos := SharedCosmos(t)
	c := cosmos.NewDatabase(t, operations).Containers["Operations"]
	for _, id := range []string{"a1", "a2"} {
		create(t, c, "a", map[string]any{"id": id, "partitionKey": "a"})
	}
	create(t, c, "b", map[string]any{"id": "b1", "partitionKey": "b"})

	tests := []struct {
		name      string
		partition azcosmos.PartitionKey
		want      []string
	}{
		{"partition a", PK("a"), []string{"a1", "a2"}},
		{"partition b", PK("b"), []string{"b1"}},
		{"empty partition", PK("c"), []string{}},
		{"cross partition", azcosmos.NewPartitionKey(), []string{"a1", "a2", "b1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			items, _ := queryAll(t, c, "SELECT * FROM c", tt.partition, nil)
			require.Equal(t, tt.want, ids(items))
		})
	}
}

// The server keeps an index of each partition's items for scoped queries:
// every kind of write and expiry must keep it true.
func TestPartitionScopedQueriesFollowWrites(t *testing.T) {
	t.Parallel()
	cosmos := SharedCosmos(t)
	db := cosmos.NewDatabase(t, operations, ContainerSpec{Name: "Expiring", PartitionKeyPath: "/partitionKey", DefaultTTL: ptr[int32](1)})
	c := db.Containers["Operations"]
	scoped := func(partition string) []string {
		items, _ := queryAll(t, c, "SELECT * FROM c", PK(partition), nil)
		return ids(items)
	}
	body := func(id, partition string, n int) []byte {
		b, err := json.Marshal(map[string]any{"id": id, "partitionKey": partition, "n": n})
		require.NoError(t, err)
		return b
	}
	for _, id := range []string{"a1", "a2", "a3"} {
		create(t, c, "a", map[string]any{"id": id, "partitionKey": "a"})
	}
	create(t, c, "b", map[string]any{"id": "a1", "partitionKey": "b"}) // the same id in another partition
	require.Equal(t, []string{"a1", "a2", "a3"}, scoped("a"))

	// A replace keeps the item in its partition.
	_, err := c.ReplaceItem(t.Context(), PK("a"), "a1", body("a1", "a", 1), nil)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"a1", "a2", "a3"}, scoped("a"))
	items, _ := queryAll(t, c, "SELECT * FROM c WHERE c.n = 1", PK("a"), nil)
	require.Equal(t, []string{"a1"}, ids(items))

	// Upserts: one replaces, one creates.
	_, err = c.UpsertItem(t.Context(), PK("a"), body("a2", "a", 2), nil)
	require.NoError(t, err)
	_, err = c.UpsertItem(t.Context(), PK("a"), body("a4", "a", 4), nil)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"a1", "a2", "a3", "a4"}, scoped("a"))

	// Deletes leave the other partition's item of the same id alone.
	for _, id := range []string{"a1", "a3"} {
		_, err = c.DeleteItem(t.Context(), PK("a"), id, nil)
		require.NoError(t, err)
	}
	require.ElementsMatch(t, []string{"a2", "a4"}, scoped("a"))
	require.Equal(t, []string{"a1"}, scoped("b"))
	for _, id := range []string{"a2", "a4"} {
		_, err = c.DeleteItem(t.Context(), PK("a"), id, nil)
		require.NoError(t, err)
	}
	require.Empty(t, scoped("a"))
	create(t, c, "a", map[string]any{"id": "a1", "partitionKey": "a"})
	require.Equal(t, []string{"a1"}, scoped("a"))

	// Expired items leave the partition too.
	e := db.Containers["Expiring"]
	create(t, e, "a", map[string]any{"id": "x", "partitionKey": "a"})
	items, _ = queryAll(t, e, "SELECT * FROM c", PK("a"), nil)
	require.Equal(t, []string{"x"}, ids(items))
	require.Eventually(t, func() bool {
		items, _ := queryAll(t, e, "SELECT * FROM c", PK("a"), nil)
		return len(items) == 0
	}, 10*time.Second, 100*time.Millisecond)
}

func TestQueryPaging(t *testing.T) {
	t.Parallel()
	cosmos := SharedCosmos(t)
	c := cosmos.NewDatabase(t, operations).Containers["Operations"]
	// 250 items over five partitions, 50 in each.
	for i := range 250 {
		partition := fmt.Sprintf("p%d", i%5)
		create(t, c, partition, map[string]any{"id": fmt.Sprintf("item-%03d", i), "partitionKey": partition, "n": i})
	}

	tests := []struct {
		name      string
		query     string
		partition azcosmos.PartitionKey
		pageSize  int32
		wantItems int
		wantPages int
	}{
		{"cross partition", "SELECT * FROM c", azcosmos.NewPartitionKey(), 100, 250, 3},
		{"cross partition projection", "SELECT c.id, c.partitionKey FROM c", azcosmos.NewPartitionKey(), 100, 250, 3},
		{"cross partition filtered", "SELECT c.id FROM c WHERE c.n >= @min", azcosmos.NewPartitionKey(), 30, 150, 5},
		{"single partition", "SELECT * FROM c", PK("p3"), 20, 50, 3},
		{"single partition projection", "SELECT c.id, c.n FROM c", PK("p3"), 20, 50, 3},
		{"no page size", "SELECT * FROM c", azcosmos.NewPartitionKey(), 0, 250, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := &azcosmos.QueryOptions{
				PageSizeHint:    tt.pageSize,
				QueryParameters: []azcosmos.QueryParameter{{Name: "@min", Value: 100}},
			}
			items, pages := queryAll(t, c, tt.query, tt.partition, opts)
			require.Len(t, items, tt.wantItems)
			require.Equal(t, tt.wantPages, pages)
			seen := map[string]bool{}
			for _, item := range items {
				id := item["id"].(string)
				require.False(t, seen[id], "item %s seen twice", id)
				seen[id] = true
			}
		})
	}

	t.Run("projection has only the projected fields", func(t *testing.T) {
		items, _ := queryAll(t, c, "SELECT c.id, c.partitionKey FROM c", PK("p1"), &azcosmos.QueryOptions{PageSizeHint: 10})
		require.Len(t, items, 50)
		for _, item := range items {
			require.Len(t, item, 2)
			require.Equal(t, "p1", item["partitionKey"])
		}
	})
}

func TestQueryLanguage(t *testing.T) {
	t.Parallel()
	cosmos := SharedCosmos(t)
	c := cosmos.NewDatabase(t, operations).Containers["Operations"]
	items := []map[string]any{
		{"id": "accepted", "status": "Accepted"},
		{"id": "deleting", "status": "Deleting"},
		{"id": "succeeded", "status": "Succeeded"},
		{"id": "failed-to-notify", "status": "Failed", "notificationUri": "https://arm/notify"},
		{"id": "canceled-notified", "status": "Canceled", "notificationUri": ""},
		{"id": "no-status"},
		{"id": "cluster", "key": "/subscriptions/S/resourceGroups/RG/providers/P/hcpOpenShiftClusters/C1"},
		{"id": "nodepool", "key": "/subscriptions/s/resourcegroups/rg/providers/p/hcpOpenShiftClusters/c1/nodePools/NP"},
		{"id": "other-cluster", "key": "/subscriptions/S/resourceGroups/RG/providers/P/hcpOpenShiftClusters/C10"},
		{"id": "billing-open", "resourceId": "/subscriptions/S/resourceGroups/RG/providers/P/hcpOpenShiftClusters/C1"},
		{"id": "billing-deleted", "resourceId": "/subscriptions/S/resourceGroups/RG/providers/P/hcpOpenShiftClusters/C1",
			"deletionTime": "2026-01-01T00:00:00Z"},
		{"id": "billing-null-deletion", "resourceId": "/subscriptions/S/resourceGroups/RG/providers/P/hcpOpenShiftClusters/C1",
			"deletionTime": nil},
	}
	for _, item := range items {
		item["partitionKey"] = "sub"
		create(t, c, "sub", item)
	}
	const clusterKey = "/SUBSCRIPTIONS/s/resourcegroups/rg/providers/p/hcpopenshiftclusters/c1"

	tests := []struct {
		name   string
		query  string
		params []azcosmos.QueryParameter
		want   []string
	}{
		{
			name:  "NOT IN or pending notification",
			query: "SELECT c.id, c.partitionKey FROM c WHERE c.status NOT IN ('Succeeded','Failed','Canceled') OR (IS_STRING(c.notificationUri) AND LENGTH(c.notificationUri) > 0)",
			want:  []string{"accepted", "deleting", "failed-to-notify"},
		},
		{
			name:  "IN",
			query: "SELECT * FROM c WHERE c.status IN ('Accepted', 'Deleting')",
			want:  []string{"accepted", "deleting"},
		},
		{
			name:   "NOT IN with parameters",
			query:  "SELECT * FROM c WHERE c.status NOT IN (@a, @b)",
			params: []azcosmos.QueryParameter{{Name: "@a", Value: "Accepted"}, {Name: "@b", Value: "Deleting"}},
			want:   []string{"canceled-notified", "failed-to-notify", "succeeded"},
		},
		{
			name:   "STRINGEQUALS ignoring case",
			query:  "SELECT * FROM c WHERE STRINGEQUALS(c.key, @key, true)",
			params: []azcosmos.QueryParameter{{Name: "@key", Value: clusterKey}},
			want:   []string{"cluster"},
		},
		{
			name:   "STRINGEQUALS with case",
			query:  "SELECT * FROM c WHERE STRINGEQUALS(c.key, @key)",
			params: []azcosmos.QueryParameter{{Name: "@key", Value: clusterKey}},
			want:   []string{},
		},
		{
			name:   "STRINGEQUALS ignoring case and NOT IS_DEFINED",
			query:  "SELECT * FROM c WHERE STRINGEQUALS(c.resourceId, @resourceId, true) AND NOT IS_DEFINED(c.deletionTime)",
			params: []azcosmos.QueryParameter{{Name: "@resourceId", Value: clusterKey}},
			want:   []string{"billing-open"},
		},
		{
			name:  "IS_DEFINED of a null",
			query: "SELECT * FROM c WHERE IS_DEFINED(c.deletionTime)",
			want:  []string{"billing-deleted", "billing-null-deletion"},
		},
		{
			name:   "STARTSWITH ignoring case",
			query:  "SELECT * FROM c WHERE STARTSWITH(c.key, @prefix, true)",
			params: []azcosmos.QueryParameter{{Name: "@prefix", Value: clusterKey + "/nodepools/"}},
			want:   []string{"nodepool"},
		},
		{
			name:   "STARTSWITH with case",
			query:  "SELECT * FROM c WHERE STARTSWITH(c.key, @prefix, false)",
			params: []azcosmos.QueryParameter{{Name: "@prefix", Value: clusterKey + "/nodepools/"}},
			want:   []string{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, partition := range []azcosmos.PartitionKey{PK("sub"), azcosmos.NewPartitionKey()} {
				got, _ := queryAll(t, c, tt.query, partition, &azcosmos.QueryOptions{QueryParameters: tt.params})
				require.Equal(t, tt.want, ids(got))
			}
		})
	}

	t.Run("COUNT", func(t *testing.T) {
		pager := c.NewQueryItemsPager("SELECT VALUE COUNT(1) FROM c", azcosmos.NewPartitionKey(), nil)
		page, err := pager.NextPage(t.Context())
		require.NoError(t, err)
		require.Len(t, page.Items, 1)
		require.JSONEq(t, fmt.Sprint(len(items)), string(page.Items[0]))
	})

	t.Run("syntax error is 400", func(t *testing.T) {
		pager := c.NewQueryItemsPager("SELECT * FROM c WHERE", PK("sub"), nil)
		_, err := pager.NextPage(t.Context())
		require.Equal(t, http.StatusBadRequest, StatusOf(err), "%v", err)
	})
}

func TestTimeToLive(t *testing.T) {
	t.Parallel()
	cosmos := SharedCosmos(t)
	db := cosmos.NewDatabase(t, ContainerSpec{Name: "Default1", PartitionKeyPath: "/id", DefaultTTL: ptr[int32](1)},
		ContainerSpec{Name: "On", PartitionKeyPath: "/id", DefaultTTL: ptr[int32](-1)},
		ContainerSpec{Name: "Off", PartitionKeyPath: "/id"},
	)
	containers := db.Containers
	deflt, on, off := containers["Default1"], containers["On"], containers["Off"]

	// Written first, so each would have expired before the others if TTL
	// applied to it.
	create(t, off, "off-with-ttl", map[string]any{"id": "off-with-ttl", "ttl": 1})
	create(t, on, "forever", map[string]any{"id": "forever"})
	create(t, deflt, "item-forever", map[string]any{"id": "item-forever", "ttl": -1})
	create(t, deflt, "default", map[string]any{"id": "default"})
	create(t, deflt, "longer", map[string]any{"id": "longer", "ttl": 3600})
	create(t, on, "own-ttl", map[string]any{"id": "own-ttl", "ttl": 2})

	waitGone(t, deflt, "default")
	waitGone(t, on, "own-ttl")

	for _, tt := range []struct {
		name string
		c    *azcosmos.ContainerClient
		id   string
	}{
		{"container TTL off ignores item ttl", off, "off-with-ttl"},
		{"container TTL -1 keeps items without ttl", on, "forever"},
		{"item ttl -1 overrides container default", deflt, "item-forever"},
		{"item ttl longer than container default", deflt, "longer"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.c.ReadItem(t.Context(), PK(tt.id), tt.id, nil)
			require.NoError(t, err)
		})
	}

	t.Run("expired items leave queries", func(t *testing.T) {
		items, _ := queryAll(t, deflt, "SELECT * FROM c", azcosmos.NewPartitionKey(), nil)
		require.Equal(t, []string{"item-forever", "longer"}, ids(items))
	})

	t.Run("expired id can be created again", func(t *testing.T) {
		create(t, deflt, "default", map[string]any{"id": "default", "ttl": 3600})
	})

	t.Run("invalid item ttl is 400", func(t *testing.T) {
		_, err := on.CreateItem(t.Context(), PK("zero"), []byte(`{"id":"zero","ttl":0}`), nil)
		require.Equal(t, http.StatusBadRequest, StatusOf(err), "%v", err)
	})
}

// Cosmos DB counts an item's ttl from its _ts, the last write's time in
// whole seconds: an item written late in a second expires up to a second
// before its write time + ttl, and the server expires it at that moment.
func TestTimeToLiveCountsFromTheWholeSecond(t *testing.T) {
	t.Parallel()
	cosmos := SharedCosmos(t)
	c := cosmos.NewDatabase(t, ContainerSpec{Name: "Expiring", PartitionKeyPath: "/id", DefaultTTL: ptr[int32](1)}).Containers["Expiring"]
	now := time.Now()
	late := now.Truncate(time.Second).Add(800 * time.Millisecond)
	if late.Before(now) {
		late = late.Add(time.Second)
	}
	time.Sleep(time.Until(late))
	written := time.Now()
	create(t, c, "late", map[string]any{"id": "late"})
	resp, err := c.ReadItem(t.Context(), PK("late"), "late", nil)
	require.NoError(t, err)
	var item struct {
		TS int64 `json:"_ts"`
	}
	require.NoError(t, json.Unmarshal(resp.Value, &item))
	expires := time.Unix(item.TS+1, 0)
	require.True(t, expires.Before(written.Add(time.Second)), "written at %s, _ts %d", written, item.TS)

	time.Sleep(time.Until(expires.Add(-100 * time.Millisecond)))
	_, err = c.ReadItem(t.Context(), PK("late"), "late", nil)
	require.NoError(t, err, "expired before _ts + ttl")
	time.Sleep(time.Until(expires.Add(50 * time.Millisecond)))
	_, err = c.ReadItem(t.Context(), PK("late"), "late", nil)
	require.Equal(t, http.StatusNotFound, StatusOf(err), "still there %s after _ts + ttl, %s after the write: %v",
		time.Since(expires), time.Since(written), err)
}

// waitGone polls until an item can no longer be read (404) and no query sees
// it, with a generous deadline.
func waitGone(t *testing.T, c *azcosmos.ContainerClient, id string) {
	t.Helper()
	require.Eventually(t, func() bool {
		_, err := c.ReadItem(t.Context(), PK(id), id, nil)
		if StatusOf(err) != http.StatusNotFound {
			return false
		}
		items, _ := queryAll(t, c, "SELECT * FROM c WHERE c.id = @id", azcosmos.NewPartitionKey(),
			&azcosmos.QueryOptions{QueryParameters: []azcosmos.QueryParameter{{Name: "@id", Value: id}}})
		return len(items) == 0
	}, 30*time.Second, 100*time.Millisecond, "item %s never expired", id)
}

func TestContainerDefaultTTLIsReadBack(t *testing.T) {
	t.Parallel()
	cosmos := SharedCosmos(t)
	db := cosmos.NewDatabase(t, ContainerSpec{Name: "Locks", PartitionKeyPath: "/id", DefaultTTL: ptr[int32](30)},
		ContainerSpec{Name: "On", PartitionKeyPath: "/id", DefaultTTL: ptr[int32](-1)},
		ContainerSpec{Name: "Off", PartitionKeyPath: "/partitionKey"},
	)
	containers := db.Containers
	tests := []struct {
		name     string
		wantTTL  *int32
		wantPath string
	}{
		{"Locks", ptr[int32](30), "/id"},
		{"On", ptr[int32](-1), "/id"},
		{"Off", nil, "/partitionKey"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := containers[tt.name].Read(t.Context(), nil)
			require.NoError(t, err)
			require.Equal(t, tt.wantTTL, resp.ContainerProperties.DefaultTimeToLive)
			require.Equal(t, []string{tt.wantPath}, resp.ContainerProperties.PartitionKeyDefinition.Paths)
		})
	}

	t.Run("invalid defaultTtl is 400", func(t *testing.T) {
		db, err := newTestClient(t, cosmos, nil).NewDatabase(db.Name)
		require.NoError(t, err)
		_, err = db.CreateContainer(t.Context(), azcosmos.ContainerProperties{
			ID:                     "Zero",
			PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{Paths: []string{"/id"}},
			DefaultTimeToLive:      ptr[int32](0),
		}, nil)
		require.Equal(t, http.StatusBadRequest, StatusOf(err), "%v", err)
	})

	t.Run("replace keeps items", func(t *testing.T) {
		c := containers["Off"]
		create(t, c, "p", map[string]any{"id": "kept", "partitionKey": "p"})
		resp, err := c.Read(t.Context(), nil)
		require.NoError(t, err)
		props := *resp.ContainerProperties
		props.DefaultTimeToLive = ptr[int32](-1)
		_, err = c.Replace(t.Context(), props, nil)
		require.NoError(t, err)
		_, err = c.ReadItem(t.Context(), PK("p"), "kept", nil)
		require.NoError(t, err)
		resp, err = c.Read(t.Context(), nil)
		require.NoError(t, err)
		require.Equal(t, ptr[int32](-1), resp.ContainerProperties.DefaultTimeToLive)
	})
}

func TestOptimisticConcurrency(t *testing.T) {
	t.Parallel()
	cosmos := SharedCosmos(t)
	c := cosmos.NewDatabase(t, operations).Containers["Operations"]
	item := []byte(`{"id":"op","partitionKey":"sub","status":"Accepted"}`)
	resp, err := c.CreateItem(t.Context(), PK("sub"), item, nil)
	require.NoError(t, err)
	etag := resp.ETag
	require.True(t, quoted(etag), "etag %q", etag)
	require.Empty(t, resp.Value, "writes answer without content unless asked")

	stale := azcore.ETag(`"stale"`)
	staleOpts := &azcosmos.ItemOptions{IfMatchEtag: &stale}
	t.Run("stale If-Match is 412", func(t *testing.T) {
		for name, call := range map[string]func() error{
			"replace": func() error { _, err := c.ReplaceItem(t.Context(), PK("sub"), "op", item, staleOpts); return err },
			"upsert":  func() error { _, err := c.UpsertItem(t.Context(), PK("sub"), item, staleOpts); return err },
			"delete":  func() error { _, err := c.DeleteItem(t.Context(), PK("sub"), "op", staleOpts); return err },
		} {
			err := call()
			require.Equal(t, http.StatusPreconditionFailed, StatusOf(err), "%s: %v", name, err)
		}
	})

	t.Run("create of an existing id is 409", func(t *testing.T) {
		_, err := c.CreateItem(t.Context(), PK("sub"), item, nil)
		require.Equal(t, http.StatusConflict, StatusOf(err), "%v", err)
	})

	t.Run("same id in another partition", func(t *testing.T) {
		_, err := c.CreateItem(t.Context(), PK("other"), []byte(`{"id":"op","partitionKey":"other"}`), nil)
		require.NoError(t, err)
	})

	t.Run("matching If-Match writes and changes the etag", func(t *testing.T) {
		current := etag
		opts := &azcosmos.ItemOptions{IfMatchEtag: &current, EnableContentResponseOnWrite: true}
		resp, err := c.ReplaceItem(t.Context(), PK("sub"), "op", []byte(`{"id":"op","partitionKey":"sub","status":"Provisioning"}`), opts)
		require.NoError(t, err)
		require.NotEqual(t, current, resp.ETag)
		require.True(t, quoted(resp.ETag))
		var body map[string]any
		require.NoError(t, json.Unmarshal(resp.Value, &body))
		require.Equal(t, string(resp.ETag), body["_etag"])
		require.Equal(t, "Provisioning", body["status"])

		current = resp.ETag
		resp, err = c.UpsertItem(t.Context(), PK("sub"), []byte(`{"id":"op","partitionKey":"sub","status":"Succeeded"}`), opts)
		require.NoError(t, err)
		require.NotEqual(t, current, resp.ETag)

		// The etag used above is now stale.
		_, err = c.DeleteItem(t.Context(), PK("sub"), "op", &azcosmos.ItemOptions{IfMatchEtag: &current})
		require.Equal(t, http.StatusPreconditionFailed, StatusOf(err), "%v", err)

		current = resp.ETag
		_, err = c.DeleteItem(t.Context(), PK("sub"), "op", &azcosmos.ItemOptions{IfMatchEtag: &current})
		require.NoError(t, err)
		_, err = c.ReadItem(t.Context(), PK("sub"), "op", nil)
		require.Equal(t, http.StatusNotFound, StatusOf(err), "%v", err)
	})

	t.Run("read returns the etag of the last write", func(t *testing.T) {
		resp, err := c.UpsertItem(t.Context(), PK("sub"), []byte(`{"id":"again","partitionKey":"sub"}`), nil)
		require.NoError(t, err)
		read, err := c.ReadItem(t.Context(), PK("sub"), "again", nil)
		require.NoError(t, err)
		require.Equal(t, resp.ETag, read.ETag)
	})

	t.Run("patch with a condition", func(t *testing.T) {
		create(t, c, "sub", map[string]any{"id": "patched", "partitionKey": "sub", "status": "Accepted"})
		ops := azcosmos.PatchOperations{}
		ops.AppendSet("/status", "Deleting")
		ops.SetCondition("FROM c WHERE c.status = 'Accepted'")
		_, err := c.PatchItem(t.Context(), PK("sub"), "patched", ops, nil)
		require.NoError(t, err)
		_, err = c.PatchItem(t.Context(), PK("sub"), "patched", ops, nil)
		require.Equal(t, http.StatusPreconditionFailed, StatusOf(err), "%v", err)
	})
}

func TestUnknownFieldsArePreserved(t *testing.T) {
	t.Parallel()
	cosmos := SharedCosmos(t)
	c := cosmos.NewDatabase(t, operations).Containers["Operations"]
	original := `{"id":"op","partitionKey":"sub","status":"Accepted","futureField":{"nested":[1,"two",{"three":3}]},"flag":true}`
	_, err := c.CreateItem(t.Context(), PK("sub"), []byte(original), nil)
	require.NoError(t, err)

	// A read-modify-write through a generic map, as a client that knows
	// only some fields would do.
	for _, write := range []string{"replace", "upsert"} {
		read, err := c.ReadItem(t.Context(), PK("sub"), "op", nil)
		require.NoError(t, err)
		var doc map[string]any
		require.NoError(t, json.Unmarshal(read.Value, &doc))
		doc["status"] = write
		body := MustJSON(t, doc)
		if write == "replace" {
			_, err = c.ReplaceItem(t.Context(), PK("sub"), "op", body, nil)
		} else {
			_, err = c.UpsertItem(t.Context(), PK("sub"), body, nil)
		}
		require.NoError(t, err)

		read, err = c.ReadItem(t.Context(), PK("sub"), "op", nil)
		require.NoError(t, err)
		var got map[string]any
		require.NoError(t, json.Unmarshal(read.Value, &got))
		require.Equal(t, write, got["status"])
		require.Equal(t, map[string]any{"nested": []any{1.0, "two", map[string]any{"three": 3.0}}}, got["futureField"])
		require.Equal(t, true, got["flag"])
	}
}

func TestReadFeedRanges(t *testing.T) {
	t.Parallel()
	cosmos := SharedCosmos(t)
	c := cosmos.NewDatabase(t, operations).Containers["Operations"]
	ranges, err := c.ReadFeedRanges(t.Context(), nil)
	require.NoError(t, err)
	require.Equal(t, []azcosmos.FeedRange{{MinInclusive: "", MaxExclusive: "FF"}}, ranges)
}

func TestConnectionsAreKeptAlive(t *testing.T) {
	t.Parallel()
	cosmos := SharedCosmos(t)
	db := cosmos.NewDatabase(t, operations)
	var dials atomic.Int64
	c, err := newTestClient(t, cosmos, &dials).NewContainer(db.Name, "Operations")
	require.NoError(t, err)
	for i := range 20 {
		create(t, c, "sub", map[string]any{"id": fmt.Sprint(i), "partitionKey": "sub"})
	}
	// The account read at start and the 20 writes share one connection.
	require.Equal(t, int64(1), dials.Load())
}

func TestPlainHTTP(t *testing.T) {
	t.Parallel()
	NeedsServers(t)
	plain, err := StartCosmos(t.Context(), CosmosOptions{PlainHTTP: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, plain.Stop()) })
	require.Regexp(t, `^http://127\.0\.0\.1:\d+/$`, plain.Endpoint)

	c := plain.NewDatabase(t, operations).Containers["Operations"]
	create(t, c, "sub", map[string]any{"id": "op", "partitionKey": "sub"})
	_, err = c.ReadItem(t.Context(), PK("sub"), "op", nil)
	require.NoError(t, err)

	require.NoError(t, plain.Stop())
	// The client retries a refused connection for a while; no need to wait.
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	_, err = c.ReadItem(ctx, PK("sub"), "op", nil)
	require.Error(t, err, "the server is gone after Stop")
}

func TestRequestCounts(t *testing.T) {
	t.Parallel()
	cosmos := SharedCosmos(t)
	locks := ContainerSpec{Name: "Locks", PartitionKeyPath: "/id"}
	db := cosmos.NewDatabase(t, operations, locks)
	other := cosmos.NewDatabase(t, operations)
	ops, lk := db.Containers["Operations"], db.Containers["Locks"]
	ctx := t.Context()

	etag := create(t, ops, "sub", map[string]any{"id": "a", "partitionKey": "sub"})
	create(t, other.Containers["Operations"], "sub", map[string]any{"id": "a", "partitionKey": "sub"})
	_, err := ops.ReadItem(ctx, PK("sub"), "a", nil)
	require.NoError(t, err)
	_, err = ops.ReadItem(ctx, PK("sub"), "missing", nil)
	require.Equal(t, http.StatusNotFound, StatusOf(err))
	for range 2 { // the second replace has a stale etag
		_, err = ops.ReplaceItem(ctx, PK("sub"), "a", []byte(`{"id":"a","partitionKey":"sub"}`), &azcosmos.ItemOptions{IfMatchEtag: &etag})
	}
	require.Equal(t, http.StatusPreconditionFailed, StatusOf(err))
	queryAll(t, ops, "SELECT * FROM c", PK("sub"), nil)
	_, err = ops.UpsertItem(ctx, PK("sub"), []byte(`{"id":"b","partitionKey":"sub"}`), nil)
	require.NoError(t, err)
	_, err = ops.DeleteItem(ctx, PK("sub"), "b", nil)
	require.NoError(t, err)
	create(t, lk, "sub", map[string]any{"id": "sub"})
	_, err = lk.CreateItem(ctx, PK("sub"), []byte(`{"id":"sub"}`), nil)
	require.Equal(t, http.StatusConflict, StatusOf(err))

	resp, _ := rawChangeFeed(t, cosmos, db.Name, "Operations", map[string]string{"If-None-Match": "*"})
	require.Equal(t, http.StatusNotModified, resp.StatusCode)

	counts, err := cosmos.Counts(ctx, db.Name)
	require.NoError(t, err)
	items := map[RequestCount]bool{}
	for _, c := range counts {
		if c.Kind != "meta" {
			items[c] = true
		}
	}
	require.Equal(t, map[RequestCount]bool{
		{Container: "Operations", Kind: "create", Status: http.StatusCreated, Count: 1}:             true,
		{Container: "Operations", Kind: "read", Status: http.StatusOK, Count: 1}:                    true,
		{Container: "Operations", Kind: "read", Status: http.StatusNotFound, Count: 1}:              true,
		{Container: "Operations", Kind: "replace", Status: http.StatusOK, Count: 1}:                 true,
		{Container: "Operations", Kind: "replace", Status: http.StatusPreconditionFailed, Count: 1}: true,
		{Container: "Operations", Kind: "query", Status: http.StatusOK, Count: 1}:                   true,
		{Container: "Operations", Kind: "changefeed", Status: http.StatusNotModified, Count: 1}:     true,
		{Container: "Operations", Kind: "upsert", Status: http.StatusCreated, Count: 1}:             true,
		{Container: "Operations", Kind: "delete", Status: http.StatusNoContent, Count: 1}:           true,
		{Container: "Locks", Kind: "create", Status: http.StatusCreated, Count: 1}:                  true,
		{Container: "Locks", Kind: "create", Status: http.StatusConflict, Count: 1}:                 true,
	}, items)

	none, err := cosmos.Counts(ctx, "no-such-database")
	require.NoError(t, err)
	require.Empty(t, none)

	// A name that is not UTF-8 once unescaped is refused, and the server
	// goes on serving.
	resp, err = countsClient.Get(cosmos.Endpoint + "_opstatus/counts/%C3%28")
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	_, err = cosmos.Counts(ctx, db.Name)
	require.NoError(t, err)
}

// TestLayouts: each layout creates the containers opstatus uses with the
// partition key paths of its ARO-HCP revision, read back as the handler
// reads them at start, and a hierarchical key reads back as one.
func TestLayouts(t *testing.T) {
	t.Parallel()
	cosmos := SharedCosmos(t)
	tests := []struct {
		layout Layout
		want   map[string]string
	}{
		{LayoutCurrent, map[string]string{"Operations": "/partitionKey", "Resources": "/partitionKey", "Locks": "/id",
			"Billing": "/subscriptionId", "Leases": "/id"}},
		{Layout2024, map[string]string{"Operations": "/partitionKey", "Resources": "/partitionKey", "Locks": "/id",
			"Billing": "/partitionKey", "Leases": "/id"}},
	}
	for _, tt := range tests {
		t.Run(tt.layout.String(), func(t *testing.T) {
			db := cosmos.NewDatabase(t, tt.layout.Containers(10*time.Second)...)
			got := map[string]string{}
			for name, c := range db.Containers {
				resp, err := c.Read(t.Context(), nil)
				require.NoError(t, err)
				key := resp.ContainerProperties.PartitionKeyDefinition
				require.Len(t, key.Paths, 1, name)
				require.NotEqual(t, azcosmos.PartitionKeyKindMultiHash, key.Kind, name)
				got[name] = key.Paths[0]
			}
			require.Equal(t, tt.want, got)
		})
	}
	t.Run("hierarchical", func(t *testing.T) {
		db := cosmos.NewDatabase(t, ContainerSpec{Name: "Billing", HierarchicalPaths: []string{"/subscriptionId", "/id"}})
		resp, err := db.Containers["Billing"].Read(t.Context(), nil)
		require.NoError(t, err)
		key := resp.ContainerProperties.PartitionKeyDefinition
		require.Equal(t, azcosmos.PartitionKeyKindMultiHash, key.Kind)
		require.Equal(t, []string{"/subscriptionId", "/id"}, key.Paths)
	})
}

// TestWritesAreRefusedAsCosmosRefusesThem: every refusal of Cosmos DB that
// a write of opstatus could meet, on create, replace and upsert alike,
// with its status; nothing is written, and the connection serves the next
// request.
func TestWritesAreRefusedAsCosmosRefusesThem(t *testing.T) {
	t.Parallel()
	cosmos := SharedCosmos(t)
	c := cosmos.NewDatabase(t, operations).Containers["Operations"]
	create(t, c, "sub", map[string]any{"id": "present", "partitionKey": "sub"})
	item := func(id, partition string, extra string) []byte {
		return fmt.Appendf(nil, `{"id":%q,"partitionKey":%q,"extra":%q}`, id, partition, extra)
	}
	// The largest body Cosmos DB takes, and one byte more.
	pad := MaxRequestBytes - len(item("present", "sub", ""))
	longKey := strings.Repeat("k", 2049)

	tests := []struct {
		name   string
		pk     string
		body   []byte
		status int
	}{
		{"an item over 2 MB", "sub", item("present", "sub", strings.Repeat("x", pad+1)), http.StatusRequestEntityTooLarge},
		{"not JSON", "sub", []byte(`{"id":"present",`), http.StatusBadRequest},
		{"not an object", "sub", []byte(`["present"]`), http.StatusBadRequest},
		{"no id", "sub", []byte(`{"partitionKey":"sub"}`), http.StatusBadRequest},
		{"an id that is not a string", "sub", []byte(`{"id":5,"partitionKey":"sub"}`), http.StatusBadRequest},
		{"an id with a slash", "sub", item("pre/sent", "sub", ""), http.StatusBadRequest},
		{"an id over 1023 bytes", "sub", item(strings.Repeat("é", 512), "sub", ""), http.StatusBadRequest},
		{"a partition key value over 2 KB", longKey, item("present", longKey, ""), http.StatusBadRequest},
		{"a partition key other than the header's", "sub", item("present", "other", ""), http.StatusBadRequest},
		{"no partition key, as the 2024-10 Billing container got opstatus's items", "sub", []byte(`{"id":"present","subscriptionId":"sub"}`), http.StatusBadRequest},
		{"an invalid ttl", "sub", []byte(`{"id":"present","partitionKey":"sub","ttl":0}`), http.StatusBadRequest},
	}
	writes := map[string]func(pk string, body []byte) error{
		"create": func(pk string, body []byte) error {
			_, err := c.CreateItem(t.Context(), PK(pk), body, nil)
			return err
		},
		"replace": func(pk string, body []byte) error {
			_, err := c.ReplaceItem(t.Context(), PK("sub"), "present", body, nil)
			return err
		},
		"upsert": func(pk string, body []byte) error {
			_, err := c.UpsertItem(t.Context(), PK(pk), body, nil)
			return err
		},
	}
	before, err := c.ReadItem(t.Context(), PK("sub"), "present", nil)
	require.NoError(t, err)
	for _, tt := range tests {
		for kind, write := range writes {
			t.Run(tt.name+"/"+kind, func(t *testing.T) {
				body := tt.body
				if kind == "create" {
					// A create of an existing id would be a 409; the same length.
					body = []byte(strings.Replace(string(body), `"present"`, `"absent0"`, 1))
				}
				err := write(tt.pk, body)
				require.Equal(t, tt.status, StatusOf(err), "%v", err)
			})
		}
	}
	after, err := c.ReadItem(t.Context(), PK("sub"), "present", nil)
	require.NoError(t, err)
	require.Equal(t, before.ETag, after.ETag, "nothing was written")
	_, err = c.ReadItem(t.Context(), PK("sub"), "absent0", nil)
	require.Equal(t, http.StatusNotFound, StatusOf(err))

	// The largest item is taken.
	_, err = c.ReplaceItem(t.Context(), PK("sub"), "present", item("present", "sub", strings.Repeat("x", pad)), nil)
	require.NoError(t, err)
}
