package database

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
)

// openBillingQuery is the filter ARO-HCP's backend lists a cluster's open
// billing items with, so that both agree on which items are open.
const openBillingQuery = "SELECT * FROM c WHERE STRINGEQUALS(c.resourceId, @resourceId, true) AND NOT IS_DEFINED(c.deletionTime)"

// CreateBilling creates b; ErrConflict when an item with its id exists.
func (c *CosmosClient) CreateBilling(ctx context.Context, b *Billing) (*Billing, error) {
	if err := b.Validate(); err != nil {
		return nil, fmt.Errorf("create billing item: %w", err)
	}
	body, err := json.Marshal(b)
	if err != nil {
		return nil, fmt.Errorf("create billing item %s: %w", b.ID, err)
	}
	resp, err := c.billing.CreateItem(ctx, pk(b.SubscriptionID), body,
		&azcosmos.ItemOptions{EnableContentResponseOnWrite: true})
	if err != nil {
		return nil, fmt.Errorf("create billing item %s: %w", b.ID, classify(err))
	}
	out := &Billing{}
	if err := out.UnmarshalJSON(resp.Value); err != nil {
		return nil, fmt.Errorf("create billing item %s: decode written item: %w", b.ID, err)
	}
	return out, nil
}

// OpenBilling queries the subscription's partition for the open billing
// items of resourceID.
func (c *CosmosClient) OpenBilling(ctx context.Context, subscriptionID, resourceID string) ([]*Billing, error) {
	pager := c.billing.NewQueryItemsPager(openBillingQuery, pk(subscriptionID), &azcosmos.QueryOptions{
		QueryParameters: []azcosmos.QueryParameter{{Name: "@resourceId", Value: resourceID}},
	})
	var found []*Billing
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("list open billing items of %s: %w", resourceID, classify(err))
		}
		for _, raw := range page.Items {
			b := &Billing{}
			if err := b.UnmarshalJSON(raw); err != nil {
				return nil, fmt.Errorf("list open billing items of %s: %w: %w", resourceID, ErrMalformed, err)
			}
			found = append(found, b)
		}
	}
	return found, nil
}

// ReplaceBilling replaces b with If-Match on b.ETag.
func (c *CosmosClient) ReplaceBilling(ctx context.Context, b *Billing) (*Billing, error) {
	out := &Billing{}
	if err := replace(ctx, c.billing, b.SubscriptionID, b.ID, b, b.ETag, out); err != nil {
		return nil, fmt.Errorf("replace billing item %s: %w", b.ID, err)
	}
	return out, nil
}
