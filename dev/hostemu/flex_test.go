package hostemu

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"
	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/internal/testenv"
)

func TestNextInstanceCount(t *testing.T) {
	// QueueTargetScaler's target, reached by at most four more instances a
	// decision, within alwaysReady and maximumInstanceCount; scale-in goes
	// to the target at once.
	tests := []struct {
		name                             string
		cur, target, alwaysReady, maxima int
		want                             int
	}{
		{name: "from zero, four at a time", cur: 0, target: 10, maxima: 100, want: 4},
		{name: "four more", cur: 4, target: 10, maxima: 100, want: 8},
		{name: "the rest", cur: 8, target: 10, maxima: 100, want: 10},
		{name: "steady", cur: 10, target: 10, maxima: 100, want: 10},
		{name: "maximum", cur: 4, target: 10, maxima: 6, want: 6},
		{name: "above the maximum already", cur: 8, target: 10, maxima: 6, want: 6},
		{name: "scale in at once", cur: 10, target: 2, maxima: 100, want: 2},
		{name: "to zero", cur: 3, target: 0, maxima: 100, want: 0},
		{name: "always ready", cur: 3, target: 0, alwaysReady: 1, maxima: 100, want: 1},
		{name: "always ready from zero", cur: 0, target: 0, alwaysReady: 2, maxima: 100, want: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, nextInstanceCount(tt.cur, tt.target, tt.alwaysReady, tt.maxima))
		})
	}
}

func TestScalePlan(t *testing.T) {
	// The target is ceil(length / (batchSize + newBatchThreshold)); scale-in
	// waits until the target has stayed below the count for ScaleInDelay.
	h := &Host{config: HostConfig{Queues: QueuesConfig{BatchSize: 8, NewBatchThreshold: 4}}}
	h.opts.Flex = &FlexOptions{MaximumInstanceCount: 100, ScaleInDelay: time.Minute}
	s := &scaler{h: h, g: &group{fn: &Function{Name: "poll"}}}
	t0 := time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)
	steps := []struct {
		at            time.Duration
		length, cur   int
		target, after int
		why           string
	}{
		{at: 0, length: 100, cur: 0, target: 9, after: 4, why: "ceil(100/12) = 9, four at a time"},
		{at: 30 * time.Second, length: 100, cur: 4, target: 9, after: 8, why: "four more"},
		{at: 60 * time.Second, length: 12, cur: 8, target: 1, after: 8, why: "the target falls below: wait"},
		{at: 90 * time.Second, length: 0, cur: 8, target: 0, after: 8, why: "30 s below"},
		{at: 120 * time.Second, length: 0, cur: 8, target: 0, after: 0, why: "a minute below: scale in to the target"},
		{at: 150 * time.Second, length: 13, cur: 0, target: 2, after: 2, why: "up again"},
		{at: 180 * time.Second, length: 1, cur: 2, target: 1, after: 2, why: "below again: the wait starts over"},
		{at: 210 * time.Second, length: 30, cur: 2, target: 3, after: 3, why: "above: the wait is forgotten"},
		{at: 240 * time.Second, length: 1, cur: 3, target: 1, after: 3, why: "below from here"},
		{at: 299 * time.Second, length: 1, cur: 3, target: 1, after: 3, why: "59 s below"},
		{at: 300 * time.Second, length: 1, cur: 3, target: 1, after: 1, why: "a minute below"},
	}
	for _, st := range steps {
		d := s.plan(st.length, st.cur, t0.Add(st.at))
		require.Equal(t, ScaleDecision{Function: "poll", At: t0.Add(st.at), QueueLength: st.length, Target: st.target, Before: st.cur, After: st.after}, d, st.why)
	}

	// A negative ScaleInDelay scales in at the first decision below.
	h.opts.Flex.ScaleInDelay = -1
	s = &scaler{h: h, g: s.g}
	require.Equal(t, 0, s.plan(0, 5, t0).After)
}

