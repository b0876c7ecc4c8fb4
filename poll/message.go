package poll

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/opstatus/opstatus/internal/database"
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

// Validate reports what makes the message malformed as a whole: an id that
// is missing or empty, a negative scanInterval. poll answers 400 to it.
// What the ids hold is for CheckIDs.
func (m Message) Validate() error {
	switch {
	case m.SubscriptionID == "":
		return errors.New("subscriptionId is missing")
	case m.OperationID == "":
		return errors.New("operationId is missing")
	case m.ScanInterval < 0:
		return fmt.Errorf("scanInterval %d is negative", m.ScanInterval)
	}
	return nil
}

// CheckIDs reports why poll will not act on the operation the message names,
// or nil: the operation id, and the subscription id as Cosmos DB sees it
// (lowercased, as the partition key and as the id of the subscription's
// lock item), must each pass database.CheckID. poll answers such a message
// with OutcomeInvalid, and scan sends only messages that pass: the rule is
// here once, so that the two cannot disagree. An id that fails Validate
// fails CheckIDs too.
func (m Message) CheckIDs() error {
	if err := database.CheckID(m.OperationID); err != nil {
		return fmt.Errorf("operationId: %w", err)
	}
	sub := m.SubscriptionID
	if utf8.ValidString(sub) { // ToLower would replace the bytes that are not
		sub = strings.ToLower(sub)
	}
	if err := database.CheckID(sub); err != nil {
		return fmt.Errorf("subscriptionId: %w", err)
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
