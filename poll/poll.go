// Package poll is the queue-triggered function: it brings the operations a
// message names up to date with Cluster Service and writes the results to
// Cosmos DB.
package poll

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/opstatus/opstatus/functions"
	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/budget"
	"github.com/opstatus/opstatus/internal/clusterservice"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/internal/lock"
	"github.com/opstatus/opstatus/internal/panics"
	"github.com/opstatus/opstatus/internal/queuemsg"
	"github.com/opstatus/opstatus/internal/telemetry"
)

// Binding is the queue trigger's binding name in poll/function.json.
const Binding = "operation"

// Defaults for Function's settings.
const (
	defaultNotifyFor     = time.Hour
	defaultMaxInFlight   = 64
	defaultWritesPerHold = 4
	defaultDeadline      = 2 * time.Minute
)

// Outcome says what poll did with one operation.
type Outcome string

// Outcomes of an operation.
const (
	OutcomeGone       Outcome = "gone"       // the operation item does not exist
	OutcomeInvalid    Outcome = "invalid"    // the item or its ids cannot be acted on; logged
	OutcomeDone       Outcome = "done"       // terminal and nothing left to notify
	OutcomeUnchanged  Outcome = "unchanged"  // Cluster Service says nothing new
	OutcomeUpdated    Outcome = "updated"    // a new status was written
	OutcomeDeleted    Outcome = "deleted"    // a finished delete removed its resources
	OutcomeNotified   Outcome = "notified"   // ARM was notified of the end
	OutcomeDeferred   Outcome = "deferred"   // a dependency failed; the next scan retries
	OutcomeSuperseded Outcome = "superseded" // a later scan has sent a fresher message
)

// Tally counts a message's operations by outcome; it is the invocation's
// ReturnValue.
type Tally map[Outcome]int

// ClusterService is the part of the Cluster Service client poll uses: the
// calls of the contract's table "Operation kinds and Cluster Service".
type ClusterService interface {
	Status(ctx context.Context, id clusterservice.InternalID) (clusterservice.Status, error)
	NodePool(ctx context.Context, id clusterservice.InternalID) error
	InflightChecks(ctx context.Context, id clusterservice.InternalID) ([]clusterservice.InflightCheck, error)
	Cluster(ctx context.Context, id clusterservice.InternalID) (clusterservice.Cluster, error)
	ExternalAuth(ctx context.Context, id clusterservice.InternalID) (clusterservice.ExternalAuth, error)
	Credential(ctx context.Context, id clusterservice.InternalID) (clusterservice.Credential, error)
	Credentials(ctx context.Context, cluster clusterservice.InternalID) ([]clusterservice.Credential, error)
}

// Notifier is the part of the ARM notifier poll uses.
type Notifier interface {
	Notify(ctx context.Context, uri string, status arm.OperationStatus) error
}

