// Package frontend writes Cosmos DB items the way the ARO-HCP frontend does:
// operations, resources and subscription locks, and billing items as
// ARO-HCP's backend wrote them. Tests, the demo and the benchmarks use it to
// give opstatus something to do and to read what it wrote. It never ships.
package frontend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/opstatus/opstatus/internal/testenv"
)

// Containers of the contract, with the settings production has.
var (
	OperationsContainer = "Operations"
	ResourcesContainer  = "Resources"
	LocksContainer      = "Locks"
	BillingContainer    = "Billing"
	// LeasesContainer is the lease container of pickup's change-feed
	// trigger; the trigger requires the partition key path /id.
	LeasesContainer = "Leases"
)

// Frontend is a client of one database.
type Frontend struct {
	// OperationsPartition, when set, is the one partition every Operations
	// item is written in and read from, whatever its subscription, as
	// ARO-HCP's frontend did (2024-10) with "workaround"; when empty, each
	// is in its subscription's. It is taken as it is, not lowercased.
	OperationsPartition string
	// Shape is how Request writes, and how the lock items look:
	// ShapeCurrent (the default) or Shape2024_10.
	Shape Shape
	// Location is the region in the operationId of a 2024-10 request;
	// default eastus.
	Location string

	db         *azcosmos.DatabaseClient
	operations *azcosmos.ContainerClient
	resources  *azcosmos.ContainerClient
	locks      *azcosmos.ContainerClient
	billing    *azcosmos.ContainerClient

	mu          sync.Mutex
	billingPath string // the Billing container's partition key path, once read
	locksTTL    int32  // the Locks container's DefaultTimeToLive, once read
}

