package database_test

import (
	"context"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/internal/testenv"
)

// containerCall is one request of a CosmosClient to one container.
type containerCall struct {
	name string
	call func(ctx context.Context, db *database.CosmosClient) error
}

// firstPending returns the first error of a listing of pending operations.
func firstPending(ctx context.Context, db *database.CosmosClient) error {
	for _, err := range db.PendingOperations(ctx) {
		if err != nil {
			return err
		}
	}
	return nil
}

// requireContainerNotFound requires err to be ErrContainerNotFound naming
// name, and neither a missing item nor a failure that passes by itself.
func requireContainerNotFound(t *testing.T, err error, name string, msgAndArgs ...any) {
	t.Helper()
	require.ErrorIs(t, err, database.ErrContainerNotFound, msgAndArgs...)
	require.NotErrorIs(t, err, database.ErrNotFound, msgAndArgs...)
	require.NotErrorIs(t, err, database.ErrUnavailable, msgAndArgs...)
	require.ErrorContains(t, err, `"`+name+`"`, msgAndArgs...)
}

// TestMissingContainerIsNotAMissingItem: with a setting naming a container
// that does not exist, or a database that does not exist, every request of
// the client is ErrContainerNotFound naming it, never ErrNotFound: a query
// over it is not an empty result, and a point read of it is not a missing
// item. The same requests to the containers that exist find the items.
func TestMissingContainerIsNotAMissingItem(t *testing.T) {
	ctx := t.Context()
	name, fe := newDatabase(t, 3*time.Second)
	require.NoError(t, fe.PutOperation(ctx, frontend.Operation{ID: "op1", PartitionKey: sub, Request: "Delete",
		Status: "Deleting", ExternalID: clusterKey, InternalID: clusterCS}))
	require.NoError(t, fe.PutResource(ctx, frontend.Resource{ID: "r1", PartitionKey: sub, Key: clusterKey,
		InternalID: clusterCS, ActiveOperationID: "op1", ProvisioningState: "Deleting"}))
	require.NoError(t, fe.PutResource(ctx, frontend.Resource{ID: "np1", PartitionKey: sub, Key: clusterKey + "/nodePools/np1",
		ProvisioningState: "Succeeded"}))

	right := newClient(t, cosmosConfig(t, name))
	op, err := right.GetOperation(ctx, sub, "op1")
	require.NoError(t, err)
	res, err := right.GetResource(ctx, sub, clusterKey)
	require.NoError(t, err)
	children, err := right.ChildResources(ctx, sub, clusterKey)
	require.NoError(t, err)
	require.Len(t, children, 1)
	require.NoError(t, firstPending(ctx, right))
	_, err = right.GetOperation(ctx, sub, "missing")
	require.ErrorIs(t, err, database.ErrNotFound, "a missing item of a container that exists")
	const etag = `"0"`

	operationCalls := []containerCall{
		{"GetOperation", func(ctx context.Context, db *database.CosmosClient) error {
			_, err := db.GetOperation(ctx, sub, "op1")
			return err
		}},
		{"ReplaceOperation", func(ctx context.Context, db *database.CosmosClient) error {
			_, err := db.ReplaceOperation(ctx, op)
			return err
		}},
		{"PendingOperations", firstPending},
	}
	resourceCalls := []containerCall{
		{"GetResource", func(ctx context.Context, db *database.CosmosClient) error {
			_, err := db.GetResource(ctx, sub, clusterKey)
			return err
		}},
		{"ChildResources", func(ctx context.Context, db *database.CosmosClient) error {
			_, err := db.ChildResources(ctx, sub, clusterKey)
			return err
		}},
		{"ReplaceResource", func(ctx context.Context, db *database.CosmosClient) error {
			_, err := db.ReplaceResource(ctx, res)
			return err
		}},
		{"DeleteResource", func(ctx context.Context, db *database.CosmosClient) error {
			return db.DeleteResource(ctx, res.Ref())
		}},
	}
	lockCalls := []containerCall{
		{"Lock.TTL", func(ctx context.Context, db *database.CosmosClient) error {
			_, err := db.Locks().TTL(ctx)
			return err
		}},
		{"Lock.Create", func(ctx context.Context, db *database.CosmosClient) error {
			_, err := db.Locks().Create(ctx, sub, "opstatus/test", 3*time.Second)
			return err
		}},
		{"Lock.Get", func(ctx context.Context, db *database.CosmosClient) error {
			_, _, err := db.Locks().Get(ctx, sub)
			return err
		}},
		{"Lock.Renew", func(ctx context.Context, db *database.CosmosClient) error {
			_, err := db.Locks().Renew(ctx, sub, "opstatus/test", 3*time.Second, etag)
			return err
		}},
		{"Lock.Delete", func(ctx context.Context, db *database.CosmosClient) error {
			return db.Locks().Delete(ctx, sub, etag)
		}},
	}
	all := append(append(append([]containerCall{}, operationCalls...), resourceCalls...), lockCalls...)

	for _, tc := range []struct {
		name    string
		set     func(cfg *database.CosmosConfig)
		missing string // the name the errors must give
		calls   []containerCall
	}{
		{"Operations", func(cfg *database.CosmosConfig) { cfg.OperationsContainer = "Missing" }, "Missing", operationCalls},
		{"Resources", func(cfg *database.CosmosConfig) { cfg.ResourcesContainer = "Missing" }, "Missing", resourceCalls},
		{"Locks", func(cfg *database.CosmosConfig) { cfg.LocksContainer = "Missing" }, "Missing", lockCalls},
		{"database", func(cfg *database.CosmosConfig) { cfg.Database = name + "-missing" }, name + "-missing", all},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := cosmosConfig(t, name)
			tc.set(&cfg)
			db := newClient(t, cfg)
			for _, c := range tc.calls {
				requireContainerNotFound(t, c.call(t.Context(), db), tc.missing, c.name)
			}
		})
	}

	// Nothing was written through the clients of the missing containers.
	after, err := right.GetOperation(ctx, sub, "op1")
	require.NoError(t, err)
	require.Equal(t, op.ETag, after.ETag)
	afterRes, err := right.GetResource(ctx, sub, clusterKey)
	require.NoError(t, err)
	require.Equal(t, res.ETag, afterRes.ETag)
}

