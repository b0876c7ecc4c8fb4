// Package telemetry sets up OpenTelemetry for the handler and holds its
// spans and metrics.
//
// It is configured only by the standard OTEL_* environment variables, which
// the OpenTelemetry SDK and its OTLP/HTTP exporters read themselves
// (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_HEADERS,
// OTEL_METRIC_EXPORT_INTERVAL, OTEL_BSP_SCHEDULE_DELAY, OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER, ...), and by the
// remote-write endpoint the handler gives it (WithRemoteWrite), an Azure
// Monitor workspace's data collection rule to which metrics are pushed as
// Prometheus remote write with an Entra token. A signal is exported only
// when an endpoint is set for it; with none, Setup builds nothing, logs
// nothing, and every function of this package returns at once.
//
// Three defaults are opstatus's own, each for how the Functions host runs
// the handler. The host never sends SIGTERM: after its drain it kills the
// process, so nothing may wait for the exit, and spans and metrics are sent
// every ExportInterval. The host's traceparent is no sampling decision
// (with Application Insights it is never marked sampled), so every
// invocation is recorded. And each process is a service instance of its
// own, so that its cumulative counters are never taken for another's.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of opstatus's spans and metrics.
const ScopeName = "github.com/opstatus/opstatus"

// DefaultServiceName is the service.name resource attribute when neither
// OTEL_SERVICE_NAME nor OTEL_RESOURCE_ATTRIBUTES names the service.
const DefaultServiceName = "opstatus"

// ExportInterval is how often spans and metrics leave the process unless
// OTEL_BSP_SCHEDULE_DELAY or OTEL_METRIC_EXPORT_INTERVAL says otherwise. The
// host kills the handler (SIGKILL) once the invocations in flight have
// answered, so what a process holds when it is killed is lost: this bounds
// the loss, at most one OTLP request per signal and interval.
const ExportInterval = 5 * time.Second

// errorLogEvery bounds how often export errors are logged: a collector that
// is down fails every export, every few seconds.
const errorLogEvery = time.Minute

// state is what Use installed: a nil tracer means no spans, nil
// instruments no metrics.
type state struct {
	tp         trace.TracerProvider
	tracer     trace.Tracer
	propagator propagation.TextMapPropagator
	m          *instruments
}

var current atomic.Pointer[state]

// load returns the installed state, or nil when telemetry is off.
func load() *state { return current.Load() }

// Tracing reports whether spans are recorded. Call sites check it before
// building attributes that only a span would use.
func Tracing() bool {
	s := load()
	return s != nil && s.tracer != nil
}

// Metering reports whether metrics are recorded.
func Metering() bool {
	s := load()
	return s != nil && s.m != nil
}

// Use installs tp and mp as the providers of this package's spans and
// metrics (either may be nil: that signal is then off) and returns a
// function that puts back what was installed before. Setup calls it; tests
// call it with in-memory providers.
func Use(tp trace.TracerProvider, mp metric.MeterProvider) (restore func()) {
	var s *state
	if tp != nil || mp != nil {
		s = &state{}
		if tp != nil {
			s.tp = tp
			s.tracer = tp.Tracer(ScopeName)
			s.propagator = propagation.TraceContext{}
		}
		if mp != nil {
			m, err := newInstruments(mp.Meter(ScopeName))
			if err != nil {
				// Only a programming error (an invalid instrument name)
				// gets here; the handler then runs without metrics.
				otel.Handle(err)
			} else {
				s.m = m
			}
		}
	}
	prev := current.Swap(s)
	return func() { current.Store(prev) }
}

