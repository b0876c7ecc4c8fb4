package testenv

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/stretchr/testify/require"
)

// changeFeed reads a container's change feed through azcosmos as a Cosmos
// DB trigger does: from the beginning of the container's one feed range,
// then from its own continuation.
type changeFeed struct {
	t            *testing.T
	c            *azcosmos.ContainerClient
	opts         azcosmos.ChangeFeedOptions
	continuation string
}

func newChangeFeed(t *testing.T, c *azcosmos.ContainerClient, opts azcosmos.ChangeFeedOptions) *changeFeed {
	t.Helper()
	ranges, err := c.ReadFeedRanges(t.Context(), nil)
	require.NoError(t, err)
	require.Len(t, ranges, 1)
	opts.FeedRange = &ranges[0]
	return &changeFeed{t: t, c: c, opts: opts}
}

// page reads one page: its items, and the status of the answer (200 with
// items, 304 without).
func (f *changeFeed) page() ([]map[string]any, int) {
	f.t.Helper()
	opts := f.opts
	if f.continuation != "" {
		opts.Continuation = &f.continuation
	}
	resp, err := f.c.ReadChangeFeed(f.t.Context(), &opts)
	require.NoError(f.t, err)
	require.NotEmpty(f.t, resp.ContinuationToken)
	f.continuation = resp.ContinuationToken
	items := make([]map[string]any, 0, len(resp.Items))
	for _, raw := range resp.Items {
		var item map[string]any
		require.NoError(f.t, json.Unmarshal(raw, &item))
		items = append(items, item)
	}
	require.Equal(f.t, len(items), resp.Count)
	return items, resp.RawResponse.StatusCode
}

// drain reads pages until an answer has nothing new, and returns their
// items and sizes.
func (f *changeFeed) drain() ([]map[string]any, []int) {
	f.t.Helper()
	var all []map[string]any
	var sizes []int
	for {
		items, status := f.page()
		if len(items) == 0 {
			require.Equal(f.t, http.StatusNotModified, status)
			return all, sizes
		}
		require.Equal(f.t, http.StatusOK, status)
		all = append(all, items...)
		sizes = append(sizes, len(items))
	}
}

// inOrder returns the ids of items, in feed order, after checking that
// their _lsn never goes down.
func inOrder(t *testing.T, items []map[string]any) []string {
	t.Helper()
	out := make([]string, 0, len(items))
	last := 0.0
	for _, item := range items {
		lsn, ok := item["_lsn"].(float64)
		require.True(t, ok, "item %v has no _lsn", item["id"])
		require.GreaterOrEqual(t, lsn, last, "item %v comes out of order", item["id"])
		last = lsn
		out = append(out, fmt.Sprint(item["id"]))
	}
	return out
}

func write(t *testing.T, c *azcosmos.ContainerClient, id, status string) {
	t.Helper()
	_, err := c.UpsertItem(t.Context(), PK("sub"), MustJSON(t, map[string]any{"id": id, "partitionKey": "sub", "status": status}), nil)
	require.NoError(t, err)
}

func statuses(items []map[string]any) map[string]any {
	out := map[string]any{}
	for _, item := range items {
		out[fmt.Sprint(item["id"])] = item["status"]
	}
	return out
}

// The stock server answered a change feed read with every item, and any
// read with a continuation with 304: a trigger saw each item once, and
// nothing written later.
func TestChangeFeedIsIncremental(t *testing.T) {
	t.Parallel()
	c := SharedCosmos(t).NewDatabase(t, operations).Containers["Operations"]
	feed := newChangeFeed(t, c, azcosmos.ChangeFeedOptions{})

	_, status := feed.page()
	require.Equal(t, http.StatusNotModified, status, "an empty container has no changes")

	for _, id := range []string{"a", "b", "c"} {
		write(t, c, id, "Accepted")
	}
	items, _ := feed.drain()
	require.Equal(t, []string{"a", "b", "c"}, inOrder(t, items))

	write(t, c, "b", "Provisioning")
	write(t, c, "d", "Accepted")
	write(t, c, "b", "Succeeded")
	items, sizes := feed.drain()
	require.Equal(t, []string{"d", "b"}, inOrder(t, items), "each item once, where its last write puts it")
	require.Equal(t, []int{2}, sizes)
	require.Equal(t, map[string]any{"b": "Succeeded", "d": "Accepted"}, statuses(items))

	_, status = feed.page()
	require.Equal(t, http.StatusNotModified, status)
}

