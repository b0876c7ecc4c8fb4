package chaos

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/hostemu"
	"github.com/opstatus/opstatus/internal/queuemsg"
	"github.com/opstatus/opstatus/internal/testenv"
)

// The Flex Consumption plan of TestChaos: the deployment's instance limit
// and scale to zero (deploy/azuredeploy.json sets maximumInstanceCount 4
// and no alwaysReady), with the platform's periods shrunk so that within
// one run poll instances come and go several times and the scan
// instance's lease runs out. The budget is small enough that it binds,
// and one instance more than the maximum may run (FlexOptions.Overshoot).
const (
	flexMaxInstances     = 4
	flexOvershoot        = 1
	flexScaleInterval    = 2 * time.Second
	flexScaleInDelay     = 2 * time.Second
	flexTimerLease       = 6 * time.Second
	flexTimerLeaseRetry  = 2 * time.Second
	clusterServiceBudget = 32
)

// failoverBound is the longest scans may stop after the scan instance
// dies: its lease runs out at most a lease after the crash, the new
// instance's next try comes within a retry, and the timer's next
// occurrence within an interval.
const failoverBound = flexTimerLease + flexTimerLeaseRetry + scanInterval

// failoverSlack covers the goroutine wake-ups between the lease's expiry
// and the scan's start on a loaded machine.
const failoverSlack = time.Second

// flexRun is the Flex Consumption side of a chaos run: the plan, the
// actors that grow the queue and crash the scan instance, and what the
// scale controller and Cluster Service saw.
type flexRun struct {
	plan    hostemu.FlexOptions
	budget  int
	scale   scaleLog
	cs      inFlight
	polls   instanceSampler
	backlog *backlog
	crasher *scanCrasher
}

func newFlexRun() *flexRun {
	return &flexRun{
		plan: hostemu.FlexOptions{MaximumInstanceCount: flexMaxInstances, Overshoot: flexOvershoot, ScaleInterval: flexScaleInterval,
			ScaleInDelay: flexScaleInDelay, TimerLease: flexTimerLease, TimerLeaseRetry: flexTimerLeaseRetry},
		budget: clusterServiceBudget,
	}
}

// options returns o with the host run as Flex Consumption runs it (one
// scan instance, poll instances following the queue), the handler given
// the budget as the deployment gives it (its ledger shares it out),
// and the simulator's requests in flight counted.
func (f *flexRun) options(o envOptions) envOptions {
	plan := f.plan
	o.flex, o.onScale, o.instances = &plan, f.scale.record, 1
	o.settings = map[string]string{"CLUSTER_SERVICE_BUDGET": strconv.Itoa(f.budget)}
	o.simHandler = f.cs.wrap
	return o
}

// run starts the actors, which stop when ctx ends. The bursts name the
// operations of ops written from the start (not the follow-ups).
func (f *flexRun) run(ctx context.Context, actors *sync.WaitGroup, e *env, ops []op, seed int64) {
	var named []op
	for _, o := range ops {
		if o.After == "" {
			named = append(named, o)
		}
	}
	f.backlog = &backlog{e: e, ops: named, messages: 48, perMessage: 4,
		minPause: 12 * time.Second, maxPause: 20 * time.Second, rng: rand.New(rand.NewPCG(uint64(seed), 6))}
	f.crasher = &scanCrasher{e: e, minPause: 12 * time.Second, maxPause: 25 * time.Second,
		rng: rand.New(rand.NewPCG(uint64(seed), 7))}
	f.polls.host = e.s.Host
	actors.Go(func() { f.backlog.run(ctx) })
	actors.Go(func() { f.crasher.run(ctx) })
	actors.Go(func() { f.polls.run(ctx) })
}

// scaleLog records the scale controller's decisions.
type scaleLog struct {
	mu   sync.Mutex
	list []hostemu.ScaleDecision
}

func (l *scaleLog) record(d hostemu.ScaleDecision) {
	l.mu.Lock()
	l.list = append(l.list, d)
	l.mu.Unlock()
}

func (l *scaleLog) all() []hostemu.ScaleDecision {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.list)
}

// scaleSummary counts what the scale decisions did.
type scaleSummary struct {
	decisions int
	// outs and ins count the decisions that added and removed instances;
	// removed is the instances the ins stopped; most the most instances a
	// decision asked for.
	outs, ins, removed, most int
	// changes lists every change as before→after, with the time since
	// start and the queue length it went by.
	changes []string
}

