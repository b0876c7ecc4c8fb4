package demo

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOpsCoverEveryKind keeps the demo showing every kind of operation
// with the outcomes each kind can script.
func TestOpsCoverEveryKind(t *testing.T) {
	type shape struct{ kind, request, want string }
	have := map[shape]bool{}
	for _, d := range Ops() {
		have[shape{d.Kind, d.Request, d.Want}] = true
	}
	for _, want := range []shape{
		{KindCluster, "Create", "Succeeded"},
		{KindCluster, "Create", "Failed"},
		{KindCluster, "Update", "Succeeded"},
		{KindCluster, "Delete", "Succeeded"},
		{KindNodePool, "Create", "Succeeded"},
		{KindNodePool, "Create", "Failed"},
		{KindExternalAuth, "Create", "Succeeded"},
		{KindExternalAuth, "Create", "Failed"},
		{KindExternalAuth, "Delete", "Succeeded"},
		{KindCredential, "RequestCredential", "Succeeded"},
		{KindCredential, "RequestCredential", "Failed"},
		{KindCredential, "RequestCredential", "Canceled"},
		{KindRevocation, "RevokeCredentials", "Succeeded"},
	} {
		require.True(t, have[want], "the demo has no %s %s that ends %s", want.kind, want.request, want.want)
	}
}

// TestBillingWants checks the billing items the demo expects: a wrong
// expectation would let the stack test pass over wrong items.
func TestBillingWants(t *testing.T) {
	byCluster := map[string]BillingWant{}
	for _, b := range BillingWants(Ops()) {
		require.NotContains(t, byCluster, b.Cluster, "one row per cluster")
		byCluster[b.Cluster] = b
	}
	for _, tc := range []struct {
		cluster      string
		open, closed int
	}{
		{"alpha-1", 1, 0},      // created
		{"alpha-4", 0, 0},      // its create failed
		{"bravo-gone", 0, 1},   // deleted
		{"bravo-old", 0, 0},    // updated
		{"alpha-base", 0, 0},   // its node pool, external auth and credentials
		{"bravo-ops", 0, 0},    // its credentials revoked
		{"charlie-old", 0, 0},  // updated, its external auth failed
		{"charlie-gone", 0, 1}, // deleted with a node pool and an external auth
	} {
		t.Run(tc.cluster, func(t *testing.T) {
			b, ok := byCluster[tc.cluster]
			require.True(t, ok)
			require.Equal(t, tc.open, b.Open)
			require.Equal(t, tc.closed, b.Closed)
		})
	}
}
