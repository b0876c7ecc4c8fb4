package hostemu

import (
	"context"
	"encoding/base64"
	"log/slog"
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

const scanEverySecondJSON = `{"bindings":[{"name":"timer","type":"timerTrigger","direction":"in","schedule":"%SCAN_SCHEDULE%"}]}`

// timerApp is an app with one timer function, scan, on SCAN_SCHEDULE.
func timerApp(t *testing.T, hostJSON string) string {
	if hostJSON == "" {
		hostJSON = `{"version":"2.0","customHandler":{"description":{"defaultExecutablePath":"fakehandler"}}}`
	}
	return newApp(t, hostJSON, map[string]string{"scan": scanEverySecondJSON})
}

func TestTimerOverrunRunsNextAtOnce(t *testing.T) {
	// TimerListener arms the timer only once an invocation has ended, for
	// the Next computed from when it began: a run that overruns its
	// interval is followed at once by the next, not at the next occurrence.
	r := runHost(t, timerApp(t, ""), map[string]string{"SCAN_SCHEDULE": "*/2 * * * * *", "SCAN_SLEEP": "2500ms"}, Options{})
	require.Eventually(t, func() bool { return len(r.rec.of("scan")) >= 3 }, time.Minute, 100*time.Millisecond)
	scans := r.rec.of("scan")
	for i := 1; i < len(scans); i++ {
		prevEnd := scans[i-1].Start.Add(scans[i-1].Duration)
		gap := scans[i].Start.Sub(prevEnd)
		require.Less(t, gap, 300*time.Millisecond, "run %d began %v after run %d ended", i, gap, i-1)
		require.NoError(t, scans[i].Err)
	}
}

func TestFunctionTimeoutKillsHandler(t *testing.T) {
	// A function that runs out of functionTimeout fails, and the host kills
	// the handler process (SIGKILL, no drain) and starts a new one: the
	// invocations in flight die with it. Timeouts are no handler failures:
	// the host does not stop after three of them.
	az := testenv.SharedAzurite(t)
	const queue = "timeout-work"
	app := newApp(t, `{"version":"2.0","functionTimeout":"00:00:03",
		"extensions":{"queues":{"maxPollingInterval":"00:00:00.2","visibilityTimeout":"00:01:00"}},
		"customHandler":{"description":{"defaultExecutablePath":"fakehandler"}}}`,
		map[string]string{"scan": scanEverySecondJSON, "poll": e2ePollJSON})
	q, err := azqueue.NewQueueClientFromConnectionString(az.ConnectionString, queue, nil)
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Each scan runs until its timeout kills the handler, so scans follow
	// one another in 3 s windows. Half way through each, a poll that needs
	// 2.5 s of its own 3 s starts: the scan's timeout kills it, unless the
	// log line or the queue came so late that it began the next window.
	onLog := func(l LogLine) {
		if l.Text != "fakehandler: scan on stdout" {
			return
		}
		go func() {
			select {
			case <-time.After(1500 * time.Millisecond):
			case <-ctx.Done():
				return
			}
			msg := base64.StdEncoding.EncodeToString([]byte(`{"subscriptionId":"sub","operationId":"sleep:2500ms"}`))
			if _, err := q.EnqueueMessage(ctx, msg, nil); err != nil && ctx.Err() == nil {
				t.Errorf("enqueueing: %v", err)
			}
		}()
	}
	r := runHost(t, app, map[string]string{
		"AzureWebJobsStorage": az.ConnectionString, "QUEUE_NAME": queue,
		"SCAN_SCHEDULE": "*/1 * * * * *", "SCAN_SLEEP": "1m", "SCAN_LOG": "1",
	}, Options{OnLog: onLog})
	var killed Invocation
	require.Eventually(t, func() bool {
		for _, p := range r.rec.of("poll") {
			if p.Err != nil {
				killed = p
				// The new handler is counted once the old one has exited,
				// after the timeout.
				c := r.h.Counters()
				return c.Timeouts >= 3 && c.HandlerRestarts >= 3
			}
		}
		return false
	}, time.Minute, 100*time.Millisecond, "a poll in flight when a scan timed out, and a new handler after each of three timeouts")
	require.NotContains(t, r.out.String(), "fakehandler: SIGTERM", "a timeout kills the handler without a drain")
	require.Zero(t, r.h.Counters().HostRestarts, "timeouts do not count towards the host's three failures")
	scan := r.rec.of("scan")[0]
	require.ErrorContains(t, scan.Err, "timeout value of 3s exceeded")
	require.GreaterOrEqual(t, scan.Duration, 3*time.Second)
	require.Less(t, scan.Duration, 4*time.Second)

	require.NotContains(t, killed.Err.Error(), "timeout value", "the poll itself had time left")
	require.Zero(t, killed.Status)
	require.Less(t, killed.Duration, 2500*time.Millisecond)
	require.NoError(t, r.stop())
}

func TestHandlerFailuresStopHost(t *testing.T) {
	// Each handler failure starts a new handler on the same port at once
	// (HttpWorkerOptions.Port is the host's); the third failure within 30
	// minutes stops the host, which with Restart starts again as a new host.
	r := runHost(t, timerApp(t, ""), map[string]string{"SCAN_SCHEDULE": "*/1 * * * * *"}, Options{Restart: true})
	// answered waits for a successful scan after the n-th.
	answered := func(n int) {
		t.Helper()
		require.Eventually(t, func() bool {
			scans := r.rec.of("scan")
			return len(scans) > n && scans[len(scans)-1].Err == nil
		}, time.Minute, 20*time.Millisecond)
	}
	answered(0)
	in := r.h.Instances()[0]
	port := in.Port()
	for kill := 1; kill <= 2; kill++ {
		pid := in.PID()
		require.NoError(t, in.Kill())
		require.Eventually(t, func() bool { return r.h.Counters().HandlerRestarts == int64(kill) }, time.Minute, 20*time.Millisecond)
		answered(len(r.rec.of("scan")))
		require.NotEqual(t, pid, in.PID())
		require.Equal(t, port, in.Port(), "the host's handlers share its port")
		require.Zero(t, r.h.Counters().HostRestarts)
	}
	pid := in.PID()
	require.NoError(t, in.Kill())
	require.Eventually(t, func() bool { return r.h.Counters().HostRestarts == 1 }, time.Minute, 20*time.Millisecond,
		"the third failure stops the host; the platform starts it again")
	answered(len(r.rec.of("scan")))
	require.NotEqual(t, pid, in.PID())
	require.EqualValues(t, 2, r.h.Counters().HandlerRestarts, "the new host's first handler is no restart")
	require.Contains(t, r.out.String(), "exceeded http worker restart retry count")
	require.NoError(t, r.stop())
}

func TestHandlerFailuresWithoutRestartStopRun(t *testing.T) {
	r := runHost(t, timerApp(t, ""), map[string]string{"SCAN_SCHEDULE": "*/1 * * * * *", "SCAN_EXIT": "3"}, Options{})
	select {
	case <-r.finished:
	case <-time.After(time.Minute):
		t.Fatal("Run did not return after the handler exited")
	}
	require.ErrorContains(t, r.runErr, "handler exited: exit status 3")
}

func TestHandlerExitZeroIsNotRestarted(t *testing.T) {
	// WorkerProcess.OnProcessExited raises nothing for exit status 0: the
	// host starts no new handler and its invocations fail.
	r := runHost(t, timerApp(t, ""), map[string]string{"SCAN_SCHEDULE": "*/1 * * * * *", "SCAN_EXIT": "0"}, Options{Restart: true})
	require.Eventually(t, func() bool { return len(r.rec.of("scan")) >= 3 }, time.Minute, 50*time.Millisecond)
	for _, inv := range r.rec.of("scan") {
		require.Error(t, inv.Err)
	}
	pid := r.h.Instances()[0].PID()
	require.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH, "the handler is gone")
	c := r.h.Counters()
	require.Zero(t, c.HandlerRestarts)
	require.Zero(t, c.HostRestarts)
	require.NoError(t, r.stop())
}

