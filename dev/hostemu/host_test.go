package hostemu

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"
	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/internal/testenv"
)

// e2eHostJSON keeps retries fast: a failed message reappears after a
// second and goes to poison on its third failure.
const e2eHostJSON = `{
  "version": "2.0",
  "functionTimeout": "00:00:30",
  "extensions": {"queues": {
    "batchSize": 4, "newBatchThreshold": 2, "maxDequeueCount": 3,
    "visibilityTimeout": "00:00:01", "maxPollingInterval": "00:00:01",
    "messageEncoding": "base64"}},
  "customHandler": {"description": {"defaultExecutablePath": "fakehandler", "workingDirectory": "", "arguments": []}}
}`

const e2eScanJSON = `{"bindings": [
  {"name": "timer", "type": "timerTrigger", "direction": "in", "schedule": "%SCAN_SCHEDULE%", "useMonitor": true},
  {"name": "operations", "type": "queue", "direction": "out", "queueName": "%QUEUE_NAME%", "connection": "Storage"},
  {"name": "audit", "type": "queue", "direction": "out", "queueName": "%QUEUE_NAME%-audit"}
]}`

const e2ePollJSON = `{"bindings": [
  {"name": "operation", "type": "queueTrigger", "direction": "in", "queueName": "%QUEUE_NAME%", "connection": "AzureWebJobsStorage"}
]}`

// echo is the fake handler's ReturnValue.
type echo struct {
	Body         json.RawMessage `json:"body"`
	InvocationID string          `json:"invocationId"`
	Setting      string          `json:"setting"`
	PID          int             `json:"pid"`
	Overlap      bool            `json:"overlap"`
	TargetGroup  string          `json:"targetGroup"`
}

func echoOf(t *testing.T, inv Invocation) echo {
	t.Helper()
	var e echo
	require.NoError(t, json.Unmarshal(inv.ReturnValue, &e), "ReturnValue %s", inv.ReturnValue)
	return e
}

// request is the envelope the host POSTs.
type request struct {
	Data     map[string]json.RawMessage
	Metadata map[string]json.RawMessage
}

func unquote(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var s string
	require.NoError(t, json.Unmarshal(raw, &s), "%s is not a JSON string", raw)
	return s
}

func TestEndToEnd(t *testing.T) {
	for _, instances := range []int{1, 2} {
		t.Run(strconv.Itoa(instances)+" instances", func(t *testing.T) {
			testEndToEnd(t, instances)
		})
	}
}

