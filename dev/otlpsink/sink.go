// Package otlpsink is an OTLP/HTTP receiver for tests and the local demo: it
// accepts what OpenTelemetry exporters POST to /v1/traces and /v1/metrics,
// decodes it with the official OTLP protobuf types, and keeps it in memory
// for inspection. It never ships.
package otlpsink

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricpb "go.opentelemetry.io/proto/otlp/metrics/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// maxBody bounds a request body, decompressed.
const maxBody = 32 << 20

// Sink is a running receiver. Its methods are safe for concurrent use.
type Sink struct {
	// URL is the base URL to give exporters as OTEL_EXPORTER_OTLP_ENDPOINT.
	URL string

	srv *http.Server

	mu      sync.Mutex
	spans   []Span
	points  []Point
	exports map[string]int // by path
}

// Start serves a sink on a loopback port.
func Start() (*Sink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("otlpsink: listen: %w", err)
	}
	s := New()
	s.URL = "http://" + ln.Addr().String()
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// New returns a sink that is not serving: use it as an http.Handler.
func New() *Sink { return &Sink{exports: map[string]int{}} }

// Close stops the server Start started.
func (s *Sink) Close() error {
	if s.srv == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return s.srv.Shutdown(ctx)
}

// ServeHTTP decodes one export request (protobuf, or JSON by its
// Content-Type; gzip when Content-Encoding says so) and answers as an OTLP
// receiver does.
func (s *Sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	var msg, resp proto.Message
	switch r.URL.Path {
	case "/v1/traces":
		msg, resp = &coltracepb.ExportTraceServiceRequest{}, &coltracepb.ExportTraceServiceResponse{}
	case "/v1/metrics":
		msg, resp = &colmetricpb.ExportMetricsServiceRequest{}, &colmetricpb.ExportMetricsServiceResponse{}
	default:
		http.NotFound(w, r)
		return
	}
	body := io.Reader(r.Body)
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		defer zr.Close()
		body = zr
	}
	raw, err := io.ReadAll(io.LimitReader(body, maxBody))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	asJSON := mt == "application/json"
	if asJSON {
		err = protojson.Unmarshal(raw, msg)
	} else {
		err = proto.Unmarshal(raw, msg)
	}
	if err != nil {
		http.Error(w, "decoding: "+err.Error(), http.StatusBadRequest)
		return
	}
	s.add(r.URL.Path, msg)
	var out []byte
	if asJSON {
		out, err = protojson.Marshal(resp)
	} else {
		out, err = proto.Marshal(resp)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", mt)
	_, _ = w.Write(out)
}

func (s *Sink) add(path string, msg proto.Message) {
	var spans []Span
	var points []Point
	switch m := msg.(type) {
	case *coltracepb.ExportTraceServiceRequest:
		spans = flattenSpans(m)
	case *colmetricpb.ExportMetricsServiceRequest:
		points = flattenMetrics(m)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.exports[path]++
	s.spans = append(s.spans, spans...)
	s.points = append(s.points, points...)
}

// Exports returns how many export requests arrived for traces and for
// metrics.
func (s *Sink) Exports() (traces, metrics int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exports["/v1/traces"], s.exports["/v1/metrics"]
}

// Span is one span as received.
type Span struct {
	Name     string
	Scope    string
	Kind     tracepb.Span_SpanKind
	TraceID  string // hex
	SpanID   string // hex
	ParentID string // hex; empty for a root span
	Start    time.Time
	End      time.Time
	Status   tracepb.Status_StatusCode
	// Attrs holds the span's attributes, each value as text.
	Attrs map[string]string
	// Resource holds its resource's attributes.
	Resource map[string]string
}

// Spans returns every span received, in order of arrival.
func (s *Sink) Spans() []Span {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.spans)
}

// SpansNamed returns the spans named name.
func (s *Sink) SpansNamed(name string) []Span {
	var out []Span
	for _, sp := range s.Spans() {
		if sp.Name == name {
			out = append(out, sp)
		}
	}
	return out
}

