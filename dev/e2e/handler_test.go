// Package e2e drives the built handler binary over HTTP, the way the
// Functions host does, against a real Cosmos-protocol server and the Cluster
// Service simulator.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/clustersim"
	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// handlerStack is one handler process with its own database and simulator.
type handlerStack struct {
	t      *testing.T
	url    string
	db     string // the Cosmos database's name
	fe     *frontend.Frontend
	sim    *clustersim.Sim
	clock  *clustersim.ManualClock
	arm    *testenv.ARM
	armURL string
	stdout *testenv.SyncBuffer // the handler's stdout, which the host logs at Information
	stderr *testenv.SyncBuffer // its stderr, logged at Error or Warning (testenv.HostStderrLevel)
	cmd    *exec.Cmd
}

// partitionSetting names the one partition of every Operations item.
const partitionSetting = "COSMOS_OPERATIONS_PARTITION_KEY"

// partitionModes are the two ways the frontend may write the Operations
// items, as the handler's extra settings: each in its subscription's
// partition, or all in ARO-HCP's frontend's "workaround" (2024-10).
var partitionModes = []struct {
	name string
	env  []string
}{
	{"by subscription", nil},
	{"fixed partition", []string{partitionSetting + "=workaround"}},
}

func startStack(t *testing.T, extraEnv ...string) *handlerStack {
	t.Helper()
	return startStackIn(t, testenv.LayoutCurrent, extraEnv...)
}

// startStackIn starts a handler over a database in layout.
func startStackIn(t *testing.T, layout testenv.Layout, extraEnv ...string) *handlerStack {
	t.Helper()
	ctx := context.Background()
	bin := testenv.Build(t, ".")
	cosmos := testenv.SharedCosmos(t)
	dbName := testenv.DatabaseName(t)
	require.NoError(t, frontend.CreateLayout(ctx, cosmos.Endpoint, cosmos.Key, dbName, layout, 10*time.Second))
	fe, err := frontend.New(cosmos.Endpoint, cosmos.Key, dbName)
	require.NoError(t, err)

	clock := clustersim.NewManualClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	sim := clustersim.New(clustersim.Options{Clock: clock})
	csServer := httptest.NewServer(sim)
	t.Cleanup(csServer.Close)
	rec := &testenv.ARM{}
	armServer := httptest.NewServer(rec)
	t.Cleanup(armServer.Close)

	free, err := testenv.FreePort()
	require.NoError(t, err)
	port := strconv.Itoa(free)
	cmd := exec.Command(bin)
	// The host runs the handler in the function app's root, where it reads
	// host.json.
	root, err := testenv.RepoRoot()
	require.NoError(t, err)
	cmd.Dir = root
	cmd.Env = append([]string{
		"PATH=" + os.Getenv("PATH"),
		"FUNCTIONS_CUSTOMHANDLER_PORT=" + port,
		"COSMOS_ENDPOINT=" + cosmos.Endpoint,
		"COSMOS_DATABASE=" + dbName,
		"COSMOS_KEY=" + cosmos.Key,
		"COSMOS_INSECURE_SKIP_VERIFY=true",
		"AZURE_LOCATION=eastus",
		"CLUSTER_SERVICE_URL=" + csServer.URL,
		"NOTIFICATIONS_ALLOW_HTTP=true",
	}, extraEnv...)
	stdout, stderr := &testenv.SyncBuffer{}, &testenv.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("handler stdout:\n%s\nhandler stderr:\n%s", stdout.String(), stderr.String())
		}
	})
	// The frontend writes the Operations items where the handler is told
	// they are.
	for _, kv := range extraEnv {
		if v, ok := strings.CutPrefix(kv, partitionSetting+"="); ok {
			fe.OperationsPartition = v
		}
	}
	s := &handlerStack{t: t, url: "http://127.0.0.1:" + port, db: dbName, fe: fe, sim: sim, clock: clock, arm: rec, stdout: stdout, stderr: stderr, cmd: cmd}
	require.Eventually(t, func() bool {
		resp, err := http.Get(s.url + "/")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 20*time.Second, 20*time.Millisecond, "handler never answered GET /")
	s.armURL = armServer.URL
	return s
}

// response is the custom-handler answer.
type response struct {
	Status      int
	ID          string `json:"-"` // the invocation id it was sent with
	Outputs     map[string]json.RawMessage
	Logs        []string
	ReturnValue json.RawMessage
}

// anyLevel matches a line the host logs at any level.
const anyLevel = ""

// hostLine is one line the host logs for an invocation.
type hostLine struct {
	level  string
	text   string
	values []string // the string values of a JSON line, decoded
}

// contains reports whether the line holds part, as written or decoded.
func (l hostLine) contains(part string) bool {
	return strings.Contains(l.text, part) || slices.ContainsFunc(l.values, func(v string) bool {
		return strings.Contains(v, part)
	})
}

// hostLines returns the lines the host logs for r's invocation so far: its
// Logs if r is a 2xx answer, and the handler's stdout and stderr lines that
// carry its invocation_id.
func (s *handlerStack) hostLines(r response) []hostLine {
	var out []hostLine
	if r.Status >= 200 && r.Status <= 299 {
		for _, l := range r.Logs {
			out = append(out, hostLine{level: testenv.HostInformation, text: l})
		}
	}
	for _, stream := range []*testenv.SyncBuffer{s.stdout, s.stderr} {
		for l := range strings.Lines(stream.String()) {
			l = strings.TrimSuffix(l, "\n")
			var rec map[string]any
			if json.Unmarshal([]byte(l), &rec) != nil {
				continue
			}
			if id, ok := rec["invocation_id"]; !ok || id != r.ID {
				continue
			}
			level := testenv.HostInformation
			if stream == s.stderr {
				level = testenv.HostStderrLevel(l)
			}
			out = append(out, hostLine{level: level, text: l, values: stringValues(rec, nil)})
		}
	}
	return out
}