func TestChangeFeedFromAContinuation(t *testing.T) {
	t.Parallel()
	c := SharedCosmos(t).NewDatabase(t, operations).Containers["Operations"]
	for i := range 20 {
		write(t, c, fmt.Sprintf("old-%d", i), "Accepted")
	}
	feed := newChangeFeed(t, c, azcosmos.ChangeFeedOptions{MaxItemCount: 7})
	_, _ = feed.drain()

	// Creates, replaces of old items, some twice, and writes by every kind
	// of call.
	write(t, c, "new-1", "Accepted")
	write(t, c, "old-3", "Provisioning")
	write(t, c, "new-2", "Accepted")
	write(t, c, "old-3", "Succeeded")
	_, err := c.CreateItem(t.Context(), PK("sub"), MustJSON(t, map[string]any{"id": "new-3", "partitionKey": "sub", "status": "Accepted"}), nil)
	require.NoError(t, err)
	_, err = c.ReplaceItem(t.Context(), PK("sub"), "old-7", MustJSON(t, map[string]any{"id": "old-7", "partitionKey": "sub", "status": "Failed"}), nil)
	require.NoError(t, err)
	ops := azcosmos.PatchOperations{}
	ops.AppendSet("/status", "Deleting")
	_, err = c.PatchItem(t.Context(), PK("sub"), "old-11", ops, nil)
	require.NoError(t, err)
	write(t, c, "new-1", "Provisioning")

	items, _ := feed.drain()
	require.Equal(t, []string{"new-2", "old-3", "new-3", "old-7", "old-11", "new-1"}, inOrder(t, items))
	require.Equal(t, map[string]any{
		"new-1": "Provisioning", "new-2": "Accepted", "new-3": "Accepted",
		"old-3": "Succeeded", "old-7": "Failed", "old-11": "Deleting",
	}, statuses(items))
}

// Nothing new is 304 Not Modified, and the continuation does not move.
func TestChangeFeedNotModified(t *testing.T) {
	t.Parallel()
	c := SharedCosmos(t).NewDatabase(t, operations).Containers["Operations"]
	write(t, c, "a", "Accepted")
	feed := newChangeFeed(t, c, azcosmos.ChangeFeedOptions{})
	_, _ = feed.drain()

	before := feed.continuation
	for range 3 {
		items, status := feed.page()
		require.Equal(t, http.StatusNotModified, status)
		require.Empty(t, items)
		require.Equal(t, before, feed.continuation)
	}
	write(t, c, "a", "Succeeded")
	items, status := feed.page()
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, []string{"a"}, inOrder(t, items))
	require.NotEqual(t, before, feed.continuation)
}