func testEndToEnd(t *testing.T, instances int) {
	az := testenv.SharedAzurite(t)
	queue := "e2e-operations-" + strconv.Itoa(instances)
	app := newApp(t, e2eHostJSON, map[string]string{"scan": e2eScanJSON, "poll": e2ePollJSON})
	logs := &logRecorder{}
	r := runHost(t, app, map[string]string{
		"AzureWebJobsStorage": az.ConnectionString,
		"SCAN_SCHEDULE":       "*/1 * * * * *",
		"QUEUE_NAME":          queue,
		"FAKE_SETTING":        "hello",
	}, Options{Instances: instances, StopTimeout: 5 * time.Second, OnLog: logs.add})

	// The first scan writes ok-1, ok-2 and fail-1; poll fails fail-1 three
	// times.
	require.Eventually(t, func() bool {
		c := r.h.Counters()
		return c.MessagesPoisoned == 1 && c.MessagesDeleted == 2 && c.Calls("scan") >= 2
	}, time.Minute, 100*time.Millisecond)
	var pids []int
	for _, in := range r.h.Instances() {
		require.NotZero(t, in.PID())
		require.NotZero(t, in.Port())
		pids = append(pids, in.PID())
	}
	require.Len(t, pids, instances)

	require.NoError(t, r.stop())
	require.Equal(t, instances, strings.Count(r.out.String(), "fakehandler: SIGTERM"), "ctx end sends SIGTERM to every handler")
	for _, pid := range pids {
		require.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH, "the handler has exited")
	}
	require.Zero(t, r.h.Port())

	c := r.h.Counters()
	require.EqualValues(t, 6, c.MessagesEnqueued, "3 operations + 3 audit values, from the first scan only")
	require.EqualValues(t, 2, c.MessagesDeleted)
	require.EqualValues(t, 2, c.MessagesRetried)
	require.EqualValues(t, 1, c.MessagesPoisoned)
	require.EqualValues(t, 5, c.Calls("poll"))
	require.GreaterOrEqual(t, c.MessagesReceived, c.Calls("poll"), "every invocation's message was received")
	require.Positive(t, c.Receives)
	require.Positive(t, c.Wakeups, "scan's writes wake the poll listener of its own process")
	require.EqualValues(t, 3, c.Invocations[InvocationKey{Function: "poll", Status: 500}])
	require.EqualValues(t, 2, c.Invocations[InvocationKey{Function: "poll", Status: 200}])
	require.EqualValues(t, 3, c.Failures)
	require.GreaterOrEqual(t, c.TimerTicksRun, int64(2))
	require.Equal(t, c.Calls("scan"), c.Invocations[InvocationKey{Function: "scan", Status: 200}])
	require.Len(t, logs.find("fakehandler /poll"), 2, "only the Logs of a 2xx response are logged")

	t.Run("timer payload", func(t *testing.T) {
		scans := r.rec.of("scan")
		require.GreaterOrEqual(t, len(scans), 2)
		for i, inv := range scans[:2] {
			require.NoError(t, inv.Err)
			require.Equal(t, 0, inv.Instance, "the timer is a singleton")
			e := echoOf(t, inv)
			require.Equal(t, inv.ID, e.InvocationID)
			require.Equal(t, "hello", e.Setting, "settings reach the handler's environment")
			var req request
			require.NoError(t, json.Unmarshal(e.Body, &req))
			var timer struct {
				Schedule       struct{ AdjustForDST bool }
				ScheduleStatus json.RawMessage
				IsPastDue      *bool
			}
			require.NoError(t, json.Unmarshal(req.Data["timer"], &timer))
			require.True(t, timer.Schedule.AdjustForDST)
			require.NotNil(t, timer.IsPastDue)
			require.False(t, *timer.IsPastDue)
			require.Equal(t, "null", string(timer.ScheduleStatus),
				"a schedule of under a minute has no monitor, whatever function.json says (run %d)", i)
			var sys struct{ MethodName, UtcNow, RandGuid string }
			require.NoError(t, json.Unmarshal(req.Metadata["sys"], &sys))
			require.Equal(t, "scan", sys.MethodName)
			require.True(t, strings.HasSuffix(sys.UtcNow, "Z"), sys.UtcNow)
			require.Len(t, sys.RandGuid, 36)
		}
	})

	t.Run("queue payload", func(t *testing.T) {
		type attempt struct {
			status int
			count  int64
		}
		attempts := map[string][]attempt{}
		for _, inv := range r.rec.of("poll") {
			var req request
			require.NoError(t, json.Unmarshal(echoOf(t, inv).Body, &req))

			// The message text arrives as a JSON string holding a JSON
			// string, as the host serializes a string trigger value.
			inner := unquote(t, json.RawMessage(unquote(t, req.Data["operation"])))
			var msg struct{ SubscriptionID, OperationID string }
			require.NoError(t, json.Unmarshal([]byte(inner), &msg))
			require.Equal(t, "sub", msg.SubscriptionID)

			// Strings are quoted once more; DequeueCount is a string.
			count := unquote(t, req.Metadata["DequeueCount"])
			require.Equal(t, strconv.FormatInt(inv.DequeueCount, 10), count)
			for _, key := range []string{"Id", "PopReceipt"} {
				v := unquote(t, req.Metadata[key])
				require.True(t, len(v) > 2 && strings.HasPrefix(v, `"`) && strings.HasSuffix(v, `"`), "%s = %s", key, v)
			}
			times := map[string]time.Time{}
			for _, key := range []string{"InsertionTime", "ExpirationTime", "NextVisibleTime"} {
				var err error
				times[key], err = time.Parse(time.RFC3339, unquote(t, req.Metadata[key]))
				require.NoError(t, err, key)
			}
			// NextVisibleTime is the receive's, hidden for the listener's
			// visibility timeout: less that, Storage's time of the receive
			// (whole seconds), which the handler ages messages by.
			received := times["NextVisibleTime"].Add(-processingVisibility)
			require.False(t, received.Before(times["InsertionTime"].Add(-time.Second)), "received %v before its insertion", received)
			require.False(t, received.After(inv.Start), "received %v after the invocation began at %v", received, inv.Start)
			var sys struct{ MethodName string }
			require.NoError(t, json.Unmarshal(req.Metadata["sys"], &sys))
			require.Equal(t, "poll", sys.MethodName)
			// The message's own properties, serialized once more too.
			require.Equal(t, `"sub"`, unquote(t, req.Metadata["subscriptionId"]))
			require.Equal(t, `"`+msg.OperationID+`"`, unquote(t, req.Metadata["operationId"]))
			require.NotContains(t, req.Metadata, "QueueTrigger")

			require.Less(t, inv.Instance, instances)
			attempts[msg.OperationID] = append(attempts[msg.OperationID], attempt{inv.Status, inv.DequeueCount})
		}
		require.Equal(t, map[string][]attempt{
			"ok-1":   {{200, 1}},
			"ok-2":   {{200, 1}},
			"fail-1": {{500, 1}, {500, 2}, {500, 3}},
		}, attempts)
	})

	t.Run("queues", func(t *testing.T) {
		ctx := t.Context()
		client := func(name string) *azqueue.QueueClient {
			q, err := azqueue.NewQueueClientFromConnectionString(az.ConnectionString, name, nil)
			require.NoError(t, err)
			return q
		}
		peek := func(name string) []string {
			resp, err := client(name).PeekMessages(ctx, &azqueue.PeekMessagesOptions{NumberOfMessages: ptr(int32(32))})
			require.NoError(t, err)
			var texts []string
			for _, m := range resp.Messages {
				texts = append(texts, *m.MessageText)
			}
			return texts
		}
		b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

		// Output values land base64-encoded: objects and arrays as
		// Newtonsoft's indented JSON, strings as they are.
		require.ElementsMatch(t, []string{b64("{\n  \"a\": 1\n}"), b64("plain text"), b64("[\n  1,\n  2\n]")}, peek(queue+"-audit"))

		props, err := client(queue).GetProperties(ctx, nil)
		require.NoError(t, err)
		require.NotNil(t, props.ApproximateMessagesCount)
		require.Zero(t, *props.ApproximateMessagesCount, "successes deleted, the failure moved")

		require.Equal(t, []string{b64("{\n  \"operationId\": \"fail-1\",\n  \"subscriptionId\": \"sub\"\n}")}, peek(queue+"-poison"))
	})
}