// Config configures a Function; its zero settings take the defaults.
type Config struct {
	DB       database.DBClient
	Cluster  ClusterService
	Locker   *lock.Locker
	Notifier Notifier
	// Location is the resource provider's Azure region, written into
	// billing items.
	Location string
	// Owner names this process in lock items; the invocation id is appended.
	Owner string
	// Interval is the scan schedule's interval: a message that has waited
	// longer than that has been superseded by a fresher one and is dropped
	// (queuemsg.Superseded). Zero keeps every message.
	Interval time.Duration
	// MaxInFlight caps the operations being checked (read, then Cluster
	// Service called) at once across all invocations of the process, and
	// so the Cluster Service requests in flight, when Permits is nil;
	// default 64.
	MaxInFlight int
	// Permits is the process's share of the Cluster Service budget
	// (internal/budget): the checks gate, resized as the ledger says, and
	// the bound of each request's deadline. Nil: a gate of MaxInFlight.
	Permits *budget.Gate
	// WritesPerHold bounds the operations written under one hold of a
	// subscription's lock, which the frontend waits for on every customer
	// request; default 4.
	WritesPerHold int
	// Deadline bounds the work of one invocation, well inside the host's
	// functionTimeout; default 2 minutes.
	Deadline time.Duration
	// Deadlines end an operation Failed once it has stayed unfinished that
	// long after its startTime; zero values mean none.
	Deadlines Deadlines
	// NotifyFor is how long after an operation ends its notification is
	// retried before it is given up; default one hour.
	NotifyFor time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Function polls operations; New makes one.
type Function struct {
	Config

	// The process's gates, each named for what it bounds (see New).
	messageTurn, lockHolds, deliveries gate
	checks                             *budget.Gate

	notifying sync.Map // "subscription/operation" of notifications in flight

	skewWarned atomic.Int64 // Unix nanoseconds of the last clock skew warning
}

func (f *Function) now() time.Time {
	if f.Now != nil {
		return f.Now().UTC()
	}
	return time.Now().UTC()
}

// clock is now with time.Now's monotonic reading, which UTC strips: what
// a message's Clock measures elapsed time with.
func (f *Function) clock() time.Time {
	if f.Now != nil {
		return f.Now()
	}
	return time.Now()
}

func orDefault[T int | time.Duration](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}

// Handle is the functions.Handler of poll. Only a message that is malformed
// as a whole answers 400 (the host retries it, then moves it to the poison
// queue). Every operation of a well-formed message gets an outcome of its
// own, and the answer is 200 with their Tally: an operation that cannot be
// acted on is logged and left alone; a dependency failure is logged and
// leaves the operation unchanged, since the next scan sends it again and an
// outage must not fill the poison queue.
func (f *Function) Handle(ctx context.Context, inv *functions.Invocation) (*functions.Result, error) {
	defer observeDuration(ctx, time.Now())
	arrived := f.clock()
	var raw json.RawMessage
	if err := inv.QueueMessage(Binding, &raw); err != nil {
		inv.Log.Error("malformed queue message", "error", err)
		return nil, err
	}
	msg, err := queuemsg.Decode(raw)
	if err != nil {
		inv.Log.Error("malformed queue message", "error", err)
		return nil, functions.BadRequest(err)
	}
	md := inv.QueueMetadata()
	tally := f.poll(ctx, inv.Log, Message{Read: msg, Group: budget.GroupPoll, Invocation: inv.ID,
		Inserted: md.InsertionTime, Clock: queuemsg.NewClock(md.ReceivedAt(), arrived)})
	return &functions.Result{ReturnValue: tally}, nil
}

// Message is a message's work as Poll takes it: the operations, and who
// hands them over.
type Message struct {
	queuemsg.Read
	// Group is the budget group of the process that polls them: poll's
	// for a queue message; pickup's for the operations pickup hands over,
	// since on Flex Consumption the two run in processes of their own.
	Group budget.Group
	// Invocation is the invocation's id, which names it in lock owners.
	Invocation string
	// Inserted is the queue's InsertionTime, and Clock tells Storage's
	// time; both zero for a message that was never queued.
	Inserted time.Time
	Clock    queuemsg.Clock
}

// Poll brings the operations of m up to date, as Handle does those of a
// queue message, and returns their Tally.
func (f *Function) Poll(ctx context.Context, log *slog.Logger, m Message) Tally {
	defer observeDuration(ctx, time.Now())
	return f.poll(ctx, log, m)
}

func (f *Function) poll(ctx context.Context, log *slog.Logger, m Message) Tally {
	observeMessage(ctx, m.Read, f.now())
	f.checks.Serve(m.Group)
	ctx, cancel := context.WithTimeout(ctx, orDefault(f.Deadline, defaultDeadline))
	defer cancel()
	run := &run{
		f:        f,
		log:      log,
		owner:    f.Owner + "/" + ownerSuffix(m.Invocation),
		msg:      m.Read,
		inserted: m.Inserted,
		clock:    m.Clock,
		outcomes: make([]Outcome, len(m.Entries)),
	}
	run.do(ctx)
	tally := Tally{}
	for _, o := range run.outcomes {
		tally[o]++
	}
	if !m.Single {
		log.Debug("polled a message", "operations", len(m.Entries), "outcomes", tally)
	}
	return tally
}

// run is one invocation's work on one message.
type run struct {
	f        *Function
	log      *slog.Logger
	owner    string
	msg      queuemsg.Read
	inserted time.Time      // the queue's InsertionTime
	clock    queuemsg.Clock // Storage's, by which the message is aged

	outcomes []Outcome // by entry
}

func (r *run) superseded() bool {
	return queuemsg.Superseded(r.clock.Now(r.f.clock()), r.msg.ScannedAt, r.inserted, r.f.Interval)
}

// Clock skew a process reports: beyond skewWarnAbove, its clock and
// Storage's disagree by more than the delay of an invocation and the
// metadata's whole seconds explain; once per skewWarnEvery is enough to be
// seen without filling the log.
const (
	skewWarnAbove = 5 * time.Second
	skewWarnEvery = 10 * time.Minute
)

// warnSkew logs at Warning, at most once per skewWarnEvery in the process,
// that its clock differs from Storage's: messages are aged by Storage's
// clock, but the process's own still stamps lastTransitionTime and counts
// deadlines.
func (r *run) warnSkew() {
	skew, ok := r.clock.Skew()
	if !ok || skew.Abs() <= skewWarnAbove {
		return
	}
	now := r.f.clock()
	last := r.f.skewWarned.Load()
	if last != 0 && now.Sub(time.Unix(0, last)) < skewWarnEvery {
		return
	}
	if !r.f.skewWarned.CompareAndSwap(last, now.UnixNano()) {
		return // another invocation warns
	}
	r.log.Warn("this instance's clock differs from Storage's; messages are aged by Storage's",
		"ahead_ms", skew.Milliseconds())
}

// do brings every operation of the message up to date: first each one's
// status, concurrently; then the writes, each subscription's under its
// lock a few at a time; then the notifications of those that ended.
func (r *run) do(ctx context.Context) {
	r.warnSkew()
	if r.superseded() {
		r.log.Debug("message superseded by a later scan; dropped", "operations", len(r.msg.Entries),
			"inserted", r.inserted, "scanned_at", r.msg.ScannedAt)
		for i := range r.outcomes {
			r.outcomes[i] = OutcomeSuperseded
		}
		countSuperseded(ctx, len(r.outcomes))
		return
	}
	items := make([]*item, len(r.msg.Entries))
	var valid []*item
	for i, e := range r.msg.Entries {
		it := &item{msg: e.Operation, log: r.log}
		items[i] = it
		err := e.Err
		if err == nil {
			err = e.Check() // its text quotes the ids, bounded
		}
		if err != nil {
			it.log.Error("queue message names no operation poll can act on; skipped", "error", err)
			it.outcome = OutcomeInvalid
			continue
		}
		it.log = r.log.With("subscription_id", e.SubscriptionID, "operation_id", e.OperationID)
		valid = append(valid, it)
	}
	r.checkAll(ctx, valid)
	r.writeAll(ctx, items)
	r.notifyAll(ctx, items)
	for i, it := range items {
		r.outcomes[i] = it.outcome
		it.report()
	}
}

// checkAll checks the items, each in a place of the process's checks
// gate, taken in the message's turn and before the item's goroutine
// starts (see New): a message waiting for places holds one goroutine.
//
// The items count in the process's demand for permits from their arrival
// until their check ends.
func (r *run) checkAll(ctx context.Context, items []*item) {
	r.f.checks.Queue(len(items))
	var wg sync.WaitGroup
	defer wg.Wait()
	waiting, stop := r.untilSuperseded(ctx)
	defer stop()
	endTurn, err := r.f.messageTurn.take(waiting, "to call Cluster Service")
	if err != nil {
		r.f.checks.Queue(-len(items))
		for _, it := range items {
			r.waitEnded(it, waiting, err)
		}
		return
	}
	defer endTurn()
	for _, it := range items {
		release, err := r.f.checks.Acquire(waiting, "to call Cluster Service")
		if err != nil {
			r.f.checks.Queue(-1)
			r.waitEnded(it, waiting, err)
			continue
		}
		wg.Go(func() {
			defer r.f.checks.Queue(-1)
			defer release()
			safely(it.log, func() { r.check(it.traced(ctx), it) }, it.defer_)
		})
	}
}

// errSuperseded ends the wait for permits of a message a later scan has
// superseded.
var errSuperseded = errors.New("superseded by a later scan while waiting for permits")

// supersededPoll is how often a message waiting for permits checks whether
// it has been superseded.
const supersededPoll = 250 * time.Millisecond

// untilSuperseded returns ctx, also canceled once the message is
// superseded: a fresher message names its operations by then, so waiting
// on for permits (scarce while holders' leases are reclaimed, for up to
// half a minute) would only check them late and twice.
func (r *run) untilSuperseded(ctx context.Context) (context.Context, func()) {
	waiting, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(supersededPoll)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-waiting.Done():
				return
			case <-t.C:
				if r.superseded() {
					cancel(errSuperseded)
					return
				}
			}
		}
	}()
	return waiting, func() { close(done); cancel(nil) }
}

