package main

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/functions"
	"github.com/opstatus/opstatus/internal/config"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/internal/database/databasetesting"
	"github.com/opstatus/opstatus/internal/lock"
	"github.com/opstatus/opstatus/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// When the drain times out, the invocations still running are canceled and
// Serve returns while their lock releases are in flight: serve returns only
// once they are done, so that no lock is left to block the frontend.
func TestServeWaitsForLockReleases(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)
	db := databasetesting.NewMemoryClient(5 * time.Second)
	db.Hook = func(call databasetesting.Op) error {
		if call == databasetesting.OpLockDelete {
			time.Sleep(500 * time.Millisecond)
		}
		return nil
	}
	locker := lock.New(db.Locks(), lock.Options{})
	holding := make(chan struct{})
	srv := functions.NewServer(logger, map[string]functions.Handler{
		"poll": func(ctx context.Context, _ *functions.Invocation) (*functions.Result, error) {
			return nil, locker.Do(ctx, "sub", "opstatus/test", func(ctx context.Context) error {
				close(holding)
				<-ctx.Done()
				return context.Cause(ctx)
			})
		},
	}, functions.WithDrainTimeout(100*time.Millisecond))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	served := make(chan error, 1)
	go func() { served <- serve(ctx, srv, ln, locker, 5*time.Second, logger) }()
	go func() {
		resp, err := http.Post("http://"+ln.Addr().String()+"/poll", "application/json",
			strings.NewReader(`{"Data":{},"Metadata":{}}`))
		if err == nil {
			resp.Body.Close()
		}
	}()
	select {
	case <-holding:
	case <-time.After(10 * time.Second):
		t.Fatal("the invocation never took the lock")
	}
	stop()

	select {
	case err = <-served:
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not return")
	}
	require.ErrorContains(t, err, "draining", "the drain was expected to time out")
	_, _, err = db.Locks().Get(context.Background(), "sub")
	require.ErrorIs(t, err, database.ErrNotFound, "serve returned before the lock was released")
}

// A lock TTL the lock cannot work with stops the process; Cosmos DB out of
// reach at start does not.
func TestCheckLockTTL(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)
	ctx := context.Background()

	short := databasetesting.NewMemoryClient(time.Second)
	err := checkLockTTL(ctx, lock.New(short.Locks(), lock.Options{}), time.Second, logger)
	require.ErrorIs(t, err, lock.ErrBadTTL)

	down := databasetesting.NewMemoryClient(5 * time.Second)
	down.Hook = func(databasetesting.Op) error { return database.ErrUnavailable }
	locker := lock.New(down.Locks(), lock.Options{})
	require.NoError(t, checkLockTTL(ctx, locker, time.Second, logger))
	// Checked again at first use.
	down.Hook = nil
	require.NoError(t, locker.Do(ctx, "sub", "opstatus/test", func(context.Context) error { return nil }))
}

