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
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue/queueerror"
)

// Queue listener constants of the Storage Queues extension.
const (
	// processingVisibility hides a message while it is processed; the
	// listener renews it halfway through (QueueListener._visibilityTimeout).
	processingVisibility = 10 * time.Minute
	// minPollingInterval is where the back-off starts
	// (QueuePollingIntervals.Minimum).
	minPollingInterval = 100 * time.Millisecond
	// poisonSuffix names the poison queue of a queue
	// (QueueListenerFactory.poisonQueueSuffix).
	poisonSuffix = "-poison"
	// maxQueueName is the longest valid queue name
	// (QueueClientExtensions.IsValidQueueName).
	maxQueueName = 63
)

// dateTimeOffsetMax is DateTimeOffset.MaxValue in whole seconds, what the
// metadata carries for a message without an expiration or next visible
// time (QueueTriggerBinding.CreateBindingData).
var dateTimeOffsetMax = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)

// queueKey names a queue in an account.
type queueKey struct {
	conn string // connection string
	name string
}

// queueClients caches one client per queue. They share one connection
// pool sized for the host's concurrency: the SDK's default keeps few idle
// connections per host, so most of a batch's deletes would each open and
// close a connection, which the host's pool does not do. Every request
// waits latency first (Options.StorageLatency).
type queueClients struct {
	mu      sync.Mutex
	clients map[queueKey]*azqueue.QueueClient
	http    *http.Client
	latency time.Duration
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
		&azqueue.ClientOptions{ClientOptions: policy.ClientOptions{Transport: latencyTransport{next: c.http, delay: c.latency}}})
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

// latencyTransport delays every request to Storage, standing in for the
// round trip to a Storage account that the host pays on every queue
// operation.
type latencyTransport struct {
	next  policy.Transporter
	delay time.Duration
}

