package database_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/internal/database"
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
	for _, c := range []string{frontend.OperationsContainer, frontend.ResourcesContainer, frontend.LocksContainer} {
		require.NoError(t, db.ReadContainer(ctx, c), c)
	}
	requireContainerNotFound(t, db.ReadContainer(ctx, "Missing"), "Missing")

	cfg := cosmosConfig(t, name)
	cfg.Database = name + "-missing"
	requireContainerNotFound(t, newClient(t, cfg).ReadContainer(ctx, frontend.OperationsContainer), name+"-missing")
}
