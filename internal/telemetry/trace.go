package telemetry

import (
	"context"
	"io"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/tracing"
	"github.com/Azure/azure-sdk-for-go/sdk/tracing/azotel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Span attribute keys, named as the ARO-HCP resource provider names them, so
// that a query over its traces finds opstatus's too.
const (
	SubscriptionIDKey  = attribute.Key("aro.subscription.id")
	OperationIDKey     = attribute.Key("aro.operation.id")
	OperationTypeKey   = attribute.Key("aro.operation.type")
	OperationStatusKey = attribute.Key("aro.operation.status")
	ResourceNameKey    = attribute.Key("aro.resource.name")
	ClusterIDKey       = attribute.Key("cs.cluster.id")
	ClusterStateKey    = attribute.Key("cs.cluster.state")
	NodePoolIDKey      = attribute.Key("cs.nodepool.id")
	NodePoolStateKey   = attribute.Key("cs.nodepool.state")

	ExternalAuthIDKey    = attribute.Key("cs.externalauth.id")
	ExternalAuthStateKey = attribute.Key("cs.externalauth.state")
	CredentialIDKey      = attribute.Key("cs.break_glass_credential.id")
	CredentialStatusKey  = attribute.Key("cs.break_glass_credential.status")
)

// Span names.
const (
	SpanPollOperation = "poll operation"
	SpanLockWait      = "subscription lock wait"
	SpanNotify        = "notify ARM"
	// SpanClusterService is the span of a status request to Cluster
	// Service; its other requests are named likewise after the last
	// segment of their path ("cluster service inflight_checks").
	SpanClusterService = clusterServicePrefix + "status"

	clusterServicePrefix = "cluster service "
)

// Attribute keys of the OpenTelemetry semantic conventions.
const (
	invocationIDKey = attribute.Key("faas.invocation_id")
	triggerKey      = attribute.Key("faas.trigger")
	httpMethodKey   = attribute.Key("http.request.method")
	httpStatusKey   = attribute.Key("http.response.status_code")
	urlFullKey      = attribute.Key("url.full")
	serverAddrKey   = attribute.Key("server.address")
)

// noSpan is the span of a context without one: it records nothing.
var noSpan = trace.SpanFromContext(context.Background())

// Start starts a span named name under ctx's when tracing is on; otherwise
// it returns ctx and a span that records nothing.
func Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	s := load()
	if s == nil || s.tracer == nil {
		return ctx, noSpan
	}
	return s.tracer.Start(ctx, name, opts...)
}

// Fail marks span as failed with err; a nil err changes nothing.
func Fail(span trace.Span, err error) {
	if err == nil || !span.IsRecording() {
		return
	}
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}

// StartInvocation starts the span of one invocation of function, named
// after it. When header carries a W3C trace context (traceparent and
// tracestate, which the Functions host's HttpClient adds from the
// invocation's Activity), the span continues that trace.
func StartInvocation(ctx context.Context, header http.Header, function, invocationID string) (context.Context, trace.Span) {
	s := load()
	if s == nil || s.tracer == nil {
		return ctx, noSpan
	}
	ctx = s.propagator.Extract(ctx, propagation.HeaderCarrier(header))
	trigger := "other"
	switch function {
	case "scan":
		trigger = "timer"
	case "poll":
		trigger = "pubsub"
	}
	return s.tracer.Start(ctx, function, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(invocationIDKey.String(invocationID), triggerKey.String(trigger)))
}

// EndInvocation ends an invocation's span with the HTTP status it answered;
// any status but 2xx fails the invocation.
func EndInvocation(span trace.Span, status int) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(httpStatusKey.Int(status))
	if status < 200 || status > 299 {
		span.SetStatus(codes.Error, http.StatusText(status))
	}
	span.End()
}

// noEnd is LockWait's end when telemetry is off.
func noEnd(error) {}