func TestHandlerThatNeverAnswers(t *testing.T) {
	// IsWorkerReady polls GET / every 25 ms for InitializationTimeout; a
	// handler that exits with status 0 raises nothing, so it is waited for
	// like one that never listens.
	for name, script := range map[string]string{"never listens": "exec sleep 30", "exits 0": "exit 0"} {
		t.Run(name, func(t *testing.T) {
			dir := writeApp(t, map[string]string{
				"host.json":          `{"version":"2.0","customHandler":{"description":{"defaultExecutablePath":"h.sh"}}}`,
				"scan/function.json": `{"bindings":[{"name":"timer","type":"timerTrigger","direction":"in","schedule":"*/1 * * * * *"}]}`,
				"h.sh":               "#!/bin/sh\n" + script + "\n",
			})
			require.NoError(t, os.Chmod(filepath.Join(dir, "h.sh"), 0o755))
			start := time.Now()
			r := runHost(t, dir, nil, Options{StartTimeout: 300 * time.Millisecond})
			<-r.finished
			require.ErrorContains(t, r.runErr, "did not answer GET / on port")
			require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)
		})
	}
}

// logRecorder keeps the lines Options.OnLog reports.
type logRecorder struct {
	mu    sync.Mutex
	lines []LogLine
}

func (l *logRecorder) add(line LogLine) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, line)
}

