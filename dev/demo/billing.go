package demo

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/opstatus/opstatus/dev/stack"
)

// BillingWant is what the Billing container must hold for one cluster of
// the demo once every operation is terminal: one open item for a cluster
// whose Create succeeded, the seeded item closed for a deleted one, and
// none for any other.
type BillingWant struct {
	Sub, Cluster, ResourceID string
	Open, Closed             int
}

// String describes the items wanted.
func (b BillingWant) String() string { return billingCounts(b.Open, b.Closed) }

func billingCounts(open, closed int) string {
	var parts []string
	if open > 0 {
		parts = append(parts, fmt.Sprintf("%d open", open))
	}
	if closed > 0 {
		parts = append(parts, fmt.Sprintf("%d closed", closed))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// BillingWants lists, for every cluster the operations name, the billing
// items it must end with.
func BillingWants(ops []Op) []BillingWant {
	var out []BillingWant
	index := map[string]int{}
	for _, d := range ops {
		key := clusterKey(d.Sub, d.cluster)
		i, ok := index[key]
		if !ok {
			i = len(out)
			index[key] = i
			out = append(out, BillingWant{Sub: d.Sub, Cluster: d.cluster, ResourceID: key})
		}
		switch {
		case d.Kind != KindCluster:
		case d.Request == "Create" && d.Want == "Succeeded":
			out[i].Open = 1
		case d.Request == "Delete":
			out[i].Closed = 1
		}
	}
	return out
}

// BillingHeld is what the Billing container holds for one cluster.
type BillingHeld struct{ Open, Closed int }

// String describes the items held.
func (b BillingHeld) String() string { return billingCounts(b.Open, b.Closed) }

// CheckBilling reads every billing item of the demo's subscriptions and
// returns what each cluster holds, by lowercase resource ID, and every way
// in which the items differ from BillingWants: a count, an item of no demo
// cluster, or a field of an item (an open item's creationTime, location,
// tenantId and managedResourceGroup, which opstatus copies from Cluster
// Service and its settings; a closed item's deletionTime, set after since,
// and the seeded field opstatus must keep).
func CheckBilling(ctx context.Context, s *stack.Stack, ops []Op, since time.Time) (map[string]BillingHeld, []string, error) {
	wants := BillingWants(ops)
	byKey := map[string]BillingWant{}
	for _, b := range wants {
		byKey[strings.ToLower(b.ResourceID)] = b
	}
	held := map[string]BillingHeld{}
	var problems []string
	for _, sub := range Subscriptions {
		items, err := s.Frontend.BillingItems(ctx, sub)
		if err != nil {
			return nil, nil, fmt.Errorf("billing items of %s: %w", sub, err)
		}
		for _, item := range items {
			id, _ := item["id"].(string)
			rid, _ := item["resourceId"].(string)
			want, ok := byKey[strings.ToLower(rid)]
			if !ok {
				problems = append(problems, fmt.Sprintf("billing item %s of %q: no demo cluster", id, rid))
				continue
			}
			h := held[strings.ToLower(rid)]
			if _, closed := item["deletionTime"]; closed {
				h.Closed++
				problems = append(problems, checkClosed(want, id, item, since)...)
			} else {
				h.Open++
				if want.Open > 0 { // else the count says what is wrong
					problems = append(problems, checkOpen(s, want, id, item)...)
				}
			}
			held[strings.ToLower(rid)] = h
		}
	}
	for _, b := range wants {
		if h := held[strings.ToLower(b.ResourceID)]; h.Open != b.Open || h.Closed != b.Closed {
			problems = append(problems, fmt.Sprintf("%s: billing items %s, want %s", b.Cluster, h, b))
		}
	}
	slices.Sort(problems)
	return held, problems, nil
}

// checkOpen checks an open item against what opstatus must have copied into
// it.
func checkOpen(s *stack.Stack, b BillingWant, id string, item map[string]any) []string {
	var problems []string
	sc, err := s.Sim.Cluster(b.Cluster)
	if err != nil {
		return []string{fmt.Sprintf("%s: simulator: %v", b.Cluster, err)}
	}
	created, _ := time.Parse(time.RFC3339Nano, fmt.Sprint(item["creationTime"]))
	if !created.Equal(sc.CreationTimestamp) {
		problems = append(problems, fmt.Sprintf("%s: billing item %s creationTime %v, want Cluster Service's %s",
			b.Cluster, id, item["creationTime"], sc.CreationTimestamp.Format(time.RFC3339)))
	}
	for field, want := range map[string]string{
		"subscriptionId":       b.Sub,
		"location":             stack.Location,
		"tenantId":             Tenant,
		"managedResourceGroup": "/subscriptions/" + b.Sub + "/resourceGroups/" + b.Cluster + "-managed",
	} {
		if got := fmt.Sprint(item[field]); got != want {
			problems = append(problems, fmt.Sprintf("%s: billing item %s %s %q, want %q", b.Cluster, id, field, got, want))
		}
	}
	return problems
}

// checkClosed checks a closed item: the one the demo seeded, closed during
// the demo, with its unknown field kept.
func checkClosed(b BillingWant, id string, item map[string]any, since time.Time) []string {
	var problems []string
	if id != seededBillingID(b.Cluster) {
		problems = append(problems, fmt.Sprintf("%s: billing item %s is closed, but the demo seeded %s", b.Cluster, id, seededBillingID(b.Cluster)))
	}
	deleted, err := time.Parse(time.RFC3339Nano, fmt.Sprint(item["deletionTime"]))
	if err != nil || deleted.Before(since.Truncate(time.Second)) {
		problems = append(problems, fmt.Sprintf("%s: billing item %s deletionTime %v, want a time after the demo started", b.Cluster, id, item["deletionTime"]))
	}
	if item[SeededField] != true {
		problems = append(problems, fmt.Sprintf("%s: billing item %s lost the field %s that opstatus does not know", b.Cluster, id, SeededField))
	}
	return problems
}

// clusterNames maps the lowercase ARM resource ID of every demo cluster to
// its id.
func clusterNames(ops []Op) map[string]string {
	names := map[string]string{}
	for _, d := range ops {
		names[strings.ToLower(clusterKey(d.Sub, d.cluster))] = d.cluster
	}
	return names
}
