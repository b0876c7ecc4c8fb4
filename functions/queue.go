package functions

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// QueueMessage decodes the queue message in Data[binding] into v.
//
// The message must be a JSON object, but it may arrive as the object itself,
// as a JSON string holding its text (quoted once or several times), or as
// base64 of any of those, with whitespace around. Fields of the message that
// v does not know are ignored. Every error it returns names the binding and
// what is wrong, and answers 400 (see StatusOf).
func (inv *Invocation) QueueMessage(binding string, v any) error {
	raw, ok := lookup(inv.Data, binding)
	if !ok {
		return BadRequest(fmt.Errorf("queue message %q: binding missing from Data", binding))
	}
	obj, err := unwrapObject(raw)
	if err != nil {
		return BadRequest(fmt.Errorf("queue message %q: %w", binding, err))
	}
	dec := json.NewDecoder(bytes.NewReader(obj))
	if err := dec.Decode(v); err != nil {
		return BadRequest(fmt.Errorf("queue message %q: %w", binding, err))
	}
	return nil
}

// QueueMetadata is what the host tells about the queue message that
// triggered an invocation. Missing or unreadable fields are zero. Times are
// in UTC.
type QueueMetadata struct {
	ID              string
	PopReceipt      string
	DequeueCount    int64
	InsertionTime   time.Time
	ExpirationTime  time.Time
	NextVisibleTime time.Time
}

// QueueMetadata reads the queue trigger's metadata. It never fails: strings
// may arrive quoted ("\"abc\""), DequeueCount as a number or a (quoted)
// string, times with or without a zone (no zone means UTC); anything it
// cannot read is left zero.
func (inv *Invocation) QueueMetadata() QueueMetadata {
	get := func(key string) []byte {
		raw, _ := lookup(inv.Metadata, key)
		return raw
	}
	return QueueMetadata{
		ID:              lenientText(get("Id")),
		PopReceipt:      lenientText(get("PopReceipt")),
		DequeueCount:    lenientInt(get("DequeueCount")),
		InsertionTime:   lenientTime(get("InsertionTime")),
		ExpirationTime:  lenientTime(get("ExpirationTime")),
		NextVisibleTime: lenientTime(get("NextVisibleTime")),
	}
}

// listenerVisibility is how long the host's queue listener hides each
// message it receives (QueueListener's _visibilityTimeout in the Storage
// Queues extension). The NextVisibleTime of an invocation's metadata is the
// one that receive answered (QueueTriggerBinding.CreateBindingData), so it
// is Storage's time of the receive plus this.
const listenerVisibility = 10 * time.Minute

// dateTimeOffsetMax is DateTimeOffset.MaxValue in whole seconds: the
// host's NextVisibleTime when the message has none.
var dateTimeOffsetMax = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)

// ReceivedAt is Storage's time when the host received the message, in
// whole seconds: NextVisibleTime less listenerVisibility. It lets a reader
// age a message on Storage's clock rather than its own. It is zero when
// the metadata does not say, or says what cannot be: no NextVisibleTime,
// the host's stand-in for none, or a receive more than the whole seconds'
// rounding before the insertion.
func (m QueueMetadata) ReceivedAt() time.Time {
	if m.NextVisibleTime.IsZero() || !m.NextVisibleTime.Before(dateTimeOffsetMax) {
		return time.Time{}
	}
	at := m.NextVisibleTime.Add(-listenerVisibility)
	if !m.InsertionTime.IsZero() && at.Before(m.InsertionTime.Add(-time.Second)) {
		return time.Time{}
	}
	return at
}
