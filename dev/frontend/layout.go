package frontend

import (
	"context"
	"fmt"
	"time"

	"github.com/opstatus/opstatus/internal/testenv"
)

// Shape is how the stand-in writes a request's items.
type Shape string

const (
	// ShapeCurrent is today's contract: Operations items in their
	// subscription's partition unless OperationsPartition says otherwise,
	// ids and internalIds as the caller gives them (PutOperation,
	// PutResource).
	ShapeCurrent Shape = "current"
	// Shape2024_10 is ARO-HCP's frontend at 07deb7918, as Request serves
	// a request.
	Shape2024_10 Shape = "2024-10"
)

// ParseVersion reads the ARO-HCP revision a -frontend flag names, "current"
// (or empty) or "2024-10", as the shape the stand-in writes and the
// account layout it creates.
func ParseVersion(s string) (Shape, testenv.Layout, error) {
	switch Shape(s) {
	case "", ShapeCurrent:
		return ShapeCurrent, testenv.LayoutCurrent, nil
	case Shape2024_10:
		return Shape2024_10, testenv.Layout2024, nil
	}
	return "", 0, fmt.Errorf("unknown ARO-HCP version %q (want %q or %q)", s, ShapeCurrent, Shape2024_10)
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

// Containers returns the containers of the account in layout: opstatus's
// (testenv.Layout) and, in the 2024-10 layout, the rest of what
// rp-cosmos.bicep at 0195ac565 created: the Subscriptions container, and
// time to live on in every container (-1), Operations expiring items
// after 7 days.
func Containers(layout testenv.Layout, lockTTL time.Duration) []testenv.ContainerSpec {
	specs := layout.Containers(lockTTL)
	if layout != testenv.Layout2024 {
		return specs
	}
	on, ops := int32(-1), operationsTTL2024
	for i := range specs {
		switch specs[i].Name {
		case OperationsContainer:
			specs[i].DefaultTTL = &ops
		case ResourcesContainer, BillingContainer:
			specs[i].DefaultTTL = &on
		}
	}
	return append(specs, testenv.ContainerSpec{Name: SubscriptionsContainer, PartitionKeyPath: "/id", DefaultTTL: &on})
}

// CreateLayout creates the database with the containers of layout.
func CreateLayout(ctx context.Context, endpoint, key, database string, layout testenv.Layout, lockTTL time.Duration) error {
	return testenv.CreateDatabase(ctx, endpoint, key, database, Containers(layout, lockTTL)...)
}
