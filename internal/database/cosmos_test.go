package database_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// newDatabase creates a database of the test's own on the shared Cosmos
// test server, with the production containers (lockTTL on Locks), and
// returns its name and a frontend writing to it.
func newDatabase(t *testing.T, lockTTL time.Duration) (string, *frontend.Frontend) {
	t.Helper()
	cosmos := testenv.SharedCosmos(t)
	name := testenv.DatabaseName(t)
	require.NoError(t, frontend.CreateSchema(t.Context(), cosmos.Endpoint, cosmos.Key, name, lockTTL))
	fe, err := frontend.New(cosmos.Endpoint, cosmos.Key, name)
	require.NoError(t, err)
	return name, fe
}

// cosmosConfig configures a client of database name on the shared server,
// whose certificate it does not verify.
func cosmosConfig(t *testing.T, name string) database.CosmosConfig {
	t.Helper()
	cosmos := testenv.SharedCosmos(t)
	return database.CosmosConfig{
		Endpoint: cosmos.Endpoint, Database: name, Key: cosmos.Key, InsecureSkipVerify: true,
		OperationsContainer: "Operations", ResourcesContainer: "Resources", LocksContainer: "Locks",
		BillingContainer: "Billing",
	}
}

func newClient(t *testing.T, cfg database.CosmosConfig) *database.CosmosClient {
	t.Helper()
	c, err := database.NewCosmosClient(cfg)
	require.NoError(t, err)
	return c
}

// newDB creates a database of the test's own and returns a client of it
// that reads pageSize items a page, and a frontend.
func newDB(t *testing.T, pageSize int32) (*database.CosmosClient, *frontend.Frontend) {
	t.Helper()
	name, fe := newDatabase(t, 3*time.Second)
	cfg := cosmosConfig(t, name)
	cfg.PageSize = pageSize
	return newClient(t, cfg), fe
}

func TestCosmosPendingOperationsPagesThroughEverySubscription(t *testing.T) {
	ctx := context.Background()
	db, fe := newDB(t, 40)
	statuses := []string{"Accepted", "Provisioning", "Updating", "Deleting", "Succeeded", "Failed", "Canceled"}
	var want []string
	for i := range 210 {
		sub := fmt.Sprintf("SUB-%d", i%3)
		op := frontend.Operation{
			ID: fmt.Sprintf("op-%03d", i), PartitionKey: sub, Request: "Create",
			ExternalID: "/subscriptions/" + sub + "/x", InternalID: "/api/clusters_mgmt/v1/clusters/c" + fmt.Sprint(i),
			Status: statuses[i%len(statuses)],
		}
		if i%10 == 4 { // terminal with a notification still to send
			op.Status, op.NotificationURI = "Succeeded", "https://arm.example/notify"
		}
		require.NoError(t, fe.PutOperation(ctx, op))
		if !arm.ProvisioningState(op.Status).IsTerminal() || op.NotificationURI != "" {
			want = append(want, strings.ToLower(sub)+"/"+op.ID)
		}
	}
	list := func() []string {
		var got []string
		for p, err := range db.PendingOperations(ctx) {
			require.NoError(t, err)
			got = append(got, p.PartitionKey+"/"+p.ID)
		}
		return got
	}
	got := list()
	// scan reads the listing twice and relies on the order holding.
	require.Equal(t, got, list(), "the same order from one listing to the next")
	slices.Sort(got)
	slices.Sort(want)
	require.Greater(t, len(want), 40*2, "the test must span several pages")
	require.Equal(t, want, got)
}

func TestCosmosUnavailable(t *testing.T) {
	c, err := database.NewCosmosClient(database.CosmosConfig{
		Endpoint: "https://127.0.0.1:1/", Database: "x", Key: testenv.CosmosEmulatorKey,
		OperationsContainer: "Operations", ResourcesContainer: "Resources", LocksContainer: "Locks",
		BillingContainer: "Billing",
	})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = c.GetOperation(ctx, "sub", "op")
	require.ErrorIs(t, err, database.ErrUnavailable)
}

func TestDocumentsKeepUnknownFields(t *testing.T) {
	in := `{"id":"op","partitionKey":"s","request":"Delete","status":"Deleting","custom":{"n":[1,2]},"_rid":"x","_etag":"\"7\""}`
	var op database.Operation
	require.NoError(t, json.Unmarshal([]byte(in), &op))
	require.Equal(t, "\"7\"", string(op.ETag))
	op.Status = arm.ProvisioningStateSucceeded
	out, err := json.Marshal(op)
	require.NoError(t, err)
	require.JSONEq(t, `{"id":"op","partitionKey":"s","request":"Delete","status":"Succeeded","custom":{"n":[1,2]}}`, string(out))

	var bad database.Operation
	err = json.Unmarshal([]byte(`{"id":"op","status":5}`), &bad)
	require.ErrorContains(t, err, "operation item")
}

