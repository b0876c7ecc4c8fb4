package e2e

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/clustersim"
	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/dev/hostemu"
	"github.com/opstatus/opstatus/dev/otlpsink"
	"github.com/opstatus/opstatus/dev/stack"
	"github.com/opstatus/opstatus/internal/telemetry"
	"github.com/opstatus/opstatus/internal/testenv"
)

// The built handler, run by the host emulator with OTEL_* app settings
// naming an OTLP/HTTP receiver, exports the spans of a scan and of polls
// that update operations, continuing the host's trace, and every metric.
func TestTelemetryThroughTheHost(t *testing.T) {
	testenv.NeedsServers(t)
	sink, err := otlpsink.Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = sink.Close() })

	var mu sync.Mutex
	sent := map[string]string{} // trace id -> parent span id, as the host sent them
	ctx := context.Background()
	s, err := stack.Start(ctx, stack.Options{
		Settings: map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT": sink.URL,
			"OTEL_SERVICE_NAME":           "opstatus-e2e",
			"OTEL_METRIC_EXPORT_INTERVAL": "500",
			"OTEL_BSP_SCHEDULE_DELAY":     "100",
		},
		Host: hostemu.Options{OnInvocation: func(inv hostemu.Invocation) {
			parts := strings.Split(inv.TraceParent, "-")
			mu.Lock()
			sent[parts[1]] = parts[2]
			mu.Unlock()
		}},
	})
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()

	// A create that moves on, a node pool that is ready, and a create past
	// its deadline (1 hour) that ends Failed and notifies ARM.
	sub := "dddddddd-0000-4000-8000-000000000004"
	now := time.Now().UTC()
	require.NoError(t, s.Sim.AddCluster("tc1", clustersim.Script{Installing: clustersim.Duration(time.Hour)}))
	require.NoError(t, s.Sim.AddNodePool("tc1", "np1", clustersim.Script{}))
	require.NoError(t, s.Sim.AddCluster("tc2", clustersim.Script{Installing: clustersim.Duration(time.Hour)}))
	ops := []frontend.Operation{
		{ID: "op-create", Request: "Create", Status: "Accepted", ExternalID: clusterKey(sub, "tc1"),
			InternalID: "/api/aro_hcp/v1alpha1/clusters/tc1", StartTime: now},
		{ID: "op-np", Request: "Create", Status: "Accepted", ExternalID: clusterKey(sub, "tc1") + "/nodePools/np1",
			InternalID: "/api/aro_hcp/v1alpha1/clusters/tc1/node_pools/np1", StartTime: now},
		{ID: "op-late", Request: "Create", Status: "Provisioning", ExternalID: clusterKey(sub, "tc2"),
			InternalID: "/api/clusters_mgmt/v1/clusters/tc2", StartTime: now.Add(-2 * time.Hour),
			NotificationURI: s.ARMURL + "/notify/op-late"},
	}
	for _, op := range ops {
		op.PartitionKey, op.LastTransitionTime = sub, op.StartTime
		require.NoError(t, s.Frontend.PutOperation(ctx, op))
		require.NoError(t, s.Frontend.PutResource(ctx, frontend.Resource{ID: "res-" + op.ID, PartitionKey: sub, Key: op.ExternalID,
			InternalID: op.InternalID, ActiveOperationID: op.ID, ProvisioningState: op.Status}))
	}
	want := map[string]string{"op-create": "Provisioning", "op-np": "Succeeded", "op-late": "Failed"}
	require.Eventually(t, func() bool {
		for id, status := range want {
			item, err := s.Frontend.Operation(ctx, sub, id)
			if err != nil || item == nil || item["status"] != status {
				return false
			}
		}
		return len(s.ARM.Received()) == 1
	}, 60*time.Second, 200*time.Millisecond, "the scan and the polls update every operation")

	opSpan := func(id string) (otlpsink.Span, bool) {
		for _, sp := range sink.SpansNamed(telemetry.SpanPollOperation) {
			if sp.Attrs["aro.operation.id"] == id && sp.Attrs["opstatus.outcome"] == "updated" {
				return sp, true
			}
		}
		return otlpsink.Span{}, false
	}
	require.Eventually(t, func() bool {
		for id := range want {
			if _, ok := opSpan(id); !ok {
				return false
			}
		}
		return len(sink.SpansNamed(telemetry.SpanNotify)) > 0 &&
			sink.Total(telemetry.MetricPastDeadline, nil) >= 1 &&
			sink.Total(telemetry.MetricPollOperations, map[string]string{"outcome": "updated"}) >= 3
	}, 30*time.Second, 100*time.Millisecond, "spans and metrics arrive")

	spans := sink.Spans()
	byID := map[string]otlpsink.Span{}
	for _, sp := range spans {
		byID[sp.SpanID] = sp
	}
	childrenOf := func(parent otlpsink.Span) []otlpsink.Span {
		var out []otlpsink.Span
		for _, sp := range spans {
			if sp.ParentID == parent.SpanID && sp.TraceID == parent.TraceID {
				out = append(out, sp)
			}
		}
		return out
	}
	names := func(ss []otlpsink.Span) []string {
		var out []string
		for _, sp := range ss {
			out = append(out, sp.Name)
		}
		return out
	}

	// Each invocation span continues the trace the host sent.
	mu.Lock()
	defer mu.Unlock()
	for _, fn := range []string{"scan", "poll"} {
		inv := sink.SpansNamed(fn)
		require.NotEmpty(t, inv, "%s spans", fn)
		for _, sp := range inv {
			require.Equal(t, sent[sp.TraceID], sp.ParentID, "%s continues the host's traceparent", fn)
			require.Equal(t, "opstatus-e2e", sp.Resource["service.name"])
			require.NotEmpty(t, sp.Attrs["faas.invocation_id"])
		}
	}

	// One span per operation under its poll, carrying the ARO-HCP
	// attributes, with the Cluster Service, Cosmos, lock and notification
	// spans under it.
	create, _ := opSpan("op-create")
	require.Equal(t, "poll", byID[create.ParentID].Name)
	require.Equal(t, sub, create.Attrs["aro.subscription.id"])
	require.Equal(t, "tc1", create.Attrs["aro.resource.name"])
	require.Equal(t, "Create", create.Attrs["aro.operation.type"])
	require.Equal(t, "tc1", create.Attrs["cs.cluster.id"])
	require.Equal(t, "installing", create.Attrs["cs.cluster.state"])
	kids := childrenOf(create)
	require.Contains(t, names(kids), telemetry.SpanClusterService)
	require.Contains(t, names(kids), telemetry.SpanLockWait, "the operation took the lock")
	require.Contains(t, strings.Join(names(kids), ","), "read_item", "its Cosmos reads")
	require.Contains(t, strings.Join(names(kids), ","), "replace_item", "its Cosmos writes, under the lock")
	for _, k := range kids {
		if k.Name == telemetry.SpanClusterService {
			require.Equal(t, "200", k.Attrs["http.response.status_code"])
		}
		if k.Name == telemetry.SpanLockWait {
			require.Equal(t, sub, k.Attrs["aro.subscription.id"])
			require.Contains(t, strings.Join(names(childrenOf(k)), ","), "create_item", "the lock item's create")
		}
	}

	np, _ := opSpan("op-np")
	require.Equal(t, "np1", np.Attrs["aro.resource.name"])
	require.Equal(t, "tc1", np.Attrs["cs.cluster.id"])
	require.Equal(t, "np1", np.Attrs["cs.nodepool.id"])
	require.Equal(t, "ready", np.Attrs["cs.nodepool.state"])

	late, _ := opSpan("op-late")
	require.Equal(t, "tc2", late.Attrs["cs.cluster.id"])
	require.Contains(t, names(childrenOf(late)), telemetry.SpanNotify)

	// The metrics, with their attributes.
	require.Positive(t, sink.Total(telemetry.MetricPollOperations, map[string]string{"outcome": "updated", "request": "Create"}))
	require.Equal(t, 1.0, sink.Total(telemetry.MetricPastDeadline, map[string]string{"request": "Create"}))
	require.Positive(t, sink.Histogram(telemetry.MetricPollDuration, nil).Count)
	require.Positive(t, sink.Histogram(telemetry.MetricClusterServiceDuration, map[string]string{"status_code": "200"}).Count)
	require.Positive(t, sink.Histogram(telemetry.MetricLockWait, map[string]string{"acquired": "true"}).Count)
	age := sink.Histogram(telemetry.MetricMessageAge, nil)
	require.Positive(t, age.Count)
	require.Less(t, age.Sum/float64(age.Count), 60.0, "messages are polled within seconds of their scan")
	pending := map[string]bool{}
	for _, p := range sink.Points(telemetry.MetricScanPending) {
		pending[p.Attrs["status"]+"/"+p.Attrs["request"]] = true
	}
	require.True(t, pending["Accepted/Create"], "%v", pending)
	require.True(t, pending["Provisioning/Create"], "%v", pending)
	oldest := 0.0
	for _, p := range sink.Points(telemetry.MetricScanOldest) {
		if p.Attrs["request"] == "Create" && p.Attrs["resource_type"] == "cluster" {
			oldest = max(oldest, p.Value)
		}
	}
	require.InDelta(t, (2 * time.Hour).Seconds(), oldest, 120, "the cluster Create past its deadline was the oldest")
}

