package database

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
)

// Billing is an item of the Billing container: one life of a cluster, from
// its creation until deletionTime is set. Fields opstatus does not know are
// kept and written back unchanged.
//
// opstatus names its items with BillingID, so that a retried create meets
// its own item; it lists the open items (OpenBilling) before it creates
// one, since ARO-HCP's backend gave its items random ids and only a query
// finds them.
type Billing struct {
	ID string `json:"id"`
	// SubscriptionID is the lowercase subscription ID, as every partition
	// of opstatus's containers is named: the partition key in a container
	// keyed by /subscriptionId.
	SubscriptionID string `json:"subscriptionId"`
	// PartitionKey is the partition key in a container keyed by
	// /partitionKey, as ARO-HCP created Billing in 2024-10: the
	// subscription again (BillingKey.Keyed fills it). Empty in a container
	// keyed by /subscriptionId.
	PartitionKey         string     `json:"partitionKey,omitempty"`
	ResourceID           string     `json:"resourceId"`
	TenantID             string     `json:"tenantId,omitempty"`
	Location             string     `json:"location,omitempty"`
	CreationTime         time.Time  `json:"creationTime,omitzero"`
	ManagedResourceGroup string     `json:"managedResourceGroup,omitempty"`
	DeletionTime         *time.Time `json:"deletionTime,omitempty"`

	// ETag is the item's _etag when it was read; writes send it as If-Match.
	ETag azcore.ETag `json:"-"`
	// Err is set, wrapping ErrMalformed and naming the id, when the item's
	// fields did not decode. Such an item is still listed, so that it counts
	// as open and can be closed: a write sets its deletionTime over the item
	// as read and changes nothing else.
	Err error `json:"-"`

	raw       []byte // the item as read, for the fields opstatus does not know
	malformed bool   // Err was set by UnmarshalJSON
}

// BillingID returns the id of the billing item of one life of a cluster:
// its ARM resource ID, ignoring case, and its Cluster Service id (the same
// in either form of internalId), hashed into a UUID. A create retried after
// a lost answer or a kill lands on the same id and gets ErrConflict, while
// a cluster re-created under the same resource ID has a new Cluster Service
// id and so a new item. The function must never change: items written by
// one version are found by the next.
func BillingID(resourceID, clusterID string) string {
	sum := sha256.Sum256([]byte("opstatus billing\x00" + strings.ToLower(resourceID) + "\x00" + clusterID))
	u := sum[:16]
	u[6] = u[6]&0x0f | 0x80 // version 8, custom (RFC 9562)
	u[8] = u[8]&0x3f | 0x80 // the RFC 9562 variant
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// IsBillingID reports whether id has the form of BillingID's ids, an RFC
// 9562 version 8 UUID in lowercase: whether the item is opstatus's, of a
// life its id names, or another writer's, such as ARO-HCP's backend, which
// named its items with random (version 4) UUIDs.
func IsBillingID(id string) bool {
	if len(id) != 36 || id[14] != '8' || !strings.ContainsRune("89ab", rune(id[19])) {
		return false
	}
	for i, r := range id {
		switch i {
		case 8, 13, 18, 23:
			if r != '-' {
				return false
			}
		default:
			if !('0' <= r && r <= '9' || 'a' <= r && r <= 'f') {
				return false
			}
		}
	}
	return true
}

// Validate reports the first field a new billing item needs and b lacks,
// before anything is sent: an item in a partition that listings never read,
// or without a creation time, would bill wrongly for good.
func (b *Billing) Validate() error {
	switch {
	case b.Err != nil:
		return b.Err
	case CheckID(b.ID) != nil:
		return fmt.Errorf("billing item: %w", CheckID(b.ID))
	case b.SubscriptionID == "" || b.SubscriptionID != strings.ToLower(b.SubscriptionID):
		return fmt.Errorf("billing item %s: subscriptionId %q is not a lowercase subscription ID", b.ID, b.SubscriptionID)
	case b.PartitionKey != "" && b.PartitionKey != b.SubscriptionID:
		return fmt.Errorf("billing item %s: partitionKey %q is not its subscriptionId %q", b.ID, b.PartitionKey, b.SubscriptionID)
	case b.ResourceID == "":
		return fmt.Errorf("billing item %s has no resourceId", b.ID)
	case b.CreationTime.IsZero():
		return fmt.Errorf("billing item %s has no creationTime", b.ID)
	}
	return nil
}

// MarshalJSON writes the known fields over the fields the item was read
// with. An item read as malformed gets its deletionTime set over the item
// as read and nothing else, so that closing it loses nothing.
func (b Billing) MarshalJSON() ([]byte, error) {
	type plain Billing
	if !b.malformed {
		return marshalOver(plain(b), b.raw, "")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b.raw, &fields); err != nil {
		return nil, err
	}
	for k := range fields {
		if strings.HasPrefix(k, "_") {
			delete(fields, k)
		}
	}
	if b.DeletionTime != nil {
		t, err := json.Marshal(b.DeletionTime)
		if err != nil {
			return nil, err
		}
		fields["deletionTime"] = t
	}
	return json.Marshal(fields)
}

// UnmarshalJSON reads the known fields and _etag, and keeps the item's JSON
// for a later write. An item whose id reads but whose other fields do not
// decode is read all the same, with Err set; only an item without a string
// id is an error.
func (b *Billing) UnmarshalJSON(data []byte) error {
	type plain Billing
	var p struct {
		plain
		ETag azcore.ETag `json:"_etag"`
	}
	err := json.Unmarshal(data, &p)
	if err == nil {
		*b = Billing(p.plain)
		b.ETag, b.raw = p.ETag, bytes.Clone(data)
		return nil
	}
	var ids struct {
		ID             any `json:"id"`
		SubscriptionID any `json:"subscriptionId"`
		PartitionKey   any `json:"partitionKey"`
		ResourceID     any `json:"resourceId"`
		ETag           any `json:"_etag"`
	}
	if json.Unmarshal(data, &ids) != nil {
		return fmt.Errorf("billing item: %w", err)
	}
	id, _ := ids.ID.(string)
	if id == "" {
		return fmt.Errorf("billing item without an id: %w", err)
	}
	*b = Billing{ID: id, raw: bytes.Clone(data), malformed: true,
		Err: fmt.Errorf("%w: billing item %s: %w", ErrMalformed, QuoteID(id), err)}
	b.SubscriptionID, _ = ids.SubscriptionID.(string)
	b.PartitionKey, _ = ids.PartitionKey.(string)
	b.ResourceID, _ = ids.ResourceID.(string)
	etag, _ := ids.ETag.(string)
	b.ETag = azcore.ETag(etag)
	return nil
}