func (l *logRecorder) find(text string) []LogLine {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []LogLine
	for _, line := range l.lines {
		if line.Text == text {
			out = append(out, line)
		}
	}
	return out
}

func TestHandlerLogLevels(t *testing.T) {
	// The host logs stdout lines at Information, stderr lines at Error
	// unless they contain "warn" in any case (Warning), and a response's
	// Logs at Information (WorkerProcess.ParseErrorMessageAndLog,
	// DefaultHttpWorkerService.ProcessLogsFromHttpResponse).
	logs := &logRecorder{}
	r := runHost(t, timerApp(t, ""), map[string]string{"SCAN_SCHEDULE": "*/1 * * * * *", "SCAN_LOG": "1"}, Options{OnLog: logs.add})
	require.Eventually(t, func() bool { return len(r.rec.of("scan")) >= 1 }, time.Minute, 50*time.Millisecond)
	scan := r.rec.of("scan")[0]
	require.NoError(t, scan.Err)

	want := []struct {
		text   string
		level  slog.Level
		source LogSource
	}{
		{"fakehandler: scan on stdout", slog.LevelInfo, SourceStdout},
		{"fakehandler: scan on stderr", slog.LevelError, SourceStderr},
		{"fakehandler: WARNING: scan warns", slog.LevelWarn, SourceStderr},
		{"fakehandler: for the host", slog.LevelError, SourceStderr},
	}
	for _, w := range want {
		found := logs.find(w.text)
		require.NotEmpty(t, found, w.text)
		require.Equal(t, w.level, found[0].Level, w.text)
		require.Equal(t, w.source, found[0].Source, w.text)
		require.Empty(t, found[0].Function, "the host does not know the invocation of a process line")
	}
	found := logs.find("fakehandler /scan")
	require.NotEmpty(t, found)
	require.Equal(t, LogLine{Level: slog.LevelInfo, Source: SourceLogs, Function: "scan", InvocationID: scan.ID, Text: "fakehandler /scan"}, found[0])
	require.Contains(t, r.out.String(), "LanguageWorkerConsoleLogfakehandler: for the host\n", "Output gets the lines as written")
	require.NoError(t, r.stop())
}

func TestStorageLatency(t *testing.T) {
	// With a Storage latency, a scan's N output messages take at least N ×
	// the latency to write, one after the other, and the invocation ends
	// only once they are all written.
	az := testenv.SharedAzurite(t)
	const queue, n, latency = "latency-out", 10, 50 * time.Millisecond
	app := newApp(t, `{"version":"2.0","customHandler":{"description":{"defaultExecutablePath":"fakehandler"}}}`,
		map[string]string{"scan": `{"bindings":[
			{"name":"timer","type":"timerTrigger","direction":"in","schedule":"*/1 * * * * *"},
			{"name":"operations","type":"queue","direction":"out","queueName":"` + queue + `"}]}`})
	var mu sync.Mutex
	enqueuedAtEnd := int64(-1)
	var r *running
	onInvocation := func(inv Invocation) {
		mu.Lock()
		defer mu.Unlock()
		if enqueuedAtEnd < 0 {
			enqueuedAtEnd = r.h.Counters().MessagesEnqueued
		}
	}
	r = runHost(t, app, map[string]string{"AzureWebJobsStorage": az.ConnectionString, "SCAN_MESSAGES": "10"},
		Options{StorageLatency: latency, OnInvocation: onInvocation})
	require.Eventually(t, func() bool { return len(r.rec.of("scan")) >= 1 }, time.Minute, 50*time.Millisecond)
	scan := r.rec.of("scan")[0]
	require.NoError(t, scan.Err)
	require.GreaterOrEqual(t, scan.Duration, n*latency, "one request per message, each after the last")
	mu.Lock()
	require.EqualValues(t, n, enqueuedAtEnd, "every message was written before the invocation ended")
	mu.Unlock()

	q, err := azqueue.NewQueueClientFromConnectionString(az.ConnectionString, queue, nil)
	require.NoError(t, err)
	resp, err := q.PeekMessages(t.Context(), &azqueue.PeekMessagesOptions{NumberOfMessages: ptr(int32(32))})
	require.NoError(t, err)
	require.Len(t, resp.Messages, n)
	first, err := base64.StdEncoding.DecodeString(*resp.Messages[0].MessageText)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(first), "{\n  \"operationId\": \"op-"), "%q", first)
	require.NoError(t, r.stop())
}

