package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue/queueerror"

	"github.com/opstatus/opstatus/dev/clustersim"
	"github.com/opstatus/opstatus/dev/otlpsink"
	opconfig "github.com/opstatus/opstatus/internal/config"
	"github.com/opstatus/opstatus/internal/testenv"
)

// lockTTL is the Locks container's DefaultTimeToLive, as in make run.
const lockTTL = 10 * time.Second

// queueName is the queue of scan/function.json and poll/function.json.
const queueName = "operations"

// insecureClient reads the Cosmos test server's own endpoints; its
// certificate is self-signed.
var insecureClient = &http.Client{Transport: &http.Transport{
	TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // local test server
}}

// env is what every scenario shares: the Cosmos-protocol server, Azurite,
// and one HTTP endpoint in front of the current Cluster Service simulator.
// Each run gets a database (whose requests the Cosmos server counts) and a
// simulator of its own.
type env struct {
	root string
	// app is the staged copy of the function app (see stageApp); handler
	// is its binary and handlerSum the binary's SHA-256.
	app        string
	handler    string
	handlerSum string
	commit     string
	cosmos     *testenv.Cosmos
	// queue is Azurite's queue service alone.
	queue  *testenv.Azurite
	queues *azqueue.ServiceClient
	// direct is the harness's own Cosmos client: seeding and reading
	// results, outside every measured window.
	direct *azcosmos.Client

	sim    atomic.Pointer[clustersim.Sim]
	simURL string
	simSrv *http.Server
	// inFlight counts the Cluster Service requests in flight at the
	// simulator, every handler's together.
	inFlight *clustersim.InFlight
	// inFlightAll is the most requests in flight over the whole bench.
	inFlightAll atomic.Int64
	// sink receives the handlers' metrics (the budget ledger's).
	sink *otlpsink.Sink
	// budget is CLUSTER_SERVICE_BUDGET, which each new database's
	// ledger is seeded with.
	budget int

	log     io.Writer // handler and host output
	logPath string

	// settings are extra app settings for every handler (-setting).
	settings map[string]string

	runs atomic.Int64
}

