// Command clustersim serves a simulated Cluster Service for local runs,
// end-to-end tests and benchmarks. It prints "ready http://127.0.0.1:<port>"
// on stdout once it accepts connections and serves until SIGTERM or SIGINT.
//
// Usage:
//
//	clustersim [--listen 127.0.0.1:0] [--seed 1] [--latency 50ms] [--error-rate 0.05] ...
//
// See package clustersim for the HTTP API.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/opstatus/opstatus/dev/clustersim"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "clustersim:", err)
		}
		os.Exit(2)
	}
}

// run serves until ctx is done.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("clustersim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		listen   = fs.String("listen", "127.0.0.1:0", "address to listen on (loopback only)")
		seed     = fs.Int64("seed", 1, "seed of the fault-injection random source")
		logLevel = fs.String("log-level", "info", "log level: debug, info, warn or error")

		latency     = fs.Duration("latency", 0, "latency added to every status call")
		jitter      = fs.Duration("latency-jitter", 0, "latency spread (uniform, +/-)")
		errorRate   = fs.Float64("error-rate", 0, "fraction of status calls answered 503")
		timeoutRate = fs.Float64("timeout-rate", 0, "fraction of status calls that hang, then answer 504")
		timeout     = fs.Duration("timeout", 30*time.Second, "how long a timed-out call hangs")
		spikeRate   = fs.Float64("spike-rate", 0, "fraction of status calls given a latency spike")
		spike       = fs.Duration("spike", 2*time.Second, "extra latency of a spike")
		outage      = fs.Bool("outage", false, "start in a full outage (every status call 503)")

		pending      = fs.Duration("pending", time.Second, "default pending duration of a create")
		validating   = fs.Duration("validating", time.Second, "default validating duration of a create")
		installing   = fs.Duration("installing", 3*time.Second, "default installing duration of a create")
		uninstalling = fs.Duration("uninstalling", 2*time.Second, "default uninstalling duration of a delete")
		updating     = fs.Duration("updating", 2*time.Second, "default updating duration of an update")
		issuing      = fs.Duration("issuing", 2*time.Second, "default time a break-glass credential stays created before issued")
		revoking     = fs.Duration("revoking", 2*time.Second, "default time a revoked credential stays awaiting_revocation")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	if err := checkLoopback(*listen); err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	faults := clustersim.Faults{
		Latency: clustersim.Duration(*latency), LatencyJitter: clustersim.Duration(*jitter),
		ErrorRate: *errorRate, TimeoutRate: *timeoutRate, Timeout: clustersim.Duration(*timeout),
		SpikeRate: *spikeRate, Spike: clustersim.Duration(*spike), Outage: *outage,
	}
	if err := faults.Validate(); err != nil {
		return fmt.Errorf("fault flags: %w", err)
	}
	sim := clustersim.New(clustersim.Options{
		Seed:   *seed,
		Logger: logger,
		Faults: faults,
		Defaults: clustersim.Script{
			Pending: clustersim.Duration(*pending), Validating: clustersim.Duration(*validating),
			Installing: clustersim.Duration(*installing), Uninstalling: clustersim.Duration(*uninstalling),
			Updating: clustersim.Duration(*updating), Issuing: clustersim.Duration(*issuing),
			Revoking: clustersim.Duration(*revoking),
		},
	})

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := &http.Server{
		Handler:           sim,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	if _, err := fmt.Fprintf(stdout, "ready http://%s\n", ln.Addr()); err != nil {
		_ = srv.Close()
		return fmt.Errorf("writing ready line: %w", err)
	}
	logger.Info("clustersim serving", "addr", ln.Addr().String(), "seed", *seed)

	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	logger.Info("clustersim stopping")
	sim.Close() // release calls held by injected latency or timeouts
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		_ = srv.Close()
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// checkLoopback refuses listen addresses that are not loopback IPs.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--listen %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("--listen %q: host must be a loopback IP such as 127.0.0.1", addr)
	}
	return nil
}
