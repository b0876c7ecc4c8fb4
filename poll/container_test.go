package poll_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/functions"
	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/clusterservice"
	"github.com/opstatus/opstatus/internal/clusterservice/clusterservicetesting"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/internal/lock"
	"github.com/opstatus/opstatus/internal/testenv"
	"github.com/opstatus/opstatus/poll"
)

// TestFinishedDeleteWithAMissingResourcesContainerIsDeferred: with
// COSMOS_RESOURCES_CONTAINER naming a container that does not exist, a
// delete that Cluster Service has finished (its OCM 404) is not taken for
// one whose Resources items are already gone: the poll is deferred with an
// error naming the container, the operation stays Deleting, the items keep
// their activeOperationId and ARM hears nothing. With the setting right,
// the same poll finishes the delete.
func TestFinishedDeleteWithAMissingResourcesContainerIsDeferred(t *testing.T) {
	testenv.NeedsServers(t)
	ctx := t.Context()
	cosmos, err := testenv.StartCosmos(ctx, testenv.CosmosOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cosmos.Stop() })
	name := testenv.DatabaseName(t)
	require.NoError(t, frontend.CreateSchema(ctx, cosmos.Endpoint, cosmos.Key, name, 5*time.Second))
	fe, err := frontend.New(cosmos.Endpoint, cosmos.Key, name)
	require.NoError(t, err)

	cs := clusterservicetesting.New(nil) // every status call: an OCM 404
	csServer := httptest.NewServer(cs)
	t.Cleanup(csServer.Close)
	client, err := clusterservice.NewClient(clusterservice.Config{URL: csServer.URL})
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	notified := notifications{&testenv.ARM{}}
	armServer := httptest.NewServer(notified)
	t.Cleanup(armServer.Close)

	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	start := now.Add(-5 * time.Minute)
	require.NoError(t, fe.PutOperation(ctx, frontend.Operation{ID: "del", PartitionKey: sub, Request: "Delete",
		Status: "Deleting", ExternalID: clusterKey, InternalID: clusterCS, StartTime: start, LastTransitionTime: start,
		OperationID: "/subscriptions/" + sub + "/providers/x/hcpOperationStatuses/del", NotificationURI: armServer.URL + "/notify"}))
	require.NoError(t, fe.PutResource(ctx, frontend.Resource{ID: "r1", PartitionKey: sub, Key: clusterKey,
		InternalID: clusterCS, ActiveOperationID: "del", ProvisioningState: "Deleting"}))
	require.NoError(t, fe.PutResource(ctx, frontend.Resource{ID: "np1", PartitionKey: sub, Key: clusterKey + "/nodePools/np1",
		InternalID: clusterCS + "/node_pools/np1", ProvisioningState: "Succeeded"}))

	// pollWith polls "del" with a handler whose Resources container is
	// resources, and returns the outcome and what was logged.
	pollWith := func(resources string) (poll.Outcome, string) {
		t.Helper()
		db, err := database.NewCosmosClient(database.CosmosConfig{
			Endpoint: cosmos.Endpoint, Database: name, Key: cosmos.Key, InsecureSkipVerify: true,
			OperationsContainer: frontend.OperationsContainer, ResourcesContainer: resources,
			LocksContainer: frontend.LocksContainer, BillingContainer: frontend.BillingContainer,
		})
		require.NoError(t, err)
		fn := poll.New(poll.Config{
			DB:       db,
			Cluster:  client,
			Locker:   lock.New(db.Locks(), lock.Options{Wait: 2 * time.Second, RetryInterval: 50 * time.Millisecond}),
			Notifier: arm.NewNotifier(true),
			Owner:    "opstatus-test",
			Now:      func() time.Time { return now },
			Interval: 10 * time.Second,
		})
		var logs bytes.Buffer
		res, err := fn.Handle(ctx, &functions.Invocation{
			ID:       "inv-1",
			Function: "poll",
			Data:     map[string]json.RawMessage{"operation": json.RawMessage(`{"subscriptionId":"` + sub + `","operationId":"del"}`)},
			Metadata: map[string]json.RawMessage{},
			Log:      slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		})
		require.NoError(t, err, "a missing container must not send the message to the poison queue")
		return only(t, res), logs.String()
	}
	outcome, logs := pollWith("Resourcez")
	require.Equal(t, poll.OutcomeDeferred, outcome, logs)
	require.Contains(t, logs, "level=ERROR")
	require.Contains(t, logs, "container or database not found")
	require.Contains(t, logs, "Resourcez")
	op, err := fe.Operation(ctx, sub, "del")
	require.NoError(t, err)
	require.Equal(t, "Deleting", op["status"])
	require.NotEmpty(t, op["notificationUri"])
	for _, id := range []string{"r1", "np1"} {
		r, err := fe.Resource(ctx, sub, id)
		require.NoError(t, err)
		require.NotNil(t, r, "%s was deleted", id)
	}
	r1, err := fe.Resource(ctx, sub, "r1")
	require.NoError(t, err)
	require.Equal(t, "del", r1["activeOperationId"])
	require.Empty(t, notified.got())

	outcome, logs = pollWith(frontend.ResourcesContainer)
	require.Equal(t, poll.OutcomeDeleted, outcome, logs)
	op, err = fe.Operation(ctx, sub, "del")
	require.NoError(t, err)
	require.Equal(t, "Succeeded", op["status"])
	for _, id := range []string{"r1", "np1"} {
		r, err := fe.Resource(ctx, sub, id)
		require.NoError(t, err)
		require.Nil(t, r, "%s was kept", id)
	}
	got := notified.got()
	require.Len(t, got, 1)
	require.Equal(t, arm.ProvisioningStateSucceeded, got[0].Status)
}
