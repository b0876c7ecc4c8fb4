package poll

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Message is the queue message scan writes and poll reads: one operation.
// Fields it does not know are ignored.
type Message struct {
	SubscriptionID string `json:"subscriptionId"`
	OperationID    string `json:"operationId"`
	// SupersededAt, when set, is the next scheduled scan: by then a fresher
	// message for the operation is on its way, so a poll that starts later
	// drops this one. It keeps a backlog from costing more than one Cluster
	// Service call per operation per scan interval.
	SupersededAt time.Time `json:"supersededAt,omitzero"`
}

// maxIDLength bounds ids well above any GUID or Cosmos id the frontend writes.
const maxIDLength = 255

// Validate reports the first field that cannot name a Cosmos item.
func (m Message) Validate() error {
	if err := checkID("subscriptionId", m.SubscriptionID); err != nil {
		return err
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
