package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/clustersim"
	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/internal/testenv"
)

const (
	subA = "aaaaaaaa-0000-4000-8000-000000000001"
	subB = "bbbbbbbb-0000-4000-8000-000000000002"
	subC = "cccccccc-0000-4000-8000-000000000003"
)

func clusterKey(sub, name string) string {
	return "/subscriptions/" + sub + "/resourceGroups/rg/providers/Microsoft.RedHatOpenShift/hcpOpenShiftClusters/" + name
}

// seed writes an operation and its resource as the frontend does.
func (s *handlerStack) seed(sub, opID, request, status, key, internalID string) {
	s.t.Helper()
	ctx := context.Background()
	// The handler counts deadlines by its own clock, not the simulator's.
	now := time.Now().UTC()
	require.NoError(s.t, s.fe.PutOperation(ctx, frontend.Operation{
		ID: opID, PartitionKey: sub, Request: request, Status: status,
		ExternalID: key, InternalID: internalID, StartTime: now, LastTransitionTime: now,
		OperationID:     "/subscriptions/" + sub + "/providers/Microsoft.RedHatOpenShift/locations/eastus/hcpOperationStatuses/" + opID,
		NotificationURI: s.armURL + "/notify/" + opID,
		Extra:           map[string]any{"frontendOnly": "kept"},
	}))
	require.NoError(s.t, s.fe.PutResource(ctx, frontend.Resource{
		ID: "res-" + opID, PartitionKey: sub, Key: key, InternalID: internalID,
		ActiveOperationID: opID, ProvisioningState: status,
	}))
}

// TestHandlerEndToEnd runs scan and poll through the built handler, with
// the Operations items in their subscriptions' partitions and in one fixed
// partition: the locks, Resources items and messages are the
// subscriptions' either way.
func TestHandlerEndToEnd(t *testing.T) {
	for _, mode := range partitionModes {
		t.Run(mode.name, func(t *testing.T) { handlerEndToEnd(t, mode.env) })
	}
}

