package hostemu

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/internal/testenv"
)

const cosmosHostJSON = `{"version": "2.0", "functionTimeout": "00:00:30",
  "customHandler": {"description": {"defaultExecutablePath": "fakehandler"}}}`

// pickupJSON is a cosmosDBTrigger function on the Operations container
// with leases in Leases; extra adds properties to the binding.
func pickupJSON(extra string) string {
	return `{"bindings": [{"name": "documents", "type": "cosmosDBTrigger", "direction": "in",
  "connection": "COSMOS", "databaseName": "%COSMOS_DATABASE%", "containerName": "Operations",
  "leaseContainerName": "Leases"` + extra + `}]}`
}

// fastCosmos shrinks the listeners' intervals so that a lease changes
// hands in seconds.
var fastCosmos = &CosmosTriggerOptions{
	FeedPollDelay: 50 * time.Millisecond, LeaseAcquireInterval: 100 * time.Millisecond,
	LeaseExpirationInterval: 2 * time.Second, LeaseRenewInterval: 400 * time.Millisecond,
	BootstrapRetry: 100 * time.Millisecond, ListenerRetryMin: 50 * time.Millisecond, ListenerRetryMax: 200 * time.Millisecond,
}

// cosmosEnv is a database of the test's own on the shared Cosmos test
// server, with the settings a pickup app needs.
type cosmosEnv struct {
	cosmos   *testenv.Cosmos
	db       *testenv.Database
	settings map[string]string
}

func newCosmosEnv(t *testing.T, withLeases bool) *cosmosEnv {
	t.Helper()
	cosmos := testenv.SharedCosmos(t)
	specs := []testenv.ContainerSpec{{Name: "Operations", PartitionKeyPath: "/partitionKey"}}
	if withLeases {
		specs = append(specs, testenv.ContainerSpec{Name: "Leases", PartitionKeyPath: "/id"})
	}
	db := cosmos.NewDatabase(t, specs...)
	return &cosmosEnv{cosmos: cosmos, db: db, settings: map[string]string{
		"COSMOS":          "AccountEndpoint=" + cosmos.Endpoint + ";AccountKey=" + cosmos.Key + ";DisableServerCertificateValidation=True;",
		"COSMOS_DATABASE": db.Name,
	}}
}

func (e *cosmosEnv) container(t *testing.T, name string) *azcosmos.ContainerClient {
	t.Helper()
	client, err := testenv.NewCosmosClient(e.cosmos.Endpoint, e.cosmos.Key)
	require.NoError(t, err)
	c, err := client.NewContainer(e.db.Name, name)
	require.NoError(t, err)
	return c
}

// write upserts an operation document.
func (e *cosmosEnv) write(t *testing.T, ids ...string) {
	t.Helper()
	for _, id := range ids {
		doc := map[string]any{"id": id, "partitionKey": "sub", "status": "Accepted",
			"startTime": "2025-03-01T10:00:00.123456789Z", "lastTransitionTime": "2025-03-01T12:00:00.5+02:00"}
		_, err := e.db.Containers["Operations"].UpsertItem(t.Context(), testenv.PK("sub"), testenv.MustJSON(t, doc), nil)
		require.NoError(t, err)
	}
}

// leases returns the documents of the Leases container.
func (e *cosmosEnv) leases(t *testing.T) []map[string]any {
	t.Helper()
	pager := e.container(t, "Leases").NewQueryItemsPager("SELECT * FROM c", azcosmos.NewPartitionKey(), nil)
	var out []map[string]any
	for pager.More() {
		p, err := pager.NextPage(t.Context())
		require.NoError(t, err)
		for _, raw := range p.Items {
			var m map[string]any
			require.NoError(t, json.Unmarshal(raw, &m))
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b map[string]any) int { return strings.Compare(fmt.Sprint(a["id"]), fmt.Sprint(b["id"])) })
	return out
}

// pickupCall is one invocation of pickup and what the host sent it.
type pickupCall struct {
	inv      Invocation
	ids      []string
	docs     []map[string]any
	arrayTxt string // the array's text, unquoted twice
	metadata map[string]json.RawMessage
	rawData  json.RawMessage
}

