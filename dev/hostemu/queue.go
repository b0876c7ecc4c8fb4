package hostemu

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue/queueerror"
)

// Queue listener constants of the host (QueueListener, QueuePollingIntervals).
const (
	// processingVisibility hides a message while it is processed; the host
	// renews it halfway through.
	processingVisibility = 10 * time.Minute
	// minPollingInterval is where the back-off starts.
	minPollingInterval = 100 * time.Millisecond
	// poisonSuffix names the poison queue of a queue.
	poisonSuffix = "-poison"
)

// queueKey names a queue in an account.
type queueKey struct {
	conn string // connection string
	name string
}

// queueClients caches one client per queue. They share one connection
// pool sized for the host's concurrency: the SDK's default keeps few idle
// connections per host, so most of a batch's deletes would each open and
// close a connection, which the host's pool does not do.
type queueClients struct {
	mu      sync.Mutex
	clients map[queueKey]*azqueue.QueueClient
	http    *http.Client
}

func (c *queueClients) get(conn, name string) (*azqueue.QueueClient, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := queueKey{conn: conn, name: name}
	if q, ok := c.clients[k]; ok {
		return q, nil
	}
	if c.http == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConns = 1024
		t.MaxIdleConnsPerHost = 1024
		c.http = &http.Client{Transport: t}
	}
	q, err := azqueue.NewQueueClientFromConnectionString(conn, name,
		&azqueue.ClientOptions{ClientOptions: policy.ClientOptions{Transport: c.http}})
	if err != nil {
		// The SDK's message quotes no part of the connection string.
		return nil, fmt.Errorf("queue %s: %w", name, err)
	}
	if c.clients == nil {
		c.clients = map[queueKey]*azqueue.QueueClient{}
	}
	c.clients[k] = q
	return q, nil
}

// ensure creates the queue when it does not exist.
func (c *queueClients) ensure(ctx context.Context, conn, name string) error {
	q, err := c.get(conn, name)
	if err != nil {
		return err
	}
	if _, err := q.Create(ctx, nil); err != nil && !queueerror.HasCode(err, queueerror.QueueAlreadyExists) {
		return fmt.Errorf("creating queue %s: %w", name, err)
	}
	return nil
}

// enqueue adds a message, creating the queue when it is missing (the
// host's AddMessageAndCreateIfNotExistsAsync).
func (c *queueClients) enqueue(ctx context.Context, conn, name, text string) error {
	q, err := c.get(conn, name)
	if err != nil {
		return err
	}
	_, err = q.EnqueueMessage(ctx, text, nil)
	if queueerror.HasCode(err, queueerror.QueueNotFound) {
		if err := c.ensure(ctx, conn, name); err != nil {
			return err
		}
		_, err = q.EnqueueMessage(ctx, text, nil)
	}
	if err != nil {
		return fmt.Errorf("enqueueing to %s: %w", name, err)
	}
	return nil
}