func summarizeScale(ds []hostemu.ScaleDecision, start time.Time) scaleSummary {
	var s scaleSummary
	for _, d := range ds {
		s.decisions++
		s.most = max(s.most, d.After)
		switch {
		case d.After > d.Before:
			s.outs++
		case d.After < d.Before:
			s.ins++
			s.removed += d.Before - d.After
		default:
			continue
		}
		s.changes = append(s.changes, fmt.Sprintf("%d→%d@%s(q%d)", d.Before, d.After, d.At.Sub(start).Round(time.Second), d.QueueLength))
	}
	return s
}

// inFlight counts the Cluster Service requests the simulator is serving
// and keeps the most it served at once: what CLUSTER_SERVICE_BUDGET
// bounds across every handler process.
type inFlight struct {
	mu     sync.Mutex
	now    int
	most   int
	mostAt time.Time
}

// wrap counts next's Cluster Service requests (the admin API aside).
func (g *inFlight) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/api/") {
			next.ServeHTTP(w, r)
			return
		}
		g.add(1)
		defer g.add(-1)
		next.ServeHTTP(w, r)
	})
}

func (g *inFlight) add(n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.now += n
	if g.now > g.most {
		g.most, g.mostAt = g.now, time.Now()
	}
}

// peak returns the most requests served at once, and when.
func (g *inFlight) peak() (int, time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.most, g.mostAt
}

// instanceSampler counts the poll instances alive, those draining before
// their kill included, which the scale decisions do not count.
type instanceSampler struct {
	host *hostemu.Host
	most atomic.Int64
}

func (s *instanceSampler) run(ctx context.Context) {
	for testenv.Sleep(ctx, 200*time.Millisecond) {
		n := int64(0)
		for _, in := range s.host.Instances() {
			if in.Group() == "poll" {
				n++
			}
		}
		if n > s.most.Load() {
			s.most.Store(n)
		}
	}
}

// backlog grows the poll queue as a scan at scale does (a message per
// hundred pending operations): bursts of more batch messages than one
// instance takes at once (batchSize + newBatchThreshold), each naming
// a few of the run's operations and stamped as a scan stamps its own. The
// scale controller adds instances for a burst and removes them once it is
// drained; the operations named are polled as a scan's would be.
type backlog struct {
	e                    *env
	ops                  []op
	messages, perMessage int
	minPause, maxPause   time.Duration
	rng                  *rand.Rand

	bursts, sent, errors atomic.Int64
}

// run sends bursts until ctx ends.
func (b *backlog) run(ctx context.Context) {
	q := b.e.s.Queue.NewQueueClient(pollQueue)
	for testenv.Sleep(ctx, b.minPause+time.Duration(b.rng.Int64N(int64(b.maxPause-b.minPause)+1))) {
		for _, m := range b.burst(time.Now().UTC()) {
			body, err := json.Marshal(m)
			if err == nil {
				_, err = q.EnqueueMessage(ctx, base64.StdEncoding.EncodeToString(body), nil)
			}
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				b.errors.Add(1)
				continue
			}
			b.sent.Add(1)
		}
		b.bursts.Add(1)
	}
}

// burst draws one burst's messages.
func (b *backlog) burst(scannedAt time.Time) []queuemsg.Message {
	out := make([]queuemsg.Message, b.messages)
	for i := range out {
		out[i].ScannedAt = scannedAt
		for _, j := range b.rng.Perm(len(b.ops))[:min(b.perMessage, len(b.ops))] {
			o := b.ops[j]
			out[i].Operations = append(out[i].Operations, queuemsg.Operation{SubscriptionID: strings.ToLower(o.Sub), OperationID: o.ID})
		}
	}
	return out
}

// scanCrasher crashes the instance that runs the scan timer, as a machine
// failure would, then waits for scans to resume elsewhere before the
// next: the platform starts a new instance at once, but the dead one's
// lease on the timer holds until it runs out.
type scanCrasher struct {
	e                  *env
	minPause, maxPause time.Duration
	rng                *rand.Rand

	mu      sync.Mutex
	crashes []scanCrash
	resumed int
}

// scanCrash is one crash of the instance that held the timer.
type scanCrash struct {
	at       time.Time
	instance int
}

// run crashes until ctx ends.
func (c *scanCrasher) run(ctx context.Context) {
	for testenv.Sleep(ctx, c.minPause+time.Duration(c.rng.Int64N(int64(c.maxPause-c.minPause)+1))) {
		in := c.timerInstance()
		if in == nil || in.Crash() != nil {
			continue
		}
		crash := scanCrash{at: time.Now(), instance: in.Index()}
		c.mu.Lock()
		c.crashes = append(c.crashes, crash)
		c.mu.Unlock()
		resumed := testenv.WaitFor(ctx, 2*failoverBound, 100*time.Millisecond, func() bool {
			scans := scansByStart(c.e.inv.all())
			return len(scans) > 0 && scans[len(scans)-1].Start.After(crash.at)
		})
		if resumed {
			c.mu.Lock()
			c.resumed++
			c.mu.Unlock()
		}
	}
}

