package queuemsg_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/internal/queuemsg"
)

func TestDecode(t *testing.T) {
	scanned := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name      string
		msg       string
		want      []queuemsg.Entry // Err compared by presence
		single    bool
		scannedAt time.Time
		malformed string
	}{
		{name: "single", msg: `{"subscriptionId":"s","operationId":"o"}`,
			want: []queuemsg.Entry{{Operation: queuemsg.Operation{SubscriptionID: "s", OperationID: "o"}}}, single: true},
		{name: "single of an earlier version", msg: `{"subscriptionId":"s","operationId":"o","scanInterval":10,"scannedAt":"2026-12-01T12:00:00Z"}`,
			want: []queuemsg.Entry{{Operation: queuemsg.Operation{SubscriptionID: "s", OperationID: "o"}}}, single: true, scannedAt: scanned},
		{name: "batch", msg: `{"operations":[{"subscriptionId":"a","operationId":"1"},{"subscriptionId":"b","operationId":"2","x":1}],"scannedAt":"2026-12-01T12:00:00Z","future":true}`,
			want: []queuemsg.Entry{
				{Operation: queuemsg.Operation{SubscriptionID: "a", OperationID: "1"}},
				{Operation: queuemsg.Operation{SubscriptionID: "b", OperationID: "2"}},
			}, scannedAt: scanned},
		{name: "batch as the host indents it", msg: "{\n  \"operations\": [\n    {\n      \"subscriptionId\": \"a\",\n      \"operationId\": \"1\"\n    }\n  ]\n}",
			want: []queuemsg.Entry{{Operation: queuemsg.Operation{SubscriptionID: "a", OperationID: "1"}}}},
		{name: "one bad entry spoils only itself", msg: `{"operations":[{"subscriptionId":"a","operationId":"1"},7,{"subscriptionId":5,"operationId":"x"},{"subscriptionId":"c"},{"subscriptionId":"d","operationId":""}]}`,
			want: []queuemsg.Entry{
				{Operation: queuemsg.Operation{SubscriptionID: "a", OperationID: "1"}},
				{Err: fmt.Errorf("x")}, {Err: fmt.Errorf("x")}, {Err: fmt.Errorf("x")}, {Err: fmt.Errorf("x")},
			}},
		{name: "a scannedAt that is not a time is ignored", msg: `{"operations":[{"subscriptionId":"a","operationId":"1"}],"scannedAt":12}`,
			want: []queuemsg.Entry{{Operation: queuemsg.Operation{SubscriptionID: "a", OperationID: "1"}}}},
		{name: "not an object", msg: `[1]`, malformed: "cannot unmarshal"},
		{name: "empty object", msg: `{}`, malformed: "subscriptionId is missing"},
		{name: "single without an operation", msg: `{"subscriptionId":"s"}`, malformed: "operationId is missing"},
		{name: "single with a number", msg: `{"subscriptionId":42,"operationId":"x"}`, malformed: "subscriptionId is not a string"},
		{name: "single with an empty id", msg: `{"subscriptionId":"s","operationId":""}`, malformed: "operationId is empty"},
		{name: "operations not an array", msg: `{"operations":{"subscriptionId":"s"}}`, malformed: "not an array"},
		{name: "operations empty", msg: `{"operations":[]}`, malformed: "empty"},
		{name: "too many operations", msg: `{"operations":[` + strings.Repeat(`{"subscriptionId":"s","operationId":"o"},`, queuemsg.MaxOperations) + `{}]}`, malformed: "more than 1000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := queuemsg.Decode([]byte(tc.msg))
			if tc.malformed != "" {
				require.ErrorIs(t, err, queuemsg.ErrMalformed)
				require.ErrorContains(t, err, tc.malformed)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.single, r.Single)
			require.Equal(t, tc.scannedAt, r.ScannedAt)
			require.Len(t, r.Entries, len(tc.want))
			for i, e := range r.Entries {
				if tc.want[i].Err != nil {
					require.Error(t, e.Err, "entry %d", i)
					require.Contains(t, e.Err.Error(), fmt.Sprintf("operations[%d]", i))
					continue
				}
				require.NoError(t, e.Err, "entry %d", i)
				require.Equal(t, tc.want[i].Operation, e.Operation)
			}
		})
	}
}