// notify wakes this instance's pollers of queue k.
func (in *Instance) notify(k queueKey) {
	in.watchMu.Lock()
	ps := in.watchers[k]
	in.watchMu.Unlock()
	for _, p := range ps {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
}

// poller is one instance's listener for one queue-triggered function,
// modelled on the host's QueueListener and QueueProcessor.
type poller struct {
	h      *Host
	in     *Instance
	fn     *Function
	key    queueKey
	q      *azqueue.QueueClient
	wake   chan struct{}
	active atomic.Int64  // messages being processed
	done   chan struct{} // a message finished processing (capacity 1)
}

func newPoller(h *Host, in *Instance, fn *Function) (*poller, error) {
	t := fn.Queue
	q, err := h.queues.get(t.connectionString, t.QueueName)
	if err != nil {
		return nil, fmt.Errorf("function %s: %w", fn.Name, err)
	}
	p := &poller{
		h: h, in: in, fn: fn, q: q,
		key:  queueKey{conn: t.connectionString, name: t.QueueName},
		wake: make(chan struct{}, 1),
		done: make(chan struct{}, 1),
	}
	in.watchMu.Lock()
	in.watchers[p.key] = append(in.watchers[p.key], p)
	in.watchMu.Unlock()
	return p, nil
}

// run polls until intake ends. Each message is processed in a goroutine
// of its own, added to wg, under the work context.
func (p *poller) run(intake, work context.Context, wg *sync.WaitGroup) {
	cfg := p.h.config.Queues
	log := p.h.log.With("function", p.fn.Name, "instance", p.in.index, "queue", p.key.name)
	backoff := newBackoff(minPollingInterval, cfg.MaxPollingInterval)
	found := false // a batch was found since the last back-off
	wait := func() bool {
		d := backoff.next(found)
		found = false
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-p.wake:
		case <-intake.Done():
			return false
		}
		return true
	}
	for intake.Err() == nil {
		resp, err := p.q.DequeueMessages(intake, &azqueue.DequeueMessagesOptions{
			NumberOfMessages:  ptr(int32(cfg.BatchSize)),
			VisibilityTimeout: ptr(int32(processingVisibility / time.Second)),
		})
		if err != nil {
			if intake.Err() != nil {
				return
			}
			log.Warn("hostemu: receiving messages failed", "err", err)
			if !wait() {
				return
			}
			continue
		}
		p.h.stats.receives.Add(1)
		p.h.stats.received.Add(int64(len(resp.Messages)))
		n := 0
		for _, m := range resp.Messages {
			if m == nil || m.MessageID == nil || m.PopReceipt == nil {
				continue
			}
			n++
			p.active.Add(1)
			wg.Go(func() {
				defer func() {
					p.active.Add(-1)
					select {
					case p.done <- struct{}{}:
					default:
					}
				}()
				p.process(work, m)
			})
		}
		if n == 0 {
			if !wait() {
				return
			}
			continue
		}
		found = true
		// The next batch comes when the messages in flight fall to
		// newBatchThreshold, at once and without back-off.
		for p.active.Load() > int64(cfg.NewBatchThreshold) {
			select {
			case <-p.done:
			case <-intake.Done():
				return
			}
		}
	}
}

// process runs one message through the function and completes it.
func (p *poller) process(ctx context.Context, m *azqueue.DequeuedMessage) {
	cfg := p.h.config.Queues
	log := p.h.log.With("function", p.fn.Name, "instance", p.in.index, "queue", p.key.name, "message", *m.MessageID)
	var dequeueCount int64
	if m.DequeueCount != nil {
		dequeueCount = *m.DequeueCount
	}
	text := deref(m.MessageText)
	msg := &message{id: *m.MessageID, popReceipt: *m.PopReceipt, text: text}

	// QueueProcessor.BeginProcessingMessageAsync: a message dequeued more
	// often than allowed (its last run crashed) goes to poison unprocessed.
	if dequeueCount > int64(cfg.MaxDequeueCount) {
		p.poison(ctx, log, msg, "dequeue count above maxDequeueCount")
		return
	}
	content, err := decodeMessage(text, cfg.MessageEncoding)
	if err != nil {
		// The queues extension moves messages it cannot decode to poison.
		p.poison(ctx, log, msg, err.Error())
		return
	}

	data := map[string]any{p.fn.Queue.Binding: p.triggerValue(content)}
	metadata := map[string]any{
		// Strings are serialized once more and the count becomes a string
		// (GetHttpScriptInvocationContextValue); DateTimeOffsets stay dates.
		"DequeueCount":    strconv.FormatInt(dequeueCount, 10),
		"Id":              jsonString(msg.id),
		"PopReceipt":      jsonString(msg.popReceipt),
		"InsertionTime":   offsetTime(m.InsertionTime),
		"ExpirationTime":  offsetTime(m.ExpirationTime),
		"NextVisibleTime": offsetTime(m.TimeNextVisible),
	}

	renewCtx, stopRenew := context.WithCancel(ctx)
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		p.renew(renewCtx, log, msg)
	}()
	ok := p.in.invoke(ctx, p.fn, data, metadata, dequeueCount)
	stopRenew()
	<-renewed

	switch {
	case ok:
		if _, err := p.q.DeleteMessage(ctx, msg.id, msg.popReceipt, nil); err != nil {
			log.Warn("hostemu: deleting the message failed", "err", err)
			return
		}
		p.h.stats.deleted.Add(1)
	case dequeueCount >= int64(cfg.MaxDequeueCount):
		p.poison(ctx, log, msg, fmt.Sprintf("failed %d times (maxDequeueCount)", dequeueCount))
	default:
		secs := int32(cfg.VisibilityTimeout / time.Second)
		if _, err := p.q.UpdateMessage(ctx, msg.id, msg.popReceipt, msg.text, &azqueue.UpdateMessageOptions{VisibilityTimeout: &secs}); err != nil {
			log.Warn("hostemu: releasing the message failed", "err", err)
			return
		}
		p.h.stats.retried.Add(1)
	}
}