// A page holds at most x-ms-max-item-count items, except that the writes of
// one transaction (one LSN) are never split across pages.
func TestChangeFeedPageSize(t *testing.T) {
	t.Parallel()
	c := SharedCosmos(t).NewDatabase(t, operations).Containers["Operations"]
	for i := range 5 {
		write(t, c, fmt.Sprintf("single-%d", i), "Accepted")
	}
	batch := c.NewTransactionalBatch(PK("sub"))
	for i := range 4 {
		batch.CreateItem(MustJSON(t, map[string]any{"id": fmt.Sprintf("batch-%d", i), "partitionKey": "sub"}), nil)
	}
	resp, err := c.ExecuteTransactionalBatch(t.Context(), batch, nil)
	require.NoError(t, err)
	require.True(t, resp.Success)
	for i := 5; i < 8; i++ {
		write(t, c, fmt.Sprintf("single-%d", i), "Accepted")
	}

	feed := newChangeFeed(t, c, azcosmos.ChangeFeedOptions{MaxItemCount: 3})
	items, sizes := feed.drain()
	require.Equal(t, []string{
		"single-0", "single-1", "single-2",
		"single-3", "single-4", "batch-0", "batch-1", "batch-2", "batch-3",
		"single-5", "single-6", "single-7",
	}, inOrder(t, items))
	require.Equal(t, []int{3, 6, 3}, sizes, "the batch's four items share one LSN and one page")
	lsns := map[float64]int{}
	for _, item := range items {
		lsns[item["_lsn"].(float64)]++
	}
	require.Len(t, lsns, 9, "five single writes, one batch, three single writes")
}

// Deletes and expiries are not changes the feed shows, and a deleted item
// no longer appears at its earlier write.
func TestChangeFeedLeavesOutDeletes(t *testing.T) {
	t.Parallel()
	expiring := ContainerSpec{Name: "Expiring", PartitionKeyPath: "/id", DefaultTTL: ptr[int32](-1)}
	db := SharedCosmos(t).NewDatabase(t, operations, expiring)
	c := db.Containers["Operations"]
	for _, id := range []string{"a", "b", "c"} {
		write(t, c, id, "Accepted")
	}
	_, err := c.DeleteItem(t.Context(), PK("sub"), "a", nil)
	require.NoError(t, err)
	feed := newChangeFeed(t, c, azcosmos.ChangeFeedOptions{})
	items, _ := feed.drain()
	require.Equal(t, []string{"b", "c"}, inOrder(t, items))

	_, err = c.DeleteItem(t.Context(), PK("sub"), "b", nil)
	require.NoError(t, err)
	_, status := feed.page()
	require.Equal(t, http.StatusNotModified, status)

	// The feed is the first read after the expiry: nothing else has removed
	// the item yet.
	e := db.Containers["Expiring"]
	create(t, e, "expires", map[string]any{"id": "expires", "ttl": 1})
	create(t, e, "stays", map[string]any{"id": "stays"})
	resp, err := e.ReadItem(t.Context(), PK("expires"), "expires", nil)
	require.NoError(t, err)
	var item struct {
		TS int64 `json:"_ts"`
	}
	require.NoError(t, json.Unmarshal(resp.Value, &item))
	require.True(t, Sleep(t.Context(), time.Until(time.Unix(item.TS+1, 0).Add(50*time.Millisecond))))
	items, _ = newChangeFeed(t, e, azcosmos.ChangeFeedOptions{}).drain()
	require.Equal(t, []string{"stays"}, inOrder(t, items))
}

// Readers keep their own continuations: one reading does not move another.
func TestChangeFeedReadersAreIndependent(t *testing.T) {
	t.Parallel()
	c := SharedCosmos(t).NewDatabase(t, operations).Containers["Operations"]
	first := newChangeFeed(t, c, azcosmos.ChangeFeedOptions{MaxItemCount: 2})
	second := newChangeFeed(t, c, azcosmos.ChangeFeedOptions{MaxItemCount: 2})
	for _, id := range []string{"a", "b", "c"} {
		write(t, c, id, "Accepted")
	}
	items, _ := first.drain()
	require.Equal(t, []string{"a", "b", "c"}, inOrder(t, items))

	write(t, c, "a", "Succeeded")
	items, _ = second.page()
	require.Equal(t, []string{"b", "c"}, inOrder(t, items), "second starts from the beginning: a moved to the end")
	items, _ = first.drain()
	require.Equal(t, []string{"a"}, inOrder(t, items))
	items, _ = second.drain()
	require.Equal(t, []string{"a"}, inOrder(t, items))
}