func (t latencyTransport) Do(req *http.Request) (*http.Response, error) {
	if t.delay > 0 {
		timer := time.NewTimer(t.delay)
		select {
		case <-timer.C:
		case <-req.Context().Done():
			timer.Stop()
			return nil, req.Context().Err()
		}
	}
	return t.next.Do(req)
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

// enqueue adds a message, creating the queue when it is missing
// (QueueClientExtensions.AddMessageAndCreateIfNotExistsAsync).
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

// poisonQueueName is the poison queue of queue name, "" when it has none:
// a queue that is itself a poison queue, or whose poison queue's name
// would be too long (QueueListenerFactory.CreatePoisonQueueReference).
func poisonQueueName(name string) string {
	if strings.HasSuffix(name, poisonSuffix) || len(name)+len(poisonSuffix) > maxQueueName {
		return ""
	}
	return name + poisonSuffix
}

// notify wakes this instance's listeners of the queue name
// (SharedQueueWatcher.Notify, which goes by queue name). The watcher
// belongs to the host process: a write never wakes another instance.
func (in *Instance) notify(name string) {
	in.watchMu.Lock()
	ps := in.watchers[name]
	in.watchMu.Unlock()
	in.h.stats.wakeups.Add(int64(len(ps)))
	for _, p := range ps {
		p.notify()
	}
}

// listenerQueue is what a listener asks of its queue; tests replace it.
type listenerQueue interface {
	exists(ctx context.Context) (bool, error)
	receive(ctx context.Context, n int) ([]*azqueue.DequeuedMessage, error)
}

// azListenerQueue is a listenerQueue on a Storage queue.
type azListenerQueue struct{ q *azqueue.QueueClient }

func (a azListenerQueue) exists(ctx context.Context) (bool, error) {
	_, err := a.q.GetProperties(ctx, nil)
	if queueerror.HasCode(err, queueerror.QueueNotFound) {
		return false, nil
	}
	return err == nil, err
}

func (a azListenerQueue) receive(ctx context.Context, n int) ([]*azqueue.DequeuedMessage, error) {
	resp, err := a.q.DequeueMessages(ctx, &azqueue.DequeueMessagesOptions{
		NumberOfMessages:  ptr(int32(n)),
		VisibilityTimeout: ptr(int32(processingVisibility / time.Second)),
	})
	return resp.Messages, err
}

// poller is one instance's listener for one queue-triggered function,
// modelled on the extension's QueueListener and QueueProcessor.
type poller struct {
	h   *Host
	in  *Instance
	fn  *Function
	key queueKey
	q   *azqueue.QueueClient
	src listenerQueue
	// handle processes one decoded message; tests replace it.
	handle  func(ctx context.Context, m *azqueue.DequeuedMessage, content []byte)
	backoff *backoff
	wake    chan struct{} // a notification since the last receive began
	active  atomic.Int64  // messages being processed
	done    chan struct{} // a message finished processing (capacity 1)
}

func newPoller(h *Host, in *Instance, fn *Function) (*poller, error) {
	t := fn.Queue
	q, err := h.queues.get(t.connectionString, t.QueueName)
	if err != nil {
		return nil, fmt.Errorf("function %s: %w", fn.Name, err)
	}
	p := &poller{
		h: h, in: in, fn: fn, q: q,
		src:     azListenerQueue{q: q},
		key:     queueKey{conn: t.connectionString, name: t.QueueName},
		backoff: newBackoff(minPollingInterval, h.config.Queues.MaxPollingInterval),
		wake:    make(chan struct{}, 1),
		done:    make(chan struct{}, 1),
	}
	p.handle = p.process
	in.watchMu.Lock()
	in.watchers[p.key.name] = append(in.watchers[p.key.name], p)
	in.watchMu.Unlock()
	return p, nil
}

// notify ends the listener's back-off wait (QueueListener.Notify).
func (p *poller) notify() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// run polls until intake ends, as QueueListener.ExecuteAsync does under
// its TaskSeriesTimer. Each message is processed in a goroutine of its
// own, added to wg, under the work context.
func (p *poller) run(intake, work context.Context, wg *sync.WaitGroup) {
	cfg := p.h.config.Queues
	log := p.h.log.With("function", p.fn.Name, "instance", p.in.index, "queue", p.key.name)
	found := false // a batch was found since the last back-off
	wait := func() bool {
		d := p.backoff.next(found)
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
	exists := false
	for intake.Err() == nil {
		// ExecuteAsync replaces its notification source before it asks the
		// queue anything: a notification from before is forgotten, one
		// that arrives during the receive ends the back-off after it.
		select {
		case <-p.wake:
		default:
		}
		if !exists {
			// Checked once, and again after any failure.
			ok, err := p.src.exists(intake)
			if intake.Err() != nil {
				return
			}
			if err != nil {
				log.Warn("hostemu: checking the queue failed", "err", err)
			}
			if !ok {
				if !wait() {
					return
				}
				continue
			}
			exists = true
		}
		msgs, err := p.src.receive(intake, cfg.BatchSize)
		if err != nil {
			if intake.Err() != nil {
				return
			}
			exists = false
			log.Warn("hostemu: receiving messages failed", "err", err)
			if !wait() {
				return
			}
			continue
		}
		p.h.stats.receives.Add(1)
		p.h.stats.received.Add(int64(len(msgs)))
		n := 0
		for _, m := range msgs {
			if m == nil || m.MessageID == nil || m.PopReceipt == nil {
				continue
			}
			n++
			content, err := decodeMessage(deref(m.MessageText), cfg.MessageEncoding)
			if err != nil {
				// The queue client's MessageDecodingFailed handler moves it
				// to poison during the receive, without an invocation
				// (QueueServiceClientProvider.CreateMessageDecodingFailedHandler).
				p.poison(work, log.With("message", *m.MessageID), &message{id: *m.MessageID, popReceipt: *m.PopReceipt, text: deref(m.MessageText)}, err.Error())
				continue
			}
			p.active.Add(1)
			wg.Go(func() {
				defer func() {
					p.active.Add(-1)
					select {
					case p.done <- struct{}{}:
					default:
					}
				}()
				p.handle(work, m, content)
			})
		}
		if n == 0 {
			if !wait() {
				return
			}
			continue
		}
		found = true
		// QueueListener.WaitForNewBatchThreshold: the next receive comes as
		// soon as no more than newBatchThreshold messages are in flight.
		for p.active.Load() > int64(cfg.NewBatchThreshold) {
			select {
			case <-p.done:
			case <-intake.Done():
				return
			}
		}
	}
}

// process runs one message through the function and completes it
// (QueueListener.ProcessMessageAsync, QueueProcessor).
func (p *poller) process(ctx context.Context, m *azqueue.DequeuedMessage, content []byte) {
	cfg := p.h.config.Queues
	log := p.h.log.With("function", p.fn.Name, "instance", p.in.index, "queue", p.key.name, "message", *m.MessageID)
	var dequeueCount int64
	if m.DequeueCount != nil {
		dequeueCount = *m.DequeueCount
	}
	msg := &message{id: *m.MessageID, popReceipt: *m.PopReceipt, text: deref(m.MessageText)}

	// QueueProcessor.BeginProcessingMessageAsync: a message dequeued more
	// often than allowed (its last run crashed) goes to poison unprocessed.
	if dequeueCount > int64(cfg.MaxDequeueCount) {
		p.poison(ctx, log, msg, "dequeue count above maxDequeueCount")
		return
	}

	data := map[string]any{p.fn.Queue.Binding: p.triggerValue(content)}
	now := time.Now()
	// QueueTriggerBinding.CreateBindingData, converted as
	// ScriptInvocationContextExtensions.GetHttpScriptInvocationContextValue
	// does: strings serialized once more, the count a string, the
	// DateTimeOffsets through Parse(ToString()) (whole seconds).
	meta := newBindingData()
	meta.set("QueueTrigger", string(content))
	meta.set("DequeueCount", strconv.FormatInt(dequeueCount, 10))
	meta.set("ExpirationTime", offsetTime(m.ExpirationTime, dateTimeOffsetMax))
	meta.set("Id", jsonString(msg.id))
	meta.set("InsertionTime", offsetTime(m.InsertionTime, now))
	meta.set("NextVisibleTime", offsetTime(m.TimeNextVisible, dateTimeOffsetMax))
	meta.set("PopReceipt", jsonString(msg.popReceipt))
	meta.set("sys", sysBindingData(p.fn.Name, now))
	if p.fn.Queue.DataType != "binary" {
		applyMessageProperties(meta, string(content), p.h.opts.Location)
	}

	renewCtx, stopRenew := context.WithCancel(ctx)
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		p.renew(renewCtx, log, msg)
	}()
	ok := p.in.invoke(ctx, p.fn, data, meta, dequeueCount)
	stopRenew()
	<-renewed
	if p.in.crashed() {
		// Nobody is left to complete it: it comes back when its
		// visibility runs out.
		return
	}

	// QueueProcessor.CompleteProcessingMessageAsync.
	switch {
	case ok:
		if _, err := p.q.DeleteMessage(ctx, msg.id, msg.popReceipt, nil); err != nil {
			log.Warn("hostemu: deleting the message failed", "err", err)
			return
		}
		p.h.stats.deleted.Add(1)
	case poisonQueueName(p.key.name) == "":
		// No poison queue: the message stays hidden, so that it does not
		// fail again and again at once.
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

// applyMessageProperties adds the top-level properties of a message that
// is a JSON object to the binding data, over what is there
// (Utility.ApplyBindingData, called by WorkerFunctionInvoker.
// TransformInput): arrays and nulls are left out, an object stays an
// object, anything else becomes its string form ((string)JValue: "True",
// "42", a date as "MM/dd/yyyy HH:mm:ss"), serialized once more like every
// string of the metadata.
func applyMessageProperties(meta *bindingData, text string, loc *time.Location) {
	if loc == nil {
		loc = time.UTC
	}
	if !isJSONText(text) {
		return
	}
	obj, err := parseJToken([]byte(text), loc)
	if err != nil || obj.kind != jObject {
		return // JObject.Parse failed: not an error
	}
	for _, prop := range obj.props {
		switch prop.value.kind {
		case jArray, jNull:
		case jObject:
			meta.set(prop.name, json.RawMessage(prop.value.compact()))
		default:
			meta.set(prop.name, jsonString(prop.value.valueText()))
		}
	}
}

// message is a dequeued message; popReceipt changes when its visibility
// is renewed.
type message struct {
	id, popReceipt, text string
}

// renew keeps the message hidden while the function runs, updating its
// visibility halfway through the processing timeout
// (QueueListener.CreateUpdateMessageVisibilityTimer).
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

// poison copies the message to the poison queue and deletes it
// (QueueProcessor.HandlePoisonMessageAsync); without a poison queue it
// leaves the message alone.
func (p *poller) poison(ctx context.Context, log *slog.Logger, msg *message, why string) {
	poisonName := poisonQueueName(p.key.name)
	if poisonName == "" {
		return
	}
	log.Warn("hostemu: moving the message to the poison queue", "poisonQueue", poisonName, "reason", why)
	if err := p.h.queues.enqueue(ctx, p.key.conn, poisonName, msg.text); err != nil {
		log.Warn("hostemu: writing to the poison queue failed", "err", err)
		return
	}
	if _, err := p.q.DeleteMessage(ctx, msg.id, msg.popReceipt, nil); err != nil {
		log.Warn("hostemu: deleting the poisoned message failed", "err", err)
	}
	p.h.stats.poisoned.Add(1)
	// QueueListener.RegisterSharedWatcherWithQueueProcessor.
	p.in.notify(poisonName)
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

// backoff is the extension's RandomizedExponentialBackoffStrategy: after a
// poll that found messages the minimum, then min + (2^(n-1) × min) ×
// a random factor in [0.8, 1.2), capped at max.
type backoff struct {
	min, max time.Duration
	cur      time.Duration
	exp      int
}

func newBackoff(min, max time.Duration) *backoff {
	return &backoff{min: min, max: max}
}

func (b *backoff) next(succeeded bool) time.Duration {
	switch {
	case succeeded:
		b.cur, b.exp = b.min, 1
	case b.cur != b.max:
		d := b.min
		if b.exp > 0 {
			factor := 0.8 + 0.4*rand.Float64()
			d += time.Duration(factor * float64(int64(1)<<min(b.exp-1, 30)) * float64(b.min))
		}
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
// it: whole seconds, "+00:00" for UTC. A missing time is def.
func offsetTime(t *time.Time, def time.Time) string {
	v := def
	if t != nil {
		v = *t
	}
	return v.UTC().Truncate(time.Second).Format(layoutDateTimeOffset)
}

func ptr[T any](v T) *T { return &v }

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
