// Package queuemsg is the queue message scan writes and poll reads. A
// message names the operations to bring up to date, in one of two shapes,
// both valid forever (messages written by an older version can still be in
// the queue during a deployment):
//
//	{"subscriptionId":"…","operationId":"…"}                          single
//	{"operations":[{"subscriptionId":"…","operationId":"…"},…],"scannedAt":"…"}  batch
//
// Fields a reader does not know are ignored.
package queuemsg

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/opstatus/opstatus/internal/database"
)

// Limits of a batch message. The count keeps a scan's queue writes, which
// the host makes one Storage round trip at a time, a small part of the scan
// interval at tens of thousands of operations, while a message stays a
// small share of one instance's work; the byte budget keeps a message well
// under the queue's 64 KiB once the host has indented it and base64-encoded
// it, whatever the length of its ids.
const (
	// BatchSize is how many operations scan puts in one message at most.
	BatchSize = 100
	// BatchBytes bounds the compact JSON of one message scan writes.
	BatchBytes = 24 << 10
	// MaxOperations bounds what a reader accepts in one message.
	MaxOperations = 1000
)

// Operation names one operation: its subscription (lower case: the
// Operations item's partition key, or in a fixed Operations partition the
// subscription of its externalId) and the item's id.
type Operation struct {
	SubscriptionID string `json:"subscriptionId"`
	OperationID    string `json:"operationId"`
}

// Message is a batch message as scan writes it.
type Message struct {
	Operations []Operation `json:"operations"`
	// ScannedAt is when the scan that wrote the message started. A message
	// is superseded once the next scan is due (see Superseded).
	ScannedAt time.Time `json:"scannedAt,omitzero"`
}

// Entry is one operation of a message as read: Err says why it names no
// operation (a field missing or not a string) and is nil otherwise. One
// unreadable entry never makes the others unreadable.
type Entry struct {
	Operation
	Err error
}

// Read is a message as a reader sees it, whichever its shape.
type Read struct {
	Entries   []Entry
	ScannedAt time.Time // zero when the message does not say
	// Single is true for the single-operation shape.
	Single bool
}

// ErrMalformed is wrapped by Decode's errors: the message as a whole names
// no operation, and no retry can change that.
var ErrMalformed = errors.New("malformed queue message")

// wire is both shapes at once, each field kept raw so that a field of the
// wrong type spoils only its own entry.
type wire struct {
	Operations     json.RawMessage `json:"operations"`
	SubscriptionID json.RawMessage `json:"subscriptionId"`
	OperationID    json.RawMessage `json:"operationId"`
	ScannedAt      json.RawMessage `json:"scannedAt"`
}

