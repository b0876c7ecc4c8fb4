// Package demo is the demo of make run and of the stack's end-to-end test:
// operations of every kind over three subscriptions, each with a scripted
// Cluster Service lifecycle and the terminal state it implies, the billing
// items those imply, and a watcher that reads Cosmos and reports every
// transition. It never ships.
package demo

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
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

// Tenant is the tenant of every demo operation, which billing items copy.
const Tenant = "7e57d3a0-0000-4000-8000-00000000d0d0"

// Kinds of operation, as the live view and the summary name them, in the
// summary's order.
const (
	KindCluster      = "cluster"
	KindNodePool     = "node pool"
	KindExternalAuth = "external auth"
	KindCredential   = "credential"
	KindRevocation   = "revocation"
)

// Kinds lists the kinds in the summary's order.
var Kinds = []string{KindCluster, KindNodePool, KindExternalAuth, KindCredential, KindRevocation}

// Op is one operation of the demo and the state it must end in.
type Op struct {
	Sub, ID, Request string
	// Kind is one of the Kind constants.
	Kind     string
	cluster  string  // simulator id of the cluster
	child    string  // node pool, external auth or credential id; empty for a cluster
	children []child // Resources items that go with a deleted cluster
	api      string  // Cluster Service API path prefix of a cluster
	Start    string  // status the frontend wrote
	Want     string  // terminal status the lifecycle implies
	setup    func(sim *clustersim.Sim) error
	// name is what its items are named after once ID is the 2024-10
	// frontend's UUID; itemID is its own Resources item's id when that
	// frontend drew it.
	name, itemID string
}

// itemName is what the operation's Resources items are named after.
func (d Op) itemName() string {
	if d.name != "" {
		return d.name
	}
	return d.ID
}

// resourceItemID is the id of the operation's own Resources item.
func (d Op) resourceItemID() string {
	if d.itemID != "" {
		return d.itemID
	}
	return "res-" + d.itemName()
}

// child is a node pool or external auth of a cluster being deleted.
type child struct{ segment, name string }

// internalID is the child's Cluster Service path; a node pool's is under
// nodePoolAPI.
func (c child) internalID(cluster, nodePoolAPI string) string {
	if c.segment == "externalAuths" {
		return hcpAPI + cluster + "/external_auth_config/external_auths/" + c.name
	}
	return nodePoolAPI + cluster + "/node_pools/" + c.name
}

// clusterKey is the ARM resource ID of a demo cluster.
func clusterKey(sub, cluster string) string {
	return "/subscriptions/" + sub + "/resourceGroups/demo/providers/Microsoft.RedHatOpenShift/hcpOpenShiftClusters/" + cluster
}

// Key is the ARM resource ID, the operation's externalId: a credential's
// operations name their cluster, since credentials are no ARM resources.
func (d Op) Key() string {
	k := clusterKey(d.Sub, d.cluster)
	switch d.Kind {
	case KindNodePool:
		k += "/nodePools/" + d.child
	case KindExternalAuth:
		k += "/externalAuths/" + d.child
	}
	return k
}

func (d Op) internalID() string {
	switch d.Kind {
	case KindNodePool:
		return child{"nodePools", d.child}.internalID(d.cluster, hcpAPI)
	case KindExternalAuth:
		return child{"externalAuths", d.child}.internalID(d.cluster, hcpAPI)
	case KindCredential:
		return cmAPI + d.cluster + "/break_glass_credentials/" + d.child
	}
	return d.api + d.cluster
}

// Name is what the live view calls the resource: its name below the
// resource group, or a credential's cluster and id.
func (d Op) Name() string {
	switch d.Kind {
	case KindNodePool:
		return d.cluster + "/nodePools/" + d.child
	case KindExternalAuth:
		return d.cluster + "/externalAuths/" + d.child
	case KindCredential:
		return d.cluster + " " + d.child
	}
	return d.cluster
}

