// Command hostemu runs a function app under the local Functions host
// stand-in (package hostemu) until SIGINT or SIGTERM:
//
//	hostemu --app /work/main --settings local.settings.json [--storage-latency 8ms]
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
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
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
		"restarts", c.HandlerRestarts, "timeouts", c.Timeouts, "hostRestarts", c.HostRestarts)
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
