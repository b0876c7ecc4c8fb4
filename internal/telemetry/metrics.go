package telemetry

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Metric names.
const (
	// MetricPollOperations counts the operations poll handled, by outcome
	// and, when known, request.
	MetricPollOperations = "opstatus.poll.operations"
	// MetricPollDuration is the duration of each poll invocation, in
	// seconds.
	MetricPollDuration = "opstatus.poll.duration"
	// MetricClusterServiceDuration is the duration of each Cluster Service
	// request, in seconds, by status_code (0 when no reply came).
	MetricClusterServiceDuration = "opstatus.clusterservice.duration"
	// MetricLockWait is how long taking a subscription lock took, in
	// seconds, by whether it was acquired.
	MetricLockWait = "opstatus.lock.wait"
	// MetricMessageAge is the time from the scan that wrote a queue message
	// (its scannedAt) to the poll that reads it, in seconds.
	MetricMessageAge = "opstatus.message.age"
	// MetricScanPending is the number of operations the last scan listed,
	// by status and request.
	MetricScanPending = "opstatus.scan.pending"
	// MetricScanOldest is the age, in seconds, of the oldest unfinished
	// operation the last scan listed, from its startTime, by request and
	// resource_type (cluster, nodePool, or unknown when its internalId is
	// not a Cluster Service path): alerts allow a cluster Create less time
	// than the rest.
	MetricScanOldest = "opstatus.scan.oldest"
	// MetricScanTimestamp is the Unix time, in seconds, at which this
	// process's last scan finished, reported while its figures are fresh.
	// Every scan reports it, one that lists nothing too: an idle
	// deployment has no opstatus.scan.pending series, and an alert on
	// their absence would fire for ever.
	MetricScanTimestamp = "opstatus.scan.timestamp"
	// MetricPastDeadline counts the operations poll ended Failed because
	// they passed their deadline, by request.
	MetricPastDeadline = "opstatus.operations.past_deadline"
	// MetricScanSkipped counts the operations scans did not send because
	// poll could not act on them, by reason.
	MetricScanSkipped = "opstatus.scan.skipped"
	// MetricCosmosRefused counts the requests of poll that Cosmos DB
	// refused for good (a 4xx no retry changes: 400, 413, 403, ...), once
	// per operation and poll, by container and status_code.
	MetricCosmosRefused = "opstatus.cosmos.refused"
)

// Metric attribute keys.
const (
	OutcomeKey    = attribute.Key("outcome")
	RequestKey    = attribute.Key("request")
	StatusCodeKey = attribute.Key("status_code")
	StatusKey     = attribute.Key("status")
	AcquiredKey   = attribute.Key("acquired")
	ReasonKey     = attribute.Key("reason")
	// ResourceTypeKey is the kind of Cluster Service object an
	// operation's internalId names (cluster, nodePool, externalAuth,
	// breakGlassCredential), or unknown.
	ResourceTypeKey = attribute.Key("resource_type")
	// ContainerKey is a Cosmos DB container's name.
	ContainerKey = attribute.Key("container")
)

// Bucket boundaries, in seconds: a request or invocation takes milliseconds
// to a minute; a message waits up to a scan interval or so.
var (
	durationBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 10, 30, 60}
	ageBuckets      = []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 60, 120, 300}
)

// maxScanSeries bounds the status × request series of a scan: both come
// from items the frontend writes, and a bad item must not add series
// without end.
const maxScanSeries = 64

type instruments struct {
	pollOperations metric.Int64Counter
	pollDuration   metric.Float64Histogram
	csDuration     metric.Float64Histogram
	lockWait       metric.Float64Histogram
	messageAge     metric.Float64Histogram
	pastDeadline   metric.Int64Counter
	scanSkipped    metric.Int64Counter
	scanPending    metric.Int64ObservableGauge
	scanOldest     metric.Float64ObservableGauge
	scanTimestamp  metric.Float64ObservableGauge
	cosmosRefused  metric.Int64Counter

	lastScan atomic.Pointer[ScanTally]

	budget budgetInstruments
}