func TestBatchesRoundTrip(t *testing.T) {
	scanned := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	var ops []queuemsg.Operation
	for i := range 250 {
		ops = append(ops, queuemsg.Operation{SubscriptionID: fmt.Sprintf("sub-%d", i/30), OperationID: fmt.Sprintf("op-%03d", i)})
	}
	msgs := queuemsg.Batches(ops, scanned)
	require.Len(t, msgs, 3)
	var got []queuemsg.Operation
	for _, m := range msgs {
		require.LessOrEqual(t, len(m.Operations), queuemsg.BatchSize)
		b, err := json.Marshal(m)
		require.NoError(t, err)
		r, err := queuemsg.Decode(b)
		require.NoError(t, err)
		require.Equal(t, scanned, r.ScannedAt)
		require.False(t, r.Single)
		require.Equal(t, r, m.Read(), "a message handed over in the process reads as the decoded one")
		for _, e := range r.Entries {
			require.NoError(t, e.Err)
			got = append(got, e.Operation)
		}
	}
	require.Equal(t, ops, got, "every operation once, in order")
	require.Empty(t, queuemsg.Batches(nil, scanned))
}

// Whatever the ids, a message stays well under the queue's 64 KiB once the
// host has indented it (JObject.ToString) and base64-encoded it.
func TestBatchesStayUnderTheQueueLimit(t *testing.T) {
	long := func(c string) string { return strings.Repeat(c, 1023/len(c)) }
	for name, id := range map[string]string{
		"guid":             "0d9f3a52-8f0e-4a44-9a7e-1b7c2f6d5e40",
		"1,023 bytes":      long("a"),
		"escaped at worst": long("<"),
		"multi-byte":       long("日"),
	} {
		t.Run(name, func(t *testing.T) {
			ops := make([]queuemsg.Operation, 500)
			for i := range ops {
				ops[i] = queuemsg.Operation{SubscriptionID: id, OperationID: fmt.Sprintf("%d-%s", i, id)}
			}
			n := 0
			for _, m := range queuemsg.Batches(ops, time.Now()) {
				n += len(m.Operations)
				compact, err := json.Marshal(m)
				require.NoError(t, err)
				require.True(t, len(compact) <= queuemsg.BatchBytes || len(m.Operations) == 1, "%d bytes", len(compact))
				indented, err := json.MarshalIndent(m, "", "  ")
				require.NoError(t, err)
				require.Less(t, base64.StdEncoding.EncodedLen(len(indented)), 48<<10)
			}
			require.Equal(t, len(ops), n)
		})
	}
}

func TestSuperseded(t *testing.T) {
	const interval = 10 * time.Second
	scanned := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	inserted := scanned.Add(time.Second)
	for _, tc := range []struct {
		name                string
		now, scan, inserted time.Time
		want                bool
	}{
		{name: "within the interval", now: scanned.Add(9 * time.Second), scan: scanned, inserted: inserted},
		{name: "at the next scan", now: scanned.Add(interval), scan: scanned, inserted: inserted},
		{name: "past the next scan", now: scanned.Add(interval + time.Millisecond), scan: scanned, inserted: inserted, want: true},
		{name: "reader's clock ahead: inserted under half an interval ago", now: scanned.Add(11 * time.Second), scan: scanned, inserted: scanned.Add(7 * time.Second)},
		{name: "inserted half an interval ago", now: scanned.Add(11 * time.Second), scan: scanned, inserted: scanned.Add(6 * time.Second), want: true},
		{name: "no insertion time", now: scanned.Add(11 * time.Second), scan: scanned, want: true},
		{name: "no scannedAt: from insertion", now: inserted.Add(interval + time.Millisecond), inserted: inserted, want: true},
		{name: "no scannedAt, within an interval of insertion", now: inserted.Add(interval), inserted: inserted},
		{name: "writer's clock ahead: scannedAt in the future", now: inserted.Add(5 * time.Second), scan: inserted.Add(time.Hour), inserted: inserted},
		{name: "scannedAt in the future, insertion an interval ago", now: inserted.Add(11 * time.Second), scan: inserted.Add(time.Hour), inserted: inserted, want: true},
		{name: "scannedAt more than a day old is not trusted", now: scanned.Add(25 * time.Hour), scan: scanned, inserted: scanned.Add(25*time.Hour - 5*time.Second)},
		{name: "neither time", now: scanned.Add(time.Hour)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, queuemsg.Superseded(tc.now, tc.scan, tc.inserted, interval))
		})
	}
	require.False(t, queuemsg.Superseded(scanned.Add(time.Hour), scanned, inserted, 0), "no interval: never")
}

