package hostemu

import (
	"context"
	"errors"
	"net/http"
)

// feedLag is what CosmosDBMetricsProvider.GetMetricsAsync reads for the
// scale controller through the change feed estimator
// (ChangeFeedEstimatorIterator): the lag of every lease of the trigger's
// processor, summed, and how many leases there are. A lease's lag is what
// its range's feed holds after its continuation, or from the beginning
// for a lease never checkpointed (the estimator reads those from the
// start); the estimator counts it in LSNs, the emulator in documents,
// reading no more than the target can use. Before any lease exists, or
// while a container is missing, it votes for one instance (1 and 1); on
// other failures it votes for none (0 and 0), as the provider does.
func (h *Host) feedLag(ctx context.Context, c *CosmosTrigger) (remaining int64, partitions int) {
	mc, err := h.cosmos.get(c.account)
	if err != nil {
		return 0, 0
	}
	lc, err := h.cosmos.get(c.leaseAccount)
	if err != nil {
		return 0, 0
	}
	monitored, err := mc.readContainer(ctx, c.DatabaseName, c.ContainerName)
	if err == nil {
		_, err = lc.readContainer(ctx, c.LeaseDatabaseName, c.LeaseContainerName)
	}
	if errors.Is(err, errCosmosNotFound) {
		return 1, 1
	}
	if err != nil {
		h.log.Warn("hostemu: reading the change feed's lag failed", "err", err)
		return 0, 0
	}
	cc, err := lc.az.NewContainer(c.LeaseDatabaseName, c.LeaseContainerName)
	if err != nil {
		return 0, 0
	}
	store := &azLeaseBackend{c: cc}
	prefix := c.LeaseContainerPrefix + c.account.host() + "_" + monitored.databaseRID + "_" + monitored.rid
	all, err := store.list(ctx, prefix+leaseSeparator)
	if err != nil {
		h.log.Warn("hostemu: reading the change feed's lag failed", "err", err)
		return 0, 0
	}
	leases := map[string]*leaseDoc{}
	for _, l := range all {
		if _, ok := leases[l.LeaseToken]; !ok {
			leases[l.LeaseToken] = l
		}
	}
	if len(leases) == 0 {
		// "PartitionCount is 0, the lease container exists but it has not
		// been initialized, scale out to 1".
		return 1, 1
	}
	per := c.MaxItemsPerInvocation
	if per <= 0 {
		per = defaultCosmosMaxItems
	}
	enough := per * len(leases)
	feed := clientFeed{c: mc, db: c.DatabaseName, coll: c.ContainerName}
	for token, l := range leases {
		start := feedStart{continuation: l.continuation(), beginning: l.continuation() == ""}
		page, err := feed.read(ctx, token, start, enough)
		if err != nil {
			h.log.Warn("hostemu: reading the change feed's lag failed", "lease", token, "err", err)
			return 0, 0
		}
		if page.status != http.StatusNotModified {
			remaining += int64(page.count)
		}
	}
	return remaining, len(leases)
}
