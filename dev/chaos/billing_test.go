package chaos

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/stack"
)

// bill is a billing item as the checks read it.
type bill struct {
	item
	open bool
	// deleted is deletionTime, zero while open.
	deleted time.Time
}

// billsByCluster groups the billing items by their resourceId, ignoring
// case as ARM does.
func billsByCluster(bills map[string]item) map[string][]bill {
	out := map[string][]bill{}
	for _, it := range bills {
		b := bill{item: it, open: it["deletionTime"] == nil}
		if !b.open {
			b.deleted, _ = time.Parse(time.RFC3339Nano, it.str("deletionTime"))
		}
		k := strings.ToLower(it.str("resourceId"))
		out[k] = append(out[k], b)
	}
	for _, bs := range out {
		slices.SortFunc(bs, func(a, b bill) int { return strings.Compare(a.str("id"), b.str("id")) })
	}
	return out
}

// opTime reads one of an operation item's times; zero when it has none.
func opTime(it item, field string) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, it.str(field))
	return t
}

// checkBilling checks the Billing container against the clusters' fates:
// at most one open item per cluster; a cluster whose create succeeded has
// exactly one item, open unless its delete finished, with the fields of
// the cluster (created is each created cluster's creation_timestamp); a
// finished delete closed the cluster's open item, with a deletionTime not
// before the delete started and not after its Succeeded was written; an
// older, closed item is left as it was; no other cluster has an item.
func checkBilling(ops []op, opItems, bills map[string]item, created map[string]time.Time) []string {
	var bad []string
	byCluster := billsByCluster(bills)
	for res, bs := range byCluster {
		open := 0
		for _, b := range bs {
			if b.open {
				open++
			}
		}
		if open > 1 {
			bad = append(bad, fmt.Sprintf("%s: %d open billing items", res, open))
		}
	}
	deletedBy := map[string]op{}
	for _, o := range ops {
		if o.After != "" {
			deletedBy[o.After] = o
		}
	}
	accounted := map[string]bool{}
	for _, o := range ops {
		if !o.clusterOnly() || o.After != "" {
			continue
		}
		res := strings.ToLower(o.clusterKey())
		accounted[res] = true
		bs := byCluster[res]
		final := opItems[o.ID].str("status")
		switch {
		case o.Kind == kindCreate && final == "Succeeded":
			if len(bs) != 1 {
				bad = append(bad, fmt.Sprintf("%s (%s): %d billing items, want 1", o.ID, o.Kind, len(bs)))
				continue
			}
			bad = append(bad, createdBillProblems(o, bs[0], created[o.Cluster])...)
			d, followed := deletedBy[o.ID]
			if !followed || opItems[d.ID].str("status") != "Succeeded" {
				if !bs[0].open {
					bad = append(bad, fmt.Sprintf("%s (%s): the billing item of a live cluster is closed", o.ID, o.Kind))
				}
				continue
			}
			bad = append(bad, closedProblems(d, opItems[d.ID], bs[0])...)
		case o.Kind == kindDelete && o.Billed:
			var rest []bill
			for _, b := range bs {
				switch b.str("id") {
				case "b-" + o.ID:
					if b.str("chaosTag") != "b-"+o.ID {
						bad = append(bad, fmt.Sprintf("%s: billing item %s lost the backend's unknown field", o.ID, b.str("id")))
					}
					if final == "Succeeded" {
						bad = append(bad, closedProblems(o, opItems[o.ID], b)...)
					} else if !b.open {
						bad = append(bad, fmt.Sprintf("%s (%s): billing item closed, the delete ended %q", o.ID, o.Kind, final))
					}
				case "b-old-" + o.ID:
					if !b.deleted.Equal(oldBillEnd) || b.str("chaosTag") != "b-old-"+o.ID {
						bad = append(bad, fmt.Sprintf("%s: the closed billing item of an earlier life changed: deletionTime %q", o.ID, b.str("deletionTime")))
					}
				default:
					rest = append(rest, b)
				}
			}
			if want := 1 + boolInt(o.OldBill); len(bs)-len(rest) != want || len(rest) > 0 {
				bad = append(bad, fmt.Sprintf("%s (%s): billing items %v, want the %d seeded", o.ID, o.Kind, billIDs(bs), want))
			}
		default:
			// A failed create, an update, a delete of a cluster billed
			// before billing existed: no item, and none may appear.
			if len(bs) > 0 {
				bad = append(bad, fmt.Sprintf("%s (%s, %s): unexpected billing items %v", o.ID, o.Kind, final, billIDs(bs)))
			}
		}
	}
	for res, bs := range byCluster {
		if !accounted[res] {
			bad = append(bad, fmt.Sprintf("billing items %v for %s, whose cluster no operation created or deleted", billIDs(bs), res))
		}
	}
	slices.Sort(bad)
	return bad
}

