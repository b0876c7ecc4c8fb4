package database

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"

	"github.com/opstatus/opstatus/internal/arm"
)

// Operation is an item of the Operations container, as the frontend writes it.
// Fields opstatus does not know are kept and written back unchanged.
type Operation struct {
	ID                 string                `json:"id"`
	PartitionKey       string                `json:"partitionKey"`
	TenantID           string                `json:"tenantId,omitempty"`
	ClientID           string                `json:"clientId,omitempty"`
	Request            arm.Request           `json:"request"`
	ExternalID         string                `json:"externalId,omitempty"`
	InternalID         string                `json:"internalId,omitempty"`
	OperationID        string                `json:"operationId,omitempty"`
	NotificationURI    string                `json:"notificationUri,omitempty"`
	StartTime          time.Time             `json:"startTime,omitzero"`
	LastTransitionTime time.Time             `json:"lastTransitionTime,omitzero"`
	Status             arm.ProvisioningState `json:"status"`
	Error              *arm.CloudErrorBody   `json:"error,omitempty"`
	TTL                *int                  `json:"ttl,omitempty"`

	// ETag is the item's _etag when it was read; writes send it as If-Match.
	ETag azcore.ETag `json:"-"`
	// Timestamp is the item's _ts when it was read: its last write, to the
	// second.
	Timestamp time.Time `json:"-"`

	raw          []byte // the item as read, for the fields opstatus does not know
	subscription string // told by OperationsPartition.Tell
}

// SubscriptionID returns the subscription the operation belongs to, as
// the DBClient that returned it told it (OperationsPartition): its
// partition key, or in a fixed partition its externalId's subscription.
// The lock, the Resources and Billing items are that subscription's.
func (o *Operation) SubscriptionID() string { return o.subscription }

// MarshalJSON writes the known fields over the fields the item was read with.
// An error opstatus has not changed is written back exactly as read, with
// whatever fields the frontend nested in it.
func (o Operation) MarshalJSON() ([]byte, error) {
	type plain Operation
	keep := ""
	if o.errorAsRead() {
		keep = "error"
	}
	return marshalOver(plain(o), o.raw, keep)
}

// errorAsRead reports whether o.Error still holds what the item was read with.
func (o *Operation) errorAsRead() bool {
	if len(o.raw) == 0 {
		return false
	}
	var read struct {
		Error *arm.CloudErrorBody `json:"error"`
	}
	return json.Unmarshal(o.raw, &read) == nil && reflect.DeepEqual(read.Error, o.Error)
}

// UnmarshalJSON reads the known fields, _etag and _ts, and keeps the item's
// JSON for a later write.
func (o *Operation) UnmarshalJSON(b []byte) error {
	type plain Operation
	var p struct {
		plain
		ETag azcore.ETag `json:"_etag"`
		TS   float64     `json:"_ts"`
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return fmt.Errorf("operation item: %w", err)
	}
	*o = Operation(p.plain)
	o.ETag, o.raw = p.ETag, bytes.Clone(b)
	if p.TS > 0 {
		o.Timestamp = time.Unix(int64(p.TS), 0).UTC()
	}
	return nil
}

// Validate reports an item without the ids opstatus needs to write it; its
// status, request and internalId are judged by opkind.Check.
func (o *Operation) Validate() error {
	switch {
	case o.ID == "":
		return fmt.Errorf("operation item has no id")
	case o.PartitionKey == "":
		return fmt.Errorf("operation %q has no partitionKey", o.ID)
	}
	return nil
}

// Resource is an item of the Resources container: one ARM resource.
type Resource struct {
	ID                string                `json:"id"`
	PartitionKey      string                `json:"partitionKey"`
	Key               string                `json:"key"`
	InternalID        string                `json:"internalId,omitempty"`
	ActiveOperationID string                `json:"activeOperationId,omitempty"`
	ProvisioningState arm.ProvisioningState `json:"provisioningState,omitempty"`
	SystemData        json.RawMessage       `json:"systemData,omitempty"`
	Tags              json.RawMessage       `json:"tags,omitempty"`

	// ETag is the item's _etag when it was read; writes send it as If-Match.
	ETag azcore.ETag `json:"-"`

	raw []byte // the item as read, for the fields opstatus does not know
}

// MarshalJSON writes the known fields over the fields the item was read with.
func (r Resource) MarshalJSON() ([]byte, error) {
	type plain Resource
	return marshalOver(plain(r), r.raw, "")
}

// UnmarshalJSON reads the known fields and _etag, and keeps the item's JSON
// for a later write.
func (r *Resource) UnmarshalJSON(b []byte) error {
	type plain Resource
	var p struct {
		plain
		ETag azcore.ETag `json:"_etag"`
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return fmt.Errorf("resource item: %w", err)
	}
	*r = Resource(p.plain)
	r.ETag, r.raw = p.ETag, bytes.Clone(b)
	return nil
}

// Ref returns what deleting r needs.
func (r *Resource) Ref() ResourceRef {
	return ResourceRef{ID: r.ID, PartitionKey: r.PartitionKey, Key: r.Key, ETag: r.ETag}
}

// ResourceRef names a Resources item by what deleting it needs, and no more:
// an item whose other fields are ill-typed can still be listed and deleted.
type ResourceRef struct {
	ID           string      `json:"id"`
	PartitionKey string      `json:"-"`
	Key          string      `json:"key"`
	ETag         azcore.ETag `json:"_etag"`
}