// A feed can be read for one logical partition, as the SDKs allow.
func TestChangeFeedOfOnePartition(t *testing.T) {
	t.Parallel()
	c := SharedCosmos(t).NewDatabase(t, operations).Containers["Operations"]
	for i, sub := range []string{"x", "y", "x", "y"} {
		create(t, c, sub, map[string]any{"id": fmt.Sprint(i), "partitionKey": sub})
	}
	feed := newChangeFeed(t, c, azcosmos.ChangeFeedOptions{PartitionKey: ptr(PK("x"))})
	items, _ := feed.drain()
	require.Equal(t, []string{"0", "2"}, inOrder(t, items))
}

// A start time reads the changes made after it.
func TestChangeFeedStartTime(t *testing.T) {
	t.Parallel()
	c := SharedCosmos(t).NewDatabase(t, operations).Containers["Operations"]
	write(t, c, "untouched", "Accepted")
	write(t, c, "before", "Accepted")
	// If-Modified-Since has whole seconds, and the start is exclusive.
	start := time.Now().Truncate(time.Second).Add(time.Second)
	require.True(t, Sleep(t.Context(), time.Until(start.Add(time.Millisecond))))
	write(t, c, "after", "Accepted")
	write(t, c, "before", "Succeeded")

	feed := newChangeFeed(t, c, azcosmos.ChangeFeedOptions{StartFrom: &start})
	items, _ := feed.drain()
	require.Equal(t, []string{"after", "before"}, inOrder(t, items))
}

// Thousands of writes from many writers page out completely, each item
// once, at its last write.
func TestChangeFeedThousandsOfItems(t *testing.T) {
	t.Parallel()
	c := SharedCosmos(t).NewDatabase(t, operations).Containers["Operations"]
	const n, writers = 3000, 8
	feed := newChangeFeed(t, c, azcosmos.ChangeFeedOptions{MaxItemCount: 250})
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := w; i < n; i += writers {
				write(t, c, fmt.Sprint(i), "Accepted")
				if i%10 == 0 {
					write(t, c, fmt.Sprint(i), "Succeeded")
				}
			}
		})
	}
	wg.Wait()

	items, sizes := feed.drain()
	require.Equal(t, n, len(items))
	require.Equal(t, n/250, len(sizes))
	seen := map[string]bool{}
	for _, id := range inOrder(t, items) {
		require.False(t, seen[id], "%s appears twice", id)
		seen[id] = true
	}
	for id, status := range statuses(items) {
		var i int
		_, err := fmt.Sscan(id, &i)
		require.NoError(t, err)
		if i%10 == 0 {
			require.Equal(t, "Succeeded", status, id)
		} else {
			require.Equal(t, "Accepted", status, id)
		}
	}

	// The default page size is 100.
	all := newChangeFeed(t, c, azcosmos.ChangeFeedOptions{})
	_, sizes = all.drain()
	require.Equal(t, n/100, len(sizes))
}

// Items written over and over leave the server's log of writes as long as
// the container, and readers at any point still read the right items.
func TestChangeFeedAfterManyRewrites(t *testing.T) {
	t.Parallel()
	c := SharedCosmos(t).NewDatabase(t, operations).Containers["Operations"]
	const items, rounds, writers = 10, 300, 5
	late := newChangeFeed(t, c, azcosmos.ChangeFeedOptions{})
	rewrite := func(from, to int) {
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				for round := from; round < to; round++ {
					for i := w; i < items; i += writers {
						write(t, c, fmt.Sprint(i), fmt.Sprint(round))
					}
				}
			})
		}
		wg.Wait()
	}
	rewrite(0, rounds/2)
	_, _ = late.drain()
	write(t, c, "marker", "Accepted")
	rewrite(rounds/2, rounds)

	want := map[string]any{"marker": "Accepted"}
	for i := range items {
		want[fmt.Sprint(i)] = fmt.Sprint(rounds - 1)
	}
	got, _ := late.drain()
	require.Equal(t, want, statuses(got))
	require.Len(t, got, items+1)
	got, _ = newChangeFeed(t, c, azcosmos.ChangeFeedOptions{}).drain()
	require.Equal(t, want, statuses(got))
	require.Len(t, got, items+1)
	require.Equal(t, "marker", inOrder(t, got)[0], "the marker's one write precedes the others' last")
}

