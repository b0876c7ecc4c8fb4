package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/clustersim"
)

func TestRunServesUntilCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdoutR, stdoutW := io.Pipe()
	var stderr bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--listen", "127.0.0.1:0", "--seed", "7", "--latency", "1ms",
			"--error-rate", "0.25", "--timeout", "5s", "--installing", "9s", "--pending", "0s", "--validating", "0s",
			"--issuing", "7s", "--revoking", "6s"},
			stdoutW, &stderr)
		stdoutW.Close()
	}()

	line, err := bufio.NewReader(stdoutR).ReadString('\n')
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(line, "ready http://127.0.0.1:"), line)
	base := strings.TrimSpace(strings.TrimPrefix(line, "ready "))
	go func() { _, _ = io.Copy(io.Discard, stdoutR) }()

	admin := clustersim.NewAdminClient(base, nil)
	f, err := admin.Faults(ctx)
	require.NoError(t, err)
	require.Equal(t, clustersim.Faults{Latency: clustersim.Duration(time.Millisecond), ErrorRate: 0.25,
		Timeout: clustersim.Duration(5 * time.Second), Spike: clustersim.Duration(2 * time.Second)}, f)
	require.NoError(t, admin.SetFaults(ctx, clustersim.Faults{}))

	// An empty PUT takes the defaults from the flags.
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, base+"/admin/clusters/c1", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	r, err := admin.Cluster(ctx, "c1")
	require.NoError(t, err)
	require.Equal(t, clustersim.Duration(9*time.Second), r.Script.Installing)
	require.Equal(t, clustersim.Duration(2*time.Second), r.Script.Uninstalling)
	require.Equal(t, clustersim.StateInstalling, r.State)

	// Credentials take their durations from the flags too.
	req, err = http.NewRequestWithContext(ctx, http.MethodPut, base+"/admin/clusters/c1/break_glass_credentials/b1", nil)
	require.NoError(t, err)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	r, err = admin.Credential(ctx, "c1", "b1")
	require.NoError(t, err)
	require.Equal(t, clustersim.Duration(7*time.Second), r.Script.Issuing)
	require.Equal(t, clustersim.Duration(6*time.Second), r.Script.Revoking)
	require.Equal(t, clustersim.CredentialCreated, r.State)

	resp, err = http.Get(base + "/api/clusters_mgmt/v1/clusters/c1/status")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(body), `"state":"installing"`)

	cancel()
	require.NoError(t, <-done)
	require.Contains(t, stderr.String(), "clustersim stopping")
}

func TestRunRejectsBadArguments(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"all interfaces", []string{"--listen", "0.0.0.0:0"}, "loopback"},
		{"host name", []string{"--listen", "localhost:0"}, "loopback"},
		{"no port", []string{"--listen", "127.0.0.1"}, "--listen"},
		{"error rate above 1", []string{"--error-rate", "2"}, "errorRate"},
		{"negative latency", []string{"--latency", "-1s"}, "latency"},
		{"bad log level", []string{"--log-level", "loud"}, "--log-level"},
		{"unknown flag", []string{"--nope"}, "not defined"},
		{"stray argument", []string{"serve"}, "unexpected arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), tt.args, &stdout, &stderr)
			require.Error(t, err)
			require.Contains(t, err.Error()+stderr.String(), tt.want)
			require.Empty(t, stdout.String(), "no ready line")
		})
	}
}
