package database

import (
	"fmt"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
)

// Container returns a client of container name of the client's database,
// for stores of their own such as the budget ledger in Leases.
func (c *CosmosClient) Container(name string) (*azcosmos.ContainerClient, error) {
	container, err := c.client.NewContainer(c.database, name)
	if err != nil {
		return nil, fmt.Errorf("cosmos container %s: %w", name, err)
	}
	return container, nil
}