// timerOnlyApp is an app with one timer function and no queues.
func timerOnlyApp(t *testing.T) string {
	return newApp(t, `{"version":"2.0","customHandler":{"description":{"defaultExecutablePath":"fakehandler"}}}`,
		map[string]string{"scan": `{"bindings":[{"name":"timer","type":"timerTrigger","direction":"in","schedule":"*/1 * * * * *"}]}`})
}

func TestTimerRunsOnceAtATimeOnOneInstance(t *testing.T) {
	// Each scan takes 2.2 s on a schedule of every second: by the time the
	// second run starts, at least one occurrence has passed unrun.
	r := runHost(t, timerOnlyApp(t), map[string]string{"SCAN_SLEEP": "2200ms"}, Options{Instances: 2})
	require.Eventually(t, func() bool { return r.h.Counters().TimerTicksRun >= 2 }, time.Minute, 100*time.Millisecond)

	instances := r.h.Instances()
	require.Len(t, instances, 2)
	pid0, pid1 := instances[0].PID(), instances[1].PID()
	require.NotZero(t, pid0)
	require.NotZero(t, pid1)
	require.NotEqual(t, pid0, pid1, "each instance runs its own handler")
	require.NoError(t, r.stop())

	c := r.h.Counters()
	require.GreaterOrEqual(t, c.TimerTicksSkipped, int64(1))
	scans := r.rec.of("scan")
	require.GreaterOrEqual(t, len(scans), 2)
	for _, inv := range scans {
		require.NoError(t, inv.Err)
		e := echoOf(t, inv)
		require.False(t, e.Overlap, "a scan started while another was running")
		require.Equal(t, 0, inv.Instance, "the timer is a singleton")
		require.Equal(t, pid0, e.PID)
		var req request
		require.NoError(t, json.Unmarshal(e.Body, &req))
		var timer struct{ ScheduleStatus json.RawMessage }
		require.NoError(t, json.Unmarshal(req.Data["timer"], &timer))
		require.Equal(t, "null", string(timer.ScheduleStatus), "sub-minute schedules are not monitored by default")
	}
}

