package poll

import (
	"fmt"
	"strings"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"
)

// Message is the queue message scan writes and poll reads: one operation.
// Fields it does not know are ignored.
type Message struct {
	SubscriptionID string `json:"subscriptionId"`
	OperationID    string `json:"operationId"`
	// ScanInterval, when set, is the scan schedule's interval in seconds.
	// A message that has waited in the queue longer than that has been
	// superseded by a fresher one from the next scan, and poll drops it: a
	// backlog then costs no more than one Cluster Service call per operation
	// per interval, and the queue stays bounded.
	ScanInterval int `json:"scanInterval,omitempty"`
	// ScannedAt, when set, is the scheduled time of the scan that wrote the
	// message. The message is superseded when the next scan is due, an
	// interval after ScannedAt, rather than an interval after it reached the
	// queue: a scan's messages reach the queue over seconds, and the late
	// ones would otherwise outlive the next scan's start and give their
	// operation two Cluster Service calls in one interval. A message written
	// after that (the scan overran its interval, so the next one starts only
	// when it ends) expires an interval after its insertion, as one without
	// ScannedAt does.
	ScannedAt time.Time `json:"scannedAt,omitzero"`

	inserted time.Time // the queue's InsertionTime, from the invocation
}

// maxIDLength bounds ids well above any GUID or Cosmos id the frontend writes.
const maxIDLength = 255

// Validate reports the first field that cannot name a Cosmos item.
func (m Message) Validate() error {
	if err := checkID("subscriptionId", m.SubscriptionID); err != nil {
		return err
	}
	if m.ScanInterval < 0 {
		return fmt.Errorf("scanInterval %d is negative", m.ScanInterval)
	}
	return checkID("operationId", m.OperationID)
}

// checkID refuses what Cosmos ids cannot hold ('/', '\', '?', '#') and what
// would make paths or logs ambiguous (control characters, "." and "..").
func checkID(field, v string) error {
	switch {
	case v == "":
		return fmt.Errorf("%s is missing", field)
	case len(v) > maxIDLength:
		return fmt.Errorf("%s is longer than %d bytes", field, maxIDLength)
	case !utf8.ValidString(v):
		return fmt.Errorf("%s is not valid UTF-8", field)
	case v == "." || v == "..":
		return fmt.Errorf("%s %q is not an id", field, v)
	case strings.ContainsAny(v, `/\?#`):
		return fmt.Errorf("%s %q holds one of / \\ ? #", field, v)
	case strings.ContainsFunc(v, func(r rune) bool { return unicode.IsControl(r) || unicode.IsSpace(r) }):
		return fmt.Errorf("%s %q holds a control or space character", field, v)
	}
	return nil
}

// superseded reports whether, by now, a later scan may have sent a fresher
// message for the same operation.
func (m Message) superseded(now time.Time) bool {
	if m.ScanInterval <= 0 {
		return false
	}
	interval := time.Duration(m.ScanInterval) * time.Second
	if m.ScannedAt.IsZero() {
		return !m.inserted.IsZero() && now.Sub(m.inserted) > interval
	}
	next := m.ScannedAt.Add(interval)
	if m.inserted.After(next) {
		next = m.inserted.Add(interval)
	}
	return now.After(next)
}

// Schedule remembers the scan interval last seen in this process, from
// scan's timer or from a message. A message without one comes from a
// schedule's very first scan (the host has no previous run to measure the
// interval by) or from an earlier version; it takes the remembered one.
// scan and poll share a Schedule: in the process that runs the timer, poll
// knows the interval as soon as the second scan starts, even while the
// first scan's messages still fill the queue ahead of the second's. The
// methods of a nil Schedule remember nothing.
type Schedule struct {
	seconds atomic.Int64
}

// Observe records an interval in seconds; one of 0 or less is ignored.
func (s *Schedule) Observe(seconds int) {
	if s != nil && seconds > 0 {
		s.seconds.Store(int64(seconds))
	}
}

// Interval returns the last interval observed in seconds, or 0.
func (s *Schedule) Interval() int {
	if s == nil {
		return 0
	}
	return int(s.seconds.Load())
}
