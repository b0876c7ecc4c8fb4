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
	"github.com/opstatus/opstatus/dev/testenv"
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
