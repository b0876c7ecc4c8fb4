package poll

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/opstatus/opstatus/internal/database"
)

// bill makes the billing write a decision needs before the operation's: a
// cluster Create that succeeded has its open billing item; a finished
// cluster Delete closes it. The caller holds the subscription lock, and a
// failure leaves the operation pending for the next scan.
//
// A cluster never gets a second open item, however often this runs: the
// open items are read first, which also finds one written with another id
// (ARO-HCP's backend before a handover to opstatus), and the item is
// created under an id of this cluster's life (database.BillingID), so a
// create whose answer was lost, or whose process was killed before the
// operation's write, meets a 409 when it runs again.
func (f *Function) bill(ctx context.Context, log *slog.Logger, op *database.Operation, c *change, step billingStep) error {
	switch step {
	case billingOpen:
		return f.openBilling(ctx, log, op, c)
	case billingClose:
		return f.closeBilling(ctx, log, op)
	}
	return nil
}

// openBilling makes sure the cluster of a Create that succeeded has its
// open billing item.
func (f *Function) openBilling(ctx context.Context, log *slog.Logger, op *database.Operation, c *change) error {
	if c.cluster == nil {
		return errors.New("billing: the cluster object was not read")
	}
	// The lowercase subscription of the cluster's externalId.
	sub := op.SubscriptionID()
	open, err := f.DB.OpenBilling(ctx, sub, op.ExternalID)
	if err != nil {
		return fmt.Errorf("billing: %w", err)
	}
	if len(open) > 0 {
		if len(open) > 1 {
			log.Error("the cluster has more than one open billing item; left for a person", "billing_ids", billingIDs(open))
		}
		return nil
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

// closeBilling sets the deletionTime of the open billing items of a
// deleted cluster: one, or none for a cluster that never became billable.
func (f *Function) closeBilling(ctx context.Context, log *slog.Logger, op *database.Operation) error {
	_, err := reread(func(int) (struct{}, error) {
		open, err := f.DB.OpenBilling(ctx, op.SubscriptionID(), op.ExternalID)
		if err != nil {
			return struct{}{}, fmt.Errorf("billing: %w", err)
		}
		if len(open) == 0 {
			log.Info("no open billing item for the deleted cluster")
			return struct{}{}, nil
		}
		now := f.now()
		for _, b := range open {
			if b.Err != nil {
				log.Error("billing item unreadable; its deletionTime is set all the same", "billing_id", b.ID, "error", b.Err)
			}
			b.DeletionTime = &now
			if _, err := f.DB.ReplaceBilling(ctx, b); err != nil {
				return struct{}{}, err
			}
		}
		log.Info("billing item closed for the deleted cluster", "billing_ids", billingIDs(open))
		return struct{}{}, nil
	})
	return err
}

func billingIDs(items []*database.Billing) []string {
	ids := make([]string, len(items))
	for i, b := range items {
		ids[i] = b.ID
	}
	return ids
}
