package poll_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/internal/database/databasetesting"
	"github.com/opstatus/opstatus/poll"
)

// open returns the open billing items.
func (f *fixture) open() []*database.Billing {
	var out []*database.Billing
	for _, b := range f.db.BillingItems() {
		if b.DeletionTime == nil {
			out = append(out, b)
		}
	}
	return out
}

func (f *fixture) putCreate(t *testing.T, status arm.ProvisioningState) {
	t.Helper()
	f.putOp(database.Operation{ID: "op", Request: arm.RequestCreate, Status: status, TenantID: "tenant-1"})
	f.cs.SetStatus(clusterCS, http.StatusOK, clusterStatus("ready"))
}

func TestSucceededCreateOpensItsBillingFirst(t *testing.T) {
	f := newFixture(t)
	f.putCreate(t, arm.ProvisioningStateProvisioning)
	require.Equal(t, poll.OutcomeUpdated, f.poll(t, "op"))
	require.Equal(t, arm.ProvisioningStateSucceeded, f.op(t, "op").Status)
	open := f.open()
	require.Len(t, open, 1)
	b := open[0]
	require.Equal(t, database.BillingID(clusterKey, "abc"), b.ID)
	require.Equal(t, sub, b.SubscriptionID)
	require.Equal(t, clusterKey, b.ResourceID)
	require.Equal(t, "tenant-1", b.TenantID)
	require.Equal(t, "eastus", b.Location)
	require.Equal(t, time.Date(2026, 11, 30, 11, 0, 0, 0, time.UTC), b.CreationTime.UTC())
	require.Equal(t, "/subscriptions/"+sub+"/resourceGroups/abc-managed", b.ManagedResourceGroup)
}

// However the write after it fails, or the process dies before it, a
// cluster never gets a second open item: the retry finds the first.
func TestBillingIsWrittenOnceWhateverTheRetry(t *testing.T) {
	f := newFixture(t)
	f.putCreate(t, arm.ProvisioningStateProvisioning)
	failed := false
	f.db.Hook = func(call databasetesting.Op) error {
		if call == databasetesting.OpReplaceOperation && !failed {
			failed = true
			return database.ErrUnavailable
		}
		return nil
	}
	require.Equal(t, poll.OutcomeDeferred, f.poll(t, "op"))
	require.Equal(t, arm.ProvisioningStateProvisioning, f.op(t, "op").Status, "the operation waits for the next scan")
	require.Len(t, f.open(), 1, "the billing item came first")
	require.Equal(t, poll.OutcomeUpdated, f.poll(t, "op"))
	require.Equal(t, arm.ProvisioningStateSucceeded, f.op(t, "op").Status)
	require.Len(t, f.db.BillingItems(), 1)
}

// An open item written by the backend before opstatus (another id) is the
// cluster's: no second one is written.
func TestBillingFindsAnItemOfAnotherID(t *testing.T) {
	f := newFixture(t)
	f.putCreate(t, arm.ProvisioningStateProvisioning)
	f.db.PutRawBilling([]byte(`{"id":"random-uuid","subscriptionId":"` + sub + `","resourceId":"` + strings.ToUpper(clusterKey) +
		`","creationTime":"2026-11-30T11:00:00Z"}`))
	require.Equal(t, poll.OutcomeUpdated, f.poll(t, "op"))
	require.Len(t, f.db.BillingItems(), 1)
	require.Equal(t, "random-uuid", f.db.BillingItems()[0].ID)
}

// blindBilling lists no open billing item, as a read that raced a create
// whose answer was lost would.
type blindBilling struct{ database.DBClient }

func (blindBilling) OpenBilling(context.Context, string, string) ([]*database.Billing, error) {
	return nil, nil
}

// A create that meets its own earlier write (409) is done.
func TestBillingCreateThatMeetsItselfIsDone(t *testing.T) {
	f := newFixture(t)
	f.putCreate(t, arm.ProvisioningStateProvisioning)
	_, err := f.db.CreateBilling(context.Background(), &database.Billing{ID: database.BillingID(clusterKey, "abc"),
		SubscriptionID: sub, ResourceID: clusterKey, CreationTime: time.Date(2026, 11, 30, 11, 0, 0, 0, time.UTC)})
	require.NoError(t, err)
	f.fn.DB = blindBilling{f.db}
	require.Equal(t, poll.OutcomeUpdated, f.poll(t, "op"))
	require.Len(t, f.db.BillingItems(), 1)
}