func pickups(t *testing.T, r *running) []pickupCall {
	t.Helper()
	var out []pickupCall
	for _, inv := range r.rec.of("pickup") {
		c := pickupCall{inv: inv}
		if len(inv.ReturnValue) == 0 {
			out = append(out, c) // no answer: the handler died
			continue
		}
		var req struct {
			Data     map[string]json.RawMessage
			Metadata map[string]json.RawMessage
		}
		require.NoError(t, json.Unmarshal(echoOf(t, inv).Body, &req))
		c.rawData, c.metadata = req.Data["documents"], req.Metadata
		var once string
		require.NoError(t, json.Unmarshal(c.rawData, &once), "Data.documents is a JSON string")
		require.NoError(t, json.Unmarshal([]byte(once), &c.arrayTxt), "holding a JSON string")
		require.NoError(t, json.Unmarshal([]byte(c.arrayTxt), &c.docs), "holding the array")
		for _, d := range c.docs {
			c.ids = append(c.ids, fmt.Sprint(d["id"]))
		}
		out = append(out, c)
	}
	return out
}

func allIDs(calls []pickupCall) []string {
	var ids []string
	for _, c := range calls {
		ids = append(ids, c.ids...)
	}
	return ids
}

func batches(calls []pickupCall) [][]string {
	var out [][]string
	for _, c := range calls {
		out = append(out, c.ids)
	}
	return out
}

// settle waits until the listeners have read the feed n more times, so
// that a check that nothing more came means something.
func settle(t *testing.T, r *running, n int64) {
	t.Helper()
	from := r.h.Counters().ChangeFeedReads
	require.Eventually(t, func() bool { return r.h.Counters().ChangeFeedReads >= from+n }, 30*time.Second, 10*time.Millisecond)
}

func eventually(t *testing.T, cond func() bool, msg string) {
	t.Helper()
	require.Eventually(t, cond, time.Minute, 20*time.Millisecond, msg)
}

func TestCosmosTriggerDelivers(t *testing.T) {
	// The documents come in feed order, each once, at most
	// maxItemsPerInvocation an invocation, with the payload the host sends
	// a custom handler; a read that finds nothing invokes nothing; each
	// batch is checkpointed into the range's lease.
	env := newCosmosEnv(t, true)
	env.write(t, "a1", "a2", "a3", "a4", "a5", "a6", "a7")
	app := newApp(t, cosmosHostJSON, map[string]string{"pickup": pickupJSON(`, "maxItemsPerInvocation": 3, "startFromBeginning": true`)})
	r := runHost(t, app, env.settings, Options{CosmosTrigger: fastCosmos})
	// An invocation is recorded when it ends, after its documents are
	// counted as delivered: wait for both.
	eventually(t, func() bool { return r.h.Counters().DocumentsDelivered >= 7 && len(r.rec.of("pickup")) >= 3 },
		"the documents written before the start")

	calls := pickups(t, r)
	require.Equal(t, [][]string{{"a1", "a2", "a3"}, {"a4", "a5", "a6"}, {"a7"}}, batches(calls))
	first := calls[0]
	require.NoError(t, first.inv.Err)
	// Compact JSON of the JObjects the SDK read: a string Newtonsoft reads
	// as a date (at most seven fraction digits) is a DateTime, and one with
	// an offset is written back in the host's zone; nine digits stay text.
	require.True(t, strings.HasPrefix(first.arrayTxt, `[{"id":"a1","lastTransitionTime":"2025-03-01T10:00:00.5+00:00","partitionKey":"sub",`+
		`"startTime":"2025-03-01T10:00:00.123456789Z","status":"Accepted","_etag":`), "%s", first.arrayTxt)
	require.Contains(t, first.docs[0], "_lsn", "the documents as the feed holds them, system properties included")
	require.Equal(t, []string{"sys"}, slices.Sorted(maps.Keys(first.metadata)), "the trigger adds no binding data")
	var sys struct{ MethodName string }
	require.NoError(t, json.Unmarshal(first.metadata["sys"], &sys))
	require.Equal(t, "pickup", sys.MethodName)

	settle(t, r, 5)
	require.Len(t, r.rec.of("pickup"), 3, "nothing changed: nothing is delivered")

	env.write(t, "b1", "a2")
	eventually(t, func() bool { return r.h.Counters().DocumentsDelivered >= 9 && len(r.rec.of("pickup")) >= 4 }, "the new writes")
	calls = pickups(t, r)
	require.Equal(t, []string{"b1", "a2"}, calls[3].ids, "a rewritten document comes again, where its write puts it")
	settle(t, r, 5)
	require.Len(t, r.rec.of("pickup"), 4)

	// The lease store: the marker and the lease of range "0", owned by the
	// listener, continuing after the last document delivered.
	mon, err := env.db.Containers["Operations"].Read(t.Context(), nil)
	require.NoError(t, err)
	client, err := testenv.NewCosmosClient(env.cosmos.Endpoint, env.cosmos.Key)
	require.NoError(t, err)
	dbc, err := client.NewDatabase(env.db.Name)
	require.NoError(t, err)
	dbp, err := dbc.Read(t.Context(), nil)
	require.NoError(t, err)
	prefix := "127.0.0.1_" + dbp.DatabaseProperties.ResourceID + "_" + mon.ContainerProperties.ResourceID
	docs := env.leases(t)
	require.Len(t, docs, 2)
	require.Equal(t, prefix+"..0", docs[0]["id"])
	require.Equal(t, prefix+".info", docs[1]["id"])
	l := docs[0]
	require.Equal(t, "0", l["LeaseToken"])
	require.EqualValues(t, 0, l["version"])
	require.Equal(t, "Incremental feed", l["Mode"])
	require.Equal(t, map[string]any{"Range": map[string]any{"min": "", "max": "FF"}}, l["FeedRange"])
	require.NotEmpty(t, l["Owner"])
	last := calls[3].docs[1]["_lsn"]
	require.Equal(t, fmt.Sprintf(`"%v"`, last), l["ContinuationToken"], "the etag of the last page: its last LSN")
	require.EqualValues(t, 1, r.h.Counters().LeasesAcquired)
	require.NoError(t, r.stop())
	require.Nil(t, env.leases(t)[0]["Owner"], "a stopped listener releases its lease")
}