// With no OTLP endpoint the handler exports nothing, even to the exporters'
// default endpoint (localhost:4318), and logs nothing about telemetry,
// whatever other OTEL_* settings it has.
func TestTelemetryOffExportsAndLogsNothing(t *testing.T) {
	var conns atomic.Int64
	listening := 0
	for _, addr := range []string{"127.0.0.1:4318", "[::1]:4318"} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Logf("cannot listen on %s (%v): connections there are not checked", addr, err)
			continue
		}
		listening++
		t.Cleanup(func() { _ = ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				conns.Add(1)
				_ = c.Close()
			}
		}()
	}

	s := startStack(t, "OTEL_SERVICE_NAME=opstatus-off", "OTEL_METRIC_EXPORT_INTERVAL=50",
		"OTEL_BSP_SCHEDULE_DELAY=50", "OTEL_EXPORTER_OTLP_PROTOCOL=grpc", "OTEL_RESOURCE_ATTRIBUTES=a=b")
	sub := "eeeeeeee-0000-4000-8000-000000000005"
	require.NoError(t, s.sim.AddCluster("off1", clustersim.Script{Installing: clustersim.Duration(time.Hour)}))
	s.seed(sub, "op-off", "Create", "Accepted", clusterKey(sub, "off1"), "/api/aro_hcp/v1alpha1/clusters/off1")
	require.Len(t, s.scan(), 1)
	require.Equal(t, "updated", s.pollOp(sub, "op-off"))
	time.Sleep(500 * time.Millisecond) // ten export intervals, had there been an exporter

	// The exit path flushes telemetry when there is any.
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGTERM))
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case err := <-done:
		require.NoError(t, err, "the handler exits cleanly")
	case <-time.After(20 * time.Second):
		t.Fatal("the handler did not stop on SIGTERM")
	}

	if listening > 0 {
		require.Zero(t, conns.Load(), "nothing reached the default OTLP endpoint")
	}
	about := regexp.MustCompile(`(?i)opentelemetry|otlp|otel|telemetry|traceparent|:4318`)
	for _, out := range []string{s.stdout.String(), s.stderr.String()} {
		require.NotRegexp(t, about, out)
	}
	require.Contains(t, s.stdout.String(), `"opstatus listening"`, "the log is there, and says nothing about telemetry")
}