// LockWait starts the wait for a subscription's lock: a span, and the
// opstatus.lock.wait histogram. end, called with the wait's error (nil
// once the lock is held), ends both. The requests that take the lock run
// under the returned context.
func LockWait(ctx context.Context, subscriptionID string) (_ context.Context, end func(err error)) {
	s := load()
	if s == nil {
		return ctx, noEnd
	}
	start := time.Now()
	var span trace.Span = noSpan
	if s.tracer != nil {
		ctx, span = s.tracer.Start(ctx, SpanLockWait, trace.WithAttributes(SubscriptionIDKey.String(subscriptionID)))
	}
	return ctx, func(err error) {
		if s.m != nil {
			s.m.lockWait.Record(ctx, time.Since(start).Seconds(), metric.WithAttributes(AcquiredKey.Bool(err == nil)))
		}
		Fail(span, err)
		span.End()
	}
}

// AzureTracing is the tracing provider for Azure SDK clients (azcore's
// ClientOptions.TracingProvider): their spans, one per Cosmos DB call and
// one per HTTP request, join opstatus's. It is the zero Provider, which
// traces nothing, when tracing is off.
func AzureTracing() tracing.Provider {
	s := load()
	if s == nil || s.tracer == nil {
		return tracing.Provider{}
	}
	return azotel.NewTracingProvider(s.tp, nil)
}

// Transport wraps next so that each Cluster Service request gets a client
// span, carries the trace context to Cluster Service (traceparent), and is
// timed in opstatus.clusterservice.duration, up to the end of its body.
// With telemetry off it returns next itself.
func Transport(next http.RoundTripper) http.RoundTripper {
	if load() == nil {
		return next
	}
	return &transport{next: next}
}

type transport struct {
	next http.RoundTripper
}

// clusterServiceSpan names the span of a request to p after what it asks
// (status, inflight_checks, break_glass_credentials), or, for the GET of an
// object, after its collection: never after an id, which would make a
// span name of every object.
func clusterServiceSpan(p string) string {
	dir, last := path.Split(p)
	switch last {
	case "status", "inflight_checks", "break_glass_credentials":
		return clusterServicePrefix + last
	}
	return clusterServicePrefix + strings.TrimSuffix(path.Base(dir), "s")
}

// RoundTrip sends req through the next transport, timing it.
func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	s := load()
	if s == nil {
		return t.next.RoundTrip(req)
	}
	start := time.Now()
	ctx, span := req.Context(), noSpan
	if s.tracer != nil {
		ctx, span = s.tracer.Start(ctx, clusterServiceSpan(req.URL.Path), trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(httpMethodKey.String(req.Method), urlFullKey.String(redacted(req)),
				serverAddrKey.String(req.URL.Hostname())))
		// A RoundTripper must not change its request: the trace context
		// goes on a copy.
		req = req.Clone(ctx)
		s.propagator.Inject(ctx, propagation.HeaderCarrier(req.Header))
	}
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		t.done(ctx, s, span, start, 0, err)
		return nil, err
	}
	span.SetAttributes(httpStatusKey.Int(resp.StatusCode))
	code := resp.StatusCode
	resp.Body = &timedBody{rc: resp.Body, end: func(err error) { t.done(ctx, s, span, start, code, err) }}
	return resp, nil
}

// done records a request that ended, with its status code (0: no reply).
func (t *transport) done(ctx context.Context, s *state, span trace.Span, start time.Time, code int, err error) {
	if s.m != nil {
		s.m.csDuration.Record(ctx, time.Since(start).Seconds(), metric.WithAttributes(StatusCodeKey.Int(code)))
	}
	switch {
	case err != nil:
		Fail(span, err)
	case code >= 500:
		span.SetStatus(codes.Error, http.StatusText(code))
	}
	span.End()
}

// redacted is the request's URL without user information or query: only
// the path names what was asked for.
func redacted(req *http.Request) string {
	u := *req.URL
	u.User, u.RawQuery, u.ForceQuery, u.Fragment = nil, "", false, ""
	return u.String()
}

// timedBody calls end once, when the body is read to its end, fails, or is
// closed.
type timedBody struct {
	rc   io.ReadCloser
	end  func(error)
	once sync.Once
}

func (b *timedBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	switch {
	case err == io.EOF:
		b.once.Do(func() { b.end(nil) })
	case err != nil:
		b.once.Do(func() { b.end(err) })
	}
	return n, err
}

func (b *timedBody) Close() error {
	err := b.rc.Close()
	b.once.Do(func() { b.end(nil) })
	return err
}
