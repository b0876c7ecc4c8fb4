package lock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/faultproxy"
	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/internal/lock"
	"github.com/opstatus/opstatus/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

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

func cosmosEnv(t *testing.T) env { return cosmosEnvTTL(lock.MinTTL)(t) }

// cosmosEnvTTL returns environments of a database of their own whose Locks
// container has ttl.
func cosmosEnvTTL(ttl time.Duration) func(t *testing.T) env {
	return func(t *testing.T) env { return newCosmosEnv(t, ttl) }
}

func newCosmosEnv(t *testing.T, ttl time.Duration) env {
	ctx := context.Background()
	cosmos := testenv.SharedCosmos(t)
	name := testenv.DatabaseName(t)
	require.NoError(t, frontend.CreateSchema(ctx, cosmos.Endpoint, cosmos.Key, name, ttl))
	db, err := database.NewCosmosClient(database.CosmosConfig{
		Endpoint: cosmos.Endpoint, Database: name, Key: cosmos.Key, InsecureSkipVerify: true,
		OperationsContainer: "Operations", ResourcesContainer: "Resources", LocksContainer: "Locks",
		BillingContainer: "Billing",
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

func TestLockCosmos(t *testing.T) {
	t.Parallel()
	testenv.NeedsServers(t)
	runLockTests(t, cosmosEnv)
}

// With every renewal failing, a rival creating the lock item in a tight loop
// takes it only after the work under it has been canceled, even when the
// item expires a TTL after the whole second of its _ts, nearly a second
// before the create's time + TTL.
func TestRivalNeverTakesTheLockFromLiveWork(t *testing.T) {
	t.Parallel()
	// The cases sleep nearly all the time: run them all at once instead of
	// -parallel (the number of CPUs) at a time. Run may be called from
	// several goroutines.
	var wg sync.WaitGroup
	for _, ttl := range []time.Duration{2 * time.Second, 5 * time.Second, 10 * time.Second} {
		for _, store := range []struct {
			name   string
			newEnv func(t *testing.T) env
		}{{"memory", memoryEnvTTL(ttl)}, {"cosmos", cosmosEnvTTL(ttl)}} {
			wg.Go(func() {
				t.Run(fmt.Sprintf("%s/%s", store.name, ttl), func(t *testing.T) {
					testRivalWaitsForTheLease(t, store.newEnv(t))
				})
			})
		}
	}
	wg.Wait()
}

func testRivalWaitsForTheLease(t *testing.T, e env) {
	ctx := context.Background()
	l := lock.New(e.store, lock.Options{Wait: time.Second})
	_, err := l.TTL(ctx)
	require.NoError(t, err)
	// Create the lock item late in a wall-clock second, so that its _ts
	// lies most of a second before the create.
	now := time.Now()
	late := now.Truncate(time.Second).Add(850 * time.Millisecond)
	if late.Before(now) {
		late = late.Add(time.Second)
	}
	time.Sleep(time.Until(late))

	var rivalWon bool
	var workErr error // the work context's error when the rival won
	err = l.Do(ctx, "sub", "opstatus", func(wctx context.Context) error {
		e.failRenew(t)
		for deadline := time.Now().Add(e.ttl + 2*time.Second); time.Now().Before(deadline); {
			_, err := e.store.Create(ctx, "sub", "rival", e.ttl)
			if err == nil {
				rivalWon, workErr = true, wctx.Err()
				return nil
			}
			if !errors.Is(err, database.ErrConflict) {
				return err
			}
			time.Sleep(2 * time.Millisecond)
		}
		return errors.New("the lock item never expired")
	})
	require.True(t, rivalWon, "%v", err)
	require.Error(t, workErr, "the rival took the lock while the work under it was live")
	require.ErrorIs(t, err, lock.ErrLost)
}

// A Locks container without a DefaultTimeToLive, or with one shorter than
// MinTTL, is refused with a clear error.
func TestLockCosmosBadTTL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cosmos := testenv.SharedCosmos(t)
	one := int32(1)
	for _, ttl := range []*int32{nil, &one} {
		name := testenv.DatabaseName(t)
		require.NoError(t, testenv.CreateDatabase(ctx, cosmos.Endpoint, cosmos.Key, name,
			testenv.ContainerSpec{Name: "Locks", PartitionKeyPath: "/id", DefaultTTL: ttl}))
		db, err := database.NewCosmosClient(database.CosmosConfig{
			Endpoint: cosmos.Endpoint, Database: name, Key: cosmos.Key, InsecureSkipVerify: true,
			OperationsContainer: "Operations", ResourcesContainer: "Resources", LocksContainer: "Locks",
			BillingContainer: "Billing",
		})
		require.NoError(t, err)
		_, err = lock.New(db.Locks(), lock.Options{}).TTL(ctx)
		require.ErrorIs(t, err, lock.ErrBadTTL)
		require.ErrorContains(t, err, "DefaultTimeToLive")
	}
}

// A create whose connection Cosmos dropped after applying it leaves no lock
// item behind: the frontend can take the lock at once instead of after a
// TTL.
func TestLockCosmosDroppedCreateAnswer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cosmos := testenv.SharedCosmos(t)
	name := testenv.DatabaseName(t)
	require.NoError(t, frontend.CreateSchema(ctx, cosmos.Endpoint, cosmos.Key, name, 10*time.Second))
	proxy, err := faultproxy.New(cosmos.Endpoint, faultproxy.Options{TLS: true, Name: "locks"})
	require.NoError(t, err)
	require.NoError(t, proxy.Start())
	t.Cleanup(func() { _ = proxy.Close() })
	proxy.SetFaults(faultproxy.Faults{RateDropAfterForward: 1, Match: func(r faultproxy.Request) bool {
		return r.Container == frontend.LocksContainer && r.Kind == faultproxy.KindCreate
	}})
	db, err := database.NewCosmosClient(database.CosmosConfig{
		Endpoint: proxy.URL(), Database: name, Key: cosmos.Key, InsecureSkipVerify: true,
		OperationsContainer: "Operations", ResourcesContainer: "Resources", LocksContainer: "Locks", BillingContainer: "Billing",
	})
	require.NoError(t, err)
	fe, err := frontend.New(cosmos.Endpoint, cosmos.Key, name)
	require.NoError(t, err)

	const owner = "opstatus/host/1"
	ran := false
	err = lock.New(db.Locks(), lock.Options{Wait: time.Second}).Do(ctx, "sub", owner, func(context.Context) error {
		ran = true
		return nil
	})
	require.Error(t, err)
	require.NotErrorIs(t, err, lock.ErrHeld)
	require.False(t, ran)
	t.Logf("Do: %v", err)

	var kinds []string
	for _, w := range proxy.Writes() {
		require.Equal(t, "sub", w.ItemID)
		require.Equal(t, owner, w.Owner)
		kinds = append(kinds, w.Kind)
		if w.Kind == faultproxy.KindCreate {
			require.False(t, w.Delivered, "the create's answer was dropped")
		}
	}
	require.Equal(t, []string{faultproxy.KindCreate, faultproxy.KindDelete}, kinds,
		"Cosmos applied the create, and the item it wrote was deleted")
	l, ok, err := fe.TryLock(ctx, "sub", "frontend")
	require.NoError(t, err)
	require.True(t, ok, "the frontend is locked out")
	require.NoError(t, fe.Unlock(ctx, l))
}
