package poll_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/functions"
	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/internal/database/databasetesting"
	"github.com/opstatus/opstatus/poll"
)

// invokeLogged delivers a message built from fields, as JSON, and returns
// the answer with the invocation's log.
func (f *fixture) invokeLogged(t *testing.T, fields map[string]any) (*functions.Result, string, error) {
	t.Helper()
	msg, err := json.Marshal(fields)
	require.NoError(t, err)
	var logs bytes.Buffer
	inv := &functions.Invocation{
		ID:       "inv-ids",
		Function: "poll",
		Data:     map[string]json.RawMessage{"operation": msg},
		Metadata: map[string]json.RawMessage{},
		Log:      slog.New(slog.NewTextHandler(&logs, nil)),
	}
	res, err := f.fn.Handle(context.Background(), inv)
	return res, logs.String(), err
}

// Every id Cosmos DB stores, however awkward, is polled like any other.
func TestPollActsOnEveryIDCosmosAccepts(t *testing.T) {
	f := newFixture(t)
	f.cs.SetStatus(clusterCS, http.StatusOK, clusterStatus("installing"))
	ops := []string{
		"op id", " op", "op ", "op\u00a0id", "op\u2003id", "op\u3000id", "op\tid", "op\nid", "op\x00",
		"op-é世", "op-\U0001F600", "op%2Fx", "a+b", `op"q`, "op'q", "a..b",
		strings.Repeat("a", 256), strings.Repeat("b", database.MaxIDBytes),
		strings.Repeat("世", database.MaxIDBytes/3),
	}
	for _, id := range ops {
		f.putOp(database.Operation{ID: id, Request: arm.RequestCreate, Status: arm.ProvisioningStateAccepted})
		res, logs, err := f.invokeLogged(t, map[string]any{"subscriptionId": sub, "operationId": id})
		require.NoError(t, err, "%q", id)
		require.Equal(t, poll.OutcomeUpdated, only(t, res), "%q: %s", id, logs)
		require.Equal(t, arm.ProvisioningStateProvisioning, f.op(t, id).Status, "%q", id)
		for _, line := range strings.Split(strings.TrimSuffix(logs, "\n"), "\n") {
			require.True(t, strings.HasPrefix(line, "time="), "an id never breaks a log line: %q", line)
		}
	}

	// The subscription id is lowercased for the partition key and the lock.
	for _, s := range []string{"Sub With Spaces", "sub\u3000é", strings.Repeat("S", database.MaxIDBytes)} {
		op := &database.Operation{ID: "op", PartitionKey: strings.ToLower(s), Request: arm.RequestCreate,
			Status: arm.ProvisioningStateAccepted, ExternalID: strings.Replace(clusterKey, sub, s, 1), InternalID: clusterCS}
		f.db.PutOperation(op)
		res, logs, err := f.invokeLogged(t, map[string]any{"subscriptionId": s, "operationId": "op"})
		require.NoError(t, err, "%q", s)
		require.Equal(t, poll.OutcomeUpdated, only(t, res), "%q: %s", s, logs)
	}
}

// A well-formed message whose ids poll will not act on is answered 200
// "invalid" (logged at Error) without a read, a call or a write: a 400 would
// only send it round the retries into the poison queue.
func TestPollAnswersInvalidToIDsItWillNotUse(t *testing.T) {
	long := strings.Repeat("a", database.MaxIDBytes+1)
	for name, ids := range map[string][2]string{
		"slash":                       {sub, "a/b"},
		"backslash":                   {sub, `a\b`},
		"question":                    {sub, "a?b"},
		"hash":                        {sub, "a#b"},
		"dot":                         {sub, "."},
		"dot dot":                     {sub, ".."},
		"1,024-byte operation":        {sub, long},
		"1,024-byte operation in CJK": {sub, strings.Repeat("世", 341) + "a"},
		"slash in subscription":       {"a/b", "op"},
		"dot dot subscription":        {"..", "op"},
		"1,024-byte subscription":     {long, "op"},
		// 'Ⱥ' (2 bytes) lowercases to 'ⱥ' (3): the lock id would not fit.
		"subscription longer lowercased": {strings.Repeat("Ⱥ", 400), "op"},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			res, logs, err := f.invokeLogged(t, map[string]any{"subscriptionId": ids[0], "operationId": ids[1]})
			require.NoError(t, err)
			require.Equal(t, poll.OutcomeInvalid, only(t, res))
			require.Contains(t, logs, "level=ERROR")
			require.Contains(t, logs, "skipped")
			require.Less(t, len(logs), 1000, "the id is bounded in the log")
			require.Zero(t, f.count(databasetesting.OpGetOperation))
			require.Zero(t, f.cs.Calls())
			require.Zero(t, f.writes())
			require.Zero(t, f.lockOps())
		})
	}
}

// A message that is not one as a whole still answers 400.
func TestPollAnswers400ToMalformedMessages(t *testing.T) {
	for name, msg := range map[string]string{
		"not json":           `not json`,
		"array":              `[1,2]`,
		"string of a number": `"42"`,
		"missing operation":  `{"subscriptionId":"s"}`,
		"missing sub":        `{"operationId":"o"}`,
		"empty operation":    `{"subscriptionId":"s","operationId":""}`,
		"empty sub":          `{"subscriptionId":"","operationId":"o"}`,
		"null operation":     `{"subscriptionId":"s","operationId":null}`,
		"number sub":         `{"subscriptionId":5,"operationId":"o"}`,
		"object operation":   `{"subscriptionId":"s","operationId":{"id":"o"}}`,
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			_, err := f.invoke(t, msg)
			require.Error(t, err)
			require.Equal(t, http.StatusBadRequest, functions.StatusOf(err))
			require.Zero(t, f.count(databasetesting.OpGetOperation))
			require.Zero(t, f.cs.Calls())
		})
	}
}