func TestHandlerRestart(t *testing.T) {
	r := runHost(t, timerOnlyApp(t), nil, Options{Restart: true})
	require.Eventually(t, func() bool { return r.h.Counters().Calls("scan") >= 1 }, time.Minute, 50*time.Millisecond)
	first := r.h.Instances()[0].PID()
	require.NotZero(t, first)

	require.NoError(t, r.h.Kill())
	var second int
	require.Eventually(t, func() bool {
		second = r.h.Instances()[0].PID()
		return r.h.Counters().HandlerRestarts == 1 && second != 0 && second != first
	}, time.Minute, 50*time.Millisecond)
	require.Eventually(t, func() bool {
		for _, inv := range r.rec.of("scan") {
			if inv.Err == nil && echoOf(t, inv).PID == second {
				return true
			}
		}
		return false
	}, time.Minute, 50*time.Millisecond, "the new handler gets invocations")
	require.NoError(t, r.stop())
}

func TestHandlerDeathWithoutRestartStopsRun(t *testing.T) {
	r := runHost(t, timerOnlyApp(t), nil, Options{})
	require.Eventually(t, func() bool { return r.h.Port() != 0 && r.h.Instances()[0].PID() != 0 }, time.Minute, 50*time.Millisecond)
	require.NoError(t, r.h.Kill())
	select {
	case <-r.finished:
	case <-time.After(time.Minute):
		t.Fatal("Run did not return after the handler died")
	}
	require.ErrorContains(t, r.runErr, "handler exited")
	require.ErrorContains(t, r.runErr, "killed")
}

func TestHandlerThatCannotStart(t *testing.T) {
	dir := writeApp(t, map[string]string{
		"host.json":          `{"version":"2.0","customHandler":{"description":{"defaultExecutablePath":"broken.sh"}}}`,
		"scan/function.json": `{"bindings":[{"name":"timer","type":"timerTrigger","direction":"in","schedule":"*/1 * * * * *"}]}`,
		"broken.sh":          "#!/bin/sh\necho cannot start >&2\nexit 3\n",
	})
	require.NoError(t, os.Chmod(filepath.Join(dir, "broken.sh"), 0o755))
	r := runHost(t, dir, nil, Options{})
	<-r.finished
	require.ErrorContains(t, r.runErr, "exited before answering GET /")
	require.ErrorContains(t, r.runErr, "exit status 3")
	require.Contains(t, r.out.String(), "cannot start", "the handler's stderr is forwarded")
	require.False(t, errors.Is(r.runErr, errHandlerStopped))
}

// A function whose settings do not resolve is in error: the host logs it
// at Error and runs the others, so an app can ship pickup to a stack that
// does not configure it.
func TestFunctionInErrorLeavesTheOthersRunning(t *testing.T) {
	app := newApp(t, `{"version":"2.0","customHandler":{"description":{"defaultExecutablePath":"fakehandler"}}}`,
		map[string]string{
			"scan":   `{"bindings":[{"name":"timer","type":"timerTrigger","direction":"in","schedule":"*/1 * * * * *"}]}`,
			"pickup": pickupJSON(""),
		})
	r := runHost(t, app, nil, Options{})
	require.Eventually(t, func() bool { return r.h.Counters().Calls("scan") >= 1 }, time.Minute, 100*time.Millisecond)
	require.NoError(t, r.stop())

	fns := r.h.Functions()
	require.Equal(t, "pickup", fns[0].Name)
	require.True(t, fns[0].Disabled)
	require.ErrorContains(t, fns[0].Error, "%COSMOS_DATABASE%")
	require.Zero(t, r.h.Counters().Calls("pickup"))
	require.Zero(t, r.h.Counters().ListenerStartFailures, "no listener is started for it")
	require.Equal(t, 1, strings.Count(r.out.String(), `level=ERROR msg="hostemu: the 'pickup' function is in error"`), r.out.String())
}
