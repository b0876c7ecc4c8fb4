package demo

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/opstatus/opstatus/dev/otlpsink"
	"github.com/opstatus/opstatus/internal/telemetry"
)

// TelemetrySettings are the app settings that send the handler's telemetry
// to sink, exporting often enough for a demo of a minute.
func TelemetrySettings(sink *otlpsink.Sink) map[string]string {
	return map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": sink.URL,
		"OTEL_SERVICE_NAME":           "opstatus-demo",
		"OTEL_METRIC_EXPORT_INTERVAL": "1000",
		"OTEL_BSP_SCHEDULE_DELAY":     "500",
	}
}

// TelemetrySummary waits up to wait for a metrics export later than now,
// then prints what the handler's telemetry says: operations by outcome,
// Cluster Service, lock and queue timings, and the spans received.
func TelemetrySummary(ctx context.Context, out io.Writer, sink *otlpsink.Sink, wait time.Duration) {
	since := time.Now()
	deadline := since.Add(wait)
	for time.Now().Before(deadline) && ctx.Err() == nil && !exportedSince(sink, since) {
		time.Sleep(100 * time.Millisecond)
	}
	traces, metrics := sink.Exports()
	fmt.Fprintf(out, "\ntelemetry (OTLP/HTTP to the receiver at %s: %d span and %d metric exports)\n", sink.URL, traces, metrics)
	if metrics == 0 {
		fmt.Fprintln(out, "  no metrics arrived")
		return
	}
	counts := map[string]int{}
	for _, p := range sink.Latest(telemetry.MetricPollOperations) {
		counts[p.Attrs["outcome"]] += int(p.Value)
	}
	var parts []string
	for _, o := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%s %d", o, counts[o]))
	}
	fmt.Fprintf(out, "  %s by outcome: %s\n", telemetry.MetricPollOperations, strings.Join(parts, " · "))
	fmt.Fprintf(out, "  %s: %s\n", telemetry.MetricClusterServiceDuration, quantiles(sink.Histogram(telemetry.MetricClusterServiceDuration, nil)))
	fmt.Fprintf(out, "  %s: %s (%d not acquired)\n", telemetry.MetricLockWait,
		quantiles(sink.Histogram(telemetry.MetricLockWait, nil)),
		sink.Histogram(telemetry.MetricLockWait, map[string]string{"acquired": "false"}).Count)
	fmt.Fprintf(out, "  %s: %s\n", telemetry.MetricMessageAge, quantiles(sink.Histogram(telemetry.MetricMessageAge, nil)))
	fmt.Fprintf(out, "  %s: %s\n", telemetry.MetricPollDuration, quantiles(sink.Histogram(telemetry.MetricPollDuration, nil)))
	fmt.Fprintf(out, "  %s: %.0f\n", telemetry.MetricPastDeadline, sink.Total(telemetry.MetricPastDeadline, nil))

	spans := map[string]int{}
	for _, sp := range sink.Spans() {
		spans[sp.Name]++
	}
	parts = parts[:0]
	for _, n := range slices.Sorted(maps.Keys(spans)) {
		parts = append(parts, fmt.Sprintf("%s %d", n, spans[n]))
	}
	fmt.Fprintf(out, "  spans: %s\n", strings.Join(parts, " · "))
}

// exportedSince reports whether a metrics export holding points taken after
// t has arrived.
func exportedSince(sink *otlpsink.Sink, t time.Time) bool {
	for _, p := range sink.Points(telemetry.MetricPollOperations) {
		if p.Time.After(t) {
			return true
		}
	}
	return false
}

// quantiles describes a histogram of seconds: its count, p50 and p99.
func quantiles(h otlpsink.Histogram) string {
	if h.Count == 0 {
		return "none"
	}
	return fmt.Sprintf("%d, p50 %s, p99 %s", h.Count, seconds(h.Quantile(0.5)), seconds(h.Quantile(0.99)))
}

func seconds(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(100 * time.Microsecond).String()
}
