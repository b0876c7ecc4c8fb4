package poll_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/clustersim"
	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/functions"
	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/clusterservice"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/internal/lock"
	"github.com/opstatus/opstatus/internal/queuemsg"
	"github.com/opstatus/opstatus/internal/testenv"
	"github.com/opstatus/opstatus/poll"
	"github.com/opstatus/opstatus/scan"
)

// TestClustersMgmtNodePoolsThroughCosmos is the 2024-10 frontend's node
// pool round trip, with the real client against the Cluster Service
// simulator and items in the Cosmos DB test server, Operations in the one
// "workaround" partition: scan sends the node pool operations whose
// internalId is a clusters_mgmt path, poll ends the Create, the Delete
// (removing the node pool's Resources item) and, once the cluster is gone,
// a Delete whose Resources item the cluster's delete already removed; ARM
// hears of each.
func TestClustersMgmtNodePoolsThroughCosmos(t *testing.T) {
	testenv.NeedsServers(t)
	ctx := t.Context()
	cosmos := testenv.SharedCosmos(t)
	name := testenv.DatabaseName(t)
	require.NoError(t, frontend.CreateSchema(ctx, cosmos.Endpoint, cosmos.Key, name, 5*time.Second))
	fe, err := frontend.New(cosmos.Endpoint, cosmos.Key, name)
	require.NoError(t, err)
	fe.OperationsPartition = fixedPartition
	db, err := database.NewCosmosClient(database.CosmosConfig{
		Endpoint: cosmos.Endpoint, Database: name, Key: cosmos.Key, InsecureSkipVerify: true,
		OperationsContainer: frontend.OperationsContainer, ResourcesContainer: frontend.ResourcesContainer,
		LocksContainer: frontend.LocksContainer, BillingContainer: frontend.BillingContainer,
		OperationsPartition: fixedPartition,
	})
	require.NoError(t, err)

	clock := clustersim.NewManualClock(time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC))
	sim := clustersim.New(clustersim.Options{Clock: clock, RecordCalls: true})
	csServer := httptest.NewServer(sim)
	t.Cleanup(csServer.Close)
	client, err := clusterservice.NewClient(clusterservice.Config{URL: csServer.URL})
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	notified := notifications{&testenv.ARM{}}
	armServer := httptest.NewServer(notified)
	t.Cleanup(armServer.Close)

	fn := poll.New(poll.Config{
		DB: db, Cluster: client,
		Locker:   lock.New(db.Locks(), lock.Options{Wait: 2 * time.Second, RetryInterval: 50 * time.Millisecond}),
		Notifier: arm.NewNotifier(true), Owner: "opstatus-test", Location: "eastus", Interval: time.Hour,
		Deadlines: poll.Deadlines{Create: time.Hour, Delete: time.Hour},
	})
	scanFn := &scan.Function{DB: db}
	// cycle runs scan, then poll on what it sent, and returns the ids sent.
	cycle := func() []string {
		t.Helper()
		var logs bytes.Buffer
		res, err := scanFn.Handle(ctx, &functions.Invocation{ID: "scan", Function: "scan",
			Data: map[string]json.RawMessage{"timer": json.RawMessage(`{"IsPastDue":false}`)}, Metadata: map[string]json.RawMessage{},
			Log: slog.New(slog.NewTextHandler(&logs, nil))})
		require.NoError(t, err)
		require.NotContains(t, logs.String(), "operation skipped")
		var sent []string
		for _, m := range res.Outputs[scan.OutputBinding].([]queuemsg.Message) {
			for _, op := range m.Operations {
				sent = append(sent, op.OperationID)
				b, err := json.Marshal(queuemsg.Operation{SubscriptionID: op.SubscriptionID, OperationID: op.OperationID})
				require.NoError(t, err)
				_, err = fn.Handle(ctx, &functions.Invocation{ID: "poll", Function: "poll",
					Data: map[string]json.RawMessage{"operation": b}, Metadata: map[string]json.RawMessage{},
					Log: slog.New(slog.DiscardHandler)})
				require.NoError(t, err)
			}
		}
		return sent
	}
	status := func(id string) string {
		t.Helper()
		op, err := fe.Operation(ctx, sub, id)
		require.NoError(t, err)
		return op["status"].(string)
	}

	const (
		poolKey = clusterKey + "/nodePools/np1"
		poolCS  = "/api/clusters_mgmt/v1/clusters/abc/node_pools/np1"
	)
	require.NoError(t, sim.AddCluster("abc", clustersim.Script{}))
	require.NoError(t, sim.AddNodePool("abc", "np1", clustersim.Script{Installing: clustersim.Duration(time.Minute)}))
	start := time.Now().UTC()
	// put writes the operation, and the node pool's Resources item
	// following it unless the item is gone.
	put := func(id string, request arm.Request, st string, itemGone bool) {
		t.Helper()
		require.NoError(t, fe.PutOperation(ctx, frontend.Operation{ID: id, PartitionKey: fixedPartition, Request: string(request),
			Status: st, ExternalID: poolKey, InternalID: poolCS, StartTime: start, LastTransitionTime: start,
			OperationID: "/subscriptions/" + sub + "/providers/x/hcpOperationStatuses/" + id, NotificationURI: armServer.URL + "/notify"}))
		if !itemGone {
			require.NoError(t, fe.PutResource(ctx, frontend.Resource{ID: "np1", PartitionKey: sub, Key: poolKey, InternalID: poolCS,
				ActiveOperationID: id, ProvisioningState: st}))
		}
	}
	require.NoError(t, fe.PutResource(ctx, frontend.Resource{ID: "c1", PartitionKey: sub, Key: clusterKey, InternalID: clusterCS,
		ProvisioningState: "Succeeded"}))

	put("create", arm.RequestCreate, "Accepted", false)
	require.Equal(t, []string{"create"}, cycle())
	require.Equal(t, "Provisioning", status("create"))
	clock.Advance(time.Minute)
	cycle()
	require.Equal(t, "Succeeded", status("create"))

	put("delete", arm.RequestDelete, "Deleting", false)
	require.NoError(t, sim.DeleteNodePool("abc", "np1", time.Minute))
	require.Equal(t, []string{"delete"}, cycle())
	require.Equal(t, "Deleting", status("delete"))
	clock.Advance(time.Minute)
	cycle()
	require.Equal(t, "Succeeded", status("delete"))
	r, err := fe.Resource(ctx, sub, "np1")
	require.NoError(t, err)
	require.Nil(t, r, "the node pool's Resources item is deleted")
	r, err = fe.Resource(ctx, sub, "c1")
	require.NoError(t, err)
	require.NotNil(t, r, "the cluster's stays")

	// The cluster's delete took the node pool's Resources item as a child;
	// the node pool's own Delete still ends once Cluster Service has
	// neither.
	require.NoError(t, sim.AddNodePool("abc", "np1", clustersim.Script{}))
	put("delete2", arm.RequestDelete, "Deleting", true)
	require.NoError(t, sim.DeleteCluster("abc", 0))
	require.Equal(t, []string{"delete2"}, cycle())
	require.Equal(t, "Succeeded", status("delete2"))

	var got []string
	for _, st := range notified.got() {
		got = append(got, st.Name+" "+string(st.Status))
	}
	require.Equal(t, []string{"create Succeeded", "delete Succeeded", "delete2 Succeeded"}, got)
	require.Empty(t, sim.Calls()[poolCS+"/status"])
	require.NotEmpty(t, sim.Calls()["/api/aro_hcp/v1alpha1/clusters/abc/node_pools/np1"], "its status is read under aro_hcp")
}
