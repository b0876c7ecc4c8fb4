// Package demo is the demo of make run and of the stack's end-to-end test:
// about twenty operations over three subscriptions, each with a scripted
// Cluster Service lifecycle and the terminal state it implies, and a watcher
// that reads Cosmos and reports every transition. It never ships.
package demo

import (
	"context"
	"fmt"
	"time"

	"github.com/opstatus/opstatus/dev/clustersim"
	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/dev/stack"
)

// Subscriptions of the demo.
var Subscriptions = []string{
	"1d3a5b7c-0000-4000-8000-00000000a001",
	"2e4b6c8d-0000-4000-8000-00000000b002",
	"3f5c7d9e-0000-4000-8000-00000000c003",
}

// Op is one operation of the demo and the state it must end in.
type Op struct {
	Sub, ID, Request string
	cluster, pool    string   // simulator ids; pool empty for a cluster
	pools            []string // node pools that go with a deleted cluster
	api              string   // Cluster Service API path prefix
	Start            string   // status the frontend wrote
	Want             string   // terminal status the lifecycle implies
	setup            func(sim *clustersim.Sim) error
}

// Key is the ARM resource ID.
func (d Op) Key() string {
	k := "/subscriptions/" + d.Sub + "/resourceGroups/demo/providers/Microsoft.RedHatOpenShift/hcpOpenShiftClusters/" + d.cluster
	if d.pool != "" {
		k += "/nodePools/" + d.pool
	}
	return k
}

func (d Op) internalID() string {
	if d.pool != "" {
		return "/api/aro_hcp/v1alpha1/clusters/" + d.cluster + "/node_pools/" + d.pool
	}
	return d.api + d.cluster
}

// Name is the resource name below the resource group.
func (d Op) Name() string {
	if d.pool != "" {
		return d.cluster + "/nodePools/" + d.pool
	}
	return d.cluster
}

func sec(n int) clustersim.Duration { return clustersim.Duration(time.Duration(n) * time.Second) }

const (
	cmAPI  = "/api/clusters_mgmt/v1/clusters/"
	hcpAPI = "/api/aro_hcp/v1alpha1/clusters/"
)

