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

// CreateBilling creates b, with its subscription at the Billing
// container's partition key path; ErrConflict when an item with its id
// exists.
func (c *CosmosClient) CreateBilling(ctx context.Context, b *Billing) (*Billing, error) {
	if err := b.Validate(); err != nil {
		return nil, fmt.Errorf("create billing item: %w", err)
	}
	key, err := c.billingKey.get(ctx, c.billing)
	if err != nil {
		return nil, fmt.Errorf("create billing item %s: %w", b.ID, err)
	}
	body, err := json.Marshal(key.Keyed(b))
	if err != nil {
		return nil, fmt.Errorf("create billing item %s: %w", b.ID, err)
	}
	resp, err := c.billing.CreateItem(ctx, azcosmos.NewPartitionKeyString(key.Partition(b)), body,
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

// ReplaceBilling replaces b with If-Match on b.ETag, in the partition its
// value at the container's partition key path names.
func (c *CosmosClient) ReplaceBilling(ctx context.Context, b *Billing) (*Billing, error) {
	key, err := c.billingKey.get(ctx, c.billing)
	if err != nil {
		return nil, fmt.Errorf("replace billing item %s: %w", b.ID, err)
	}
	b = key.Keyed(b)
	out := &Billing{}
	if err := replaceIn(ctx, c.billing, azcosmos.NewPartitionKeyString(key.Partition(b)), b.ID, b, b.ETag, out); err != nil {
		return nil, fmt.Errorf("replace billing item %s: %w", b.ID, err)
	}
	return out, nil
}