func TestTimerLease(t *testing.T) {
	// BlobLeaseDistributedLockManager through SingletonManager: one holder;
	// another instance takes the lease only once it has run out unrenewed;
	// a release frees it at once.
	const period = time.Minute
	t0 := time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)
	var l timerLease
	require.True(t, l.tryAcquire(1, t0, period))
	require.False(t, l.tryAcquire(2, t0.Add(10*time.Second), period), "held")
	require.True(t, l.renew(1, t0.Add(30*time.Second), period))
	require.False(t, l.renew(2, t0.Add(30*time.Second), period), "only the holder renews")
	require.False(t, l.tryAcquire(2, t0.Add(89*time.Second), period), "renewed at 30 s: held until 90 s")
	require.True(t, l.tryAcquire(2, t0.Add(90*time.Second), period), "expired")
	require.False(t, l.renew(1, t0.Add(91*time.Second), period), "the old holder has lost it")
	l.release(1)
	require.False(t, l.tryAcquire(3, t0.Add(92*time.Second), period), "a release by a former holder frees nothing")
	l.release(2)
	require.True(t, l.tryAcquire(3, t0.Add(93*time.Second), period), "released: free at once")
	require.Equal(t, []leaseGrant{
		{instance: 1, at: t0},
		{instance: 2, at: t0.Add(90 * time.Second), previous: t0.Add(90 * time.Second)},
		{instance: 3, at: t0.Add(93 * time.Second)},
	}, l.grants)
	require.Equal(t, 3, l.refusals)
}

func TestFlexFunctionGroups(t *testing.T) {
	// With function groups scan and poll run in instances of their own,
	// each with its own handler process: scan's writes wake no listener
	// (SharedQueueWatcher is per process), so poll finds its messages by
	// polling. Stopping sends no SIGTERM: the host waits for the work in
	// flight, then kills the handlers.
	az := testenv.SharedAzurite(t)
	const queue = "flex-groups"
	app := newApp(t, e2eHostJSON, map[string]string{"scan": e2eScanJSON, "poll": e2ePollJSON})
	r := runHost(t, app, map[string]string{
		"AzureWebJobsStorage": az.ConnectionString,
		"SCAN_SCHEDULE":       "*/1 * * * * *",
		"QUEUE_NAME":          queue,
	}, Options{Flex: &FlexOptions{AlwaysReady: map[string]int{"poll": 1}, ScaleInterval: time.Hour}})
	require.Eventually(t, func() bool {
		c := r.h.Counters()
		return c.MessagesPoisoned == 1 && c.MessagesDeleted == 2 && c.Calls("scan") >= 2
	}, time.Minute, 100*time.Millisecond)

	scans, polls := r.h.groupInstances("scan"), r.h.groupInstances("poll")
	require.Len(t, scans, 1)
	require.Len(t, polls, 1)
	require.Equal(t, "scan", scans[0].Group())
	require.Equal(t, "poll", polls[0].Group())
	scanPID, pollPID := scans[0].PID(), polls[0].PID()
	require.NotZero(t, scanPID)
	require.NotZero(t, pollPID)
	require.NotEqual(t, scanPID, pollPID)
	for _, inv := range r.rec.of("scan") {
		e := echoOf(t, inv)
		require.Equal(t, scans[0].Index(), inv.Instance)
		require.Equal(t, scanPID, e.PID)
		require.Equal(t, "function:scan", e.TargetGroup)
	}
	for _, inv := range r.rec.of("poll") {
		e := echoOf(t, inv)
		require.Equal(t, polls[0].Index(), inv.Instance)
		require.Equal(t, pollPID, e.PID)
		require.Equal(t, "function:poll", e.TargetGroup)
	}
	require.Zero(t, r.h.Counters().Wakeups, "no write wakes another process's listener")

	require.NoError(t, r.stop())
	require.NotContains(t, r.out.String(), "fakehandler: SIGTERM", "the host never sends SIGTERM")
	require.Equal(t, 2, strings.Count(r.out.String(), `exit="signal: killed"`), "both handlers are killed")
	for _, pid := range []int{scanPID, pollPID} {
		require.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH)
	}
	c := r.h.Counters()
	require.EqualValues(t, 2, c.InstancesStarted)
	require.EqualValues(t, 2, c.InstancesStopped)
}