func TestCosmosTriggerStartsFromNow(t *testing.T) {
	// A lease without a continuation starts from now, unless
	// startFromBeginning or startFromTime says otherwise.
	env := newCosmosEnv(t, true)
	env.write(t, "old")
	app := newApp(t, cosmosHostJSON, map[string]string{"pickup": pickupJSON("")})
	r := runHost(t, app, env.settings, Options{CosmosTrigger: fastCosmos})
	settle(t, r, 1)
	env.write(t, "new")
	eventually(t, func() bool { return r.h.Counters().DocumentsDelivered >= 1 }, "the write after the start")
	settle(t, r, 3)
	require.Equal(t, []string{"new"}, allIDs(pickups(t, r)))
}

func TestCosmosTriggerFailedBatchIsNotDeliveredAgain(t *testing.T) {
	// The host checkpoints a batch whatever the invocation's outcome
	// (CosmosDBTriggerListener.ProcessChangesAsync logs the failure and
	// returns): a non-2xx answer loses the batch.
	env := newCosmosEnv(t, true)
	app := newApp(t, cosmosHostJSON, map[string]string{"pickup": pickupJSON("")})
	r := runHost(t, app, env.settings, Options{CosmosTrigger: fastCosmos})
	settle(t, r, 1)
	env.write(t, "fail-1")
	eventually(t, func() bool { return len(r.rec.of("pickup")) >= 1 }, "the failing batch")
	eventually(t, func() bool { return r.h.Counters().Checkpoints >= 1 }, "its checkpoint")
	env.write(t, "ok-1")
	eventually(t, func() bool { return len(r.rec.of("pickup")) >= 2 }, "the next batch")
	settle(t, r, 5)

	calls := pickups(t, r)
	require.Equal(t, [][]string{{"fail-1"}, {"ok-1"}}, batches(calls))
	require.Equal(t, 500, calls[0].inv.Status)
	require.Error(t, calls[0].inv.Err)
	require.Equal(t, 200, calls[1].inv.Status)
	require.EqualValues(t, 2, r.h.Counters().Checkpoints)
	require.Contains(t, r.out.String(), "the lease's batch failed; it is checkpointed and not delivered again")
}