func TestAnswerWithoutResultWaitsForTimeout(t *testing.T) {
	// A 2xx answer the host reads as no result (an empty body, or the JSON
	// null) never completes the invocation: it runs until functionTimeout,
	// then fails like any timeout and the handler is killed.
	for _, body := range []string{"empty", "null", "empty-text"} {
		t.Run(body, func(t *testing.T) {
			r := runHost(t, timerApp(t, ""), map[string]string{"SCAN_SCHEDULE": "*/1 * * * * *", "SCAN_BODY": body},
				Options{InvocationTimeout: 500 * time.Millisecond})
			require.Eventually(t, func() bool { return len(r.rec.of("scan")) >= 1 }, time.Minute, 20*time.Millisecond)
			scan := r.rec.of("scan")[0]
			require.Equal(t, 200, scan.Status)
			require.ErrorIs(t, scan.Err, errNoResult)
			require.ErrorContains(t, scan.Err, "timeout value of 500ms exceeded")
			require.ErrorIs(t, scan.Err, errFunctionTimeout)
			require.NoError(t, r.stop())
			require.Positive(t, r.h.Counters().Timeouts)
		})
	}
}

func TestOutputsWrittenAfterTimeout(t *testing.T) {
	// A timeout stops the host's wait, not the output writes it already
	// holds: the invocation fails at functionTimeout and every message of
	// the answer is still written.
	az := testenv.SharedAzurite(t)
	const queue, n, latency = "after-timeout", 10, 100 * time.Millisecond
	app := newApp(t, `{"version":"2.0","customHandler":{"description":{"defaultExecutablePath":"fakehandler"}}}`,
		map[string]string{"scan": `{"bindings":[
			{"name":"timer","type":"timerTrigger","direction":"in","schedule":"0 0 0 1 1 *","runOnStartup":true},
			{"name":"operations","type":"queue","direction":"out","queueName":"` + queue + `"}]}`})
	q, err := azqueue.NewQueueClientFromConnectionString(az.ConnectionString, queue, nil)
	require.NoError(t, err)
	_, _ = q.Create(t.Context(), nil)
	_, err = q.ClearMessages(t.Context(), nil)
	require.NoError(t, err)

	var mu sync.Mutex
	enqueuedAtEnd := int64(-1)
	var r *running
	onInvocation := func(Invocation) {
		mu.Lock()
		defer mu.Unlock()
		enqueuedAtEnd = r.h.Counters().MessagesEnqueued
	}
	r = runHost(t, app, map[string]string{"AzureWebJobsStorage": az.ConnectionString, "SCAN_MESSAGES": "10"},
		Options{StorageLatency: latency, InvocationTimeout: 3 * latency, OnInvocation: onInvocation})
	require.Eventually(t, func() bool { return len(r.rec.of("scan")) >= 1 }, time.Minute, 20*time.Millisecond)
	scan := r.rec.of("scan")[0]
	require.ErrorIs(t, scan.Err, errFunctionTimeout)
	mu.Lock()
	require.Less(t, enqueuedAtEnd, int64(n), "each write takes at least the latency: the invocation failed first")
	mu.Unlock()

	require.Eventually(t, func() bool { return r.h.Counters().MessagesEnqueued == n }, time.Minute, 20*time.Millisecond)
	require.NoError(t, r.stop())
	resp, err := q.PeekMessages(t.Context(), &azqueue.PeekMessagesOptions{NumberOfMessages: ptr(int32(32))})
	require.NoError(t, err)
	require.Len(t, resp.Messages, n)
	require.Len(t, r.rec.of("scan"), 1, "runOnStartup with a yearly schedule: one scan")
}
