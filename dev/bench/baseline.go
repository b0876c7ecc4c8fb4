package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/clusterservice"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/internal/lock"
	"github.com/opstatus/opstatus/internal/testenv"
)

// The replaced design's schedule: it lists the operations every 30 s and
// starts a pass over them every 10 s, or at once when a pass overruns.
const (
	baselineListEvery = 30 * time.Second
	baselinePassEvery = 10 * time.Second
)

// baseline is the design opstatus replaces: one process, one serial loop.
// It uses the project's own Cosmos client, Cluster Service client and lock,
// so that the comparison isolates the design, not the clients.
type baseline struct {
	db     *database.CosmosClient
	list   *azcosmos.ContainerClient
	cs     *clusterservice.Client
	locker *lock.Locker
	owner  string
	now    func() time.Time
}

// newBaseline connects to database db at cosmosURL and to Cluster Service
// at csURL.
func newBaseline(ctx context.Context, cosmosURL, key, db, csURL string) (*baseline, error) {
	client, err := database.NewCosmosClient(database.CosmosConfig{
		Endpoint: cosmosURL, Database: db, Key: key, InsecureSkipVerify: true,
		OperationsContainer: "Operations", ResourcesContainer: "Resources", LocksContainer: "Locks",
		BillingContainer: "Billing",
	})
	if err != nil {
		return nil, err
	}
	listClient, err := testenv.NewCosmosClient(cosmosURL, key)
	if err != nil {
		return nil, err
	}
	list, err := listClient.NewContainer(db, "Operations")
	if err != nil {
		return nil, err
	}
	cs, err := clusterservice.NewClient(clusterservice.Config{URL: csURL})
	if err != nil {
		return nil, err
	}
	return &baseline{
		db: client, list: list, cs: cs,
		locker: lock.New(client.Locks(), lock.Options{Logger: slog.New(slog.DiscardHandler)}),
		owner:  "baseline",
		now:    func() time.Time { return time.Now().UTC() },
	}, nil
}

func (b *baseline) close() { _ = b.cs.Close() }

// listActive is the replaced design's scan: a plain query of every
// operation, filtered on the client.
func (b *baseline) listActive(ctx context.Context) ([]*database.Operation, error) {
	pager := b.list.NewQueryItemsPager("SELECT * FROM c", azcosmos.NewPartitionKey(), nil)
	var active []*database.Operation
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("listing operations: %w", err)
		}
		for _, raw := range page.Items {
			op := &database.Operation{}
			if err := json.Unmarshal(raw, op); err != nil {
				continue
			}
			if !op.Status.IsTerminal() {
				active = append(active, op)
			}
		}
	}
	return active, nil
}

// check is one update check of the replaced design: the Cluster Service
// call, then under the subscription lock a fresh read of the operation, the
// comparison, a write if it changed, and the resource item, which it read
// on every check and wrote when it had to follow the operation.
func (b *baseline) check(ctx context.Context, op *database.Operation) (changed bool, err error) {
	id, err := clusterservice.ParseInternalID(op.InternalID)
	if err != nil {
		return false, err
	}
	st, csErr := b.cs.Status(ctx, id)
	gone := errors.Is(csErr, clusterservice.ErrNotFound) && op.Request == arm.RequestDelete
	if csErr != nil && !gone {
		return false, fmt.Errorf("cluster service: %w", csErr)
	}
	err = b.locker.Do(ctx, op.PartitionKey, b.owner, func(ctx context.Context) error {
		cur, err := b.db.GetOperation(ctx, op.PartitionKey, op.ID)
		if err != nil {
			return err
		}
		state, cloudErr := arm.ProvisioningStateSucceeded, (*arm.CloudErrorBody)(nil)
		if !gone {
			state, cloudErr = baselineState(st, cur)
		}
		if state != cur.Status && !cur.Status.IsTerminal() {
			next := *cur
			next.Status, next.Error = state, cloudErr
			next.LastTransitionTime = b.now()
			if _, err := b.db.ReplaceOperation(ctx, &next); err != nil {
				return err
			}
			changed = true
			cur = &next
		}
		r, err := b.db.GetResource(ctx, cur.PartitionKey, cur.ExternalID)
		if errors.Is(err, database.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if r.ActiveOperationID != cur.ID || (r.ProvisioningState == cur.Status && !cur.Status.IsTerminal()) {
			return nil
		}
		r.ProvisioningState = cur.Status
		if cur.Status.IsTerminal() {
			r.ActiveOperationID = ""
		}
		_, err = b.db.ReplaceResource(ctx, r)
		return err
	})
	return changed, err
}

// passResult is one pass of the serial loop.
type passResult struct {
	Start, End time.Time
	// Done is how many operations were checked, Changed how many were
	// written, Errors how many checks failed.
	Done, Changed, Errors int
}

// pass checks ops in order.
func (b *baseline) pass(ctx context.Context, ops []*database.Operation) passResult {
	r := passResult{Start: time.Now()}
	for _, op := range ops {
		if ctx.Err() != nil {
			break
		}
		changed, err := b.check(ctx, op)
		r.Done++
		switch {
		case err != nil:
			r.Errors++
		case changed:
			r.Changed++
		}
	}
	r.End = time.Now()
	return r
}

// baselineState maps a cluster's or node pool's state as the replaced
// scanner did, for the states the bench's lifecycles go through; any other
// leaves the operation as it is.
func baselineState(st clusterservice.Status, op *database.Operation) (arm.ProvisioningState, *arm.CloudErrorBody) {
	switch st.State {
	case "error", "recoverable_error":
		code := st.ErrorCode
		if code == "" {
			code = arm.CodeInternalServerError
		}
		return arm.ProvisioningStateFailed, &arm.CloudErrorBody{Code: code, Message: st.ErrorMessage}
	case "installing":
		return arm.ProvisioningStateProvisioning, nil
	case "updating":
		return arm.ProvisioningStateUpdating, nil
	case "uninstalling":
		return arm.ProvisioningStateDeleting, nil
	case "ready":
		if op.Request != arm.RequestDelete {
			return arm.ProvisioningStateSucceeded, nil
		}
	}
	return op.Status, op.Error
}