// waitEnded records an item whose wait for permits ended with err:
// superseded, when that ended it, else deferred.
func (r *run) waitEnded(it *item, waiting context.Context, err error) {
	if errors.Is(context.Cause(waiting), errSuperseded) {
		it.outcome = OutcomeSuperseded
		countSuperseded(waiting, 1)
		return
	}
	it.defer_(err)
}

// safely runs fn, one goroutine's work for an operation; a panic in it, a
// bug, is logged with its stack and handed to fail, so that it leaves that
// operation for the next scan instead of ending the process and every
// invocation in it.
func safely(log *slog.Logger, fn func(), fail func(error)) {
	if p := panics.Recover(fn); p != nil {
		p.Log(context.Background(), log, "poll panicked; its work is left for the next scan")
		fail(p)
	}
}

// item is one operation of a message on its way through the run.
type item struct {
	msg queuemsg.Operation
	log *slog.Logger

	op      *database.Operation // as first read
	change  *change             // the write it needs, if any
	ended   *database.Operation // ended with a notification to send
	note    *notification       // what its delivery did, until it is recorded
	outcome Outcome
	overdue bool                   // the write ended it for passing its deadline
	err     error                  // the dependency failure behind OutcomeDeferred
	refused *database.RefusedError // a write Cosmos DB refused, past the deadline, that the operation's write went without
	span    trace.Span             // the operation's, when tracing is on
}

