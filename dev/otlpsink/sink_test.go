package otlpsink

import (
	"bytes"
	"compress/gzip"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricpb "go.opentelemetry.io/proto/otlp/metrics/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

func kv(k, v string) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
}

func post(t *testing.T, url, path, contentType string, body []byte, gz bool) *http.Response {
	t.Helper()
	if gz {
		var b bytes.Buffer
		w := gzip.NewWriter(&b)
		_, err := w.Write(body)
		require.NoError(t, err)
		require.NoError(t, w.Close())
		body = b.Bytes()
	}
	req, err := http.NewRequest(http.MethodPost, url+path, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", contentType)
	if gz {
		req.Header.Set("Content-Encoding", "gzip")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp
}

func TestSinkDecodesTracesAndMetrics(t *testing.T) {
	s, err := Start()
	require.NoError(t, err)
	defer s.Close()

	traces := &coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{
		Resource: &resourcepb.Resource{Attributes: []*commonpb.KeyValue{kv("service.name", "svc")}},
		ScopeSpans: []*tracepb.ScopeSpans{{
			Scope: &commonpb.InstrumentationScope{Name: "scope"},
			Spans: []*tracepb.Span{{
				TraceId: bytes.Repeat([]byte{1}, 16), SpanId: bytes.Repeat([]byte{2}, 8), ParentSpanId: bytes.Repeat([]byte{3}, 8),
				Name: "poll", Kind: tracepb.Span_SPAN_KIND_SERVER, Attributes: []*commonpb.KeyValue{
					kv("aro.operation.id", "op"),
					{Key: "n", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: 7}}},
				},
			}},
		}},
	}}}
	raw, err := proto.Marshal(traces)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, post(t, s.URL, "/v1/traces", "application/x-protobuf", raw, false).StatusCode)
	js, err := protojson.Marshal(traces)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, post(t, s.URL, "/v1/traces", "application/json", js, true).StatusCode)

	spans := s.SpansNamed("poll")
	require.Len(t, spans, 2)
	require.Equal(t, spans[0], spans[1], "protobuf and gzipped JSON decode alike")
	require.Equal(t, "01010101010101010101010101010101", spans[0].TraceID)
	require.Equal(t, "0303030303030303", spans[0].ParentID)
	require.Equal(t, map[string]string{"aro.operation.id": "op", "n": "7"}, spans[0].Attrs)
	require.Equal(t, "svc", spans[0].Resource["service.name"])
	require.Equal(t, "scope", spans[0].Scope)

	counter := func(v int64, at uint64) *colmetricpb.ExportMetricsServiceRequest {
		return &colmetricpb.ExportMetricsServiceRequest{ResourceMetrics: []*metricpb.ResourceMetrics{{
			ScopeMetrics: []*metricpb.ScopeMetrics{{Metrics: []*metricpb.Metric{
				{Name: "c", Data: &metricpb.Metric_Sum{Sum: &metricpb.Sum{IsMonotonic: true, DataPoints: []*metricpb.NumberDataPoint{
					{Attributes: []*commonpb.KeyValue{kv("outcome", "updated")}, StartTimeUnixNano: 1, TimeUnixNano: at, Value: &metricpb.NumberDataPoint_AsInt{AsInt: v}},
				}}}},
				{Name: "h", Data: &metricpb.Metric_Histogram{Histogram: &metricpb.Histogram{DataPoints: []*metricpb.HistogramDataPoint{
					{StartTimeUnixNano: 1, TimeUnixNano: at, Count: 10, Sum: proto.Float64(5), ExplicitBounds: []float64{0.1, 1}, BucketCounts: []uint64{5, 4, 1}},
				}}}},
			}}},
		}}}
	}
	for i, v := range []int64{3, 8} {
		raw, err := proto.Marshal(counter(v, uint64(10+i)))
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, post(t, s.URL, "/v1/metrics", "application/x-protobuf", raw, false).StatusCode)
	}
	require.Equal(t, 8.0, s.Total("c", map[string]string{"outcome": "updated"}), "the latest cumulative value")
	require.Zero(t, s.Total("c", map[string]string{"outcome": "gone"}))
	h := s.Histogram("h", nil)
	require.Equal(t, uint64(10), h.Count)
	require.Equal(t, 0.1, h.Quantile(0.5))
	require.InDelta(t, 0.6625, h.Quantile(0.75), 1e-9, "2.5 of the 4 values between 0.1 and 1")
	require.Equal(t, 1.0, h.Quantile(0.99), "the unbounded bucket answers its lower bound")
	require.Equal(t, 0.5, h.Mean())
	tr, m := s.Exports()
	require.Equal(t, 2, tr)
	require.Equal(t, 2, m)

	require.Equal(t, http.StatusNotFound, post(t, s.URL, "/v1/logs", "application/x-protobuf", nil, false).StatusCode)
	require.Equal(t, http.StatusBadRequest, post(t, s.URL, "/v1/traces", "application/x-protobuf", []byte("not protobuf"), false).StatusCode)
}
