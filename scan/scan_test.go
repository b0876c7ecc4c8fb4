package scan_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/functions"
	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/poll"
	"github.com/opstatus/opstatus/scan"
)

func invoke(t *testing.T, db database.DBClient, timer string) (*functions.Result, error) {
	t.Helper()
	return invokeFn(t, &scan.Function{DB: db}, timer)
}

func invokeFn(t *testing.T, fn *scan.Function, timer string) (*functions.Result, error) {
	t.Helper()
	inv := &functions.Invocation{
		ID: "inv", Function: "scan",
		Data:     map[string]json.RawMessage{"timer": json.RawMessage(timer)},
		Metadata: map[string]json.RawMessage{},
		Log:      slog.New(slog.DiscardHandler),
	}
	return fn.Handle(context.Background(), inv)
}

// collect runs a scan's stream of messages as the answer's writer does,
// then reads the count it returns.
func collect(t *testing.T, res *functions.Result) ([]poll.Message, error) {
	t.Helper()
	stream, ok := res.Outputs[scan.OutputBinding].(functions.Stream)
	require.True(t, ok, "scan streams its messages: %T", res.Outputs[scan.OutputBinding])
	var msgs []poll.Message
	for v, err := range stream {
		if err != nil {
			return msgs, err
		}
		msgs = append(msgs, v.(poll.Message))
	}
	require.Equal(t, len(msgs), *res.ReturnValue.(*int), "ReturnValue counts the messages")
	return msgs, nil
}

// scanAll scans with fn and returns the messages.
func scanAll(t *testing.T, fn *scan.Function) []poll.Message {
	t.Helper()
	res, err := invokeFn(t, fn, timer)
	require.NoError(t, err)
	msgs, err := collect(t, res)
	require.NoError(t, err)
	return msgs
}

// finish makes an operation terminal: no longer pending.
func finish(db *database.MemoryClient, sub, id string) {
	db.PutOperation(&database.Operation{ID: id, PartitionKey: sub, Request: arm.RequestCreate, Status: arm.ProvisioningStateSucceeded})
}

func ids(msgs []poll.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.OperationID
	}
	return out
}

func putPending(db *database.MemoryClient, sub, id string) {
	db.PutOperation(&database.Operation{ID: id, PartitionKey: sub, Request: arm.RequestCreate, Status: arm.ProvisioningStateAccepted})
}

const timer = `{"Schedule":{"AdjustForDST":true},"ScheduleStatus":null,"IsPastDue":false}`

func TestScanListsPendingOperationsAcrossSubscriptions(t *testing.T) {
	db := database.NewMemoryClient(time.Second)
	put := func(sub, id string, status arm.ProvisioningState, uri string) {
		db.PutOperation(&database.Operation{ID: id, PartitionKey: sub, Request: arm.RequestCreate, Status: status, NotificationURI: uri})
	}
	put("sub-a", "1", arm.ProvisioningStateAccepted, "")
	put("sub-a", "2", arm.ProvisioningStateSucceeded, "")
	put("sub-b", "3", arm.ProvisioningStateDeleting, "")
	put("sub-b", "4", arm.ProvisioningStateFailed, "https://arm.example/n")
	put("sub-c", "5", arm.ProvisioningStateCanceled, "")
	put("sub-c", "6", arm.ProvisioningStateUpdating, "")

	res, err := invoke(t, db, timer)
	require.NoError(t, err)
	msgs, err := collect(t, res)
	require.NoError(t, err)
	require.ElementsMatch(t, []poll.Message{
		{SubscriptionID: "sub-a", OperationID: "1"},
		{SubscriptionID: "sub-b", OperationID: "3"},
		{SubscriptionID: "sub-b", OperationID: "4"},
		{SubscriptionID: "sub-c", OperationID: "6"},
	}, msgs)

	// Messages go out as JSON objects, never as strings the host could
	// mistake for base64.
	for _, m := range msgs {
		b, err := json.Marshal(m)
		require.NoError(t, err)
		var fields map[string]any
		require.NoError(t, json.Unmarshal(b, &fields))
		require.Len(t, fields, 2, "objects with subscriptionId and operationId only: %s", b)
	}
}

func TestScanWithNothingPendingSendsNoMessage(t *testing.T) {
	res, err := invoke(t, database.NewMemoryClient(time.Second), `"not even a timer"`)
	require.NoError(t, err, "an odd timer payload does not stop the scan")
	msgs, err := collect(t, res)
	require.NoError(t, err)
	require.Empty(t, msgs)
}

