package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/clustersim"
	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/internal/testenv"
)

// TestHandlerNamesAMissingContainer: the built handler, with
// COSMOS_RESOURCES_CONTAINER naming a container that does not exist, stops
// at start with exit status 1 and one line on stderr naming the setting and
// the container, instead of serving polls that would take every finished
// delete's Resources items for gone.
func TestHandlerNamesAMissingContainer(t *testing.T) {
	bin := testenv.Build(t, ".")
	cosmos := testenv.SharedCosmos(t)
	dbName := testenv.DatabaseName(t)
	require.NoError(t, frontend.CreateSchema(t.Context(), cosmos.Endpoint, cosmos.Key, dbName, 10*time.Second))
	free, err := testenv.FreePort()
	require.NoError(t, err)
	root, err := testenv.RepoRoot()
	require.NoError(t, err)

	// Bounds the wait for an exit that may never come.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Dir = root
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"FUNCTIONS_CUSTOMHANDLER_PORT=" + strconv.Itoa(free),
		"COSMOS_ENDPOINT=" + cosmos.Endpoint,
		"COSMOS_DATABASE=" + dbName,
		"COSMOS_KEY=" + cosmos.Key,
		"COSMOS_INSECURE_SKIP_VERIFY=true",
		"COSMOS_RESOURCES_CONTAINER=Resourcez",
		"AZURE_LOCATION=eastus",
		"CLUSTER_SERVICE_URL=http://127.0.0.1:1",
	}
	stdout, stderr := &testenv.SyncBuffer{}, &testenv.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	err = cmd.Run()
	require.NoError(t, ctx.Err(), "the handler did not stop; stdout:\n%s\nstderr:\n%s", stdout, stderr)
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	require.Equal(t, 1, exit.ExitCode())
	require.Equal(t, "opstatus: COSMOS_RESOURCES_CONTAINER=Resourcez: no such container in Cosmos DB database "+dbName+"\n",
		stderr.String(), "one line on stderr")
	require.NotContains(t, stdout.String()+stderr.String(), cosmos.Key)
}

// TestHandlerRefusesAPartitionKeyItCannotFill: the built handler, with
// COSMOS_BILLING_CONTAINER naming a container keyed by a path opstatus
// cannot fill, stops at start with exit status 1 and one line on stderr
// naming the setting, the container and its path, instead of deferring
// every succeeded cluster Create's billing write for good. Against both
// ARO-HCP layouts it starts.
func TestHandlerRefusesAPartitionKeyItCannotFill(t *testing.T) {
	bin := testenv.Build(t, ".")
	cosmos := testenv.SharedCosmos(t)
	root, err := testenv.RepoRoot()
	require.NoError(t, err)
	specs := append(testenv.Layout2024.Containers(10*time.Second),
		testenv.ContainerSpec{Name: "BillingById", PartitionKeyPath: "/id"})
	db := cosmos.NewDatabase(t, specs...)
	start := func(t *testing.T, ctx context.Context, billing string) (*exec.Cmd, *testenv.SyncBuffer, *testenv.SyncBuffer) {
		free, err := testenv.FreePort()
		require.NoError(t, err)
		cmd := exec.CommandContext(ctx, bin)
		cmd.Dir = root
		cmd.Env = []string{
			"PATH=" + os.Getenv("PATH"),
			"FUNCTIONS_CUSTOMHANDLER_PORT=" + strconv.Itoa(free),
			"COSMOS_ENDPOINT=" + cosmos.Endpoint,
			"COSMOS_DATABASE=" + db.Name,
			"COSMOS_KEY=" + cosmos.Key,
			"COSMOS_INSECURE_SKIP_VERIFY=true",
			"COSMOS_BILLING_CONTAINER=" + billing,
			"AZURE_LOCATION=eastus",
			"CLUSTER_SERVICE_URL=http://127.0.0.1:1",
		}
		stdout, stderr := &testenv.SyncBuffer{}, &testenv.SyncBuffer{}
		cmd.Stdout, cmd.Stderr = stdout, stderr
		return cmd, stdout, stderr
	}

	t.Run("refused", func(t *testing.T) {
		// Bounds the wait for an exit that may never come.
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		cmd, stdout, stderr := start(t, ctx, "BillingById")
		err := cmd.Run()
		require.NoError(t, ctx.Err(), "the handler did not stop; stdout:\n%s\nstderr:\n%s", stdout, stderr)
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit)
		require.Equal(t, 1, exit.ExitCode())
		require.Equal(t, "opstatus: COSMOS_BILLING_CONTAINER=BillingById: container BillingById of Cosmos DB database "+db.Name+
			" has partition key path /id, which opstatus cannot fill in Billing items (it fills /partitionKey or /subscriptionId)\n",
			stderr.String(), "one line on stderr")
	})

	t.Run("2024-10 layout", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		cmd, stdout, stderr := start(t, ctx, "Billing")
		require.NoError(t, cmd.Start())
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		// The check runs while the server starts, against a local server
		// in milliseconds: a process it stops is gone well within this.
		select {
		case err := <-exited:
			t.Fatalf("the handler stopped: %v; stdout:\n%s\nstderr:\n%s", err, stdout, stderr)
		case <-time.After(3 * time.Second):
		}
		require.NotContains(t, stderr.String()+stdout.String(), "cannot fill")
		cancel()
		<-exited
	})
}

// TestMissingContainerDefersAFinishedDelete: when the Resources container
// goes missing under a running handler, a delete that Cluster Service has
// finished is not taken for one whose Resources items are gone: the poll is
// deferred with an error naming the container, the operation stays
// Deleting, and ARM hears nothing.
func TestMissingContainerDefersAFinishedDelete(t *testing.T) {
	s := startStack(t)
	ctx := t.Context()
	require.NoError(t, s.sim.AddCluster("cg", clustersim.Script{}))
	s.seed(subA, "op-gone", "Delete", "Deleting", clusterKey(subA, "cg"), "/api/clusters_mgmt/v1/clusters/cg")
	require.NoError(t, s.sim.DeleteCluster("cg", time.Second))
	s.clock.Advance(2 * time.Second) // Cluster Service now answers its OCM 404

	cosmos := testenv.SharedCosmos(t)
	client, err := testenv.NewCosmosClient(cosmos.Endpoint, cosmos.Key)
	require.NoError(t, err)
	resources, err := client.NewContainer(s.db, frontend.ResourcesContainer)
	require.NoError(t, err)
	_, err = resources.Delete(ctx, nil)
	require.NoError(t, err)
	before := s.snapshot(opRef(subA, "op-gone"))

	r, _ := s.post("poll", envelope(pollData(fmt.Sprintf(`{"subscriptionId":%q,"operationId":%q}`, subA, "op-gone"))))
	require.Equal(t, http.StatusOK, r.Status, r.Logs)
	require.Equal(t, "deferred", outcome(t, r))
	s.requireLog(t, r, testenv.HostError, "operation left unchanged", "container or database not found",
		`container \"`+frontend.ResourcesContainer+`\" of database \"`+s.db+`\"`)
	s.requireUnchanged(before)
	require.Equal(t, "Deleting", s.opStatus(subA, "op-gone"))
	require.Empty(t, s.arm.Bodies())
	s.requireNoLockLeft(subA)
}
