package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/opstatus/opstatus/dev/clustersim"
	"github.com/opstatus/opstatus/dev/frontend"
)

// installing is how long every benchmark cluster stays installing: longer
// than any run, so that its operation stays Provisioning (an unchanged
// poll) until the simulator flips it to ready.
const installing = 24 * time.Hour

// benchOp is one benchmark operation: a cluster create in Provisioning.
type benchOp struct {
	Sub, ID, Cluster string
}

// InternalID is the Cluster Service path of the operation's cluster.
func (o benchOp) InternalID() string { return "/api/aro_hcp/v1alpha1/clusters/" + o.Cluster }

// Key is the ARM resource ID.
func (o benchOp) Key() string {
	return "/subscriptions/" + o.Sub + "/resourceGroups/bench/providers/Microsoft.RedHatOpenShift/hcpOpenShiftClusters/" + o.Cluster
}

// dataset is the operations of one run.
type dataset struct {
	ops []benchOp
}

// newDataset builds n operations over ceil(n/perSub) subscriptions, written
// round-robin so that operations next to each other belong to different
// subscriptions.
func newDataset(run string, n, perSub int) dataset {
	perSub = max(perSub, 1)
	subs := (n + perSub - 1) / perSub
	ds := dataset{ops: make([]benchOp, n)}
	for i := range n {
		s := i % subs
		ds.ops[i] = benchOp{
			Sub:     fmt.Sprintf("%08x-0000-4000-8000-%012x", hash32(run), s),
			ID:      fmt.Sprintf("%08x-0001-4000-8000-%012x", hash32(run), i),
			Cluster: fmt.Sprintf("%s-c%05d", run, i),
		}
	}
	return ds
}

func hash32(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h = (h ^ uint32(s[i])) * 16777619
	}
	return h
}

// paths returns the internalIds of the operations.
func (ds dataset) paths() []string {
	out := make([]string, len(ds.ops))
	for i, o := range ds.ops {
		out[i] = o.InternalID()
	}
	return out
}

// fixture is a seeded database, its dataset and the simulator that knows
// its clusters.
type fixture struct {
	db       string
	ds       dataset
	sim      *clustersim.Sim
	seedTime time.Duration
}

// newFixture installs a fresh simulator at cfg.latency and seeds n
// operations in a database of their own.
func (e *env) newFixture(ctx context.Context, cfg config, label string, n int) (*fixture, error) {
	sim, err := e.newSim(cfg.latency)
	if err != nil {
		return nil, err
	}
	fx := &fixture{db: e.newDatabase(label), ds: newDataset(label, n, cfg.opsPerSub), sim: sim}
	start := time.Now()
	if err := e.seed(ctx, fx.db, fx.ds, sim); err != nil {
		e.dropDatabase(context.WithoutCancel(ctx), fx.db)
		return nil, err
	}
	fx.seedTime = time.Since(start)
	return fx, nil
}

// subscriptions returns the dataset's subscriptions, each once.
func (ds dataset) subscriptions() []string {
	seen := map[string]bool{}
	var out []string
	for _, o := range ds.ops {
		if !seen[o.Sub] {
			seen[o.Sub] = true
			out = append(out, o.Sub)
		}
	}
	return out
}

// seed creates database db with the production containers, writes the
// operations and their resources as the frontend does, and registers the
// clusters, installing, in sim.
func (e *env) seed(ctx context.Context, db string, ds dataset, sim *clustersim.Sim) error {
	if err := frontend.CreateSchema(ctx, e.cosmos.Endpoint, e.cosmos.Key, db, lockTTL); err != nil {
		return err
	}
	if err := e.seedLedger(ctx, db); err != nil {
		return err
	}
	fe, err := frontend.New(e.cosmos.Endpoint, e.cosmos.Key, db)
	if err != nil {
		return err
	}
	for _, o := range ds.ops {
		if err := sim.AddCluster(o.Cluster, clustersim.Script{Installing: clustersim.Duration(installing)}); err != nil {
			return err
		}
	}
	now := time.Now().UTC()
	work := make(chan benchOp)
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for o := range work {
				err := fe.PutOperation(ctx, frontend.Operation{
					ID: o.ID, PartitionKey: o.Sub, TenantID: "72f988bf-86f1-41af-91ab-2d7cd011db47",
					Request: "Create", Status: "Provisioning",
					ExternalID: o.Key(), InternalID: o.InternalID(),
					OperationID: "/subscriptions/" + o.Sub + "/providers/Microsoft.RedHatOpenShift/locations/eastus/hcpOperationStatuses/" + o.ID,
					StartTime:   now, LastTransitionTime: now,
				})
				if err == nil {
					err = fe.PutResource(ctx, frontend.Resource{
						ID: "res-" + o.ID, PartitionKey: o.Sub, Key: o.Key(), InternalID: o.InternalID(),
						ActiveOperationID: o.ID, ProvisioningState: "Provisioning",
					})
				}
				if err != nil {
					select {
					case errs <- fmt.Errorf("seeding %s: %w", o.ID, err):
					default:
					}
				}
			}
		})
	}
	for _, o := range ds.ops {
		select {
		case work <- o:
		case err := <-errs:
			close(work)
			wg.Wait()
			return err
		}
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// opState is what the harness reads back of an operation.
type opState struct {
	ID                 string    `json:"id"`
	Status             string    `json:"status"`
	LastTransitionTime time.Time `json:"lastTransitionTime"`
}

// readStates reads every operation of database db directly (uncounted).
func (e *env) readStates(ctx context.Context, db string) (map[string]opState, error) {
	c, err := e.direct.NewContainer(db, frontend.OperationsContainer)
	if err != nil {
		return nil, err
	}
	pager := c.NewQueryItemsPager("SELECT c.id, c.status, c.lastTransitionTime FROM c", azcosmos.NewPartitionKey(),
		&azcosmos.QueryOptions{PageSizeHint: 1000})
	out := map[string]opState{}
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("reading operations: %w", err)
		}
		for _, raw := range page.Items {
			var s opState
			if err := json.Unmarshal(raw, &s); err != nil {
				return nil, err
			}
			out[s.ID] = s
		}
	}
	return out, nil
}

// freshness returns, for every operation of ds, the delay from flip until
// its lastTransitionTime, and how many are not Succeeded.
func freshness(states map[string]opState, ds dataset, flip time.Time) (delays []time.Duration, missing int) {
	for _, o := range ds.ops {
		s, ok := states[o.ID]
		if !ok || s.Status != "Succeeded" {
			missing++
			continue
		}
		delays = append(delays, s.LastTransitionTime.Sub(flip))
	}
	return delays, missing
}