// A receiver that is down costs the polls nothing: they answer as without
// telemetry, and the failed exports are one Warning line, not one a try.
func TestTelemetryReceiverDownLeavesPollsAlone(t *testing.T) {
	port, err := testenv.FreePort() // nothing listens there
	require.NoError(t, err)
	s := startStack(t, fmt.Sprintf("OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:%d", port),
		"OTEL_METRIC_EXPORT_INTERVAL=50", "OTEL_BSP_SCHEDULE_DELAY=50")
	sub := "eeeeeeee-0000-4000-8000-000000000006"
	require.NoError(t, s.sim.AddCluster("down1", clustersim.Script{Installing: clustersim.Duration(time.Hour)}))
	s.seed(sub, "op-down", "Create", "Accepted", clusterKey(sub, "down1"), "/api/aro_hcp/v1alpha1/clusters/down1")
	require.Len(t, s.scan(), 1)
	require.Equal(t, "updated", s.pollOp(sub, "op-down"))
	require.Equal(t, "unchanged", s.pollOp(sub, "op-down"))

	failed := func() int { return strings.Count(s.stderr.String(), "OpenTelemetry export failed") }
	require.True(t, testenv.WaitFor(t.Context(), 10*time.Second, 50*time.Millisecond, func() bool { return failed() > 0 }),
		"the failed exports are logged; stderr:\n%s", s.stderr.String())
	time.Sleep(500 * time.Millisecond) // ten more export intervals
	require.Equal(t, 1, failed(), "at most one line a minute")
	require.Contains(t, s.stderr.String(), `"level":"WARN"`)
}

// An OTLP protocol the handler cannot send stops it at start with one line
// naming the setting, like any bad setting; without an endpoint the same
// value is not even read (TestTelemetryOffExportsAndLogsNothing).
func TestTelemetryRefusesAnotherProtocol(t *testing.T) {
	cmd := exec.Command(testenv.Build(t, "."))
	cmd.Env = []string{"FUNCTIONS_CUSTOMHANDLER_PORT=1234", "COSMOS_ENDPOINT=https://127.0.0.1:1", "COSMOS_DATABASE=d",
		"AZURE_LOCATION=eastus", "CLUSTER_SERVICE_URL=http://127.0.0.1:2", "COSMOS_KEY=secret-key-value",
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL=grpc"}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	require.Equal(t, 1, exit.ExitCode())
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Len(t, lines, 1, string(out))
	require.Contains(t, lines[0], "OTEL_EXPORTER_OTLP_PROTOCOL")
}
