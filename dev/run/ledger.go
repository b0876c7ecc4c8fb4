package main

import (
	"context"

	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/dev/stack"
	"github.com/opstatus/opstatus/internal/budget"
	"github.com/opstatus/opstatus/internal/testenv"
)

// seedLedger creates an empty ledger of budget in the stack's Leases
// container at endpoint before the host starts, as budget.Seed does for a
// new environment: a ledger the first handler created itself would make
// every member wait 30 s before calling Cluster Service.
func seedLedger(ctx context.Context, endpoint string, b int) error {
	c, err := testenv.NewCosmosClient(endpoint, testenv.CosmosEmulatorKey)
	if err != nil {
		return err
	}
	leases, err := c.NewContainer(stack.Database, frontend.LeasesContainer)
	if err != nil {
		return err
	}
	return budget.Seed(ctx, budget.NewCosmos(leases), b)
}
