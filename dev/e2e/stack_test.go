package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/demo"
	"github.com/opstatus/opstatus/dev/hostemu"
	"github.com/opstatus/opstatus/dev/stack"
	"github.com/opstatus/opstatus/dev/testenv"
)

// tWriter sends the live view to the test log.
type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// TestStackDemo runs the whole system through real Azurite queues, the host
// emulator and the built handler, on the demo of make run: every kind of
// operation ends as scripted, and the billing items are as the clusters'
// creates and deletes imply.
func TestStackDemo(t *testing.T) {
	testenv.NeedsServers(t)
	ctx := context.Background()
	polls := demo.NewOutcomes()
	s, err := stack.Start(ctx, stack.Options{Host: hostemu.Options{OnInvocation: polls.Record}})
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()

	started := time.Now()
	w, err := demo.Run(ctx, s, tWriter{t}, 3*time.Minute, polls)
	require.NoError(t, err)
	summaryOK := w.Summary(ctx)

	for _, op := range w.Ops() {
		require.Equal(t, op.Want, w.Status(op.ID), "operation %s", op.ID)
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