func TestScanFailsWhenTheListingFails(t *testing.T) {
	db := database.NewMemoryClient(time.Second)
	for i := range 10 {
		putPending(db, "s", fmt.Sprint(i))
	}
	fn := &scan.Function{DB: db}
	require.Len(t, scanAll(t, fn), 10)
	for _, failing := range []int{1, 2} { // the first read, the second one
		t.Run(fmt.Sprint("read ", failing), func(t *testing.T) {
			calls := 0
			db.Hook = func(call string) error {
				if call != "PendingOperations" {
					return nil
				}
				if calls++; calls == failing {
					return database.ErrUnavailable
				}
				return nil
			}
			t.Cleanup(func() { db.Hook = nil })
			// Until a scan starts past the first operation and reads twice.
			for attempt := 0; calls < 2; attempt++ {
				require.Less(t, attempt, 100, "no scan read the listing twice")
				calls = 0
				res, err := invokeFn(t, fn, timer)
				require.NoError(t, err)
				_, err = collect(t, res)
				if failing == 1 || calls == 2 {
					require.ErrorIs(t, err, database.ErrUnavailable)
					require.ErrorContains(t, err, "list pending operations")
				}
				if failing == 1 {
					break
				}
			}
		})
	}
}

func TestScanMessagesCarryTheScheduleIntervalAndScanTime(t *testing.T) {
	db := database.NewMemoryClient(time.Second)
	db.PutOperation(&database.Operation{ID: "1", PartitionKey: "s", Request: arm.RequestCreate, Status: arm.ProvisioningStateAccepted})
	for name, tc := range map[string]struct {
		timer string
		want  int
	}{
		// The host's payload: Last is the previous occurrence, Next this one.
		"regular run":                    {`{"ScheduleStatus":{"Last":"2026-11-30T11:59:50+00:00","Next":"2026-11-30T12:00:00+00:00"},"IsPastDue":false}`, 10},
		"first run":                      {`{"ScheduleStatus":{"Last":"0001-01-01T00:00:00","Next":"2026-11-30T12:00:00+00:00"},"IsPastDue":false}`, 0},
		"no schedule status":             {`{"ScheduleStatus":null,"IsPastDue":false}`, 0},
		"stale status after downtime":    {`{"ScheduleStatus":{"Last":"2026-11-29T10:00:00+00:00","Next":"2026-11-30T12:00:00+00:00"},"IsPastDue":true}`, 0},
		"fraction of a second rounds up": {`{"ScheduleStatus":{"Last":"2026-11-30T11:59:59.5+00:00","Next":"2026-11-30T12:00:00+00:00"}}`, 1},
	} {
		t.Run(name, func(t *testing.T) {
			schedule := &poll.Schedule{}
			schedule.Observe(7) // an earlier run's
			fn := &scan.Function{DB: db, Schedule: schedule}
			inv := &functions.Invocation{Function: "scan", Log: slog.New(slog.DiscardHandler),
				Data: map[string]json.RawMessage{"timer": json.RawMessage(tc.timer)}}
			res, err := fn.Handle(context.Background(), inv)
			require.NoError(t, err)
			msgs, err := collect(t, res)
			require.NoError(t, err)
			require.Len(t, msgs, 1)
			require.Equal(t, tc.want, msgs[0].ScanInterval)
			if tc.want == 0 {
				require.True(t, msgs[0].ScannedAt.IsZero(), "no interval, no scan time")
				require.Equal(t, 7, schedule.Interval(), "an unknown interval does not replace a known one")
			} else {
				require.Equal(t, tc.want, schedule.Interval(), "poll learns the interval")
				require.Equal(t, time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC), msgs[0].ScannedAt, "the schedule's Next: this run")
			}
		})
	}
}

// Each scan starts at a random point of the listing and wraps around, so
// that the operations dropped when polls fall behind are not always the
// same; every scan still sends every operation exactly once.
func TestScanStartsAtARandomPointAndSendsEveryOperationOnce(t *testing.T) {
	db := database.NewMemoryClient(time.Second)
	var all []string
	for i := range 50 {
		id := fmt.Sprintf("%02d", i)
		putPending(db, "s", id)
		all = append(all, id)
	}
	fn := &scan.Function{DB: db}
	require.ElementsMatch(t, all, ids(scanAll(t, fn)))

	starts := map[int]bool{}
	for range 40 {
		got := ids(scanAll(t, fn))
		require.ElementsMatch(t, all, got)
		// The listing from some point to its end, then from its beginning,
		// each part in an order of its own: every id of the first part is
		// above every id of the second.
		split := len(got)
		for k := 1; k < len(got); k++ {
			if slices.Min(got[:k]) > slices.Max(got[k:]) {
				split = k
				break
			}
		}
		starts[len(all)-split] = true
	}
	// 40 scans all starting at the same 5 of 50 points: about 1 in 10^40.
	require.Greater(t, len(starts), 5, "the start point does not move: %v", starts)
}