// timerInstance returns the running instance that ran the latest scan,
// the one that holds the timer's lease; nil when it is gone.
func (c *scanCrasher) timerInstance() *hostemu.Instance {
	scans := scansByStart(c.e.inv.all())
	if len(scans) == 0 {
		return nil
	}
	last := scans[len(scans)-1]
	for _, in := range c.e.s.Host.Instances() {
		if in.Index() == last.Instance && in.Group() == "scan" {
			return in
		}
	}
	return nil
}

// all returns the crashes so far.
func (c *scanCrasher) all() []scanCrash {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.crashes)
}

// failedOver reports whether scans resumed after a crash.
func (c *scanCrasher) failedOver() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.resumed > 0
}

// scansByStart returns the scan invocations, whatever their outcome, in
// the order they began.
func scansByStart(invs []invocation) []invocation {
	var out []invocation
	for _, inv := range invs {
		if inv.Function == "scan" {
			out = append(out, inv)
		}
	}
	slices.SortFunc(out, func(a, b invocation) int { return a.Start.Compare(b.Start) })
	return out
}

// failover is what followed one crash of the scan instance: the last scan
// that began before it and the first that began after it, zero when none
// did.
type failover struct {
	crash      scanCrash
	last, next invocation
}

// stopped is how long after the crash the next scan began.
func (f failover) stopped() time.Duration { return f.next.Start.Sub(f.crash.at) }

// gap is the time between the scans either side of the crash.
func (f failover) gap() time.Duration { return f.next.Start.Sub(f.last.Start) }

func failovers(crashes []scanCrash, invs []invocation) []failover {
	scans := scansByStart(invs)
	out := make([]failover, 0, len(crashes))
	for _, c := range crashes {
		f := failover{crash: c}
		for _, s := range scans {
			if s.Start.Before(c.at) {
				f.last = s
			} else if f.next.Function == "" {
				f.next = s
			}
		}
		out = append(out, f)
	}
	return out
}

// failoverProblems lists the crashes after which no scan began on another
// instance within bound.
func failoverProblems(fs []failover, bound time.Duration) []string {
	var bad []string
	for _, f := range fs {
		at := f.crash.at.Format(time.StampMilli)
		switch {
		case f.next.Function == "":
			bad = append(bad, fmt.Sprintf("crash of instance %d at %s: no scan after it", f.crash.instance, at))
		case f.next.Instance == f.crash.instance:
			bad = append(bad, fmt.Sprintf("crash of instance %d at %s: the next scan ran on the crashed instance", f.crash.instance, at))
		case f.stopped() > bound:
			bad = append(bad, fmt.Sprintf("crash of instance %d at %s: scans stopped for %s, over %s", f.crash.instance, at,
				f.stopped().Round(time.Millisecond), bound))
		}
	}
	return bad
}

// overlappingScans lists the scans that began while another ran: the
// timer is a singleton, whichever instance holds its lease.
func overlappingScans(invs []invocation) []string {
	var bad []string
	scans := scansByStart(invs)
	for i := 1; i < len(scans); i++ {
		prev, cur := scans[i-1], scans[i]
		if cur.Start.Before(prev.At) {
			bad = append(bad, fmt.Sprintf("scan on instance %d began at %s, while the one on instance %d (%s to %s) ran",
				cur.Instance, cur.Start.Format(time.StampMilli), prev.Instance, prev.Start.Format(time.StampMilli), prev.At.Format(time.StampMilli)))
		}
	}
	return bad
}

