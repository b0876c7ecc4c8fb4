package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/opstatus/opstatus/dev/clustersim"
	"github.com/opstatus/opstatus/dev/frontend"
)

// Scripted lifecycles: each operation's kind fixes the terminal state
// Cluster Service leads it to, whatever faults are injected on the way.
const (
	kindCreate         = "cluster create"
	kindCreateFail     = "cluster create fails"
	kindUpdate         = "cluster update"
	kindDelete         = "cluster delete"
	kindPoolCreate     = "node pool create"
	kindPoolCreateFail = "node pool create fails"
	kindPoolUpdate     = "node pool update"
	kindPoolDelete     = "node pool delete"
	// kindInstalling is a cluster installing for its whole Life: the lock
	// tests use it for an operation with exactly one change to write
	// (Accepted -> Provisioning).
	kindInstalling = "cluster installing"
)

// kindWeights is how often each kind is drawn.
var kindWeights = []struct {
	kind   string
	weight int
}{
	{kindCreate, 25}, {kindCreateFail, 10}, {kindUpdate, 15}, {kindDelete, 20},
	{kindPoolCreate, 10}, {kindPoolCreateFail, 8}, {kindPoolUpdate, 6}, {kindPoolDelete, 6},
}

const (
	cmAPI  = "/api/clusters_mgmt/v1/clusters/"
	hcpAPI = "/api/aro_hcp/v1alpha1/clusters/"
)

// resourceItem is a Resources item the scenario writes.
type resourceItem struct {
	ID, Key, InternalID string
	// Active is the operation id in activeOperationId, empty for none.
	Active string
	State  string
	// Removed: a finished delete must remove the item.
	Removed bool
}

// op is one operation with its scripted lifecycle and what it must end in.
type op struct {
	Sub, ID, Kind string
	Request       string // Create, Update or Delete
	Start         string // the status the frontend wrote
	Want          string // the terminal status the lifecycle implies
	WantCode      string // the error code of a Failed operation
	Cluster, Pool string // simulator ids; Pool empty for a cluster
	API           string // the cluster's Cluster Service path prefix
	Life          time.Duration
	Failure       string // the simulated failure's message
	// Items are the Resources items of the operation: its own (first),
	// then the node pools of a deleted cluster (removed with it), or the
	// parent cluster and sibling node pools (kept).
	Items []resourceItem
}

func (o op) key() string {
	k := fmt.Sprintf("/subscriptions/%s/resourceGroups/rg-chaos/providers/Microsoft.RedHatOpenShift/hcpOpenShiftClusters/%s", o.Sub, o.Cluster)
	if o.Pool != "" {
		k += "/nodePools/" + o.Pool
	}
	return k
}

func (o op) clusterKey() string {
	return fmt.Sprintf("/subscriptions/%s/resourceGroups/rg-chaos/providers/Microsoft.RedHatOpenShift/hcpOpenShiftClusters/%s", o.Sub, o.Cluster)
}

func (o op) internalID() string {
	if o.Pool != "" {
		return hcpAPI + o.Cluster + "/node_pools/" + o.Pool
	}
	return o.API + o.Cluster
}

// installingOp is an operation whose cluster installs for an hour: its only
// change is Accepted -> Provisioning.
func installingOp(sub, id string) op {
	o := op{Sub: sub, ID: id, Kind: kindInstalling, Request: "Create", Start: "Accepted", Want: "Provisioning",
		Cluster: "c-" + id, API: hcpAPI, Life: time.Hour}
	o.Items = []resourceItem{{ID: "r-" + id, Key: o.key(), InternalID: o.internalID(), Active: id, State: o.Start}}
	return o
}

// subscriptions returns n subscription ids.
func subscriptions(n int, tag string) []string {
	subs := make([]string, n)
	for i := range subs {
		subs[i] = fmt.Sprintf("%08x-%04x-4000-8000-%012d", 0xc4a05000+i, len(tag), i+1)
	}
	return subs
}