// defer_ records a dependency failure: the operation stays as it is.
func (it *item) defer_(err error) {
	it.outcome, it.err = OutcomeDeferred, err
}

// report logs the item's outcome when it is a failure. A change has its own
// lines where it is written (status, notification, billing), so the
// outcome line is Debug: the log at Info is the record of what opstatus did.
func (it *item) report() {
	defer it.finish()
	var refused *database.RefusedError
	if it.outcome == OutcomeDeferred && errors.As(it.err, &refused) || it.refused != nil {
		it.reportRefusal(cmp.Or(refused, it.refused))
		return
	}
	switch it.outcome {
	case OutcomeDeferred:
		level := slog.LevelWarn
		if !Transient(it.err) {
			level = slog.LevelError
		}
		it.log.Log(context.Background(), level, "operation left unchanged; the next scan retries it", "error", it.err)
	default:
		it.log.Debug("polled", "outcome", it.outcome)
	}
}

// reportRefusal logs at Error a request Cosmos DB refused for good, with
// the container and its answer, and counts it: no retry changes the
// answer, so a person has to look (docs/operations.md, "Cosmos DB refuses
// writes"). A poll reports each operation once, and scan sends each
// pending operation once an interval: one line per operation and
// interval.
func (it *item) reportRefusal(refused *database.RefusedError) {
	telemetry.CosmosRefused(context.Background(), refused.Container, refused.StatusCode)
	attrs := []any{"container", refused.Container, "status_code", refused.StatusCode,
		"answer", refused.Code + ": " + refused.Message, "outcome", it.outcome}
	if it.outcome == OutcomeDeferred {
		it.log.Error("Cosmos DB refused a write for good; the operation is left unchanged and the next scan tries again, "+
			"until the operation's deadline ends it", append(attrs, "error", it.err)...)
		return
	}
	it.log.Error("Cosmos DB refused a write for good; the operation, past its deadline, was written without it", attrs...)
}

