// Package stack starts the whole system on this machine: Azurite, the Cosmos
// test server with the production containers, the Cluster Service simulator,
// a stand-in for ARM's notification endpoint, and the Functions host emulator
// driving the built handler. make run, the end-to-end tests, the benchmarks
// and the chaos test share it. It never ships.
package stack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"

	"github.com/opstatus/opstatus/dev/clustersim"
	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/dev/hostemu"
	"github.com/opstatus/opstatus/internal/config"
	"github.com/opstatus/opstatus/internal/testenv"
)

// Database is the demo database name.
const Database = "opstatus"

// Location is the stack's AZURE_LOCATION, which billing items record.
const Location = "eastus"

// OperationsPartitionSetting names the one partition of every Operations
// item, when the frontend writes them so.
const OperationsPartitionSetting = "COSMOS_OPERATIONS_PARTITION_KEY"

// Options configure Start.
type Options struct {
	// LockTTL is the Locks container's DefaultTimeToLive; default 10 s.
	LockTTL time.Duration
	// Sim configures the Cluster Service simulator.
	Sim clustersim.Options
	// SimHandler, when set, wraps the simulator's HTTP handler, so that a
	// test can watch what reaches Cluster Service (its requests in flight,
	// say). Default none.
	SimHandler func(http.Handler) http.Handler
	// Host configures the host emulator (Output defaults to HandlerLog).
	Host hostemu.Options
	// HandlerLog receives the handler's and the host's logs; default a
	// file under the OS temp dir (see Stack.LogPath).
	HandlerLog io.Writer
	// CosmosWrap, when set, returns the endpoint the handler uses to reach
	// the Cosmos server (a fault proxy in front of it, say), given the
	// server's own endpoint.
	CosmosWrap func(endpoint string) (string, error)
	// Settings are extra app settings for the handler. With
	// COSMOS_OPERATIONS_PARTITION_KEY among them, the Frontend writes the
	// Operations items in that partition.
	Settings map[string]string
	// NoHost leaves the host emulator out: the caller runs a host itself
	// (make func-start runs the real one) with Stack.Settings.
	NoHost bool
	// AppDir is the function app the host emulator runs (host.json, the
	// function.json files, the handler binary); default the repository
	// root.
	AppDir string
	// Layout is the Cosmos account's layout; default today's.
	Layout testenv.Layout
	// Shape is how the Frontend writes requests. With
	// frontend.Shape2024_10 and no COSMOS_OPERATIONS_PARTITION_KEY among
	// Settings, the handler is told "workaround", where that frontend
	// wrote every Operations item.
	Shape frontend.Shape
}

// Stack is a running local system. Close stops everything it started.
type Stack struct {
	Azurite  *testenv.Azurite
	Cosmos   *testenv.Cosmos
	Sim      *clustersim.Sim
	SimURL   string
	ARM      *testenv.ARM
	ARMURL   string
	Frontend *frontend.Frontend
	Host     *hostemu.Host
	Queue    *azqueue.ServiceClient
	LogPath  string
	// Settings are the app settings the handler runs with.
	Settings map[string]string

	closers []func() error
	hostErr chan error
	cancel  context.CancelFunc
}

