// Command hostemu runs a function app under the local Functions host
// stand-in (package hostemu) until SIGINT or SIGTERM:
//
//	hostemu --app /work/main --settings local.settings.json [--storage-latency 8ms] [--flex]
//
// --flex runs the app as the Flex Consumption plan does (hostemu.FlexOptions):
// scan and poll in instances of their own, poll's instances following the
// queue, no SIGTERM, the timer a singleton by a lease; the other --flex-*
// flags set its figures (0 takes the platform's). The --cosmos-* flags
// shorten the intervals of Cosmos DB triggers (hostemu.CosmosTriggerOptions).
//
// The settings file has the Core Tools shape
// {"IsEncrypted":false,"Values":{"NAME":"value",...}}; a relative path is
// taken from the app directory.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/opstatus/opstatus/dev/hostemu"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "hostemu:", err)
		os.Exit(1)
	}
}

func run() error {
	app := flag.String("app", ".", "function app directory (holds host.json)")
	settingsPath := flag.String("settings", "local.settings.json", "settings file; relative paths are taken from --app")
	instances := flag.Int("instances", 1, "number of host instances")
	restart := flag.Bool("restart", true, "when a handler exits, do what the host and the platform do (see Options.Restart); else stop")
	verbose := flag.Bool("v", false, "log every invocation")
	storageLatency := flag.Duration("storage-latency", 0, "delay every Storage queue request (receive, delete, update, each message written) by this much")
	flex := flag.Bool("flex", false, "run the app as the Flex Consumption plan does: one function per instance, scale-out following the queue, no SIGTERM, the timer a singleton by a lease")
	maxInstances := flag.Int("flex-max-instances", 0, "with --flex: maximumInstanceCount of each scaled function group (0: 100)")
	overshoot := flag.Int("flex-overshoot", 0, "with --flex: instances a scaled group may run beyond --flex-max-instances when its target asks for more (as Azure/azure-functions-host#11790 reports)")
	rollEvery := flag.Duration("flex-rolling-update-every", 0, "with --flex: a rolling site update this often (old and new instances of each group together, the old drained then killed); 0: none")
	rollBatch := flag.Int("flex-rolling-batch", 1, "with --flex-rolling-update-every: instances of a group replaced at once (an assumption: Flex documents no size)")
	rollOverlap := flag.Duration("flex-rolling-overlap", 0, "with --flex-rolling-update-every: how long new instances run beside the old before those are drained (an assumption)")
	appWide := flag.Bool("flex-app-wide-limit", false, "with --flex: maximumInstanceCount bounds every group's instances together, not each group's")
	alwaysReady := flag.String("flex-always-ready", "", "with --flex: function=count,… instances each scaled function keeps however little work there is (default none)")
	startDelay := flag.Duration("flex-start-delay", 0, "with --flex: how long an instance a scale decision adds takes before its handler starts (an assumption: Flex documents none)")
	scaleInterval := flag.Duration("flex-scale-interval", 0, "with --flex: how often the scale controller decides (0: 30s)")
	scaleInDelay := flag.Duration("flex-scale-in-delay", 0, "with --flex: how long the target must stay below the instance count before instances go (0: 1m; negative: at once)")
	timerLease := flag.Duration("flex-timer-lease", 0, "with --flex: the timer's singleton lease period (0: 60s)")
	timerLeaseRetry := flag.Duration("flex-timer-lease-retry", 0, "with --flex: how often an instance without the timer's lease tries to take it (0: 1m)")
	feedPollDelay := flag.Duration("cosmos-feed-poll-delay", 0, "Cosmos DB triggers: the wait after a read of the change feed found nothing (0: function.json's feedPollDelay, else 5s)")
	leaseAcquire := flag.Duration("cosmos-lease-acquire", 0, "Cosmos DB triggers: how often a listener looks for leases to take (0: function.json's leaseAcquireInterval, else 13s)")
	leaseExpiration := flag.Duration("cosmos-lease-expiration", 0, "Cosmos DB triggers: how long a lease stays its owner's without renewal (0: function.json's leaseExpirationInterval, else 60s)")
	leaseRenew := flag.Duration("cosmos-lease-renew", 0, "Cosmos DB triggers: how often the owner renews a lease (0: function.json's leaseRenewInterval, else 17s)")
	flag.Parse()

	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	path := *settingsPath
	if !filepath.IsAbs(path) {
		path = filepath.Join(*app, path)
	}
	settings, err := readSettings(path)
	if err != nil {
		return err
	}
	h, err := hostemu.Load(*app, settings)
	if err != nil {
		return err
	}
	h.Options = hostemu.Options{
		Instances:      *instances,
		Restart:        *restart,
		Output:         os.Stdout,
		Logger:         logger,
		StorageLatency: *storageLatency,
		CosmosTrigger: &hostemu.CosmosTriggerOptions{
			FeedPollDelay:           *feedPollDelay,
			LeaseAcquireInterval:    *leaseAcquire,
			LeaseExpirationInterval: *leaseExpiration,
			LeaseRenewInterval:      *leaseRenew,
		},
	}
	if *flex {
		ready, err := hostemu.ParseAlwaysReady(*alwaysReady)
		if err != nil {
			return err
		}
		h.Options.Flex = &hostemu.FlexOptions{
			MaximumInstanceCount: *maxInstances,
			Overshoot:            *overshoot,
			AppWideLimit:         *appWide,
			AlwaysReady:          ready,
			StartDelay:           *startDelay,
			ScaleInterval:        *scaleInterval,
			ScaleInDelay:         *scaleInDelay,
			TimerLease:           *timerLease,
			TimerLeaseRetry:      *timerLeaseRetry,
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *flex && *rollEvery > 0 {
		go rollingUpdates(ctx, h, *rollEvery, hostemu.RollingUpdate{Batch: *rollBatch, Overlap: *rollOverlap}, logger)
	}
	err = h.Run(ctx)
	c := h.Counters()
	var calls int64
	for _, n := range c.Invocations {
		calls += n
	}
	logger.Info("hostemu: counters",
		"invocations", calls, "failures", c.Failures,
		"enqueued", c.MessagesEnqueued, "deleted", c.MessagesDeleted,
		"retried", c.MessagesRetried, "poisoned", c.MessagesPoisoned,
		"ticksRun", c.TimerTicksRun, "ticksSkipped", c.TimerTicksSkipped,
		"restarts", c.HandlerRestarts, "timeouts", c.Timeouts, "hostRestarts", c.HostRestarts,
		"instancesStarted", c.InstancesStarted, "wakeups", c.Wakeups,
		"changeFeedReads", c.ChangeFeedReads, "documentsDelivered", c.DocumentsDelivered,
		"checkpoints", c.Checkpoints, "leasesAcquired", c.LeasesAcquired)
	return err
}

// readSettings reads the Values of a local.settings.json file.
func readSettings(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading settings: %w", err)
	}
	var f struct {
		IsEncrypted bool              `json:"IsEncrypted"`
		Values      map[string]string `json:"Values"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("parsing %s: %w", path, err)
	}
	if f.IsEncrypted {
		return nil, errors.New(path + ": encrypted settings are not supported")
	}
	return f.Values, nil
}

// rollingUpdates runs a rolling update every period until ctx ends.
func rollingUpdates(ctx context.Context, h *hostemu.Host, period time.Duration, u hostemu.RollingUpdate, log *slog.Logger) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := h.RollingUpdate(ctx, u); err != nil && ctx.Err() == nil {
			log.Warn("hostemu: rolling update failed", "err", err)
		}
	}
}
