package e2e

import (
	"bytes"
	"context"
	"encoding/json"
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

// awkwardSub is a subscription id with a space, a no-break space and
// capitals: its items' partition key, and its lock item's id, are the
// lowercase of it.
const awkwardSub = "DDDDDDDD-0000-4000-8000-000000000004 x\u00a0É"

// awkwardIDs are operation ids that Cosmos DB accepts and poll acts on.
var awkwardIDs = []string{
	"op id", " op", "op ", " ", "op\u00a0id", "op\u2003id", "op\u3000id", "op\u2028id",
	"op\tid", "op\nid", "op\r\nlevel=INFO msg=forged", "op\x00nul", "op\x7f", "op\u0085",
	"op-é世", "op-\U0001F600", "\ufeffop", "100%", "op%2Fx", "op%", "%E0%A4%A", "a+b", "+", "op;x,y=z&w",
	`op"q`, "op'q", `"`, "op`x", "a..b", "...", ".a", "op:1@h", "<op>", "{op}", "op|x^y",
	strings.Repeat("x", 256),
	strings.Repeat("y", 1023),
	strings.Repeat("世", 341),                  // 1,023 bytes
	strings.Repeat("\U0001F600", 255) + "abc", // 1,023 bytes
	strings.Repeat("\u00a0", 511) + "z",       // 1,023 bytes of no-break spaces
	"op " + strings.Repeat("%", 1019),         // 1,023 bytes, 3 escaped in the path
}

// seedAwkward writes, as the frontend does, an Accepted Create operation
// and its Resources item (res-n, with a plain key of its own).
func (s *handlerStack) seedAwkward(sub string, n int, id, internalID string) (resID string, err error) {
	ctx := context.Background()
	now := time.Now().UTC() // the handler counts deadlines by its own clock
	key := clusterKey(strings.ToLower(sub), fmt.Sprintf("c%03d", n))
	if err := s.fe.PutOperation(ctx, frontend.Operation{
		ID: id, PartitionKey: sub, Request: "Create", Status: "Accepted",
		ExternalID: key, InternalID: internalID, StartTime: now, LastTransitionTime: now,
	}); err != nil {
		return "", err
	}
	resID = fmt.Sprintf("res-%03d", n)
	return resID, s.fe.PutResource(ctx, frontend.Resource{
		ID: resID, PartitionKey: sub, Key: key, InternalID: internalID,
		ActiveOperationID: id, ProvisioningState: "Accepted",
	})
}

// TestAwkwardIDsScanThenPoll seeds operations under every kind of id Cosmos
// DB accepts, scans, and delivers each message scan sent to poll as the host
// would: whatever scan sends, poll answers 2xx, and every operation with a
// usable id and a valid internalId is actually polled. Ids Cosmos DB refuses
// cannot be seeded; "." and "..", which it stores, scan skips and logs.
func TestAwkwardIDsScanThenPoll(t *testing.T) {
	s := startStack(t)
	ctx := context.Background()
	const iid = "/api/aro_hcp/v1alpha1/clusters/cids"
	require.NoError(t, s.sim.AddCluster("cids", clustersim.Script{Installing: clustersim.Duration(time.Hour)}))

	type op struct{ sub, id, res string }
	var polled, invalid []op
	n := 0
	seed := func(sub, id, internalID string) op {
		n++
		res, err := s.seedAwkward(sub, n, id, internalID)
		require.NoError(t, err, "%q", id)
		return op{strings.ToLower(sub), id, res}
	}
	for _, id := range awkwardIDs {
		polled = append(polled, seed(subA, id, iid))
	}
	polled = append(polled, seed(awkwardSub, "op id\u3000", iid), seed(awkwardSub, "op-2", iid))
	// Usable ids, unusable internalIds: skipped by scan, "invalid" in poll.
	invalid = append(invalid, seed(subA, "bad iid\u00a0", "/api/../x"), seed(awkwardSub, "bad iid", "/x"))
	// Stored by Cosmos DB, refused by the rule: skipped by scan.
	skipped := []string{".", ".."}
	for _, id := range skipped {
		seed(subA, id, iid)
	}
	// Refused by Cosmos DB: nothing to scan.
	for _, id := range []string{"a/b", `a\b`, "a?b", "a#b", strings.Repeat("z", 1024), strings.Repeat("世", 341) + "z"} {
		_, err := s.seedAwkward(subA, 999, id, iid)
		require.Equal(t, http.StatusBadRequest, testenv.StatusOf(err), "%.40q: %v", id, err)
	}
	for _, o := range polled {
		require.Equal(t, "Accepted", s.opStatus(o.sub, o.id), "point read of %q", o.id)
	}

	r, raw := s.post("scan", []byte(`{"Data":{"timer":{"IsPastDue":false}},"Metadata":{}}`))
	require.Equal(t, http.StatusOK, r.Status, r.Logs)
	for _, id := range skipped {
		s.requireLog(t, r, testenv.HostError, "operation skipped: poll could not act on it", fmt.Sprintf(`id \"%s\" is a dot segment`, id))
	}
	var msgs []json.RawMessage
	require.NoError(t, json.Unmarshal(r.Outputs["operations"], &msgs), string(raw))
	want := map[op]bool{}
	for _, o := range polled {
		want[op{o.sub, o.id, ""}] = true
	}
	for _, o := range invalid {
		s.requireLog(t, r, testenv.HostError, "operation skipped: poll could not act on it", o.id, "internal_id")
	}
	got := map[op]bool{}
	for _, m := range msgs {
		var batch struct {
			Operations []struct{ SubscriptionID, OperationID string }
		}
		require.NoError(t, json.Unmarshal(m, &batch))
		for _, ids := range batch.Operations {
			got[op{ids.SubscriptionID, ids.OperationID, ""}] = true
		}
	}
	require.Equal(t, want, got, "scan sends every usable operation, and nothing else")

	tally := map[string]int{}
	for _, m := range msgs {
		// The host writes each element as indented JSON text and delivers
		// that text as a string.
		var text bytes.Buffer
		require.NoError(t, json.Indent(&text, m, "", "  "))
		r, _ := s.post("poll", envelope(pollData(text.String())))
		require.Equal(t, http.StatusOK, r.Status, "%s: %s", m, r.Logs)
		for _, line := range r.Logs {
			require.NotContains(t, line, "\n", "an id never breaks a log line")
		}
		var counts map[string]int
		require.NoError(t, json.Unmarshal(r.ReturnValue, &counts))
		for o, n := range counts {
			tally[o] += n
		}
	}
	require.Equal(t, map[string]int{"updated": len(polled)}, tally)
	for _, o := range invalid {
		msg, err := json.Marshal(map[string]string{"subscriptionId": o.sub, "operationId": o.id})
		require.NoError(t, err)
		require.Equal(t, "invalid", outcome(t, s.poll(string(msg))), "%q", o.id)
	}
	for _, o := range polled {
		require.Equal(t, "Provisioning", s.opStatus(o.sub, o.id), "%q", o.id)
		res, err := s.fe.Resource(ctx, o.sub, o.res)
		require.NoError(t, err)
		require.Equal(t, "Provisioning", res["provisioningState"], "the resource of %q follows it", o.id)
		require.Equal(t, o.id, res["activeOperationId"])
	}
	for _, o := range invalid {
		require.Equal(t, "Accepted", s.opStatus(o.sub, o.id), "%q", o.id)
	}
	s.requireNoLockLeft(subA)
	s.requireNoLockLeft(awkwardSub)
	s.requireAlive()
}

// TestPollAnswersIDsItWillNotUse: a message whose ids poll can read but will
// not act on (no Cosmos DB item can have them, or they would change the
// URL path) is answered 200 "invalid" without a read or a call, so that it
// never cycles into the poison queue; a message that is not one as a whole
// still answers 400.
func TestPollAnswersIDsItWillNotUse(t *testing.T) {
	s := startStack(t)
	for _, ids := range [][2]string{
		{subA, "a/b"}, {subA, `a\b`}, {subA, "a?b"}, {subA, "a#b"}, {subA, "."}, {subA, ".."},
		{subA, strings.Repeat("z", 1024)}, {subA, strings.Repeat("世", 341) + "z"},
		{"a/b", "op"}, {"..", "op"}, {strings.Repeat("Ⱥ", 400), "op"},
	} {
		s.sim.ResetStats()
		b, err := json.Marshal(map[string]string{"subscriptionId": ids[0], "operationId": ids[1]})
		require.NoError(t, err)
		r, _ := s.post("poll", envelope(pollData(string(b))))
		require.Equal(t, http.StatusOK, r.Status, "%.40q: %s", ids, r.Logs)
		require.Equal(t, "invalid", outcome(t, r))
		s.requireLog(t, r, testenv.HostError, "skipped", "not a usable Cosmos DB id")
		require.Zero(t, s.csRequests())
	}
	for _, msg := range []string{`{"subscriptionId":"` + subA + `"}`, `{"subscriptionId":"` + subA + `","operationId":""}`,
		`{"subscriptionId":5,"operationId":"op"}`, `["op"]`} {
		r, _ := s.post("poll", envelope(pollData(msg)))
		require.Equal(t, http.StatusBadRequest, r.Status, "%s: %s", msg, r.Logs)
	}
	s.requireAlive()
}