func handlerEndToEnd(t *testing.T, env []string) {
	s := startStack(t, env...)
	ctx := context.Background()
	sec := time.Second

	// subA: a create. subB: a delete of a cluster with a node pool.
	// subC: a create whose subscription the frontend has locked.
	require.NoError(t, s.sim.AddCluster("ca", clustersim.Script{Pending: clustersim.Duration(sec), Installing: clustersim.Duration(10 * sec)}))
	s.seed(subA, "op-create", "Create", "Accepted", clusterKey(subA, "ca"), "/api/aro_hcp/v1alpha1/clusters/ca")
	require.NoError(t, s.sim.AddCluster("cb", clustersim.Script{}))
	require.NoError(t, s.sim.AddNodePool("cb", "np1", clustersim.Script{}))
	s.seed(subB, "op-delete", "Delete", "Deleting", clusterKey(subB, "cb"), "/api/clusters_mgmt/v1/clusters/cb")
	require.NoError(t, s.fe.PutResource(ctx, frontend.Resource{ID: "res-np1", PartitionKey: subB, Key: clusterKey(subB, "cb") + "/nodePools/np1",
		InternalID: "/api/aro_hcp/v1alpha1/clusters/cb/node_pools/np1", ProvisioningState: "Succeeded"}))
	require.NoError(t, s.sim.AddCluster("cc", clustersim.Script{Installing: clustersim.Duration(time.Hour)}))
	s.seed(subC, "op-locked", "Create", "Accepted", clusterKey(subC, "cc"), "/api/aro_hcp/v1alpha1/clusters/cc")
	// Finished operations, one with its notification still to send.
	for i, sub := range []string{subA, subB, subC} {
		require.NoError(t, s.fe.PutOperation(ctx, frontend.Operation{ID: fmt.Sprintf("old-%d", i), PartitionKey: sub,
			Request: "Create", Status: "Succeeded", ExternalID: clusterKey(sub, "old"), InternalID: "/api/aro_hcp/v1alpha1/clusters/old"}))
	}
	require.NoError(t, s.fe.PutOperation(ctx, frontend.Operation{ID: "unnotified", PartitionKey: subB, Request: "Create", Status: "Failed",
		ExternalID: clusterKey(subB, "f"), InternalID: "/api/aro_hcp/v1alpha1/clusters/f", NotificationURI: s.armURL + "/notify/unnotified",
		LastTransitionTime: time.Now().UTC()}))

	var listed []string
	for _, m := range s.scan() {
		listed = append(listed, m["subscriptionId"]+"/"+m["operationId"])
	}
	slices.Sort(listed)
	require.Equal(t, []string{subA + "/op-create", subB + "/op-delete", subB + "/unnotified", subC + "/op-locked"}, listed,
		"scan lists exactly the pending operations across subscriptions")

	// The create: Accepted while pending, then Provisioning, then Succeeded.
	require.Equal(t, "unchanged", s.pollOp(subA, "op-create"))
	require.Equal(t, "Accepted", s.opStatus(subA, "op-create"))
	s.clock.Advance(2 * sec)
	require.Equal(t, "updated", s.pollOp(subA, "op-create"))
	require.Equal(t, "Provisioning", s.opStatus(subA, "op-create"))
	res, err := s.fe.Resource(ctx, subA, "res-op-create")
	require.NoError(t, err)
	require.Equal(t, "Provisioning", res["provisioningState"])
	require.Equal(t, "unchanged", s.pollOp(subA, "op-create"))
	s.clock.Advance(20 * sec)
	require.Equal(t, "updated", s.pollOp(subA, "op-create"))
	op, err := s.fe.Operation(ctx, subA, "op-create")
	require.NoError(t, err)
	require.Equal(t, "Succeeded", op["status"])
	require.Equal(t, "kept", op["frontendOnly"], "unknown fields survive")
	require.NotContains(t, op, "notificationUri", "notified once, then cleared")
	res, err = s.fe.Resource(ctx, subA, "res-op-create")
	require.NoError(t, err)
	require.Equal(t, "Succeeded", res["provisioningState"])
	require.NotContains(t, res, "activeOperationId")
	require.Equal(t, "done", s.pollOp(subA, "op-create"))

	// The delete: Deleting while uninstalling, then gone with its node pool.
	require.NoError(t, s.sim.DeleteCluster("cb", 5*sec))
	require.Equal(t, "unchanged", s.pollOp(subB, "op-delete"))
	s.clock.Advance(10 * sec)
	require.Equal(t, "deleted", s.pollOp(subB, "op-delete"))
	require.Equal(t, "Succeeded", s.opStatus(subB, "op-delete"))
	for _, id := range []string{"res-op-delete", "res-np1"} {
		item, err := s.fe.Resource(ctx, subB, id)
		require.NoError(t, err)
		require.Nil(t, item, "%s should be deleted", id)
	}

	// The locked subscription: left untouched while the frontend holds it.
	release := s.holdLock(subC)
	require.Equal(t, "deferred", s.pollOp(subC, "op-locked"))
	require.Equal(t, "Accepted", s.opStatus(subC, "op-locked"))
	release()
	require.Equal(t, "updated", s.pollOp(subC, "op-locked"))
	require.Equal(t, "Provisioning", s.opStatus(subC, "op-locked"))

	// The leftover notification is sent on the next poll.
	require.Equal(t, "notified", s.pollOp(subB, "unnotified"))

	var notified []string
	for _, n := range s.arm.Bodies() {
		notified = append(notified, fmt.Sprint(n["name"], "=", n["status"]))
	}
	slices.Sort(notified)
	require.Equal(t, []string{"op-create=Succeeded", "op-delete=Succeeded", "unnotified=Failed"}, notified)

	var msgs []string
	for _, m := range s.scan() {
		msgs = append(msgs, m["operationId"])
	}
	require.Equal(t, []string{"op-locked"}, msgs, "only the unfinished operation is left")
}

// In a fixed Operations partition, the built handler acts on an
// operation only under the subscription of its externalId: a message that
// names another one is invalid, and an operation whose externalId names
// none is skipped by scan and invalid in poll. Nothing is called, locked or
// written for either.
func TestFixedPartitionOperationsOfNoSubscription(t *testing.T) {
	s := startStack(t, partitionModes[1].env...)
	ctx := context.Background()
	require.NoError(t, s.sim.AddCluster("c", clustersim.Script{Installing: clustersim.Duration(time.Hour)}))
	s.seed(subA, "op-a", "Create", "Accepted", clusterKey(subA, "c"), "/api/aro_hcp/v1alpha1/clusters/c")
	require.NoError(t, s.fe.PutOperation(ctx, frontend.Operation{ID: "op-none", PartitionKey: subA, Request: "Create", Status: "Accepted",
		ExternalID: "/resourceGroups/rg/providers/Microsoft.RedHatOpenShift/hcpOpenShiftClusters/c", InternalID: "/api/aro_hcp/v1alpha1/clusters/c"}))
	item, err := s.fe.Operation(ctx, subA, "op-none")
	require.NoError(t, err)
	require.Equal(t, "workaround", item["partitionKey"])
	before := s.snapshot(opRef(subA, "op-a"), opRef(subA, "op-none"), resRef(subA, "res-op-a"))

	r := s.invoke("scan", "scan-skips", map[string]any{"Data": map[string]any{"timer": map[string]any{"IsPastDue": false}}, "Metadata": map[string]any{}})
	require.Equal(t, http.StatusOK, r.Status, r.Logs)
	var msgs []struct{ Operations []map[string]string }
	require.NoError(t, json.Unmarshal(r.Outputs["operations"], &msgs))
	require.Len(t, msgs, 1)
	require.Equal(t, []map[string]string{{"subscriptionId": subA, "operationId": "op-a"}}, msgs[0].Operations,
		"the message names the externalId's subscription")
	s.requireLog(t, r, testenv.HostError, "operation skipped", "subscription", "op-none")

	require.Equal(t, "invalid", s.pollOp(subB, "op-a"), "a message naming another subscription than the externalId's")
	require.Equal(t, "invalid", s.pollOp("workaround", "op-a"), "a message naming the partition")
	require.Equal(t, "invalid", s.pollOp(subA, "op-none"))
	require.Zero(t, s.csRequests())
	s.requireUnchanged(before)
	for _, sub := range []string{subA, subB, "workaround"} {
		s.requireNoLockLeft(sub)
	}
	require.Equal(t, "updated", s.pollOp(strings.ToUpper(subA), "op-a"), "its own subscription, in any case")
	require.Equal(t, "Provisioning", s.opStatus(subA, "op-a"))
}