// scenario draws n operations over subs, each with a lifecycle that ends
// between minLife and maxLife after it is seeded. prefix keeps ids unique
// across scenarios sharing a simulator.
func scenario(rng *rand.Rand, subs []string, n int, minLife, maxLife time.Duration, prefix string) []op {
	total := 0
	for _, w := range kindWeights {
		total += w.weight
	}
	ops := make([]op, 0, n)
	for i := range n {
		u := rng.IntN(total)
		kind := kindWeights[0].kind
		for _, w := range kindWeights {
			if u < w.weight {
				kind = w.kind
				break
			}
			u -= w.weight
		}
		o := op{
			Sub:     subs[i%len(subs)],
			ID:      fmt.Sprintf("%s-op-%04d", prefix, i),
			Kind:    kind,
			Cluster: fmt.Sprintf("%s-c%04d", prefix, i),
			API:     []string{cmAPI, hcpAPI}[rng.IntN(2)],
			Life:    minLife + time.Duration(rng.Int64N(int64(maxLife-minLife)+1)),
			Start:   "Accepted",
			Want:    "Succeeded",
		}
		switch kind {
		case kindCreate:
			o.Request = "Create"
		case kindCreateFail:
			o.Request, o.Want = "Create", "Failed"
			o.WantCode = fmt.Sprintf("OCM%04d", 3000+rng.IntN(20))
			o.Failure = "quota exceeded in eastus (scripted)"
		case kindUpdate:
			o.Request = "Update"
		case kindDelete:
			o.Request = "Delete"
			o.Start = []string{"Accepted", "Deleting"}[rng.IntN(2)]
		case kindPoolCreate:
			o.Request, o.Pool = "Create", "np0"
		case kindPoolCreateFail:
			o.Request, o.Pool, o.Want = "Create", "np0", "Failed"
			o.WantCode = "InternalServerError"
			o.Failure = "no capacity for Standard_NC24ads_A100_v4 (scripted)"
		case kindPoolUpdate:
			o.Request, o.Pool = "Update", "np0"
		case kindPoolDelete:
			o.Request, o.Pool = "Delete", "np0"
			o.Start = []string{"Accepted", "Deleting"}[rng.IntN(2)]
		}
		own := resourceItem{ID: "r-" + o.ID, Key: o.key(), InternalID: o.internalID(), Active: o.ID, State: o.Start,
			Removed: o.Request == "Delete"}
		o.Items = append(o.Items, own)
		switch {
		case kind == kindDelete:
			// The cluster's node pools go with it.
			for j := range rng.IntN(4) {
				np := fmt.Sprintf("np%d", j)
				o.Items = append(o.Items, resourceItem{ID: fmt.Sprintf("r-%s-np%d", o.ID, j), Key: o.clusterKey() + "/nodePools/" + np,
					InternalID: hcpAPI + o.Cluster + "/node_pools/" + np, State: "Succeeded", Removed: true})
			}
		case o.Pool != "":
			// The parent cluster and a sibling node pool stay, whatever
			// happens to this node pool.
			o.Items = append(o.Items,
				resourceItem{ID: "r-" + o.ID + "-parent", Key: o.clusterKey(), InternalID: o.API + o.Cluster, State: "Succeeded"},
				resourceItem{ID: "r-" + o.ID + "-sibling", Key: o.clusterKey() + "/nodePools/sibling",
					InternalID: hcpAPI + o.Cluster + "/node_pools/sibling", State: "Succeeded"})
		default:
			// A node pool of the cluster stays through the cluster's create
			// or update.
			o.Items = append(o.Items, resourceItem{ID: "r-" + o.ID + "-np", Key: o.clusterKey() + "/nodePools/workers",
				InternalID: hcpAPI + o.Cluster + "/node_pools/workers", State: "Succeeded"})
		}
		ops = append(ops, o)
	}
	return ops
}