// New connects to database at endpoint (self-signed certificates accepted:
// test servers only).
func New(endpoint, key, database string) (*Frontend, error) {
	client, err := testenv.NewCosmosClient(endpoint, key)
	if err != nil {
		return nil, err
	}
	db, err := client.NewDatabase(database)
	if err != nil {
		return nil, err
	}
	f := &Frontend{db: db}
	for name, c := range map[string]**azcosmos.ContainerClient{
		OperationsContainer: &f.operations, ResourcesContainer: &f.resources, LocksContainer: &f.locks,
		BillingContainer: &f.billing,
	} {
		if *c, err = db.NewContainer(name); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// CreateSchema creates the database's containers in today's layout; the
// Locks container expires items after lockTTL.
func CreateSchema(ctx context.Context, endpoint, key, database string, lockTTL time.Duration) error {
	return CreateLayout(ctx, endpoint, key, database, testenv.LayoutCurrent, lockTTL)
}

// Operation is an operation item as the frontend writes it. Extra holds
// fields opstatus does not know, which it must preserve.
type Operation struct {
	ID                 string         `json:"id"`
	PartitionKey       string         `json:"partitionKey"`
	TenantID           string         `json:"tenantId,omitempty"`
	ClientID           string         `json:"clientId,omitempty"`
	Request            string         `json:"request"`
	ExternalID         string         `json:"externalId"`
	InternalID         string         `json:"internalId"`
	OperationID        string         `json:"operationId,omitempty"`
	NotificationURI    string         `json:"notificationUri,omitempty"`
	StartTime          time.Time      `json:"startTime"`
	LastTransitionTime time.Time      `json:"lastTransitionTime"`
	Status             string         `json:"status"`
	Error              map[string]any `json:"error,omitempty"`
	Extra              map[string]any `json:"-"`
}

// Resource is a resource item as the frontend writes it.
type Resource struct {
	ID                string            `json:"id"`
	PartitionKey      string            `json:"partitionKey"`
	Key               string            `json:"key"`
	InternalID        string            `json:"internalId"`
	ActiveOperationID string            `json:"activeOperationId,omitempty"`
	ProvisioningState string            `json:"provisioningState"`
	Tags              map[string]string `json:"tags,omitempty"`
	Extra             map[string]any    `json:"-"`
}

func withExtra(v any, extra map[string]any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil || len(extra) == 0 {
		return b, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	for k, val := range extra {
		m[k] = val
	}
	return json.Marshal(m)
}

// PutOperation upserts an operation item, in the partition of its
// subscription (PartitionKey, lowercased) or in OperationsPartition.
func (f *Frontend) PutOperation(ctx context.Context, op Operation) error {
	op.PartitionKey = f.operationsPartition(op.PartitionKey)
	body, err := withExtra(op, op.Extra)
	if err != nil {
		return err
	}
	_, err = f.operations.UpsertItem(ctx, azcosmos.NewPartitionKeyString(op.PartitionKey), body, nil)
	return err
}

// PutRawOperation upserts any JSON as an operation item (malformed ones too).
func (f *Frontend) PutRawOperation(ctx context.Context, partition string, body []byte) error {
	_, err := f.operations.UpsertItem(ctx, azcosmos.NewPartitionKeyString(partition), body, nil)
	return err
}

// PutResource upserts a resource item.
func (f *Frontend) PutResource(ctx context.Context, r Resource) error {
	r.PartitionKey = strings.ToLower(r.PartitionKey)
	body, err := withExtra(r, r.Extra)
	if err != nil {
		return err
	}
	_, err = f.resources.UpsertItem(ctx, azcosmos.NewPartitionKeyString(r.PartitionKey), body, nil)
	return err
}

// Operation reads an operation item of subscriptionID (in its partition, or
// in OperationsPartition) as a generic map, or nil if missing.
func (f *Frontend) Operation(ctx context.Context, subscriptionID, id string) (map[string]any, error) {
	return read(ctx, f.operations, f.operationsPartition(subscriptionID), id)
}

// operationsPartition is the partition of subscriptionID's operations:
// OperationsPartition, else the 2024-10 frontend's fixed one, else the
// subscription's.
func (f *Frontend) operationsPartition(subscriptionID string) string {
	switch {
	case f.OperationsPartition != "":
		return f.OperationsPartition
	case f.Shape == Shape2024_10:
		return FixedOperationsPartition
	}
	return strings.ToLower(subscriptionID)
}

// Resource reads a resource item by id as a generic map, or nil if missing.
func (f *Frontend) Resource(ctx context.Context, subscriptionID, id string) (map[string]any, error) {
	return read(ctx, f.resources, strings.ToLower(subscriptionID), id)
}

func read(ctx context.Context, c *azcosmos.ContainerClient, partition, id string) (map[string]any, error) {
	resp, err := c.ReadItem(ctx, azcosmos.NewPartitionKeyString(partition), id, nil)
	if testenv.StatusOf(err) == http.StatusNotFound {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var m map[string]any
	return m, json.Unmarshal(resp.Value, &m)
}

// Billing is a billing item as ARO-HCP's backend wrote it when a cluster
// was created, for clusters that existed before opstatus wrote them.
type Billing struct {
	ID                   string         `json:"id"`
	SubscriptionID       string         `json:"subscriptionId"`
	ResourceID           string         `json:"resourceId"`
	TenantID             string         `json:"tenantId,omitempty"`
	Location             string         `json:"location,omitempty"`
	CreationTime         time.Time      `json:"creationTime"`
	ManagedResourceGroup string         `json:"managedResourceGroup,omitempty"`
	DeletionTime         *time.Time     `json:"deletionTime,omitempty"`
	Extra                map[string]any `json:"-"`
}

// PutBilling upserts a billing item; its partition is its subscriptionId,
// lowercased as every partition is, which a Billing container on
// /partitionKey (2024-10 layout) also finds in partitionKey.
func (f *Frontend) PutBilling(ctx context.Context, b Billing) error {
	b.SubscriptionID = strings.ToLower(b.SubscriptionID)
	path, err := f.billingKeyPath(ctx)
	if err != nil {
		return err
	}
	extra := b.Extra
	if path == "/partitionKey" {
		extra = maps.Clone(b.Extra)
		if extra == nil {
			extra = map[string]any{}
		}
		extra["partitionKey"] = b.SubscriptionID
	}
	body, err := withExtra(b, extra)
	if err != nil {
		return err
	}
	_, err = f.billing.UpsertItem(ctx, azcosmos.NewPartitionKeyString(b.SubscriptionID), body, nil)
	return err
}

// billingKeyPath reads the Billing container's partition key path once.
func (f *Frontend) billingKeyPath(ctx context.Context) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.billingPath != "" {
		return f.billingPath, nil
	}
	resp, err := f.billing.Read(ctx, nil)
	if err != nil {
		return "", fmt.Errorf("read the Billing container: %w", err)
	}
	if p := resp.ContainerProperties; p == nil || len(p.PartitionKeyDefinition.Paths) != 1 {
		return "", errors.New("the Billing container has no single partition key path")
	}
	f.billingPath = resp.ContainerProperties.PartitionKeyDefinition.Paths[0]
	return f.billingPath, nil
}

// BillingItems lists every billing item of a subscription as generic maps,
// open and closed, so that a check sees items it did not expect too.
func (f *Frontend) BillingItems(ctx context.Context, subscriptionID string) ([]map[string]any, error) {
	sub := strings.ToLower(subscriptionID)
	pager := f.billing.NewQueryItemsPager("SELECT * FROM c WHERE c.subscriptionId = @sub", azcosmos.NewPartitionKeyString(sub),
		&azcosmos.QueryOptions{QueryParameters: []azcosmos.QueryParameter{{Name: "@sub", Value: sub}}})
	var items []map[string]any
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, raw := range page.Items {
			var m map[string]any
			if err := json.Unmarshal(raw, &m); err != nil {
				return nil, err
			}
			items = append(items, m)
		}
	}
	return items, nil
}

// Lock is a lock the frontend holds.
type Lock struct {
	ID   string
	ETag azcore.ETag
	body []byte // the item as created
}

// TryLock creates subscriptionID's lock item for owner; ok is false when
// someone else holds it. In Shape2024_10 the item also names the Locks
// container's default TTL, as that frontend's lock does.
func (f *Frontend) TryLock(ctx context.Context, subscriptionID, owner string) (Lock, bool, error) {
	id := strings.ToLower(subscriptionID)
	item := map[string]any{"id": id, "owner": owner}
	if f.Shape == Shape2024_10 {
		ttl, err := f.lockTTL(ctx)
		if err != nil {
			return Lock{}, false, err
		}
		item["ttl"] = ttl
	}
	body, _ := json.Marshal(item)
	// The 2024-10 frontend keeps the item Cosmos returns, and renews with it.
	opts := &azcosmos.ItemOptions{EnableContentResponseOnWrite: f.Shape == Shape2024_10}
	resp, err := f.locks.CreateItem(ctx, azcosmos.NewPartitionKeyString(id), body, opts)
	if testenv.StatusOf(err) == http.StatusConflict {
		return Lock{}, false, nil
	}
	if err != nil {
		return Lock{}, false, err
	}
	if len(resp.Value) > 0 {
		body = resp.Value
	}
	return Lock{ID: id, ETag: resp.ETag, body: body}, true, nil
}

// lockTTL reads the Locks container's default TTL once; like the 2024-10
// frontend, it refuses a container without one.
func (f *Frontend) lockTTL(ctx context.Context) (int32, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.locksTTL != 0 {
		return f.locksTTL, nil
	}
	resp, err := f.locks.Read(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("read the Locks container: %w", err)
	}
	if p := resp.ContainerProperties; p == nil || p.DefaultTimeToLive == nil || *p.DefaultTimeToLive <= 0 {
		return 0, errors.New("the Locks container has no default TTL")
	}
	f.locksTTL = *resp.ContainerProperties.DefaultTimeToLive
	return f.locksTTL, nil
}

// Renew replaces the lock item with If-Match, restarting its TTL, as the
// frontend does while it works. It fails (404 or 412) once the item has
// expired, been deleted or changed hands: the lock is lost. In
// Shape2024_10 it upserts the item it created with If-Match, as that
// frontend did: an item that expired is created again (no 404), and only
// an item that changed hands answers 412.
func (f *Frontend) Renew(ctx context.Context, l Lock) (Lock, error) {
	if f.Shape == Shape2024_10 {
		resp, err := f.locks.UpsertItem(ctx, azcosmos.NewPartitionKeyString(l.ID), l.body,
			&azcosmos.ItemOptions{IfMatchEtag: &l.ETag, EnableContentResponseOnWrite: true})
		if err != nil {
			return l, err
		}
		l.ETag, l.body = resp.ETag, resp.Value
		return l, nil
	}
	body, _ := json.Marshal(map[string]any{"id": l.ID, "owner": "frontend"})
	resp, err := f.locks.ReplaceItem(ctx, azcosmos.NewPartitionKeyString(l.ID), l.ID, body, &azcosmos.ItemOptions{IfMatchEtag: &l.ETag})
	if err != nil {
		return l, err
	}
	l.ETag = resp.ETag
	return l, nil
}

// Unlock deletes the lock item if it is still the one l created. A lock that
// expired or changed hands is left alone, as the protocol says.
func (f *Frontend) Unlock(ctx context.Context, l Lock) error {
	_, err := f.locks.DeleteItem(ctx, azcosmos.NewPartitionKeyString(l.ID), l.ID, &azcosmos.ItemOptions{IfMatchEtag: &l.ETag})
	if s := testenv.StatusOf(err); s == http.StatusNotFound || s == http.StatusPreconditionFailed {
		return nil
	}
	return err
}

// StealLock overwrites subscriptionID's lock item without If-Match, for a
// minute.
func (f *Frontend) StealLock(ctx context.Context, subscriptionID, owner string) error {
	id := strings.ToLower(subscriptionID)
	body, _ := json.Marshal(map[string]any{"id": id, "owner": owner, "ttl": 60})
	_, err := f.locks.UpsertItem(ctx, azcosmos.NewPartitionKeyString(id), body, nil)
	return err
}
