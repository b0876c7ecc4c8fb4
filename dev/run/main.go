// Command run is `make run`: it starts the local stack (Azurite, the Cosmos
// test server, the Cluster Service simulator, the Functions host emulator
// driving the built handler), writes demo operations as the frontend would,
// prints every transition opstatus writes, and ends with a summary once every
// operation is terminal, then with one of the handler's OpenTelemetry
// metrics, which the handler exports to an OTLP receiver in this process
// (dev/otlpsink). Ctrl-C stops everything it started.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/opstatus/opstatus/dev/clustersim"
	"github.com/opstatus/opstatus/dev/demo"
	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/dev/hostemu"
	"github.com/opstatus/opstatus/dev/otlpsink"
	"github.com/opstatus/opstatus/dev/stack"
	"github.com/opstatus/opstatus/internal/testenv"
)

func main() {
	keep := flag.Bool("keep-running", false, "keep the stack running after the demo converges, until Ctrl-C")
	realHost := flag.Bool("func", false, "run the app under the real Functions host (func start) instead of the host emulator")
	timeout := flag.Duration("timeout", 3*time.Minute, "give up when the demo has not converged by then")
	partition := flag.String("operations-partition", os.Getenv(stack.OperationsPartitionSetting),
		"write every Operations item in this one partition, as ARO-HCP's frontend did with \"workaround\", and tell the handler so "+
			"("+stack.OperationsPartitionSetting+"); default "+stack.OperationsPartitionSetting+" of the environment, or each in its subscription's")
	version := flag.String("frontend", string(frontend.ShapeCurrent),
		"the ARO-HCP revision the frontend stand-in and the Cosmos account follow: \"current\", or \"2024-10\" "+
			"(the frontend at 07deb7918 serving the cluster and node pool requests, every Operations item in \"workaround\", "+
			"the account as dev-infrastructure at 0195ac565 created it: Billing on /partitionKey)")
	flag.Parse()
	shape, layout, err := frontend.ParseVersion(strings.TrimSpace(*version))
	if err != nil {
		fmt.Fprintln(os.Stderr, "run: -frontend:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code, err := run(ctx, os.Stdout, *keep, *realHost, *timeout, strings.TrimSpace(*partition), shape, layout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "run:", err)
	}
	os.Exit(code)
}

// runBudget is the run's CLUSTER_SERVICE_BUDGET: small, so that the demo's
// 27 operations share it.
const runBudget = 16

func run(ctx context.Context, out io.Writer, keep, realHost bool, timeout time.Duration, partition string,
	shape frontend.Shape, layout testenv.Layout) (int, error) {
	started := time.Now()
	host := "the host emulator"
	if realHost {
		host = "the Functions host (func start)"
		if _, err := exec.LookPath("func"); err != nil {
			return 1, errors.New("func, Azure Functions Core Tools, is not installed; make run uses the host emulator instead")
		}
	}
	fmt.Fprintf(out, "starting Azurite, the Cosmos test server, the Cluster Service simulator and %s…\n", host)
	// The handler's spans and metrics go to an OTLP receiver in this process.
	sink, err := otlpsink.Start()
	if err != nil {
		return 1, err
	}
	defer sink.Close()
	outcomes := demo.NewOutcomes()
	settings := demo.TelemetrySettings(sink)
	if partition != "" {
		settings[stack.OperationsPartitionSetting] = partition
	}
	// The budget's ledger lives in the Leases container the stack creates
	// (COSMOS_LEASES_CONTAINER); every Cluster Service request is counted
	// app-wide against it.
	settings["CLUSTER_SERVICE_BUDGET"] = strconv.Itoa(runBudget)
	var inFlight *clustersim.InFlight
	s, err := stack.Start(ctx, stack.Options{NoHost: realHost, Host: hostemu.Options{OnInvocation: outcomes.Record},
		Settings: settings, Shape: shape, Layout: layout,
		// Called once the schema exists and before the host starts.
		CosmosWrap: func(endpoint string) (string, error) { return endpoint, seedLedger(ctx, endpoint, runBudget) },
		SimHandler: func(next http.Handler) http.Handler {
			inFlight = clustersim.CountInFlight(next)
			return inFlight
		}})
	if err != nil {
		return 1, err
	}
	defer func() {
		fmt.Fprintln(out, "stopping everything…")
		if err := s.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "stop:", err)
		}
	}()
	fmt.Fprintf(out, "up in %s · handler and host logs: %s\n", time.Since(started).Round(time.Millisecond), s.LogPath)
	fmt.Fprintf(out, "  Cosmos %s · Cluster Service simulator %s · queue %s\n", s.Cosmos.Endpoint, s.SimURL, s.Azurite.QueueEndpoint)
	if shape == frontend.Shape2024_10 {
		fmt.Fprintf(out, "  ARO-HCP 2024-10: the account as dev-infrastructure at 0195ac565 created it (Billing on /partitionKey), "+
			"cluster and node pool requests served as the frontend at 07deb7918 did\n")
	}
	if p := s.Settings[stack.OperationsPartitionSetting]; p != "" {
		fmt.Fprintf(out, "  every Operations item in partition %q (%s): each operation's subscription is its externalId's\n",
			p, stack.OperationsPartitionSetting)
	}

	if realHost {
		stop, err := funcStart(ctx, s)
		if err != nil {
			return 1, err
		}
		defer stop()
	}

	w, err := demo.Run(ctx, s, out, timeout, outcomes)
	if w != nil {
		if errors.Is(err, context.Canceled) {
			fmt.Fprintln(out, "\ninterrupted")
		}
		if !w.Summary(context.WithoutCancel(ctx)) && err == nil {
			err = errors.New("some operations ended in an unexpected state")
		}
		demo.TelemetrySummary(ctx, out, sink, 3*time.Second)
		st := inFlight.Stats()
		fmt.Fprintf(out, "  Cluster Service requests in flight, all processes: at most %d of CLUSTER_SERVICE_BUDGET %d\n", st.Max, runBudget)
		if st.Max > runBudget && err == nil {
			err = fmt.Errorf("%d Cluster Service requests in flight, over the budget %d", st.Max, runBudget)
		}
	}
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return 130, nil
		}
		return 1, err
	}
	if keep {
		fmt.Fprintln(out, "\n--keep-running: the stack stays up; Ctrl-C stops it")
		<-ctx.Done()
	}
	return 0, nil
}
