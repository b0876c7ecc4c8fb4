// Command handler is opstatus's Azure Functions custom handler: an HTTP
// server on 127.0.0.1 that the Functions host calls for the scan (timer),
// poll (queue) and pickup (Cosmos DB change feed) functions.
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"

	"github.com/opstatus/opstatus/functions"
	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/budget"
	"github.com/opstatus/opstatus/internal/clusterservice"
	"github.com/opstatus/opstatus/internal/config"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/internal/entra"
	"github.com/opstatus/opstatus/internal/lock"
	"github.com/opstatus/opstatus/internal/telemetry"
	"github.com/opstatus/opstatus/pickup"
	"github.com/opstatus/opstatus/poll"
	"github.com/opstatus/opstatus/scan"
)

func main() {
	cfg, err := config.Load(os.Getenv)
	if err != nil {
		fmt.Fprintf(os.Stderr, "opstatus: setting %v\n", err)
		os.Exit(1)
	}
	// The host logs stdout lines at Information and stderr lines at Error
	// (Warning if they contain "warn"): Info goes to stdout, Warn and Error
	// to stderr.
	logger := slog.New(functions.NewLogHandler(os.Stdout, os.Stderr, slog.LevelInfo))
	// One credential, the app's managed identity, for every Entra token
	// (Cosmos DB without a key, Cluster Service with an audience, metrics'
	// remote writes); it contacts nothing until a token is asked for.
	cred, err := entra.Credential(cfg.AzureClientID)
	if err != nil {
		fmt.Fprintf(os.Stderr, "opstatus: %v\n", err)
		os.Exit(1)
	}
	// Before the clients are built: they take their tracing from it.
	shutdown, err := telemetry.Setup(context.Background(), logger,
		telemetry.WithRemoteWrite(cfg.MetricsRemoteWriteURL, cred), telemetry.WithCluster(cfg.Location))
	if err != nil {
		fmt.Fprintf(os.Stderr, "opstatus: setting %v\n", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	err = run(ctx, cfg, cred, logger)
	flushTelemetry(shutdown, logger)
	if err != nil {
		var bad *containerError
		if errors.As(err, &bad) {
			// A setting naming a container that is not there, or that
			// opstatus cannot write: one line, as for a bad setting.
			fmt.Fprintf(os.Stderr, "opstatus: %v\n", bad)
			os.Exit(1)
		}
		if errors.Is(err, lock.ErrBadTTL) {
			// A setting of the Cosmos account: one line, as for a bad setting.
			fmt.Fprintf(os.Stderr, "opstatus: COSMOS_LOCKS_CONTAINER=%s: %v\n", cfg.LocksContainer, err)
			os.Exit(1)
		}
		logger.Error("opstatus stopped", "error", err)
		os.Exit(1)
	}
}

const (
	// containerCheckTimeout bounds the reads of the containers at start.
	containerCheckTimeout = 5 * time.Second
	// ttlCheckTimeout bounds the read of the lock TTL at start.
	ttlCheckTimeout = 5 * time.Second
	// releaseWait bounds the wait for lock releases after the server has
	// stopped; each release has a 5 s timeout of its own.
	releaseWait = 6 * time.Second
	// telemetryFlushTimeout bounds the export of the last spans and metrics
	// at exit.
	telemetryFlushTimeout = 5 * time.Second
)

// flushTelemetry exports what telemetry still holds, within
// telemetryFlushTimeout. Only a local stop (SIGTERM, SIGINT) or a failed
// start gets here: the Functions host SIGKILLs the handler, and what leaves
// the process then is what the exports every telemetry.ExportInterval
// already sent.
func flushTelemetry(shutdown func(context.Context) error, logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), telemetryFlushTimeout)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		logger.Warn("telemetry not flushed at exit", "error", err)
	}
}

