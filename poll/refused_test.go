package poll_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/functions"
	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/internal/database/databasetesting"
	"github.com/opstatus/opstatus/poll"
)

// pollErrors polls opID and returns its outcome and the Error lines logged.
func (f *fixture) pollErrors(t *testing.T, opID string) (poll.Outcome, []map[string]any) {
	t.Helper()
	var buf bytes.Buffer
	inv := &functions.Invocation{
		ID:       "inv-1",
		Function: "poll",
		Data:     map[string]json.RawMessage{"operation": json.RawMessage(`{"subscriptionId":"` + sub + `","operationId":"` + opID + `"}`)},
		Metadata: map[string]json.RawMessage{},
		Log:      slog.New(slog.NewJSONHandler(&buf, nil)),
	}
	res, err := f.fn.Handle(context.Background(), inv)
	require.NoError(t, err)
	var errors []map[string]any
	for line := range strings.Lines(buf.String()) {
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &rec))
		if rec["level"] == "ERROR" {
			errors = append(errors, rec)
		}
	}
	return only(t, res), errors
}

// refuse makes the in-memory client's call fail as Cosmos DB's refusal of
// it for good.
func (f *fixture) refuse(call databasetesting.Op, container string, status int) {
	hook := f.db.Hook
	f.db.Hook = func(c databasetesting.Op) error {
		if c == call {
			return &database.RefusedError{Container: container, StatusCode: status, Code: http.StatusText(status),
				Message: "PartitionKey extracted from document doesn't match the one specified in the header."}
		}
		return hook(c)
	}
}

// requireRefusalLogged requires one Error line, the refusal's, naming the
// container and the answer.
func requireRefusalLogged(t *testing.T, lines []map[string]any, container string, status int, msg string) {
	t.Helper()
	require.Len(t, lines, 1, "one Error line per operation and poll: %v", lines)
	line := lines[0]
	require.Contains(t, line["msg"], msg)
	require.Equal(t, container, line["container"])
	require.Equal(t, float64(status), line["status_code"])
	require.Contains(t, line["answer"], "PartitionKey extracted from document doesn't match")
	require.Equal(t, sub, line["subscription_id"])
	require.Equal(t, "op", line["operation_id"])
}

// A cluster Create whose billing write Cosmos DB refuses for good stays
// Provisioning until its deadline, an Error line and a count each poll;
// its deadline then ends it Failed without the billing write, the
// Resources item with it, and ARM is told.
func TestRefusedBillingCreateEndsByTheDeadline(t *testing.T) {
	f, _, reader := telemetryFixture(t)
	f.fn.Deadlines = poll.Deadlines{Create: 40 * time.Second}
	f.putOp(database.Operation{ID: "op", Request: arm.RequestCreate, Status: arm.ProvisioningStateProvisioning,
		TenantID: "tenant-1", StartTime: f.now.Add(-30 * time.Second), NotificationURI: f.armURL})
	f.db.PutResource(&database.Resource{ID: "r1", PartitionKey: sub, Key: clusterKey, InternalID: clusterCS,
		ActiveOperationID: "op", ProvisioningState: arm.ProvisioningStateProvisioning})
	f.cs.SetStatus(clusterCS, http.StatusOK, clusterStatus("ready"))
	f.refuse(databasetesting.OpCreateBilling, "Billing", http.StatusBadRequest)
	refusedKey := "opstatus.cosmos.refused{container=Billing,status_code=400}"

	for i := range 2 {
		outcome, lines := f.pollErrors(t, "op")
		require.Equal(t, poll.OutcomeDeferred, outcome)
		requireRefusalLogged(t, lines, "Billing", http.StatusBadRequest, "Cosmos DB refused a write for good; the operation is left unchanged")
		require.Equal(t, float64(i+1), metricPoints(t, reader)[refusedKey])
		require.Equal(t, arm.ProvisioningStateProvisioning, f.op(t, "op").Status)
		f.now = f.now.Add(5 * time.Second)
	}

	f.now = f.now.Add(time.Minute) // past the deadline
	outcome, lines := f.pollErrors(t, "op")
	require.Equal(t, poll.OutcomeUpdated, outcome)
	requireRefusalLogged(t, lines, "Billing", http.StatusBadRequest, "the operation, past its deadline, was written without it")
	op := f.op(t, "op")
	require.Equal(t, arm.ProvisioningStateFailed, op.Status)
	require.Equal(t, arm.CodeInternalServerError, op.Error.Code)
	require.Contains(t, op.Error.Message, "did not complete within its deadline of 40s")
	require.Empty(t, f.db.BillingItems(), "the cluster is left without a billing item")
	res := f.db.Resources()
	require.Len(t, res, 1)
	require.Equal(t, arm.ProvisioningStateFailed, res[0].ProvisioningState)
	require.Empty(t, res[0].ActiveOperationID)
	require.Len(t, f.arm.Bodies(), 1)
	points := metricPoints(t, reader)
	require.Equal(t, 3.0, points[refusedKey])
	require.Equal(t, 1.0, points["opstatus.operations.past_deadline{request=Create}"])
}