// Ops builds the demo: creates, a failing create, a node pool create and
// a failing one, an update, and deletes, over three subscriptions.
func Ops() []Op {
	create := func(sub int, id, cluster string, installing int, fail bool) Op {
		return Op{Sub: Subscriptions[sub], ID: id, Request: "Create", cluster: cluster, api: hcpAPI,
			Start: "Accepted", Want: map[bool]string{false: "Succeeded", true: "Failed"}[fail],
			setup: func(sim *clustersim.Sim) error {
				return sim.AddCluster(cluster, clustersim.Script{Pending: sec(2), Validating: sec(3), Installing: sec(installing),
					Fail: fail, ErrorCode: "OCM3001", ErrorMessage: "Quota exceeded for Standard_D8s_v3 in eastus"})
			}}
	}
	existing := func(cluster string) func(*clustersim.Sim) error {
		return func(sim *clustersim.Sim) error { return sim.AddCluster(cluster, clustersim.Script{}) }
	}
	del := func(sub int, id, cluster string, uninstalling int, pools ...string) Op {
		return Op{Sub: Subscriptions[sub], ID: id, Request: "Delete", cluster: cluster, api: cmAPI,
			Start: "Deleting", Want: "Succeeded", pools: pools,
			setup: func(sim *clustersim.Sim) error {
				if err := sim.AddCluster(cluster, clustersim.Script{}); err != nil {
					return err
				}
				for _, p := range pools {
					if err := sim.AddNodePool(cluster, p, clustersim.Script{}); err != nil {
						return err
					}
				}
				return sim.DeleteCluster(cluster, time.Duration(uninstalling)*time.Second)
			}}
	}
	ops := []Op{
		create(0, "op-a1", "alpha-1", 8, false),
		create(0, "op-a2", "alpha-2", 14, false),
		create(0, "op-a3", "alpha-3", 20, false),
		create(0, "op-a4", "alpha-4", 6, true),
		{Sub: Subscriptions[0], ID: "op-a5", Request: "Create", cluster: "alpha-base", pool: "workers", Start: "Accepted", Want: "Succeeded",
			setup: func(sim *clustersim.Sim) error {
				if err := existing("alpha-base")(sim); err != nil {
					return err
				}
				return sim.AddNodePool("alpha-base", "workers", clustersim.Script{Pending: sec(1), Installing: sec(10)})
			}},
		create(1, "op-b1", "bravo-1", 10, false),
		create(1, "op-b2", "bravo-2", 25, false),
		{Sub: Subscriptions[1], ID: "op-b3", Request: "Update", cluster: "bravo-old", api: hcpAPI, Start: "Accepted", Want: "Succeeded",
			setup: func(sim *clustersim.Sim) error {
				if err := existing("bravo-old")(sim); err != nil {
					return err
				}
				return sim.UpdateCluster("bravo-old", 12*time.Second)
			}},
		del(1, "op-b4", "bravo-gone", 8, "np-1", "np-2"),
		del(1, "op-b5", "bravo-gone-2", 16),
		{Sub: Subscriptions[1], ID: "op-b6", Request: "Create", cluster: "bravo-old", pool: "gpu", Start: "Accepted", Want: "Failed",
			setup: func(sim *clustersim.Sim) error {
				return sim.AddNodePool("bravo-old", "gpu", clustersim.Script{Pending: sec(2), Installing: sec(6), Fail: true,
					ErrorMessage: "no capacity for Standard_NC24ads_A100_v4"})
			}},
		create(2, "op-c1", "charlie-1", 8, false),
		create(2, "op-c2", "charlie-2", 12, false),
		create(2, "op-c3", "charlie-3", 18, false),
		create(2, "op-c4", "charlie-4", 22, false),
		create(2, "op-c5", "charlie-5", 10, true),
		del(2, "op-c6", "charlie-gone", 6, "np-1"),
		del(2, "op-c7", "charlie-gone-2", 12),
		{Sub: Subscriptions[2], ID: "op-c8", Request: "Update", cluster: "charlie-old", api: cmAPI, Start: "Accepted", Want: "Succeeded",
			setup: func(sim *clustersim.Sim) error {
				if err := existing("charlie-old")(sim); err != nil {
					return err
				}
				return sim.UpdateCluster("charlie-old", 6*time.Second)
			}},
		create(0, "op-a6", "alpha-6", 4, false),
	}
	return ops
}

// Seed registers every demo resource in the simulator and writes the
// operations and resources to Cosmos as the frontend would.
func Seed(ctx context.Context, s *stack.Stack, ops []Op) error {
	now := time.Now().UTC()
	for _, d := range ops {
		if err := d.setup(s.Sim); err != nil {
			return fmt.Errorf("simulator %s: %w", d.ID, err)
		}
		if err := s.Frontend.PutOperation(ctx, frontend.Operation{
			ID: d.ID, PartitionKey: d.Sub, Request: d.Request, Status: d.Start,
			ExternalID: d.Key(), InternalID: d.internalID(), StartTime: now, LastTransitionTime: now,
			OperationID:     "/subscriptions/" + d.Sub + "/providers/Microsoft.RedHatOpenShift/locations/eastus/hcpOperationStatuses/" + d.ID,
			NotificationURI: s.ARMURL + "/notify/" + d.ID,
		}); err != nil {
			return fmt.Errorf("operation %s: %w", d.ID, err)
		}
		if err := s.Frontend.PutResource(ctx, frontend.Resource{
			ID: "res-" + d.ID, PartitionKey: d.Sub, Key: d.Key(), InternalID: d.internalID(),
			ActiveOperationID: d.ID, ProvisioningState: d.Start,
		}); err != nil {
			return fmt.Errorf("resource %s: %w", d.ID, err)
		}
		// The node pools of a cluster being deleted go with it.
		for i, np := range d.pools {
			if err := s.Frontend.PutResource(ctx, frontend.Resource{
				ID: fmt.Sprintf("res-%s-np%d", d.ID, i), PartitionKey: d.Sub, Key: d.Key() + "/nodePools/" + np,
				InternalID: hcpAPI + d.cluster + "/node_pools/" + np, ProvisioningState: "Succeeded",
			}); err != nil {
				return err
			}
		}
	}
	return nil
}