// A failure to write the billing item leaves the operation pending.
func TestBillingFailureLeavesTheCreatePending(t *testing.T) {
	for name, breakIt := range map[string]func(*fixture){
		"no Billing container": func(f *fixture) { f.db.RemoveBillingContainer() },
		"the create fails": func(f *fixture) {
			f.db.Hook = func(call databasetesting.Op) error {
				if call == databasetesting.OpCreateBilling {
					return database.ErrUnavailable
				}
				return nil
			}
		},
		"no cluster object": func(f *fixture) { f.cs.Delete(clusterCS) },
		"a cluster object without its managed resource group": func(f *fixture) {
			f.cs.Set(clusterCS, http.StatusOK, `{"kind":"Cluster","id":"abc","creation_timestamp":"2026-11-30T11:00:00Z"}`)
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			f.putCreate(t, arm.ProvisioningStateProvisioning)
			breakIt(f)
			require.Equal(t, poll.OutcomeDeferred, f.poll(t, "op"))
			require.Equal(t, arm.ProvisioningStateProvisioning, f.op(t, "op").Status)
			require.Empty(t, f.arm.got())
		})
	}
}

func TestFinishedClusterDeleteClosesItsBillingFirst(t *testing.T) {
	f := newFixture(t)
	f.putOp(database.Operation{ID: "op", Request: arm.RequestDelete, Status: arm.ProvisioningStateDeleting})
	created := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	_, err := f.db.CreateBilling(context.Background(), &database.Billing{ID: database.BillingID(clusterKey, "abc"),
		SubscriptionID: sub, ResourceID: clusterKey, CreationTime: created})
	require.NoError(t, err)
	f.cs.Delete(clusterCS) // gone
	failed := false
	f.db.Hook = func(call databasetesting.Op) error {
		if call == databasetesting.OpReplaceOperation && !failed {
			failed = true
			return errors.New("boom")
		}
		return nil
	}
	require.Equal(t, poll.OutcomeDeferred, f.poll(t, "op"))
	require.Empty(t, f.open(), "closed before the operation's write")
	closedAt := *f.db.BillingItems()[0].DeletionTime
	require.Equal(t, f.now, closedAt.UTC())

	f.now = f.now.Add(time.Minute)
	require.Equal(t, poll.OutcomeDeleted, f.poll(t, "op"))
	items := f.db.BillingItems()
	require.Len(t, items, 1)
	require.Equal(t, closedAt, *items[0].DeletionTime, "closed once")
}

// A billing item that does not decode is closed all the same, its other
// fields kept as they were.
func TestUnreadableBillingItemIsClosed(t *testing.T) {
	f := newFixture(t)
	f.putOp(database.Operation{ID: "op", Request: arm.RequestDelete, Status: arm.ProvisioningStateDeleting})
	f.db.PutRawBilling([]byte(`{"id":"b1","subscriptionId":"` + sub + `","resourceId":"` + clusterKey + `","creationTime":7,"extra":[1]}`))
	f.cs.Delete(clusterCS)
	require.Equal(t, poll.OutcomeDeleted, f.poll(t, "op"))
	raw := string(f.db.RawBilling(sub, "b1"))
	require.Contains(t, raw, `"deletionTime"`)
	require.Contains(t, raw, `"creationTime":7`)
	require.Contains(t, raw, `"extra":[1]`)
}

// Only a cluster's Create and Delete bill: an Update, a node pool and a
// Create that fails write no billing item.
func TestOnlyClusterCreatesAndDeletesBill(t *testing.T) {
	f := newFixture(t)
	f.putOp(database.Operation{ID: "update", Request: arm.RequestUpdate, Status: arm.ProvisioningStateUpdating})
	f.putOp(database.Operation{ID: "pool", Request: arm.RequestCreate, Status: arm.ProvisioningStateProvisioning, InternalID: clusterCS + "/node_pools/np"})
	f.cs.SetStatus(clusterCS, http.StatusOK, clusterStatus("ready"))
	f.cs.SetStatus(clusterCS+"/node_pools/np", http.StatusOK, `{"kind":"NodePoolStatus","id":"np","state":{"kind":"NodePoolState","value":"ready"}}`)
	require.Equal(t, poll.OutcomeUpdated, f.poll(t, "update"))
	require.Equal(t, poll.OutcomeUpdated, f.poll(t, "pool"))

	f.putOp(database.Operation{ID: "failed", Request: arm.RequestCreate, Status: arm.ProvisioningStateProvisioning})
	f.cs.SetStatus(clusterCS, http.StatusOK, `{"kind":"ClusterStatus","id":"abc","state":"error","provision_error_code":"OCM3001"}`)
	require.Equal(t, poll.OutcomeUpdated, f.poll(t, "failed"))
	require.Empty(t, f.db.BillingItems())
}