func flattenSpans(req *coltracepb.ExportTraceServiceRequest) []Span {
	var out []Span
	for _, rs := range req.GetResourceSpans() {
		res := attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				parent := ""
				if len(sp.GetParentSpanId()) > 0 {
					parent = hex.EncodeToString(sp.GetParentSpanId())
				}
				out = append(out, Span{
					Name:     sp.GetName(),
					Scope:    ss.GetScope().GetName(),
					Kind:     sp.GetKind(),
					TraceID:  hex.EncodeToString(sp.GetTraceId()),
					SpanID:   hex.EncodeToString(sp.GetSpanId()),
					ParentID: parent,
					Start:    time.Unix(0, int64(sp.GetStartTimeUnixNano())),
					End:      time.Unix(0, int64(sp.GetEndTimeUnixNano())),
					Status:   sp.GetStatus().GetCode(),
					Attrs:    attrs(sp.GetAttributes()),
					Resource: res,
				})
			}
		}
	}
	return out
}

// Kind is the kind of a metric's data point.
type Kind int

// Kinds of data points.
const (
	KindSum Kind = iota + 1
	KindGauge
	KindHistogram
)

// Point is one data point as received.
type Point struct {
	Name     string
	Unit     string
	Kind     Kind
	Attrs    map[string]string
	Resource map[string]string
	Start    time.Time
	Time     time.Time
	// Value is a sum's or a gauge's value, as a float.
	Value float64
	// Count, Sum, Bounds and Counts are a histogram's.
	Count  uint64
	Sum    float64
	Bounds []float64
	Counts []uint64
}

func flattenMetrics(req *colmetricpb.ExportMetricsServiceRequest) []Point {
	var out []Point
	for _, rm := range req.GetResourceMetrics() {
		res := attrs(rm.GetResource().GetAttributes())
		for _, sm := range rm.GetScopeMetrics() {
			for _, m := range sm.GetMetrics() {
				base := Point{Name: m.GetName(), Unit: m.GetUnit(), Resource: res}
				number := func(kind Kind, dps []*metricpb.NumberDataPoint) {
					for _, dp := range dps {
						p := base
						p.Kind, p.Attrs = kind, attrs(dp.GetAttributes())
						p.Start, p.Time = time.Unix(0, int64(dp.GetStartTimeUnixNano())), time.Unix(0, int64(dp.GetTimeUnixNano()))
						switch v := dp.GetValue().(type) {
						case *metricpb.NumberDataPoint_AsInt:
							p.Value = float64(v.AsInt)
						case *metricpb.NumberDataPoint_AsDouble:
							p.Value = v.AsDouble
						}
						out = append(out, p)
					}
				}
				switch d := m.GetData().(type) {
				case *metricpb.Metric_Sum:
					number(KindSum, d.Sum.GetDataPoints())
				case *metricpb.Metric_Gauge:
					number(KindGauge, d.Gauge.GetDataPoints())
				case *metricpb.Metric_Histogram:
					for _, dp := range d.Histogram.GetDataPoints() {
						p := base
						p.Kind, p.Attrs = KindHistogram, attrs(dp.GetAttributes())
						p.Start, p.Time = time.Unix(0, int64(dp.GetStartTimeUnixNano())), time.Unix(0, int64(dp.GetTimeUnixNano()))
						p.Count, p.Sum = dp.GetCount(), dp.GetSum()
						p.Bounds, p.Counts = dp.GetExplicitBounds(), dp.GetBucketCounts()
						out = append(out, p)
					}
				}
			}
		}
	}
	return out
}

// Points returns every point of metric name received, in order of arrival.
func (s *Sink) Points(name string) []Point {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Point
	for _, p := range s.points {
		if p.Name == name {
			out = append(out, p)
		}
	}
	return out
}