// gateApp is an app whose poll function, on QUEUE_NAME, blocks every
// message whose operationId is "gate" until the file POLL_GATE exists. One
// message per instance: batchSize 1, newBatchThreshold 0.
func gateApp(t *testing.T) (app, gate string) {
	app = newApp(t, `{"version":"2.0","functionTimeout":"00:05:00",
		"extensions":{"queues":{"batchSize":1,"newBatchThreshold":0,"maxPollingInterval":"00:00:00.5"}},
		"customHandler":{"description":{"defaultExecutablePath":"fakehandler"}}}`,
		map[string]string{"poll": e2ePollJSON})
	return app, filepath.Join(t.TempDir(), "gate")
}

func TestFlexScaling(t *testing.T) {
	// The scale controller follows the queue: ceil(length / (batchSize +
	// newBatchThreshold)) instances, at most four more a decision, at most
	// MaximumInstanceCount. The length counts the messages being processed
	// too, but is 0 when none is visible, so instances busy with the last
	// messages are scaled in; each one stops the host's way: no new
	// messages, its invocation in flight finishes, then SIGKILL.
	az := testenv.SharedAzurite(t)
	const queue = "flex-scaling"
	app, gate := gateApp(t)
	q, err := azqueue.NewQueueClientFromConnectionString(az.ConnectionString, queue, nil)
	require.NoError(t, err)
	_, _ = q.Create(t.Context(), nil)
	_, err = q.ClearMessages(t.Context(), nil)
	require.NoError(t, err)
	for range 12 {
		_, err := q.EnqueueMessage(t.Context(), base64.StdEncoding.EncodeToString([]byte(`{"subscriptionId":"sub","operationId":"gate"}`)), nil)
		require.NoError(t, err)
	}

	var mu sync.Mutex
	gated := 0
	onLog := func(l LogLine) {
		if l.Text == "fakehandler: poll gate" {
			mu.Lock()
			gated++
			mu.Unlock()
		}
	}
	waitGated := func(n int) {
		t.Helper()
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return gated == n
		}, time.Minute, 20*time.Millisecond)
	}
	r := runHost(t, app, map[string]string{"AzureWebJobsStorage": az.ConnectionString, "QUEUE_NAME": queue, "POLL_GATE": gate},
		Options{OnLog: onLog, Flex: &FlexOptions{MaximumInstanceCount: 5, ScaleInterval: time.Hour, ScaleInDelay: -1}})
	// Runs before runHost's cleanup: stopping waits for the gated
	// invocations.
	t.Cleanup(func() { _ = os.WriteFile(gate, nil, 0o644) })
	var s *scaler
	require.Eventually(t, func() bool { s = r.h.scalerOf("poll"); return s != nil }, time.Minute, 20*time.Millisecond)
	ctx := t.Context()

	d := s.decide(ctx, time.Now())
	require.Equal(t, []int{12, 12, 0, 4}, []int{d.QueueLength, d.Target, d.Before, d.After}, "four at a time")
	waitGated(4)
	d = s.decide(ctx, time.Now())
	require.Equal(t, []int{12, 12, 4, 5}, []int{d.QueueLength, d.Target, d.Before, d.After}, "up to the maximum")
	waitGated(5)
	instances := r.h.groupInstances("poll")
	require.Len(t, instances, 5)
	var pids []int
	for _, in := range instances {
		require.NotZero(t, in.PID())
		pids = append(pids, in.PID())
	}

	// Take the visible messages away: only the five being processed are
	// left, and a peek finds none.
	for {
		resp, err := q.DequeueMessages(ctx, &azqueue.DequeueMessagesOptions{NumberOfMessages: ptr(int32(32)), VisibilityTimeout: ptr(int32(600))})
		require.NoError(t, err)
		if len(resp.Messages) == 0 {
			break
		}
		for _, m := range resp.Messages {
			_, err := q.DeleteMessage(ctx, *m.MessageID, *m.PopReceipt, nil)
			require.NoError(t, err)
		}
	}
	d = s.decide(ctx, time.Now())
	require.Equal(t, []int{0, 0, 5, 0}, []int{d.QueueLength, d.Target, d.Before, d.After}, "in-flight messages are invisible")
	require.Empty(t, r.h.groupInstances("poll"))
	for _, pid := range pids {
		require.NoError(t, syscall.Kill(pid, 0), "a stopping instance keeps its handler while its invocation runs")
	}
	require.Empty(t, r.rec.of("poll"), "no invocation has ended")

	require.NoError(t, os.WriteFile(gate, nil, 0o644))
	require.Eventually(t, func() bool { return r.h.Counters().InstancesStopped == 5 }, time.Minute, 20*time.Millisecond)
	for _, pid := range pids {
		require.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH)
	}
	polls := r.rec.of("poll")
	require.Len(t, polls, 5)
	for _, inv := range polls {
		require.NoError(t, inv.Err, "the invocation finished before its handler was killed")
	}
	c := r.h.Counters()
	require.EqualValues(t, 5, c.MessagesDeleted)
	require.EqualValues(t, 5, c.InstancesStarted)
	require.NotContains(t, r.out.String(), "fakehandler: SIGTERM")
	require.Equal(t, 5, strings.Count(r.out.String(), `exit="signal: killed"`))
	require.NoError(t, r.stop())
}