// message is a dequeued message; popReceipt changes when its visibility
// is renewed.
type message struct {
	id, popReceipt, text string
}

// renew keeps the message hidden while the function runs, updating its
// visibility halfway through the processing timeout, like the host.
func (p *poller) renew(ctx context.Context, log *slog.Logger, msg *message) {
	t := time.NewTicker(processingVisibility / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			secs := int32(processingVisibility / time.Second)
			resp, err := p.q.UpdateMessage(ctx, msg.id, msg.popReceipt, msg.text, &azqueue.UpdateMessageOptions{VisibilityTimeout: &secs})
			if err != nil {
				log.Warn("hostemu: renewing the message's visibility failed", "err", err)
				continue
			}
			if resp.PopReceipt != nil {
				msg.popReceipt = *resp.PopReceipt
			}
		}
	}
}

// poison copies the message to <queue>-poison and deletes it.
func (p *poller) poison(ctx context.Context, log *slog.Logger, msg *message, why string) {
	poisonName := p.key.name + poisonSuffix
	log.Warn("hostemu: moving the message to the poison queue", "poisonQueue", poisonName, "reason", why)
	if err := p.h.queues.enqueue(ctx, p.key.conn, poisonName, msg.text); err != nil {
		log.Warn("hostemu: writing to the poison queue failed", "err", err)
		return
	}
	if _, err := p.q.DeleteMessage(ctx, msg.id, msg.popReceipt, nil); err != nil {
		log.Warn("hostemu: deleting the poisoned message failed", "err", err)
	}
	p.h.stats.poisoned.Add(1)
	p.in.notify(queueKey{conn: p.key.conn, name: poisonName})
}

// triggerValue is the trigger binding's value in Data.
func (p *poller) triggerValue(content []byte) any {
	if p.fn.Queue.DataType == "binary" {
		// A byte[] with dataType binary: Newtonsoft writes it as base64.
		return base64.StdEncoding.EncodeToString(content)
	}
	text := string(content)
	switch p.h.opts.QueueData {
	case QueueDataString:
		return text
	case QueueDataJSON:
		if json.Valid(content) {
			return json.RawMessage(content)
		}
		return text
	default:
		return jsonString(text)
	}
}

// backoff is the host's RandomizedExponentialBackoffStrategy: after a
// successful poll the minimum, then roughly doubling (±20 %) up to max.
type backoff struct {
	min, max time.Duration
	cur      time.Duration
	exp      int
}

func newBackoff(min, max time.Duration) *backoff {
	return &backoff{min: min, max: max, exp: 1}
}

func (b *backoff) next(succeeded bool) time.Duration {
	switch {
	case succeeded:
		b.cur, b.exp = b.min, 1
	case b.cur != b.max:
		factor := 0.8 + 0.4*rand.Float64()
		d := b.min + time.Duration(factor*float64(int64(1)<<min(b.exp-1, 30))*float64(b.min))
		if d < b.max {
			b.cur = d
			b.exp++
		} else {
			b.cur = b.max
		}
	}
	return b.cur
}

// offsetTime writes a DateTimeOffset the way the host's metadata carries
// it: whole seconds, "+00:00" for UTC. A missing time is "" .
func offsetTime(t *time.Time) string {
	if t == nil {
		return ""
	}
	return t.UTC().Truncate(time.Second).Format(layoutDateTimeOffset)
}

func ptr[T any](v T) *T { return &v }

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