// TestErrorIsWrittenBackAsRead: an error opstatus does not change keeps
// what the frontend nested in it; one opstatus sets replaces it whole.
func TestErrorIsWrittenBackAsRead(t *testing.T) {
	const frontendError = `{"code":"Conflict","message":"m","innererror":{"trace":"t"},` +
		`"details":[{"code":"d","message":"dm","additionalInfo":[{"type":"x"}]}]}`
	in := `{"id":"op","partitionKey":"s","request":"Create","status":"Failed","notificationUri":"https://arm.example/n",` +
		`"error":` + frontendError + `,"_etag":"\"1\""}`

	var op database.Operation
	require.NoError(t, json.Unmarshal([]byte(in), &op))
	op.NotificationURI = ""
	out, err := json.Marshal(op)
	require.NoError(t, err)
	var got map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(out, &got))
	require.JSONEq(t, frontendError, string(got["error"]))
	require.NotContains(t, got, "notificationUri")

	op.Error = &arm.CloudErrorBody{Code: arm.CodeInternalServerError, Message: "new"}
	out, err = json.Marshal(op)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(out, &got))
	require.JSONEq(t, `{"code":"InternalServerError","message":"new"}`, string(got["error"]))

	op.Error = nil
	out, err = json.Marshal(op)
	require.NoError(t, err)
	got = nil
	require.NoError(t, json.Unmarshal(out, &got))
	require.NotContains(t, got, "error")

	t.Run("through the Cosmos server", func(t *testing.T) {
		ctx := context.Background()
		db, fe := newDB(t, 0)
		require.NoError(t, fe.PutRawOperation(ctx, "sub1", []byte(
			`{"id":"op1","partitionKey":"sub1","request":"Create","status":"Failed","notificationUri":"https://arm.example/n","error":`+frontendError+`}`)))
		read, err := db.GetOperation(ctx, "sub1", "op1")
		require.NoError(t, err)
		read.NotificationURI = ""
		_, err = db.ReplaceOperation(ctx, read)
		require.NoError(t, err)
		raw, err := fe.Operation(ctx, "sub1", "op1")
		require.NoError(t, err)
		stored, err := json.Marshal(raw["error"])
		require.NoError(t, err)
		require.JSONEq(t, frontendError, string(stored))
	})
}

// BenchmarkDecodeOperationItem is what GetOperation does with a read item
// of about 1 KB, the common case of every poll.
func BenchmarkDecodeOperationItem(b *testing.B) {
	item := []byte(`{"id":"0d9f3a52-8f0e-4a44-9a7e-1b7c2f6d5e40","partitionKey":"2b2c1b4e-5d55-4a1e-9c1c-3f0e6f1d2a11",` +
		`"tenantId":"72f988bf-86f1-41af-91ab-2d7cd011db47","clientId":"04b07795-8ddb-461a-bbee-02f9e1bf7b46","request":"Create",` +
		`"externalId":"/subscriptions/2b2c1b4e-5d55-4a1e-9c1c-3f0e6f1d2a11/resourceGroups/rg-0001/providers/Microsoft.RedHatOpenShift/hcpOpenShiftClusters/cluster-0001",` +
		`"internalId":"/api/aro_hcp/v1alpha1/clusters/2f6a9d0c5b7e4e1f8a3b",` +
		`"operationId":"/subscriptions/2b2c1b4e-5d55-4a1e-9c1c-3f0e6f1d2a11/providers/Microsoft.RedHatOpenShift/locations/eastus/hcpOperationStatuses/0d9f3a52-8f0e-4a44-9a7e-1b7c2f6d5e40",` +
		`"notificationUri":"","startTime":"2026-11-30T20:00:00Z","lastTransitionTime":"2026-11-30T20:00:00Z","status":"Provisioning",` +
		`"_rid":"abcdEFGHijk=","_self":"dbs/abcd==/colls/abcdEF==/docs/abcdEFGHijk=/","_etag":"\"0000a1b2-0000-0000-0000-656789abcdef\"",` +
		`"_attachments":"attachments/","_ts":1764532800}`)
	b.ReportAllocs()
	for b.Loop() {
		var op database.Operation
		if err := op.UnmarshalJSON(item); err != nil {
			b.Fatal(err)
		}
	}
}