// simulate registers o's lifecycle in the simulator.
func (o op) simulate(sim *clustersim.Sim) error {
	d := func(f float64) clustersim.Duration { return clustersim.Duration(time.Duration(float64(o.Life) * f)) }
	ready := clustersim.Script{}
	api := clustersim.APIBoth
	switch o.Kind {
	case kindCreate, kindCreateFail:
		return sim.AddCluster(o.Cluster, clustersim.Script{Pending: d(0.15), Validating: d(0.15), Installing: d(0.7), API: api,
			Fail: o.Kind == kindCreateFail, ErrorCode: o.WantCode, ErrorMessage: o.Failure})
	case kindInstalling:
		return sim.AddCluster(o.Cluster, clustersim.Script{Installing: d(1), API: api})
	case kindUpdate:
		if err := sim.AddCluster(o.Cluster, ready); err != nil {
			return err
		}
		return sim.UpdateCluster(o.Cluster, o.Life)
	case kindDelete:
		if err := sim.AddCluster(o.Cluster, ready); err != nil {
			return err
		}
		for _, it := range o.Items[1:] {
			np := it.Key[strings.LastIndex(it.Key, "/")+1:]
			if err := sim.AddNodePool(o.Cluster, np, ready); err != nil {
				return err
			}
		}
		return sim.DeleteCluster(o.Cluster, o.Life)
	}
	if err := sim.AddCluster(o.Cluster, ready); err != nil {
		return err
	}
	switch o.Kind {
	case kindPoolCreate, kindPoolCreateFail:
		return sim.AddNodePool(o.Cluster, o.Pool, clustersim.Script{Pending: d(0.2), Installing: d(0.8),
			Fail: o.Kind == kindPoolCreateFail, ErrorMessage: o.Failure})
	case kindPoolUpdate:
		if err := sim.AddNodePool(o.Cluster, o.Pool, ready); err != nil {
			return err
		}
		return sim.UpdateNodePool(o.Cluster, o.Pool, o.Life)
	case kindPoolDelete:
		if err := sim.AddNodePool(o.Cluster, o.Pool, ready); err != nil {
			return err
		}
		return sim.DeleteNodePool(o.Cluster, o.Pool, o.Life)
	}
	return fmt.Errorf("unknown kind %q", o.Kind)
}

// seed registers every lifecycle in the simulator and writes the items as
// the frontend does, straight to Cosmos (not through the proxy: these are
// the frontend's writes under its own lock, before opstatus sees them).
// For each operation the simulator comes first, then the Resources items,
// then the operation, so that a poll never sees an operation without them.
func seedOps(ctx context.Context, sim *clustersim.Sim, fe *frontend.Frontend, notifyBase string, ops []op) error {
	work := make(chan op)
	errs := make(chan error, len(ops))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for o := range work {
				if err := seedOne(ctx, sim, fe, notifyBase, o); err != nil {
					errs <- fmt.Errorf("seed %s: %w", o.ID, err)
				}
			}
		})
	}
	for _, o := range ops {
		work <- o
	}
	close(work)
	wg.Wait()
	close(errs)
	return <-errs
}

func seedOne(ctx context.Context, sim *clustersim.Sim, fe *frontend.Frontend, notifyBase string, o op) error {
	if err := o.simulate(sim); err != nil {
		return err
	}
	for _, it := range o.Items {
		if err := fe.PutResource(ctx, frontend.Resource{
			ID: it.ID, PartitionKey: o.Sub, Key: it.Key, InternalID: it.InternalID,
			ActiveOperationID: it.Active, ProvisioningState: it.State,
			Extra: map[string]any{"chaosTag": it.ID},
		}); err != nil {
			return err
		}
	}
	now := time.Now().UTC()
	return fe.PutOperation(ctx, frontend.Operation{
		ID: o.ID, PartitionKey: o.Sub, Request: o.Request, Status: o.Start,
		ExternalID: o.key(), InternalID: o.internalID(), StartTime: now, LastTransitionTime: now,
		OperationID:     "/subscriptions/" + o.Sub + "/providers/Microsoft.RedHatOpenShift/locations/eastus/hcpOperationStatuses/" + o.ID,
		NotificationURI: notifyBase + "/notify/" + o.ID,
		Extra:           map[string]any{"chaosTag": o.ID},
	})
}