func run(ctx context.Context, cfg config.Config, cred azcore.TokenCredential, logger *slog.Logger) error {
	var csCred azcore.TokenCredential
	if cfg.ClusterServiceAudience != "" {
		csCred = cred
	}
	db, err := database.NewCosmosClient(database.CosmosConfig{
		Endpoint:            cfg.CosmosEndpoint,
		Database:            cfg.CosmosDatabase,
		Key:                 cfg.CosmosKey,
		Credential:          cred,
		InsecureSkipVerify:  cfg.CosmosInsecureSkipVerify,
		OperationsContainer: cfg.OperationsContainer,
		ResourcesContainer:  cfg.ResourcesContainer,
		LocksContainer:      cfg.LocksContainer,
		BillingContainer:    cfg.BillingContainer,
		OperationsPartition: database.OperationsPartition(cfg.OperationsPartitionKey),
		TracingProvider:     telemetry.AzureTracing(),
	})
	if err != nil {
		return err
	}
	cs, err := clusterservice.NewClient(clusterservice.Config{
		URL:                cfg.ClusterServiceURL,
		InsecureSkipVerify: cfg.ClusterServiceInsecureSkipVerify,
		RootCAs:            cfg.ClusterServiceCAs,
		ClientID:           cfg.ClusterServiceClientID,
		ClientSecret:       cfg.ClusterServiceClientSecret,
		TokenURL:           cfg.ClusterServiceTokenURL,
		Credential:         csCred,
		Audience:           cfg.ClusterServiceAudience,
		Logger:             logger,
	})
	if err != nil {
		return err
	}
	defer cs.Close()

	locker := lock.New(db.Locks(), lock.Options{Logger: logger})
	permits, err := budgetGate(cfg, db, logger)
	if err != nil {
		return err
	}

	timeout := functionTimeout(logger)
	hostname, _ := os.Hostname()
	pollFn := poll.New(poll.Config{
		DB:       db,
		Cluster:  cs,
		Locker:   locker,
		Notifier: arm.NewNotifier(cfg.NotificationsAllowHTTP, cfg.NotificationHosts...),
		Owner:    fmt.Sprintf("opstatus/%s/%d", hostname, os.Getpid()),
		Interval: cfg.ScanInterval(time.Now()),
		Permits:  permits,
		Deadline: timeout / 2,
		Location: cfg.Location,
		Deadlines: poll.Deadlines{Create: cfg.CreateDeadline, Update: cfg.UpdateDeadline, Delete: cfg.DeleteDeadline,
			RequestCredential: cfg.RequestCredentialDeadline, RevokeCredentials: cfg.RevokeCredentialsDeadline},
	})
	// The host writes scan's messages after its answer, within the same
	// functionTimeout: the listing takes at most a quarter of it.
	scanFn := &scan.Function{DB: db, Deadline: timeout / 4, Interval: pollFn.Interval, PickupRuns: cfg.PickupRuns}
	// pickup polls in its own invocation, within poll's bound.
	pickupFn := &pickup.Function{Poll: pollFn.Poll, Interval: pollFn.Interval, Deadline: timeout / 2,
		Partition: database.OperationsPartition(cfg.OperationsPartitionKey)}
	srv := functions.NewServer(logger, map[string]functions.Handler{
		"scan":   scanFn.Handle,
		"poll":   pollFn.Handle,
		"pickup": pickupFn.Handle,
	})

	addr, err := functions.ListenAddr(cfg.Port)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	logger.Info("opstatus listening", "addr", ln.Addr().String(), "pickup_runs", cfg.PickupRuns,
		"operations_partition", cmp.Or(cfg.OperationsPartitionKey, "(by subscription)"))
	// The containers and the TTL are checked while the server starts, not
	// before: the host waits for GET / to answer, and a missing container
	// or a bad TTL still stops the process.
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	go permits.Run(ctx)
	go func() {
		err := checkContainers(ctx, db, cfg.CosmosDatabase, cosmosContainers(cfg), containerCheckTimeout, logger)
		if err == nil {
			err = checkLockTTL(ctx, locker, ttlCheckTimeout, logger)
		}
		if err != nil {
			stop(err)
		}
	}()
	err = serve(ctx, srv, ln, locker, releaseWait, logger)
	var bad *containerError
	if cause := context.Cause(ctx); errors.Is(cause, lock.ErrBadTTL) || errors.As(cause, &bad) {
		return cause
	}
	return err
}

// budgetGate is the process's Cluster Service permits: with
// CLUSTER_SERVICE_BUDGET, its share of the budget through the ledger in
// the Leases container; without, only its ceiling
// (CLUSTER_SERVICE_MAX_IN_FLIGHT). Its figures are the budget gauges.
func budgetGate(cfg config.Config, db *database.CosmosClient, logger *slog.Logger) (*budget.Gate, error) {
	bc := budget.Config{Budget: cfg.ClusterServiceBudget, Ceiling: cfg.ClusterServiceMaxInFlight,
		Grace: cfg.ClusterServiceAbandonedGrace, Logger: logger}
	if cfg.ClusterServiceBudget > 0 {
		leases, err := db.Container(cfg.LeasesContainer)
		if err != nil {
			return nil, err
		}
		bc.Store = budget.NewCosmos(leases)
	}
	g := budget.New(bc)
	telemetry.ObserveBudget(func() telemetry.BudgetFigures {
		f := g.Figures()
		return telemetry.BudgetFigures{Group: string(f.Group), Permits: f.Permits, Target: f.Target, Demand: f.Demand}
	})
	return g, nil
}

// cosmosContainer is a Cosmos DB container the handler uses, with the
// setting that names it and what it holds.
type cosmosContainer struct {
	setting, name string
	holds         database.Holds
}