// createdBillProblems checks the item a cluster's create opened: the
// fields the contract gives it.
func createdBillProblems(o op, b bill, creation time.Time) []string {
	var bad []string
	want := map[string]string{
		"subscriptionId": strings.ToLower(o.Sub), "resourceId": o.clusterKey(), "tenantId": chaosTenant,
		"location": stack.Location, "managedResourceGroup": managedResourceGroup(o),
	}
	for _, f := range sortedKeys(want) {
		if got := b.str(f); got != want[f] {
			bad = append(bad, fmt.Sprintf("%s: billing item %s has %s %q, want %q", o.ID, b.str("id"), f, got, want[f]))
		}
	}
	if ct := opTime(b.item, "creationTime"); creation.IsZero() || !ct.Equal(creation) {
		bad = append(bad, fmt.Sprintf("%s: billing item %s has creationTime %q, the cluster was created %s", o.ID, b.str("id"),
			b.str("creationTime"), creation.Format(time.RFC3339)))
	}
	return bad
}

// closedProblems checks the item a finished delete d closed: deletionTime
// set, not before the delete started and not after its Succeeded was
// written.
func closedProblems(d op, opItem item, b bill) []string {
	start, done := opTime(opItem, "startTime"), opTime(opItem, "lastTransitionTime")
	switch {
	case b.open:
		return []string{fmt.Sprintf("%s (%s): billing item %s still open after the delete finished", d.ID, d.Kind, b.str("id"))}
	case b.deleted.IsZero():
		return []string{fmt.Sprintf("%s (%s): billing item %s has deletionTime %q", d.ID, d.Kind, b.str("id"), b.str("deletionTime"))}
	case b.deleted.Before(start):
		return []string{fmt.Sprintf("%s (%s): billing item %s closed at %s, before the delete started at %s", d.ID, d.Kind, b.str("id"),
			b.deleted.Format(time.RFC3339Nano), start.Format(time.RFC3339Nano))}
	case b.deleted.After(done):
		return []string{fmt.Sprintf("%s (%s): billing item %s closed at %s, after the delete was written Succeeded at %s", d.ID, d.Kind,
			b.str("id"), b.deleted.Format(time.RFC3339Nano), done.Format(time.RFC3339Nano))}
	}
	return nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func billIDs(bs []bill) []string {
	ids := make([]string, 0, len(bs))
	for _, b := range bs {
		ids = append(ids, b.str("id"))
	}
	return ids
}

// TestCheckBilling shows that the billing check finds each way the items
// can break the invariant, and accepts items that keep it.
func TestCheckBilling(t *testing.T) {
	sub := subscriptions(1, "billing")[0]
	created := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	create := op{Sub: sub, ID: "create", Kind: kindCreate, Request: "Create", Cluster: "c1", Want: "Succeeded"}
	followed := op{Sub: sub, ID: "create2", Kind: kindCreate, Request: "Create", Cluster: "c2", Want: "Succeeded"}
	del := deleteAfter(followed, "delete2", time.Second, "Accepted")
	billed := op{Sub: sub, ID: "delete3", Kind: kindDelete, Request: "Delete", Cluster: "c3", Want: "Succeeded", Billed: true, OldBill: true}
	failed := op{Sub: sub, ID: "fail4", Kind: kindCreateFail, Request: "Create", Cluster: "c4", Want: "Failed"}
	ops := []op{create, followed, del, billed, failed}

	at := func(min int) string { return created.Add(time.Duration(min) * time.Minute).Format(time.RFC3339Nano) }
	opened := func(o op, id string) item {
		return item{"id": id, "subscriptionId": sub, "resourceId": o.clusterKey(), "tenantId": chaosTenant,
			"location": stack.Location, "creationTime": created.Format(time.RFC3339), "managedResourceGroup": managedResourceGroup(o)}
	}
	good := func() (map[string]item, map[string]item) {
		opItems := map[string]item{
			"create":  {"status": "Succeeded"},
			"create2": {"status": "Succeeded"},
			"delete2": {"status": "Succeeded", "startTime": at(10), "lastTransitionTime": at(20)},
			"delete3": {"status": "Succeeded", "startTime": at(10), "lastTransitionTime": at(20)},
			"fail4":   {"status": "Failed"},
		}
		closed := opened(followed, "bill2")
		closed["deletionTime"] = at(15)
		seededClosed := openBill(billed)
		seededClosed["deletionTime"] = at(19)
		return opItems, map[string]item{"bill1": opened(create, "bill1"), "bill2": closed,
			"b-delete3": seededClosed, "b-old-delete3": oldBill(billed)}
	}
	clusters := map[string]time.Time{"c1": created, "c2": created}

	for _, tc := range []struct {
		name   string
		change func(opItems, bills map[string]item)
		want   string
	}{
		{"kept", func(opItems, bills map[string]item) {}, ""},
		{"second open item", func(_, bills map[string]item) { bills["bill1b"] = opened(create, "bill1b") }, "2 open billing items"},
		{"no item for a created cluster", func(_, bills map[string]item) { delete(bills, "bill1") }, "0 billing items, want 1"},
		{"live cluster closed", func(_, bills map[string]item) { bills["bill1"]["deletionTime"] = at(5) }, "live cluster is closed"},
		{"wrong creationTime", func(_, bills map[string]item) { bills["bill1"]["creationTime"] = at(1) }, "has creationTime"},
		{"wrong location", func(_, bills map[string]item) { bills["bill1"]["location"] = "westus" }, `location "westus"`},
		{"delete left it open", func(_, bills map[string]item) { delete(bills["bill2"], "deletionTime") }, "still open after the delete"},
		{"closed after Succeeded", func(_, bills map[string]item) { bills["bill2"]["deletionTime"] = at(21) }, "after the delete was written Succeeded"},
		{"closed before the delete", func(_, bills map[string]item) { bills["b-delete3"]["deletionTime"] = at(9) }, "before the delete started"},
		{"unknown field lost", func(_, bills map[string]item) { delete(bills["b-delete3"], "chaosTag") }, "lost the backend's unknown field"},
		{"old life changed", func(_, bills map[string]item) { bills["b-old-delete3"]["deletionTime"] = at(15) }, "earlier life changed"},
		{"new item for a billed delete", func(_, bills map[string]item) {
			b := opened(billed, "extra")
			b["deletionTime"] = at(15)
			bills["extra"] = b
		}, "want the 2 seeded"},
		{"failed create billed", func(_, bills map[string]item) { bills["bill4"] = opened(failed, "bill4") }, "unexpected billing items [bill4]"},
		{"someone else's cluster", func(_, bills map[string]item) {
			bills["stray"] = item{"id": "stray", "resourceId": "/subscriptions/x/elsewhere"}
		}, "whose cluster no operation created or deleted"},
		{"delete unfinished, item closed", func(opItems, _ map[string]item) { opItems["delete3"]["status"] = "Deleting" }, "billing item closed, the delete ended"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opItems, bills := good()
			tc.change(opItems, bills)
			got := checkBilling(ops, opItems, bills, clusters)
			if tc.want == "" {
				require.Empty(t, got)
				return
			}
			require.Contains(t, strings.Join(got, "\n"), tc.want)
		})
	}
}