// A reader whose clock runs ahead ages messages by Storage's clock, which
// the queue trigger's metadata gives at the receive: it drops no fresh
// message, and still drops old ones.
func TestSupersededByStorageClock(t *testing.T) {
	const interval = 10 * time.Second
	scanned := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC) // by the scan's clock, here Storage's
	inserted := scanned.Add(time.Second)
	for _, ahead := range []time.Duration{6 * time.Second, 10 * time.Second, 0, -10 * time.Second} {
		for _, tc := range []struct {
			name     string
			received time.Duration // after scanned, by Storage's clock
			elapsed  time.Duration // since the message arrived, by the reader's
			want     bool
		}{
			{name: "fresh", received: 5 * time.Second},
			{name: "fresh, checked again before its call", received: 5 * time.Second, elapsed: 4 * time.Second},
			{name: "received after the next scan", received: 11 * time.Second, want: ahead >= 0},
			{name: "next scan due during the work", received: 8 * time.Second, elapsed: 3 * time.Second, want: ahead >= 0},
		} {
			t.Run(fmt.Sprintf("reader %v ahead, %s", ahead, tc.name), func(t *testing.T) {
				received := scanned.Add(tc.received)
				arrived := received.Add(ahead)
				c := queuemsg.NewClock(received, arrived)
				require.Equal(t, tc.want, queuemsg.Superseded(c.Now(arrived.Add(tc.elapsed)), scanned, inserted, interval))
			})
		}
	}
}

func TestClock(t *testing.T) {
	received := time.Date(2026, 12, 1, 12, 0, 5, 0, time.UTC)
	for _, tc := range []struct {
		name           string
		received       time.Time
		ahead, elapsed time.Duration
		want           time.Time
		skew           time.Duration
		known          bool
	}{
		{name: "reader ahead: Storage's time", received: received, ahead: 10 * time.Second, elapsed: 3 * time.Second,
			want: received.Add(3 * time.Second), skew: 10 * time.Second, known: true},
		{name: "reader behind: its own, the earlier", received: received, ahead: -10 * time.Second, elapsed: 3 * time.Second,
			want: received.Add(-7 * time.Second), skew: -10 * time.Second, known: true},
		{name: "clocks agree", received: received, elapsed: time.Second, want: received.Add(time.Second), known: true},
		{name: "Storage's time unknown: the reader's own", ahead: 10 * time.Second, elapsed: 3 * time.Second,
			want: received.Add(13 * time.Second)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			arrived := received.Add(tc.ahead)
			c := queuemsg.NewClock(tc.received, arrived)
			require.Equal(t, tc.want, c.Now(arrived.Add(tc.elapsed)))
			skew, known := c.Skew()
			require.Equal(t, tc.known, known)
			require.Equal(t, tc.skew, skew)
		})
	}
	require.Equal(t, received, queuemsg.Clock{}.Now(received), "the zero Clock is the reader's own")
}
