package database_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/internal/database/databasetesting"
	"github.com/opstatus/opstatus/internal/testenv"
)

// billingStore is one DBClient implementation, with a way to write billing
// items as ARO-HCP's backend did and to read them back as stored.
type billingStore struct {
	database.DBClient
	// key is the Billing container's partition key path.
	key database.BillingKey
	// put stores body, a JSON object with a string subscriptionId, as a
	// billing item of the partition it names, without an etag check; in a
	// container keyed by /partitionKey, with its subscriptionId there too
	// when it has no partitionKey.
	put func(t *testing.T, body string)
	// raw returns a billing item as stored, or nil when there is none.
	raw func(t *testing.T, subscriptionID, id string) map[string]any
}

// keyed returns body, a billing item, as it is stored in a container
// keyed by key: with its subscriptionId in partitionKey too on
// /partitionKey, unless it has one.
func keyed(t *testing.T, key database.BillingKey, body string) string {
	t.Helper()
	var item map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &item))
	if _, ok := item["partitionKey"]; key == database.BillingByPartitionKey && !ok {
		item["partitionKey"] = item["subscriptionId"]
	}
	out, err := json.Marshal(item)
	require.NoError(t, err)
	return string(out)
}

// memoryBillingStore is the in-memory DBClient, its Billing container
// keyed by key; without container, its Billing container is missing.
func memoryBillingStore(t *testing.T, key database.BillingKey, container bool) billingStore {
	mem := databasetesting.NewMemoryClient(0)
	mem.BillingKey = key
	if !container {
		mem.RemoveBillingContainer()
	}
	return billingStore{
		DBClient: mem,
		key:      key,
		put:      func(t *testing.T, body string) { mem.PutRawBilling([]byte(keyed(t, key, body))) },
		raw: func(t *testing.T, subscriptionID, id string) map[string]any {
			body := mem.RawBilling(subscriptionID, id)
			if body == nil {
				return nil
			}
			var item map[string]any
			require.NoError(t, json.Unmarshal(body, &item))
			return item
		},
	}
}

// cosmosBillingStore is a CosmosClient of a database of the test's own on
// the shared Cosmos test server, its Billing container keyed by key;
// without container, the database has no Billing container.
func cosmosBillingStore(t *testing.T, key database.BillingKey, container bool) billingStore {
	cosmos := testenv.SharedCosmos(t)
	name := testenv.DatabaseName(t)
	specs := []testenv.ContainerSpec{
		{Name: operations, PartitionKeyPath: "/partitionKey"},
		{Name: resources, PartitionKeyPath: "/partitionKey"},
		{Name: "Locks", PartitionKeyPath: "/id"},
	}
	if container {
		specs = append(specs, testenv.ContainerSpec{Name: "Billing", PartitionKeyPath: string(key)})
	}
	require.NoError(t, testenv.CreateDatabase(t.Context(), cosmos.Endpoint, cosmos.Key, name, specs...))
	client, err := testenv.NewCosmosClient(cosmos.Endpoint, cosmos.Key)
	require.NoError(t, err)
	billing, err := client.NewContainer(name, "Billing")
	require.NoError(t, err)
	return billingStore{
		DBClient: newClient(t, cosmosConfig(t, name)),
		key:      key,
		put: func(t *testing.T, body string) {
			var item struct {
				SubscriptionID string `json:"subscriptionId"`
			}
			require.NoError(t, json.Unmarshal([]byte(body), &item))
			_, err := billing.UpsertItem(t.Context(), azcosmos.NewPartitionKeyString(item.SubscriptionID), []byte(keyed(t, key, body)), nil)
			require.NoError(t, err)
		},
		raw: func(t *testing.T, subscriptionID, id string) map[string]any {
			resp, err := billing.ReadItem(t.Context(), azcosmos.NewPartitionKeyString(subscriptionID), id, nil)
			if testenv.StatusOf(err) == http.StatusNotFound {
				return nil
			}
			require.NoError(t, err)
			var item map[string]any
			require.NoError(t, json.Unmarshal(resp.Value, &item))
			return item
		},
	}
}

