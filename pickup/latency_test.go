package pickup_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/functions"
	"github.com/opstatus/opstatus/internal/clusterservice"
	"github.com/opstatus/opstatus/internal/queuemsg"
	"github.com/opstatus/opstatus/poll"
)

// firstCall records when Cluster Service was first asked after a mark.
type firstCall struct {
	poll.ClusterService
	mu   sync.Mutex
	at   time.Time
	seen bool
}

func (c *firstCall) Status(ctx context.Context, id clusterservice.InternalID) (clusterservice.Status, error) {
	c.mu.Lock()
	if !c.seen {
		c.at, c.seen = time.Now(), true
	}
	c.mu.Unlock()
	return c.ClusterService.Status(ctx, id)
}

func (c *firstCall) reset() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen = false
	return time.Now()
}

func (c *firstCall) since(start time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at.Sub(start)
}

// The host's costs on the queue path, in the Flex regime, where pickup and
// poll run in instances of their own (docs/design.md, "At scale"): one Storage
// write per output message, and poll finding the message only by polling
// the queue with the extension's back-off (host.json's maxPollingInterval,
// 0.5 s), while scan's messages arrive once an interval.
const (
	queueWrite         = 8 * time.Millisecond
	minPollingInterval = 100 * time.Millisecond
	maxPollingInterval = 500 * time.Millisecond
)

// pollWait samples how long a message written at a random moment of the
// scan interval waits for poll's next receive: the receive after scan's
// messages finds them and the next comes after the minimum, then each
// empty receive backs off as RandomizedExponentialBackoffStrategy does,
// up to maxPollingInterval.
func pollWait(r *rand.Rand) time.Duration {
	var receives []time.Duration
	at, cur, exp := time.Duration(0), minPollingInterval, 1
	for at < interval {
		receives = append(receives, at)
		at += cur
		d := minPollingInterval + time.Duration((0.8+0.4*r.Float64())*float64(int64(1)<<(exp-1))*float64(minPollingInterval))
		if d < maxPollingInterval {
			cur, exp = d, exp+1
		} else {
			cur = maxPollingInterval
		}
	}
	receives = append(receives, interval) // the next scan's messages
	written := time.Duration(r.Int64N(int64(interval)))
	i, _ := slices.BinarySearch(receives, written)
	return receives[i] - written
}

// BenchmarkFeedToFirstCall measures, for a batch of new operations, the
// time from the batch reaching the handler to the first Cluster Service
// call: polled in pickup's invocation, and through a queue message that
// poll, in another instance, reads (the handler's own work measured, the
// host's queue write and poll's receive back-off added as above). Cosmos
// reads are the in-memory store's: a real point read adds the same to both.
//
//	go test -run '^$' -bench FeedToFirstCall -benchtime 200x ./pickup
func BenchmarkFeedToFirstCall(b *testing.B) {
	for _, n := range []int{1, 100} {
		b.Run(fmt.Sprintf("invocation/%d", n), func(b *testing.B) {
			var total time.Duration
			for i := range b.N {
				f, cs := latencyFixture(b)
				data := f.batch(b, i, n)
				start := cs.reset()
				res, err := f.pickup.Handle(context.Background(), invocation(data))
				require.NoError(b, err)
				require.Equal(b, poll.Tally{poll.OutcomeUpdated: n}, res.ReturnValue)
				total += cs.since(start)
			}
			b.ReportMetric(float64(total.Microseconds())/float64(b.N)/1000, "ms-to-first-call")
		})
		b.Run(fmt.Sprintf("queue/%d", n), func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 2))
			var total, worst time.Duration
			for i := range b.N {
				f, cs := latencyFixture(b)
				data := f.batch(b, i, n)
				// pickup's part: read the batch, answer the messages.
				start := time.Now()
				inv := invocation(data)
				docs, err := inv.Documents("operations")
				require.NoError(b, err)
				var ops []queuemsg.Operation
				for _, d := range docs {
					var doc struct{ ID, PartitionKey string }
					require.NoError(b, json.Unmarshal(d, &doc))
					ops = append(ops, queuemsg.Operation{SubscriptionID: doc.PartitionKey, OperationID: doc.ID})
				}
				msgs := queuemsg.Batches(ops, time.Now())
				handler := time.Since(start)
				host := time.Duration(len(msgs))*queueWrite + pollWait(r)
				// poll's part, from the message's arrival.
				body, err := json.Marshal(msgs[0])
				require.NoError(b, err)
				start = cs.reset()
				_, err = f.poll.Handle(context.Background(), &functions.Invocation{ID: "poll",
					Data: map[string]json.RawMessage{poll.Binding: body}, Metadata: map[string]json.RawMessage{}, Log: slog.New(slog.DiscardHandler)})
				require.NoError(b, err)
				d := handler + host + cs.since(start)
				total += d
				worst = max(worst, d)
			}
			b.ReportMetric(float64(total.Microseconds())/float64(b.N)/1000, "ms-to-first-call")
			b.ReportMetric(float64(worst.Microseconds())/1000, "ms-worst")
		})
	}
}

func latencyFixture(b *testing.B) (*fixture, *firstCall) {
	b.Helper()
	f := newFixture(b, "installing")
	cs := &firstCall{ClusterService: f.cs.Client(b)}
	f.poll = poll.New(poll.Config{DB: f.db, Cluster: cs, Locker: f.poll.Locker, Notifier: f.poll.Notifier,
		Owner: "opstatus-bench", Location: "eastus", Interval: interval})
	f.pickup.Poll, f.pickup.Now = f.poll.Poll, nil
	return f, cs
}

// batch creates n new operations and returns the Data of their batch.
func (f *fixture) batch(b *testing.B, i, n int) map[string]json.RawMessage {
	b.Helper()
	docs := make([]string, n)
	for j := range n {
		id := fmt.Sprintf("op-%d-%d", i, j)
		f.create(id)
		docs[j] = f.doc(b, id, nil)
	}
	return payload(docs...)
}

func invocation(data map[string]json.RawMessage) *functions.Invocation {
	return &functions.Invocation{ID: "pickup", Function: "pickup", Data: data, Metadata: map[string]json.RawMessage{},
		Log: slog.New(slog.DiscardHandler)}
}
