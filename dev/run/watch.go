package main

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

// watcher reads the demo's items from Cosmos and prints every change.
type watcher struct {
	s       *stack.Stack
	ops     []demoOp
	out     io.Writer
	started time.Time
	status  map[string]string // op id -> status
	gone    map[string]bool   // resource item id -> deleted
	polls   *outcomes
}

func newWatcher(s *stack.Stack, ops []demoOp, out io.Writer, started time.Time, polls *outcomes) *watcher {
	w := &watcher{s: s, ops: ops, out: out, started: started, status: map[string]string{}, gone: map[string]bool{}, polls: polls}
	for _, d := range ops {
		w.status[d.id] = d.start
	}
	fmt.Fprintf(out, "%-8s %-11s %-28s %s\n", "time", "subscription", "resource", "change")
	return w
}

func (w *watcher) line(sub, resource, change string) {
	fmt.Fprintf(w.out, "%7.1fs %-11s %-28s %s\n", time.Since(w.started).Seconds(), short(sub), resource, change)
}

func (w *watcher) event(msg string) {
	fmt.Fprintf(w.out, "%7.1fs %s\n", time.Since(w.started).Seconds(), msg)
}

// poll reads every demo operation and, for deletes, its resource items.
func (w *watcher) poll(ctx context.Context) error {
	for _, d := range w.ops {
		item, err := w.s.Frontend.Operation(ctx, d.sub, d.id)
		if err != nil {
			return err
		}
		if item == nil {
			continue
		}
		st, _ := item["status"].(string)
		if st != w.status[d.id] {
			change := w.status[d.id] + " → " + st
			if e, ok := item["error"].(map[string]any); ok && st == "Failed" {
				change += fmt.Sprintf("  (%v: %v)", e["code"], e["message"])
			}
			w.line(d.sub, d.name(), change)
			w.status[d.id] = st
		}
		if d.request != "Delete" {
			continue
		}
		for _, id := range w.resourceIDs(d) {
			if w.gone[id] {
				continue
			}
			r, err := w.s.Frontend.Resource(ctx, d.sub, id)
			if err != nil {
				return err
			}
			if r == nil {
				w.gone[id] = true
				w.line(d.sub, d.name(), "Resources item "+id+" deleted")
			}
		}
	}
	return nil
}

func (w *watcher) resourceIDs(d demoOp) []string {
	ids := []string{"res-" + d.id}
	for i := range d.pools {
		ids = append(ids, fmt.Sprintf("res-%s-np%d", d.id, i))
	}
	return ids
}

func (w *watcher) allTerminal() bool {
	for _, st := range w.status {
		if st != "Succeeded" && st != "Failed" && st != "Canceled" {
			return false
		}
	}
	return true
}

// poisonSettled reports whether the malformed message has left the
// operations queue (it goes to the poison queue after maxDequeueCount tries).
func (w *watcher) poisonSettled(ctx context.Context) bool {
	n, err := w.s.QueueLength(ctx, "operations-poison")
	return err == nil && n > 0
}

// summary prints every operation's final state and what else happened; it
// reports whether every operation ended as its lifecycle implies.
func (w *watcher) summary(ctx context.Context) bool {
	fmt.Fprintf(w.out, "\nsummary after %.1fs\n", time.Since(w.started).Seconds())
	fmt.Fprintf(w.out, "  %-11s %-8s %-28s %-10s %-10s\n", "subscription", "request", "resource", "final", "expected")
	ok := true
	for _, d := range w.ops {
		mark := "ok"
		if w.status[d.id] != d.want {
			mark, ok = "MISMATCH", false
		}
		fmt.Fprintf(w.out, "  %-11s %-8s %-28s %-10s %-10s %s\n", short(d.sub), d.request, d.name(), w.status[d.id], d.want, mark)
	}
	var deleted []string
	for id := range w.gone {
		deleted = append(deleted, id)
	}
	slices.Sort(deleted)
	fmt.Fprintf(w.out, "  Resources items deleted: %d (%s)\n", len(deleted), strings.Join(deleted, ", "))
	poison, err := w.s.QueueLength(ctx, "operations-poison")
	if err != nil {
		fmt.Fprintf(w.out, "  poison queue: unknown (%v)\n", err)
	} else {
		fmt.Fprintf(w.out, "  poison queue: %d message(s) (1 malformed message was queued on purpose)\n", poison)
	}
	fmt.Fprintf(w.out, "  ARM notifications received: %d\n", len(w.s.ARM.Received()))
	c := w.s.Host.Counters()
	fmt.Fprintf(w.out, "  host: %d scans, %d polls, %d messages enqueued, %d retried, %d poisoned\n",
		c.Calls("scan"), c.Calls("poll"), c.MessagesEnqueued, c.MessagesRetried, c.MessagesPoisoned)
	fmt.Fprintf(w.out, "  poll outcomes: %s\n", w.polls)
	return ok
}

// outcomes counts poll invocations by their ReturnValue (or HTTP status).
type outcomes struct {
	mu     sync.Mutex
	counts map[string]int
}

func newOutcomes() *outcomes { return &outcomes{counts: map[string]int{}} }

func (o *outcomes) record(inv hostemu.Invocation) {
	if inv.Function != "poll" {
		return
	}
	var rv string
	if inv.Status != 200 || json.Unmarshal(inv.ReturnValue, &rv) != nil {
		rv = fmt.Sprintf("HTTP %d", inv.Status)
	}
	o.mu.Lock()
	o.counts[rv]++
	o.mu.Unlock()
}

func (o *outcomes) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var parts []string
	for k, n := range o.counts {
		parts = append(parts, fmt.Sprintf("%s %d", k, n))
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}