// Within a window, the operations of each subscription go out evenly apart,
// so that polls of one subscription seldom meet at its lock.
func TestScanSpreadsTheOperationsOfASubscription(t *testing.T) {
	for _, tt := range []struct {
		name    string
		perSub  map[string]int // operations of each subscription
		minGap  map[string]int // least distance between two of a subscription's messages
		atFront bool           // the scan's first messages vary from scan to scan
	}{
		{
			// Listed next to each other; sent one from each subscription in
			// turn, in an order that changes from scan to scan.
			name:    "ten subscriptions of ten",
			perSub:  map[string]int{"s0": 10, "s1": 10, "s2": 10, "s3": 10, "s4": 10, "s5": 10, "s6": 10, "s7": 10, "s8": 10, "s9": 10},
			minGap:  map[string]int{"s0": 10, "s5": 10, "s9": 10},
			atFront: true,
		},
		{
			// 12 operations among 60, the others' between them.
			name:   "one large subscription among small ones",
			perSub: map[string]int{"big": 12, "a": 4, "b": 4, "c": 4, "d": 4, "e": 4, "f": 4, "g": 4, "h": 4, "i": 4, "j": 4, "k": 4, "l": 4},
			minGap: map[string]int{"big": 3, "a": 15, "l": 15},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			db := database.NewMemoryClient(time.Second)
			total := 0
			for sub, n := range tt.perSub {
				for i := range n {
					putPending(db, sub, fmt.Sprintf("%s-%02d", sub, i))
				}
				total += n
			}
			fn := &scan.Function{DB: db}
			firsts := map[string]bool{}
			for range 20 {
				msgs := scanAll(t, fn)
				require.Len(t, msgs, total)
				firsts[msgs[0].SubscriptionID] = true
				last := map[string]int{}
				gaps := map[string]int{}
				for i, m := range msgs {
					if j, ok := last[m.SubscriptionID]; ok {
						if g, ok := gaps[m.SubscriptionID]; !ok || i-j < g {
							gaps[m.SubscriptionID] = i - j
						}
					}
					last[m.SubscriptionID] = i
				}
				for sub, want := range tt.minGap {
					require.GreaterOrEqual(t, gaps[sub], want, "closest two messages of %s: %v", sub, ids(msgs))
				}
			}
			if tt.atFront {
				// 20 scans all starting with the same 2 of 10: about 1 in 10^12.
				require.Greater(t, len(firsts), 2, "the order does not change: %v", firsts)
			}
		})
	}
}

// Operations that come and go between the two reads of a scan never make
// it fail or send one twice; at most the shift they cause leaves one out
// of this scan.
func TestScanToleratesChangesBetweenItsReads(t *testing.T) {
	tests := []struct {
		name   string
		change func(db *database.MemoryClient, firstSent string)
	}{
		{"nothing changes", func(*database.MemoryClient, string) {}},
		{"created before the start point", func(db *database.MemoryClient, _ string) { putPending(db, "s", "000") }},
		{"finished before the start point", func(db *database.MemoryClient, _ string) { finish(db, "s", "00") }},
		{"created after the start point", func(db *database.MemoryClient, _ string) { putPending(db, "s", "99") }},
		// The second read cannot stop at it: it stops after as many positions
		// as the first read skipped.
		{"the first one sent finished", func(db *database.MemoryClient, first string) { finish(db, "s", first) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := database.NewMemoryClient(time.Second)
			for i := range 20 {
				putPending(db, "s", fmt.Sprintf("%02d", i))
			}
			fn := &scan.Function{DB: db}
			scanAll(t, fn) // the next start point is taken in what this one listed
			before := ids(scanAll(t, fn))
			fn.StartAt(7) // the first read takes "07" to "19", the second "00" to "06"
			calls := 0
			db.Hook = func(call string) error {
				if call == "PendingOperations" {
					if calls++; calls == 2 {
						tt.change(db, "07")
					}
				}
				return nil
			}
			got := ids(scanAll(t, fn))
			db.Hook = nil
			require.Equal(t, 2, calls, "the scan reads the listing twice")
			seen := map[string]int{}
			for _, id := range got {
				seen[id]++
			}
			dups := 0
			for _, n := range seen {
				dups += n - 1
			}
			require.Zero(t, dups, "%v", got)
			require.GreaterOrEqual(t, len(seen), len(before)-1, "missed more than the shift: %v", got)
		})
	}
}
