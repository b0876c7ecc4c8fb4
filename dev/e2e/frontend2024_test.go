package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/clustersim"
	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/internal/testenv"
)

// TestFrontend2024_10 runs the built handler over what ARO-HCP's frontend
// at 07deb7918 wrote, in the account ARO-HCP created then (Billing on
// /partitionKey, every Operations item in "workaround"): the stand-in
// serves each request as that frontend did (its lock, UUIDs, clusters_mgmt
// internalIds, its Resources items, Canceled with no error), and every
// operation must end as Cluster Service leads it: a cluster create with
// its billing item, a failing create, a delete that cancels a create, node
// pool create, update and delete with either internalId form, and the
// cluster's delete closing its billing item.
func TestFrontend2024_10(t *testing.T) {
	s := startStackIn(t, testenv.Layout2024, partitionSetting+"="+frontend.FixedOperationsPartition)
	s.fe.Shape = frontend.Shape2024_10
	ctx := context.Background()
	sec := time.Second
	sub := subA
	key := func(name string) string { return clusterKey(sub, name) }
	serve := func(method, key, internalID string) frontend.Result {
		t.Helper()
		r, err := s.fe.Request(ctx, frontend.Request{Method: method, Key: key, InternalID: internalID,
			TenantID: "72f988bf-0000-4000-8000-0000000020a4", ClientID: "0f0e0d0c-0000-4000-8000-00000000c11e",
			NotificationURI: s.armURL + "/notify" + strings.ToLower(key)})
		require.NoError(t, err, "%s %s", method, key)
		return r
	}
	// settle polls an operation, moving the simulator's clock on, until
	// it is terminal and notified.
	settle := func(t *testing.T, id string) map[string]any {
		t.Helper()
		var outcomes []string
		for range 40 {
			outcomes = append(outcomes, s.pollOp(sub, id))
			item, err := s.fe.Operation(ctx, sub, id)
			require.NoError(t, err)
			if st := item["status"]; (st == "Succeeded" || st == "Failed" || st == "Canceled") && item["notificationUri"] == nil {
				return item
			}
			s.clock.Advance(2 * sec)
		}
		item, _ := s.fe.Operation(ctx, sub, id)
		t.Fatalf("operation %s never ended: %v after outcomes %v", id, item["status"], outcomes)
		return nil
	}
	resource := func(id string) map[string]any {
		item, err := s.fe.Resource(ctx, sub, id)
		require.NoError(t, err)
		return item
	}
	// notified returns the one notification of operation id.
	notified := func(t *testing.T, id string) map[string]any {
		t.Helper()
		var got []map[string]any
		for _, b := range s.arm.Bodies() {
			if b["name"] == id {
				got = append(got, b)
			}
		}
		require.Len(t, got, 1, "operation %s notified once", id)
		return got[0]
	}

	var c1 frontend.Result
	t.Run("cluster create opens its billing item", func(t *testing.T) {
		require.NoError(t, s.sim.AddCluster("c1", clustersim.Script{Pending: clustersim.Duration(sec), Installing: clustersim.Duration(10 * sec)}))
		c1 = serve(http.MethodPut, key("c1"), "/api/clusters_mgmt/v1/clusters/c1")
		op, err := s.fe.Operation(ctx, sub, c1.Operation)
		require.NoError(t, err)
		require.Equal(t, frontend.FixedOperationsPartition, op["partitionKey"])
		require.Equal(t, "unchanged", s.pollOp(sub, c1.Operation), "pending")
		s.clock.Advance(2 * sec)
		require.Equal(t, "updated", s.pollOp(sub, c1.Operation))
		require.Equal(t, "Provisioning", s.opStatus(sub, c1.Operation))
		require.Equal(t, "Provisioning", resource(c1.Resource)["provisioningState"])
		op = settle(t, c1.Operation)
		require.Equal(t, "Succeeded", op["status"])
		res := resource(c1.Resource)
		require.Equal(t, "Succeeded", res["provisioningState"])
		require.NotContains(t, res, "activeOperationId")
		require.Equal(t, "Succeeded", notified(t, c1.Operation)["status"])
		bills, err := s.fe.BillingItems(ctx, sub)
		require.NoError(t, err)
		require.Len(t, bills, 1)
		require.Equal(t, strings.ToLower(sub), bills[0]["partitionKey"], "the Billing container's partition key")
		require.Equal(t, strings.ToLower(sub), bills[0]["subscriptionId"])
		require.Equal(t, key("c1"), bills[0]["resourceId"])
		require.NotContains(t, bills[0], "deletionTime")
	})

	t.Run("cluster create fails", func(t *testing.T) {
		require.NoError(t, s.sim.AddCluster("c2", clustersim.Script{Installing: clustersim.Duration(5 * sec), Fail: true,
			ErrorCode: "OCM3055", ErrorMessage: "the managed resource group is locked"}))
		c2 := serve(http.MethodPut, key("c2"), "/api/clusters_mgmt/v1/clusters/c2")
		op := settle(t, c2.Operation)
		require.Equal(t, "Failed", op["status"])
		require.Equal(t, "OCM3055", op["error"].(map[string]any)["code"])
		require.Equal(t, "Failed", resource(c2.Resource)["provisioningState"])
		require.Equal(t, "OCM3055", notified(t, c2.Operation)["error"].(map[string]any)["code"])
	})

	t.Run("a delete cancels the create, with no error", func(t *testing.T) {
		require.NoError(t, s.sim.AddCluster("c3", clustersim.Script{Installing: clustersim.Duration(time.Hour)}))
		create := serve(http.MethodPut, key("c3"), "/api/clusters_mgmt/v1/clusters/c3")
		s.clock.Advance(sec)
		require.Equal(t, "updated", s.pollOp(sub, create.Operation))
		require.Equal(t, "Provisioning", s.opStatus(sub, create.Operation))
		require.NoError(t, s.sim.DeleteCluster("c3", 4*sec))
		del := serve(http.MethodDelete, key("c3"), "")
		require.Equal(t, create.Operation, del.Canceled)
		op := settle(t, create.Operation)
		require.Equal(t, "Canceled", op["status"])
		require.NotContains(t, op, "error", "the frontend's Canceled carries no error, and opstatus adds none to the item")
		n := notified(t, create.Operation)
		require.Equal(t, "Canceled", n["status"])
		require.Equal(t, "Canceled", n["error"].(map[string]any)["code"], "ARM's rule: a Canceled status carries an error")
		op = settle(t, del.Operation)
		require.Equal(t, "Succeeded", op["status"])
		require.Nil(t, resource(del.Resource), "the finished delete removes the cluster's item")
	})

	// Node pools, with the 2024-10 frontend's clusters_mgmt internalId
	// and, written in today's shape into the same account, aro_hcp's.
	for _, form := range []string{"clusters_mgmt", "aro_hcp"} {
		t.Run("node pool create, update and delete, "+form, func(t *testing.T) {
			np := "np-" + strings.ReplaceAll(form, "_", "")
			poolKey := key("c1") + "/nodePools/" + np
			require.NoError(t, s.sim.AddNodePool("c1", np, clustersim.Script{Pending: clustersim.Duration(sec), Installing: clustersim.Duration(6 * sec)}))
			var create, update, del frontend.Result
			request := func(method, request string) frontend.Result {
				if form == "clusters_mgmt" {
					return serve(method, poolKey, "")
				}
				return s.todays(sub, request, poolKey, "/api/aro_hcp/v1alpha1/clusters/c1/node_pools/"+np)
			}
			create = request(http.MethodPut, "Create")
			if form == "clusters_mgmt" {
				op, err := s.fe.Operation(ctx, sub, create.Operation)
				require.NoError(t, err)
				require.Equal(t, "/api/clusters_mgmt/v1/clusters/c1/node_pools/"+np, op["internalId"])
			}
			require.Equal(t, "Succeeded", settle(t, create.Operation)["status"])
			require.Equal(t, "Succeeded", resource(create.Resource)["provisioningState"])

			require.NoError(t, s.sim.UpdateNodePool("c1", np, 6*sec))
			update = request(http.MethodPut, "Update")
			require.Equal(t, "Update", update.Request)
			require.Equal(t, create.Resource, update.Resource)
			require.Equal(t, "Succeeded", settle(t, update.Operation)["status"])
			res := resource(create.Resource)
			require.Equal(t, "Succeeded", res["provisioningState"])
			require.NotContains(t, res, "activeOperationId")

			require.NoError(t, s.sim.DeleteNodePool("c1", np, 6*sec))
			del = request(http.MethodDelete, "Delete")
			require.Equal(t, "Succeeded", settle(t, del.Operation)["status"])
			require.Nil(t, resource(create.Resource), "the finished delete removes the node pool's item")
			require.NotNil(t, resource(c1.Resource), "and leaves its cluster's")
			for _, id := range []string{create.Operation, update.Operation, del.Operation} {
				require.Equal(t, "Succeeded", notified(t, id)["status"])
			}
		})
	}

	t.Run("cluster delete closes its billing item", func(t *testing.T) {
		// A node pool created before opstatus ran.
		require.NoError(t, s.sim.AddNodePool("c1", "workers", clustersim.Script{}))
		require.NoError(t, s.fe.PutResource(ctx, frontend.Resource{ID: "res-workers", PartitionKey: sub, Key: key("c1") + "/nodePools/workers",
			InternalID: "/api/clusters_mgmt/v1/clusters/c1/node_pools/workers", ProvisioningState: "Succeeded"}))
		require.NoError(t, s.sim.DeleteCluster("c1", 6*sec))
		del := serve(http.MethodDelete, key("c1"), "")
		require.Empty(t, del.Canceled, "the create is over")
		require.Equal(t, "Deleting", s.opStatus(sub, del.Operation))
		op := settle(t, del.Operation)
		require.Equal(t, "Succeeded", op["status"])
		require.Nil(t, resource(c1.Resource))
		require.Nil(t, resource("res-workers"), "its node pools go with it")
		bills, err := s.fe.BillingItems(ctx, sub)
		require.NoError(t, err)
		require.Len(t, bills, 1)
		require.Contains(t, bills[0], "deletionTime")
		require.Equal(t, "Succeeded", notified(t, del.Operation)["status"])
	})

	require.Empty(t, s.scan(), "nothing is left pending")
	s.requireNoLockLeft(sub)
}