// rawChangeFeed reads the change feed of container coll of database db with
// a REST request of its own, signed as the SDKs sign them, for what
// azcosmos cannot ask (such as "from now").
func rawChangeFeed(t *testing.T, cosmos *Cosmos, db, coll string, header map[string]string) (*http.Response, []byte) {
	t.Helper()
	link := "dbs/" + db + "/colls/" + coll
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, cosmos.Endpoint+link+"/docs", nil)
	require.NoError(t, err)
	date := strings.ToLower(time.Now().UTC().Format(http.TimeFormat))
	key, err := base64.StdEncoding.DecodeString(cosmos.Key)
	require.NoError(t, err)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte("get\ndocs\n" + link + "\n" + date + "\n\n"))
	sig := base64.StdEncoding.EncodeToString(mac.Sum(nil))
	req.Header.Set("authorization", url.QueryEscape("type=master&ver=1.0&sig="+sig))
	req.Header.Set("x-ms-date", date)
	req.Header.Set("x-ms-version", "2020-07-15")
	req.Header.Set("A-IM", "Incremental feed")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := countsClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, body
}

// What a reader sends that azcosmos does not: "*" (from now), and requests
// Cosmos DB refuses.
func TestChangeFeedRequests(t *testing.T) {
	t.Parallel()
	cosmos := SharedCosmos(t)
	db := cosmos.NewDatabase(t, operations)
	c := db.Containers["Operations"]
	write(t, c, "a", "Accepted")
	write(t, c, "b", "Accepted")

	resp, _ := rawChangeFeed(t, cosmos, db.Name, "Operations", map[string]string{"If-None-Match": "*"})
	require.Equal(t, http.StatusNotModified, resp.StatusCode, "from now: nothing yet")
	now := resp.Header.Get("etag")
	require.Equal(t, `"2"`, now)
	write(t, c, "c", "Accepted")
	resp, body := rawChangeFeed(t, cosmos, db.Name, "Operations", map[string]string{"If-None-Match": now})
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, `"3"`, resp.Header.Get("etag"))
	var page struct {
		RID       string           `json:"_rid"`
		Documents []map[string]any `json:"Documents"`
		Count     int              `json:"_count"`
	}
	require.NoError(t, json.Unmarshal(body, &page))
	require.Equal(t, []string{"c"}, inOrder(t, page.Documents))
	require.Equal(t, 1, page.Count)
	props, err := c.Read(t.Context(), nil)
	require.NoError(t, err)
	require.Equal(t, props.ContainerProperties.ResourceID, page.RID)

	refused := []struct {
		name   string
		header map[string]string
		status int
	}{
		{"malformed continuation", map[string]string{"If-None-Match": `"abc"`}, http.StatusBadRequest},
		{"page size 0", map[string]string{"x-ms-max-item-count": "0"}, http.StatusBadRequest},
		{"all versions and deletes", map[string]string{"A-IM": "Full-Fidelity Feed"}, http.StatusBadRequest},
		{"a range that is not there", map[string]string{"x-ms-documentdb-partitionkeyrangeid": "1"}, http.StatusGone},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := rawChangeFeed(t, cosmos, db.Name, "Operations", tt.header)
			require.Equal(t, tt.status, resp.StatusCode, "%s", body)
		})
	}
	resp, _ = rawChangeFeed(t, cosmos, db.Name, "Operations", map[string]string{"x-ms-documentdb-partitionkeyrangeid": "1"})
	require.Equal(t, "1002", resp.Header.Get("x-ms-substatus"), "PartitionKeyRangeGone: the SDKs refresh their routing map")
}
