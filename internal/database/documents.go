package database

import (
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

	extra map[string]json.RawMessage
}

// SubscriptionID returns the subscription the operation belongs to.
func (o *Operation) SubscriptionID() string { return o.PartitionKey }

// MarshalJSON writes the known fields over the fields the item was read with.
func (o Operation) MarshalJSON() ([]byte, error) {
	type plain Operation
	return marshalWithExtra(plain(o), o.extra)
}

// UnmarshalJSON reads the known fields and keeps the others.
func (o *Operation) UnmarshalJSON(b []byte) error {
	type plain Operation
	var p plain
	extra, etag, err := unmarshalWithExtra(b, &p)
	if err != nil {
		return fmt.Errorf("operation item: %w", err)
	}
	*o = Operation(p)
	o.extra, o.ETag = extra, etag
	return nil
}

// Validate reports the first field that opstatus needs and the item lacks.
func (o *Operation) Validate() error {
	switch {
	case o.ID == "":
		return fmt.Errorf("operation item has no id")
	case o.PartitionKey == "":
		return fmt.Errorf("operation %q has no partitionKey", o.ID)
	case !o.Request.IsKnown():
		return fmt.Errorf("operation %q has unknown request %q", o.ID, o.Request)
	case !o.Status.IsKnown():
		return fmt.Errorf("operation %q has unknown status %q", o.ID, o.Status)
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

	extra map[string]json.RawMessage
}

// MarshalJSON writes the known fields over the fields the item was read with.
func (r Resource) MarshalJSON() ([]byte, error) {
	type plain Resource
	return marshalWithExtra(plain(r), r.extra)
}

// UnmarshalJSON reads the known fields and keeps the others.
func (r *Resource) UnmarshalJSON(b []byte) error {
	type plain Resource
	var p plain
	extra, etag, err := unmarshalWithExtra(b, &p)
	if err != nil {
		return fmt.Errorf("resource item: %w", err)
	}
	*r = Resource(p)
	r.extra, r.ETag = extra, etag
	return nil
}

// IsChildOf reports whether r is a child resource (such as a node pool) of the
// resource whose key is parentKey. Keys compare case-insensitively, as ARM IDs do.
func (r *Resource) IsChildOf(parentKey string) bool {
	prefix := parentKey + "/"
	return len(r.Key) > len(prefix) && strings.EqualFold(r.Key[:len(prefix)], prefix)
}

// Lock is an item of the Locks container: one subscription's lock.
type Lock struct {
	ID    string `json:"id"`
	Owner string `json:"owner"`
	TTL   int    `json:"ttl,omitempty"`
}

// PendingOperation is what scan needs of an operation to enqueue it.
type PendingOperation struct {
	ID           string `json:"id"`
	PartitionKey string `json:"partitionKey"`
}

// marshalWithExtra marshals v and lays its fields over extra, so that fields
// the frontend wrote and opstatus does not know survive a replace.
func marshalWithExtra(v any, extra map[string]json.RawMessage) ([]byte, error) {
	known, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	if len(extra) == 0 {
		return known, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(known, &fields); err != nil {
		return nil, err
	}
	merged := make(map[string]json.RawMessage, len(extra)+len(fields))
	for k, val := range extra {
		merged[k] = val
	}
	for k, val := range fields {
		merged[k] = val
	}
	return json.Marshal(merged)
}

// unmarshalWithExtra decodes b into v and returns _etag and the fields v
// does not declare. Cosmos system fields (_rid, _ts, ...) are dropped: the
// server owns them.
func unmarshalWithExtra(b []byte, v any) (map[string]json.RawMessage, azcore.ETag, error) {
	if err := json.Unmarshal(b, v); err != nil {
		return nil, "", err
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(b, &all); err != nil {
		return nil, "", err
	}
	var etag azcore.ETag
	if raw, ok := all["_etag"]; ok {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			etag = azcore.ETag(s)
		}
	}
	declared := jsonNames(reflect.TypeOf(v).Elem())
	for k := range all {
		if declared[k] || strings.HasPrefix(k, "_") {
			delete(all, k)
		}
	}
	return all, etag, nil
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