// todays writes a request's items in today's shape, under the frontend's
// lock: the operation, then the resource's item (one per key, its id
// derived from it).
func (s *handlerStack) todays(sub, request, key, internalID string) frontend.Result {
	s.t.Helper()
	ctx := context.Background()
	status := map[bool]string{true: "Deleting", false: "Accepted"}[request == "Delete"]
	id := fmt.Sprintf("today-%d", time.Now().UnixNano())
	resID := "res-" + strings.ToLower(key[strings.LastIndex(key, "/")+1:])
	release := s.holdLock(sub)
	defer release()
	now := time.Now().UTC()
	require.NoError(s.t, s.fe.PutOperation(ctx, frontend.Operation{ID: id, PartitionKey: sub, Request: request, Status: status,
		ExternalID: key, InternalID: internalID, StartTime: now, LastTransitionTime: now,
		OperationID:     "/subscriptions/" + sub + "/providers/Microsoft.RedHatOpenShift/locations/eastus/hcpOperationsStatus/" + id,
		NotificationURI: s.armURL + "/notify/" + id}))
	require.NoError(s.t, s.fe.PutResource(ctx, frontend.Resource{ID: resID, PartitionKey: sub, Key: key, InternalID: internalID,
		ActiveOperationID: id, ProvisioningState: status}))
	return frontend.Result{Operation: id, Request: request, Resource: resID}
}