// Start brings the stack up and starts the host emulator on the app in
// opts.AppDir, by default the repository root (the handler binary must be
// built: make build).
func Start(ctx context.Context, opts Options) (_ *Stack, err error) {
	if opts.LockTTL == 0 {
		opts.LockTTL = 10 * time.Second
	}
	s := &Stack{hostErr: make(chan error, 1)}
	defer func() {
		if err != nil {
			_ = s.Close()
		}
	}()
	root := opts.AppDir
	if root == "" {
		if root, err = testenv.RepoRoot(); err != nil {
			return nil, err
		}
	}
	if _, err := os.Stat(filepath.Join(root, "handler")); err != nil {
		return nil, fmt.Errorf("the handler binary is missing (run make build): %w", err)
	}

	var wg sync.WaitGroup
	var azErr, cosErr error
	wg.Add(2)
	go func() { defer wg.Done(); s.Azurite, azErr = testenv.StartAzurite(ctx) }()
	go func() { defer wg.Done(); s.Cosmos, cosErr = testenv.StartCosmos(ctx, testenv.CosmosOptions{}) }()
	wg.Wait()
	if s.Azurite != nil {
		s.closers = append(s.closers, s.Azurite.Stop)
	}
	if s.Cosmos != nil {
		s.closers = append(s.closers, s.Cosmos.Stop)
	}
	if err := errors.Join(azErr, cosErr); err != nil {
		return nil, err
	}
	if err := frontend.CreateLayout(ctx, s.Cosmos.Endpoint, s.Cosmos.Key, Database, opts.Layout, opts.LockTTL); err != nil {
		return nil, err
	}
	if s.Frontend, err = frontend.New(s.Cosmos.Endpoint, s.Cosmos.Key, Database); err != nil {
		return nil, err
	}
	cosmosURL := s.Cosmos.Endpoint
	if opts.CosmosWrap != nil {
		if cosmosURL, err = opts.CosmosWrap(s.Cosmos.Endpoint); err != nil {
			return nil, err
		}
	}

	s.Sim = clustersim.New(opts.Sim)
	var sim http.Handler = s.Sim
	if opts.SimHandler != nil {
		sim = opts.SimHandler(sim)
	}
	if s.SimURL, err = s.serve(sim); err != nil {
		return nil, err
	}
	s.ARM = &testenv.ARM{}
	if s.ARMURL, err = s.serve(s.ARM); err != nil {
		return nil, err
	}
	if s.Queue, err = azqueue.NewServiceClientFromConnectionString(s.Azurite.ConnectionString, nil); err != nil {
		return nil, err
	}

	settings := map[string]string{
		"FUNCTIONS_WORKER_RUNTIME":    "custom",
		"AzureWebJobsStorage":         s.Azurite.ConnectionString,
		"COSMOS_ENDPOINT":             cosmosURL,
		"COSMOS_DATABASE":             Database,
		"COSMOS_KEY":                  s.Cosmos.Key,
		"COSMOS_INSECURE_SKIP_VERIFY": "true",
		"AZURE_LOCATION":              Location,
		"CLUSTER_SERVICE_URL":         s.SimURL,
		"NOTIFICATIONS_ALLOW_HTTP":    "true",
		"SCAN_SCHEDULE":               config.DefaultScanSchedule,
		// pickup runs as in production: the host reads the Operations
		// change feed through its own connection, straight to the server.
		"COSMOS_OPERATIONS_CONTAINER": frontend.OperationsContainer,
		"COSMOS_LEASES_CONTAINER":     frontend.LeasesContainer,
		"COSMOS": fmt.Sprintf("AccountEndpoint=%s;AccountKey=%s;DisableServerCertificateValidation=True;",
			s.Cosmos.Endpoint, s.Cosmos.Key),
	}
	if opts.Shape == frontend.Shape2024_10 {
		settings[OperationsPartitionSetting] = frontend.FixedOperationsPartition
	}
	for k, v := range opts.Settings {
		settings[k] = v
	}
	s.Settings = settings
	s.Frontend.OperationsPartition = strings.TrimSpace(settings[OperationsPartitionSetting])
	s.Frontend.Shape = opts.Shape
	s.Frontend.Location = Location
	for _, q := range []string{"operations", "operations-poison"} {
		if _, err := s.Queue.CreateQueue(ctx, q, nil); err != nil && !queueExists(err) {
			return nil, fmt.Errorf("create queue %s: %w", q, err)
		}
	}
	if opts.NoHost {
		return s, nil
	}
	if s.Host, err = hostemu.Load(root, settings); err != nil {
		return nil, err
	}
	hostOpts := opts.Host
	if hostOpts.Output == nil {
		if opts.HandlerLog == nil {
			f, err := os.CreateTemp("", "opstatus-run-*.log")
			if err != nil {
				return nil, err
			}
			s.LogPath = f.Name()
			s.closers = append(s.closers, f.Close)
			opts.HandlerLog = f
		}
		hostOpts.Output = opts.HandlerLog
		if hostOpts.Logger == nil {
			hostOpts.Logger = slog.New(slog.NewJSONHandler(opts.HandlerLog, nil))
		}
	}
	hostOpts.Restart = true
	s.Host.Options = hostOpts

	hostCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	go func() { s.hostErr <- s.Host.Run(hostCtx) }()
	// Wait until the handler answers, or the host gives up.
	for s.Host.Port() == 0 {
		select {
		case err := <-s.hostErr:
			s.hostErr <- err
			return nil, fmt.Errorf("host emulator: %w", err)
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return s, nil
}

// WaitFeed waits until the host's change feed listeners have read the feed
// once, so that what is written afterwards reaches pickup: a listener
// without a lease continuation starts at the feed's present, as the
// extension's does. It returns at once when the host runs no enabled
// cosmosDBTrigger.
func (s *Stack) WaitFeed(ctx context.Context) error {
	if s.Host == nil || !slices.ContainsFunc(s.Host.Functions(), func(f hostemu.Function) bool {
		return f.Cosmos != nil && !f.Disabled
	}) {
		return nil
	}
	for {
		if c := s.Host.Counters(); c.LeasesAcquired > 0 && c.ChangeFeedReads > 0 {
			return nil
		}
		select {
		case err := <-s.hostErr:
			s.hostErr <- err
			return fmt.Errorf("host emulator: %w", err)
		case <-ctx.Done():
			return fmt.Errorf("waiting for the change feed listener: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func queueExists(err error) bool {
	var re *azcore.ResponseError
	return errors.As(err, &re) && re.StatusCode == http.StatusConflict
}

// serve runs h on a loopback listener until Close.
func (s *Stack) serve(h http.Handler) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	s.closers = append(s.closers, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return srv.Shutdown(ctx)
	})
	return "http://" + ln.Addr().String(), nil
}

// QueueLength returns the approximate number of messages in queue.
func (s *Stack) QueueLength(ctx context.Context, queue string) (int, error) {
	props, err := s.Queue.NewQueueClient(queue).GetProperties(ctx, nil)
	if err != nil {
		return 0, err
	}
	if props.ApproximateMessagesCount == nil {
		return 0, nil
	}
	return int(*props.ApproximateMessagesCount), nil
}

// Close stops the host (SIGTERM to the handler, which drains), then every
// server, in reverse order of start.
func (s *Stack) Close() error {
	var errs []error
	if s.cancel != nil {
		s.cancel()
		select {
		case err := <-s.hostErr:
			errs = append(errs, err)
		case <-time.After(30 * time.Second):
			errs = append(errs, errors.New("host emulator did not stop"))
		}
	}
	for i := len(s.closers) - 1; i >= 0; i-- {
		errs = append(errs, s.closers[i]())
	}
	s.closers = nil
	return errors.Join(errs...)
}
