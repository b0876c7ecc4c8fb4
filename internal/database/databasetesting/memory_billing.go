package databasetesting

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/opstatus/opstatus/internal/database"
)

// memBilling is the Billing container, whose partition key is the item's
// field at MemoryClient.BillingKey. Its zero value is an empty container.
type memBilling struct {
	items   map[itemKey]memItem
	missing bool // RemoveBillingContainer was called
}

// errNoBillingContainer is what CosmosClient makes of Cosmos DB's 404 for a
// container that does not exist.
var errNoBillingContainer = fmt.Errorf("%w: the Billing container does not exist", database.ErrContainerNotFound)

// billingKey is the Billing container's partition key path.
func (m *MemoryClient) billingKey() database.BillingKey {
	if m.BillingKey == "" {
		return database.BillingBySubscriptionID
	}
	return m.BillingKey
}

// billingItems returns the container's items, made on first use. The
// caller holds m.mu.
func (m *MemoryClient) billingItems() map[itemKey]memItem {
	if m.billing.items == nil {
		m.billing.items = map[itemKey]memItem{}
	}
	return m.billing.items
}

// billingContainer returns the container's items for a call, or the error
// Cosmos DB answers when it is missing. The caller holds m.mu.
func (m *MemoryClient) billingContainer() (map[itemKey]memItem, error) {
	if m.billing.missing {
		return nil, errNoBillingContainer
	}
	return m.billingItems(), nil
}

// PutRawBilling stores body, any JSON object with a string id, as a
// billing item in the partition its field at BillingKey names, with no
// etag check: for items ARO-HCP's backend wrote and ill-typed ones. It
// panics when body is not such an object.
func (m *MemoryClient) PutRawBilling(body []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := keyOf(body, m.billingKey().Field())
	body, etag, err := m.stamp(body, time.Now())
	if err != nil {
		panic(fmt.Sprintf("databasetesting: %v", err))
	}
	m.billingItems()[k] = memItem{body: body, etag: etag}
}

// RawBilling returns the billing item id of subscriptionID as stored, or
// nil when there is none.
func (m *MemoryClient) RawBilling(subscriptionID, id string) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.billing.items[lookup(subscriptionID, id)].body)
}

// BillingItems returns every billing item, open or not, sorted by
// resourceId and id, for assertions; one that does not decode has Err set.
func (m *MemoryClient) BillingItems() []*database.Billing {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*database.Billing
	for _, it := range m.billing.items {
		b := &database.Billing{}
		if b.UnmarshalJSON(it.body) == nil {
			out = append(out, b)
		}
	}
	slices.SortFunc(out, func(a, b *database.Billing) int {
		if c := strings.Compare(a.ResourceID, b.ResourceID); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out
}

// RemoveBillingContainer makes the Billing container missing, as in an
// account where it was never created: every billing call then fails as
// CosmosClient's does, with ErrContainerNotFound.
func (m *MemoryClient) RemoveBillingContainer() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.billing = memBilling{missing: true}
}

// CreateBilling creates b; ErrConflict when an item with its id exists in
// its partition.
func (m *MemoryClient) CreateBilling(ctx context.Context, b *database.Billing) (*database.Billing, error) {
	if err := m.hook(OpCreateBilling); err != nil {
		return nil, fmt.Errorf("create billing item %s: %w", b.ID, err)
	}
	// The Cosmos client refuses this before it sends a request.
	if err := b.Validate(); err != nil {
		return nil, fmt.Errorf("create billing item: %w", err)
	}
	if err := ctxErr(ctx); err != nil {
		return nil, fmt.Errorf("create billing item %s: %w", b.ID, err)
	}
	key := m.billingKey()
	body, err := json.Marshal(key.Keyed(b))
	if err != nil {
		return nil, fmt.Errorf("create billing item %s: %w", b.ID, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	items, err := m.billingContainer()
	if err != nil {
		return nil, fmt.Errorf("create billing item %s: %w", b.ID, err)
	}
	k := itemKey{partition: key.Partition(b), id: b.ID}
	if err := refusal("Billing", body, key.Field(), k); err != nil {
		return nil, fmt.Errorf("create billing item %s: %w", b.ID, err)
	}
	if _, ok := items[k]; ok {
		return nil, fmt.Errorf("create billing item %s: %w", b.ID, database.ErrConflict)
	}
	body, etag, err := m.stamp(body, time.Now())
	if err != nil {
		return nil, fmt.Errorf("create billing item %s: %w", b.ID, err)
	}
	items[k] = memItem{body: body, etag: etag}
	out := &database.Billing{}
	if err := out.UnmarshalJSON(body); err != nil {
		return nil, fmt.Errorf("create billing item %s: decode written item: %w", b.ID, err)
	}
	return out, nil
}

// OpenBilling filters the subscription's partition as the Cosmos query
// does:
//
//	STRINGEQUALS(c.resourceId, @resourceId, true) AND NOT IS_DEFINED(c.deletionTime)
//
// A resourceId that is not a string makes STRINGEQUALS undefined, so the
// item is not listed; a deletionTime of any value, null included, is
// defined.
func (m *MemoryClient) OpenBilling(ctx context.Context, subscriptionID, resourceID string) ([]*database.Billing, error) {
	if err := m.begin(ctx, OpOpenBilling); err != nil {
		return nil, fmt.Errorf("list open billing items of %s: %w", resourceID, err)
	}
	partition := strings.ToLower(subscriptionID)
	m.mu.Lock()
	items, err := m.billingContainer()
	if err != nil {
		m.mu.Unlock()
		return nil, fmt.Errorf("list open billing items of %s: %w", resourceID, err)
	}
	var bodies [][]byte
	for k, it := range items {
		if k.partition == partition && openBilling(it.body, resourceID) {
			bodies = append(bodies, it.body)
		}
	}
	m.mu.Unlock()
	var found []*database.Billing
	for _, body := range bodies {
		b := &database.Billing{}
		if err := b.UnmarshalJSON(body); err != nil {
			return nil, fmt.Errorf("list open billing items of %s: %w: %w", resourceID, database.ErrMalformed, err)
		}
		found = append(found, b)
	}
	slices.SortFunc(found, func(a, b *database.Billing) int { return strings.Compare(a.ID, b.ID) })
	return found, nil
}

// openBilling is the filter of the Cosmos query.
func openBilling(body []byte, resourceID string) bool {
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) != nil {
		return false
	}
	if _, ok := fields["deletionTime"]; ok {
		return false
	}
	raw := fields["resourceId"]
	var id string
	return len(raw) > 0 && raw[0] == '"' && json.Unmarshal(raw, &id) == nil && strings.EqualFold(id, resourceID)
}

// ReplaceBilling replaces b if its item still has b.ETag, as replace does
// for the other containers.
func (m *MemoryClient) ReplaceBilling(ctx context.Context, b *database.Billing) (*database.Billing, error) {
	key := m.billingKey()
	b = key.Keyed(b)
	out := &database.Billing{}
	if err := m.replaceAt(ctx, OpReplaceBilling, m.billingContainer, key.Field(),
		itemKey{partition: key.Partition(b), id: b.ID}, b, b.ETag, out); err != nil {
		return nil, fmt.Errorf("replace billing item %s: %w", b.ID, err)
	}
	return out, nil
}
