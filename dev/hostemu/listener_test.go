package hostemu

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"
	"github.com/stretchr/testify/require"
)

// receiveCall is one receive a listener made of a fakeQueue; the test
// answers it.
type receiveCall struct {
	n     int
	reply chan []*azqueue.DequeuedMessage
}

// fakeQueue is a listenerQueue whose receives the test answers one by one.
type fakeQueue struct{ calls chan receiveCall }

func (f *fakeQueue) exists(context.Context) (bool, error) { return true, nil }

func (f *fakeQueue) receive(ctx context.Context, n int) ([]*azqueue.DequeuedMessage, error) {
	c := receiveCall{n: n, reply: make(chan []*azqueue.DequeuedMessage)}
	select {
	case f.calls <- c:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case msgs := <-c.reply:
		return msgs, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// testListener returns a listener on a fakeQueue whose back-off is an
// hour, so that only a notification or a found batch brings the next
// receive soon. It runs until the test ends.
func testListener(t *testing.T, batch, threshold int, handle func(id string)) (*poller, *fakeQueue) {
	p, f := newTestListener(batch, threshold, handle)
	startListener(t, p)
	return p, f
}

// newTestListener is testListener's listener before it runs.
func newTestListener(batch, threshold int, handle func(id string)) (*poller, *fakeQueue) {
	h := &Host{config: HostConfig{Queues: QueuesConfig{
		BatchSize: batch, NewBatchThreshold: threshold, MaxDequeueCount: 5,
		MaxPollingInterval: time.Hour, MessageEncoding: EncodingNone,
	}}}
	h.log = slog.New(slog.DiscardHandler)
	in := &Instance{h: h, watchers: map[string][]*poller{}}
	f := &fakeQueue{calls: make(chan receiveCall)}
	p := &poller{
		h: h, in: in, key: queueKey{name: "q"},
		fn:      &Function{Name: "poll", Queue: &QueueTrigger{Binding: "m", QueueName: "q"}},
		src:     f,
		backoff: newBackoff(time.Hour, time.Hour),
		wake:    make(chan struct{}, 1),
		done:    make(chan struct{}, 1),
		handle: func(_ context.Context, m *azqueue.DequeuedMessage, _ []byte) {
			if handle != nil {
				handle(*m.MessageID)
			}
		},
	}
	in.watchers["q"] = []*poller{p}
	return p, f
}

// startListener runs p until the test ends.
func startListener(t *testing.T, p *poller) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { p.run(ctx, ctx, &wg) })
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// nextReceive waits for the listener's next receive.
func nextReceive(t *testing.T, f *fakeQueue) receiveCall {
	t.Helper()
	select {
	case c := <-f.calls:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("the listener did not receive")
		return receiveCall{}
	}
}

// noReceive checks that the listener does not receive for a while.
func noReceive(t *testing.T, f *fakeQueue, why string) {
	t.Helper()
	select {
	case <-f.calls:
		t.Fatal("the listener received: " + why)
	case <-time.After(200 * time.Millisecond):
	}
}

func messages(from, n int) []*azqueue.DequeuedMessage {
	var msgs []*azqueue.DequeuedMessage
	for i := from; i < from+n; i++ {
		msgs = append(msgs, &azqueue.DequeuedMessage{
			MessageID: ptr("m" + strconv.Itoa(i)), PopReceipt: ptr("p"),
			MessageText: ptr("x"), DequeueCount: ptr(int64(1)),
		})
	}
	return msgs
}

func TestListenerForgetsNotificationsFromBeforeTheReceive(t *testing.T) {
	// QueueListener.ExecuteAsync replaces its notification source before
	// it receives: a queue write from before does not shorten the back-off.
	p, f := newTestListener(16, 8, nil)
	p.in.notify("q") // a write lands before the first receive
	startListener(t, p)
	c := nextReceive(t, f)
	require.Empty(t, p.wake, "the notification was forgotten when the receive began")
	c.reply <- nil
	noReceive(t, f, "an empty receive backs off; the early notification must not end the back-off")

	p.in.notify("q")
	nextReceive(t, f).reply <- nil // a notification during the back-off ends it
}

func TestListenerKeepsNotificationsDuringTheReceive(t *testing.T) {
	p, f := testListener(t, 16, 8, nil)
	c := nextReceive(t, f)
	p.in.notify("q") // a write lands while the receive is in flight
	c.reply <- nil
	nextReceive(t, f).reply <- nil // so the hour of back-off ends at once
}

func TestListenerBatches(t *testing.T) {
	// QueueListener: after a receive that found messages the next comes at
	// once while no more than newBatchThreshold messages are in flight
	// (WaitForNewBatchThreshold), asking for batchSize each time.
	release := make(chan struct{})
	started := make(chan string, 64)
	_, f := testListener(t, 4, 8, func(id string) {
		started <- id
		<-release
	})
	c := nextReceive(t, f)
	require.Equal(t, 4, c.n, "batchSize messages at a time")
	c.reply <- messages(0, 4)                 // 4 in flight
	nextReceive(t, f).reply <- messages(4, 4) // 8 in flight: still at the threshold
	c = nextReceive(t, f)
	c.reply <- messages(8, 4) // 12 in flight
	for range 12 {
		<-started
	}
	noReceive(t, f, "12 messages in flight is above newBatchThreshold 8")
	for range 3 {
		release <- struct{}{}
	}
	noReceive(t, f, "9 in flight is still above newBatchThreshold")
	release <- struct{}{} // 8 in flight
	nextReceive(t, f).reply <- nil
	noReceive(t, f, "an empty receive backs off")
	close(release)
}