func newInstruments(m metric.Meter) (*instruments, error) {
	i := &instruments{}
	var errs [11]error
	i.pollOperations, errs[0] = m.Int64Counter(MetricPollOperations, metric.WithUnit("{operation}"),
		metric.WithDescription("Operations poll handled, by outcome and request."))
	i.pollDuration, errs[1] = m.Float64Histogram(MetricPollDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of poll invocations."), metric.WithExplicitBucketBoundaries(durationBuckets...))
	i.csDuration, errs[2] = m.Float64Histogram(MetricClusterServiceDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of Cluster Service requests, by HTTP status code (0: no reply)."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	i.lockWait, errs[3] = m.Float64Histogram(MetricLockWait, metric.WithUnit("s"),
		metric.WithDescription("Time taken to take a subscription lock."), metric.WithExplicitBucketBoundaries(durationBuckets...))
	i.messageAge, errs[4] = m.Float64Histogram(MetricMessageAge, metric.WithUnit("s"),
		metric.WithDescription("Time from the scan that wrote a queue message to its poll."),
		metric.WithExplicitBucketBoundaries(ageBuckets...))
	i.pastDeadline, errs[5] = m.Int64Counter(MetricPastDeadline, metric.WithUnit("{operation}"),
		metric.WithDescription("Operations ended Failed for passing their deadline, by request."))
	i.scanPending, errs[6] = m.Int64ObservableGauge(MetricScanPending, metric.WithUnit("{operation}"),
		metric.WithDescription("Operations the last scan listed, by status and request."))
	i.scanOldest, errs[7] = m.Float64ObservableGauge(MetricScanOldest, metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest unfinished operation the last scan listed, by request and resource type."))
	i.scanSkipped, errs[8] = m.Int64Counter(MetricScanSkipped, metric.WithUnit("{operation}"),
		metric.WithDescription("Operations scans did not send because poll could not act on them, by reason."))
	i.scanTimestamp, errs[9] = m.Float64ObservableGauge(MetricScanTimestamp, metric.WithUnit("s"),
		metric.WithDescription("Unix time at which this process's last scan finished."))
	i.cosmosRefused, errs[10] = m.Int64Counter(MetricCosmosRefused, metric.WithUnit("{request}"),
		metric.WithDescription("Requests of poll Cosmos DB refused for good, by container and HTTP status code."))
	if err := errors.Join(errs[:]...); err != nil {
		return nil, err
	}
	if _, err := m.RegisterCallback(i.observeScan, i.scanPending, i.scanOldest, i.scanTimestamp); err != nil {
		return nil, err
	}
	var err error
	if i.budget, err = newBudgetInstruments(m); err != nil {
		return nil, err
	}
	return i, nil
}

// observeScan reports the last scan's figures while they are fresh; before
// any scan, in a process that has not scanned lately, nothing: the timer
// runs scan on one instance at a time, and any instance's figures would
// otherwise stand for ever.
func (i *instruments) observeScan(_ context.Context, o metric.Observer) error {
	t := i.lastScan.Load()
	if t == nil || !t.until.IsZero() && time.Now().After(t.until) {
		return nil
	}
	o.ObserveFloat64(i.scanTimestamp, float64(t.at.UnixNano())/1e9)
	for k, n := range t.pending {
		o.ObserveInt64(i.scanPending, n, metric.WithAttributes(StatusKey.String(k.status), RequestKey.String(k.request)))
	}
	for k, start := range t.oldest {
		o.ObserveFloat64(i.scanOldest, t.at.Sub(start).Seconds(),
			metric.WithAttributes(RequestKey.String(k.request), ResourceTypeKey.String(k.resourceType)))
	}
	return nil
}

func meters() *instruments {
	if s := load(); s != nil {
		return s.m
	}
	return nil
}

// PollOperation counts one operation poll handled, by outcome and request
// (left out when empty: the operation was not read).
func PollOperation(ctx context.Context, outcome, request string) {
	m := meters()
	if m == nil {
		return
	}
	if request == "" {
		m.pollOperations.Add(ctx, 1, metric.WithAttributes(OutcomeKey.String(outcome)))
		return
	}
	m.pollOperations.Add(ctx, 1, metric.WithAttributes(OutcomeKey.String(outcome), RequestKey.String(request)))
}

// PollOperations counts n operations of one outcome whose request is
// unknown, such as those of a message dropped whole.
func PollOperations(ctx context.Context, outcome string, n int) {
	if m := meters(); m != nil && n > 0 {
		m.pollOperations.Add(ctx, int64(n), metric.WithAttributes(OutcomeKey.String(outcome)))
	}
}

// PollDuration records the duration of a poll invocation.
func PollDuration(ctx context.Context, d time.Duration) {
	if m := meters(); m != nil {
		m.pollDuration.Record(ctx, d.Seconds())
	}
}

// MessageAge records how long a queue message took from its scan to its
// poll.
func MessageAge(ctx context.Context, d time.Duration) {
	if m := meters(); m != nil {
		m.messageAge.Record(ctx, d.Seconds())
	}
}

// PastDeadline counts an operation ended Failed for passing its deadline.
func PastDeadline(ctx context.Context, request string) {
	if m := meters(); m != nil {
		m.pastDeadline.Add(ctx, 1, metric.WithAttributes(RequestKey.String(request)))
	}
}

// ScanTally counts what a scan listed. The nil *ScanTally, which NewScanTally
// returns when metrics are off, counts nothing.
type ScanTally struct {
	pending map[scanKey]int64
	oldest  map[ageKey]time.Time // startTime of the oldest unfinished operation
	at      time.Time            // when the scan finished
	until   time.Time            // when its figures go stale
}

type (
	scanKey struct{ status, request string }
	ageKey  struct{ request, resourceType string }
)

// NewScanTally returns an empty tally, or nil when metrics are off.
func NewScanTally() *ScanTally {
	if meters() == nil {
		return nil
	}
	return &ScanTally{pending: map[scanKey]int64{}, oldest: map[ageKey]time.Time{}}
}

// Add counts one listed operation of a resource of resourceType (see
// ResourceTypeKey). unfinished says whether its status is not
// terminal; only those count for the oldest age. A zero start is left out
// of it.
func (t *ScanTally) Add(status, request, resourceType string, start time.Time, unfinished bool) {
	if t == nil {
		return
	}
	k := scanKey{status, request}
	if _, ok := t.pending[k]; !ok && len(t.pending) >= maxScanSeries {
		k = scanKey{"other", "other"}
	}
	t.pending[k]++
	if !unfinished || start.IsZero() {
		return
	}
	a := ageKey{request, resourceType}
	old, ok := t.oldest[a]
	if !ok && len(t.oldest) >= maxScanSeries {
		a = ageKey{"other", "other"}
		old, ok = t.oldest[a]
	}
	if !ok || start.Before(old) {
		t.oldest[a] = start
	}
}

// Scanned publishes t as the last scan's figures, reported by the
// opstatus.scan.* gauges at every export until the next scan of this
// process, or for validFor after now when that is positive.
func Scanned(t *ScanTally, now time.Time, validFor time.Duration) {
	m := meters()
	if t == nil || m == nil {
		return
	}
	t.at = now
	if validFor > 0 {
		t.until = now.Add(validFor)
	}
	m.lastScan.Store(t)
}

// ScanSkipped counts n operations a scan did not send, for reason.
func ScanSkipped(ctx context.Context, reason string, n int) {
	if m := meters(); m != nil && n > 0 {
		m.scanSkipped.Add(ctx, int64(n), metric.WithAttributes(ReasonKey.String(reason)))
	}
}

// CosmosRefused counts a request Cosmos DB refused for good, by container
// and HTTP status code.
func CosmosRefused(ctx context.Context, container string, statusCode int) {
	if m := meters(); m != nil {
		m.cosmosRefused.Add(ctx, 1, metric.WithAttributes(ContainerKey.String(container), StatusCodeKey.Int(statusCode)))
	}
}