// TestCheckContainers: a setting that names a container that does not
// exist stops the start with one line naming the setting and the
// container; with every container there, or Cosmos DB out of reach (a
// warning), the start goes on.
func TestCheckContainers(t *testing.T) {
	ctx := t.Context()
	cosmos := testenv.SharedCosmos(t)
	name := testenv.DatabaseName(t)
	require.NoError(t, frontend.CreateSchema(ctx, cosmos.Endpoint, cosmos.Key, name, 5*time.Second))
	settings := config.Config{CosmosDatabase: name, OperationsContainer: frontend.OperationsContainer,
		ResourcesContainer: frontend.ResourcesContainer, LocksContainer: frontend.LocksContainer, BillingContainer: frontend.BillingContainer}
	client := func(t *testing.T, endpoint, databaseName string) *database.CosmosClient {
		t.Helper()
		db, err := database.NewCosmosClient(database.CosmosConfig{
			Endpoint: endpoint, Database: databaseName, Key: cosmos.Key, InsecureSkipVerify: true,
			OperationsContainer: settings.OperationsContainer, ResourcesContainer: settings.ResourcesContainer,
			LocksContainer: settings.LocksContainer, BillingContainer: settings.BillingContainer,
		})
		require.NoError(t, err)
		return db
	}
	db := client(t, cosmos.Endpoint, name)
	logger := slog.New(slog.DiscardHandler)

	require.NoError(t, checkContainers(ctx, db, name, cosmosContainers(settings), 5*time.Second, logger))

	for _, tc := range []struct {
		name string
		set  func(cfg *config.Config)
		want string
	}{
		{"Operations", func(cfg *config.Config) { cfg.OperationsContainer = "Operationz" },
			"COSMOS_OPERATIONS_CONTAINER=Operationz: no such container in Cosmos DB database " + name},
		{"Resources", func(cfg *config.Config) { cfg.ResourcesContainer = "Resourcez" },
			"COSMOS_RESOURCES_CONTAINER=Resourcez: no such container in Cosmos DB database " + name},
		{"Locks", func(cfg *config.Config) { cfg.LocksContainer = "Lockz" },
			"COSMOS_LOCKS_CONTAINER=Lockz: no such container in Cosmos DB database " + name},
		{"Leases, when pickup runs", func(cfg *config.Config) { cfg.PickupRuns, cfg.LeasesContainer = true, "Leasez" },
			"COSMOS_LEASES_CONTAINER=Leasez: no such container in Cosmos DB database " + name},
		{"Leases, when it holds the budget ledger", func(cfg *config.Config) { cfg.ClusterServiceBudget, cfg.LeasesContainer = 256, "Leasez" },
			"COSMOS_LEASES_CONTAINER=Leasez: no such container in Cosmos DB database " + name},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := settings
			tc.set(&cfg)
			err := checkContainers(ctx, db, name, cosmosContainers(cfg), 5*time.Second, logger)
			require.ErrorIs(t, err, database.ErrContainerNotFound)
			require.EqualError(t, err, tc.want)
		})
	}

	t.Run("Leases, when pickup does not run", func(t *testing.T) {
		cfg := settings
		cfg.LeasesContainer = "Leasez"
		require.NoError(t, checkContainers(ctx, db, name, cosmosContainers(cfg), 5*time.Second, logger))
		cfg.PickupRuns, cfg.LeasesContainer = true, frontend.LeasesContainer
		require.NoError(t, checkContainers(ctx, db, name, cosmosContainers(cfg), 5*time.Second, logger))
	})

	t.Run("partition keys", func(t *testing.T) {
		for _, layout := range []testenv.Layout{testenv.LayoutCurrent, testenv.Layout2024} {
			db := cosmos.NewDatabase(t, layout.Containers(5*time.Second)...)
			cfg := settings
			cfg.CosmosDatabase, cfg.PickupRuns, cfg.LeasesContainer = db.Name, true, frontend.LeasesContainer
			require.NoError(t, checkContainers(ctx, client(t, cosmos.Endpoint, db.Name), db.Name, cosmosContainers(cfg), 5*time.Second, logger), layout)
		}
		db := cosmos.NewDatabase(t, testenv.ContainerSpec{Name: "ById", PartitionKeyPath: "/id"},
			testenv.ContainerSpec{Name: "Hierarchical", HierarchicalPaths: []string{"/partitionKey", "/id"}})
		for _, tc := range []struct {
			container cosmosContainer
			want      string
		}{
			{cosmosContainer{"COSMOS_BILLING_CONTAINER", "ById", database.HoldsBilling},
				"COSMOS_BILLING_CONTAINER=ById: container ById of Cosmos DB database " + db.Name +
					" has partition key path /id, which opstatus cannot fill in Billing items (it fills /partitionKey or /subscriptionId)"},
			{cosmosContainer{"COSMOS_OPERATIONS_CONTAINER", "Hierarchical", database.HoldsOperations},
				"COSMOS_OPERATIONS_CONTAINER=Hierarchical: container Hierarchical of Cosmos DB database " + db.Name +
					" has hierarchical partition key /partitionKey,/id, which opstatus cannot fill in Operations items (it fills /partitionKey)"},
		} {
			err := checkContainers(ctx, client(t, cosmos.Endpoint, db.Name), db.Name, []cosmosContainer{tc.container}, 5*time.Second, logger)
			require.ErrorIs(t, err, database.ErrPartitionKeyPath)
			require.EqualError(t, err, tc.want)
		}
	})

	t.Run("database", func(t *testing.T) {
		err := checkContainers(ctx, client(t, cosmos.Endpoint, name+"-missing"), name+"-missing",
			cosmosContainers(settings), 5*time.Second, logger)
		require.ErrorIs(t, err, database.ErrContainerNotFound)
		require.EqualError(t, err, "COSMOS_OPERATIONS_CONTAINER=Operations: no such container in Cosmos DB database "+name+"-missing")
	})

	t.Run("unreachable", func(t *testing.T) {
		var logs bytes.Buffer
		logger := slog.New(slog.NewTextHandler(&logs, nil))
		require.NoError(t, checkContainers(ctx, client(t, "https://127.0.0.1:1/", name), name,
			cosmosContainers(settings), time.Second, logger))
		require.Contains(t, logs.String(), "level=WARN")
		require.Contains(t, logs.String(), "could not read the Cosmos DB containers at start")
	})
}
