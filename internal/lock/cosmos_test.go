package lock_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/dev/testenv"
	"github.com/opstatus/opstatus/internal/database"
)

var cosmos *testenv.Cosmos

func TestMain(m *testing.M) { os.Exit(testenv.RunWithCosmos(m, &cosmos)) }

// flakyRenewals fails Renew on demand; everything else reaches Cosmos.
type flakyRenewals struct {
	database.LockStore
	fail atomic.Bool
}

func (f *flakyRenewals) Renew(ctx context.Context, id, owner string, ttl time.Duration, etag azcore.ETag) (azcore.ETag, error) {
	if f.fail.Load() {
		return "", fmt.Errorf("injected: %w", database.ErrUnavailable)
	}
	return f.LockStore.Renew(ctx, id, owner, ttl, etag)
}

var cosmosDBs atomic.Int32

func cosmosEnv(t *testing.T) env {
	ctx := context.Background()
	name := fmt.Sprintf("locks%d", cosmosDBs.Add(1))
	const ttl = 2 * time.Second
	require.NoError(t, frontend.CreateSchema(ctx, cosmos.Endpoint, cosmos.Key, name, ttl))
	db, err := database.NewCosmosClient(database.CosmosConfig{
		Endpoint: cosmos.Endpoint, Database: name, Key: cosmos.Key, InsecureSkipVerify: true,
		OperationsContainer: "Operations", ResourcesContainer: "Resources", LocksContainer: "Locks",
	})
	require.NoError(t, err)
	fe, err := frontend.New(cosmos.Endpoint, cosmos.Key, name)
	require.NoError(t, err)
	store := &flakyRenewals{LockStore: db.Locks()}
	return env{
		store: store,
		ttl:   ttl,
		steal: func(t *testing.T, id, owner string) {
			require.NoError(t, fe.StealLock(ctx, id, owner))
		},
		failRenew: func(*testing.T) { store.fail.Store(true) },
	}
}

func TestLockCosmos(t *testing.T) { runLockTests(t, cosmosEnv) }