// TestReadContainer: ReadContainer finds the containers that exist, and
// names the one that does not, or whose database does not.
func TestReadContainer(t *testing.T) {
	ctx := t.Context()
	name, _ := newDatabase(t, 3*time.Second)
	db := newClient(t, cosmosConfig(t, name))
	for c, holds := range map[string]database.Holds{frontend.OperationsContainer: database.HoldsOperations,
		frontend.ResourcesContainer: database.HoldsResources, frontend.LocksContainer: database.HoldsLocks,
		frontend.BillingContainer: database.HoldsBilling, frontend.LeasesContainer: database.HoldsLeases} {
		require.NoError(t, db.ReadContainer(ctx, c, holds), c)
	}
	requireContainerNotFound(t, db.ReadContainer(ctx, "Missing", database.HoldsOperations), "Missing")

	cfg := cosmosConfig(t, name)
	cfg.Database = name + "-missing"
	requireContainerNotFound(t, newClient(t, cfg).ReadContainer(ctx, frontend.OperationsContainer, database.HoldsOperations), name+"-missing")
}

// TestReadContainerPartitionKeys: the partition key paths of both ARO-HCP
// layouts are served; a path opstatus cannot fill, or a hierarchical key,
// is a PartitionKeyError naming the path.
func TestReadContainerPartitionKeys(t *testing.T) {
	ctx := t.Context()
	cosmos := testenv.SharedCosmos(t)
	for _, layout := range []testenv.Layout{testenv.LayoutCurrent, testenv.Layout2024} {
		db := cosmos.NewDatabase(t, layout.Containers(10*time.Second)...)
		client := newClient(t, cosmosConfig(t, db.Name))
		for c, holds := range map[string]database.Holds{"Operations": database.HoldsOperations,
			"Resources": database.HoldsResources, "Locks": database.HoldsLocks, "Billing": database.HoldsBilling,
			"Leases": database.HoldsLeases} {
			require.NoError(t, client.ReadContainer(ctx, c, holds), "%s %s", layout, c)
		}
	}

	db := cosmos.NewDatabase(t,
		testenv.ContainerSpec{Name: "ById", PartitionKeyPath: "/id"},
		testenv.ContainerSpec{Name: "BySubscriptionId", PartitionKeyPath: "/subscriptionId"},
		testenv.ContainerSpec{Name: "ByPartitionKey", PartitionKeyPath: "/partitionKey"},
		testenv.ContainerSpec{Name: "Nested", PartitionKeyPath: "/properties/subscriptionId"},
		testenv.ContainerSpec{Name: "Hierarchical", HierarchicalPaths: []string{"/subscriptionId", "/id"}},
	)
	client := newClient(t, cosmosConfig(t, db.Name))
	for _, tc := range []struct {
		container string
		holds     database.Holds
		want      string
	}{
		{"ById", database.HoldsBilling, "partition key path /id, which opstatus cannot fill in Billing items (it fills /partitionKey or /subscriptionId)"},
		{"Nested", database.HoldsBilling, "partition key path /properties/subscriptionId, which opstatus cannot fill in Billing items (it fills /partitionKey or /subscriptionId)"},
		{"Hierarchical", database.HoldsBilling, "hierarchical partition key /subscriptionId,/id, which opstatus cannot fill in Billing items (it fills /partitionKey or /subscriptionId)"},
		{"BySubscriptionId", database.HoldsOperations, "partition key path /subscriptionId, which opstatus cannot fill in Operations items (it fills /partitionKey)"},
		{"ById", database.HoldsResources, "partition key path /id, which opstatus cannot fill in Resources items (it fills /partitionKey)"},
		{"ByPartitionKey", database.HoldsLocks, "partition key path /partitionKey, which opstatus cannot fill in Locks items (it fills /id)"},
		{"ByPartitionKey", database.HoldsLeases, "partition key path /partitionKey, which opstatus cannot fill in Leases items (it fills /id)"},
	} {
		err := client.ReadContainer(ctx, tc.container, tc.holds)
		require.ErrorIs(t, err, database.ErrPartitionKeyPath, tc.container)
		require.EqualError(t, err, tc.want)
	}
}

