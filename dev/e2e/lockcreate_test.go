package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/clustersim"
	"github.com/opstatus/opstatus/dev/faultproxy"
	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/internal/testenv"
)

// A poll whose lock create Cosmos applied, but whose answer the connection
// lost, defers the operation and leaves no lock item behind: the frontend
// takes the subscription's lock at once instead of a TTL later, and the
// next poll writes.
func TestDroppedLockCreateLeavesNoLock(t *testing.T) {
	proxy, err := faultproxy.New(testenv.SharedCosmos(t).Endpoint, faultproxy.Options{TLS: true, Name: "lock"})
	require.NoError(t, err)
	require.NoError(t, proxy.Start())
	t.Cleanup(func() { _ = proxy.Close() })
	s := startStack(t, "COSMOS_ENDPOINT="+proxy.URL())
	ctx := context.Background()

	require.NoError(t, s.sim.AddCluster("cd", clustersim.Script{Installing: clustersim.Duration(time.Hour)}))
	s.seed(subA, "op-create", "Create", "Accepted", clusterKey(subA, "cd"), "/api/aro_hcp/v1alpha1/clusters/cd")
	proxy.SetFaults(faultproxy.Faults{RateDropAfterForward: 1, Match: func(r faultproxy.Request) bool {
		return r.Container == frontend.LocksContainer && r.Kind == faultproxy.KindCreate && r.ItemID == subA
	}})
	require.Equal(t, "deferred", s.pollOp(subA, "op-create"))
	require.Equal(t, "Accepted", s.opStatus(subA, "op-create"))

	l, ok, err := s.fe.TryLock(ctx, subA, "frontend")
	require.NoError(t, err)
	require.True(t, ok, "the frontend is locked out of the subscription")
	require.NoError(t, s.fe.Unlock(ctx, l))
	var locks []string
	for _, w := range proxy.Writes() {
		if w.Container == frontend.LocksContainer {
			require.True(t, strings.HasPrefix(w.Owner, "opstatus/"), w.Owner)
			locks = append(locks, w.Kind)
		}
	}
	require.Equal(t, []string{faultproxy.KindCreate, faultproxy.KindDelete}, locks,
		"Cosmos applied the lock create, and the handler deleted the item it wrote")
	require.Eventually(t, func() bool {
		return strings.Contains(s.stdout.String(), "deleted the subscription lock item a failed create had written")
	}, 10*time.Second, 20*time.Millisecond, "the handler says it deleted the item")

	proxy.SetFaults(faultproxy.Faults{})
	require.Equal(t, "updated", s.pollOp(subA, "op-create"))
	require.Equal(t, "Provisioning", s.opStatus(subA, "op-create"))
}