func TestFlexTimerFailover(t *testing.T) {
	// The timer runs on the instance that holds its lease. When that
	// instance crashes the platform starts another, which takes the timer
	// only once the lease has run out and its retry comes round: scans
	// stop in between.
	r := runHost(t, timerApp(t, ""), map[string]string{"SCAN_SCHEDULE": "*/1 * * * * *"},
		Options{Flex: &FlexOptions{TimerLease: 3 * time.Second, TimerLeaseRetry: time.Second}})
	require.Eventually(t, func() bool { return len(r.rec.of("scan")) >= 2 }, time.Minute, 20*time.Millisecond)
	first := r.h.groupInstances("scan")
	require.Len(t, first, 1)
	a := first[0]
	lease := r.h.leaseOf("scan")

	crashedAt := time.Now()
	require.NoError(t, a.Crash())
	var b *Instance
	require.Eventually(t, func() bool {
		for _, inv := range r.rec.of("scan") {
			if inv.Instance != a.Index() {
				return true
			}
		}
		return false
	}, time.Minute, 20*time.Millisecond, "another instance runs the timer")
	for _, in := range r.h.groupInstances("scan") {
		b = in
	}
	require.NotNil(t, b)
	require.NotEqual(t, a.Index(), b.Index())

	lease.mu.Lock()
	grants, refusals := append([]leaseGrant(nil), lease.grants...), lease.refusals
	lease.mu.Unlock()
	require.Len(t, grants, 2)
	require.Equal(t, a.Index(), grants[0].instance)
	took := grants[1]
	require.Equal(t, b.Index(), took.instance)
	require.False(t, took.previous.IsZero(), "the crashed instance never released its lease")
	require.False(t, took.at.Before(took.previous), "taken only once it had run out")
	require.True(t, took.previous.After(crashedAt), "the lease outlived the crash")
	require.Positive(t, refusals, "the new instance's first attempt came while the lease was held")
	for _, inv := range r.rec.of("scan") {
		switch inv.Instance {
		case a.Index():
			require.True(t, inv.Start.Before(crashedAt), "no scan on the crashed instance after the crash")
		case b.Index():
			require.False(t, inv.Start.Before(took.at), "no scan before the lease was taken")
		}
	}

	require.NoError(t, r.stop())
	lease.mu.Lock()
	defer lease.mu.Unlock()
	require.False(t, lease.held, "a stopping listener releases its lease")
}
