package telemetry

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/opstatus/opstatus/dev/otlpsink"
)

// otelEnv are the variables Setup, the SDK and azidentity read; each test
// starts with none of them set.
var otelEnv = []string{
	"OTEL_SDK_DISABLED", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
	"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
	"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER",
	"OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES",
	"IDENTITY_ENDPOINT", "IDENTITY_HEADER", "MSI_ENDPOINT",
}

func clearEnv(t *testing.T) {
	for _, k := range otelEnv {
		t.Setenv(k, "")
	}
}

// Runs first: Setup is the only thing that touches the global providers.
func TestSetupWithoutEndpointBuildsAndLogsNothing(t *testing.T) {
	clearEnv(t)
	t.Setenv("OTEL_SERVICE_NAME", "opstatus-test")
	t.Setenv("OTEL_METRIC_EXPORT_INTERVAL", "10")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc") // not read without an endpoint
	var log bytes.Buffer
	shutdown, err := Setup(context.Background(), slog.New(slog.NewTextHandler(&log, nil)))
	require.NoError(t, err)
	require.NoError(t, shutdown(context.Background()))
	require.False(t, Tracing())
	require.False(t, Metering())
	require.Empty(t, log.String())
	_, sdk := otel.GetTracerProvider().(*sdktrace.TracerProvider)
	require.False(t, sdk, "the global tracer provider stays the default")
	_, sdkm := otel.GetMeterProvider().(*sdkmetric.MeterProvider)
	require.False(t, sdkm, "the global meter provider stays the default")

	// Every function is then a no-op that allocates nothing.
	next := http.DefaultTransport
	require.Equal(t, next, Transport(next))
	require.Zero(t, AzureTracing())
	require.Nil(t, NewScanTally())
	ctx := context.Background()
	header := http.Header{"Traceparent": {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}
	allocs := testing.AllocsPerRun(100, func() {
		c, span := Start(ctx, "x")
		span.End()
		c, end := LockWait(c, "sub")
		end(nil)
		PollOperation(c, "updated", "Create")
		PollDuration(c, time.Second)
		MessageAge(c, time.Second)
		PastDeadline(c, "Create")
		c, span = StartInvocation(c, header, "poll", "id")
		EndInvocation(span, 200)
		_ = c
	})
	require.Zero(t, allocs)
}

func TestSignals(t *testing.T) {
	tests := []struct {
		name            string
		env             map[string]string
		traces, metrics bool
		err             string
	}{
		{name: "nothing set"},
		{name: "one endpoint for both", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, traces: true, metrics: true},
		{name: "traces only", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, traces: true},
		{name: "metrics only", env: map[string]string{"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://c:4318/v1/metrics"}, metrics: true},
		{name: "disabled", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "TRUE"}},
		{name: "exporter none", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}, metrics: true},
		{name: "http/protobuf", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, traces: true, metrics: true},
		{name: "grpc refused", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
			err: `OTEL_EXPORTER_OTLP_PROTOCOL="grpc"`},
		{name: "per-signal protocol wins", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
			"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf", "OTEL_METRICS_EXPORTER": "none"}, traces: true},
		{name: "json refused", env: map[string]string{"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "http/json"},
			err: `OTEL_EXPORTER_OTLP_METRICS_PROTOCOL="http/json"`},
		{name: "unknown exporter", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_METRICS_EXPORTER": "prometheus"},
			err: `OTEL_METRICS_EXPORTER="prometheus"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			traces, metrics, err := signals(func(k string) string { return tt.env[k] })
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.traces, traces, "traces")
			require.Equal(t, tt.metrics, metrics, "metrics")
		})
	}
}

func TestSetupRefusesAnotherProtocol(t *testing.T) {
	clearEnv(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	_, err := Setup(context.Background(), slog.New(slog.DiscardHandler))
	require.ErrorContains(t, err, "OTEL_EXPORTER_OTLP_PROTOCOL")
	require.False(t, Tracing())
}

// Setup exports to a real OTLP/HTTP receiver, configured by the OTEL_*
// variables alone, and its shutdown flushes what is left.
func TestSetupExportsOverOTLPHTTP(t *testing.T) {
	clearEnv(t)
	sink, err := otlpsink.Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = sink.Close() })
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", sink.URL)
	t.Setenv("OTEL_SERVICE_NAME", "opstatus-unit")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=test")
	// Long intervals: only the shutdown's flush can deliver in time.
	t.Setenv("OTEL_METRIC_EXPORT_INTERVAL", "600000")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "600000")
	var log bytes.Buffer
	shutdown, err := Setup(context.Background(), slog.New(slog.NewTextHandler(&log, nil)))
	require.NoError(t, err)
	t.Cleanup(func() { Use(nil, nil) })
	require.True(t, Tracing())
	require.True(t, Metering())
	require.Contains(t, log.String(), "OpenTelemetry export on")

	ctx, span := StartInvocation(context.Background(), http.Header{
		"Traceparent": {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
	}, "poll", "inv-1")
	PollOperation(ctx, "updated", "Create")
	PollOperation(ctx, "superseded", "")
	PollDuration(ctx, 250*time.Millisecond)
	EndInvocation(span, 200)

	fctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, shutdown(fctx))

	spans := sink.SpansNamed("poll")
	require.Len(t, spans, 1)
	require.Equal(t, "0af7651916cd43dd8448eb211c80319c", spans[0].TraceID, "continues the host's trace")
	require.Equal(t, "b7ad6b7169203331", spans[0].ParentID)
	require.Equal(t, "opstatus-unit", spans[0].Resource["service.name"])
	require.Equal(t, "test", spans[0].Resource["deployment.environment.name"])
	require.Equal(t, "inv-1", spans[0].Attrs["faas.invocation_id"])
	require.Equal(t, ScopeName, spans[0].Scope)
	id := spans[0].Resource["service.instance.id"]
	require.Len(t, id, 36, "a process is a service instance of its own: %q", id)
	for _, p := range sink.Points(MetricPollOperations) {
		require.Equal(t, id, p.Resource["service.instance.id"], "its metrics say which process counted them")
	}
	require.Equal(t, 1.0, sink.Total(MetricPollOperations, map[string]string{"outcome": "updated", "request": "Create"}))
	require.Equal(t, 1.0, sink.Total(MetricPollOperations, map[string]string{"outcome": "superseded"}))
	require.Equal(t, uint64(1), sink.Histogram(MetricPollDuration, nil).Count)
	require.InDelta(t, 0.25, sink.Histogram(MetricPollDuration, nil).Sum, 1e-9)
}

// The host's traceparent does not decide whether opstatus records an
// invocation: with Application Insights it is always unsampled (flags 00).
// Only OTEL_TRACES_SAMPLER does, when it is set.
func TestSetupSamplesWhateverTheHostsFlag(t *testing.T) {
	const unsampled = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
	const sampled = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	tests := []struct {
		name, sampler string
		traceparent   string
		recorded      bool
	}{
		{name: "default, unsampled parent", traceparent: unsampled, recorded: true},
		{name: "default, sampled parent", traceparent: sampled, recorded: true},
		{name: "default, no parent", recorded: true},
		{name: "parentbased_always_on, unsampled parent", sampler: "parentbased_always_on", traceparent: unsampled},
		{name: "parentbased_always_on, sampled parent", sampler: "parentbased_always_on", traceparent: sampled, recorded: true},
		{name: "always_off", sampler: "always_off", traceparent: sampled},
	}
	instances := map[string]bool{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearEnv(t)
			sink, err := otlpsink.Start()
			require.NoError(t, err)
			t.Cleanup(func() { _ = sink.Close() })
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", sink.URL)
			t.Setenv("OTEL_METRICS_EXPORTER", "none")
			t.Setenv("OTEL_TRACES_SAMPLER", tt.sampler)
			shutdown, err := Setup(context.Background(), slog.New(slog.DiscardHandler))
			require.NoError(t, err)
			t.Cleanup(func() { Use(nil, nil) })

			header := http.Header{}
			if tt.traceparent != "" {
				header.Set("Traceparent", tt.traceparent)
			}
			_, span := StartInvocation(context.Background(), header, "poll", "inv")
			require.Equal(t, tt.recorded, span.IsRecording())
			EndInvocation(span, 200)
			require.NoError(t, shutdown(context.Background()))

			got := sink.SpansNamed("poll")
			if !tt.recorded {
				require.Empty(t, got)
				return
			}
			require.Len(t, got, 1)
			if tt.traceparent != "" {
				require.Equal(t, "0af7651916cd43dd8448eb211c80319c", got[0].TraceID, "the host's trace goes on")
				require.Equal(t, "b7ad6b7169203331", got[0].ParentID)
			}
			id := got[0].Resource["service.instance.id"]
			require.False(t, instances[id], "each process has its own service.instance.id")
			instances[id] = true
		})
	}
}

func TestInterval(t *testing.T) {
	for v, want := range map[string]time.Duration{
		"":                     ExportInterval,
		"10000":                10 * time.Second,
		" 250 ":                250 * time.Millisecond,
		"0":                    ExportInterval,
		"-5":                   ExportInterval,
		"5s":                   ExportInterval,
		"99999999999999999999": ExportInterval,
		"9223372036855":        ExportInterval,
	} {
		got := interval(func(k string) string {
			require.Equal(t, "OTEL_METRIC_EXPORT_INTERVAL", k)
			return v
		}, "OTEL_METRIC_EXPORT_INTERVAL")
		require.Equal(t, want, got, "%q", v)
	}
}

// recorders installs in-memory providers for a test.
func recorders(t *testing.T) (*tracetest.SpanRecorder, *sdkmetric.ManualReader) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	reader := sdkmetric.NewManualReader()
	restore := Use(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)), sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	t.Cleanup(restore)
	return rec, reader
}

func collect(t *testing.T, reader *sdkmetric.ManualReader) map[string]metricdata.Aggregation {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	out := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

func attrValue(set attribute.Set, k attribute.Key) string {
	v, _ := set.Value(k)
	return v.String()
}

func TestTransport(t *testing.T) {
	rec, reader := recorders(t)
	var gotTraceparent string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotTraceparent = r.Header.Get("Traceparent")
		if strings.HasSuffix(r.URL.Path, "/missing/status") {
			http.Error(w, `{"kind":"Error"}`, http.StatusNotFound)
			return
		}
		_, _ = io.WriteString(w, `{"state":"ready"}`)
	}))
	defer srv.Close()
	client := &http.Client{Transport: Transport(http.DefaultTransport)}

	ctx, parent := Start(context.Background(), "parent")
	for _, path := range []string{"/api/aro_hcp/v1alpha1/clusters/c1/status", "/api/aro_hcp/v1alpha1/clusters/missing/status"} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path+"?secret=1", nil)
		require.NoError(t, err)
		resp, err := client.Do(req)
		require.NoError(t, err)
		require.Empty(t, req.Header.Get("Traceparent"), "the caller's request is left as it was")
		_, _ = io.Copy(io.Discard, resp.Body)
		require.NoError(t, resp.Body.Close())
		require.Contains(t, gotTraceparent, parent.SpanContext().TraceID().String(), "the trace context goes to Cluster Service")
	}
	// A request that gets no reply.
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:1/api/aro_hcp/v1alpha1/clusters/c1/inflight_checks", nil)
	require.NoError(t, err)
	_, err = client.Do(req)
	require.Error(t, err)
	parent.End()

	var cs []sdktrace.ReadOnlySpan
	var names []string
	for _, s := range rec.Ended() {
		if strings.HasPrefix(s.Name(), "cluster service ") {
			cs = append(cs, s)
			names = append(names, s.Name())
		}
	}
	require.ElementsMatch(t, []string{SpanClusterService, SpanClusterService, "cluster service inflight_checks"}, names,
		"named after what was asked")
	for _, s := range cs {
		require.Equal(t, parent.SpanContext().SpanID(), s.Parent().SpanID())
		require.Equal(t, trace.SpanKindClient, s.SpanKind())
		for _, kv := range s.Attributes() {
			if kv.Key == urlFullKey {
				require.NotContains(t, kv.Value.AsString(), "secret", "no query in url.full")
			}
		}
	}

	data := collect(t, reader)
	h, ok := data[MetricClusterServiceDuration].(metricdata.Histogram[float64])
	require.True(t, ok)
	byCode := map[string]uint64{}
	for _, dp := range h.DataPoints {
		byCode[attrValue(dp.Attributes, StatusCodeKey)] += dp.Count
	}
	require.Equal(t, map[string]uint64{"200": 1, "404": 1, "0": 1}, byCode)
}

func TestLockWait(t *testing.T) {
	rec, reader := recorders(t)
	ctx, end := LockWait(context.Background(), "sub-1")
	require.True(t, trace.SpanFromContext(ctx).IsRecording(), "the lock's requests run under the wait's span")
	end(nil)
	_, end = LockWait(context.Background(), "sub-2")
	end(errors.New("held"))

	spans := rec.Ended()
	require.Len(t, spans, 2)
	require.Equal(t, SpanLockWait, spans[0].Name())
	require.Contains(t, spans[0].Attributes(), SubscriptionIDKey.String("sub-1"))
	require.Equal(t, "Error", spans[1].Status().Code.String())

	h := collect(t, reader)[MetricLockWait].(metricdata.Histogram[float64])
	got := map[string]uint64{}
	for _, dp := range h.DataPoints {
		got[attrValue(dp.Attributes, AcquiredKey)] += dp.Count
	}
	require.Equal(t, map[string]uint64{"true": 1, "false": 1}, got)
}

func TestScanGauges(t *testing.T) {
	_, reader := recorders(t)
	require.NotContains(t, collect(t, reader), MetricScanPending, "nothing before a scan")
	require.NotContains(t, collect(t, reader), MetricScanTimestamp, "nothing before a scan")

	// A scan that lists nothing reports when it ran, and only that.
	idle := time.Date(2026, 12, 1, 11, 59, 0, 500_000_000, time.UTC)
	Scanned(NewScanTally(), idle, 0)
	data := collect(t, reader)
	require.NotContains(t, data, MetricScanPending)
	ts := data[MetricScanTimestamp].(metricdata.Gauge[float64]).DataPoints
	require.Len(t, ts, 1)
	require.Equal(t, float64(idle.Unix())+0.5, ts[0].Value)

	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	tally := NewScanTally()
	tally.Add("Accepted", "Create", "cluster", now.Add(-time.Minute), true)
	tally.Add("Accepted", "Create", "cluster", now.Add(-time.Hour), true)
	tally.Add("Accepted", "Create", "nodePool", now.Add(-2*time.Hour), true)
	tally.Add("Deleting", "Delete", "cluster", time.Time{}, true)
	tally.Add("Succeeded", "Create", "cluster", now.Add(-48*time.Hour), false) // a notification to send: not unfinished
	for i := range 2 * maxScanSeries {
		tally.Add("Weird"+string(rune('A'+i)), "X"+string(rune('A'+i)), "cluster", now.Add(-time.Second), true)
	}
	Scanned(tally, now, 0)

	data = collect(t, reader)
	require.Equal(t, float64(now.Unix()), data[MetricScanTimestamp].(metricdata.Gauge[float64]).DataPoints[0].Value)
	pending := data[MetricScanPending].(metricdata.Gauge[int64])
	got := map[string]int64{}
	for _, dp := range pending.DataPoints {
		got[attrValue(dp.Attributes, StatusKey)+"/"+attrValue(dp.Attributes, RequestKey)] = dp.Value
	}
	require.Equal(t, int64(3), got["Accepted/Create"])
	require.Equal(t, int64(1), got["Deleting/Delete"])
	require.Equal(t, int64(1), got["Succeeded/Create"])
	require.LessOrEqual(t, len(got), maxScanSeries+1, "series are bounded")
	require.Positive(t, got["other/other"])
	oldest := map[string]float64{}
	for _, dp := range data[MetricScanOldest].(metricdata.Gauge[float64]).DataPoints {
		oldest[attrValue(dp.Attributes, RequestKey)+"/"+attrValue(dp.Attributes, ResourceTypeKey)] = dp.Value
	}
	require.Equal(t, time.Hour.Seconds(), oldest["Create/cluster"])
	require.Equal(t, (2 * time.Hour).Seconds(), oldest["Create/nodePool"])
	require.NotContains(t, oldest, "Delete/cluster", "no startTime, no age")
	require.LessOrEqual(t, len(oldest), maxScanSeries+1, "series are bounded")
	require.Equal(t, time.Second.Seconds(), oldest["other/other"])

	// The next scan replaces the figures: series it did not see go away.
	next := NewScanTally()
	next.Add("Provisioning", "Create", "cluster", now, true)
	Scanned(next, now, 0)
	pending = collect(t, reader)[MetricScanPending].(metricdata.Gauge[int64])
	require.Len(t, pending.DataPoints, 1)
	require.Equal(t, "Provisioning", attrValue(pending.DataPoints[0].Attributes, StatusKey))

	// Figures stand for validFor: another instance may have scanned since.
	fresh := NewScanTally()
	fresh.Add("Provisioning", "Create", "cluster", time.Now().Add(-time.Minute), true)
	Scanned(fresh, time.Now(), time.Minute)
	require.Contains(t, collect(t, reader), MetricScanOldest)
	stale := NewScanTally()
	stale.Add("Provisioning", "Create", "cluster", time.Now().Add(-time.Hour), true)
	Scanned(stale, time.Now().Add(-2*time.Minute), time.Minute)
	data = collect(t, reader)
	require.NotContains(t, data, MetricScanPending, "stale figures are not reported")
	require.NotContains(t, data, MetricScanOldest)
	require.NotContains(t, data, MetricScanTimestamp, "stale: the scan stopped, or another instance scans")
}

func TestCounters(t *testing.T) {
	_, reader := recorders(t)
	ctx := context.Background()
	PollOperation(ctx, "updated", "Create")
	PollOperation(ctx, "updated", "Create")
	PollOperation(ctx, "gone", "")
	PollOperations(ctx, "superseded", 5)
	PastDeadline(ctx, "Delete")
	MessageAge(ctx, 3*time.Second)

	data := collect(t, reader)
	ops := data[MetricPollOperations].(metricdata.Sum[int64])
	got := map[string]int64{}
	for _, dp := range ops.DataPoints {
		_, hasRequest := dp.Attributes.Value(RequestKey)
		got[attrValue(dp.Attributes, OutcomeKey)+"/"+attrValue(dp.Attributes, RequestKey)] = dp.Value
		if attrValue(dp.Attributes, OutcomeKey) != "updated" {
			require.False(t, hasRequest, "no request attribute when it is unknown")
		}
	}
	require.Equal(t, map[string]int64{"updated/Create": 2, "gone/": 1, "superseded/": 5}, got)
	past := data[MetricPastDeadline].(metricdata.Sum[int64])
	require.Len(t, past.DataPoints, 1)
	require.Equal(t, int64(1), past.DataPoints[0].Value)
	age := data[MetricMessageAge].(metricdata.Histogram[float64])
	require.Equal(t, 3.0, age.DataPoints[0].Sum)
}

func TestStartInvocationContinuesTheHostTrace(t *testing.T) {
	rec, _ := recorders(t)
	_, span := StartInvocation(context.Background(), http.Header{
		"Traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		"Tracestate":  {"az=1"},
	}, "scan", "inv")
	EndInvocation(span, 500)
	_, span = StartInvocation(context.Background(), http.Header{}, "poll", "inv2")
	EndInvocation(span, 200)

	spans := rec.Ended()
	require.Len(t, spans, 2)
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", spans[0].SpanContext().TraceID().String())
	require.Equal(t, "00f067aa0ba902b7", spans[0].Parent().SpanID().String())
	require.Equal(t, "az=1", spans[0].SpanContext().TraceState().String())
	require.Equal(t, trace.SpanKindServer, spans[0].SpanKind())
	require.Equal(t, "Error", spans[0].Status().Code.String(), "a non-2xx answer fails the invocation")
	require.False(t, spans[1].Parent().IsValid(), "without a traceparent the invocation starts a trace")
	require.Contains(t, spans[1].Attributes(), triggerKey.String("pubsub"))
}

func TestErrorLogIsRateLimited(t *testing.T) {
	var log bytes.Buffer
	e := &errorLog{logger: slog.New(slog.NewTextHandler(&log, nil))}
	for range 5 {
		e.Handle(errors.New("connection refused"))
	}
	require.Equal(t, 1, strings.Count(log.String(), "OpenTelemetry export failed"))
	require.Contains(t, log.String(), "level=WARN")
	e.last = time.Now().Add(-2 * errorLogEvery)
	e.Handle(errors.New("connection refused"))
	require.Equal(t, 2, strings.Count(log.String(), "OpenTelemetry export failed"))
	require.Contains(t, log.String(), "errors_not_logged=4")
}

func TestClusterServiceSpanNames(t *testing.T) {
	for p, want := range map[string]string{
		"/api/clusters_mgmt/v1/clusters/abc/status":                                  "cluster service status",
		"/api/aro_hcp/v1alpha1/clusters/abc/inflight_checks":                         "cluster service inflight_checks",
		"/api/aro_hcp/v1alpha1/clusters/abc":                                         "cluster service cluster",
		"/api/aro_hcp/v1alpha1/clusters/abc/node_pools/np/status":                    "cluster service status",
		"/api/aro_hcp/v1alpha1/clusters/abc/external_auth_config/external_auths/ea1": "cluster service external_auth",
		"/api/clusters_mgmt/v1/clusters/abc/break_glass_credentials/b1":              "cluster service break_glass_credential",
		"/api/clusters_mgmt/v1/clusters/abc/break_glass_credentials":                 "cluster service break_glass_credentials",
	} {
		require.Equal(t, want, clusterServiceSpan(p), p)
	}
}
