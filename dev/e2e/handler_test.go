// Package e2e drives the built handler binary over HTTP, the way the
// Functions host does, against a real Cosmos-protocol server and the Cluster
// Service simulator.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/clustersim"
	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/dev/testenv"
)

var (
	cosmos     *testenv.Cosmos
	handlerBin string
)

func TestMain(m *testing.M) {
	code, err := setup(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e setup:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func setup(m *testing.M) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	root, err := testenv.RepoRoot()
	if err != nil {
		return 0, err
	}
	dir, err := os.MkdirTemp("", "opstatus-e2e")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	handlerBin = filepath.Join(dir, "handler")
	build := exec.CommandContext(ctx, "go", "build", "-o", handlerBin, ".")
	build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if err := build.Run(); err != nil {
		return 0, fmt.Errorf("build handler: %w", err)
	}
	if cosmos, err = testenv.StartCosmos(ctx, testenv.CosmosOptions{}); err != nil {
		return 0, err
	}
	defer cosmos.Stop()
	return m.Run(), nil
}

// handlerStack is one handler process with its own database and simulator.
type handlerStack struct {
	t      *testing.T
	url    string
	fe     *frontend.Frontend
	sim    *clustersim.Sim
	clock  *clustersim.ManualClock
	arm    *armRecorder
	armURL string
	stderr *syncBuffer
	cmd    *exec.Cmd
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type armRecorder struct {
	mu     sync.Mutex
	bodies []map[string]any
}

func (a *armRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	_ = json.NewDecoder(r.Body).Decode(&body)
	a.mu.Lock()
	a.bodies = append(a.bodies, body)
	a.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (a *armRecorder) got() []map[string]any {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.bodies)
}

var dbCount int

func freePort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)
}

func startStack(t *testing.T, extraEnv ...string) *handlerStack {
	t.Helper()
	ctx := context.Background()
	dbCount++
	dbName := fmt.Sprintf("e2e%d", dbCount)
	require.NoError(t, frontend.CreateSchema(ctx, cosmos.Endpoint, cosmos.Key, dbName, 10*time.Second))
	fe, err := frontend.New(cosmos.Endpoint, cosmos.Key, dbName)
	require.NoError(t, err)

	clock := clustersim.NewManualClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	sim := clustersim.New(clustersim.Options{Clock: clock})
	csServer := httptest.NewServer(sim)
	t.Cleanup(csServer.Close)
	rec := &armRecorder{}
	armServer := httptest.NewServer(rec)
	t.Cleanup(armServer.Close)

	port := freePort(t)
	cmd := exec.Command(handlerBin)
	cmd.Env = append([]string{
		"PATH=" + os.Getenv("PATH"),
		"FUNCTIONS_CUSTOMHANDLER_PORT=" + port,
		"COSMOS_ENDPOINT=" + cosmos.Endpoint,
		"COSMOS_DATABASE=" + dbName,
		"COSMOS_KEY=" + cosmos.Key,
		"COSMOS_INSECURE_SKIP_VERIFY=true",
		"CLUSTER_SERVICE_URL=" + csServer.URL,
		"NOTIFICATIONS_ALLOW_HTTP=true",
	}, extraEnv...)
	stderr := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = stderr, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("handler log:\n%s", stderr.String())
		}
	})
	s := &handlerStack{t: t, url: "http://127.0.0.1:" + port, fe: fe, sim: sim, clock: clock, arm: rec, stderr: stderr, cmd: cmd}
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
	Outputs     map[string]json.RawMessage
	Logs        []string
	ReturnValue json.RawMessage
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

// scan fires the timer as the host does and returns the queue messages.
func (s *handlerStack) scan() []map[string]string {
	s.t.Helper()
	r := s.invoke("scan", "scan-"+fmt.Sprint(time.Now().UnixNano()), map[string]any{
		"Data": map[string]any{"timer": map[string]any{
			"Schedule":       map[string]any{"AdjustForDST": true},
			"ScheduleStatus": map[string]any{"Last": "0001-01-01T00:00:00", "Next": "2026-11-30T12:00:10+00:00", "LastUpdated": "0001-01-01T00:00:00"},
			"IsPastDue":      false,
		}},
		"Metadata": map[string]any{"sys": map[string]any{"MethodName": "scan"}},
	})
	require.Equal(s.t, http.StatusOK, r.Status, r.Logs)
	var msgs []map[string]string
	require.NoError(s.t, json.Unmarshal(r.Outputs["operations"], &msgs))
	return msgs
}

// poll delivers one queue message as the host does: the message text as a
// JSON string and the metadata strings quoted once more.
func (s *handlerStack) poll(msg string) response {
	s.t.Helper()
	return s.invoke("poll", "poll-"+fmt.Sprint(time.Now().UnixNano()), map[string]any{
		"Data": map[string]any{"operation": msg},
		"Metadata": map[string]any{
			"DequeueCount": "1", "Id": `"5f0e9d1c"`, "PopReceipt": `"AgAAAAMAAAAAAAAA"`,
			"InsertionTime": `"2026-11-30T12:00:00+00:00"`,
		},
	})
}

func (s *handlerStack) pollOp(sub, op string) string {
	s.t.Helper()
	r := s.poll(fmt.Sprintf(`{"subscriptionId":%q,"operationId":%q}`, sub, op))
	require.Equal(s.t, http.StatusOK, r.Status, r.Logs)
	var outcome string
	require.NoError(s.t, json.Unmarshal(r.ReturnValue, &outcome))
	return outcome
}

func (s *handlerStack) opStatus(sub, id string) string {
	s.t.Helper()
	item, err := s.fe.Operation(context.Background(), sub, id)
	require.NoError(s.t, err)
	require.NotNil(s.t, item, "operation %s missing", id)
	return item["status"].(string)
}
