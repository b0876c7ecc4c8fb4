// Package database reads and writes the Cosmos DB items opstatus shares with
// the ARO-HCP frontend: operations, resources, subscription locks and
// billing items.
//
// DBClient's implementation is NewCosmosClient. Tests use the in-memory one
// of package databasetesting, which behaves the same.
package database

import (
	"context"
	"errors"
	"iter"
	"net/http"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
)

// Errors a DBClient returns; test with errors.Is.
var (
	// ErrNotFound means the item a request named does not exist (HTTP 404),
	// in a container that does.
	ErrNotFound = errors.New("item not found")
	// ErrContainerNotFound means the container a request went to, or its
	// database, does not exist: a setting names the wrong one, or it was
	// deleted. It says nothing about any item, and it does not pass by
	// itself.
	ErrContainerNotFound = errors.New("container or database not found")
	// ErrConflict means an item with that id already exists (HTTP 409).
	ErrConflict = errors.New("item already exists")
	// ErrPreconditionFailed means the item changed since it was read (HTTP 412).
	ErrPreconditionFailed = errors.New("item changed since it was read")
	// ErrMalformed means an item could not be decoded.
	ErrMalformed = errors.New("malformed item")
	// ErrDuplicateKey means several items share a key that names one
	// resource, so none of them can be taken for it.
	ErrDuplicateKey = errors.New("items share the key")
	// ErrUnavailable marks a failure that may pass by itself: throttling,
	// timeouts, 5xx, broken connections, and a replica that has not caught
	// up with the session yet.
	ErrUnavailable = errors.New("database unavailable")
)

// DBClient is everything opstatus does with Cosmos DB.
type DBClient interface {
	// PendingOperations yields, across all subscriptions (all the
	// partitions, or the fixed one: OperationsPartition), every operation
	// that is not terminal or whose notification is not delivered yet, in
	// the same order from call to call as long as the items do not change.
	// An item it cannot decode yields an ErrMalformed error, and one whose
	// subscription cannot be told yields itself with an ErrNoSubscription
	// error (OperationsPartition.ReadPending); the sequence goes on. Any
	// other error ends it.
	PendingOperations(ctx context.Context) iter.Seq2[PendingOperation, error]
	// GetOperation point-reads the operation operationID of subscription
	// subscriptionID, with its subscription told
	// (OperationsPartition.ReadOperation): ErrNoSubscription when it cannot
	// be, ErrOtherSubscription when it is another's.
	GetOperation(ctx context.Context, subscriptionID, operationID string) (*Operation, error)
	// ReplaceOperation writes op if its item still has op.ETag and returns
	// the item as written, its subscription told.
	ReplaceOperation(ctx context.Context, op *Operation) (*Operation, error)

	// GetResource returns the resource whose key equals key, ignoring case;
	// ErrMalformed when that item does not decode, ErrDuplicateKey when
	// several items have that key.
	GetResource(ctx context.Context, subscriptionID, key string) (*Resource, error)
	// ResourceHeads lists the resources whose key equals key, ignoring
	// case, by what deleting them and telling their owner needs: when
	// GetResource fails on an item that does not decode, or on several,
	// they can still be named, judged and deleted.
	ResourceHeads(ctx context.Context, subscriptionID, key string) ([]ResourceHead, error)
	// ChildResources lists the resources whose key starts with key + "/",
	// ignoring case, by what deleting them needs: an item whose other fields
	// do not decode is listed all the same.
	ChildResources(ctx context.Context, subscriptionID, key string) ([]ResourceRef, error)
	// ReplaceResource writes r if its item still has r.ETag.
	ReplaceResource(ctx context.Context, r *Resource) (*Resource, error)
	// DeleteResource deletes the item r names if it still has r.ETag.
	DeleteResource(ctx context.Context, r ResourceRef) error

	// CreateBilling creates b and returns the item as written; ErrConflict
	// when an item with its id exists, which makes a create with BillingID's
	// id safe to retry.
	CreateBilling(ctx context.Context, b *Billing) (*Billing, error)
	// OpenBilling lists, in no particular order, the billing items of the
	// subscription whose resourceId equals resourceID, ignoring case, and
	// that have no deletionTime (a null one counts as set, as in ARO-HCP's
	// query). An item whose fields do not decode is listed with Err set. A
	// container that is missing is an error, never an empty list.
	OpenBilling(ctx context.Context, subscriptionID, resourceID string) ([]*Billing, error)
	// ReplaceBilling writes b if its item still has b.ETag.
	ReplaceBilling(ctx context.Context, b *Billing) (*Billing, error)

	// Locks returns the store of subscription locks.
	Locks() LockStore
}

// LockStore holds the lock items. The protocol around them lives in package lock.
type LockStore interface {
	// TTL is the Locks container's DefaultTimeToLive, or zero when the
	// container expires no item by default (no DefaultTimeToLive, or -1).
	TTL(ctx context.Context) (time.Duration, error)
	// Create creates the lock item id for owner; ErrConflict when it exists.
	Create(ctx context.Context, id, owner string, ttl time.Duration) (azcore.ETag, error)
	// Get reads the lock item id: its owner and etag; ErrNotFound when it
	// does not exist or has expired.
	Get(ctx context.Context, id string) (owner string, etag azcore.ETag, err error)
	// Renew replaces the lock item if it still has etag, restarting its TTL.
	// It never re-creates the item: ErrNotFound when it is gone (expired or
	// deleted), ErrPreconditionFailed when it has changed.
	Renew(ctx context.Context, id, owner string, ttl time.Duration, etag azcore.ETag) (azcore.ETag, error)
	// Delete deletes the lock item if it still has etag.
	Delete(ctx context.Context, id string, etag azcore.ETag) error
}

// OwnerHeader names the lock owner on every Cosmos request made with a
// context from WithOwner, so that a proxy or a request log can tell whose
// lock covered each write. Cosmos DB ignores it.
const OwnerHeader = "x-opstatus-owner"

// WithOwner returns a context whose Cosmos requests carry OwnerHeader.
func WithOwner(ctx context.Context, owner string) context.Context {
	return policy.WithHTTPHeader(ctx, http.Header{OwnerHeader: []string{owner}})
}
