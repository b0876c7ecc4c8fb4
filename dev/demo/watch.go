package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/opstatus/opstatus/dev/hostemu"
	"github.com/opstatus/opstatus/dev/stack"
)

// Watcher reads the demo's items from Cosmos and prints every change.
type Watcher struct {
	s       *stack.Stack
	ops     []Op
	out     io.Writer
	started time.Time
	status  map[string]string // op id -> status
	gone    map[string]bool   // resource item id -> deleted
	billing map[string]string // billing item id -> "open" or "closed"
	polls   *Outcomes
}

// NewWatcher prints the live view's header and starts from the seeded states.
func NewWatcher(s *stack.Stack, ops []Op, out io.Writer, started time.Time, polls *Outcomes) *Watcher {
	w := &Watcher{s: s, ops: ops, out: out, started: started, status: map[string]string{}, gone: map[string]bool{},
		billing: map[string]string{}, polls: polls}
	for _, d := range ops {
		w.status[d.ID] = d.Start
		if d.Kind == KindCluster && d.Request == "Delete" {
			w.billing[seededBillingID(d.cluster)] = "open"
		}
	}
	fmt.Fprintf(out, "%-8s %-11s %-13s %-34s %s\n", "time", "subscription", "kind", "resource", "change")
	return w
}

func (w *Watcher) line(sub, kind, resource, change string) {
	fmt.Fprintf(w.out, "%7.1fs %-11s %-13s %-34s %s\n", time.Since(w.started).Seconds(), Short(sub), kind, resource, change)
}

// Event prints a line of the live view.
func (w *Watcher) Event(msg string) {
	fmt.Fprintf(w.out, "%7.1fs %s\n", time.Since(w.started).Seconds(), msg)
}

// Poll reads every demo operation and, for deletes, its resource items,
// then the billing items. Billing comes last: opstatus writes a cluster's
// billing item before the operation's terminal status, so a terminal
// status seen here has its billing item seen too.
func (w *Watcher) Poll(ctx context.Context) error {
	for _, d := range w.ops {
		item, err := w.s.Frontend.Operation(ctx, d.Sub, d.ID)
		if err != nil {
			return err
		}
		if item == nil {
			continue
		}
		st, _ := item["status"].(string)
		if st != w.status[d.ID] {
			change := w.status[d.ID] + " → " + st
			if e, ok := item["error"].(map[string]any); ok && st == "Failed" {
				change += fmt.Sprintf("  (%v: %v)", e["code"], e["message"])
			}
			w.line(d.Sub, d.Kind, d.Name(), change)
			w.status[d.ID] = st
		}
		if d.Request != "Delete" {
			continue
		}
		for _, id := range w.resourceIDs(d) {
			if w.gone[id] {
				continue
			}
			r, err := w.s.Frontend.Resource(ctx, d.Sub, id)
			if err != nil {
				return err
			}
			if r == nil {
				w.gone[id] = true
				w.line(d.Sub, d.Kind, d.Name(), "Resources item "+id+" deleted")
			}
		}
	}
	return w.pollBilling(ctx)
}

// pollBilling reports billing items opened and closed since the last poll.
func (w *Watcher) pollBilling(ctx context.Context) error {
	names := clusterNames(w.ops)
	for _, sub := range Subscriptions {
		items, err := w.s.Frontend.BillingItems(ctx, sub)
		if err != nil {
			return err
		}
		for _, item := range items {
			id, _ := item["id"].(string)
			rid, _ := item["resourceId"].(string)
			state, change := "open", fmt.Sprintf("billing item %s opened (creationTime %v)", id, item["creationTime"])
			if t, ok := item["deletionTime"]; ok {
				state, change = "closed", fmt.Sprintf("billing item %s closed (deletionTime %v)", id, t)
			}
			if w.billing[id] == state {
				continue
			}
			w.billing[id] = state
			name := names[strings.ToLower(rid)]
			if name == "" {
				name = rid
			}
			w.line(sub, "billing", name, change)
		}
	}
	return nil
}

func (w *Watcher) resourceIDs(d Op) []string {
	if !d.HasResource() {
		return nil
	}
	ids := []string{d.resourceItemID()}
	for _, c := range d.children {
		ids = append(ids, childItemID(d, c))
	}
	return ids
}

// AllTerminal reports whether every operation is terminal.
func (w *Watcher) AllTerminal() bool {
	for _, st := range w.status {
		if st != "Succeeded" && st != "Failed" && st != "Canceled" {
			return false
		}
	}
	return true
}

// PoisonSettled reports whether the malformed message has left the
// operations queue (it goes to the poison queue after maxDequeueCount tries).
func (w *Watcher) PoisonSettled(ctx context.Context) bool {
	n, err := w.s.QueueLength(ctx, "operations-poison")
	return err == nil && n > 0
}

