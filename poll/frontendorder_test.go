package poll_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/clusterservice"
	"github.com/opstatus/opstatus/internal/clusterservice/clusterservicetesting"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/internal/database/databasetesting"
	"github.com/opstatus/opstatus/internal/lock"
	"github.com/opstatus/opstatus/internal/testenv"
	"github.com/opstatus/opstatus/poll"
)

// lockMet is a lock store that tells when poll first finds the
// subscription lock held by someone else: its reads without the lock are
// behind it.
type lockMet struct {
	database.LockStore
	once sync.Once
	met  chan struct{}
}

func (l *lockMet) Create(ctx context.Context, id, owner string, ttl time.Duration) (azcore.ETag, error) {
	etag, err := l.LockStore.Create(ctx, id, owner, ttl)
	if errors.Is(err, database.ErrConflict) {
		l.once.Do(func() { close(l.met) })
	}
	return etag, err
}

// The frontend takes the subscription lock for a whole request and writes
// the operation before the Resources item; pickup wakes on the
// operation's write. Here poll checks the operation between the
// frontend's two writes, meets the lock, and writes once the frontend has
// released it: the Resources item it writes, or deletes, is the one the
// frontend left, whatever it read before the lock.
func TestPollBetweenTheFrontendsWrites(t *testing.T) {
	const created = "create1"
	// The cluster's Resources item as it was before the request, if any.
	existing := &frontend.Resource{ID: "r1", PartitionKey: sub, Key: clusterKey, InternalID: clusterCS,
		ActiveOperationID: created, ProvisioningState: "Succeeded"}
	child := frontend.Resource{ID: "r2", PartitionKey: sub, Key: clusterKey + "/nodePools/np1",
		InternalID: clusterCS + "/node_pools/np1", ProvisioningState: "Succeeded"}
	for _, tc := range []struct {
		name    string
		before  []frontend.Resource
		request arm.Request
		status  string // the operation's initial status
		cs      string // the cluster's status; empty for Cluster Service's 404
		// want is the operation's status, and the Resources items' keys
		// with their provisioningState and activeOperationId after poll.
		want      arm.ProvisioningState
		resources map[string][2]string
	}{{
		name: "a Create whose cluster is already in error", request: arm.RequestCreate, status: "Accepted",
		cs:   `{"kind":"ClusterStatus","id":"abc","state":"error","provision_error_code":"OCM3001","provision_error_message":"quota exceeded"}`,
		want: arm.ProvisioningStateFailed, resources: map[string][2]string{clusterKey: {"Failed", ""}},
	}, {
		name: "an Update answered at once", before: []frontend.Resource{*existing}, request: arm.RequestUpdate, status: "Accepted",
		cs:   clusterStatus("ready"),
		want: arm.ProvisioningStateSucceeded, resources: map[string][2]string{clusterKey: {"Succeeded", ""}},
	}, {
		name: "a Delete finished by Cluster Service's 404", before: []frontend.Resource{*existing, child}, request: arm.RequestDelete, status: "Deleting",
		want: arm.ProvisioningStateSucceeded, resources: map[string][2]string{},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testenv.NeedsServers(t)
			ctx := t.Context()
			cosmos := testenv.SharedCosmos(t)
			name := testenv.DatabaseName(t)
			// A TTL no slow machine outlasts: the frontend must still hold
			// its lock when it writes the Resources item.
			require.NoError(t, frontend.CreateSchema(ctx, cosmos.Endpoint, cosmos.Key, name, time.Minute))
			fe, err := frontend.New(cosmos.Endpoint, cosmos.Key, name)
			require.NoError(t, err)
			db, err := database.NewCosmosClient(database.CosmosConfig{
				Endpoint: cosmos.Endpoint, Database: name, Key: cosmos.Key, InsecureSkipVerify: true,
				OperationsContainer: frontend.OperationsContainer, ResourcesContainer: frontend.ResourcesContainer,
				LocksContainer: frontend.LocksContainer, BillingContainer: frontend.BillingContainer,
			})
			require.NoError(t, err)
			cs := clusterservicetesting.New(nil)
			if tc.cs != "" {
				cs.SetStatus(clusterCS, http.StatusOK, tc.cs)
			}
			srv := httptest.NewServer(cs)
			t.Cleanup(srv.Close)
			client, err := clusterservice.NewClient(clusterservice.Config{URL: srv.URL})
			require.NoError(t, err)
			t.Cleanup(func() { _ = client.Close() })
			locks := &lockMet{LockStore: db.Locks(), met: make(chan struct{})}
			fx := &fixture{fn: poll.New(poll.Config{
				DB: db, Cluster: client,
				Locker:   lock.New(locks, lock.Options{Wait: 30 * time.Second, RetryInterval: 20 * time.Millisecond}),
				Notifier: arm.NewNotifier(true), Owner: "opstatus-test", Location: "eastus", Interval: time.Hour,
			})}
			for _, r := range tc.before {
				require.NoError(t, fe.PutResource(ctx, r))
			}

			// The frontend's request: lock, operation, [poll], Resources, unlock.
			l, ok, err := fe.TryLock(ctx, sub, "frontend")
			require.NoError(t, err)
			require.True(t, ok)
			now := time.Now().UTC()
			require.NoError(t, fe.PutOperation(ctx, frontend.Operation{ID: "op", PartitionKey: sub, Request: string(tc.request),
				Status: tc.status, ExternalID: clusterKey, InternalID: clusterCS, StartTime: now, LastTransitionTime: now}))
			outcome := make(chan poll.Outcome, 1)
			go func() { outcome <- fx.poll(t, "op") }()
			select {
			case <-locks.met:
			case o := <-outcome:
				require.Failf(t, "poll never waited for the frontend's lock", "outcome %s", o)
			}
			l, err = fe.Renew(ctx, l)
			require.NoError(t, err, "the frontend still holds its lock")
			state := "Accepted"
			if tc.request == arm.RequestDelete {
				state = "Deleting"
			}
			require.NoError(t, fe.PutResource(ctx, frontend.Resource{ID: "r1", PartitionKey: sub, Key: clusterKey, InternalID: clusterCS,
				ActiveOperationID: "op", ProvisioningState: state}))
			require.NoError(t, fe.Unlock(ctx, l))

			<-outcome
			op, err := db.GetOperation(ctx, sub, "op")
			require.NoError(t, err)
			require.Equal(t, tc.want, op.Status)
			got := map[string][2]string{}
			for _, r := range append(tc.before, frontend.Resource{ID: "r1"}) {
				item, err := fe.Resource(ctx, sub, r.ID)
				require.NoError(t, err)
				if item != nil {
					active, _ := item["activeOperationId"].(string)
					got[item["key"].(string)] = [2]string{item["provisioningState"].(string), active}
				}
			}
			require.Equal(t, tc.resources, got, "the Resources items after poll: provisioningState, activeOperationId")
		})
	}
}