// scaleInStops returns when the scale controller told each instance it
// removed to stop, from the host's log.
func scaleInStops(log string) map[int]time.Time {
	out := map[int]time.Time{}
	for _, line := range logLines(log, `"msg":"hostemu: stopping an instance"`) {
		var rec struct {
			Time     time.Time `json:"time"`
			Instance int       `json:"instance"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil {
			out[rec.Instance] = rec.Time
		}
	}
	return out
}

// drained counts the poll invocations in flight when their instance was
// told to stop: those that finished, and those that did not (a test kill
// or a function timeout while it drained).
func drained(invs []invocation, stops map[int]time.Time) (finished, cut int) {
	for _, inv := range invs {
		stop, ok := stops[inv.Instance]
		if inv.Function != "poll" || !ok || !inv.Start.Before(stop) || inv.At.Before(stop) {
			continue
		}
		if inv.Status/100 == 2 {
			finished++
		} else {
			cut++
		}
	}
	return finished, cut
}

// report prints the Flex figures of a run with out: log is the handler's
// and the host's log, start when the run began.
func (f *flexRun) report(out func(format string, args ...any), invs []invocation, log string, start time.Time) {
	s := summarizeScale(f.scale.all(), start)
	changes := s.changes
	if len(changes) > 30 {
		changes = append(slices.Clone(changes[:30]), "…")
	}
	c := f.polls.host.Counters()
	out("scale: %d decisions: %d added instances, %d removed %d (drain, then SIGKILL); at most %d poll instances asked for, %d alive at once (draining ones included); %d instances started, %d ended; changes: %s",
		s.decisions, s.outs, s.ins, s.removed, s.most, f.polls.most.Load(), c.InstancesStarted, c.InstancesStopped, strings.Join(changes, " "))
	done, cut := drained(invs, scaleInStops(log))
	out("scale-in: %d poll invocations in flight when their instance was told to stop finished before the kill, %d did not (a test kill or a function timeout meanwhile)",
		done, cut)
	out("backlog: %d bursts of %d messages of %d operations (%d sent, %d errors)",
		f.backlog.bursts.Load(), f.backlog.messages, f.backlog.perMessage, f.backlog.sent.Load(), f.backlog.errors.Load())
	scans := scansByStart(invs)
	var longest time.Duration
	for i := 1; i < len(scans); i++ {
		longest = max(longest, scans[i].Start.Sub(scans[i-1].Start))
	}
	var fo []string
	for _, x := range failovers(f.crasher.all(), invs) {
		if x.next.Function == "" {
			fo = append(fo, fmt.Sprintf("instance %d at %s: no scan after", x.crash.instance, x.crash.at.Sub(start).Round(time.Second)))
			continue
		}
		fo = append(fo, fmt.Sprintf("instance %d at %s: scans stopped %s (gap between scans %s), resumed on instance %d",
			x.crash.instance, x.crash.at.Sub(start).Round(time.Second), x.stopped().Round(100*time.Millisecond),
			x.gap().Round(100*time.Millisecond), x.next.Instance))
	}
	out("scan: %d scans; longest gap between two %s; %d crashes of the scan instance (bound lease %s + retry %s + interval %s = %s): %s",
		len(scans), longest.Round(100*time.Millisecond), len(f.crasher.all()), flexTimerLease, flexTimerLeaseRetry, scanInterval,
		failoverBound, strings.Join(fo, "; "))
	most, at := f.cs.peak()
	out("Cluster Service in flight: at most %d at %s (CLUSTER_SERVICE_BUDGET %d; maximumInstanceCount %d, overshoot %d)",
		most, at.Sub(start).Round(time.Second), f.budget, f.plan.MaximumInstanceCount, f.plan.Overshoot)
}

// TestFailoverChecks shows that the checks of the timer's failover find
// each way it can go wrong, and accept one that went right.
func TestFailoverChecks(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	scan := func(instance int, from, to time.Duration) invocation {
		return invocation{Function: "scan", Instance: instance, Start: t0.Add(from), At: t0.Add(to)}
	}
	poll := invocation{Function: "poll", Instance: 9, Start: t0.Add(11 * time.Second), At: t0.Add(40 * time.Second)}
	crash := scanCrash{at: t0.Add(11 * time.Second), instance: 1}
	bound := 18 * time.Second
	for _, tc := range []struct {
		name     string
		scans    []invocation
		want     string
		overlaps string
	}{
		{"resumed within the bound", []invocation{scan(1, 0, time.Second), scan(1, 10*time.Second, 11*time.Second),
			scan(2, 29*time.Second, 30*time.Second)}, "", ""},
		{"no scan after", []invocation{scan(1, 10*time.Second, 11*time.Second)}, "no scan after it", ""},
		{"resumed too late", []invocation{scan(1, 10*time.Second, 11*time.Second), scan(2, 30*time.Second, 31*time.Second)},
			"scans stopped for 19s, over 18s", ""},
		{"the crashed instance ran on", []invocation{scan(1, 10*time.Second, 11*time.Second), scan(1, 20*time.Second, 21*time.Second)},
			"ran on the crashed instance", ""},
		{"two at once", []invocation{scan(1, 10*time.Second, 16*time.Second), scan(2, 15*time.Second, 16*time.Second)},
			"", "began at"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			invs := append(slices.Clone(tc.scans), poll)
			got := strings.Join(failoverProblems(failovers([]scanCrash{crash}, invs), bound), "\n")
			if tc.want == "" {
				require.Empty(t, got)
			} else {
				require.Contains(t, got, tc.want)
			}
			overlaps := strings.Join(overlappingScans(invs), "\n")
			if tc.overlaps == "" {
				require.Empty(t, overlaps)
			} else {
				require.Contains(t, overlaps, tc.overlaps)
			}
		})
	}
}
