package scan_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"iter"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/functions"
	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/internal/database/databasetesting"
	"github.com/opstatus/opstatus/internal/queuemsg"
	"github.com/opstatus/opstatus/scan"
)

// timer is the payload the host sends for a schedule under a minute: no
// ScheduleStatus.
const timer = `{"Schedule":{"AdjustForDST":true},"ScheduleStatus":null,"IsPastDue":false}`

var scanStart = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// scanLogged runs fn as the host would and returns the result and the log.
func scanLogged(t *testing.T, fn *scan.Function, timerPayload string) (*functions.Result, string, error) {
	t.Helper()
	if fn.Now == nil {
		fn.Now = func() time.Time { return scanStart }
	}
	var logs bytes.Buffer
	inv := &functions.Invocation{
		ID: "inv", Function: "scan",
		Data:     map[string]json.RawMessage{"timer": json.RawMessage(timerPayload)},
		Metadata: map[string]json.RawMessage{},
		Log:      slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	res, err := fn.Handle(context.Background(), inv)
	return res, logs.String(), err
}

// messages scans db and returns the messages, checking what every message
// must be.
func messages(t *testing.T, fn *scan.Function) []queuemsg.Message {
	t.Helper()
	res, _, err := scanLogged(t, fn, timer)
	require.NoError(t, err)
	msgs, ok := res.Outputs[scan.OutputBinding].([]queuemsg.Message)
	require.True(t, ok, "%T", res.Outputs[scan.OutputBinding])
	n := 0
	for _, m := range msgs {
		n += len(m.Operations)
		require.Equal(t, scanStart, m.ScannedAt)
	}
	require.Equal(t, n, res.ReturnValue, "ReturnValue counts the operations")
	return msgs
}

// flat lists the operations of msgs as "subscription/id", in order.
func flat(msgs []queuemsg.Message) []string {
	var out []string
	for _, m := range msgs {
		for _, op := range m.Operations {
			out = append(out, op.SubscriptionID+"/"+op.OperationID)
		}
	}
	return out
}

func putPending(db *databasetesting.MemoryClient, sub, id string) {
	db.PutOperation(&database.Operation{ID: id, PartitionKey: sub, Request: arm.RequestCreate, Status: arm.ProvisioningStateAccepted, InternalID: clusterID})
}

func TestScanListsPendingOperationsAcrossSubscriptions(t *testing.T) {
	db := databasetesting.NewMemoryClient(time.Second)
	put := func(sub, id string, status arm.ProvisioningState, uri string) {
		db.PutOperation(&database.Operation{ID: id, PartitionKey: sub, Request: arm.RequestCreate, Status: status, NotificationURI: uri, InternalID: clusterID})
	}
	put("sub-a", "1", arm.ProvisioningStateAccepted, "")
	put("sub-a", "2", arm.ProvisioningStateSucceeded, "")
	put("sub-b", "3", arm.ProvisioningStateDeleting, "")
	put("sub-b", "4", arm.ProvisioningStateFailed, "https://arm.example/n")
	put("sub-c", "5", arm.ProvisioningStateCanceled, "")
	put("sub-c", "6", arm.ProvisioningStateUpdating, "")

	msgs := messages(t, &scan.Function{DB: db})
	require.Len(t, msgs, 1)
	require.Equal(t, []string{"sub-a/1", "sub-b/3", "sub-b/4", "sub-c/6"}, flat(msgs))

	// Messages go out as JSON objects, never as strings the host could
	// mistake for base64, and decode as poll reads them.
	b, err := json.Marshal(msgs[0])
	require.NoError(t, err)
	require.Equal(t, byte('{'), b[0])
	read, err := queuemsg.Decode(b)
	require.NoError(t, err)
	require.Len(t, read.Entries, 4)
	require.Equal(t, scanStart, read.ScannedAt)
}

// In a fixed Operations partition scan lists that partition alone, and
// each message names the subscription of the operation's externalId,
// lowercase: poll takes its lock and writes its Resources items. An
// operation whose externalId names no subscription is skipped by the rule
// poll's read fails by, and counted.
func TestScanInAFixedPartition(t *testing.T) {
	db := databasetesting.NewMemoryClient(time.Second)
	db.OperationsPartition = "workaround"
	put := func(partition, id, externalID string) {
		db.PutOperation(&database.Operation{ID: id, PartitionKey: partition, ExternalID: externalID,
			Request: arm.RequestCreate, Status: arm.ProvisioningStateAccepted, InternalID: clusterID})
	}
	put("workaround", "1", "/subscriptions/SUB-B/resourceGroups/rg/providers/Microsoft.RedHatOpenShift/hcpOpenShiftClusters/c1")
	put("workaround", "2", "/subscriptions/sub-a/resourceGroups/rg/providers/Microsoft.RedHatOpenShift/hcpOpenShiftClusters/c2")
	put("workaround", "no-sub", "/resourceGroups/rg")
	put("sub-a", "elsewhere", "/subscriptions/sub-a/resourceGroups/rg/providers/Microsoft.RedHatOpenShift/hcpOpenShiftClusters/c3")

	res, logs, err := scanLogged(t, &scan.Function{DB: db}, timer)
	require.NoError(t, err)
	require.Equal(t, []string{"sub-a/2", "sub-b/1"}, flat(res.Outputs[scan.OutputBinding].([]queuemsg.Message)))
	require.Contains(t, logs, "reason=subscription")
	require.Contains(t, logs, "skipped=1")
}

// Operations go out sorted by subscription, in messages of at most
// queuemsg.BatchSize, each operation exactly once, whatever order the
// listing gives; each scan starts at a message chosen at random and goes
// around, so that when poll falls behind, the messages it drops as
// superseded are not always the same.
func TestScanBatchesInSubscriptionOrder(t *testing.T) {
	db := databasetesting.NewMemoryClient(time.Second)
	var want []string
	for i := range 1234 {
		sub := fmt.Sprintf("sub-%02d", (i*7)%13)
		id := fmt.Sprintf("op-%04d", i)
		putPending(db, sub, id)
		want = append(want, sub+"/"+id)
	}
	slices.Sort(want)
	firsts := map[string]bool{}
	for range 20 {
		msgs := messages(t, &scan.Function{DB: db})
		require.Len(t, msgs, 13, "1,234 operations, 100 a message")
		full := 0
		for _, m := range msgs {
			if len(m.Operations) == queuemsg.BatchSize {
				full++
			}
			b, err := json.MarshalIndent(m, "", "  ") // as the host writes it
			require.NoError(t, err)
			require.Less(t, base64.StdEncoding.EncodedLen(len(b)), 64<<10)
		}
		require.Equal(t, 12, full)
		got := flat(msgs)
		at := slices.Index(want, got[0])
		require.GreaterOrEqual(t, at, 0)
		require.Equal(t, append(slices.Clone(want[at:]), want[:at]...), got, "the sorted listing, from one message on and around")
		firsts[got[0]] = true
	}
	require.Greater(t, len(firsts), 1, "every scan started at the same message")
}

func TestScanWithNothingPendingSendsNoMessage(t *testing.T) {
	res, _, err := scanLogged(t, &scan.Function{DB: databasetesting.NewMemoryClient(time.Second)}, `"not even a timer"`)
	require.NoError(t, err, "an odd timer payload does not stop the scan")
	require.Empty(t, res.Outputs[scan.OutputBinding])
	require.Equal(t, 0, res.ReturnValue)
}

// The host's payloads: for a schedule under a minute ScheduleStatus is
// always null, and a scan reads nothing from it.
func TestScanIgnoresTheScheduleStatus(t *testing.T) {
	db := databasetesting.NewMemoryClient(time.Second)
	putPending(db, "s", "1")
	for _, payload := range []string{
		timer,
		`{"Schedule":{"AdjustForDST":true},"ScheduleStatus":{"Last":"0001-01-01T00:00:00","Next":"2026-11-30T12:00:00+00:00","LastUpdated":"0001-01-01T00:00:00"},"IsPastDue":true}`,
		`{}`,
	} {
		res, _, err := scanLogged(t, &scan.Function{DB: db}, payload)
		require.NoError(t, err)
		msgs := res.Outputs[scan.OutputBinding].([]queuemsg.Message)
		require.Len(t, msgs, 1)
		require.Equal(t, scanStart, msgs[0].ScannedAt, "the scan's own start, not the payload's")
	}
}

func TestScanFailsWhenTheListingFails(t *testing.T) {
	db := databasetesting.NewMemoryClient(time.Second)
	for i := range 10 {
		putPending(db, "s", fmt.Sprint(i))
	}
	db.Hook = func(call databasetesting.Op) error {
		if call == databasetesting.OpPendingOperations {
			return database.ErrUnavailable
		}
		return nil
	}
	_, _, err := scanLogged(t, &scan.Function{DB: db}, timer)
	require.ErrorIs(t, err, database.ErrUnavailable)
	require.ErrorContains(t, err, "list pending operations")
}

// slowListing yields its operations one every delay.
type slowListing struct {
	database.DBClient
	n     int
	delay time.Duration
}

func (s slowListing) PendingOperations(ctx context.Context) iter.Seq2[database.PendingOperation, error] {
	return func(yield func(database.PendingOperation, error) bool) {
		for i := range s.n {
			select {
			case <-ctx.Done():
				yield(database.PendingOperation{}, fmt.Errorf("%w: %w", database.ErrUnavailable, ctx.Err()))
				return
			case <-time.After(s.delay):
			}
			if !yield(database.PendingOperation{ID: fmt.Sprint(i), PartitionKey: "s", SubscriptionID: "s"}, nil) {
				return
			}
		}
	}
}

// A listing that would run past the deadline fails the scan with a clear
// error instead of keeping the host waiting until functionTimeout, when it
// would kill the handler process and every invocation in it.
func TestScanStopsAtItsDeadline(t *testing.T) {
	fn := &scan.Function{DB: slowListing{DBClient: databasetesting.NewMemoryClient(time.Second), n: 1000, delay: 10 * time.Millisecond},
		Deadline: 100 * time.Millisecond}
	_, _, err := scanLogged(t, fn, timer)
	require.ErrorContains(t, err, "did not finish within 100ms")
	require.ErrorContains(t, err, "functionTimeout")
}

// scan sends every operation whose ids poll acts on, however awkward, and
// skips (logging each at Error) those poll would refuse: whatever scan
// sends, poll never answers 400 nor "invalid" for its ids.
func TestScanSkipsOnlyTheIDsPollRefuses(t *testing.T) {
	db := databasetesting.NewMemoryClient(time.Second)
	var usable []string
	for _, id := range []string{
		"op id", " op", "op ", "op\u00a0id", "op\u3000id", "op\tid", "op\nid", "op-\U0001F600",
		"op%2Fx", "a+b", `op"q`, strings.Repeat("a", 256), strings.Repeat("b", database.MaxIDBytes),
	} {
		putPending(db, "sub", id)
		usable = append(usable, "sub/"+id)
	}
	putPending(db, "sub with space", "op")
	usable = append(usable, "sub with space/op")
	unusable := map[[2]string]string{ // what the log shows of each
		{"sub", "a/b"}: `"a/b"`,
		{"sub", `a\b`}: `"a\\b"`,
		{"sub", "a?b"}: `"a?b"`,
		{"sub", "a#b"}: `"a#b"`,
		{"sub", "."}:   `"."`,
		{"sub", ".."}:  `".."`,
		{"sub", strings.Repeat("c", database.MaxIDBytes+1)}: `"` + strings.Repeat("c", 64) + `"...`,
		{"a/b", "op"}:                    `"a/b"`,
		{strings.Repeat("ⱥ", 400), "op"}: "1200 bytes long",
	}
	for ids := range unusable {
		putPending(db, ids[0], ids[1])
	}

	res, logs, err := scanLogged(t, &scan.Function{DB: db}, timer)
	require.NoError(t, err)
	msgs := res.Outputs[scan.OutputBinding].([]queuemsg.Message)
	for _, m := range msgs {
		for _, op := range m.Operations {
			require.NoError(t, op.Check())
		}
	}
	require.ElementsMatch(t, usable, flat(msgs))
	for ids, shown := range unusable {
		found := false
		for _, line := range strings.Split(logs, "\n") {
			found = found || strings.Contains(line, "level=ERROR") &&
				strings.Contains(line, "operation skipped: poll could not act on it") && strings.Contains(line, "reason=id") &&
				strings.Contains(line, strings.Trim(fmt.Sprintf("%q", shown), `"`))
		}
		require.True(t, found, "no error for %.80q in\n%s", ids, logs)
	}
	require.Less(t, len(logs), 20_000, "ids are bounded in the log")
}

// clusterID is a cluster's internalId, for operations poll can act on.
const clusterID = "/api/clusters_mgmt/v1/clusters/c1"

// What poll would call invalid is not sent, and each such operation is
// logged once an hour: an operator sees it without an error line every
// scan.
func TestScanSkipsWhatPollWouldCallInvalidAndLogsItHourly(t *testing.T) {
	db := databasetesting.NewMemoryClient(time.Second)
	put := func(id string, request arm.Request, internalID string) {
		db.PutOperation(&database.Operation{ID: id, PartitionKey: "sub", Request: request,
			Status: arm.ProvisioningStateAccepted, InternalID: internalID})
	}
	put("good", arm.RequestCreate, clusterID)
	put("revoke-pool", arm.RequestRevokeCredentials, "/api/aro_hcp/v1alpha1/clusters/c1/node_pools/np")
	put("patch", "Patch", clusterID)
	put("nowhere", arm.RequestCreate, "/api/clusters_mgmt/v1/../secrets")
	now := scanStart
	fn := &scan.Function{DB: db, Now: func() time.Time { return now }}
	skippedLines := func(logs string) int {
		return strings.Count(logs, "operation skipped: poll could not act on it")
	}

	res, logs, err := scanLogged(t, fn, timer)
	require.NoError(t, err)
	require.Equal(t, []string{"sub/good"}, flat(res.Outputs[scan.OutputBinding].([]queuemsg.Message)))
	require.Equal(t, 3, skippedLines(logs), logs)
	for _, want := range []string{"reason=kind", "reason=request", "reason=internal_id", "operation_id=revoke-pool"} {
		require.Contains(t, logs, want)
	}

	now = now.Add(10 * time.Second)
	res, logs, err = scanLogged(t, fn, timer)
	require.NoError(t, err)
	require.Equal(t, []string{"sub/good"}, flat(res.Outputs[scan.OutputBinding].([]queuemsg.Message)))
	require.Zero(t, skippedLines(logs), "logged again ten seconds later:\n%s", logs)

	now = now.Add(time.Hour)
	_, logs, _ = scanLogged(t, fn, timer)
	require.Equal(t, 3, skippedLines(logs), "not logged again an hour later:\n%s", logs)
}

// scan never skips an operation for the API its internalId names: node
// pools of both forms are sent (ARO-HCP's 2024-10 frontend wrote the
// clusters_mgmt one), however old, for poll to end them as Cluster
// Service says or by their deadline.
func TestScanSendsNodePoolsOfEitherAPI(t *testing.T) {
	db := databasetesting.NewMemoryClient(time.Second)
	put := func(id string, request arm.Request, status arm.ProvisioningState, internalID string) {
		db.PutOperation(&database.Operation{ID: id, PartitionKey: "sub", Request: request, Status: status,
			InternalID: internalID, StartTime: scanStart.Add(-30 * 24 * time.Hour)})
	}
	for _, form := range []struct{ name, path string }{
		{"cm", "/api/clusters_mgmt/v1/clusters/c1/node_pools/np1"},
		{"hcp", "/api/aro_hcp/v1alpha1/clusters/c1/node_pools/np1"},
	} {
		put(form.name+"-create", arm.RequestCreate, arm.ProvisioningStateAccepted, form.path)
		put(form.name+"-update", arm.RequestUpdate, arm.ProvisioningStateUpdating, form.path)
		put(form.name+"-delete", arm.RequestDelete, arm.ProvisioningStateDeleting, form.path)
	}
	res, logs, err := scanLogged(t, &scan.Function{DB: db}, timer)
	require.NoError(t, err)
	require.NotContains(t, logs, "operation skipped")
	require.ElementsMatch(t, []string{"sub/cm-create", "sub/cm-update", "sub/cm-delete", "sub/hcp-create", "sub/hcp-update", "sub/hcp-delete"},
		flat(res.Outputs[scan.OutputBinding].([]queuemsg.Message)))
}
