package telemetry

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/golang/snappy"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/resource"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/opstatus/opstatus/internal/entra"
	"github.com/opstatus/opstatus/internal/loopback"
)

// RemoteWriteURLSetting names the Prometheus remote-write endpoint the
// handler pushes its metrics to, which config reads and Setup takes with
// WithRemoteWrite: an Azure Monitor workspace's data collection rule,
// <DCE metrics ingestion endpoint>/dataCollectionRules/<DCR immutable
// id>/streams/Microsoft-PrometheusMetrics/api/v1/write?api-version=2023-04-24
// (the form ARO-HCP's own Prometheus writes to). Flex runs no sidecar, so
// the handler is its own remote-write client.
const RemoteWriteURLSetting = "METRICS_REMOTE_WRITE_URL"

// RemoteWriteScope is the Entra scope of the token a remote write carries:
// Azure Monitor's ingestion audience, https://monitor.azure.com, in the
// form Prometheus's own azuread remote-write client asks for it. The
// identity needs Monitoring Metrics Publisher on the rule.
const RemoteWriteScope = "https://monitor.azure.com//.default"

// remoteWriteTimeout bounds one push: the reader's next push carries the
// same cumulative values, so a slow receiver costs freshness, not data.
const remoteWriteTimeout = 10 * time.Second

// remoteWrite is an OpenTelemetry metric exporter that sends each
// collection as a Prometheus remote-write 1.0 request (a snappy-compressed
// protobuf WriteRequest) with an Entra bearer token. Series are named as
// Azure Monitor's own OpenTelemetry-to-Prometheus translation names them:
// dots become underscores, the unit is a suffix, counters end in _total and
// histograms give _bucket, _sum and _count; job, instance and cluster come
// from the resource (target).
type remoteWrite struct {
	url    string
	tokens *entra.Tokens
	client *http.Client
}

// newRemoteWrite returns the exporter to rawURL with cred's tokens for
// Azure Monitor; logger gets a failed token refresh it survives.
func newRemoteWrite(rawURL string, cred azcore.TokenCredential, logger *slog.Logger, client *http.Client) (*remoteWrite, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", RemoteWriteURLSetting, err)
	}
	if u.Scheme != "https" && !(u.Scheme == "http" && loopback.Host(u.Hostname())) || u.Host == "" {
		return nil, fmt.Errorf("%s=%q: not an https URL (plain http only to a loopback receiver)", RemoteWriteURLSetting, rawURL)
	}
	if cred == nil {
		return nil, fmt.Errorf("%s: no credential for Azure Monitor's token", RemoteWriteURLSetting)
	}
	if client == nil {
		client = &http.Client{Timeout: remoteWriteTimeout}
	}
	// The request carries a bearer token, which net/http would send on to
	// a redirect's target on the same host name, from https to http too.
	c := *client
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &remoteWrite{url: rawURL, tokens: entra.NewTokens(cred, RemoteWriteScope, logger), client: &c}, nil
}

// Temporality is cumulative for every instrument, as Prometheus counters
// are: a push lost to a failure is made good by the next.
func (*remoteWrite) Temporality(sdkmetric.InstrumentKind) metricdata.Temporality {
	return metricdata.CumulativeTemporality
}

// Aggregation is the SDK's default for each instrument kind.
func (*remoteWrite) Aggregation(k sdkmetric.InstrumentKind) sdkmetric.Aggregation {
	return sdkmetric.DefaultAggregationSelector(k)
}

