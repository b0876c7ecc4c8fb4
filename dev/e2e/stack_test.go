package e2e

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/clustersim"
	"github.com/opstatus/opstatus/dev/demo"
	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/dev/hostemu"
	"github.com/opstatus/opstatus/dev/stack"
	"github.com/opstatus/opstatus/internal/testenv"
)

// tWriter sends the live view to the test log.
type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// TestStackDemo runs the whole system through real Azurite queues, the host
// emulator and the built handler, on the demo of make run, as it runs by
// default and with -frontend 2024-10 (ARO-HCP's account and frontend of
// then): every kind of operation ends as scripted, and the billing items
// are as the clusters' creates and deletes imply.
func TestStackDemo(t *testing.T) {
	testenv.NeedsServers(t)
	for _, version := range []string{"current", "2024-10"} {
		t.Run(version, func(t *testing.T) { stackDemo(t, version) })
	}
}

func stackDemo(t *testing.T, version string) {
	ctx := context.Background()
	shape, layout, err := frontend.ParseVersion(version)
	require.NoError(t, err)
	polls := demo.NewOutcomes()
	s, err := stack.Start(ctx, stack.Options{Host: hostemu.Options{OnInvocation: polls.Record}, Shape: shape, Layout: layout})
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()

	started := time.Now()
	w, err := demo.Run(ctx, s, tWriter{t}, 3*time.Minute, polls)
	require.NoError(t, err)
	summaryOK := w.Summary(ctx)

	for _, op := range w.Ops() {
		require.Equal(t, op.Want, w.Status(op.ID), "operation %s", op.ID)
		if shape == frontend.Shape2024_10 && (op.Kind == demo.KindCluster || op.Kind == demo.KindNodePool) {
			item, err := s.Frontend.Operation(ctx, op.Sub, op.ID)
			require.NoError(t, err)
			require.Equal(t, "workaround", item["partitionKey"], "the 2024-10 frontend served %s %s", op.Kind, op.Request)
			require.Regexp(t, `^/api/clusters_mgmt/v1/clusters/`, item["internalId"])
		}
		if !op.HasResource() {
			require.Empty(t, w.ResourceIDs(op), "a %s has no Resources item", op.Kind)
		}
		for _, id := range w.ResourceIDs(op) {
			item, err := s.Frontend.Resource(ctx, op.Sub, id)
			require.NoError(t, err)
			if op.Request == "Delete" {
				require.Nil(t, item, "a finished delete removes %s", id)
				continue
			}
			require.NotNil(t, item, "%s must survive", id)
			require.Equal(t, op.Want, item["provisioningState"], "resource %s follows its operation", id)
			require.NotContains(t, item, "activeOperationId")
		}
	}

	// The clusters' own items, which credential, node pool and external
	// auth operations never change.
	for sub, ids := range demo.ParentItems(w.Ops()) {
		for _, id := range ids {
			item, err := s.Frontend.Resource(ctx, sub, id)
			require.NoError(t, err)
			require.NotNil(t, item, "%s must survive", id)
			require.Equal(t, "Succeeded", item["provisioningState"], "resource %s", id)
			require.NotContains(t, item, "activeOperationId")
		}
	}

	held, problems, err := demo.CheckBilling(ctx, s, w.Ops(), started)
	require.NoError(t, err)
	require.Empty(t, problems)
	for _, b := range demo.BillingWants(w.Ops()) {
		h := held[strings.ToLower(b.ResourceID)]
		require.Equal(t, b.Open, h.Open, "open billing items of %s", b.Cluster)
		require.Equal(t, b.Closed, h.Closed, "closed billing items of %s", b.Cluster)
	}

	poison, err := s.QueueLength(ctx, "operations-poison")
	require.NoError(t, err)
	require.Equal(t, 1, poison, "only the malformed message is poisoned")
	msgs, err := s.Queue.NewQueueClient("operations-poison").PeekMessages(ctx, nil)
	require.NoError(t, err)
	require.Len(t, msgs.Messages, 1)

	require.Positive(t, polls.Count("deferred"), "the frontend's lock made opstatus wait")
	require.Len(t, s.ARM.Received(), len(w.Ops()), "every operation notified ARM once")
	require.Zero(t, polls.Count("HTTP 500"))
	require.True(t, summaryOK, "the summary found a mismatch")
}

// TestStackPickup runs make run's stack: once pickup's listener reads the
// Operations change feed, an operation the frontend writes is first checked
// by Cluster Service in a pickup invocation, not by scan, which leaves it
// for an interval. The figure is the time from the write to that first
// call, at the simulator; the target is 2 s.
func TestStackPickup(t *testing.T) {
	testenv.NeedsServers(t)
	ctx := context.Background()
	var mu sync.Mutex
	var pickups []hostemu.Invocation
	s, err := stack.Start(ctx, stack.Options{
		Sim: clustersim.Options{RecordCalls: true},
		Host: hostemu.Options{OnInvocation: func(inv hostemu.Invocation) {
			if inv.Function == "pickup" {
				mu.Lock()
				pickups = append(pickups, inv)
				mu.Unlock()
			}
		}},
	})
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()

	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	require.NoError(t, s.WaitFeed(waitCtx), "pickup's listener reads the feed")

	const sub = "6b690bec-0c16-4ecb-8f67-781caf40bba7"
	internalID := "/api/aro_hcp/v1alpha1/clusters/fresh"
	require.NoError(t, s.Sim.AddCluster("fresh", clustersim.Script{Installing: clustersim.Duration(time.Hour)}))
	key := "/subscriptions/" + sub + "/resourceGroups/rg/providers/Microsoft.RedHatOpenShift/hcpOpenShiftClusters/fresh"
	written := time.Now()
	require.NoError(t, s.Frontend.PutOperation(ctx, frontend.Operation{
		ID: "op-fresh", PartitionKey: sub, Request: "Create", Status: "Accepted",
		ExternalID: key, InternalID: internalID, StartTime: written.UTC(), LastTransitionTime: written.UTC(),
	}))
	require.NoError(t, s.Frontend.PutResource(ctx, frontend.Resource{
		ID: "res-fresh", PartitionKey: sub, Key: key, InternalID: internalID,
		ActiveOperationID: "op-fresh", ProvisioningState: "Accepted",
	}))

	var first time.Time
	require.Eventually(t, func() bool {
		calls := s.Sim.Calls()[internalID]
		if len(calls) == 0 {
			return false
		}
		first = calls[0]
		return true
	}, time.Minute, 20*time.Millisecond)
	t.Logf("pickup: first Cluster Service call %v after the frontend's write (target 2s)", first.Sub(written).Round(time.Millisecond))

	// The first call was made inside a pickup invocation: the feed brought
	// the operation, not a scan's message.
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, inv := range pickups {
			if inv.Err == nil && !first.Before(inv.Start) && !first.After(inv.Start.Add(inv.Duration)) {
				return true
			}
		}
		return false
	}, time.Minute, 20*time.Millisecond, "no pickup invocation made the first call")
}