// terminal reports whether status is terminal.
func terminal(status string) bool {
	return status == "Succeeded" || status == "Failed" || status == "Canceled"
}

// settled reports whether every operation is terminal with its
// notification sent (notificationUri cleared), and how many are not.
func settled(items map[string]item, ops []op) (bool, int) {
	left := 0
	for _, o := range ops {
		it := items[o.ID]
		if it == nil || !terminal(it.str("status")) || it.str("notificationUri") != "" {
			left++
		}
	}
	return left == 0, left
}

// checkOutcome compares the final items with what the lifecycles imply and
// returns every mismatch: operation status and error code, unknown fields
// kept, notificationUri cleared, Resources items removed exactly for the
// finished deletes, and every other item at its operation's final state
// with activeOperationId cleared.
func checkOutcome(ops []op, opItems, resItems map[string]item) []string {
	var bad []string
	expected := map[string]bool{}
	for _, o := range ops {
		it := opItems[o.ID]
		if it == nil {
			bad = append(bad, fmt.Sprintf("%s (%s): operation item missing", o.ID, o.Kind))
			continue
		}
		st := it.str("status")
		if st != o.Want {
			bad = append(bad, fmt.Sprintf("%s (%s): status %q, want %q", o.ID, o.Kind, st, o.Want))
		}
		if o.Want == "Failed" {
			code := ""
			if e, ok := it["error"].(map[string]any); ok {
				code, _ = e["code"].(string)
			}
			if code != o.WantCode {
				bad = append(bad, fmt.Sprintf("%s (%s): error code %q, want %q", o.ID, o.Kind, code, o.WantCode))
			}
		}
		if it.str("chaosTag") != o.ID {
			bad = append(bad, fmt.Sprintf("%s: the frontend's unknown field was lost", o.ID))
		}
		if it.str("notificationUri") != "" {
			bad = append(bad, fmt.Sprintf("%s: notificationUri not cleared", o.ID))
		}
		for i, ri := range o.Items {
			expected[ri.ID] = true
			r := resItems[ri.ID]
			switch {
			case ri.Removed && o.Want == "Succeeded":
				if r != nil {
					bad = append(bad, fmt.Sprintf("%s (%s): Resources item %s not removed by the finished delete", o.ID, o.Kind, ri.ID))
				}
			case r == nil:
				bad = append(bad, fmt.Sprintf("%s (%s): Resources item %s was removed", o.ID, o.Kind, ri.ID))
			case r.str("chaosTag") != ri.ID:
				bad = append(bad, fmt.Sprintf("%s: Resources item %s lost the frontend's unknown field", o.ID, ri.ID))
			case i == 0:
				if ps := r.str("provisioningState"); ps != st {
					bad = append(bad, fmt.Sprintf("%s (%s): Resources item %s shows %q, its operation ended %q", o.ID, o.Kind, ri.ID, ps, st))
				}
				if a := r.str("activeOperationId"); a != "" {
					bad = append(bad, fmt.Sprintf("%s (%s): Resources item %s still has activeOperationId %q", o.ID, o.Kind, ri.ID, a))
				}
			default:
				if ps := r.str("provisioningState"); ps != ri.State {
					bad = append(bad, fmt.Sprintf("%s (%s): bystander Resources item %s changed to %q", o.ID, o.Kind, ri.ID, ps))
				}
			}
		}
	}
	for id := range resItems {
		if !expected[id] {
			bad = append(bad, fmt.Sprintf("unexpected Resources item %s", id))
		}
	}
	slices.Sort(bad)
	return bad
}

// countKinds counts operations by kind, for the report.
func countKinds(ops []op) map[string]int {
	out := map[string]int{}
	for _, o := range ops {
		out[o.Kind]++
	}
	return out
}