// TestBillingPathReadAtFirstWrite: a client that was never checked at start
// (Cosmos DB out of reach then) reads the Billing container's partition
// key path at its first write, and writes nothing into a container whose
// path it cannot fill.
func TestBillingPathReadAtFirstWrite(t *testing.T) {
	ctx := t.Context()
	cosmos := testenv.SharedCosmos(t)
	db := cosmos.NewDatabase(t, testenv.ContainerSpec{Name: "Billing", PartitionKeyPath: "/id"})
	client := newClient(t, cosmosConfig(t, db.Name))
	b := &database.Billing{ID: database.BillingID(clusterKey, "c1"), SubscriptionID: sub, ResourceID: clusterKey,
		CreationTime: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	_, err := client.CreateBilling(ctx, b)
	require.ErrorIs(t, err, database.ErrPartitionKeyPath)
	require.ErrorContains(t, err, `container "Billing": partition key path /id`)
	b.ETag = `"1"`
	_, err = client.ReplaceBilling(ctx, b)
	require.ErrorIs(t, err, database.ErrPartitionKeyPath)
	pager := db.Containers["Billing"].NewQueryItemsPager("SELECT * FROM c", azcosmos.NewPartitionKey(), nil)
	page, err := pager.NextPage(ctx)
	require.NoError(t, err)
	require.Empty(t, page.Items)
}