// What a change costs, and what of it the lock covers: the Resources item
// read before the lock is written on, with If-Match, when it follows the
// operation; a read that leads to no such write is made again under the
// lock, and a finished delete reads only under it. Lock.TTL (once a
// process) and renewals are left out.
func TestChangeRequestsAndTheLock(t *testing.T) {
	const (
		poolKey = clusterKey + "/nodePools/np1"
		poolCS  = clusterCS + "/node_pools/np1"
	)
	for _, tc := range []struct {
		name     string
		op       database.Operation
		resource *database.Resource
		cs       string // the status; empty for Cluster Service's 404
		want     []databasetesting.Op
	}{{
		name:     "the item read before the lock follows the operation",
		op:       database.Operation{Request: arm.RequestCreate, Status: arm.ProvisioningStateAccepted},
		resource: &database.Resource{Key: clusterKey, ActiveOperationID: "op"},
		cs:       clusterStatus("installing"),
		want:     []databasetesting.Op{databasetesting.OpGetOperation, databasetesting.OpGetResource, databasetesting.OpLockCreate, databasetesting.OpReplaceResource, databasetesting.OpReplaceOperation, databasetesting.OpLockDelete},
	}, {
		name: "no item before the lock",
		op:   database.Operation{Request: arm.RequestCreate, Status: arm.ProvisioningStateAccepted},
		cs:   clusterStatus("installing"),
		want: []databasetesting.Op{databasetesting.OpGetOperation, databasetesting.OpGetResource, databasetesting.OpLockCreate, databasetesting.OpGetResource, databasetesting.OpReplaceOperation, databasetesting.OpLockDelete},
	}, {
		name:     "another operation's item before the lock",
		op:       database.Operation{Request: arm.RequestUpdate, Status: arm.ProvisioningStateAccepted},
		resource: &database.Resource{Key: clusterKey, ActiveOperationID: "previous"},
		cs:       clusterStatus("ready"),
		want:     []databasetesting.Op{databasetesting.OpGetOperation, databasetesting.OpGetResource, databasetesting.OpLockCreate, databasetesting.OpGetResource, databasetesting.OpReplaceOperation, databasetesting.OpLockDelete},
	}, {
		name:     "a finished delete",
		op:       database.Operation{Request: arm.RequestDelete, Status: arm.ProvisioningStateDeleting, ExternalID: poolKey, InternalID: poolCS},
		resource: &database.Resource{Key: poolKey, ActiveOperationID: "op"},
		want:     []databasetesting.Op{databasetesting.OpGetOperation, databasetesting.OpLockCreate, databasetesting.OpGetResource, databasetesting.OpChildResources, databasetesting.OpDeleteResource, databasetesting.OpReplaceOperation, databasetesting.OpLockDelete},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			tc.op.ID = "op"
			f.putOp(tc.op)
			if r := tc.resource; r != nil {
				r.ID, r.PartitionKey, r.ProvisioningState = "r1", sub, arm.ProvisioningStateAccepted
				f.db.PutResource(r)
			}
			if tc.cs != "" {
				f.cs.SetStatus(f.op(t, "op").InternalID, http.StatusOK, tc.cs)
			}
			var mu sync.Mutex
			var calls []databasetesting.Op
			f.db.Hook = func(call databasetesting.Op) error {
				mu.Lock()
				defer mu.Unlock()
				if call != databasetesting.OpLockTTL && call != databasetesting.OpLockRenew {
					calls = append(calls, call)
				}
				return nil
			}
			require.NotEqual(t, poll.OutcomeDeferred, f.poll(t, "op"))
			require.Equal(t, tc.want, calls)
		})
	}
}