// clusterMRG is the managed resource group of the cluster of clusterKey.
const clusterMRG = "/subscriptions/sub1/resourceGroups/mrg"

var created = time.Date(2026, 1, 2, 3, 4, 5, 600_000_000, time.UTC)

// billingItem is a billing item of the cluster of clusterKey in sub, as
// ARO-HCP's backend writes it, with over set over it.
func billingItem(id string, over fields) string {
	return item(fields{"id": id, "subscriptionId": sub, "resourceId": clusterKey, "tenantId": "tenant1",
		"location": "eastus", "creationTime": "2026-01-02T03:04:05Z", "managedResourceGroup": clusterMRG}, over)
}

// newBilling is the billing item opstatus creates for the life of the
// cluster of clusterKey whose Cluster Service id is clusterID.
func newBilling(clusterID string) *database.Billing {
	return &database.Billing{
		ID: database.BillingID(clusterKey, clusterID), SubscriptionID: sub, ResourceID: clusterKey,
		TenantID: "tenant1", Location: "eastus", CreationTime: created, ManagedResourceGroup: clusterMRG,
	}
}

// openBilling lists the open billing items of clusterKey in sub.
func openBilling(t *testing.T, s billingStore) []*database.Billing {
	t.Helper()
	open, err := s.OpenBilling(t.Context(), sub, clusterKey)
	require.NoError(t, err)
	return open
}

// billingIDs returns the ids of items, sorted.
func billingIDs(items []*database.Billing) []string {
	ids := make([]string, 0, len(items))
	for _, b := range items {
		ids = append(ids, b.ID)
	}
	slices.Sort(ids)
	return ids
}

// billingCase is a behaviour both DBClients have: run on a store holding
// items, with a Billing container unless noContainer.
type billingCase struct {
	name        string
	noContainer bool
	items       []string
	run         func(t *testing.T, s billingStore)
}

