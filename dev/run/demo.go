package main

import (
	"context"
	"fmt"
	"time"

	"github.com/opstatus/opstatus/dev/clustersim"
	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/dev/stack"
)

// Subscriptions of the demo.
var subscriptions = []string{
	"1d3a5b7c-0000-4000-8000-00000000a001",
	"2e4b6c8d-0000-4000-8000-00000000b002",
	"3f5c7d9e-0000-4000-8000-00000000c003",
}

// demoOp is one operation of the demo and the state it must end in.
type demoOp struct {
	sub, id, request string
	cluster, pool    string   // simulator ids; pool empty for a cluster
	pools            []string // node pools that go with a deleted cluster
	api              string   // Cluster Service API path prefix
	start            string   // status the frontend wrote
	want             string   // terminal status the lifecycle implies
	setup            func(sim *clustersim.Sim) error
}

func (d demoOp) key() string {
	k := "/subscriptions/" + d.sub + "/resourceGroups/demo/providers/Microsoft.RedHatOpenShift/hcpOpenShiftClusters/" + d.cluster
	if d.pool != "" {
		k += "/nodePools/" + d.pool
	}
	return k
}

func (d demoOp) internalID() string {
	if d.pool != "" {
		return "/api/aro_hcp/v1alpha1/clusters/" + d.cluster + "/node_pools/" + d.pool
	}
	return d.api + d.cluster
}

func (d demoOp) name() string {
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

// demoOps builds the demo: creates, a failing create, a node pool create and
// a failing one, an update, and deletes, over three subscriptions.
func demoOps() []demoOp {
	create := func(sub int, id, cluster string, installing int, fail bool) demoOp {
		return demoOp{sub: subscriptions[sub], id: id, request: "Create", cluster: cluster, api: hcpAPI,
			start: "Accepted", want: map[bool]string{false: "Succeeded", true: "Failed"}[fail],
			setup: func(sim *clustersim.Sim) error {
				return sim.AddCluster(cluster, clustersim.Script{Pending: sec(2), Validating: sec(3), Installing: sec(installing),
					Fail: fail, ErrorCode: "OCM3001", ErrorMessage: "Quota exceeded for Standard_D8s_v3 in eastus"})
			}}
	}
	existing := func(cluster string) func(*clustersim.Sim) error {
		return func(sim *clustersim.Sim) error { return sim.AddCluster(cluster, clustersim.Script{}) }
	}
	del := func(sub int, id, cluster string, uninstalling int, pools ...string) demoOp {
		return demoOp{sub: subscriptions[sub], id: id, request: "Delete", cluster: cluster, api: cmAPI,
			start: "Deleting", want: "Succeeded", pools: pools,
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
	ops := []demoOp{
		create(0, "op-a1", "alpha-1", 8, false),
		create(0, "op-a2", "alpha-2", 14, false),
		create(0, "op-a3", "alpha-3", 20, false),
		create(0, "op-a4", "alpha-4", 6, true),
		{sub: subscriptions[0], id: "op-a5", request: "Create", cluster: "alpha-base", pool: "workers", start: "Accepted", want: "Succeeded",
			setup: func(sim *clustersim.Sim) error {
				if err := existing("alpha-base")(sim); err != nil {
					return err
				}
				return sim.AddNodePool("alpha-base", "workers", clustersim.Script{Pending: sec(1), Installing: sec(10)})
			}},
		create(1, "op-b1", "bravo-1", 10, false),
		create(1, "op-b2", "bravo-2", 25, false),
		{sub: subscriptions[1], id: "op-b3", request: "Update", cluster: "bravo-old", api: hcpAPI, start: "Accepted", want: "Succeeded",
			setup: func(sim *clustersim.Sim) error {
				if err := existing("bravo-old")(sim); err != nil {
					return err
				}
				return sim.UpdateCluster("bravo-old", 12*time.Second)
			}},
		del(1, "op-b4", "bravo-gone", 8, "np-1", "np-2"),
		del(1, "op-b5", "bravo-gone-2", 16),
		{sub: subscriptions[1], id: "op-b6", request: "Create", cluster: "bravo-old", pool: "gpu", start: "Accepted", want: "Failed",
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
		{sub: subscriptions[2], id: "op-c8", request: "Update", cluster: "charlie-old", api: cmAPI, start: "Accepted", want: "Succeeded",
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

// seed registers every demo resource in the simulator and writes the
// operations and resources to Cosmos as the frontend would.
func seed(ctx context.Context, s *stack.Stack, ops []demoOp) error {
	now := time.Now().UTC()
	for _, d := range ops {
		if err := d.setup(s.Sim); err != nil {
			return fmt.Errorf("simulator %s: %w", d.id, err)
		}
		if err := s.Frontend.PutOperation(ctx, frontend.Operation{
			ID: d.id, PartitionKey: d.sub, Request: d.request, Status: d.start,
			ExternalID: d.key(), InternalID: d.internalID(), StartTime: now, LastTransitionTime: now,
			OperationID:     "/subscriptions/" + d.sub + "/providers/Microsoft.RedHatOpenShift/locations/eastus/hcpOperationStatuses/" + d.id,
			NotificationURI: s.ARMURL + "/notify/" + d.id,
		}); err != nil {
			return fmt.Errorf("operation %s: %w", d.id, err)
		}
		if err := s.Frontend.PutResource(ctx, frontend.Resource{
			ID: "res-" + d.id, PartitionKey: d.sub, Key: d.key(), InternalID: d.internalID(),
			ActiveOperationID: d.id, ProvisioningState: d.start,
		}); err != nil {
			return fmt.Errorf("resource %s: %w", d.id, err)
		}
		// The node pools of a cluster being deleted go with it.
		for i, np := range d.pools {
			if err := s.Frontend.PutResource(ctx, frontend.Resource{
				ID: fmt.Sprintf("res-%s-np%d", d.id, i), PartitionKey: d.sub, Key: d.key() + "/nodePools/" + np,
				InternalID: hcpAPI + d.cluster + "/node_pools/" + np, ProvisioningState: "Succeeded",
			}); err != nil {
				return err
			}
		}
	}
	return nil
}
