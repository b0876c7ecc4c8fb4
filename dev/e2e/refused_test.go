package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/clustersim"
	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/dev/testenv"
)

// TestRefusedWriteIsLoggedThroughTheHandler: an Operations item the
// frontend wrote just under Cosmos DB's 2 MB, which the deadline's error
// would take over it, is refused by the Cosmos test server (413) at every
// poll: the built handler logs it at Error, once a poll, with the container
// and the answer, and leaves the operation as it was.
func TestRefusedWriteIsLoggedThroughTheHandler(t *testing.T) {
	s := startStack(t, "OPERATION_DEADLINE_CREATE=30m")
	require.NoError(t, s.sim.AddCluster("big", clustersim.Script{Installing: clustersim.Duration(24 * time.Hour)}))
	ctx := context.Background()
	start := time.Now().UTC().Add(-31 * time.Minute)
	key := clusterKey(subA, "big")
	op := frontend.Operation{ID: "big", PartitionKey: subA, Request: "Create", Status: "Provisioning",
		ExternalID: key, InternalID: "/api/aro_hcp/v1alpha1/clusters/big", StartTime: start, LastTransitionTime: start,
		Extra: map[string]any{"padding": ""}}
	// The frontend's body: the item's fields, sorted, with the padding.
	size := func() int {
		b, err := json.Marshal(op)
		require.NoError(t, err)
		var m map[string]any
		require.NoError(t, json.Unmarshal(b, &m))
		for k, v := range op.Extra {
			m[k] = v
		}
		b, err = json.Marshal(m)
		require.NoError(t, err)
		return len(b)
	}
	op.Extra["padding"] = strings.Repeat("x", testenv.MaxRequestBytes-40-size())
	require.Equal(t, testenv.MaxRequestBytes-40, size())
	require.NoError(t, s.fe.PutOperation(ctx, op))
	require.NoError(t, s.fe.PutResource(ctx, frontend.Resource{ID: "res-big", PartitionKey: subA, Key: key,
		InternalID: "/api/aro_hcp/v1alpha1/clusters/big", ActiveOperationID: "big", ProvisioningState: "Provisioning"}))
	s.clock.Advance(time.Hour) // the simulator's cluster is installing

	for range 2 {
		r := s.poll(fmt.Sprintf(`{"subscriptionId":%q,"operationId":%q}`, subA, "big"))
		require.Equal(t, http.StatusOK, r.Status, r.Logs)
		require.Equal(t, "deferred", outcome(t, r))
		s.requireLog(t, r, testenv.HostError, "Cosmos DB refused a write for good", `"container":"Operations"`,
			`"status_code":413`, "RequestEntityTooLarge: Request size is too large")
		var refusals int
		for _, l := range s.hostLines(r) {
			if l.contains("Cosmos DB refused a write for good") {
				refusals++
			}
		}
		require.Equal(t, 1, refusals, "one line per operation and poll")
		require.Equal(t, "Provisioning", s.opStatus(subA, "big"))
	}
}