// stringValues appends the string values in v, at any depth.
func stringValues(v any, out []string) []string {
	switch v := v.(type) {
	case string:
		out = append(out, v)
	case map[string]any:
		for _, e := range v {
			out = stringValues(e, out)
		}
	case []any:
		for _, e := range v {
			out = stringValues(e, out)
		}
	}
	return out
}

// requireLog checks that the host logs, for r's invocation, a line at
// level (anyLevel for any) that contains every part. Process lines are
// read as they arrive: it waits for one a while.
func (s *handlerStack) requireLog(t *testing.T, r response, level string, parts ...string) {
	t.Helper()
	var lines []hostLine
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		lines = s.hostLines(r)
		for _, l := range lines {
			if level != anyLevel && l.level != level {
				continue
			}
			if !slices.ContainsFunc(parts, func(p string) bool { return !l.contains(p) }) {
				return
			}
		}
	}
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "%s: %.2000s\n", l.level, l.text)
	}
	t.Fatalf("the host logs no line at %q of invocation %q with all of %q:\n%s", level, r.ID, parts, b.String())
}

func (s *handlerStack) invoke(function, invocationID string, body any) response {
	s.t.Helper()
	b, err := json.Marshal(body)
	require.NoError(s.t, err)
	req, err := http.NewRequest(http.MethodPost, s.url+"/"+function, bytes.NewReader(b))
	require.NoError(s.t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Azure-Functions-InvocationId", invocationID)
	r, _ := s.do(req, invocationID)
	return r
}

// scan fires the timer as the host does (no ScheduleStatus for a schedule
// under a minute) and returns the operations its messages name, in order.
func (s *handlerStack) scan() []map[string]string {
	s.t.Helper()
	var ops []map[string]string
	for _, m := range s.scanMessages() {
		var msg struct {
			Operations []map[string]string `json:"operations"`
		}
		require.NoError(s.t, json.Unmarshal([]byte(m), &msg))
		ops = append(ops, msg.Operations...)
	}
	return ops
}

// scanMessages fires the timer and returns the queue messages as the host
// writes them: each output object as indented JSON.
func (s *handlerStack) scanMessages() []string {
	s.t.Helper()
	r := s.invoke("scan", "scan-"+fmt.Sprint(time.Now().UnixNano()), map[string]any{
		"Data": map[string]any{"timer": map[string]any{
			"Schedule":       map[string]any{"AdjustForDST": true},
			"ScheduleStatus": nil,
			"IsPastDue":      false,
		}},
		"Metadata": map[string]any{"sys": map[string]any{"MethodName": "scan"}},
	})
	require.Equal(s.t, http.StatusOK, r.Status, r.Logs)
	var msgs []json.RawMessage
	require.NoError(s.t, json.Unmarshal(r.Outputs["operations"], &msgs))
	var out []string
	for _, m := range msgs {
		require.Equal(s.t, byte('{'), m[0], "messages are JSON objects")
		var indented bytes.Buffer
		require.NoError(s.t, json.Indent(&indented, m, "", "  "))
		out = append(out, indented.String())
	}
	return out
}

// poll delivers one queue message as the host does: the message text as a
// JSON string and the metadata strings quoted once more.
func (s *handlerStack) poll(msg string) response {
	s.t.Helper()
	return s.invoke("poll", "poll-"+fmt.Sprint(time.Now().UnixNano()), map[string]any{
		"Data": map[string]any{"operation": msg},
		"Metadata": map[string]any{
			"DequeueCount": "1", "Id": `"5f0e9d1c"`, "PopReceipt": `"AgAAAAMAAAAAAAAA"`,
			"InsertionTime": `"` + time.Now().UTC().Format("2006-01-02T15:04:05+00:00") + `"`,
		},
	})
}

// pollOp polls one operation with a single-operation message and returns
// its outcome.
func (s *handlerStack) pollOp(sub, op string) string {
	s.t.Helper()
	r := s.poll(fmt.Sprintf(`{"subscriptionId":%q,"operationId":%q}`, sub, op))
	require.Equal(s.t, http.StatusOK, r.Status, r.Logs)
	return outcome(s.t, r)
}

func (s *handlerStack) opStatus(sub, id string) string {
	s.t.Helper()
	item, err := s.fe.Operation(context.Background(), sub, id)
	require.NoError(s.t, err)
	require.NotNil(s.t, item, "operation %s missing", id)
	return item["status"].(string)
}

// holdLock takes sub's lock as the frontend and renews it until release is
// called, as the frontend does while it works: the Locks container's TTL
// is no longer than the handler's lock wait, so an unrenewed item could
// expire while a poll waits for it.
func (s *handlerStack) holdLock(sub string) (release func()) {
	s.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l, ok, err := s.fe.TryLock(ctx, sub, "frontend")
	require.NoError(s.t, err)
	require.True(s.t, ok, "the frontend could not take %s's lock", sub)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(2 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if next, err := s.fe.Renew(ctx, l); err == nil {
					l = next
				}
			}
		}
	}()
	return func() {
		cancel()
		<-done
		require.NoError(s.t, s.fe.Unlock(context.Background(), l))
	}
}