// The seed frontend's layout, every Operations item in "workaround", read
// with COSMOS_OPERATIONS_PARTITION_KEY unset: the partition key is no
// subscription, and an item whose externalId names another one breaks the
// contract. scan skips it (reason subscription, so that the misconfiguration
// shows in opstatus.scan.skipped), pickup leaves it, poll answers invalid;
// nothing is called, locked or written, under "workaround" least of all.
func TestOperationsOfAFixedPartitionNotConfigured(t *testing.T) {
	s := startStack(t, pickupEnv(testenv.SharedCosmos(t).Endpoint)...)
	s.fe.OperationsPartition = "workaround"
	ctx := context.Background()
	require.NoError(t, s.sim.AddCluster("a", clustersim.Script{}))
	require.NoError(t, s.sim.AddCluster("b", clustersim.Script{}))
	// op-a is new, pickup's; op-b is older than an interval, scan's.
	s.seed(subA, "op-a", "Create", "Accepted", clusterKey(subA, "a"), "/api/aro_hcp/v1alpha1/clusters/a")
	s.seed(subA, "op-b", "Create", "Provisioning", clusterKey(subA, "b"), "/api/aro_hcp/v1alpha1/clusters/b")
	b, err := s.fe.Operation(ctx, subA, "op-b")
	require.NoError(t, err)
	b["startTime"] = time.Now().Add(-30 * time.Minute).UTC().Format(time.RFC3339Nano)
	body, err := json.Marshal(b)
	require.NoError(t, err)
	require.NoError(t, s.fe.PutRawOperation(ctx, "workaround", body))
	a, err := s.fe.Operation(ctx, subA, "op-a")
	require.NoError(t, err)
	require.Equal(t, "workaround", a["partitionKey"])
	before := s.snapshot(opRef(subA, "op-a"), opRef(subA, "op-b"), resRef(subA, "res-op-a"), resRef(subA, "res-op-b"))

	r := s.invoke("scan", "scan-skips", map[string]any{"Data": map[string]any{"timer": map[string]any{"IsPastDue": false}}, "Metadata": map[string]any{}})
	require.Equal(t, http.StatusOK, r.Status, r.Logs)
	var msgs []any
	require.NoError(t, json.Unmarshal(r.Outputs["operations"], &msgs))
	require.Empty(t, msgs, "no message names the partition as a subscription")
	for _, id := range []string{"op-a", "op-b"} {
		s.requireLog(t, r, testenv.HostError, "operation skipped", "subscription", "workaround", id, "COSMOS_OPERATIONS_PARTITION_KEY")
	}

	r, raw := s.post("pickup", pickupBody(t, a))
	require.Equal(t, http.StatusOK, r.Status, string(raw))
	require.JSONEq(t, `{}`, string(r.ReturnValue))
	s.requireLog(t, r, anyLevel, "picked up", "documents=1", "operations=0", "unusable=1")

	for _, id := range []string{"op-a", "op-b"} {
		require.Equal(t, "invalid", s.pollOp("workaround", id), "a message naming the partition, as scan sent before")
		require.Equal(t, "gone", s.pollOp(subA, id), "no item in the subscription's partition")
	}
	require.Zero(t, s.csRequests())
	s.requireUnchanged(before)
	for _, sub := range []string{subA, "workaround"} {
		s.requireNoLockLeft(sub)
	}
}

func TestHandlerRejectsMalformedMessages(t *testing.T) {
	s := startStack(t)
	for _, msg := range []string{`not json`, `{"subscriptionId":"","operationId":"x"}`, `{}`, `[]`} {
		r := s.poll(msg)
		require.Equal(t, http.StatusBadRequest, r.Status, msg)
		s.requireLog(t, r, testenv.HostError, "invocation failed")
	}
	resp, err := http.Get(s.url + "/")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "still serving")
}

