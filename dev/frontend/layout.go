package frontend

import (
	"context"
	"fmt"
	"time"

	"github.com/opstatus/opstatus/dev/testenv"
)

// Version names a revision of ARO-HCP that the stand-in models: the
// shape of the items it writes (Shape) or the account layout it creates
// (Layout).
type Version string

const (
	// Current is today's contract: Operations items in their
	// subscription's partition unless OperationsPartition says otherwise,
	// ids and internalIds as the caller gives them, Billing on
	// /subscriptionId (ARO-HCP from 2025-06).
	Current Version = "current"
	// V2024_10 is ARO-HCP as opstatus first served it: the frontend at
	// 07deb7918 and the account dev-infrastructure at 0195ac565 created.
	V2024_10 Version = "2024-10"
)

// Shape is how the stand-in writes a request's items.
type Shape = Version

// Layout is the account layout: which containers exist, with which
// partition key paths and default TTLs.
type Layout = Version

// Shape and layout values.
const (
	ShapeCurrent  Shape  = Current
	Shape2024_10  Shape  = V2024_10
	LayoutCurrent Layout = Current
	Layout2024_10 Layout = V2024_10
)

// ParseVersion reads a -frontend flag's value; empty is Current.
func ParseVersion(s string) (Version, error) {
	switch Version(s) {
	case "", Current:
		return Current, nil
	case V2024_10:
		return V2024_10, nil
	}
	return "", fmt.Errorf("unknown ARO-HCP version %q (want %q or %q)", s, Current, V2024_10)
}

// SubscriptionsContainer is the frontend's container of registered
// subscriptions (2024-10 layout); opstatus never reads it.
const SubscriptionsContainer = "Subscriptions"

// FixedOperationsPartition is the one partition of every Operations item
// the 2024-10 frontend wrote ("workaround": azcosmos could not yet query
// across partitions).
const FixedOperationsPartition = "workaround"

// operationsTTL2024 is the 2024-10 Operations container's default TTL
// (7 days).
const operationsTTL2024 int32 = 604800

// Containers returns the containers of the layout, the Locks container
// expiring items after lockTTL, and opstatus's own Leases container.
func (l Layout) Containers(lockTTL time.Duration) ([]testenv.ContainerSpec, error) {
	locks := int32(lockTTL / time.Second)
	leases := testenv.ContainerSpec{Name: LeasesContainer, PartitionKeyPath: "/id"}
	switch l {
	case "", LayoutCurrent:
		return []testenv.ContainerSpec{
			{Name: OperationsContainer, PartitionKeyPath: "/partitionKey"},
			{Name: ResourcesContainer, PartitionKeyPath: "/partitionKey"},
			{Name: LocksContainer, PartitionKeyPath: "/id", DefaultTTL: &locks},
			{Name: BillingContainer, PartitionKeyPath: "/subscriptionId"},
			leases,
		}, nil
	case Layout2024_10:
		// rp-cosmos.bicep at 0195ac565: /partitionKey unless named,
		// defaultTtl -1 (on, no expiry) unless named.
		on, ops := int32(-1), operationsTTL2024
		return []testenv.ContainerSpec{
			{Name: SubscriptionsContainer, PartitionKeyPath: "/id", DefaultTTL: &on},
			{Name: OperationsContainer, PartitionKeyPath: "/partitionKey", DefaultTTL: &ops},
			{Name: ResourcesContainer, PartitionKeyPath: "/partitionKey", DefaultTTL: &on},
			{Name: BillingContainer, PartitionKeyPath: "/partitionKey", DefaultTTL: &on},
			{Name: LocksContainer, PartitionKeyPath: "/id", DefaultTTL: &locks},
			leases,
		}, nil
	}
	return nil, fmt.Errorf("unknown account layout %q", l)
}

// CreateLayout creates the database with the layout's containers.
func CreateLayout(ctx context.Context, endpoint, key, database string, layout Layout, lockTTL time.Duration) error {
	specs, err := layout.Containers(lockTTL)
	if err != nil {
		return err
	}
	return testenv.CreateDatabase(ctx, endpoint, key, database, specs...)
}
