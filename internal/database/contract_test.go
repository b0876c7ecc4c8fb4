package database_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/internal/database/databasetesting"
	"github.com/opstatus/opstatus/internal/testenv"
)

// store is one DBClient implementation, with the frontend's way of writing
// items and a way to read them back as stored.
type store struct {
	database.DBClient
	// put stores body, any JSON object, as an item of container
	// (operations or resources) in the partition its partitionKey names,
	// without an etag check.
	put func(t *testing.T, container, body string)
	// raw returns an item of container as stored, or nil when there is
	// none: an operation in subscriptionID's partition or in the fixed one.
	raw func(t *testing.T, container, subscriptionID, id string) map[string]any
}

const (
	operations = "Operations"
	resources  = "Resources"
)

// memoryStore is the in-memory DBClient.
func memoryStore(t *testing.T, lockTTL time.Duration, partition database.OperationsPartition) store {
	mem := databasetesting.NewMemoryClient(lockTTL)
	mem.OperationsPartition = partition
	return store{
		DBClient: mem,
		put: func(t *testing.T, container, body string) {
			if container == operations {
				mem.PutRawOperation([]byte(body))
			} else {
				mem.PutRawResource([]byte(body))
			}
		},
		raw: func(t *testing.T, container, subscriptionID, id string) map[string]any {
			body := mem.RawResource(subscriptionID, id)
			if container == operations {
				body = mem.RawOperation(subscriptionID, id)
			}
			if body == nil {
				return nil
			}
			var item map[string]any
			require.NoError(t, json.Unmarshal(body, &item))
			return item
		},
	}
}

// cosmosStore is a CosmosClient of a database of the test's own on the
// shared Cosmos test server, which lists with the details as the in-memory
// client does. Its Locks container has lockTTL as its DefaultTimeToLive:
// none when zero, -1 when negative.
func cosmosStore(t *testing.T, lockTTL time.Duration, partition database.OperationsPartition) store {
	ctx := t.Context()
	cosmos := testenv.SharedCosmos(t)
	name := testenv.DatabaseName(t)
	var ttl *int32
	if lockTTL != 0 {
		seconds := max(int32(lockTTL/time.Second), -1)
		ttl = &seconds
	}
	require.NoError(t, testenv.CreateDatabase(ctx, cosmos.Endpoint, cosmos.Key, name,
		testenv.ContainerSpec{Name: operations, PartitionKeyPath: "/partitionKey"},
		testenv.ContainerSpec{Name: resources, PartitionKeyPath: "/partitionKey"},
		testenv.ContainerSpec{Name: "Locks", PartitionKeyPath: "/id", DefaultTTL: ttl},
	))
	cfg := cosmosConfig(t, name)
	cfg.OperationsPartition = partition
	fe, err := frontend.New(cosmos.Endpoint, cosmos.Key, name)
	require.NoError(t, err)
	fe.OperationsPartition = string(partition)
	client, err := testenv.NewCosmosClient(cosmos.Endpoint, cosmos.Key)
	require.NoError(t, err)
	return store{
		DBClient: newClient(t, cfg),
		put: func(t *testing.T, container, body string) {
			c, err := client.NewContainer(name, container)
			require.NoError(t, err)
			_, err = c.UpsertItem(t.Context(), partitionKeyOf(t, body), []byte(body), nil)
			require.NoError(t, err)
		},
		raw: func(t *testing.T, container, subscriptionID, id string) map[string]any {
			read := fe.Resource
			if container == operations {
				read = fe.Operation
			}
			item, err := read(t.Context(), subscriptionID, id)
			require.NoError(t, err)
			return item
		},
	}
}

// partitionKeyOf returns the partition key of an item, from its
// partitionKey, of whatever JSON type.
func partitionKeyOf(t *testing.T, body string) azcosmos.PartitionKey {
	t.Helper()
	var item map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &item))
	value, ok := item["partitionKey"]
	require.True(t, ok, "an item of the contract has a partitionKey: %s", body)
	switch v := value.(type) {
	case string:
		return azcosmos.NewPartitionKeyString(v)
	case float64:
		return azcosmos.NewPartitionKeyNumber(v)
	case bool:
		return azcosmos.NewPartitionKeyBool(v)
	case nil:
		return azcosmos.NullPartitionKey
	}
	t.Fatalf("partitionKey %v cannot be a partition key", value)
	return azcosmos.PartitionKey{}
}

// fixed is ARO-HCP's frontend's one Operations partition (2024-10).
const fixed = database.OperationsPartition("workaround")

const (
	sub        = "sub1"
	otherSub   = "sub2"
	clusterKey = "/subscriptions/sub1/resourceGroups/rg/providers/Microsoft.RedHatOpenShift/hcpOpenShiftClusters/c1"
	clusterCS  = "/api/clusters_mgmt/v1/clusters/c1"
)

// fields are the fields of an item, as JSON values.
type fields map[string]any

// absent, as the value of a field, leaves the field out of the item.
var absent = &struct{}{}