// Decode reads a message's JSON object. It fails (ErrMalformed) only when
// the message as a whole is unusable: not an object, no operations at all,
// more than MaxOperations, an "operations" that is not an array, or a
// single-shape message whose ids are missing, empty or not strings. A
// scannedAt that is not a time is ignored.
func Decode(obj []byte) (Read, error) {
	var w wire
	if err := json.Unmarshal(obj, &w); err != nil {
		return Read{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	r := Read{ScannedAt: timeOf(w.ScannedAt)}
	if isNull(w.Operations) {
		e := entryOf(w.SubscriptionID, w.OperationID)
		if e.Err != nil {
			return Read{}, fmt.Errorf("%w: %w", ErrMalformed, e.Err)
		}
		r.Entries, r.Single = []Entry{e}, true
		return r, nil
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(w.Operations, &raws); err != nil {
		return Read{}, fmt.Errorf("%w: operations is not an array", ErrMalformed)
	}
	switch {
	case len(raws) == 0:
		return Read{}, fmt.Errorf("%w: operations is empty", ErrMalformed)
	case len(raws) > MaxOperations:
		return Read{}, fmt.Errorf("%w: %d operations, more than %d", ErrMalformed, len(raws), MaxOperations)
	}
	r.Entries = make([]Entry, len(raws))
	for i, raw := range raws {
		var op wire
		if err := json.Unmarshal(raw, &op); err != nil {
			r.Entries[i].Err = fmt.Errorf("operations[%d] is not an object", i)
			continue
		}
		r.Entries[i] = entryOf(op.SubscriptionID, op.OperationID)
		if r.Entries[i].Err != nil {
			r.Entries[i].Err = fmt.Errorf("operations[%d]: %w", i, r.Entries[i].Err)
		}
	}
	return r, nil
}

func entryOf(sub, op json.RawMessage) Entry {
	var e Entry
	var err error
	if e.SubscriptionID, err = idOf("subscriptionId", sub); err != nil {
		e.Err = err
	} else if e.OperationID, err = idOf("operationId", op); err != nil {
		e.Err = err
	}
	return e
}

func idOf(field string, raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", fmt.Errorf("%s is missing", field)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("%s is not a string", field)
	}
	if s == "" {
		return "", fmt.Errorf("%s is empty", field)
	}
	return s, nil
}

func timeOf(raw json.RawMessage) time.Time {
	var t time.Time
	if isNull(raw) || json.Unmarshal(raw, &t) != nil {
		return time.Time{}
	}
	return t.UTC()
}

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || bytes.Equal(raw, []byte("null"))
}

// Batches cuts ops into messages of at most BatchSize operations and
// BatchBytes of JSON each, in order, each stamped with scannedAt. An
// operation whose ids alone exceed the byte budget still gets a message of
// its own.
func Batches(ops []Operation, scannedAt time.Time) []Message {
	var out []Message
	cur := Message{ScannedAt: scannedAt}
	overhead, _ := json.Marshal(cur)
	size := len(overhead)
	for _, op := range ops {
		b, _ := json.Marshal(op) // two strings: cannot fail
		n := len(b) + 1          // and a comma
		if len(cur.Operations) > 0 && (len(cur.Operations) == BatchSize || size+n > BatchBytes) {
			out = append(out, cur)
			cur, size = Message{ScannedAt: scannedAt}, len(overhead)
		}
		cur.Operations = append(cur.Operations, op)
		size += n
	}
	if len(cur.Operations) > 0 {
		out = append(out, cur)
	}
	return out
}

// Read returns m as a reader sees it once decoded, for a reader in the
// same process: no entry has an error.
func (m Message) Read() Read {
	r := Read{Entries: make([]Entry, len(m.Operations)), ScannedAt: m.ScannedAt}
	for i, op := range m.Operations {
		r.Entries[i].Operation = op
	}
	return r
}

// maxScanAge bounds how old a scannedAt is believed: no scan schedule is
// slower than a day.
const maxScanAge = 24 * time.Hour

// Superseded reports whether, at now, a message has been superseded by a
// fresher one from a later scan, so that its reader can drop it without
// calling anyone. now must not run ahead of Storage's clock, by which the
// queue's InsertionTime inserted is written (see Clock.Now); interval is
// the scan schedule's interval; scannedAt is when the writing scan
// started, by the scan's clock. Either time is zero when unknown.
//
// The message is superseded an interval after scannedAt, when the next
// scan is due. It is never dropped before half an interval has passed
// since its insertion, so that a scan whose clock runs behind cannot make
// a fresh message look old (nor, when Storage's time is unknown, a reader
// whose clock runs ahead by less than that). A scannedAt in the future of
// now (a scan's clock ahead) or older than a day is not trusted: the
// message then expires an interval after its insertion, as one without
// scannedAt does. Without either time it is never superseded.
func Superseded(now, scannedAt, inserted time.Time, interval time.Duration) bool {
	if interval <= 0 {
		return false
	}
	base := scannedAt
	if base.IsZero() || base.After(now) || now.Sub(base) > maxScanAge {
		base = inserted
	}
	if base.IsZero() || !now.After(base.Add(interval)) {
		return false
	}
	return inserted.IsZero() || now.Sub(inserted) >= interval/2
}

// Clock tells a message's reader the time by Storage's clock, as well as
// it can: the queue trigger's metadata carries Storage's time of the
// receive that delivered the message, and the reader's own clock measures
// only the time elapsed since it arrived, so that a reader whose clock
// runs ahead does not see fresh messages as old. The zero Clock knows no
// Storage time and tells the reader's own.
type Clock struct {
	received time.Time // Storage's time of the receive; zero when unknown
	arrived  time.Time // the reader's time when the message arrived
}

// NewClock returns the Clock of a message received at Storage's time
// received (zero when unknown) that arrived at the reader's time arrived.
// arrived and the times later given to Now should come from time.Now:
// their monotonic readings keep a step of the wall clock out of the
// elapsed time.
func NewClock(received, arrived time.Time) Clock {
	if received.IsZero() {
		return Clock{}
	}
	return Clock{received: received, arrived: arrived}
}

// Now is the time at the reader's time local, by the earlier of Storage's
// clock and the reader's own: a message is aged only as far as both agree,
// so that neither a reader's clock running ahead nor a wrong Storage time
// drops a fresh message. The estimate of Storage's time errs early by the
// delay between the receive and the arrival, and by the metadata's whole
// seconds.
func (c Clock) Now(local time.Time) time.Time {
	if c.received.IsZero() {
		return local
	}
	if storage := c.received.Add(local.Sub(c.arrived)); storage.Before(local) {
		return storage
	}
	return local
}

// Skew is how far the reader's clock was ahead of Storage's when the
// message arrived (negative when behind), delay and rounding included, and
// false when Storage's time is unknown.
func (c Clock) Skew() (time.Duration, bool) {
	if c.received.IsZero() {
		return 0, false
	}
	return c.arrived.Sub(c.received), true
}

// Check reports why the operation cannot be acted on, or nil: its id, and
// its subscription as Cosmos DB sees it (lower case, as the partition key
// of its Resources items and the id of its lock item), must each pass
// database.CheckID. scan sends only operations that pass, and poll answers
// the others as invalid: the rule is here once, so that the two cannot
// disagree.
func (o Operation) Check() error {
	if err := database.CheckID(o.OperationID); err != nil {
		return fmt.Errorf("operationId: %w", err)
	}
	sub := o.SubscriptionID
	if utf8.ValidString(sub) { // ToLower would replace the bytes that are not
		sub = strings.ToLower(sub)
	}
	if err := database.CheckID(sub); err != nil {
		return fmt.Errorf("subscriptionId: %w", err)
	}
	return nil
}