func TestHandlerStopsOnSIGTERM(t *testing.T) {
	s := startStack(t)
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGTERM))
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case err := <-done:
		require.NoError(t, err, "exit status after SIGTERM")
	case <-time.After(30 * time.Second):
		t.Fatal("handler did not stop on SIGTERM")
	}
}

func TestHandlerNamesAMissingSetting(t *testing.T) {
	bin := testenv.Build(t, ".")
	for _, tc := range []struct{ unset, want string }{
		{"COSMOS_ENDPOINT", "COSMOS_ENDPOINT"},
		{"CLUSTER_SERVICE_URL", "CLUSTER_SERVICE_URL"},
		{"AZURE_LOCATION", "AZURE_LOCATION"},
		{"FUNCTIONS_CUSTOMHANDLER_PORT", "FUNCTIONS_CUSTOMHANDLER_PORT"},
	} {
		cmd := exec.Command(bin)
		for _, kv := range []string{"FUNCTIONS_CUSTOMHANDLER_PORT=1234", "COSMOS_ENDPOINT=https://127.0.0.1:1",
			"COSMOS_DATABASE=d", "AZURE_LOCATION=eastus", "CLUSTER_SERVICE_URL=http://127.0.0.1:2", "COSMOS_KEY=secret-key-value"} {
			if !strings.HasPrefix(kv, tc.unset+"=") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit)
		require.Equal(t, 1, exit.ExitCode())
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		require.Len(t, lines, 1, string(out))
		require.Contains(t, lines[0], tc.want)
		require.NotContains(t, string(out), "secret-key-value")
	}
}

// TestDeadlineThroughTheHandler: a Create still installing past its
// deadline (OPERATION_DEADLINE_CREATE) is ended Failed by the built
// handler, and its Resources item follows; one inside it is left alone.
func TestDeadlineThroughTheHandler(t *testing.T) {
	s := startStack(t, "OPERATION_DEADLINE_CREATE=30m")
	require.NoError(t, s.sim.AddCluster("slow", clustersim.Script{Installing: clustersim.Duration(24 * time.Hour)}))
	ctx := context.Background()
	for id, age := range map[string]time.Duration{"late": 31 * time.Minute, "early": 29 * time.Minute} {
		start := time.Now().UTC().Add(-age)
		key := clusterKey(subA, id)
		require.NoError(t, s.fe.PutOperation(ctx, frontend.Operation{ID: id, PartitionKey: subA, Request: "Create", Status: "Provisioning",
			ExternalID: key, InternalID: "/api/aro_hcp/v1alpha1/clusters/slow", StartTime: start, LastTransitionTime: start}))
		require.NoError(t, s.fe.PutResource(ctx, frontend.Resource{ID: "res-" + id, PartitionKey: subA, Key: key,
			InternalID: "/api/aro_hcp/v1alpha1/clusters/slow", ActiveOperationID: id, ProvisioningState: "Provisioning"}))
	}
	s.clock.Advance(time.Hour) // the simulator's cluster is installing

	require.Equal(t, "updated", s.pollOp(subA, "late"))
	op, err := s.fe.Operation(ctx, subA, "late")
	require.NoError(t, err)
	require.Equal(t, "Failed", op["status"])
	require.Equal(t, "InternalServerError", op["error"].(map[string]any)["code"])
	require.Contains(t, op["error"].(map[string]any)["message"], "deadline of 30m0s")
	res, err := s.fe.Resource(ctx, subA, "res-late")
	require.NoError(t, err)
	require.Equal(t, "Failed", res["provisioningState"])

	require.Equal(t, "unchanged", s.pollOp(subA, "early"))
	require.Equal(t, "Provisioning", s.opStatus(subA, "early"))
}

// A Cluster Service budget without the container of its ledger stops the
// handler at start, with one line: the processes could not share it.
func TestHandlerRefusesABudgetWithoutItsLedger(t *testing.T) {
	bin := testenv.Build(t, ".")
	cmd := exec.Command(bin)
	cmd.Env = []string{"FUNCTIONS_CUSTOMHANDLER_PORT=1234", "COSMOS_ENDPOINT=https://127.0.0.1:1", "COSMOS_DATABASE=d",
		"AZURE_LOCATION=eastus", "CLUSTER_SERVICE_URL=http://127.0.0.1:2",
		"CLUSTER_SERVICE_MAX_IN_FLIGHT=64", "CLUSTER_SERVICE_BUDGET=256"}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	require.Equal(t, 1, exit.ExitCode())
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Len(t, lines, 1, string(out))
	require.Contains(t, lines[0], "CLUSTER_SERVICE_BUDGET: needs COSMOS_LEASES_CONTAINER")
}
