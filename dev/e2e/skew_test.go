package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/clustersim"
	"github.com/opstatus/opstatus/internal/testenv"
)

// pollReceived delivers msg as the host does after a receive at Storage's
// time received of a message inserted at inserted: the metadata carries
// that receive's NextVisibleTime, which the listener's visibility timeout
// puts ten minutes after it.
func (s *handlerStack) pollReceived(msg string, inserted, received time.Time) response {
	s.t.Helper()
	hostTime := func(t time.Time) string { return `"` + t.UTC().Format("2006-01-02T15:04:05+00:00") + `"` }
	return s.invoke("poll", "poll-"+fmt.Sprint(time.Now().UnixNano()), map[string]any{
		"Data": map[string]any{"operation": msg},
		"Metadata": map[string]any{
			"DequeueCount": "1", "Id": `"5f0e9d1c"`, "PopReceipt": `"AgAAAAMAAAAAAAAA"`,
			"InsertionTime":   hostTime(inserted),
			"NextVisibleTime": hostTime(received.Add(10 * time.Minute)),
			"ExpirationTime":  hostTime(inserted.Add(7 * 24 * time.Hour)),
		},
	})
}

// A handler whose clock runs ahead of Storage's and of the scan's (here
// Storage's and the scan's times run behind the handler's) ages messages
// by Storage's clock: it polls a fresh message, drops an old one, and logs
// a Warning that says how far ahead it is. SCAN_SCHEDULE is the default.
func TestPollWithTheHandlersClockAhead(t *testing.T) {
	for _, ahead := range []time.Duration{6 * time.Second, 10 * time.Second} {
		t.Run(fmt.Sprintf("%v ahead", ahead), func(t *testing.T) {
			s := startStack(t)
			for _, name := range []string{"fresh", "old"} {
				require.NoError(t, s.sim.AddCluster(name, clustersim.Script{Installing: clustersim.Duration(time.Hour)}))
				s.seed(subA, "op-"+name, "Create", "Accepted", clusterKey(subA, name), "/api/aro_hcp/v1alpha1/clusters/"+name)
			}
			storage := time.Now().Add(-ahead).Truncate(time.Second) // Storage's clock, and the scan's
			batch := func(op string, scanned time.Time) string {
				return fmt.Sprintf("{\n  \"operations\": [\n    {\n      \"subscriptionId\": %q,\n      \"operationId\": %q\n    }\n  ],\n  \"scannedAt\": %q\n}",
					subA, op, scanned.UTC().Format(time.RFC3339Nano))
			}

			// Scanned and inserted half an interval before the receive: fresh.
			r := s.pollReceived(batch("op-fresh", storage.Add(-5*time.Second)), storage.Add(-5*time.Second), storage)
			require.Equal(t, http.StatusOK, r.Status, r.Logs)
			require.Equal(t, "updated", outcome(t, r))
			require.Equal(t, "Provisioning", s.opStatus(subA, "op-fresh"))
			s.requireLog(t, r, testenv.HostWarning, "clock differs from Storage's")
			for _, l := range s.hostLines(r) {
				if l.contains("clock differs from Storage's") {
					var line struct {
						AheadMS int64 `json:"ahead_ms"`
					}
					require.NoError(t, json.Unmarshal([]byte(l.text), &line))
					// Storage's time comes in whole seconds, and errs early.
					require.GreaterOrEqual(t, line.AheadMS, ahead.Milliseconds(), l.text)
				}
			}

			// Scanned over an interval before the receive: the next scan has
			// sent a fresher message.
			calls := s.csRequests()
			r = s.pollReceived(batch("op-old", storage.Add(-11*time.Second)), storage.Add(-10*time.Second), storage)
			require.Equal(t, http.StatusOK, r.Status, r.Logs)
			require.Equal(t, "superseded", outcome(t, r))
			require.Equal(t, "Accepted", s.opStatus(subA, "op-old"))
			require.Equal(t, calls, s.csRequests())
		})
	}
}
