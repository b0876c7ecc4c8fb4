package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/dev/stack"
	"github.com/opstatus/opstatus/dev/testenv"
)

// ledgerID is the budget ledger's item in the Leases container
// (ARCHITECTURE.md, "The Cluster Service budget").
const ledgerID = "opstatus-budget"

// seedLedger creates an empty ledger of budget in the stack's Leases
// container at endpoint before the host starts, as budget.Seed does for a
// new environment: a ledger the first handler created itself would make
// every member wait 30 s before calling Cluster Service.
func seedLedger(ctx context.Context, endpoint string, budget int) error {
	c, err := testenv.NewCosmosClient(endpoint, testenv.CosmosEmulatorKey)
	if err != nil {
		return err
	}
	leases, err := c.NewContainer(stack.Database, frontend.LeasesContainer)
	if err != nil {
		return err
	}
	body, err := json.Marshal(map[string]any{"id": ledgerID, "epoch": fmt.Sprintf("run-%d", time.Now().UnixNano()), "budget": budget, "holders": map[string]any{}})
	if err != nil {
		return err
	}
	_, err = leases.CreateItem(ctx, azcosmos.NewPartitionKeyString(ledgerID), body, nil)
	var re *azcore.ResponseError
	if errors.As(err, &re) && re.StatusCode == http.StatusConflict {
		return nil
	}
	if err != nil {
		return fmt.Errorf("seeding the budget ledger: %w", err)
	}
	return nil
}