// Setup reads the OTEL_* environment and, for each signal (traces, metrics)
// that has an OTLP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT, or the signal's own
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_METRICS_ENDPOINT),
// builds the SDK provider with its OTLP/HTTP exporter, installs it (globally
// too, with the W3C trace-context propagator), and routes the SDK's errors
// to logger at Warn, at most one a minute. With WithRemoteWrite's URL,
// metrics are also pushed there (see remoteWrite) with its credential's
// tokens for Azure Monitor. With no endpoint, or with
// OTEL_SDK_DISABLED=true, it builds and logs nothing.
//
// shutdown flushes and stops what Setup built; its context bounds it. A
// setting the handler cannot honour (a protocol other than http/protobuf,
// an exporter other than otlp or none) is an error naming it.
func Setup(ctx context.Context, logger *slog.Logger, opts ...Option) (shutdown func(context.Context) error, err error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	traces, metrics, err := signals(os.Getenv)
	remote := o.remoteWriteURL(os.Getenv)
	if err != nil || !traces && !metrics && remote == "" {
		return func(context.Context) error { return nil }, err
	}
	res, err := resource.New(ctx,
		// service.instance.id, a random id of this process: a restarted
		// handler's counters start again from zero as series of their own,
		// and two instances' never merge into one.
		resource.WithService(),
		resource.WithAttributes(attribute.String("service.name", DefaultServiceName)),
		resource.WithAttributes(o.clusterAttrs()...),
		resource.WithTelemetrySDK(),
		resource.WithHost(),
		resource.WithFromEnv(), // last: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
	)
	switch {
	case errors.Is(err, resource.ErrPartialResource):
		// What could be read is used: a bad attribute loses only itself.
		logger.Warn("OpenTelemetry resource incomplete", "error", err)
	case err != nil:
		return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	var (
		tp *sdktrace.TracerProvider
		mp *sdkmetric.MeterProvider
	)
	if traces {
		exp, err := otlptracehttp.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: trace exporter: %w", err)
		}
		opts := []sdktrace.TracerProviderOption{
			sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(interval(os.Getenv, "OTEL_BSP_SCHEDULE_DELAY"))),
			sdktrace.WithResource(res),
		}
		// An option would override OTEL_TRACES_SAMPLER, which the SDK
		// reads itself: the default is given only when it is not set.
		if strings.TrimSpace(os.Getenv("OTEL_TRACES_SAMPLER")) == "" {
			opts = append(opts, sdktrace.WithSampler(defaultSampler))
		}
		tp = sdktrace.NewTracerProvider(opts...)
	}
	every := sdkmetric.WithInterval(interval(os.Getenv, "OTEL_METRIC_EXPORT_INTERVAL"))
	var readers []sdkmetric.Option
	if metrics {
		exp, err := otlpmetrichttp.New(ctx)
		if err != nil {
			if tp != nil {
				_ = tp.Shutdown(ctx)
			}
			return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT: metric exporter: %w", err)
		}
		readers = append(readers, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp, every)))
	}
	if remote != "" {
		exp, err := newRemoteWrite(remote, o.cred, logger, nil)
		if err != nil {
			if tp != nil {
				_ = tp.Shutdown(ctx)
			}
			return nil, err
		}
		readers = append(readers, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp, every)))
	}
	if len(readers) > 0 {
		mp = sdkmetric.NewMeterProvider(append(readers, sdkmetric.WithResource(res))...)
	}

	otel.SetErrorHandler(&errorLog{logger: logger})
	var (
		tpi trace.TracerProvider
		mpi metric.MeterProvider
	)
	if tp != nil {
		tpi = tp
		otel.SetTracerProvider(tp)
		otel.SetTextMapPropagator(propagation.TraceContext{})
	}
	if mp != nil {
		mpi = mp
		otel.SetMeterProvider(mp)
	}
	Use(tpi, mpi)
	logger.Info("OpenTelemetry export on", "traces", traces, "metrics", metrics, "remote_write", remote != "")
	return func(ctx context.Context) error { return flush(ctx, tp, mp) }, nil
}

// Option is a choice of Setup's beyond the environment.
type Option func(*options)

type options struct {
	remote  string
	cred    azcore.TokenCredential
	cluster string
}

// ClusterKey is the resource attribute that remote writes send as every
// series' cluster label.
const ClusterKey = attribute.Key("opstatus.cluster")

// WithCluster names what every remote-written series carries as its
// cluster label: ARO-HCP's alert generator takes the incident's title and
// correlation ID from it. The handler gives its region (AZURE_LOCATION).
func WithCluster(name string) Option {
	return func(o *options) { o.cluster = strings.TrimSpace(name) }
}

func (o *options) clusterAttrs() []attribute.KeyValue {
	if o.cluster == "" {
		return nil
	}
	return []attribute.KeyValue{ClusterKey.String(o.cluster)}
}

// WithRemoteWrite pushes metrics to rawURL (METRICS_REMOTE_WRITE_URL; ""
// for none) with cred's tokens for Azure Monitor: the handler's one
// credential, its managed identity, which its clients share. A URL
// without a credential is an error of Setup's.
func WithRemoteWrite(rawURL string, cred azcore.TokenCredential) Option {
	return func(o *options) { o.remote, o.cred = strings.TrimSpace(rawURL), cred }
}