// HasResource reports whether the operation has a Resources item of its
// own: credentials have none, so their operations write the operation
// alone.
func (d Op) HasResource() bool { return d.Kind != KindCredential && d.Kind != KindRevocation }

func sec(n int) clustersim.Duration { return clustersim.Duration(time.Duration(n) * time.Second) }

const (
	cmAPI  = "/api/clusters_mgmt/v1/clusters/"
	hcpAPI = "/api/aro_hcp/v1alpha1/clusters/"
)

// Ops builds the demo over three subscriptions: cluster creates, failing
// ones, updates and deletes (with node pools and external auths that go
// with the cluster); a node pool create and a failing one; an external auth
// create, a failing one and a delete; a credential issued, one that fails,
// one a revocation overtakes, and that revocation over issued credentials.
// Clusters that the operations name but neither create nor delete exist
// before the demo starts (see Seed).
func Ops() []Op {
	create := func(sub int, id, cluster string, installing int, fail bool) Op {
		return Op{Sub: Subscriptions[sub], ID: id, Request: "Create", Kind: KindCluster, cluster: cluster, api: hcpAPI,
			Start: "Accepted", Want: map[bool]string{false: "Succeeded", true: "Failed"}[fail],
			setup: func(sim *clustersim.Sim) error {
				return sim.AddCluster(cluster, clustersim.Script{Pending: sec(2), Validating: sec(3), Installing: sec(installing),
					Fail: fail, ErrorCode: "OCM3001", ErrorMessage: "Quota exceeded for Standard_D8s_v3 in eastus"})
			}}
	}
	del := func(sub int, id, cluster string, uninstalling int, children ...child) Op {
		return Op{Sub: Subscriptions[sub], ID: id, Request: "Delete", Kind: KindCluster, cluster: cluster, api: cmAPI,
			Start: "Deleting", Want: "Succeeded", children: children,
			setup: func(sim *clustersim.Sim) error {
				if err := sim.AddCluster(cluster, clustersim.Script{}); err != nil {
					return err
				}
				for _, c := range children {
					add := sim.AddNodePool
					if c.segment == "externalAuths" {
						add = sim.AddExternalAuth
					}
					if err := add(cluster, c.name, clustersim.Script{}); err != nil {
						return err
					}
				}
				return sim.DeleteCluster(cluster, time.Duration(uninstalling)*time.Second)
			}}
	}
	np := func(name string) child { return child{"nodePools", name} }
	ea := func(name string) child { return child{"externalAuths", name} }
	credential := func(sub int, id, cluster, bgc string, sc clustersim.Script, want string) Op {
		return Op{Sub: Subscriptions[sub], ID: id, Request: "RequestCredential", Kind: KindCredential, cluster: cluster, child: bgc,
			Start: "Accepted", Want: want,
			setup: func(sim *clustersim.Sim) error { return sim.AddCredential(cluster, bgc, sc) }}
	}
	ops := []Op{
		create(0, "op-a1", "alpha-1", 8, false),
		create(0, "op-a2", "alpha-2", 14, false),
		create(0, "op-a3", "alpha-3", 20, false),
		create(0, "op-a4", "alpha-4", 6, true),
		{Sub: Subscriptions[0], ID: "op-a5", Request: "Create", Kind: KindNodePool, cluster: "alpha-base", child: "workers",
			Start: "Accepted", Want: "Succeeded",
			setup: func(sim *clustersim.Sim) error {
				return sim.AddNodePool("alpha-base", "workers", clustersim.Script{Pending: sec(1), Installing: sec(10)})
			}},
		// Cluster Service reports no stages of an external auth's create
		// that opstatus maps: it is ready, or in error, when first asked.
		{Sub: Subscriptions[0], ID: "op-a7", Request: "Create", Kind: KindExternalAuth, cluster: "alpha-base", child: "entra",
			Start: "Accepted", Want: "Succeeded",
			setup: func(sim *clustersim.Sim) error {
				return sim.AddExternalAuth("alpha-base", "entra", clustersim.Script{})
			}},
		credential(0, "op-a8", "alpha-base", "bgc-admin", clustersim.Script{Issuing: sec(6)}, "Succeeded"),
		credential(0, "op-a9", "alpha-base", "bgc-broken", clustersim.Script{Issuing: sec(4), Fail: true}, "Failed"),
		create(1, "op-b1", "bravo-1", 10, false),
		create(1, "op-b2", "bravo-2", 25, false),
		{Sub: Subscriptions[1], ID: "op-b3", Request: "Update", Kind: KindCluster, cluster: "bravo-old", api: hcpAPI,
			Start: "Accepted", Want: "Succeeded",
			setup: func(sim *clustersim.Sim) error { return sim.UpdateCluster("bravo-old", 12*time.Second) }},
		del(1, "op-b4", "bravo-gone", 8, np("np-1"), np("np-2"), ea("corp-idp")),
		del(1, "op-b5", "bravo-gone-2", 16),
		{Sub: Subscriptions[1], ID: "op-b6", Request: "Create", Kind: KindNodePool, cluster: "bravo-old", child: "gpu",
			Start: "Accepted", Want: "Failed",
			setup: func(sim *clustersim.Sim) error {
				return sim.AddNodePool("bravo-old", "gpu", clustersim.Script{Pending: sec(2), Installing: sec(6), Fail: true,
					ErrorMessage: "no capacity for Standard_NC24ads_A100_v4"})
			}},
		{Sub: Subscriptions[1], ID: "op-b7", Request: "Delete", Kind: KindExternalAuth, cluster: "bravo-old", child: "old-idp",
			Start: "Deleting", Want: "Succeeded",
			setup: func(sim *clustersim.Sim) error {
				if err := sim.AddExternalAuth("bravo-old", "old-idp", clustersim.Script{}); err != nil {
					return err
				}
				return sim.DeleteExternalAuth("bravo-old", "old-idp", 10*time.Second)
			}},
		// The revocation below overtakes this request: it ends Canceled.
		// It must be set up before the revocation.
		credential(1, "op-b8", "bravo-ops", "bgc-late", clustersim.Script{Issuing: sec(30)}, "Canceled"),
		{Sub: Subscriptions[1], ID: "op-b9", Request: "RevokeCredentials", Kind: KindRevocation, cluster: "bravo-ops", api: hcpAPI,
			Start: "Accepted", Want: "Succeeded",
			setup: func(sim *clustersim.Sim) error {
				for _, bgc := range []string{"bgc-1", "bgc-2"} {
					if err := sim.AddCredential("bravo-ops", bgc, clustersim.Script{}); err != nil {
						return err
					}
				}
				_, err := sim.RevokeCredentials("bravo-ops", 10*time.Second)
				return err
			}},
		create(2, "op-c1", "charlie-1", 8, false),
		create(2, "op-c2", "charlie-2", 12, false),
		create(2, "op-c3", "charlie-3", 18, false),
		create(2, "op-c4", "charlie-4", 22, false),
		create(2, "op-c5", "charlie-5", 10, true),
		del(2, "op-c6", "charlie-gone", 6, np("np-1"), ea("entra")),
		del(2, "op-c7", "charlie-gone-2", 12),
		{Sub: Subscriptions[2], ID: "op-c8", Request: "Update", Kind: KindCluster, cluster: "charlie-old", api: cmAPI,
			Start: "Accepted", Want: "Succeeded",
			setup: func(sim *clustersim.Sim) error { return sim.UpdateCluster("charlie-old", 6*time.Second) }},
		{Sub: Subscriptions[2], ID: "op-c9", Request: "Create", Kind: KindExternalAuth, cluster: "charlie-old", child: "partner",
			Start: "Accepted", Want: "Failed",
			setup: func(sim *clustersim.Sim) error {
				return sim.AddExternalAuth("charlie-old", "partner", clustersim.Script{Fail: true,
					ErrorMessage: "issuer URL https://login.partner.example did not answer"})
			}},
		create(0, "op-a6", "alpha-6", 4, false),
	}
	return ops
}

