package poll

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/opstatus/opstatus/internal/database"
)

// bill makes the billing write a decision needs before the operation's: a
// cluster Create that succeeded has its open billing item; a finished
// cluster Delete closes it. The caller holds the subscription lock, and a
// failure leaves the operation pending for the next scan.
//
// A billing item is one life of a cluster: opstatus names it by the
// cluster's resource ID and Cluster Service id (database.BillingID), so a
// create whose answer was lost, or whose process was killed before the
// operation's write, meets a 409 when it runs again, and a cluster
// re-created under the same resource ID, with a new Cluster Service id,
// has an item of its own that no retry of the earlier life's Delete
// touches. Items of other writers (ARO-HCP's backend before a handover to
// opstatus) have ids that name no life: see lives.
func (f *Function) bill(ctx context.Context, log *slog.Logger, op *database.Operation, c *change, step billingStep) error {
	switch step {
	case billingOpen:
		return f.openBilling(ctx, log, op, c)
	case billingClose:
		return f.closeBilling(ctx, log, op, c)
	}
	return nil
}

// lives sorts the open billing items of a cluster's resource ID: mine, the
// item of the life whose Cluster Service id is clusterID; other, opstatus's
// items of other lives; foreign, the items of other writers. A foreign
// item is of a life that began before opstatus took over from ARO-HCP's
// backend, so of the life being polled or an earlier one: only its
// creationTime can tell which.
func lives(open []*database.Billing, resourceID, clusterID string) (mine *database.Billing, other, foreign []*database.Billing) {
	id := database.BillingID(resourceID, clusterID)
	for _, b := range open {
		switch {
		case b.ID == id:
			mine = b
		case database.IsBillingID(b.ID):
			other = append(other, b)
		default:
			foreign = append(foreign, b)
		}
	}
	return mine, other, foreign
}

// openBilling makes sure the cluster of a Create that succeeded has its
// open billing item, and that it is the resource ID's only one: the open
// items of earlier lives, never closed (their Delete never finished in
// opstatus), are closed first, with this cluster's creation as their end,
// and this life's item is created after, so that a kill between the
// writes leaves no item open rather than two, and the next poll, which
// reads the items again, finds the earlier ones closed. An open foreign
// item is this life's, adopted, only when its creationTime is this
// cluster's creation_timestamp to the second (the backend wrote it before
// the handover, from the same object); any other is an earlier life's,
// however alone, which a cluster deleted without its item closed and
// re-created under the same name leaves.
func (f *Function) openBilling(ctx context.Context, log *slog.Logger, op *database.Operation, c *change) error {
	if c.cluster == nil {
		return errors.New("billing: the cluster object was not read")
	}
	// The lowercase subscription of the cluster's externalId.
	sub := op.SubscriptionID()
	created := c.cluster.CreationTimestamp
	var written bool // this life's item exists, or was adopted
	_, err := reread(func(int) (struct{}, error) {
		open, err := f.DB.OpenBilling(ctx, sub, op.ExternalID)
		if err != nil {
			return struct{}{}, fmt.Errorf("billing: %w", err)
		}
		mine, earlier, foreign := lives(open, op.ExternalID, c.id.ClusterID)
		var adopted []*database.Billing
		if mine == nil {
			for _, b := range foreign {
				if b.Err == nil && b.CreationTime.Truncate(time.Second).Equal(created.Truncate(time.Second)) {
					adopted = append(adopted, b)
				} else {
					earlier = append(earlier, b)
				}
			}
		} else {
			earlier = append(earlier, foreign...)
		}
		written = mine != nil || len(adopted) > 0
		if len(adopted) > 1 {
			log.Error("the cluster has more than one open billing item of another writer for its creation; left for a person", "billing_ids", billingIDs(adopted))
		}
		if len(earlier) > 0 {
			log.Warn("open billing items of an earlier life of the cluster are closed at this one's creation", "billing_ids", billingIDs(earlier))
		}
		return struct{}{}, f.closeItems(ctx, log, earlier, created)
	})
	if err != nil || written {
		return err
	}
	b := &database.Billing{
		ID:                   database.BillingID(op.ExternalID, c.id.ClusterID),
		SubscriptionID:       sub,
		ResourceID:           op.ExternalID,
		TenantID:             op.TenantID,
		Location:             f.Location,
		CreationTime:         c.cluster.CreationTimestamp,
		ManagedResourceGroup: "/subscriptions/" + sub + "/resourceGroups/" + c.cluster.ManagedResourceGroupName,
	}
	_, err = f.DB.CreateBilling(ctx, b)
	switch {
	case errors.Is(err, database.ErrConflict):
		log.Info("billing item already written", "billing_id", b.ID)
	case err != nil:
		return fmt.Errorf("billing: %w", err)
	default:
		log.Info("billing item written for the created cluster", "billing_id", b.ID)
	}
	return nil
}

// closeBilling sets the deletionTime of the open billing item of the
// cluster a Delete deleted, the life of the operation's Cluster Service
// id, and of open foreign items, which are of that life or an earlier one;
// none for a cluster that never became billable. The item of a cluster
// re-created under the same resource ID is another life's and is kept.
func (f *Function) closeBilling(ctx context.Context, log *slog.Logger, op *database.Operation, c *change) error {
	_, err := reread(func(int) (struct{}, error) {
		open, err := f.DB.OpenBilling(ctx, op.SubscriptionID(), op.ExternalID)
		if err != nil {
			return struct{}{}, fmt.Errorf("billing: %w", err)
		}
		mine, other, closing := lives(open, op.ExternalID, c.id.ClusterID)
		if mine != nil {
			closing = append(closing, mine)
		}
		if len(other) > 0 {
			log.Info("open billing item of another life of the cluster kept", "billing_ids", billingIDs(other))
		}
		if len(closing) == 0 {
			log.Info("no open billing item for the deleted cluster")
			return struct{}{}, nil
		}
		if err := f.closeItems(ctx, log, closing, f.now()); err != nil {
			return struct{}{}, err
		}
		log.Info("billing item closed for the deleted cluster", "billing_ids", billingIDs(closing))
		return struct{}{}, nil
	})
	return err
}

// closeItems sets the deletionTime of open billing items: at, or now for
// an item created at or after at.
func (f *Function) closeItems(ctx context.Context, log *slog.Logger, items []*database.Billing, at time.Time) error {
	for _, b := range items {
		if b.Err != nil {
			log.Error("billing item unreadable; its deletionTime is set all the same", "billing_id", b.ID, "error", b.Err)
		}
		end := at
		if b.Err == nil && !end.After(b.CreationTime) {
			end = f.now()
		}
		b.DeletionTime = &end
		if _, err := f.DB.ReplaceBilling(ctx, b); err != nil {
			return err
		}
	}
	return nil
}

func billingIDs(items []*database.Billing) []string {
	ids := make([]string, len(items))
	for i, b := range items {
		ids[i] = b.ID
	}
	return ids
}