// ResourceHead is what ResourceHeads reads of a Resources item: what
// deleting it needs, and its activeOperationId as far as that reads, so
// that an item whose other fields are ill-typed can still be judged.
type ResourceHead struct {
	ResourceRef
	// ActiveOperationID is the item's activeOperationId; empty when it is
	// missing, null or not a string.
	ActiveOperationID string
	// OwnerUnreadable reports an activeOperationId that is there but not a
	// string: neither opstatus nor the frontend can tell whose it is.
	OwnerUnreadable bool
}

// ReadResourceHead decodes the head of a Resources item of subscriptionID,
// whole or projected to id, key, _etag and activeOperationId, whatever its
// other fields hold; ErrMalformed when it lacks an id or an etag.
func ReadResourceHead(raw []byte, subscriptionID string) (ResourceHead, error) {
	var v struct {
		ResourceRef
		ActiveOperationID any `json:"activeOperationId"`
	}
	if err := json.Unmarshal(raw, &v); err != nil || v.ID == "" || v.ETag == "" {
		return ResourceHead{}, fmt.Errorf("%w: resource %.200s", ErrMalformed, raw)
	}
	h := ResourceHead{ResourceRef: v.ResourceRef}
	h.PartitionKey = strings.ToLower(subscriptionID)
	switch a := v.ActiveOperationID.(type) {
	case string:
		h.ActiveOperationID = a
	case nil:
	default:
		h.OwnerUnreadable = true
	}
	return h, nil
}

// Lock is an item of the Locks container: one subscription's lock.
type Lock struct {
	ID    string `json:"id"`
	Owner string `json:"owner"`
	TTL   int    `json:"ttl,omitempty"`
}

// PendingOperation is what scan needs of an operation to enqueue it, to
// tell whether poll can act on it, and to count it: Status, Request,
// StartTime, InternalID and ExternalID, as the item has them, or zero when
// it has none or they do not decode. They never keep an operation from
// being listed.
type PendingOperation struct {
	ID           string `json:"id"`
	PartitionKey string `json:"partitionKey"`
	// SubscriptionID is the operation's subscription, as
	// OperationsPartition.ReadPending tells it: what a queue message names.
	SubscriptionID string    `json:"-"`
	Status         string    `json:"-"`
	Request        string    `json:"-"`
	StartTime      time.Time `json:"-"`
	InternalID     string    `json:"-"`
	ExternalID     string    `json:"-"`
	// LastWrite is the item's _ts, its last write to the second, by which
	// scan tells an operation the pickup function has just checked; zero
	// when the item has none.
	LastWrite time.Time `json:"-"`
}

// ReadDetails sets Status, Request, StartTime, InternalID, ExternalID and
// LastWrite from the item raw, each left zero when it is missing or
// ill-typed.
func (p *PendingOperation) ReadDetails(raw []byte) {
	var v struct {
		Status     any `json:"status"`
		Request    any `json:"request"`
		StartTime  any `json:"startTime"`
		InternalID any `json:"internalId"`
		ExternalID any `json:"externalId"`
		TS         any `json:"_ts"`
	}
	_ = json.Unmarshal(raw, &v) // the ids were read from raw: it is JSON
	p.Status, _ = v.Status.(string)
	p.Request, _ = v.Request.(string)
	p.InternalID, _ = v.InternalID.(string)
	p.ExternalID, _ = v.ExternalID.(string)
	p.StartTime = time.Time{}
	if s, ok := v.StartTime.(string); ok {
		p.StartTime, _ = time.Parse(time.RFC3339Nano, s)
	}
	p.LastWrite = time.Time{}
	if ts, ok := v.TS.(float64); ok && ts > 0 && ts < maxTS {
		p.LastWrite = time.Unix(int64(ts), 0).UTC()
	}
}

// maxTS bounds the _ts taken as a time: the year 9999, past which a Unix
// time in seconds is no date Cosmos DB writes.
const maxTS = 253402300800

// marshalOver marshals v, a struct, over raw, the item it was read as: the
// fields the frontend wrote and opstatus does not declare survive a replace,
// and so does the declared field keep, as raw has it. Cosmos system fields
// (_rid, _ts, ...) are dropped: the server owns them. Unknown fields are
// decoded here, at a write, not at every read.
func marshalOver(v any, raw []byte, keep string) ([]byte, error) {
	known, err := json.Marshal(v)
	if err != nil || len(raw) == 0 {
		return known, err
	}
	var merged map[string]json.RawMessage
	if err := json.Unmarshal(raw, &merged); err != nil {
		return nil, err
	}
	declared := jsonNames(reflect.TypeOf(v))
	for k := range merged {
		if k != keep && (declared[k] || strings.HasPrefix(k, "_")) {
			delete(merged, k)
		}
	}
	if len(merged) == 0 {
		return known, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(known, &fields); err != nil {
		return nil, err
	}
	for k, val := range fields {
		if k != keep {
			merged[k] = val
		}
	}
	return json.Marshal(merged)
}

var jsonNamesCache sync.Map // reflect.Type -> map[string]bool
// jsonNames returns the JSON field names a struct type declares.
func jsonNames(t reflect.Type) map[string]bool {
	if names, ok := jsonNamesCache.Load(t); ok {
		return names.(map[string]bool)
	}
	names := map[string]bool{}
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "-" && name != "" {
			names[name] = true
		}
	}
	jsonNamesCache.Store(t, names)
	return names
}