// existing lists the clusters, by subscription and id, that operations
// name but neither create nor delete: they exist before the demo.
func existing(ops []Op) [][2]string {
	var made, out [][2]string
	for _, d := range ops {
		if d.Kind == KindCluster && d.Request != "Update" {
			made = append(made, [2]string{d.Sub, d.cluster})
		}
	}
	for _, d := range ops {
		c := [2]string{d.Sub, d.cluster}
		if !slices.Contains(made, c) && !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}

// ParentItems returns the ids, by subscription, of the Resources items of
// the clusters that exist before the demo and have no operation of their
// own: no operation may change them.
func ParentItems(ops []Op) map[string][]string {
	keys := map[string]bool{}
	for _, d := range ops {
		if d.HasResource() {
			keys[strings.ToLower(d.Key())] = true
		}
	}
	out := map[string][]string{}
	for _, c := range existing(ops) {
		if !keys[strings.ToLower(clusterKey(c[0], c[1]))] {
			out[c[0]] = append(out[c[0]], "res-cluster-"+c[1])
		}
	}
	return out
}

// seededBillingID is the id of the billing item the demo writes for a
// cluster it deletes, as ARO-HCP's backend did when the cluster was
// created.
func seededBillingID(cluster string) string { return "billing-" + cluster }

// SeededField is a field of the seeded billing items that opstatus does
// not know: it must survive opstatus's writes.
const SeededField = "demoSeeded"

// Seed registers every demo resource in the simulator and writes the
// operations and resources to Cosmos as the frontend would, and the billing
// items of the clusters it deletes. When the stack's frontend writes in
// the 2024-10 shape, the cluster and node pool operations are requests
// served as that frontend did (it knew no external auths or credentials):
// their ids become its UUIDs, and every cluster and node pool has a
// clusters_mgmt internalId.
func Seed(ctx context.Context, s *stack.Stack, ops []Op) error {
	now := time.Now().UTC()
	aro2024 := s.Frontend.Shape == frontend.Shape2024_10
	clusterAPI, nodePoolAPI := hcpAPI, hcpAPI
	if aro2024 {
		clusterAPI, nodePoolAPI = cmAPI, cmAPI
	}
	for _, c := range existing(ops) {
		if err := s.Sim.AddCluster(c[1], clustersim.Script{}); err != nil {
			return fmt.Errorf("simulator cluster %s: %w", c[1], err)
		}
	}
	for sub, ids := range ParentItems(ops) {
		for _, id := range ids {
			cluster := strings.TrimPrefix(id, "res-cluster-")
			if err := s.Frontend.PutResource(ctx, frontend.Resource{
				ID: id, PartitionKey: sub, Key: clusterKey(sub, cluster), InternalID: clusterAPI + cluster, ProvisioningState: "Succeeded",
			}); err != nil {
				return fmt.Errorf("resource %s: %w", id, err)
			}
		}
	}
	for i := range ops {
		d := &ops[i]
		if err := d.setup(s.Sim); err != nil {
			return fmt.Errorf("simulator %s: %w", d.ID, err)
		}
		if aro2024 && (d.Kind == KindCluster || d.Kind == KindNodePool) {
			if err := request2024(ctx, s, d, nodePoolAPI); err != nil {
				return fmt.Errorf("request %s: %w", d.ID, err)
			}
			continue
		}
		if err := s.Frontend.PutOperation(ctx, frontend.Operation{
			ID: d.ID, PartitionKey: d.Sub, TenantID: Tenant, Request: d.Request, Status: d.Start,
			ExternalID: d.Key(), InternalID: d.internalID(), StartTime: now, LastTransitionTime: now,
			OperationID:     "/subscriptions/" + d.Sub + "/providers/Microsoft.RedHatOpenShift/locations/eastus/hcpOperationStatuses/" + d.ID,
			NotificationURI: s.ARMURL + "/notify/" + d.ID,
		}); err != nil {
			return fmt.Errorf("operation %s: %w", d.ID, err)
		}
		if !d.HasResource() {
			continue
		}
		if err := s.Frontend.PutResource(ctx, frontend.Resource{
			ID: d.resourceItemID(), PartitionKey: d.Sub, Key: d.Key(), InternalID: d.internalID(),
			ActiveOperationID: d.ID, ProvisioningState: d.Start,
		}); err != nil {
			return fmt.Errorf("resource %s: %w", d.ID, err)
		}
		if err := seedAround(ctx, s, *d, nodePoolAPI); err != nil {
			return err
		}
	}
	return nil
}

// seedAround writes what a cluster's delete takes with it: the Resources
// items of its node pools and external auths, and its open billing item.
func seedAround(ctx context.Context, s *stack.Stack, d Op, nodePoolAPI string) error {
	for _, c := range d.children {
		if err := s.Frontend.PutResource(ctx, frontend.Resource{
			ID: childItemID(d, c), PartitionKey: d.Sub, Key: d.Key() + "/" + c.segment + "/" + c.name,
			InternalID: c.internalID(d.cluster, nodePoolAPI), ProvisioningState: "Succeeded",
		}); err != nil {
			return fmt.Errorf("resource %s: %w", childItemID(d, c), err)
		}
	}
	if d.Kind != KindCluster || d.Request != "Delete" {
		return nil
	}
	sc, err := s.Sim.Cluster(d.cluster)
	if err != nil {
		return fmt.Errorf("simulator %s: %w", d.ID, err)
	}
	if err := s.Frontend.PutBilling(ctx, frontend.Billing{
		ID: seededBillingID(d.cluster), SubscriptionID: d.Sub, ResourceID: d.Key(), TenantID: Tenant,
		Location: stack.Location, CreationTime: sc.CreationTimestamp,
		ManagedResourceGroup: "/subscriptions/" + d.Sub + "/resourceGroups/" + d.cluster + "-managed",
		Extra:                map[string]any{SeededField: true},
	}); err != nil {
		return fmt.Errorf("billing item of %s: %w", d.cluster, err)
	}
	return nil
}

// request2024 makes d's request to the 2024-10 frontend stand-in. An
// update or delete finds its resource's item as an earlier request left
// it; d then takes the operation's id and its item's.
func request2024(ctx context.Context, s *stack.Stack, d *Op, nodePoolAPI string) error {
	method := map[string]string{"Create": http.MethodPut, "Update": http.MethodPut, "Delete": http.MethodDelete}[d.Request]
	if d.Request != "Create" {
		if err := s.Frontend.PutResource(ctx, frontend.Resource{ID: d.resourceItemID(), PartitionKey: d.Sub, Key: d.Key(),
			InternalID: cmAPI + d.cluster, ProvisioningState: "Succeeded"}); err != nil {
			return err
		}
		if err := seedAround(ctx, s, *d, nodePoolAPI); err != nil {
			return err
		}
	}
	internalID := cmAPI + d.cluster // a node pool's is its cluster's + /node_pools/{name}
	if d.Kind == KindNodePool {
		internalID = ""
	}
	r, err := s.Frontend.Request(ctx, frontend.Request{Method: method, Key: d.Key(), InternalID: internalID,
		TenantID: Tenant, NotificationURI: s.ARMURL + "/notify/" + d.ID})
	if err != nil {
		return err
	}
	if r.Request != d.Request {
		return fmt.Errorf("the frontend served a %s, not a %s", r.Request, d.Request)
	}
	d.name, d.ID, d.itemID = d.ID, r.Operation, r.Resource
	return nil
}

func childItemID(d Op, c child) string { return "res-" + d.itemName() + "-" + c.name }