// Summary prints every operation's final state, kind by kind, each
// cluster's billing items, and what else happened; it reports whether every
// operation ended as its lifecycle implies and the billing items are as
// BillingWants says.
func (w *Watcher) Summary(ctx context.Context) bool {
	fmt.Fprintf(w.out, "\nsummary after %.1fs\n", time.Since(w.started).Seconds())
	fmt.Fprintf(w.out, "  %-11s %-13s %-17s %-34s %-10s %-10s\n", "subscription", "kind", "request", "resource", "final", "expected")
	ok := true
	for _, kind := range Kinds {
		for _, d := range w.ops {
			if d.Kind != kind {
				continue
			}
			mark := "ok"
			if w.status[d.ID] != d.Want {
				mark, ok = "MISMATCH", false
			}
			fmt.Fprintf(w.out, "  %-11s %-13s %-17s %-34s %-10s %-10s %s\n", Short(d.Sub), d.Kind, d.Request, d.Name(), w.status[d.ID], d.Want, mark)
		}
	}
	var deleted []string
	for id := range w.gone {
		deleted = append(deleted, id)
	}
	slices.Sort(deleted)
	fmt.Fprintf(w.out, "  Resources items deleted: %d (%s)\n", len(deleted), strings.Join(deleted, ", "))

	held, problems, err := CheckBilling(ctx, w.s, w.ops, w.started)
	if err != nil {
		fmt.Fprintf(w.out, "  billing items: unknown (%v)\n", err)
		ok = false
	} else {
		fmt.Fprintf(w.out, "  billing items (open: a cluster that exists; closed: deletionTime set)\n")
		fmt.Fprintf(w.out, "    %-11s %-16s %-16s %-16s\n", "subscription", "cluster", "items", "expected")
		for _, b := range BillingWants(w.ops) {
			h := held[strings.ToLower(b.ResourceID)]
			mark := "ok"
			if h.Open != b.Open || h.Closed != b.Closed {
				mark = "MISMATCH"
			}
			fmt.Fprintf(w.out, "    %-11s %-16s %-16s %-16s %s\n", Short(b.Sub), b.Cluster, h, b, mark)
		}
		for _, p := range problems {
			fmt.Fprintf(w.out, "    MISMATCH %s\n", p)
		}
		ok = ok && len(problems) == 0
	}
	poison, err := w.s.QueueLength(ctx, "operations-poison")
	if err != nil {
		fmt.Fprintf(w.out, "  poison queue: unknown (%v)\n", err)
	} else {
		fmt.Fprintf(w.out, "  poison queue: %d message(s) (1 malformed message was queued on purpose)\n", poison)
	}
	fmt.Fprintf(w.out, "  ARM notifications received: %d\n", len(w.s.ARM.Received()))
	c := w.s.Host.Counters()
	fmt.Fprintf(w.out, "  host: %d scans, %d polls, %d pickups, %d messages enqueued, %d retried, %d poisoned\n",
		c.Calls("scan"), c.Calls("poll"), c.Calls("pickup"), c.MessagesEnqueued, c.MessagesRetried, c.MessagesPoisoned)
	fmt.Fprintf(w.out, "  poll and pickup outcomes: %s\n", w.polls)
	return ok
}

// Outcomes counts the operations poll and pickup invocations handled by
// outcome (their ReturnValues), and their failed invocations by HTTP status.
type Outcomes struct {
	mu     sync.Mutex
	counts map[string]int
}

// NewOutcomes returns empty counts.
func NewOutcomes() *Outcomes { return &Outcomes{counts: map[string]int{}} }

// Record is a hostemu OnInvocation hook: it counts the outcomes of poll's
// and pickup's invocations, whose ReturnValues are both poll.Tally.
func (o *Outcomes) Record(inv hostemu.Invocation) {
	if inv.Function != "poll" && inv.Function != "pickup" {
		return
	}
	var tally map[string]int
	if inv.Status != 200 || json.Unmarshal(inv.ReturnValue, &tally) != nil {
		tally = map[string]int{fmt.Sprintf("HTTP %d", inv.Status): 1}
	}
	o.mu.Lock()
	for k, n := range tally {
		o.counts[k] += n
	}
	o.mu.Unlock()
}

// String lists the counts.
func (o *Outcomes) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var parts []string
	for k, n := range o.counts {
		parts = append(parts, fmt.Sprintf("%s %d", k, n))
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

// Short abbreviates a subscription ID for the live view.
func Short(sub string) string {
	if i := strings.IndexByte(sub, '-'); i > 0 {
		return sub[:i] + "…" + sub[len(sub)-4:]
	}
	return sub
}

// Ops returns the watched operations.
func (w *Watcher) Ops() []Op { return w.ops }

// Status returns the last status seen of operation id.
func (w *Watcher) Status(id string) string { return w.status[id] }

// ResourceIDs returns the Resources item ids the demo wrote for d.
func (w *Watcher) ResourceIDs(d Op) []string { return w.resourceIDs(d) }

// Count returns how many operations polls ended with outcome, or, for
// "HTTP <status>", how many poll invocations failed so.
func (o *Outcomes) Count(outcome string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.counts[outcome]
}