// startEnv stages the app and starts the servers.
func startEnv(ctx context.Context, cfg config) (_ *env, err error) {
	e := &env{settings: cfg.settings, budget: cfg.budget}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	if e.root, err = testenv.RepoRoot(); err != nil {
		return nil, err
	}
	if e.app, e.handlerSum, err = stageApp(e.root); err != nil {
		return nil, err
	}
	if cfg.batch != "" {
		if err := setBatch(e.app, cfg.batch); err != nil {
			return nil, err
		}
	}
	e.handler = filepath.Join(e.app, "handler")
	e.commit = gitCommit(e.root)
	f, err := os.CreateTemp("", "opstatus-bench-*.log")
	if err != nil {
		return nil, err
	}
	e.log, e.logPath = f, f.Name()

	var wg sync.WaitGroup
	var azErr, cosErr error
	wg.Go(func() { e.queue, azErr = testenv.StartAzuriteQueue(ctx) })
	// Over TLS, as a real account is reached. The server counts the
	// requests itself: a counting proxy in the path costs more CPU per
	// request than the server.
	wg.Go(func() { e.cosmos, cosErr = testenv.StartCosmos(ctx, testenv.CosmosOptions{}) })
	wg.Wait()
	if err := errors.Join(azErr, cosErr); err != nil {
		return nil, err
	}
	if e.queues, err = azqueue.NewServiceClientFromConnectionString(e.queue.ConnectionString, nil); err != nil {
		return nil, err
	}
	if e.direct, err = testenv.NewCosmosClient(e.cosmos.Endpoint, e.cosmos.Key); err != nil {
		return nil, err
	}

	if err := e.startSink(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	e.simURL = "http://" + ln.Addr().String()
	e.sim.Store(clustersim.New(clustersim.Options{}))
	e.inFlight = clustersim.CountInFlight(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { e.sim.Load().ServeHTTP(w, r) }))
	// Every scenario's requests in flight, whatever run resets the
	// maximum: cs_in_flight_max covers them all.
	e.inFlight.Watch(func(n int64, _ time.Time) {
		for m := e.inFlightAll.Load(); n > m && !e.inFlightAll.CompareAndSwap(m, n); m = e.inFlightAll.Load() {
		}
	})
	e.simSrv = &http.Server{
		Handler:           e.inFlight,
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { _ = e.simSrv.Serve(ln) }()
	return e, nil
}

// close stops everything startEnv started.
func (e *env) close() {
	if e.simSrv != nil {
		e.sim.Load().Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = e.simSrv.Shutdown(ctx)
		cancel()
	}
	if e.sink != nil {
		_ = e.sink.Close()
	}
	if e.cosmos != nil {
		_ = e.cosmos.Stop()
	}
	if e.queue != nil {
		_ = e.queue.Stop()
	}
	if c, ok := e.log.(io.Closer); ok {
		_ = c.Close()
	}
	if e.app != "" {
		_ = os.RemoveAll(e.app)
	}
}

// newSim installs a fresh simulator, recording every call, with the given
// latency on every status call.
func (e *env) newSim(latency time.Duration) (*clustersim.Sim, error) {
	sim := clustersim.New(clustersim.Options{RecordCalls: true})
	if err := sim.SetFaults(clustersim.Faults{Latency: clustersim.Duration(latency)}); err != nil {
		return nil, err
	}
	if old := e.sim.Swap(sim); old != nil {
		old.Close()
	}
	return sim, nil
}

// requests returns the Cosmos requests the server answered for database db
// and the Cluster Service calls sim answered, since each started.
func (e *env) requests(ctx context.Context, db string, sim *clustersim.Sim) (requests, error) {
	counts, err := e.cosmos.Counts(ctx, db)
	if err != nil {
		return requests{}, err
	}
	return classify(counts, simCalls(sim)), nil
}

// newDatabase names a database for one run.
func (e *env) newDatabase(label string) string {
	return fmt.Sprintf("bench-%d-%s", e.runs.Add(1), label)
}

// dropDatabase deletes a run's database so that the server's memory does
// not grow from run to run.
func (e *env) dropDatabase(ctx context.Context, name string) {
	if db, err := e.direct.NewDatabase(name); err == nil {
		_, _ = db.Delete(ctx, nil)
	}
}

// clearQueues empties the operations queue and its poison queue.
func (e *env) clearQueues(ctx context.Context) error {
	for _, name := range []string{queueName, queueName + "-poison"} {
		_, err := e.queues.NewQueueClient(name).ClearMessages(ctx, nil)
		if err != nil && !queueerror.HasCode(err, queueerror.QueueNotFound) {
			return fmt.Errorf("clearing queue %s: %w", name, err)
		}
	}
	return nil
}

// queueLength returns the approximate number of messages in the queue.
func (e *env) queueLength(ctx context.Context) (int, error) {
	props, err := e.queues.NewQueueClient(queueName).GetProperties(ctx, nil)
	if err != nil {
		return 0, err
	}
	if props.ApproximateMessagesCount == nil {
		return 0, nil
	}
	return int(*props.ApproximateMessagesCount), nil
}

// handlerSettings are the app settings the handler needs, for database db.
func (e *env) handlerSettings(db string) map[string]string {
	s := map[string]string{
		"FUNCTIONS_WORKER_RUNTIME":    "custom",
		"AzureWebJobsStorage":         e.queue.ConnectionString,
		"COSMOS_ENDPOINT":             e.cosmos.Endpoint,
		"COSMOS_DATABASE":             db,
		"COSMOS_KEY":                  e.cosmos.Key,
		"COSMOS_INSECURE_SKIP_VERIFY": "true",
		"AZURE_LOCATION":              "eastus",
		"CLUSTER_SERVICE_URL":         e.simURL,
		"NOTIFICATIONS_ALLOW_HTTP":    "true",
		"SCAN_SCHEDULE":               opconfig.DefaultScanSchedule,
	}
	maps.Copy(s, e.settings)
	return s
}
