package frontend_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

const sub = "6B690BEC-0C16-4ECB-8F67-781CAF40BBA7"

var (
	cluster = "/subscriptions/" + sub + "/resourceGroups/rg/providers/Microsoft.RedHatOpenShift/hcpOpenShiftClusters/rt-c1"
	pool    = cluster + "/nodePools/np1"
	uuidRE  = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	// nanos is a time with nine digits of fraction (the frontend's
	// time.Now().UTC(), unless the nanoseconds end in zeros).
	nanos = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{1,9}Z$`)
)

// standIn creates a database in layout and a 2024-10 frontend over it.
func standIn(t *testing.T, layout testenv.Layout, lockTTL time.Duration) (*frontend.Frontend, *azcosmos.DatabaseClient) {
	t.Helper()
	cosmos := testenv.SharedCosmos(t)
	name := testenv.DatabaseName(t)
	require.NoError(t, frontend.CreateLayout(t.Context(), cosmos.Endpoint, cosmos.Key, name, layout, lockTTL))
	fe, err := frontend.New(cosmos.Endpoint, cosmos.Key, name)
	require.NoError(t, err)
	fe.Shape = frontend.Shape2024_10
	client, err := testenv.NewCosmosClient(cosmos.Endpoint, cosmos.Key)
	require.NoError(t, err)
	db, err := client.NewDatabase(name)
	require.NoError(t, err)
	return fe, db
}

// raw reads an item as Cosmos holds it.
func raw(t *testing.T, db *azcosmos.DatabaseClient, container, partition, id string) map[string]any {
	t.Helper()
	c, err := db.NewContainer(container)
	require.NoError(t, err)
	resp, err := c.ReadItem(t.Context(), azcosmos.NewPartitionKeyString(partition), id, nil)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(resp.Value, &m))
	return m
}

// fields returns the item's field names, without Cosmos's own.
func fields(m map[string]any) []string {
	var out []string
	for k := range maps.Keys(m) {
		if !strings.HasPrefix(k, "_") {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// The 2024-10 account layout is rp-cosmos.bicep's at 0195ac565.
func TestLayout2024_10(t *testing.T) {
	_, db := standIn(t, testenv.Layout2024, 10*time.Second)
	want := map[string]struct {
		path string
		ttl  int32
	}{
		"Subscriptions": {"/id", -1}, "Operations": {"/partitionKey", 604800}, "Resources": {"/partitionKey", -1},
		"Billing": {"/partitionKey", -1}, "Locks": {"/id", 10}, "Leases": {"/id", 0},
	}
	for name, w := range want {
		c, err := db.NewContainer(name)
		require.NoError(t, err)
		resp, err := c.Read(t.Context(), nil)
		require.NoError(t, err, name)
		p := resp.ContainerProperties
		require.Equal(t, []string{w.path}, p.PartitionKeyDefinition.Paths, name)
		if w.ttl == 0 {
			require.Nil(t, p.DefaultTimeToLive, name)
		} else {
			require.Equal(t, w.ttl, *p.DefaultTimeToLive, name)
		}
	}
}

// A create, a node pool create, a node pool delete that cancels it: the
// items are those ARO-HCP's frontend at 07deb7918 wrote (the round trip
// against it recorded them).
func TestRequest2024_10Items(t *testing.T) {
	fe, db := standIn(t, testenv.Layout2024, 10*time.Second)
	ctx := t.Context()
	at := time.Date(2026, 12, 7, 17, 57, 9, 0, time.UTC)
	c, err := fe.Request(ctx, frontend.Request{Method: http.MethodPut, Key: cluster, InternalID: "/api/clusters_mgmt/v1/clusters/D56D6A37",
		TenantID: "tenant", ClientID: "client", NotificationURI: "https://arm.example/notify",
		SystemData: &frontend.SystemData{CreatedBy: "me@example.com", CreatedByType: "User", CreatedAt: &at},
		Tags:       map[string]string{"team": "rt"}})
	require.NoError(t, err)
	require.Equal(t, "Create", c.Request)
	require.Regexp(t, uuidRE, c.Operation)
	require.Regexp(t, uuidRE, c.Resource)

	op := raw(t, db, "Operations", "workaround", c.Operation)
	require.Equal(t, []string{"clientId", "externalId", "id", "internalId", "lastTransitionTime", "notificationUri", "operationId",
		"partitionKey", "request", "startTime", "status", "tenantId"}, fields(op))
	require.Equal(t, "workaround", op["partitionKey"])
	require.Equal(t, "/api/clusters_mgmt/v1/clusters/d56d6a37", op["internalId"], "lowercased, as the frontend's InternalID")
	require.Equal(t, cluster, op["externalId"])
	require.Equal(t, "/subscriptions/"+sub+"/providers/Microsoft.RedHatOpenShift/locations/eastus/hcpOperationsStatus/"+c.Operation, op["operationId"])
	require.Equal(t, "Accepted", op["status"])
	require.Regexp(t, nanos, op["startTime"])
	require.Equal(t, op["startTime"], op["lastTransitionTime"])
	require.NotContains(t, op, "ttl", "the container's default TTL applies")

	res := raw(t, db, "Resources", strings.ToLower(sub), c.Resource)
	require.Equal(t, []string{"activeOperationId", "id", "internalId", "key", "partitionKey", "provisioningState", "systemData", "tags"}, fields(res))
	require.Equal(t, strings.ToLower(sub), res["partitionKey"])
	require.Equal(t, cluster, res["key"])
	require.Equal(t, c.Operation, res["activeOperationId"])
	require.Equal(t, "Accepted", res["provisioningState"])
	require.Equal(t, map[string]any{"createdBy": "me@example.com", "createdByType": "User", "createdAt": "2026-12-07T17:57:09Z"}, res["systemData"])

	// The cluster is created; its node pool is named under the cluster's
	// href, and a PUT of it while its create runs is refused.
	require.NoError(t, fe.PutResource(ctx, frontend.Resource{ID: c.Resource, PartitionKey: sub, Key: cluster,
		InternalID: "/api/clusters_mgmt/v1/clusters/d56d6a37", ProvisioningState: "Succeeded"}))
	np, err := fe.Request(ctx, frontend.Request{Method: http.MethodPut, Key: pool, TenantID: "tenant"})
	require.NoError(t, err)
	require.Equal(t, "/api/clusters_mgmt/v1/clusters/d56d6a37/node_pools/np1", raw(t, db, "Operations", "workaround", np.Operation)["internalId"])
	_, err = fe.Request(ctx, frontend.Request{Method: http.MethodPut, Key: pool})
	requireAnswer(t, err, http.StatusConflict, "Cannot update resource while resource is accepted")

	// Its DELETE cancels the create, with no error, and starts Deleting.
	before := raw(t, db, "Operations", "workaround", np.Operation)
	time.Sleep(10 * time.Millisecond)
	d, err := fe.Request(ctx, frontend.Request{Method: http.MethodDelete, Key: strings.ToUpper(pool[:14]) + pool[14:]})
	require.NoError(t, err)
	require.Equal(t, np.Operation, d.Canceled)
	canceled := raw(t, db, "Operations", "workaround", np.Operation)
	require.Equal(t, "Canceled", canceled["status"])
	require.NotContains(t, canceled, "error", "Canceled without an error")
	require.NotEqual(t, before["lastTransitionTime"], canceled["lastTransitionTime"])
	del := raw(t, db, "Operations", "workaround", d.Operation)
	require.Equal(t, "Deleting", del["status"])
	require.Equal(t, "Delete", del["request"])
	res = raw(t, db, "Resources", strings.ToLower(sub), np.Resource)
	require.Equal(t, "Deleting", res["provisioningState"])
	require.Equal(t, d.Operation, res["activeOperationId"])
	require.Equal(t, strings.ToUpper(pool[:14])+pool[14:], res["key"], "the URL's spelling of the key")
	_, err = fe.Request(ctx, frontend.Request{Method: http.MethodDelete, Key: pool})
	requireAnswer(t, err, http.StatusConflict, "Resource is already deleting")
	require.Empty(t, lockItems(t, db), "every lock released")
}

// What the 2024-10 frontend refused, the stand-in refuses, writing nothing.
func TestRequest2024_10Refusals(t *testing.T) {
	fe, db := standIn(t, testenv.Layout2024, 10*time.Second)
	ctx := t.Context()
	for _, tc := range []struct {
		name   string
		r      frontend.Request
		status int
	}{
		{"an aro_hcp internalId", frontend.Request{Method: http.MethodPut, Key: cluster, InternalID: "/api/aro_hcp/v1alpha1/clusters/c1"}, 500},
		{"a node pool of no cluster", frontend.Request{Method: http.MethodPut, Key: pool}, 500},
		{"an external auth", frontend.Request{Method: http.MethodPut, Key: cluster + "/externalAuths/ea"}, 404},
		{"a PATCH creating", frontend.Request{Method: http.MethodPatch, Key: cluster}, 404},
		{"a DELETE of nothing", frontend.Request{Method: http.MethodDelete, Key: cluster}, 204},
	} {
		_, err := fe.Request(ctx, tc.r)
		var re *frontend.RequestError
		require.ErrorAs(t, err, &re, tc.name)
		require.Equal(t, tc.status, re.Status, tc.name)
	}
	// An item it could not read: an aro_hcp internalId.
	other := "/subscriptions/" + sub + "/resourceGroups/rg/providers/Microsoft.RedHatOpenShift/hcpOpenShiftClusters/today"
	require.NoError(t, fe.PutResource(ctx, frontend.Resource{ID: "today", PartitionKey: sub, Key: other,
		InternalID: "/api/aro_hcp/v1alpha1/clusters/today", ProvisioningState: "Succeeded"}))
	for _, m := range []string{http.MethodPut, http.MethodDelete} {
		_, err := fe.Request(ctx, frontend.Request{Method: m, Key: other})
		requireAnswer(t, err, http.StatusInternalServerError, "Invalid InternalID")
	}
	require.Equal(t, "Succeeded", raw(t, db, "Resources", strings.ToLower(sub), "today")["provisioningState"])
	today, err := frontend.New(testenv.SharedCosmos(t).Endpoint, testenv.SharedCosmos(t).Key, db.ID())
	require.NoError(t, err)
	_, err = today.Request(ctx, frontend.Request{Method: http.MethodPut, Key: cluster, InternalID: "/api/clusters_mgmt/v1/clusters/c1"})
	require.ErrorContains(t, err, "PutOperation")
	for _, c := range []string{"Operations", "Locks"} {
		require.Zero(t, count(t, db, c), c)
	}
	require.Equal(t, 1, count(t, db, "Resources"), "the item written in today's shape alone")
}

// The lock: its item names the host and the container's TTL while a
// request holds it; a request waits for another holder up to that TTL,
// then answers 409.
func TestRequest2024_10Lock(t *testing.T) {
	fe, db := standIn(t, testenv.Layout2024, 2*time.Second)
	ctx := t.Context()
	other, err := frontend.New(testenv.SharedCosmos(t).Endpoint, testenv.SharedCosmos(t).Key, db.ID())
	require.NoError(t, err)
	l, ok, err := other.TryLock(ctx, sub, "someone")
	require.NoError(t, err)
	require.True(t, ok)
	renewing, stop := context.WithCancel(ctx)
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		for testenv.Sleep(renewing, 500*time.Millisecond) {
			if next, err := other.Renew(ctx, l); err == nil {
				l = next
			}
		}
	}()
	started := time.Now()
	_, err = fe.Request(ctx, frontend.Request{Method: http.MethodPut, Key: cluster, InternalID: "/api/clusters_mgmt/v1/clusters/c1"})
	requireAnswer(t, err, http.StatusConflict, "Failed to acquire lock")
	require.InDelta(t, 2, time.Since(started).Seconds(), 0.5, "it waits the container's TTL")
	require.Zero(t, count(t, db, "Operations"))
	stop()
	<-renewed
	require.NoError(t, other.Unlock(ctx, l))

	held, ok, err := fe.TryLock(ctx, sub, "host")
	require.NoError(t, err)
	require.True(t, ok)
	item := raw(t, db, "Locks", strings.ToLower(sub), strings.ToLower(sub))
	require.Equal(t, []string{"id", "owner", "ttl"}, fields(item))
	require.EqualValues(t, 2, item["ttl"])
	// Renewal upserts with If-Match: an item that expired comes back.
	time.Sleep(3500 * time.Millisecond)
	held, err = fe.Renew(ctx, held)
	require.NoError(t, err)
	require.Len(t, lockItems(t, db), 1)
	require.NoError(t, fe.Unlock(ctx, held))
}

// In the 2024-10 layout a billing item carries its partition key,
// partitionKey, beside subscriptionId.
func TestBillingInEitherLayout(t *testing.T) {
	for _, layout := range []testenv.Layout{testenv.LayoutCurrent, testenv.Layout2024} {
		t.Run(layout.String(), func(t *testing.T) {
			fe, db := standIn(t, layout, 10*time.Second)
			require.NoError(t, fe.PutBilling(t.Context(), frontend.Billing{ID: "b1", SubscriptionID: sub, ResourceID: cluster,
				CreationTime: time.Now().UTC()}))
			item := raw(t, db, "Billing", strings.ToLower(sub), "b1")
			if layout == testenv.Layout2024 {
				require.Equal(t, strings.ToLower(sub), item["partitionKey"])
			} else {
				require.NotContains(t, item, "partitionKey")
			}
			items, err := fe.BillingItems(t.Context(), sub)
			require.NoError(t, err)
			require.Len(t, items, 1)
		})
	}
}

func requireAnswer(t *testing.T, err error, status int, message string) {
	t.Helper()
	var re *frontend.RequestError
	require.True(t, errors.As(err, &re), "%v (%T)", err, err)
	require.Equal(t, status, re.Status)
	require.Contains(t, re.Message, message)
}

func count(t *testing.T, db *azcosmos.DatabaseClient, container string) int {
	t.Helper()
	c, err := db.NewContainer(container)
	require.NoError(t, err)
	n := 0
	pager := c.NewQueryItemsPager("SELECT * FROM c", azcosmos.NewPartitionKey(), nil)
	for pager.More() {
		page, err := pager.NextPage(context.Background())
		require.NoError(t, err)
		n += len(page.Items)
	}
	return n
}

func lockItems(t *testing.T, db *azcosmos.DatabaseClient) []string {
	t.Helper()
	c, err := db.NewContainer("Locks")
	require.NoError(t, err)
	var ids []string
	pager := c.NewQueryItemsPager("SELECT c.id FROM c", azcosmos.NewPartitionKey(), nil)
	for pager.More() {
		page, err := pager.NextPage(context.Background())
		require.NoError(t, err)
		for _, raw := range page.Items {
			ids = append(ids, string(raw))
		}
	}
	return ids
}