// Latest returns, for each stream of metric name (its resource, attributes
// and start time), its latest point: with cumulative temporality, the
// stream's total so far. Points are ordered by their attributes.
func (s *Sink) Latest(name string) []Point {
	s.mu.Lock()
	defer s.mu.Unlock()
	latest := map[string]Point{}
	for _, p := range s.points {
		if p.Name != name {
			continue
		}
		k := key(p.Resource) + "|" + key(p.Attrs) + "|" + fmt.Sprint(p.Start.UnixNano())
		if p.Kind == KindGauge {
			k = key(p.Resource) + "|" + key(p.Attrs)
		}
		if cur, ok := latest[k]; !ok || !p.Time.Before(cur.Time) {
			latest[k] = p
		}
	}
	out := make([]Point, 0, len(latest))
	for _, p := range latest {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return key(out[i].Attrs) < key(out[j].Attrs) })
	return out
}

// Total adds up the latest values of metric name (a sum) over the streams
// whose attributes include match.
func (s *Sink) Total(name string, match map[string]string) float64 {
	total := 0.0
	for _, p := range s.Latest(name) {
		if matches(p.Attrs, match) {
			total += p.Value
		}
	}
	return total
}

// Histogram merges the latest points of histogram name over the streams
// whose attributes include match.
func (s *Sink) Histogram(name string, match map[string]string) Histogram {
	var h Histogram
	for _, p := range s.Latest(name) {
		if p.Kind != KindHistogram || !matches(p.Attrs, match) {
			continue
		}
		if h.Bounds == nil {
			h.Bounds, h.Counts = slices.Clone(p.Bounds), make([]uint64, len(p.Counts))
		}
		if !slices.Equal(h.Bounds, p.Bounds) || len(h.Counts) != len(p.Counts) {
			continue // another bucket layout: not mergeable
		}
		h.Count += p.Count
		h.Sum += p.Sum
		for i, c := range p.Counts {
			h.Counts[i] += c
		}
	}
	return h
}

// Histogram is an explicit-bucket histogram.
type Histogram struct {
	Count  uint64
	Sum    float64
	Bounds []float64
	Counts []uint64 // len(Bounds)+1
}

// Quantile estimates the q-quantile (0 < q <= 1) by linear interpolation in
// the bucket that holds it; the last, unbounded bucket answers its lower
// bound. It is 0 for an empty histogram.
func (h Histogram) Quantile(q float64) float64 {
	if h.Count == 0 || len(h.Counts) == 0 {
		return 0
	}
	rank := q * float64(h.Count)
	seen := 0.0
	for i, c := range h.Counts {
		if c == 0 {
			continue
		}
		if seen+float64(c) >= rank {
			lo := 0.0
			if i > 0 {
				lo = h.Bounds[i-1]
			}
			if i >= len(h.Bounds) {
				return lo
			}
			hi := h.Bounds[i]
			return lo + (hi-lo)*(rank-seen)/float64(c)
		}
		seen += float64(c)
	}
	return h.Bounds[len(h.Bounds)-1]
}

// Mean is the average of the recorded values.
func (h Histogram) Mean() float64 {
	if h.Count == 0 {
		return 0
	}
	return h.Sum / float64(h.Count)
}

func matches(attrs, match map[string]string) bool {
	for k, v := range match {
		if attrs[k] != v {
			return false
		}
	}
	return true
}

func key(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k + "=" + m[k] + ",")
	}
	return b.String()
}

// attrs turns OTLP attributes into text values.
func attrs(kvs []*commonpb.KeyValue) map[string]string {
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		out[kv.GetKey()] = valueText(kv.GetValue())
	}
	return out
}

func valueText(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_BoolValue:
		return fmt.Sprint(x.BoolValue)
	case *commonpb.AnyValue_IntValue:
		return fmt.Sprint(x.IntValue)
	case *commonpb.AnyValue_DoubleValue:
		return fmt.Sprint(x.DoubleValue)
	case *commonpb.AnyValue_ArrayValue:
		parts := make([]string, 0, len(x.ArrayValue.GetValues()))
		for _, e := range x.ArrayValue.GetValues() {
			parts = append(parts, valueText(e))
		}
		return "[" + strings.Join(parts, ",") + "]"
	case *commonpb.AnyValue_BytesValue:
		return hex.EncodeToString(x.BytesValue)
	}
	return ""
}
