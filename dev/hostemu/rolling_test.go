package hostemu

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"
	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/internal/testenv"
)

func TestScaleOvershoot(t *testing.T) {
	// With Overshoot the platform runs more instances than
	// maximumInstanceCount when the target asks for them (#11790), four
	// more a decision as ever; without it the maximum holds.
	h := &Host{config: HostConfig{Queues: QueuesConfig{BatchSize: 8, NewBatchThreshold: 4}}}
	s := &scaler{h: h, g: &group{fn: &Function{Name: "poll"}}}
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		overshoot, length, cur, want int
	}{
		{overshoot: 0, length: 120, cur: 4, want: 4},
		{overshoot: 2, length: 120, cur: 4, want: 6},
		{overshoot: 20, length: 120, cur: 4, want: 8},
		{overshoot: 20, length: 120, cur: 8, want: 10},
		{overshoot: 2, length: 24, cur: 0, want: 2},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("overshoot %d, %d queued, %d running", tt.overshoot, tt.length, tt.cur), func(t *testing.T) {
			h.opts.Flex = &FlexOptions{MaximumInstanceCount: 4, Overshoot: tt.overshoot, ScaleInDelay: -1}
			require.Equal(t, tt.want, s.plan(tt.length, tt.cur, t0).After)
		})
	}
}

// environOf returns the environment of process pid.
func environOf(t *testing.T, pid int) []string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	var out []string
	for _, kv := range bytes.Split(data, []byte{0}) {
		out = append(out, string(kv))
	}
	return out
}

func TestFlexRollingUpdate(t *testing.T) {
	// A rolling site update: each old instance is replaced by a new one
	// whose handler has the new settings; the old one keeps running beside
	// it until its invocation in flight has finished, then its handler is
	// killed (no SIGTERM), and the group has as many instances as before.
	az := testenv.SharedAzurite(t)
	const queue = "flex-rolling"
	app, gate := gateApp(t)
	q, err := azqueue.NewQueueClientFromConnectionString(az.ConnectionString, queue, nil)
	require.NoError(t, err)
	_, _ = q.Create(t.Context(), nil)
	_, err = q.ClearMessages(t.Context(), nil)
	require.NoError(t, err)
	for range 2 {
		_, err := q.EnqueueMessage(t.Context(), base64.StdEncoding.EncodeToString([]byte(`{"subscriptionId":"sub","operationId":"gate"}`)), nil)
		require.NoError(t, err)
	}
	r := runHost(t, app, map[string]string{"AzureWebJobsStorage": az.ConnectionString, "QUEUE_NAME": queue, "POLL_GATE": gate, "DEPLOYMENT": "1"},
		Options{Flex: &FlexOptions{AlwaysReady: map[string]int{"poll": 2}, ScaleInterval: time.Hour}})
	t.Cleanup(func() { _ = os.WriteFile(gate, nil, 0o644) })
	require.Eventually(t, func() bool { return strings.Count(r.out.String(), "fakehandler: poll gate") == 2 }, time.Minute, 20*time.Millisecond,
		"each old instance holds a gated invocation")
	old := r.h.groupInstances("poll")
	require.Len(t, old, 2)
	oldPIDs := []int{old[0].PID(), old[1].PID()}
	require.Contains(t, environOf(t, oldPIDs[0]), "DEPLOYMENT=1")

	done := make(chan error, 1)
	go func() {
		done <- r.h.RollingUpdate(t.Context(), RollingUpdate{Settings: map[string]string{"DEPLOYMENT": "2"}})
	}()
	var fresh *Instance
	require.Eventually(t, func() bool {
		for _, in := range r.h.groupInstances("poll") {
			if in != old[0] && in != old[1] && in.PID() != 0 {
				fresh = in
				return true
			}
		}
		return false
	}, time.Minute, 20*time.Millisecond, "a new instance starts")
	require.Contains(t, environOf(t, fresh.PID()), "DEPLOYMENT=2")
	for _, pid := range oldPIDs {
		require.NoError(t, syscall.Kill(pid, 0), "old and new handlers run together while the old one's invocation runs")
	}
	require.Len(t, r.h.groupInstances("poll"), 2, "the draining instance no longer counts as the group's")

	require.NoError(t, os.WriteFile(gate, nil, 0o644))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(2 * time.Minute):
		t.Fatal("the rolling update did not end")
	}
	for _, pid := range oldPIDs {
		require.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH, "the old handler was killed once drained")
	}
	now := r.h.groupInstances("poll")
	require.Len(t, now, 2)
	for _, in := range now {
		require.NotEqual(t, old[0], in)
		require.NotEqual(t, old[1], in)
		require.Contains(t, environOf(t, in.PID()), "DEPLOYMENT=2")
	}
	for _, inv := range r.rec.of("poll") {
		require.NoError(t, inv.Err, "the old instances' invocations finished")
	}
	require.NotContains(t, r.out.String(), "fakehandler: SIGTERM")
	require.EqualValues(t, 2, r.h.Counters().InstancesReplaced)
	require.NoError(t, r.stop())
}

// procState returns the state letter of process pid (R, S, T, ...).
func procState(t *testing.T, pid int) string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	// pid (comm) state ...
	s := string(data)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])[0]
}

func TestFreezeAndThaw(t *testing.T) {
	// Freeze stops the handler (SIGSTOP) without the host noticing; Thaw
	// resumes it, and it answers again.
	r := runHost(t, timerApp(t, ""), map[string]string{"SCAN_SCHEDULE": "*/1 * * * * *"}, Options{Flex: &FlexOptions{}})
	require.Eventually(t, func() bool { return len(r.rec.of("scan")) >= 1 }, time.Minute, 20*time.Millisecond)
	in := r.h.groupInstances("scan")[0]
	pid := in.PID()
	require.NoError(t, in.Freeze())
	require.Eventually(t, func() bool { return procState(t, pid) == "T" }, 10*time.Second, 10*time.Millisecond, "stopped")
	frozenAt := len(r.rec.of("scan"))
	require.NoError(t, in.Thaw())
	require.Eventually(t, func() bool { return procState(t, pid) != "T" }, 10*time.Second, 10*time.Millisecond, "resumed")
	require.Eventually(t, func() bool { return len(r.rec.of("scan")) > frozenAt+1 }, time.Minute, 20*time.Millisecond, "it answers again")
	require.Equal(t, pid, in.PID(), "the same process")
	require.NoError(t, r.stop())
}