// item returns base with over set over it, as JSON.
func item(base, over fields) string {
	all := maps.Clone(base)
	maps.Copy(all, over)
	for k, v := range all {
		if v == absent {
			delete(all, k)
		}
	}
	b, err := json.Marshal(all)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// operation is an operation item of sub as the frontend writes it, with
// over set over it.
func operation(id string, over fields) string {
	return item(fields{"id": id, "partitionKey": sub, "request": "Create", "status": "Accepted"}, over)
}

// resource is a resource item of sub as the frontend writes it, with over
// set over it.
func resource(id, key string, over fields) string {
	return item(fields{"id": id, "partitionKey": sub, "key": key, "provisioningState": "Succeeded"}, over)
}

// requireNoSentinel requires err to be an error that none of the package's
// sentinels matches, as a 400 from Cosmos DB is.
func requireNoSentinel(t *testing.T, err error) {
	t.Helper()
	require.Error(t, err)
	for _, sentinel := range []error{database.ErrNotFound, database.ErrConflict, database.ErrPreconditionFailed,
		database.ErrMalformed, database.ErrDuplicateKey, database.ErrUnavailable, database.ErrRefused} {
		require.NotErrorIs(t, err, sentinel)
	}
}

func getOperation(t *testing.T, s store, id string) *database.Operation {
	t.Helper()
	op, err := s.GetOperation(t.Context(), sub, id)
	require.NoError(t, err)
	return op
}

func getResource(t *testing.T, s store, key string) *database.Resource {
	t.Helper()
	r, err := s.GetResource(t.Context(), sub, key)
	require.NoError(t, err)
	return r
}

// listPending lists the pending operations, and counts the malformed ones.
// Every item listed has its last write, which is then cleared for the
// comparisons: it is the store's clock, not the test's.
func listPending(t *testing.T, s store) (listed []database.PendingOperation, malformed int) {
	t.Helper()
	listed, malformed, noSub := listPendingAll(t, s)
	require.Empty(t, noSub, "operations whose subscription cannot be told")
	return listed, malformed
}

// listPendingAll is listPending that also returns the operations listed
// with ErrNoSubscription, their last write cleared too.
func listPendingAll(t *testing.T, s store) (listed []database.PendingOperation, malformed int, noSub []database.PendingOperation) {
	t.Helper()
	for p, err := range s.PendingOperations(t.Context()) {
		if errors.Is(err, database.ErrNoSubscription) {
			require.Empty(t, p.SubscriptionID)
			p.LastWrite = time.Time{}
			noSub = append(noSub, p)
			continue
		}
		if err != nil {
			require.ErrorIs(t, err, database.ErrMalformed)
			malformed++
			continue
		}
		require.WithinDuration(t, time.Now(), p.LastWrite, time.Hour, "%s/%s has no _ts", p.PartitionKey, p.ID)
		p.LastWrite = time.Time{}
		listed = append(listed, p)
	}
	return listed, malformed, noSub
}

// contractCase is a behaviour both DBClients have: run on a store holding
// operations and resources.
type contractCase struct {
	name string
	// lockTTL is the Locks container's DefaultTimeToLive; zero for none.
	lockTTL time.Duration
	// partition is where the Operations items are; zero: by subscription.
	partition  database.OperationsPartition
	operations []string
	resources  []string
	run        func(t *testing.T, s store)
}

var contractCases = []contractCase{
	{
		name: "GetOperation reads the item in the partition of the lowercased subscription",
		operations: []string{operation("op1", fields{"startTime": "2026-01-02T03:04:05Z", "internalId": clusterCS,
			"externalId": clusterKey, "notificationUri": "https://arm.example/n"})},
		run: func(t *testing.T, s store) {
			op, err := s.GetOperation(t.Context(), strings.ToUpper(sub), "op1")
			require.NoError(t, err)
			require.Equal(t, "op1", op.ID)
			require.Equal(t, sub, op.PartitionKey)
			require.Equal(t, sub, op.SubscriptionID(), "by subscription, the partition key is the subscription")
			require.Equal(t, arm.RequestCreate, op.Request)
			require.Equal(t, arm.ProvisioningStateAccepted, op.Status)
			require.Equal(t, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), op.StartTime)
			require.Equal(t, clusterCS, op.InternalID)
			require.Equal(t, "https://arm.example/n", op.NotificationURI)
			require.Equal(t, s.raw(t, operations, sub, "op1")["_etag"], string(op.ETag))
			require.WithinDuration(t, time.Now(), op.Timestamp, time.Minute)
		},
	},
	{
		name:       "GetOperation of a missing item is ErrNotFound",
		operations: []string{operation("op1", nil)},
		run: func(t *testing.T, s store) {
			for _, ids := range [][2]string{{otherSub, "op1"}, {sub, "OP1"}, {sub, "op2"}} {
				_, err := s.GetOperation(t.Context(), ids[0], ids[1])
				require.ErrorIs(t, err, database.ErrNotFound, "%s/%s", ids[0], ids[1])
			}
		},
	},
	{
		name: "GetOperation of an item that does not decode is ErrMalformed",
		operations: []string{
			operation("status", fields{"status": 5}),
			operation("start", fields{"startTime": "yesterday"}),
			operation("error", fields{"error": "boom"}),
		},
		run: func(t *testing.T, s store) {
			for _, id := range []string{"status", "start", "error"} {
				_, err := s.GetOperation(t.Context(), sub, id)
				require.ErrorIs(t, err, database.ErrMalformed, id)
			}
		},
	},
	{
		name:       "ReplaceOperation writes while the etag matches and returns the item as written",
		operations: []string{operation("op1", nil)},
		run: func(t *testing.T, s store) {
			op := getOperation(t, s, "op1")
			op.Status = arm.ProvisioningStateFailed
			op.Error = &arm.CloudErrorBody{Code: "OCM3001", Message: "boom"}
			written, err := s.ReplaceOperation(t.Context(), op)
			require.NoError(t, err)
			require.NotEqual(t, op.ETag, written.ETag)
			require.Equal(t, arm.ProvisioningStateFailed, written.Status)
			require.Equal(t, op.Error, written.Error)
			raw := s.raw(t, operations, sub, "op1")
			require.Equal(t, "Failed", raw["status"])
			require.Equal(t, raw["_etag"], string(written.ETag))

			read := getOperation(t, s, "op1")
			require.Equal(t, written.ETag, read.ETag)
			require.Equal(t, arm.ProvisioningStateFailed, read.Status)
		},
	},
	{
		name:       "ReplaceOperation with a stale etag is ErrPreconditionFailed",
		operations: []string{operation("op1", nil)},
		run: func(t *testing.T, s store) {
			first, second := getOperation(t, s, "op1"), getOperation(t, s, "op1")
			first.Status = arm.ProvisioningStateProvisioning
			_, err := s.ReplaceOperation(t.Context(), first)
			require.NoError(t, err)
			second.Status = arm.ProvisioningStateFailed
			_, err = s.ReplaceOperation(t.Context(), second)
			require.ErrorIs(t, err, database.ErrPreconditionFailed)
			require.Equal(t, "Provisioning", s.raw(t, operations, sub, "op1")["status"])
		},
	},
	{
		name:       "ReplaceOperation of a missing item is ErrNotFound, whatever its etag",
		operations: []string{operation("op1", nil)},
		run: func(t *testing.T, s store) {
			op := getOperation(t, s, "op1")
			gone := *op
			gone.ID = "gone"
			_, err := s.ReplaceOperation(t.Context(), &gone)
			require.ErrorIs(t, err, database.ErrNotFound)
			elsewhere := *op
			elsewhere.PartitionKey = otherSub
			_, err = s.ReplaceOperation(t.Context(), &elsewhere)
			require.ErrorIs(t, err, database.ErrNotFound)
			require.Nil(t, s.raw(t, operations, sub, "gone"))
			require.Nil(t, s.raw(t, operations, otherSub, "op1"))
		},
	},
	{
		name:       "ReplaceOperation without an etag fails before it writes",
		operations: []string{operation("op1", nil)},
		run: func(t *testing.T, s store) {
			_, err := s.ReplaceOperation(t.Context(), &database.Operation{ID: "op1", PartitionKey: sub,
				Request: arm.RequestCreate, Status: arm.ProvisioningStateFailed})
			requireNoSentinel(t, err)
			require.ErrorContains(t, err, "no etag")
			require.Equal(t, "Accepted", s.raw(t, operations, sub, "op1")["status"])
		},
	},
	{
		// The request goes to the lowercased partition; Cosmos DB answers
		// 400 to a body whose partitionKey differs.
		name:       "ReplaceOperation whose partitionKey is not lowercase is refused for good, a 400 of the Operations container",
		operations: []string{operation("op1", nil)},
		run: func(t *testing.T, s store) {
			op := getOperation(t, s, "op1")
			op.PartitionKey = strings.ToUpper(sub)
			op.Status = arm.ProvisioningStateFailed
			_, err := s.ReplaceOperation(t.Context(), op)
			require.ErrorIs(t, err, database.ErrRefused)
			var refused *database.RefusedError
			require.ErrorAs(t, err, &refused)
			require.Equal(t, operations, refused.Container)
			require.Equal(t, http.StatusBadRequest, refused.StatusCode)
			require.Equal(t, "BadRequest", refused.Code)
			require.Contains(t, refused.Message, "PartitionKey extracted from document doesn't match")
			raw := s.raw(t, operations, sub, "op1")
			require.Equal(t, "Accepted", raw["status"])
			require.Equal(t, sub, raw["partitionKey"])
		},
	},
	{
		name: "fields opstatus does not know, and an error it did not change, survive a write",
		operations: []string{operation("op1", fields{"status": "Failed", "notificationUri": "https://arm.example/n",
			"futureField": fields{"a": 1}, "ttl": 3600,
			"error": fields{"code": "Conflict", "message": "m", "innererror": fields{"trace": "t"},
				"details": []fields{{"code": "d", "message": "dm", "additionalInfo": []fields{{"type": "x"}}}}}})},
		run: func(t *testing.T, s store) {
			op := getOperation(t, s, "op1")
			op.NotificationURI = ""
			_, err := s.ReplaceOperation(t.Context(), op)
			require.NoError(t, err)
			raw := s.raw(t, operations, sub, "op1")
			require.Equal(t, map[string]any{"a": 1.0}, raw["futureField"])
			require.Equal(t, 3600.0, raw["ttl"])
			require.NotContains(t, raw, "notificationUri")
			stored, err := json.Marshal(raw["error"])
			require.NoError(t, err)
			require.JSONEq(t, `{"code":"Conflict","message":"m","innererror":{"trace":"t"},`+
				`"details":[{"code":"d","message":"dm","additionalInfo":[{"type":"x"}]}]}`, string(stored))
		},
	},
	{
		name: "PendingOperations lists the operations not finished or not yet notified",
		operations: []string{
			operation("accepted", fields{"startTime": "2026-12-01T12:00:00Z", "internalId": clusterCS}),
			operation("provisioning", fields{"status": "Provisioning"}),
			operation("updating", fields{"status": "Updating", "request": "Update"}),
			operation("deleting", fields{"partitionKey": otherSub, "status": "Deleting", "request": "Delete"}),
			operation("succeeded", fields{"status": "Succeeded"}),
			operation("failed", fields{"status": "Failed"}),
			operation("canceled", fields{"status": "Canceled"}),
			operation("to-notify", fields{"status": "Succeeded", "notificationUri": "https://arm.example/n"}),
			operation("notified", fields{"status": "Failed", "notificationUri": ""}),
			operation("uri-not-a-string", fields{"status": "Succeeded", "notificationUri": 5}),
			operation("uri-null", fields{"status": "Canceled", "notificationUri": nil}),
			// A missing status leaves the filter undefined, which lists
			// nothing; any other value that is not a terminal state lists.
			operation("no-status", fields{"status": absent}),
			operation("no-status-to-notify", fields{"status": absent, "notificationUri": "https://arm.example/n"}),
			operation("null-status", fields{"status": nil}),
			operation("number-status", fields{"status": 5}),
			operation("lowercase-status", fields{"status": "succeeded"}),
			operation("ill-typed-details", fields{"request": 7, "startTime": "yesterday", "internalId": fields{"a": 1}}),
		},
		run: func(t *testing.T, s store) {
			listed, malformed := listPending(t, s)
			require.Zero(t, malformed)
			again, _ := listPending(t, s)
			require.Equal(t, listed, again, "the same order from one listing to the next")
			slices.SortFunc(listed, func(a, b database.PendingOperation) int {
				return strings.Compare(a.PartitionKey+"/"+a.ID, b.PartitionKey+"/"+b.ID)
			})
			pending := func(id, status, request string) database.PendingOperation {
				return database.PendingOperation{ID: id, PartitionKey: sub, SubscriptionID: sub, Status: status, Request: request}
			}
			accepted := pending("accepted", "Accepted", "Create")
			accepted.StartTime, accepted.InternalID = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC), clusterCS
			deleting := pending("deleting", "Deleting", "Delete")
			deleting.PartitionKey, deleting.SubscriptionID = otherSub, otherSub
			require.Equal(t, []database.PendingOperation{
				accepted,
				pending("ill-typed-details", "Accepted", ""),
				pending("lowercase-status", "succeeded", "Create"),
				pending("no-status-to-notify", "", "Create"),
				pending("null-status", "", "Create"),
				pending("number-status", "", "Create"),
				pending("provisioning", "Provisioning", "Create"),
				pending("to-notify", "Succeeded", "Create"),
				pending("updating", "Updating", "Update"),
				deleting,
			}, listed)
		},
	},
	{
		name: "PendingOperations reports each listed item it cannot read, and goes on",
		operations: []string{
			operation("first", nil),
			operation("empty-partition", fields{"partitionKey": ""}),
			operation("number-partition", fields{"partitionKey": 5}),
			operation("finished-number-partition", fields{"partitionKey": 6, "status": "Succeeded"}),
			operation("last", nil),
		},
		run: func(t *testing.T, s store) {
			listed, malformed := listPending(t, s)
			require.Equal(t, 2, malformed)
			var ids []string
			for _, p := range listed {
				ids = append(ids, p.ID)
			}
			require.ElementsMatch(t, []string{"first", "last"}, ids)
		},
	},
	{
		name: "GetResource finds the item of the subscription by key, ignoring case",
		resources: []string{
			resource("r1", clusterKey, fields{"provisioningState": "Deleting", "activeOperationId": "op1",
				"internalId": clusterCS, "systemData": fields{"createdBy": "me"}}),
			resource("r2", clusterKey+"2", nil),
			resource("np1", clusterKey+"/nodePools/np1", nil),
			resource("elsewhere", clusterKey, fields{"partitionKey": otherSub}),
		},
		run: func(t *testing.T, s store) {
			r, err := s.GetResource(t.Context(), strings.ToUpper(sub), strings.ToUpper(clusterKey))
			require.NoError(t, err)
			require.Equal(t, "r1", r.ID)
			require.Equal(t, sub, r.PartitionKey)
			require.Equal(t, clusterKey, r.Key)
			require.Equal(t, clusterCS, r.InternalID)
			require.Equal(t, "op1", r.ActiveOperationID)
			require.Equal(t, arm.ProvisioningStateDeleting, r.ProvisioningState)
			require.JSONEq(t, `{"createdBy":"me"}`, string(r.SystemData))
			require.Equal(t, s.raw(t, resources, sub, "r1")["_etag"], string(r.ETag))

			r, err = s.GetResource(t.Context(), otherSub, clusterKey)
			require.NoError(t, err)
			require.Equal(t, "elsewhere", r.ID, "queries stay in their partition")
			for _, k := range [][2]string{{sub, clusterKey + "/nodePools"}, {sub, clusterKey[:len(clusterKey)-1]}, {"sub3", clusterKey}} {
				_, err = s.GetResource(t.Context(), k[0], k[1])
				require.ErrorIs(t, err, database.ErrNotFound, "%s %s", k[0], k[1])
			}
		},
	},
	{
		name: "GetResource of an item that does not decode is ErrMalformed",
		resources: []string{
			resource("bad", clusterKey, fields{"provisioningState": []int{1}}),
			resource("good", clusterKey+"2", nil),
			resource("key-not-a-string", "", fields{"key": 5}),
		},
		run: func(t *testing.T, s store) {
			_, err := s.GetResource(t.Context(), sub, clusterKey)
			require.ErrorIs(t, err, database.ErrMalformed)
			require.Equal(t, "good", getResource(t, s, clusterKey+"2").ID)
			_, err = s.GetResource(t.Context(), sub, "5")
			require.ErrorIs(t, err, database.ErrNotFound)
		},
	},
	{
		name:      "GetResource of a key that two items share is ErrDuplicateKey",
		resources: []string{resource("a", clusterKey, nil), resource("b", strings.ToUpper(clusterKey), nil)},
		run: func(t *testing.T, s store) {
			_, err := s.GetResource(t.Context(), sub, clusterKey)
			require.ErrorIs(t, err, database.ErrDuplicateKey)
			require.NotErrorIs(t, err, database.ErrMalformed)
			require.ErrorContains(t, err, "2 items share the key")
		},
	},
	{
		// What GetResource cannot return must still be named and deleted:
		// an unreadable parent must not keep its operation from ending.
		name: "ResourceHeads lists the items of the key by id, key, etag and activeOperationId, whatever their other fields",
		resources: []string{
			resource("ill-typed", clusterKey, fields{"provisioningState": []int{1}, "activeOperationId": "op1"}),
			resource("upper", strings.ToUpper(clusterKey), fields{"activeOperationId": fields{"x": 1}, "systemData": "not an object"}),
			resource("no-owner", clusterKey, fields{"internalId": 42}),
			resource("null-owner", clusterKey, fields{"activeOperationId": nil}),
			resource("child", clusterKey+"/nodePools/np1", fields{"activeOperationId": "op1"}),
			resource("sibling", clusterKey+"x", nil),
			resource("key-not-a-string", "", fields{"key": 5}),
			resource("elsewhere", clusterKey, fields{"partitionKey": otherSub}),
		},
		run: func(t *testing.T, s store) {
			ctx := t.Context()
			heads, err := s.ResourceHeads(ctx, strings.ToUpper(sub), strings.ToLower(clusterKey))
			require.NoError(t, err)
			slices.SortFunc(heads, func(a, b database.ResourceHead) int { return strings.Compare(a.ID, b.ID) })
			head := func(id, key, owner string, unreadable bool) database.ResourceHead {
				etag, _ := s.raw(t, resources, sub, id)["_etag"].(string)
				return database.ResourceHead{
					ResourceRef:       database.ResourceRef{ID: id, PartitionKey: sub, Key: key, ETag: azcore.ETag(etag)},
					ActiveOperationID: owner, OwnerUnreadable: unreadable,
				}
			}
			require.Equal(t, []database.ResourceHead{
				head("ill-typed", clusterKey, "op1", false),
				head("no-owner", clusterKey, "", false),
				head("null-owner", clusterKey, "", false),
				head("upper", strings.ToUpper(clusterKey), "", true),
			}, heads)
			for _, h := range heads {
				require.NoError(t, s.DeleteResource(ctx, h.ResourceRef))
			}
			heads, err = s.ResourceHeads(ctx, sub, clusterKey)
			require.NoError(t, err)
			require.Empty(t, heads)
			_, err = s.GetResource(ctx, sub, clusterKey)
			require.ErrorIs(t, err, database.ErrNotFound)
			for _, id := range []string{"child", "sibling", "key-not-a-string"} {
				require.NotNil(t, s.raw(t, resources, sub, id), id)
			}
			require.NotNil(t, s.raw(t, resources, otherSub, "elsewhere"))
		},
	},
	{
		// A child whose fields do not decode must not keep its parent's
		// delete from finishing.
		name: "ChildResources lists the items below the key by id, key and etag, whatever their other fields",
		resources: []string{
			resource("parent", clusterKey, fields{"provisioningState": "Deleting"}),
			resource("np1", clusterKey+"/nodePools/np1", fields{"provisioningState": 5, "activeOperationId": fields{"x": 1}}),
			resource("np2", clusterKey+"/nodePools/np2", fields{"systemData": "not an object", "tags": 7}),
			resource("np3", strings.ToUpper(clusterKey)+"/nodePools/NP3", nil),
			resource("grandchild", clusterKey+"/nodePools/np1/machines/m1", nil),
			resource("sibling", clusterKey+"x", fields{"provisioningState": []int{1}}),
			resource("cousin", clusterKey+"2/nodePools/np1", nil),
			resource("elsewhere", clusterKey+"/nodePools/np9", fields{"partitionKey": otherSub}),
		},
		run: func(t *testing.T, s store) {
			ctx := t.Context()
			children, err := s.ChildResources(ctx, strings.ToUpper(sub), strings.ToUpper(clusterKey))
			require.NoError(t, err)
			slices.SortFunc(children, func(a, b database.ResourceRef) int { return strings.Compare(a.ID, b.ID) })
			want := map[string]string{
				"grandchild": clusterKey + "/nodePools/np1/machines/m1",
				"np1":        clusterKey + "/nodePools/np1",
				"np2":        clusterKey + "/nodePools/np2",
				"np3":        strings.ToUpper(clusterKey) + "/nodePools/NP3",
			}
			require.Len(t, children, len(want))
			for _, c := range children {
				etag, _ := s.raw(t, resources, sub, c.ID)["_etag"].(string)
				require.Equal(t, database.ResourceRef{ID: c.ID, PartitionKey: sub, Key: want[c.ID], ETag: azcore.ETag(etag)}, c)
				require.NoError(t, s.DeleteResource(ctx, c))
			}
			children, err = s.ChildResources(ctx, sub, clusterKey)
			require.NoError(t, err)
			require.Empty(t, children)
			require.Equal(t, "parent", getResource(t, s, clusterKey).ID)
			require.NotNil(t, s.raw(t, resources, sub, "sibling"))
			require.NotNil(t, s.raw(t, resources, sub, "cousin"))
			require.NotNil(t, s.raw(t, resources, otherSub, "elsewhere"))
		},
	},
	{
		name: "ReplaceResource writes while the etag matches and keeps the fields opstatus does not know",
		resources: []string{resource("r1", clusterKey, fields{"provisioningState": "Deleting", "activeOperationId": "op1",
			"systemData": fields{"createdBy": "me"}, "properties": fields{"x": "y"}})},
		run: func(t *testing.T, s store) {
			ctx := t.Context()
			r, stale := getResource(t, s, clusterKey), getResource(t, s, clusterKey)
			r.ProvisioningState, r.ActiveOperationID = arm.ProvisioningStateSucceeded, ""
			written, err := s.ReplaceResource(ctx, r)
			require.NoError(t, err)
			require.NotEqual(t, r.ETag, written.ETag)
			require.Equal(t, arm.ProvisioningStateSucceeded, written.ProvisioningState)
			raw := s.raw(t, resources, sub, "r1")
			require.Equal(t, raw["_etag"], string(written.ETag))
			require.Equal(t, "Succeeded", raw["provisioningState"])
			require.NotContains(t, raw, "activeOperationId")
			require.Equal(t, map[string]any{"x": "y"}, raw["properties"])
			require.Equal(t, map[string]any{"createdBy": "me"}, raw["systemData"])

			stale.ProvisioningState = arm.ProvisioningStateFailed
			_, err = s.ReplaceResource(ctx, stale)
			require.ErrorIs(t, err, database.ErrPreconditionFailed)
			gone := *written
			gone.ID = "gone"
			_, err = s.ReplaceResource(ctx, &gone)
			require.ErrorIs(t, err, database.ErrNotFound)
			noETag := *written
			noETag.ETag = ""
			_, err = s.ReplaceResource(ctx, &noETag)
			requireNoSentinel(t, err)
			require.Equal(t, raw, s.raw(t, resources, sub, "r1"), "no write but the first")
		},
	},
	{
		name:      "DeleteResource deletes while the etag matches",
		resources: []string{resource("r1", clusterKey, nil), resource("r2", clusterKey+"2", nil)},
		run: func(t *testing.T, s store) {
			ctx := t.Context()
			read := getResource(t, s, clusterKey)
			read.ProvisioningState = arm.ProvisioningStateDeleting
			written, err := s.ReplaceResource(ctx, read)
			require.NoError(t, err)
			require.ErrorIs(t, s.DeleteResource(ctx, read.Ref()), database.ErrPreconditionFailed)
			require.NotNil(t, s.raw(t, resources, sub, "r1"))
			elsewhere := written.Ref()
			elsewhere.PartitionKey = otherSub
			require.ErrorIs(t, s.DeleteResource(ctx, elsewhere), database.ErrNotFound)

			require.NoError(t, s.DeleteResource(ctx, written.Ref()))
			require.Nil(t, s.raw(t, resources, sub, "r1"))
			_, err = s.GetResource(ctx, sub, clusterKey)
			require.ErrorIs(t, err, database.ErrNotFound)
			require.ErrorIs(t, s.DeleteResource(ctx, written.Ref()), database.ErrNotFound)

			// An empty If-Match is no condition.
			require.NoError(t, s.DeleteResource(ctx, database.ResourceRef{ID: "r2", PartitionKey: sub, Key: clusterKey + "2"}))
			require.Nil(t, s.raw(t, resources, sub, "r2"))
		},
	},
	{
		name:    "Lock TTL is the Locks container's DefaultTimeToLive",
		lockTTL: 5 * time.Second,
		run: func(t *testing.T, s store) {
			ttl, err := s.Locks().TTL(t.Context())
			require.NoError(t, err)
			require.Equal(t, 5*time.Second, ttl)
		},
	},
	{
		name: "Lock TTL is zero when the Locks container has no DefaultTimeToLive",
		run: func(t *testing.T, s store) {
			ttl, err := s.Locks().TTL(t.Context())
			require.NoError(t, err)
			require.Zero(t, ttl)
		},
	},
	{
		name:    "Lock TTL is zero when the Locks container's DefaultTimeToLive is -1",
		lockTTL: -time.Second,
		run: func(t *testing.T, s store) {
			ttl, err := s.Locks().TTL(t.Context())
			require.NoError(t, err)
			require.Zero(t, ttl)
		},
	},
	{
		name:    "Lock Create, Get, Renew and Delete follow the item and its etag",
		lockTTL: 5 * time.Second,
		run: func(t *testing.T, s store) {
			ctx, locks := t.Context(), s.Locks()
			etag, err := locks.Create(ctx, sub, "a", 5*time.Second)
			require.NoError(t, err)
			require.NotEmpty(t, etag)
			_, err = locks.Create(ctx, sub, "b", 5*time.Second)
			require.ErrorIs(t, err, database.ErrConflict)
			owner, read, err := locks.Get(ctx, sub)
			require.NoError(t, err)
			require.Equal(t, "a", owner)
			require.Equal(t, etag, read)
			_, _, err = locks.Get(ctx, strings.ToUpper(sub))
			require.ErrorIs(t, err, database.ErrNotFound)

			renewed, err := locks.Renew(ctx, sub, "c", 5*time.Second, etag)
			require.NoError(t, err)
			require.NotEqual(t, etag, renewed)
			owner, read, err = locks.Get(ctx, sub)
			require.NoError(t, err)
			require.Equal(t, "c", owner)
			require.Equal(t, renewed, read)
			_, err = locks.Renew(ctx, sub, "a", 5*time.Second, etag)
			require.ErrorIs(t, err, database.ErrPreconditionFailed)
			require.ErrorIs(t, locks.Delete(ctx, sub, etag), database.ErrPreconditionFailed)

			require.NoError(t, locks.Delete(ctx, sub, renewed))
			_, _, err = locks.Get(ctx, sub)
			require.ErrorIs(t, err, database.ErrNotFound)
			_, err = locks.Renew(ctx, sub, "c", 5*time.Second, renewed)
			require.ErrorIs(t, err, database.ErrNotFound)
			_, _, err = locks.Get(ctx, sub)
			require.ErrorIs(t, err, database.ErrNotFound, "a renewal never re-creates the item")
			require.ErrorIs(t, locks.Delete(ctx, sub, renewed), database.ErrNotFound)
			_, err = locks.Create(ctx, sub, "b", 5*time.Second)
			require.NoError(t, err)
		},
	},
	{
		name:    "a lock item expires its ttl, rounded up to whole seconds, after the second of its last write",
		lockTTL: 5 * time.Second,
		run: func(t *testing.T, s store) {
			ctx, locks := t.Context(), s.Locks()
			const ttl = 1100 * time.Millisecond // written as 2 s
			// Early in a second, so that the write's whole second is not
			// far before it.
			now := time.Now()
			time.Sleep(time.Until(now.Truncate(time.Second).Add(time.Second + 50*time.Millisecond)))
			start := time.Now()
			etag, err := locks.Create(ctx, sub, "a", ttl)
			require.NoError(t, err)
			// Alive until the second of the create plus 2 s.
			time.Sleep(time.Until(start.Add(time.Second)))
			etag, err = locks.Renew(ctx, sub, "a", ttl, etag)
			require.NoError(t, err)
			// Alive until the second of the renewal plus 2 s: past the
			// create's expiry, and past the renewal plus 1.1 s.
			time.Sleep(time.Until(start.Add(2300 * time.Millisecond)))
			_, _, err = locks.Get(ctx, sub)
			require.NoError(t, err)

			require.Eventually(t, func() bool {
				_, _, err := locks.Get(ctx, sub)
				return errors.Is(err, database.ErrNotFound)
			}, 3*time.Second, 50*time.Millisecond)
			_, err = locks.Renew(ctx, sub, "a", ttl, etag)
			require.ErrorIs(t, err, database.ErrNotFound)
			_, err = locks.Create(ctx, sub, "b", ttl)
			require.NoError(t, err)
		},
	},
	{
		name: "a lock item does not expire when the Locks container has no DefaultTimeToLive",
		run: func(t *testing.T, s store) {
			ctx, locks := t.Context(), s.Locks()
			etag, err := locks.Create(ctx, sub, "a", time.Second)
			require.NoError(t, err)
			time.Sleep(2100 * time.Millisecond)
			owner, read, err := locks.Get(ctx, sub)
			require.NoError(t, err)
			require.Equal(t, "a", owner)
			require.Equal(t, etag, read)
		},
	},
	{
		name:       "a context that is done fails every call, which writes nothing",
		lockTTL:    5 * time.Second,
		operations: []string{operation("op1", nil)},
		resources:  []string{resource("r1", clusterKey, nil), resource("np1", clusterKey+"/nodePools/np1", nil)},
		run: func(t *testing.T, s store) {
			op := getOperation(t, s, "op1")
			r := getResource(t, s, clusterKey)
			etag, err := s.Locks().Create(t.Context(), sub, "a", 5*time.Second)
			require.NoError(t, err)
			before := map[string]map[string]any{
				"op1": s.raw(t, operations, sub, "op1"),
				"r1":  s.raw(t, resources, sub, "r1"),
				"np1": s.raw(t, resources, sub, "np1"),
			}

			calls := map[string]func(ctx context.Context) error{
				"GetOperation": func(ctx context.Context) error {
					_, err := s.GetOperation(ctx, sub, "op1")
					return err
				},
				"ReplaceOperation": func(ctx context.Context) error {
					_, err := s.ReplaceOperation(ctx, op)
					return err
				},
				"PendingOperations": func(ctx context.Context) error {
					for _, err := range s.PendingOperations(ctx) {
						return err
					}
					return errors.New("nothing listed")
				},
				"GetResource": func(ctx context.Context) error {
					_, err := s.GetResource(ctx, sub, clusterKey)
					return err
				},
				"ResourceHeads": func(ctx context.Context) error {
					_, err := s.ResourceHeads(ctx, sub, clusterKey)
					return err
				},
				"ChildResources": func(ctx context.Context) error {
					_, err := s.ChildResources(ctx, sub, clusterKey)
					return err
				},
				"ReplaceResource": func(ctx context.Context) error {
					_, err := s.ReplaceResource(ctx, r)
					return err
				},
				"DeleteResource": func(ctx context.Context) error { return s.DeleteResource(ctx, r.Ref()) },
				"Lock.TTL": func(ctx context.Context) error {
					_, err := s.Locks().TTL(ctx)
					return err
				},
				"Lock.Create": func(ctx context.Context) error {
					_, err := s.Locks().Create(ctx, otherSub, "a", 5*time.Second)
					return err
				},
				"Lock.Get": func(ctx context.Context) error {
					_, _, err := s.Locks().Get(ctx, sub)
					return err
				},
				"Lock.Renew": func(ctx context.Context) error {
					_, err := s.Locks().Renew(ctx, sub, "a", 5*time.Second, etag)
					return err
				},
				"Lock.Delete": func(ctx context.Context) error { return s.Locks().Delete(ctx, sub, etag) },
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

			require.Equal(t, before, map[string]map[string]any{
				"op1": s.raw(t, operations, sub, "op1"),
				"r1":  s.raw(t, resources, sub, "r1"),
				"np1": s.raw(t, resources, sub, "np1"),
			})
			owner, read, err := s.Locks().Get(t.Context(), sub)
			require.NoError(t, err)
			require.Equal(t, "a", owner)
			require.Equal(t, etag, read)
			_, _, err = s.Locks().Get(t.Context(), otherSub)
			require.ErrorIs(t, err, database.ErrNotFound)
		},
	},
	{
		name: "by subscription, an operation is its partition's when its externalId names that subscription or none",
		operations: []string{operation("op1", fields{"externalId": strings.ToUpper(clusterKey)}),
			operation("op2", fields{"externalId": absent})},
		run: func(t *testing.T, s store) {
			for _, id := range []string{"op1", "op2"} {
				op := getOperation(t, s, id)
				require.Equal(t, sub, op.SubscriptionID())
			}
			listed, _ := listPending(t, s)
			require.Len(t, listed, 2)
			for _, p := range listed {
				require.Equal(t, sub, p.SubscriptionID)
			}
		},
	},
	{
		// The seed frontend's layout read without COSMOS_OPERATIONS_PARTITION_KEY:
		// "workaround" is no subscription whose lock, Resources or Billing
		// items could be the operation's.
		name: "by subscription, an operation whose externalId names another subscription than its partition key is ErrNoSubscription",
		operations: []string{
			operation("op1", fields{"partitionKey": string(fixed), "externalId": clusterKey}),
			operation("op2", fields{"externalId": "/subscriptions/" + otherSub + "/resourceGroups/rg"}),
			operation("op3", fields{"externalId": clusterKey}),
		},
		run: func(t *testing.T, s store) {
			for _, asked := range [][2]string{{string(fixed), "op1"}, {sub, "op2"}} {
				_, err := s.GetOperation(t.Context(), asked[0], asked[1])
				require.ErrorIs(t, err, database.ErrNoSubscription, asked[1])
			}
			require.Equal(t, sub, getOperation(t, s, "op3").SubscriptionID())
			listed, malformed, noSub := listPendingAll(t, s)
			require.Zero(t, malformed)
			require.Len(t, listed, 1)
			require.Equal(t, "op3", listed[0].ID)
			var got []string
			for _, p := range noSub {
				got = append(got, p.PartitionKey+"/"+p.ID)
			}
			require.ElementsMatch(t, []string{string(fixed) + "/op1", sub + "/op2"}, got, "listed, each with its ErrNoSubscription")
		},
	},
	{
		name:      "in a fixed partition, GetOperation reads there the operation of its externalId's subscription",
		partition: fixed,
		operations: []string{
			operation("op1", fields{"partitionKey": string(fixed), "externalId": strings.ToUpper(clusterKey)}),
			// The subscription's own partition is not read.
			operation("op2", nil),
		},
		run: func(t *testing.T, s store) {
			for _, asked := range []string{sub, strings.ToUpper(sub)} {
				op, err := s.GetOperation(t.Context(), asked, "op1")
				require.NoError(t, err, asked)
				require.Equal(t, string(fixed), op.PartitionKey)
				require.Equal(t, sub, op.SubscriptionID(), "lowercase, as the partition keys of the subscription's items")
			}
			_, err := s.GetOperation(t.Context(), otherSub, "op1")
			require.ErrorIs(t, err, database.ErrOtherSubscription, "the message names another subscription than its externalId's")
			require.NotErrorIs(t, err, database.ErrNotFound)
			_, err = s.GetOperation(t.Context(), sub, "op2")
			require.ErrorIs(t, err, database.ErrNotFound)
		},
	},
	{
		name:      "in a fixed partition, an operation whose externalId names no subscription is ErrNoSubscription",
		partition: fixed,
		operations: []string{
			operation("absent", fields{"partitionKey": string(fixed), "externalId": absent}),
			operation("null", fields{"partitionKey": string(fixed), "externalId": nil}),
			operation("empty", fields{"partitionKey": string(fixed), "externalId": ""}),
			operation("no-subscription", fields{"partitionKey": string(fixed), "externalId": "/resourceGroups/rg/providers/p/t/n"}),
			operation("empty-subscription", fields{"partitionKey": string(fixed), "externalId": "/subscriptions//resourceGroups/rg"}),
			operation("relative", fields{"partitionKey": string(fixed), "externalId": "subscriptions/" + sub + "/resourceGroups/rg"}),
			operation("other-segment", fields{"partitionKey": string(fixed), "externalId": "/tenants/" + sub}),
		},
		run: func(t *testing.T, s store) {
			ids := []string{"absent", "null", "empty", "no-subscription", "empty-subscription", "relative", "other-segment"}
			for _, id := range ids {
				_, err := s.GetOperation(t.Context(), sub, id)
				require.ErrorIs(t, err, database.ErrNoSubscription, id)
			}
			listed, malformed, noSub := listPendingAll(t, s)
			require.Empty(t, listed)
			require.Zero(t, malformed)
			var got []string
			for _, p := range noSub {
				require.Equal(t, string(fixed), p.PartitionKey)
				got = append(got, p.ID)
			}
			require.ElementsMatch(t, ids, got, "listed, each with its ErrNoSubscription")
		},
	},
	{
		name:       "in a fixed partition, ReplaceOperation writes there and tells the written operation's subscription",
		partition:  fixed,
		operations: []string{operation("op1", fields{"partitionKey": string(fixed), "externalId": clusterKey})},
		run: func(t *testing.T, s store) {
			op := getOperation(t, s, "op1")
			op.Status = arm.ProvisioningStateProvisioning
			written, err := s.ReplaceOperation(t.Context(), op)
			require.NoError(t, err)
			require.Equal(t, sub, written.SubscriptionID())
			require.Equal(t, "Provisioning", s.raw(t, operations, sub, "op1")["status"])
			require.Equal(t, string(fixed), s.raw(t, operations, sub, "op1")["partitionKey"])
		},
	},
	{
		name:      "a fixed partition key is taken as it is, not lowercased",
		partition: "Fixed-Ops",
		operations: []string{operation("op1", fields{"partitionKey": "Fixed-Ops", "externalId": clusterKey}),
			operation("op1", fields{"partitionKey": "fixed-ops", "externalId": clusterKey, "status": "Updating"})},
		run: func(t *testing.T, s store) {
			op := getOperation(t, s, "op1")
			require.Equal(t, arm.ProvisioningStateAccepted, op.Status)
			op.Status = arm.ProvisioningStateProvisioning
			_, err := s.ReplaceOperation(t.Context(), op)
			require.NoError(t, err)
			require.Equal(t, "Provisioning", s.raw(t, operations, sub, "op1")["status"])
			listed, _ := listPending(t, s)
			require.Len(t, listed, 1)
			require.Equal(t, "Fixed-Ops", listed[0].PartitionKey)
		},
	},
	{
		name:      "in a fixed partition, PendingOperations lists that partition alone, each operation with its externalId's subscription",
		partition: fixed,
		operations: []string{
			operation("a", fields{"partitionKey": string(fixed), "externalId": clusterKey}),
			operation("b", fields{"partitionKey": string(fixed), "externalId": "/SUBSCRIPTIONS/" + strings.ToUpper(otherSub) + "/resourceGroups/rg",
				"status": "Deleting", "request": "Delete"}),
			operation("ended", fields{"partitionKey": string(fixed), "externalId": clusterKey, "status": "Succeeded"}),
			operation("by-subscription", fields{"externalId": clusterKey}),
		},
		run: func(t *testing.T, s store) {
			listed, _ := listPending(t, s)
			slices.SortFunc(listed, func(a, b database.PendingOperation) int { return strings.Compare(a.ID, b.ID) })
			require.Equal(t, []database.PendingOperation{
				{ID: "a", PartitionKey: string(fixed), SubscriptionID: sub, Status: "Accepted", Request: "Create", ExternalID: clusterKey},
				{ID: "b", PartitionKey: string(fixed), SubscriptionID: otherSub, Status: "Deleting", Request: "Delete",
					ExternalID: "/SUBSCRIPTIONS/" + strings.ToUpper(otherSub) + "/resourceGroups/rg"},
			}, listed)
		},
	},
}

// TestDBClientContract runs every behaviour of contractCases against the
// in-memory DBClient and the Cosmos one; under -short, against the
// in-memory one alone.
func TestDBClientContract(t *testing.T) {
	for _, impl := range []struct {
		name string
		open func(t *testing.T, lockTTL time.Duration, partition database.OperationsPartition) store
	}{{"memory", memoryStore}, {"cosmos", cosmosStore}} {
		t.Run(impl.name, func(t *testing.T) {
			t.Parallel()
			if impl.name == "cosmos" {
				testenv.NeedsServers(t)
			}
			for _, c := range contractCases {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					s := impl.open(t, c.lockTTL, c.partition)
					for _, body := range c.operations {
						s.put(t, operations, body)
					}
					for _, body := range c.resources {
						s.put(t, resources, body)
					}
					c.run(t, s)
				})
			}
		})
	}
}
