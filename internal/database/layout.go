package database

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
)

// ErrPartitionKeyPath means that a container's partition key is not one
// opstatus can fill in the items it writes there: hierarchical, or on a
// path naming a field its items do not hold.
var ErrPartitionKeyPath = errors.New("partition key opstatus cannot fill")

// Holds names what a container holds, which decides the partition key
// paths opstatus can serve in it.
type Holds string

// What the containers opstatus uses hold.
const (
	HoldsOperations Holds = "Operations"
	HoldsResources  Holds = "Resources"
	HoldsLocks      Holds = "Locks"
	HoldsBilling    Holds = "Billing"
	// HoldsLeases: pickup's change-feed leases, which the Functions
	// trigger keys by /id, and the budget ledger's one item.
	HoldsLeases Holds = "Leases"
)

// servedPaths are the partition key paths opstatus fills, by what the
// container holds. The frontend writes the Operations and Resources items,
// each with its partitionKey, which opstatus keeps; a lock and a lease are
// named by their id; a billing item carries its subscription in
// subscriptionId, and in partitionKey too in a container keyed by it.
var servedPaths = map[Holds][]string{
	HoldsOperations: {"/partitionKey"},
	HoldsResources:  {"/partitionKey"},
	HoldsLocks:      {"/id"},
	HoldsBilling:    {string(BillingByPartitionKey), string(BillingBySubscriptionID)},
	HoldsLeases:     {"/id"},
}

// servedPath returns the one partition key path of def, a container's
// partition key as read from its properties, if opstatus can fill it in
// the items of a container holding holds; else a *PartitionKeyError.
func servedPath(holds Holds, def azcosmos.PartitionKeyDefinition) (string, error) {
	served := servedPaths[holds]
	if len(def.Paths) == 1 && def.Kind != azcosmos.PartitionKeyKindMultiHash {
		for _, p := range served {
			if def.Paths[0] == p {
				return p, nil
			}
		}
	}
	return "", &PartitionKeyError{Holds: holds, Paths: def.Paths, Served: served,
		Hierarchical: len(def.Paths) != 1 || def.Kind == azcosmos.PartitionKeyKindMultiHash}
}

// PartitionKeyError says that a container's partition key is not one
// opstatus can fill; it wraps ErrPartitionKeyPath.
type PartitionKeyError struct {
	Holds        Holds
	Paths        []string // the container's
	Hierarchical bool     // a MultiHash key, or more than one path
	Served       []string // the paths opstatus fills in such a container
}

func (e *PartitionKeyError) Error() string {
	kind := "partition key path"
	if e.Hierarchical {
		kind = "hierarchical partition key"
	}
	return fmt.Sprintf("%s %s, which opstatus cannot fill in %s items (it fills %s)",
		kind, strings.Join(e.Paths, ","), e.Holds, strings.Join(e.Served, " or "))
}

func (e *PartitionKeyError) Unwrap() error { return ErrPartitionKeyPath }

// BillingKey is the partition key path of a Billing container that
// opstatus can fill: the container ARO-HCP created in 2024-10 took the
// default /partitionKey; its backend keyed Billing by /subscriptionId from
// 2025-06.
type BillingKey string

// The Billing layouts.
const (
	BillingBySubscriptionID BillingKey = "/subscriptionId"
	BillingByPartitionKey   BillingKey = "/partitionKey"
)

// Keyed returns b as it is written to a Billing container keyed by k: on
// /partitionKey, with partitionKey set to its subscriptionId when it has
// none (an item read from such a container has its own).
func (k BillingKey) Keyed(b *Billing) *Billing {
	if k != BillingByPartitionKey || b.PartitionKey != "" {
		return b
	}
	out := *b
	out.PartitionKey = b.SubscriptionID
	return &out
}

// Partition returns the partition key of b, written as Keyed writes it.
func (k BillingKey) Partition(b *Billing) string {
	if k == BillingByPartitionKey && b.PartitionKey != "" {
		return b.PartitionKey
	}
	return b.SubscriptionID
}

// Field is the item field that holds the partition key.
func (k BillingKey) Field() string { return strings.TrimPrefix(string(k), "/") }

// billingKey is the Billing container's partition key path, read once,
// at its first write.
type billingKey struct {
	mu  sync.Mutex
	key BillingKey
}

// get returns the path of container, reading it on the first call that
// succeeds.
func (b *billingKey) get(ctx context.Context, container *azcosmos.ContainerClient) (BillingKey, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.key != "" {
		return b.key, nil
	}
	resp, err := container.Read(ctx, nil)
	if err != nil {
		return "", fmt.Errorf("read the Billing container's partition key: %w", classify(err))
	}
	path, err := servedPath(HoldsBilling, resp.ContainerProperties.PartitionKeyDefinition)
	if err != nil {
		return "", fmt.Errorf("container %s: %w", QuoteID(container.ID()), err)
	}
	b.key = BillingKey(path)
	return b.key, nil
}

// ErrRefused means that Cosmos DB refused a request for what it is, an
// answer that no retry of the same request changes: a 4xx other than 404,
// 408, 409, 412, 429 and 449 (400 Bad Request, 413 Request Entity Too
// Large, 403, ...). A RefusedError says which container refused and how.
var ErrRefused = errors.New("refused by Cosmos DB")

// RefusedError is Cosmos DB's refusal of a request; it wraps ErrRefused.
type RefusedError struct {
	// Container is the container the request went to.
	Container string
	// StatusCode is the HTTP status of the answer.
	StatusCode int
	// Code and Message are Cosmos DB's, from the answer's body; Message
	// is cut after maxRefusalMessage bytes.
	Code, Message string

	err error // the client's error, when there was a request
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("refused by Cosmos DB, container %s: %d %s: %s",
		QuoteID(e.Container), e.StatusCode, e.Code, e.Message)
}

// Unwrap returns ErrRefused and the client's error.
func (e *RefusedError) Unwrap() []error {
	if e.err == nil {
		return []error{ErrRefused}
	}
	return []error{ErrRefused, e.err}
}

// maxRefusalMessage bounds the message a RefusedError keeps: Cosmos DB
// appends activity ids and request statistics to it.
const maxRefusalMessage = 512

// refused reports whether an answer of status is a refusal for good.
func refused(status int) bool {
	switch status {
	case http.StatusNotFound, http.StatusRequestTimeout, http.StatusConflict,
		http.StatusPreconditionFailed, http.StatusTooManyRequests, 449:
		return false
	}
	return status >= 400 && status < 500
}