// A finished cluster Delete whose billing close Cosmos DB refuses ends, past
// its deadline, Failed as the deadline ends it: the billing item stays open
// and the Resources item is kept, Failed.
func TestRefusedBillingCloseEndsByTheDeadline(t *testing.T) {
	f := newFixture(t)
	f.fn.Deadlines = poll.Deadlines{Delete: time.Minute}
	f.putOp(database.Operation{ID: "op", Request: arm.RequestDelete, Status: arm.ProvisioningStateDeleting,
		StartTime: f.now.Add(-time.Hour)})
	f.db.PutResource(&database.Resource{ID: "r1", PartitionKey: sub, Key: clusterKey, InternalID: clusterCS,
		ActiveOperationID: "op", ProvisioningState: arm.ProvisioningStateDeleting})
	_, err := f.db.CreateBilling(context.Background(), &database.Billing{ID: database.BillingID(clusterKey, "abc"),
		SubscriptionID: sub, ResourceID: clusterKey, CreationTime: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)})
	require.NoError(t, err)
	f.cs.Delete(clusterCS) // gone
	f.refuse(databasetesting.OpReplaceBilling, "Billing", http.StatusRequestEntityTooLarge)

	outcome, lines := f.pollErrors(t, "op")
	require.Equal(t, poll.OutcomeUpdated, outcome)
	require.Len(t, lines, 1)
	require.Equal(t, float64(http.StatusRequestEntityTooLarge), lines[0]["status_code"])
	require.Equal(t, arm.ProvisioningStateFailed, f.op(t, "op").Status)
	require.Len(t, f.open(), 1, "the billing item stays open")
	res := f.db.Resources()
	require.Len(t, res, 1)
	require.Equal(t, arm.ProvisioningStateFailed, res[0].ProvisioningState)
}

// Past the deadline, a Resources write Cosmos DB refuses leaves the item as
// it is: the operation is written as decided, its billing with it.
func TestRefusedResourcesWriteEndsByTheDeadline(t *testing.T) {
	f := newFixture(t)
	f.fn.Deadlines = poll.Deadlines{Create: time.Minute}
	f.putOp(database.Operation{ID: "op", Request: arm.RequestCreate, Status: arm.ProvisioningStateProvisioning,
		StartTime: f.now.Add(-time.Hour)})
	f.db.PutResource(&database.Resource{ID: "r1", PartitionKey: sub, Key: clusterKey, InternalID: clusterCS,
		ActiveOperationID: "op", ProvisioningState: arm.ProvisioningStateProvisioning})
	f.cs.SetStatus(clusterCS, http.StatusOK, clusterStatus("ready"))
	f.refuse(databasetesting.OpReplaceResource, "Resources", http.StatusBadRequest)

	outcome, lines := f.pollErrors(t, "op")
	require.Equal(t, poll.OutcomeUpdated, outcome)
	requireRefusalLogged(t, lines, "Resources", http.StatusBadRequest, "written without it")
	require.Equal(t, arm.ProvisioningStateSucceeded, f.op(t, "op").Status)
	require.Len(t, f.open(), 1)
	res := f.db.Resources()
	require.Len(t, res, 1)
	require.Equal(t, arm.ProvisioningStateProvisioning, res[0].ProvisioningState, "left for a person")
	require.Equal(t, "op", res[0].ActiveOperationID)
}

// The operation's own write refused has nothing to go without: it stays as
// it is, past its deadline too, logged and counted once a poll.
func TestRefusedOperationWriteIsLoggedEachPoll(t *testing.T) {
	f := newFixture(t)
	f.fn.Deadlines = poll.Deadlines{Create: time.Minute}
	f.putOp(database.Operation{ID: "op", Request: arm.RequestCreate, Status: arm.ProvisioningStateProvisioning,
		StartTime: f.now.Add(-time.Hour)})
	f.cs.SetStatus(clusterCS, http.StatusOK, clusterStatus("installing"))
	f.refuse(databasetesting.OpReplaceOperation, "Operations", http.StatusRequestEntityTooLarge)
	outcome, lines := f.pollErrors(t, "op")
	require.Equal(t, poll.OutcomeDeferred, outcome)
	requireRefusalLogged(t, lines, "Operations", http.StatusRequestEntityTooLarge, "left unchanged")
	require.Equal(t, arm.ProvisioningStateProvisioning, f.op(t, "op").Status)
}

// Against Billing keyed by /partitionKey, as ARO-HCP created it in 2024-10,
// a succeeded Create writes its billing item with the subscription there.
func TestSucceededCreateBillsInThe2024Layout(t *testing.T) {
	f := newFixture(t)
	f.db.BillingKey = database.BillingByPartitionKey
	f.putCreate(t, arm.ProvisioningStateProvisioning)
	outcome, lines := f.pollErrors(t, "op")
	require.Equal(t, poll.OutcomeUpdated, outcome)
	require.Empty(t, lines)
	require.Equal(t, arm.ProvisioningStateSucceeded, f.op(t, "op").Status)
	var item map[string]any
	require.NoError(t, json.Unmarshal(f.db.RawBilling(sub, database.BillingID(clusterKey, "abc")), &item))
	require.Equal(t, sub, item["partitionKey"])
	require.Equal(t, sub, item["subscriptionId"])
}