// cosmosContainers lists the containers the handler and its functions use,
// for the check at start: the lease container too when pickup runs, since
// without it the host never starts pickup's trigger and new operations
// wait an interval for scan, or when it holds the budget ledger, since
// without it no process gets a permit.
func cosmosContainers(cfg config.Config) []cosmosContainer {
	containers := []cosmosContainer{
		{"COSMOS_OPERATIONS_CONTAINER", cfg.OperationsContainer, database.HoldsOperations},
		{"COSMOS_RESOURCES_CONTAINER", cfg.ResourcesContainer, database.HoldsResources},
		{"COSMOS_LOCKS_CONTAINER", cfg.LocksContainer, database.HoldsLocks},
		{"COSMOS_BILLING_CONTAINER", cfg.BillingContainer, database.HoldsBilling},
	}
	if cfg.PickupRuns || cfg.ClusterServiceBudget > 0 {
		containers = append(containers, cosmosContainer{"COSMOS_LEASES_CONTAINER", cfg.LeasesContainer, database.HoldsLeases})
	}
	return containers
}

// containerError says that a setting names a container that does not
// exist (err wraps database.ErrContainerNotFound), or whose partition key
// opstatus cannot fill (database.ErrPartitionKeyPath); main prints it as
// the one line of a bad setting.
type containerError struct {
	cosmosContainer
	database string
	err      error
}

func (e *containerError) Error() string {
	if errors.Is(e.err, database.ErrContainerNotFound) {
		return fmt.Sprintf("%s=%s: no such container in Cosmos DB database %s", e.setting, e.name, e.database)
	}
	return fmt.Sprintf("%s=%s: container %s of Cosmos DB database %s has %v", e.setting, e.name, e.name, e.database, e.err)
}

func (e *containerError) Unwrap() error { return e.err }

// containerReader reads a container of the database by its name, and
// checks its partition key against what it holds.
type containerReader interface {
	ReadContainer(ctx context.Context, name string, holds database.Holds) error
}

// checkContainers reads each container within timeout. Only a container
// that does not exist (or whose database does not), or whose partition key
// opstatus cannot fill, is an error: every request to it, or every write,
// would fail. When Cosmos DB cannot be reached, a warning is logged and
// the start goes on, as checkLockTTL does; the Billing container's path is
// then read at its first write.
func checkContainers(ctx context.Context, db containerReader, databaseName string, containers []cosmosContainer,
	timeout time.Duration, logger *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for _, c := range containers {
		err := db.ReadContainer(ctx, c.name, c.holds)
		switch {
		case err == nil:
		case errors.Is(err, database.ErrContainerNotFound), errors.Is(err, database.ErrPartitionKeyPath):
			return &containerError{cosmosContainer: c, database: databaseName, err: err}
		default:
			logger.Warn("could not read the Cosmos DB containers at start; a missing one fails every request to it",
				"container", c.name, "error", err)
			return nil
		}
	}
	return nil
}

// functionTimeout is host.json's functionTimeout, read from the working
// directory, which the host sets to the function app's root; when it cannot
// be read, the shortest default of the plans.
func functionTimeout(logger *slog.Logger) time.Duration {
	b, err := os.ReadFile("host.json")
	if err == nil {
		var d time.Duration
		if d, err = config.FunctionTimeout(b); err == nil {
			return d
		}
	}
	logger.Warn("functionTimeout not read from host.json; assuming the default", "error", err,
		"function_timeout", config.DefaultFunctionTimeout)
	return config.DefaultFunctionTimeout
}

// checkLockTTL reads the lock TTL within timeout. Only a TTL the lock cannot
// work with is an error: when Cosmos DB cannot be reached, a warning is
// logged and the TTL is checked at first use, since a process that exits
// would be restarted into the same outage and the Functions host gives up
// after a few crashes.
func checkLockTTL(ctx context.Context, locker *lock.Locker, timeout time.Duration, logger *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err := locker.TTL(ctx)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, lock.ErrBadTTL):
		return err
	default:
		logger.Warn("could not read the lock TTL at start; it is checked at first use", "error", err)
		return nil
	}
}

// serve answers invocations on ln until ctx is done, then waits up to
// releaseWait for the locks still held to be released: the server's drain
// can end with releases still in flight, and a lock left behind blocks the
// frontend for a whole TTL.
func serve(ctx context.Context, srv *functions.Server, ln net.Listener, locker *lock.Locker,
	releaseWait time.Duration, logger *slog.Logger) error {
	err := srv.Serve(ctx, ln)
	wctx, cancel := context.WithTimeout(context.Background(), releaseWait)
	defer cancel()
	if werr := locker.Wait(wctx); werr != nil {
		logger.Error("stopping with subscription locks not released; their TTL will free them", "error", werr)
		return errors.Join(err, werr)
	}
	return err
}
