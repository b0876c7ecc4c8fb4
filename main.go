// Command handler is opstatus's Azure Functions custom handler: an HTTP
// server on 127.0.0.1 that the Functions host calls for the scan (timer) and
// poll (queue) functions.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/opstatus/opstatus/functions"
	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/clusterservice"
	"github.com/opstatus/opstatus/internal/config"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/internal/lock"
	"github.com/opstatus/opstatus/poll"
	"github.com/opstatus/opstatus/scan"
)

func main() {
	cfg, err := config.Load(os.Getenv)
	if err != nil {
		fmt.Fprintf(os.Stderr, "opstatus: setting %v\n", err)
		os.Exit(1)
	}
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, cfg, logger); err != nil {
		logger.Error("opstatus stopped", "error", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg config.Config, logger *slog.Logger) error {
	db, err := database.NewCosmosClient(database.CosmosConfig{
		Endpoint:            cfg.CosmosEndpoint,
		Database:            cfg.CosmosDatabase,
		Key:                 cfg.CosmosKey,
		InsecureSkipVerify:  cfg.CosmosInsecureSkipVerify,
		OperationsContainer: cfg.OperationsContainer,
		ResourcesContainer:  cfg.ResourcesContainer,
		LocksContainer:      cfg.LocksContainer,
	})
	if err != nil {
		return err
	}
	cs, err := clusterservice.NewClient(clusterservice.Config{
		URL:                cfg.ClusterServiceURL,
		InsecureSkipVerify: cfg.ClusterServiceInsecureSkipVerify,
		ClientID:           cfg.ClusterServiceClientID,
		ClientSecret:       cfg.ClusterServiceClientSecret,
		TokenURL:           cfg.ClusterServiceTokenURL,
		Logger:             logger,
	})
	if err != nil {
		return err
	}
	defer cs.Close()

	hostname, _ := os.Hostname()
	schedule := &poll.Schedule{}
	pollFn := &poll.Function{
		DB:       db,
		Cluster:  cs,
		Locker:   lock.New(db.Locks(), lock.Options{Logger: logger}),
		Notifier: arm.NewNotifier(cfg.NotificationsAllowHTTP),
		Owner:    fmt.Sprintf("opstatus/%s/%d", hostname, os.Getpid()),
		Schedule: schedule,
	}
	scanFn := &scan.Function{DB: db, Schedule: schedule}
	srv := functions.NewServer(logger, map[string]functions.Handler{
		"scan": scanFn.Handle,
		"poll": pollFn.Handle,
	})

	addr, err := functions.ListenAddr(cfg.Port)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	logger.Info("opstatus listening", "addr", ln.Addr().String())
	return srv.Serve(ctx, ln)
}