// Export pushes rm. An empty collection sends nothing.
func (e *remoteWrite) Export(ctx context.Context, rm *metricdata.ResourceMetrics) error {
	body := encodeWriteRequest(rm)
	if len(body) == 0 {
		return nil
	}
	tok, err := e.tokens.Token(ctx)
	if err != nil {
		return fmt.Errorf("remote write: token for %s: %w", RemoteWriteScope, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(snappy.Encode(nil, body)))
	if err != nil {
		return fmt.Errorf("remote write: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("Content-Encoding", "snappy")
	req.Header.Set("X-Prometheus-Remote-Write-Version", "0.1.0")
	req.Header.Set("User-Agent", "opstatus")
	resp, err := e.client.Do(req)
	if err != nil {
		return fmt.Errorf("remote write: %w", err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("remote write: %s: %s", resp.Status, strings.TrimSpace(string(msg)))
	}
	return nil
}

// ForceFlush has nothing to flush: Export sends synchronously.
func (*remoteWrite) ForceFlush(context.Context) error { return nil }

// Shutdown has nothing to release.
func (*remoteWrite) Shutdown(context.Context) error { return nil }

// promUnits are the unit suffixes of the handler's units.
var promUnits = map[string]string{"s": "seconds", "ms": "milliseconds", "By": "bytes", "1": "ratio"}

// PrometheusName is the series name (before _total, _bucket, ...) of an
// OpenTelemetry metric name and unit: dots and other characters Prometheus
// does not allow become underscores, and a unit (not an annotation in
// braces) is a suffix.
func PrometheusName(name, unit string) string {
	var b strings.Builder
	for i, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r == '_', r == ':', r >= '0' && r <= '9' && i > 0:
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	n := b.String()
	if s, ok := promUnits[unit]; ok && !strings.HasSuffix(n, "_"+s) {
		n += "_" + s
	}
	return n
}

// labelName is a Prometheus label name of an attribute key.
func labelName(key string) string {
	var b strings.Builder
	for i, r := range key {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r == '_', r >= '0' && r <= '9' && i > 0:
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	return b.String()
}

type label struct{ name, value string }

// series is one remote-write time series of one sample.
type series struct {
	labels []label
	value  float64
	ms     int64
}

// target returns the labels every series of res carries: job (the
// service's namespace/name), instance (its service.instance.id) and
// cluster (ClusterKey), where the alerts' incidents take their title and
// correlation ID from.
func target(res *resource.Resource) []label {
	get := func(k attribute.Key) string {
		if res == nil {
			return ""
		}
		v, _ := res.Set().Value(k)
		return v.String()
	}
	job := get(attribute.Key("service.name"))
	if ns := get(attribute.Key("service.namespace")); ns != "" {
		job = ns + "/" + job
	}
	var out []label
	if job != "" {
		out = append(out, label{"job", job})
	}
	if inst := get(attribute.Key("service.instance.id")); inst != "" {
		out = append(out, label{"instance", inst})
	}
	if c := get(ClusterKey); c != "" {
		out = append(out, label{"cluster", c})
	}
	return out
}

// collectSeries turns a collection into Prometheus series.
func collectSeries(rm *metricdata.ResourceMetrics) []series {
	base := target(rm.Resource)
	var out []series
	add := func(name string, attrs attribute.Set, extra []label, v float64, t time.Time) {
		ls := append(slices.Clone(base), label{"__name__", name})
		for _, kv := range attrs.ToSlice() {
			ls = append(ls, label{labelName(string(kv.Key)), kv.Value.String()})
		}
		ls = append(ls, extra...)
		slices.SortFunc(ls, func(a, b label) int { return strings.Compare(a.name, b.name) })
		ls = slices.CompactFunc(ls, func(a, b label) bool { return a.name == b.name })
		out = append(out, series{labels: ls, value: v, ms: t.UnixMilli()})
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			name := PrometheusName(m.Name, m.Unit)
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				n := sumName(name, d.IsMonotonic)
				for _, dp := range d.DataPoints {
					add(n, dp.Attributes, nil, float64(dp.Value), dp.Time)
				}
			case metricdata.Sum[float64]:
				n := sumName(name, d.IsMonotonic)
				for _, dp := range d.DataPoints {
					add(n, dp.Attributes, nil, dp.Value, dp.Time)
				}
			case metricdata.Gauge[int64]:
				for _, dp := range d.DataPoints {
					add(name, dp.Attributes, nil, float64(dp.Value), dp.Time)
				}
			case metricdata.Gauge[float64]:
				for _, dp := range d.DataPoints {
					add(name, dp.Attributes, nil, dp.Value, dp.Time)
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					var cum uint64
					for i, bound := range dp.Bounds {
						cum += dp.BucketCounts[i]
						add(name+"_bucket", dp.Attributes, []label{{"le", strconv.FormatFloat(bound, 'g', -1, 64)}}, float64(cum), dp.Time)
					}
					add(name+"_bucket", dp.Attributes, []label{{"le", "+Inf"}}, float64(dp.Count), dp.Time)
					add(name+"_sum", dp.Attributes, nil, dp.Sum, dp.Time)
					add(name+"_count", dp.Attributes, nil, float64(dp.Count), dp.Time)
				}
			}
		}
	}
	return out
}

func sumName(name string, monotonic bool) string {
	if monotonic && !strings.HasSuffix(name, "_total") {
		return name + "_total"
	}
	return name
}

// encodeWriteRequest encodes rm as a prometheus.WriteRequest (remote write
// 1.0): field 1 the time series, each with its labels (1: name, value) and
// one sample (2: a double value, an int64 timestamp in ms). It returns nil
// when rm holds no series.
func encodeWriteRequest(rm *metricdata.ResourceMetrics) []byte {
	all := collectSeries(rm)
	if len(all) == 0 {
		return nil
	}
	var b, ts, l, smp []byte
	for _, s := range all {
		ts = ts[:0]
		for _, lb := range s.labels {
			l = l[:0]
			l = protowire.AppendTag(l, 1, protowire.BytesType)
			l = protowire.AppendString(l, lb.name)
			l = protowire.AppendTag(l, 2, protowire.BytesType)
			l = protowire.AppendString(l, lb.value)
			ts = protowire.AppendTag(ts, 1, protowire.BytesType)
			ts = protowire.AppendBytes(ts, l)
		}
		smp = smp[:0]
		smp = protowire.AppendTag(smp, 1, protowire.Fixed64Type)
		smp = protowire.AppendFixed64(smp, math.Float64bits(s.value))
		smp = protowire.AppendTag(smp, 2, protowire.VarintType)
		smp = protowire.AppendVarint(smp, uint64(s.ms))
		ts = protowire.AppendTag(ts, 2, protowire.BytesType)
		ts = protowire.AppendBytes(ts, smp)
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, ts)
	}
	return b
}