var billingCases = []billingCase{
	{
		name: "CreateBilling writes the item, and a second create of the same cluster life is ErrConflict",
		run: func(t *testing.T, s billingStore) {
			ctx := t.Context()
			b := newBilling("c1")
			written, err := s.CreateBilling(ctx, b)
			require.NoError(t, err)
			require.NotEmpty(t, written.ETag)
			require.NoError(t, written.Err)
			require.Equal(t, b.ID, written.ID)
			require.True(t, created.Equal(written.CreationTime))
			require.Nil(t, written.DeletionTime)
			raw := s.raw(t, sub, b.ID)
			require.Equal(t, string(written.ETag), raw["_etag"])
			for k := range raw {
				if strings.HasPrefix(k, "_") {
					delete(raw, k)
				}
			}
			want := map[string]any{"id": b.ID, "subscriptionId": sub, "resourceId": clusterKey,
				"tenantId": "tenant1", "location": "eastus", "creationTime": "2026-01-02T03:04:05.6Z",
				"managedResourceGroup": clusterMRG}
			if s.key == database.BillingByPartitionKey {
				want["partitionKey"] = sub // the subscription at the container's path too
			}
			require.Equal(t, want, raw, "no deletionTime until the cluster is deleted")
			require.Empty(t, b.PartitionKey, "the caller's item is left as it was")

			// A retry after a lost answer, even one that read the cluster
			// anew and under another case, lands on the same item.
			retry := newBilling("c1")
			retry.ResourceID = strings.ToUpper(clusterKey)
			retry.ID = database.BillingID(retry.ResourceID, "c1")
			retry.CreationTime = created.Add(time.Hour)
			_, err = s.CreateBilling(ctx, retry)
			require.ErrorIs(t, err, database.ErrConflict)
			require.Equal(t, []string{b.ID}, billingIDs(openBilling(t, s)))
			require.Equal(t, "2026-01-02T03:04:05.6Z", s.raw(t, sub, b.ID)["creationTime"])

			// The next life of a cluster under the same resource ID.
			next, err := s.CreateBilling(ctx, newBilling("c2"))
			require.NoError(t, err)
			require.NotEqual(t, b.ID, next.ID)
		},
	},
	{
		name: "CreateBilling refuses an item that cannot be billed, and writes nothing",
		run: func(t *testing.T, s billingStore) {
			for name, change := range map[string]func(b *database.Billing){
				"subscription not lowercase": func(b *database.Billing) { b.SubscriptionID = strings.ToUpper(sub) },
				"no subscription":            func(b *database.Billing) { b.SubscriptionID = "" },
				"another partition key":      func(b *database.Billing) { b.PartitionKey = otherSub },
				"no resource ID":             func(b *database.Billing) { b.ResourceID = "" },
				"no creation time":           func(b *database.Billing) { b.CreationTime = time.Time{} },
				"no id":                      func(b *database.Billing) { b.ID = "" },
				"an id Cosmos cannot use":    func(b *database.Billing) { b.ID = "a/b" },
			} {
				b := newBilling("c1")
				change(b)
				_, err := s.CreateBilling(t.Context(), b)
				requireNoSentinel(t, err)
				require.ErrorContains(t, err, "billing item", name)
			}
			id := database.BillingID(clusterKey, "c1")
			require.Nil(t, s.raw(t, sub, id))
			require.Nil(t, s.raw(t, strings.ToUpper(sub), id))
			require.Empty(t, openBilling(t, s))
		},
	},
	{
		name: "OpenBilling lists the items of the resource without deletionTime, ignoring the resource ID's case",
		items: []string{
			billingItem("open", nil),
			billingItem("open-upper", fields{"resourceId": strings.ToUpper(clusterKey)}),
			billingItem("closed", fields{"deletionTime": "2026-02-01T00:00:00Z"}),
			// A null deletionTime is defined: ARO-HCP's query does not
			// list it either.
			billingItem("closed-null", fields{"deletionTime": nil}),
			billingItem("other-cluster", fields{"resourceId": clusterKey + "2"}),
			billingItem("child", fields{"resourceId": clusterKey + "/nodePools/np1"}),
			billingItem("resource-id-not-a-string", fields{"resourceId": 5}),
			billingItem("no-resource-id", fields{"resourceId": absent}),
			billingItem("elsewhere", fields{"subscriptionId": otherSub}),
		},
		run: func(t *testing.T, s billingStore) {
			ctx := t.Context()
			open, err := s.OpenBilling(ctx, strings.ToUpper(sub), strings.ToLower(clusterKey))
			require.NoError(t, err)
			require.Equal(t, []string{"open", "open-upper"}, billingIDs(open))
			for _, b := range open {
				require.NoError(t, b.Err)
				require.Equal(t, s.raw(t, sub, b.ID)["_etag"], string(b.ETag))
				if b.ID == "open" {
					require.Equal(t, sub, b.SubscriptionID)
					require.Equal(t, clusterKey, b.ResourceID)
					require.Equal(t, "tenant1", b.TenantID)
					require.Equal(t, "eastus", b.Location)
					require.Equal(t, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), b.CreationTime)
					require.Equal(t, clusterMRG, b.ManagedResourceGroup)
					require.Nil(t, b.DeletionTime)
				}
			}
			elsewhere, err := s.OpenBilling(ctx, otherSub, clusterKey)
			require.NoError(t, err)
			require.Equal(t, []string{"elsewhere"}, billingIDs(elsewhere), "queries stay in their partition")
			none, err := s.OpenBilling(ctx, "sub3", clusterKey)
			require.NoError(t, err)
			require.Empty(t, none)
		},
	},
	{
		name: "ReplaceBilling sets deletionTime while the etag matches and keeps the fields opstatus does not know",
		items: []string{billingItem("old-backend", fields{"futureField": fields{"a": []int{1, 2}}, "version": 3}),
			billingItem("untouched", fields{"resourceId": clusterKey + "2"})},
		run: func(t *testing.T, s billingStore) {
			ctx := t.Context()
			open := openBilling(t, s)
			require.Len(t, open, 1)
			b, stale := open[0], *open[0]
			deleted := time.Date(2026, 3, 4, 5, 6, 7, 800_000_000, time.UTC)
			b.DeletionTime = &deleted
			written, err := s.ReplaceBilling(ctx, b)
			require.NoError(t, err)
			require.NotEqual(t, b.ETag, written.ETag)
			require.NotNil(t, written.DeletionTime)
			require.True(t, deleted.Equal(*written.DeletionTime))
			raw := s.raw(t, sub, "old-backend")
			require.Equal(t, string(written.ETag), raw["_etag"])
			require.Equal(t, "2026-03-04T05:06:07.8Z", raw["deletionTime"])
			require.Equal(t, map[string]any{"a": []any{1.0, 2.0}}, raw["futureField"])
			require.Equal(t, 3.0, raw["version"])
			require.Equal(t, "2026-01-02T03:04:05Z", raw["creationTime"])
			require.Empty(t, openBilling(t, s), "a deleted cluster has no open item")

			stale.DeletionTime = &created
			_, err = s.ReplaceBilling(ctx, &stale)
			require.ErrorIs(t, err, database.ErrPreconditionFailed)
			gone := *written
			gone.ID = "gone"
			_, err = s.ReplaceBilling(ctx, &gone)
			require.ErrorIs(t, err, database.ErrNotFound)
			noETag := *written
			noETag.ETag = ""
			_, err = s.ReplaceBilling(ctx, &noETag)
			requireNoSentinel(t, err)
			require.Equal(t, raw, s.raw(t, sub, "old-backend"), "no write but the first")
			require.NotContains(t, s.raw(t, sub, "untouched"), "deletionTime")
		},
	},
	{
		name: "a billing item that does not decode is listed with ErrMalformed naming it, and closing it changes nothing else",
		items: []string{billingItem("ill-typed", fields{"creationTime": "yesterday", "tenantId": 5,
			"futureField": "kept"})},
		run: func(t *testing.T, s billingStore) {
			ctx := t.Context()
			before := s.raw(t, sub, "ill-typed")
			open := openBilling(t, s)
			require.Len(t, open, 1)
			b, stale := open[0], *open[0]
			require.ErrorIs(t, b.Err, database.ErrMalformed)
			require.ErrorContains(t, b.Err, `"ill-typed"`)
			require.Equal(t, "ill-typed", b.ID)
			require.Equal(t, before["_etag"], string(b.ETag))
			_, err := s.CreateBilling(ctx, b)
			require.ErrorIs(t, err, database.ErrMalformed, "an item read as malformed is never created")

			deleted := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
			b.DeletionTime = &deleted
			b.TenantID = "ignored: only deletionTime is written over an ill-typed item"
			written, err := s.ReplaceBilling(ctx, b)
			require.NoError(t, err)
			require.ErrorIs(t, written.Err, database.ErrMalformed)
			after := s.raw(t, sub, "ill-typed")
			require.Equal(t, "2026-03-04T05:06:07Z", after["deletionTime"])
			for k, v := range before {
				if !strings.HasPrefix(k, "_") {
					require.Equal(t, v, after[k], k)
				}
			}
			require.Len(t, after, len(before)+1)
			require.Empty(t, openBilling(t, s))

			stale.DeletionTime = &deleted
			_, err = s.ReplaceBilling(ctx, &stale)
			require.ErrorIs(t, err, database.ErrPreconditionFailed)
		},
	},
	{
		name:  "a billing item over 2 MB is refused for good: a RefusedError naming the container and the 413, and nothing is written",
		items: []string{billingItem("open", nil)},
		run: func(t *testing.T, s billingStore) {
			ctx := t.Context()
			requireRefused := func(err error) {
				t.Helper()
				require.ErrorIs(t, err, database.ErrRefused)
				require.NotErrorIs(t, err, database.ErrUnavailable)
				var refused *database.RefusedError
				require.ErrorAs(t, err, &refused)
				require.Equal(t, "Billing", refused.Container)
				require.Equal(t, http.StatusRequestEntityTooLarge, refused.StatusCode)
				require.NotEmpty(t, refused.Message)
			}
			huge := strings.Repeat("x", 2<<20)
			b := newBilling("c1")
			b.TenantID = huge
			_, err := s.CreateBilling(ctx, b)
			requireRefused(err)
			require.Nil(t, s.raw(t, sub, b.ID))

			before := s.raw(t, sub, "open")
			open := openBilling(t, s)
			require.Len(t, open, 1)
			open[0].TenantID = huge
			_, err = s.ReplaceBilling(ctx, open[0])
			requireRefused(err)
			require.Equal(t, before, s.raw(t, sub, "open"))
		},
	},
	{
		name:        "a missing Billing container is an error, never an empty list",
		noContainer: true,
		run: func(t *testing.T, s billingStore) {
			ctx := t.Context()
			open, err := s.OpenBilling(ctx, sub, clusterKey)
			require.Error(t, err)
			require.Nil(t, open)
			_, err = s.CreateBilling(ctx, newBilling("c1"))
			require.Error(t, err)
			require.NotErrorIs(t, err, database.ErrConflict)
			b := newBilling("c1")
			b.ETag = azcore.ETag(`"1"`)
			_, err = s.ReplaceBilling(ctx, b)
			require.Error(t, err)
		},
	},
	{
		name:  "a context that is done fails every billing call, which writes nothing",
		items: []string{billingItem("open", nil)},
		run: func(t *testing.T, s billingStore) {
			open := openBilling(t, s)
			require.Len(t, open, 1)
			before := s.raw(t, sub, "open")
			deleted := time.Now().UTC()
			open[0].DeletionTime = &deleted
			calls := map[string]func(ctx context.Context) error{
				"CreateBilling": func(ctx context.Context) error {
					_, err := s.CreateBilling(ctx, newBilling("c1"))
					return err
				},
				"OpenBilling": func(ctx context.Context) error {
					_, err := s.OpenBilling(ctx, sub, clusterKey)
					return err
				},
				"ReplaceBilling": func(ctx context.Context) error {
					_, err := s.ReplaceBilling(ctx, open[0])
					return err
				},
			}
			canceled, cancel := context.WithCancel(t.Context())
			cancel()
			expired, cancelExpired := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
			defer cancelExpired()
			for name, call := range calls {
				require.ErrorIs(t, call(canceled), context.Canceled, name)
				err := call(expired)
				require.ErrorIs(t, err, context.DeadlineExceeded, name)
				require.ErrorIs(t, err, database.ErrUnavailable, name)
			}
			require.Equal(t, before, s.raw(t, sub, "open"))
			require.Nil(t, s.raw(t, sub, database.BillingID(clusterKey, "c1")))
		},
	},
}

// TestBillingContract runs every behaviour of billingCases against the
// in-memory DBClient and the Cosmos one, with Billing keyed by
// /subscriptionId and by /partitionKey (ARO-HCP's 2024-10 account); under
// -short, against the in-memory one alone.
func TestBillingContract(t *testing.T) {
	for _, impl := range []struct {
		name string
		open func(t *testing.T, key database.BillingKey, container bool) billingStore
	}{{"memory", memoryBillingStore}, {"cosmos", cosmosBillingStore}} {
		for _, key := range []database.BillingKey{database.BillingBySubscriptionID, database.BillingByPartitionKey} {
			t.Run(impl.name+string(key), func(t *testing.T) {
				t.Parallel()
				if impl.name == "cosmos" {
					testenv.NeedsServers(t)
				}
				runBillingCases(t, func(t *testing.T, container bool) billingStore { return impl.open(t, key, container) })
			})
		}
	}
}

// runBillingCases runs billingCases on stores of open.
func runBillingCases(t *testing.T, open func(t *testing.T, container bool) billingStore) {
	for _, c := range billingCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := open(t, !c.noContainer)
			for _, body := range c.items {
				s.put(t, body)
			}
			c.run(t, s)
		})
	}
}