// ownerSuffix names an invocation in lock owners: its id when that is a
// plain GUID-like string, else a short hash of it, so that whatever the
// header holds, the lock item and request headers stay small and printable.
func ownerSuffix(invocationID string) string {
	plain := len(invocationID) <= 64 && !strings.ContainsFunc(invocationID, func(r rune) bool {
		return !(r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	})
	if plain {
		return invocationID
	}
	sum := sha256.Sum256([]byte(invocationID))
	return "h" + hex.EncodeToString(sum[:8])
}

// Transient reports whether err may pass by itself: throttling, timeouts,
// 5xx, a lock held or lost.
func Transient(err error) bool {
	return errors.Is(err, database.ErrUnavailable) ||
		errors.Is(err, lock.ErrHeld) || errors.Is(err, lock.ErrLost) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, budget.ErrNoLease) || errors.Is(err, budget.ErrNotHeld) ||
		clusterservice.IsTransient(err)
}

// gate is a counting semaphore of the process's.
type gate chan struct{}

// take waits for a free place and returns its release; what names the
// wait in the error of a ctx that ends first.
func (g gate) take(ctx context.Context, what string) (release func(), err error) {
	select {
	case g <- struct{}{}:
		return func() { <-g }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting %s: %w", what, context.Cause(ctx))
	}
}

// maxHolds bounds the subscription locks a process holds at once: more holds
// than that only queue their writes behind each other's on the process's
// Cosmos connections, and every hold, which the frontend may be waiting
// on, lasts longer.
const maxHolds = 8

// maxDeliveries bounds the notifications a process delivers at once, each
// a read of the operation and a POST to ARM, as its other outbound calls
// are bounded: as many as the ARM connections the notifier keeps
// (arm.NewNotifier), so that a burst of ended operations reuses them
// instead of dialing one each.
const maxDeliveries = 64

// New makes a Function of cfg, its Cluster Service client traced, with
// the process's gates:
//   - messageTurn (one): the message taking check places, so that
//     messages are checked one after another and finish in the order they
//     began, rather than all together at the end, which would keep every
//     message's operations in memory until then;
//   - checks (Permits, or MaxInFlight without one): operations being
//     checked, their read and their Cluster Service calls, one after
//     another: so the Cluster Service requests in flight, resized as the
//     budget ledger says. Taking one before the read keeps the operations
//     waiting for Cluster Service from holding their reads, and the
//     superseded check that follows the read from being made long before
//     the call;
//   - lockHolds (maxHolds): subscription locks held or being taken;
//   - deliveries (maxDeliveries): ARM notifications being delivered.
func New(cfg Config) *Function {
	checks := cfg.Permits
	if checks == nil {
		checks = budget.New(budget.Config{Ceiling: orDefault(cfg.MaxInFlight, defaultMaxInFlight)})
	}
	if _, traced := cfg.Cluster.(tracedCluster); !traced && cfg.Cluster != nil {
		cfg.Cluster = tracedCluster{permittedCluster{cfg.Cluster, checks}}
	}
	return &Function{
		Config:      cfg,
		messageTurn: make(gate, 1),
		checks:      checks,
		lockHolds:   make(gate, maxHolds),
		deliveries:  make(gate, maxDeliveries),
	}
}
