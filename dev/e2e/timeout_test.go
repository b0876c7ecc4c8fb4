package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/clustersim"
	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/dev/hostemu"
	"github.com/opstatus/opstatus/dev/stack"
	"github.com/opstatus/opstatus/internal/testenv"
)

// appWithTimeout copies the function app (host.json, the function.json
// files, the built handler) into a directory of its own with functionTimeout
// set to timeout.
func appWithTimeout(t *testing.T, timeout string) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	require.NoError(t, err)
	dir := t.TempDir()
	host, err := os.ReadFile(filepath.Join(root, "host.json"))
	require.NoError(t, err)
	var cfg map[string]any
	require.NoError(t, json.Unmarshal(host, &cfg))
	cfg["functionTimeout"] = timeout
	host, err = json.MarshalIndent(cfg, "", "  ")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "host.json"), host, 0o644))
	for _, fn := range []string{"scan", "poll"} {
		b, err := os.ReadFile(filepath.Join(root, fn, "function.json"))
		require.NoError(t, err)
		require.NoError(t, os.Mkdir(filepath.Join(dir, fn), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, fn, "function.json"), b, 0o644))
	}
	require.NoError(t, os.Symlink(filepath.Join(root, "handler"), filepath.Join(dir, "handler")))
	return dir
}

// TestWorkEndsInsideFunctionTimeout runs the built handler under the host
// emulator, which kills the handler process (every invocation in flight
// with it) when an invocation outlives functionTimeout. With a 6 s
// functionTimeout and a Cluster Service whose every call hangs past the
// client's 10 s timeout, poll's own deadline (half of functionTimeout,
// read from the same host.json) ends each invocation first: the operations
// are deferred to the next scan, and the host never has a reason to kill.
func TestWorkEndsInsideFunctionTimeout(t *testing.T) {
	testenv.NeedsServers(t)
	ctx := context.Background()
	var mu sync.Mutex
	var polls []hostemu.Invocation
	s, err := stack.Start(ctx, stack.Options{
		AppDir: appWithTimeout(t, "00:00:06"),
		Sim:    clustersim.Options{Faults: clustersim.Faults{TimeoutRate: 1, Timeout: clustersim.Duration(time.Minute)}},
		Host: hostemu.Options{OnInvocation: func(inv hostemu.Invocation) {
			if inv.Function == "poll" {
				mu.Lock()
				polls = append(polls, inv)
				mu.Unlock()
			}
		}},
	})
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	require.Equal(t, 6*time.Second, s.Host.Config().FunctionTimeout)

	const sub = "0b5f4d52-8b0b-4d57-9a0e-6a4e0a4e0a4e"
	for _, id := range []string{"a", "b", "c"} {
		require.NoError(t, s.Sim.AddCluster("c-"+id, clustersim.Script{Installing: clustersim.Duration(time.Hour)}))
		require.NoError(t, s.Frontend.PutOperation(ctx, frontend.Operation{ID: "op-" + id, PartitionKey: sub, Request: "Create",
			Status: "Accepted", ExternalID: "/subscriptions/" + sub + "/resourceGroups/rg/providers/Microsoft.RedHatOpenShift/hcpOpenShiftClusters/" + id,
			InternalID: "/api/aro_hcp/v1alpha1/clusters/c-" + id}))
	}

	// Two scans' worth of polls, each waiting on the hanging calls.
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(polls) >= 2
	}, time.Minute, 100*time.Millisecond, "no poll finished")

	mu.Lock()
	defer mu.Unlock()
	for _, inv := range polls {
		require.Equal(t, 200, inv.Status, "poll answered, not killed: %v", inv.Err)
		require.Less(t, inv.Duration, 6*time.Second)
		var tally map[string]int
		require.NoError(t, json.Unmarshal(inv.ReturnValue, &tally))
		require.Equal(t, map[string]int{"deferred": 3}, tally)
	}
	c := s.Host.Counters()
	require.Zero(t, c.Timeouts, "no invocation ran out of functionTimeout")
	require.Zero(t, c.HandlerRestarts, "the handler was never killed")
	log, err := os.ReadFile(s.LogPath)
	require.NoError(t, err)
	require.True(t, strings.Contains(string(log), "waiting to call Cluster Service") || strings.Contains(string(log), "context deadline exceeded"),
		"the operations were deferred by the deadline")
}