func TestCosmosTriggerHandlerKilledMidBatch(t *testing.T) {
	// A handler that dies during an invocation fails it, and the host
	// checkpoints the batch all the same: the batch does not come again.
	env := newCosmosEnv(t, true)
	gate := filepath.Join(t.TempDir(), "gate")
	env.settings["POLL_GATE"] = gate
	app := newApp(t, cosmosHostJSON, map[string]string{"pickup": pickupJSON("")})
	r := runHost(t, app, env.settings, Options{CosmosTrigger: fastCosmos, Restart: true})
	settle(t, r, 1)
	env.write(t, "gate")
	eventually(t, func() bool { return strings.Contains(r.out.String(), "fakehandler: pickup gate") }, "the gated invocation")
	require.NoError(t, r.h.Kill())
	require.NoError(t, os.WriteFile(gate, nil, 0o644))
	eventually(t, func() bool { return r.h.Counters().Checkpoints >= 1 }, "the failed batch's checkpoint")
	env.write(t, "after")
	eventually(t, func() bool { return r.h.Counters().DocumentsDelivered >= 2 }, "the next batch")
	settle(t, r, 5)

	calls := r.rec.of("pickup")
	require.Len(t, calls, 2)
	require.Error(t, calls[0].Err, "the handler died under the invocation")
	require.NoError(t, calls[1].Err)
	require.Equal(t, []string{"after"}, pickups(t, r)[1].ids)
	require.EqualValues(t, 1, r.h.Counters().HandlerRestarts)
}

func TestCosmosTriggerInstanceCrashMidBatch(t *testing.T) {
	// A crashed instance checkpoints nothing and keeps its lease until it
	// expires; the instance that takes it over reads on from the last
	// checkpoint, so the batch in flight comes again.
	env := newCosmosEnv(t, true)
	gate := filepath.Join(t.TempDir(), "gate")
	env.settings["POLL_GATE"] = gate
	app := newApp(t, cosmosHostJSON, map[string]string{"pickup": pickupJSON("")})
	r := runHost(t, app, env.settings, Options{CosmosTrigger: fastCosmos,
		Flex: &FlexOptions{ScaleInterval: time.Hour, AlwaysReady: map[string]int{"pickup": 1}}})
	settle(t, r, 1)
	env.write(t, "first")
	eventually(t, func() bool { return r.h.Counters().Checkpoints >= 1 }, "the first batch, checkpointed")
	env.write(t, "gate")
	eventually(t, func() bool { return strings.Contains(r.out.String(), "fakehandler: pickup gate") }, "the gated invocation")
	crashed := r.h.groupInstances("pickup")
	require.Len(t, crashed, 1)
	require.NoError(t, crashed[0].Crash())
	require.NoError(t, os.WriteFile(gate, nil, 0o644))
	eventually(t, func() bool { return r.h.Counters().Checkpoints >= 2 }, "the batch again, on the new instance")
	settle(t, r, 3)

	calls := pickups(t, r)
	require.Len(t, calls, 3)
	require.Equal(t, []string{"first"}, calls[0].ids)
	require.Error(t, calls[1].inv.Err, "the invocation died with the instance")
	require.Equal(t, crashed[0].Index(), calls[1].inv.Instance)
	require.Equal(t, []string{"gate"}, calls[2].ids)
	require.NoError(t, calls[2].inv.Err)
	require.NotEqual(t, crashed[0].Index(), calls[2].inv.Instance)
	require.EqualValues(t, 2, r.h.Counters().LeasesAcquired)
	crashedOwner := logField(t, r, "hostemu: the listener started", crashed[0].Index(), "owner")
	require.Equal(t, crashedOwner, logField(t, r, "hostemu: lease acquired", calls[2].inv.Instance, "previousOwner"),
		"taken from the crashed owner, who never released it")
}

// logField returns the value of field key on the last line of the host's
// log with message msg from instance.
func logField(t *testing.T, r *running, msg string, instance int, key string) string {
	t.Helper()
	value := ""
	for _, line := range strings.Split(r.out.String(), "\n") {
		if !strings.Contains(line, `msg="`+msg+`"`) || !strings.Contains(line, fmt.Sprintf(" instance=%d ", instance)) {
			continue
		}
		_, rest, ok := strings.Cut(line, " "+key+"=")
		require.True(t, ok, "no %s in %q", key, line)
		value, _, _ = strings.Cut(rest, " ")
		value = strings.Trim(value, `"`)
	}
	require.NotEmpty(t, value, "no %q line from instance %d with %s", msg, instance, key)
	return value
}

