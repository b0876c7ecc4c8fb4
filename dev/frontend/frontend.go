// Package frontend writes Cosmos DB items the way the ARO-HCP frontend does:
// operations, resources and subscription locks, and billing items as
// ARO-HCP's backend wrote them. Tests, the demo and the benchmarks use it to
// give opstatus something to do and to read what it wrote. It never ships.
package frontend

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/opstatus/opstatus/dev/testenv"
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

	db         *azcosmos.DatabaseClient
	operations *azcosmos.ContainerClient
	resources  *azcosmos.ContainerClient
	locks      *azcosmos.ContainerClient
	billing    *azcosmos.ContainerClient
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

// CreateSchema creates the database's containers as production has them;
// the Locks container expires items after lockTTL.
func CreateSchema(ctx context.Context, endpoint, key, database string, lockTTL time.Duration) error {
	ttl := int32(lockTTL / time.Second)
	return testenv.CreateDatabase(ctx, endpoint, key, database,
		testenv.ContainerSpec{Name: OperationsContainer, PartitionKeyPath: "/partitionKey"},
		testenv.ContainerSpec{Name: ResourcesContainer, PartitionKeyPath: "/partitionKey"},
		testenv.ContainerSpec{Name: LocksContainer, PartitionKeyPath: "/id", DefaultTTL: &ttl},
		testenv.ContainerSpec{Name: BillingContainer, PartitionKeyPath: "/subscriptionId"},
		testenv.ContainerSpec{Name: LeasesContainer, PartitionKeyPath: "/id"},
	)
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

// operationsPartition is the partition of subscriptionID's operations.
func (f *Frontend) operationsPartition(subscriptionID string) string {
	if f.OperationsPartition != "" {
		return f.OperationsPartition
	}
	return strings.ToLower(subscriptionID)
}

// Resource reads a resource item by id as a generic map, or nil if missing.
func (f *Frontend) Resource(ctx context.Context, subscriptionID, id string) (map[string]any, error) {
	return read(ctx, f.resources, strings.ToLower(subscriptionID), id)
}

func read(ctx context.Context, c *azcosmos.ContainerClient, partition, id string) (map[string]any, error) {
	resp, err := c.ReadItem(ctx, azcosmos.NewPartitionKeyString(partition), id, nil)
	var re *azcore.ResponseError
	if err != nil && errors.As(err, &re) && re.StatusCode == http.StatusNotFound {
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
// lowercased as every partition is.
func (f *Frontend) PutBilling(ctx context.Context, b Billing) error {
	b.SubscriptionID = strings.ToLower(b.SubscriptionID)
	body, err := withExtra(b, b.Extra)
	if err != nil {
		return err
	}
	_, err = f.billing.UpsertItem(ctx, azcosmos.NewPartitionKeyString(b.SubscriptionID), body, nil)
	return err
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
}

// TryLock creates subscriptionID's lock item for owner; ok is false when
// someone else holds it.
func (f *Frontend) TryLock(ctx context.Context, subscriptionID, owner string) (Lock, bool, error) {
	id := strings.ToLower(subscriptionID)
	body, _ := json.Marshal(map[string]any{"id": id, "owner": owner})
	resp, err := f.locks.CreateItem(ctx, azcosmos.NewPartitionKeyString(id), body, nil)
	var re *azcore.ResponseError
	if err != nil && errors.As(err, &re) && re.StatusCode == http.StatusConflict {
		return Lock{}, false, nil
	}
	if err != nil {
		return Lock{}, false, err
	}
	return Lock{ID: id, ETag: resp.ETag}, true, nil
}

// Renew replaces the lock item with If-Match, restarting its TTL, as the
// frontend does while it works. It fails (404 or 412) once the item has
// expired, been deleted or changed hands: the lock is lost.
func (f *Frontend) Renew(ctx context.Context, l Lock) (Lock, error) {
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
	var re *azcore.ResponseError
	if errors.As(err, &re) && (re.StatusCode == http.StatusNotFound || re.StatusCode == http.StatusPreconditionFailed) {
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