// remoteWriteURL is the remote-write endpoint, or "" when none is given or
// OTEL_SDK_DISABLED turns all telemetry off.
func (o *options) remoteWriteURL(getenv func(string) string) string {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return ""
	}
	return o.remote
}

// defaultSampler records every span when OTEL_TRACES_SAMPLER is not set.
// The SDK's default, parentbased_always_on, follows the sampled flag of the
// host's traceparent, which is no decision to follow: with Application
// Insights (its SDK 2.x starts each invocation's Activity with no flags) it
// is always unsampled, and opstatus would record nothing.
var defaultSampler = sdktrace.AlwaysSample()

// interval is the export interval the environment variable key gives in
// milliseconds, or ExportInterval when it is unset or not a positive
// number. Setup passes it as the SDK's option, which overrides the
// variable: the variable is read here as the SDK reads it.
func interval(getenv func(string) string, key string) time.Duration {
	ms, err := strconv.ParseInt(strings.TrimSpace(getenv(key)), 10, 64)
	if err != nil || ms <= 0 || ms > math.MaxInt64/int64(time.Millisecond) {
		return ExportInterval
	}
	return time.Duration(ms) * time.Millisecond
}

// flush flushes and shuts down both providers side by side, so that a
// collector that does not answer one signal leaves the other its time.
func flush(ctx context.Context, tp *sdktrace.TracerProvider, mp *sdkmetric.MeterProvider) error {
	var tErr, mErr error
	var wg sync.WaitGroup
	if tp != nil {
		wg.Go(func() { tErr = errors.Join(tp.ForceFlush(ctx), tp.Shutdown(ctx)) })
	}
	if mp != nil {
		wg.Go(func() { mErr = errors.Join(mp.ForceFlush(ctx), mp.Shutdown(ctx)) })
	}
	wg.Wait()
	if tErr != nil {
		tErr = fmt.Errorf("flushing spans: %w", tErr)
	}
	if mErr != nil {
		mErr = fmt.Errorf("flushing metrics: %w", mErr)
	}
	return errors.Join(tErr, mErr)
}

// signals says which signals the environment exports. Settings are checked
// only for a signal that has an endpoint: without one nothing is read.
func signals(getenv func(string) string) (traces, metrics bool, err error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false, false, nil
	}
	base := getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != ""
	traces = base || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	metrics = base || getenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") != ""
	check := func(on *bool, signal string) error {
		if !*on {
			return nil
		}
		name := "OTEL_" + signal + "_EXPORTER"
		switch v := strings.TrimSpace(getenv(name)); v {
		case "", "otlp":
		case "none":
			*on = false
			return nil
		default:
			return fmt.Errorf("%s=%q: opstatus exports otlp or none", name, v)
		}
		name = "OTEL_EXPORTER_OTLP_" + signal + "_PROTOCOL"
		v := getenv(name)
		if v == "" {
			name = "OTEL_EXPORTER_OTLP_PROTOCOL"
			v = getenv(name)
		}
		if v != "" && v != "http/protobuf" {
			return fmt.Errorf("%s=%q: opstatus sends OTLP over HTTP as protobuf (http/protobuf) only", name, v)
		}
		return nil
	}
	// One error is enough: both signals may read the same setting.
	if err := check(&traces, "TRACES"); err != nil {
		return false, false, err
	}
	if err := check(&metrics, "METRICS"); err != nil {
		return false, false, err
	}
	return traces, metrics, nil
}

// errorLog is the SDK's error handler: export failures and the like, logged
// at Warn (which the Functions host keeps at Warning), at most one line a
// minute with the count of those left out.
type errorLog struct {
	logger *slog.Logger

	mu      sync.Mutex
	last    time.Time
	dropped int
}

// Handle logs err unless a line went out less than a minute ago.
func (e *errorLog) Handle(err error) {
	e.mu.Lock()
	now := time.Now()
	if !e.last.IsZero() && now.Sub(e.last) < errorLogEvery {
		e.dropped++
		e.mu.Unlock()
		return
	}
	dropped := e.dropped
	e.last, e.dropped = now, 0
	e.mu.Unlock()
	e.logger.Warn("OpenTelemetry export failed", "error", err, "errors_not_logged", dropped)
}
