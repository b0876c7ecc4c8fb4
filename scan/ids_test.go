package scan_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/functions"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/poll"
	"github.com/opstatus/opstatus/scan"
)

// scanLogged scans with fn and returns the messages and the log.
func scanLogged(t *testing.T, fn *scan.Function) ([]poll.Message, string) {
	t.Helper()
	var logs bytes.Buffer
	inv := &functions.Invocation{
		ID: "inv", Function: "scan",
		Data:     map[string]json.RawMessage{"timer": json.RawMessage(timer)},
		Metadata: map[string]json.RawMessage{},
		Log:      slog.New(slog.NewTextHandler(&logs, nil)),
	}
	res, err := fn.Handle(context.Background(), inv)
	require.NoError(t, err)
	msgs, err := collect(t, res)
	require.NoError(t, err)
	return msgs, logs.String()
}

// scan sends every operation whose ids poll acts on, however awkward, and
// skips (logging each at Error) those poll would refuse: whatever scan
// sends, poll never answers 400 nor "invalid" for its ids. The skips do
// not disturb the wrap-around from a start point.
func TestScanSkipsOnlyTheIDsPollRefuses(t *testing.T) {
	db := database.NewMemoryClient(time.Second)
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

	fn := &scan.Function{DB: db}
	for start := range len(usable) + len(unusable) + 1 {
		fn.StartAt(start) // from the second scan on
		msgs, logs := scanLogged(t, fn)
		var got []string
		for _, m := range msgs {
			require.NoError(t, m.Validate())
			require.NoError(t, m.CheckIDs())
			got = append(got, m.SubscriptionID+"/"+m.OperationID)
		}
		require.ElementsMatch(t, usable, got, "start %d", start)
		for ids, shown := range unusable {
			found := false
			for _, line := range strings.Split(logs, "\n") {
				found = found || strings.Contains(line, "level=ERROR") &&
					strings.Contains(line, "skipping an operation item whose ids poll cannot use") &&
					strings.Contains(line, strings.Trim(strconv.Quote(shown), `"`))
			}
			require.True(t, found, "start %d: no error for %.80q in\n%s", start, ids, logs)
		}
		require.Less(t, len(logs), 20_000, "ids are bounded in the log")
	}
}