func TestCosmosTriggerInstancesShareTheLease(t *testing.T) {
	// Two instances run a listener each; the one range's lease has one
	// owner, which alone reads and invokes. A stopped host releases the
	// lease, and the next host takes it at once and goes on from its
	// checkpoint.
	env := newCosmosEnv(t, true)
	env.write(t, "x1", "x2", "x3")
	app := newApp(t, cosmosHostJSON, map[string]string{"pickup": pickupJSON(`, "startFromBeginning": true`)})
	r := runHost(t, app, env.settings, Options{CosmosTrigger: fastCosmos, Instances: 2})
	eventually(t, func() bool { return r.h.Counters().DocumentsDelivered >= 3 }, "the documents")
	env.write(t, "x4")
	eventually(t, func() bool { return r.h.Counters().DocumentsDelivered >= 4 }, "a later write")
	settle(t, r, 20)

	calls := pickups(t, r)
	require.Equal(t, []string{"x1", "x2", "x3", "x4"}, allIDs(calls))
	for _, c := range calls {
		require.Equal(t, calls[0].inv.Instance, c.inv.Instance, "only the lease's owner invokes")
	}
	require.EqualValues(t, 1, r.h.Counters().LeasesAcquired, "the other instance never takes the lease")
	owner := env.leases(t)[0]["Owner"]
	require.NoError(t, r.stop())
	require.Nil(t, env.leases(t)[0]["Owner"])

	env.write(t, "y1")
	r2 := runHost(t, app, env.settings, Options{CosmosTrigger: fastCosmos})
	eventually(t, func() bool { return r2.h.Counters().DocumentsDelivered >= 1 }, "the write made while no host ran")
	settle(t, r2, 3)
	require.Equal(t, []string{"y1"}, allIDs(pickups(t, r2)), "on from the checkpoint, not from the beginning again")
	require.NotEqual(t, owner, env.leases(t)[0]["Owner"], "every listener is a new owner")
}

func TestCosmosTriggerMissingLeaseContainer(t *testing.T) {
	// The listener cannot start without its lease container: the host logs
	// the error and tries again with a back-off; the rest of the host runs.
	// Once the container exists the listener starts.
	env := newCosmosEnv(t, false)
	app := newApp(t, cosmosHostJSON, map[string]string{"pickup": pickupJSON("")})
	r := runHost(t, app, env.settings, Options{CosmosTrigger: fastCosmos})
	eventually(t, func() bool { return r.h.Counters().ListenerStartFailures >= 2 }, "failed starts")
	out := r.out.String()
	require.Contains(t, out, "the listener for function 'Functions.pickup' was unable to start")
	require.Contains(t, out, "or the lease container 'Leases' (in database '"+env.db.Name+"') does not exist")
	require.Contains(t, out, "retrying to start listener for function 'Functions.pickup' (attempt 1)")
	require.Zero(t, r.h.Counters().ChangeFeedReads)

	client, err := testenv.NewCosmosClient(env.cosmos.Endpoint, env.cosmos.Key)
	require.NoError(t, err)
	dbc, err := client.NewDatabase(env.db.Name)
	require.NoError(t, err)
	_, err = dbc.CreateContainer(t.Context(), azcosmos.ContainerProperties{ID: "Leases",
		PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{Paths: []string{"/id"}}}, nil)
	require.NoError(t, err)
	eventually(t, func() bool {
		return strings.Contains(r.out.String(), "listener successfully started for function 'Functions.pickup'")
	}, "the start")
	settle(t, r, 1)
	env.write(t, "a")
	eventually(t, func() bool { return r.h.Counters().DocumentsDelivered >= 1 }, "a delivery")
}

func TestCosmosTriggerCreatesTheLeaseContainer(t *testing.T) {
	// createLeaseContainerIfNotExists: the host creates it, keyed by /id
	// with time to live on, before the listener starts.
	env := newCosmosEnv(t, false)
	app := newApp(t, cosmosHostJSON, map[string]string{"pickup": pickupJSON(`, "createLeaseContainerIfNotExists": true`)})
	r := runHost(t, app, env.settings, Options{CosmosTrigger: fastCosmos})
	settle(t, r, 1)
	props, err := env.container(t, "Leases").Read(t.Context(), nil)
	require.NoError(t, err)
	require.Equal(t, []string{"/id"}, props.ContainerProperties.PartitionKeyDefinition.Paths)
	require.NotNil(t, props.ContainerProperties.DefaultTimeToLive)
	require.EqualValues(t, -1, *props.ContainerProperties.DefaultTimeToLive)
	require.Zero(t, r.h.Counters().ListenerStartFailures)
	env.write(t, "a")
	eventually(t, func() bool { return r.h.Counters().DocumentsDelivered >= 1 }, "a delivery")
}
