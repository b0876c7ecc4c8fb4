package poll_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
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

// hostTime is a time as the host's metadata carries it.
func hostTime(t time.Time) json.RawMessage {
	return json.RawMessage(`"\"` + t.UTC().Format("2006-01-02T15:04:05+00:00") + `\""`)
}

// deliverReceived runs the handler with msg as the host delivers it after
// a receive at Storage's time received, of a message inserted at inserted,
// and returns its tally and what it logged.
func (f *fixture) deliverReceived(t *testing.T, msg string, inserted, received time.Time) (poll.Tally, string) {
	t.Helper()
	var logs bytes.Buffer
	res, err := f.fn.Handle(context.Background(), &functions.Invocation{
		ID: "inv-skew", Function: "poll", Log: slog.New(slog.NewTextHandler(&logs, nil)),
		Data: map[string]json.RawMessage{"operation": json.RawMessage(msg)},
		Metadata: map[string]json.RawMessage{
			"DequeueCount":  json.RawMessage(`"1"`),
			"InsertionTime": hostTime(inserted),
			// The receive's, hidden for the listener's visibility timeout.
			"NextVisibleTime": hostTime(received.Add(10 * time.Minute)),
		},
	})
	require.NoError(t, err)
	return res.ReturnValue.(poll.Tally), logs.String()
}

// A poll instance whose clock runs ahead of Storage's (and of the scan's)
// ages a message by Storage's clock: it polls fresh messages and drops old
// ones, as one whose clock is right does, and says now and then that its
// clock is off.
func TestPollWithItsClockAhead(t *testing.T) {
	for _, ahead := range []time.Duration{6 * time.Second, 10 * time.Second} {
		t.Run(fmt.Sprintf("%v ahead", ahead), func(t *testing.T) {
			f := newFixture(t)
			f.cs.SetStatus(clusterCS, 200, clusterStatus("installing"))
			storage := f.now.Add(-ahead) // Storage's and the scan's clock at the receive

			f.putOp(database.Operation{ID: "op", Request: arm.RequestCreate, Status: arm.ProvisioningStateAccepted})
			scanned := storage.Add(-5 * time.Second)
			tally, logs := f.deliverReceived(t, batch(scanned, "op"), scanned, storage)
			require.Equal(t, poll.Tally{poll.OutcomeUpdated: 1}, tally, "a message received 5 s after its scan is fresh")
			require.Equal(t, arm.ProvisioningStateProvisioning, f.op(t, "op").Status)
			require.Contains(t, logs, `level=WARN msg="this instance's clock differs from Storage's`)
			require.Equal(t, 1, strings.Count(logs, "clock differs"), logs)
			require.Contains(t, logs, fmt.Sprintf("ahead_ms=%d", ahead.Milliseconds()))

			f.putOp(database.Operation{ID: "op", Request: arm.RequestCreate, Status: arm.ProvisioningStateAccepted})
			calls := f.cs.Calls()
			scanned = storage.Add(-11 * time.Second)
			tally, logs = f.deliverReceived(t, batch(scanned, "op"), scanned.Add(time.Second), storage)
			require.Equal(t, poll.Tally{poll.OutcomeSuperseded: 1}, tally, "a message received 11 s after its scan is old")
			require.Equal(t, calls, f.cs.Calls())
			require.NotContains(t, logs, "clock differs", "the skew is told once in a while, not on every message")

			f.now, storage = f.now.Add(11*time.Minute), storage.Add(11*time.Minute)
			f.putOp(database.Operation{ID: "op", Request: arm.RequestCreate, Status: arm.ProvisioningStateAccepted})
			_, logs = f.deliverReceived(t, batch(storage, "op"), storage, storage)
			require.Contains(t, logs, "clock differs", "and told again when it lasts")
		})
	}
}

// A message's age counts the time the reader spends on it, by the
// reader's own clock: one that is fresh on arrival by Storage's clock, but
// whose next scan comes due during the read, is read and then dropped
// before its call.
func TestSupersededDuringTheReadByStorageClock(t *testing.T) {
	f := newFixture(t)
	f.putOp(database.Operation{ID: "op", Request: arm.RequestCreate, Status: arm.ProvisioningStateAccepted})
	f.cs.SetStatus(clusterCS, 200, clusterStatus("installing"))
	storage := f.now.Add(-10 * time.Second) // the reader 10 s ahead
	scanned := storage.Add(-9 * time.Second)
	reads := 0
	f.db.Hook = func(call databasetesting.Op) error {
		if call == databasetesting.OpGetOperation {
			reads++
			f.now = f.now.Add(2 * time.Second) // a slow read
		}
		return nil
	}
	tally, _ := f.deliverReceived(t, batch(scanned, "op"), scanned, storage)
	require.Equal(t, poll.Tally{poll.OutcomeSuperseded: 1}, tally)
	require.Equal(t, 1, reads, "fresh on arrival")
	require.Zero(t, f.cs.Calls())
}
