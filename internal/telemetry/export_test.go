package telemetry

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// fillSeries records one measurement in every series a poll process can
// have at once (each outcome by each request, the usual status codes) and,
// for a scan process, the scan's gauges at their bound.
func fillSeries(ctx context.Context, m *instruments, scan bool) {
	requests := []string{"Create", "Update", "Delete", "RequestCredential", "RevokeCredentials"}
	outcomes := []string{"unchanged", "updated", "deleted", "notified", "deferred", "superseded", "gone", "invalid", "done"}
	for _, o := range outcomes {
		m.pollOperations.Add(ctx, 1, metric.WithAttributes(OutcomeKey.String(o)))
		for _, r := range requests {
			m.pollOperations.Add(ctx, 1, metric.WithAttributes(OutcomeKey.String(o), RequestKey.String(r)))
		}
	}
	for _, r := range requests {
		m.pastDeadline.Add(ctx, 1, metric.WithAttributes(RequestKey.String(r)))
	}
	m.pollDuration.Record(ctx, 0.2)
	m.messageAge.Record(ctx, 1.5)
	for _, code := range []int{0, 200, 404, 429, 500, 503} {
		m.csDuration.Record(ctx, 0.05, metric.WithAttributes(StatusCodeKey.Int(code)))
	}
	m.lockWait.Record(ctx, 0.01, metric.WithAttributes(AcquiredKey.Bool(true)))
	m.lockWait.Record(ctx, 10, metric.WithAttributes(AcquiredKey.Bool(false)))
	if !scan {
		return
	}
	for _, reason := range []string{"internal_id", "request", "kind", "status", "id", "item"} {
		m.scanSkipped.Add(ctx, 1, metric.WithAttributes(ReasonKey.String(reason)))
	}
	tally := &ScanTally{pending: map[scanKey]int64{}, oldest: map[ageKey]time.Time{}}
	now := time.Now()
	for i := range maxScanSeries {
		tally.Add(outcomes[i%len(outcomes)]+string(rune('A'+i/len(outcomes))), requests[i%len(requests)],
			[]string{"cluster", "nodePool", "externalAuth", "breakGlassCredential"}[i%4], now.Add(-time.Hour), true)
	}
	tally.at = now
	m.lastScan.Store(tally)
}

// BenchmarkMetricExport measures one periodic export (collect, encode,
// POST to a loopback receiver) of every series a poll process, or a process
// that also scans, can hold: the request's size and the process CPU it
// costs, plain and gzipped (OTEL_EXPORTER_OTLP_COMPRESSION=gzip).
//
//	go test ./internal/telemetry -run '^$' -bench MetricExport -benchtime 300x
func BenchmarkMetricExport(b *testing.B) {
	for _, tt := range []struct {
		name       string
		scan, gzip bool
	}{
		{"poll", false, false},
		{"poll-gzip", false, true},
		{"scan-and-poll", true, false},
		{"scan-and-poll-gzip", true, true},
	} {
		b.Run(tt.name, func(b *testing.B) {
			var size atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n, _ := io.Copy(io.Discard, r.Body)
				size.Store(n)
			}))
			defer srv.Close()
			ctx := context.Background()
			opts := []otlpmetrichttp.Option{otlpmetrichttp.WithEndpointURL(srv.URL + "/v1/metrics")}
			if tt.gzip {
				opts = append(opts, otlpmetrichttp.WithCompression(otlpmetrichttp.GzipCompression))
			}
			exp, err := otlpmetrichttp.New(ctx, opts...)
			require.NoError(b, err)
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp, sdkmetric.WithInterval(time.Hour))))
			defer func() { _ = mp.Shutdown(ctx) }()
			m, err := newInstruments(mp.Meter(ScopeName))
			require.NoError(b, err)
			fillSeries(ctx, m, tt.scan)
			require.NoError(b, mp.ForceFlush(ctx))

			var before, after syscall.Rusage
			require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &before))
			b.ReportAllocs()
			for b.Loop() {
				if err := mp.ForceFlush(ctx); err != nil {
					b.Fatal(err)
				}
			}
			require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &after))
			cpu := after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano()
			b.ReportMetric(float64(size.Load()), "req-bytes")
			b.ReportMetric(float64(cpu)/float64(b.N)/1e3, "cpu-µs/export")
		})
	}
}
