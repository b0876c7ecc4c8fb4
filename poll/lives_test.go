package poll_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

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

// The second life of the cluster of clusterKey: re-created under the same
// resource ID, it has another Cluster Service id.
const (
	secondCS     = "/api/aro_hcp/v1alpha1/clusters/def"
	secondObject = `{"kind":"Cluster","id":"def","creation_timestamp":"2026-11-30T11:40:00Z","azure":{"managed_resource_group_name":"def-managed"}}`
)

var secondCreated = time.Date(2026, 11, 30, 11, 40, 0, 0, time.UTC)

// world is a database a billing test runs against, the in-memory one or
// the Cosmos test server's, with the frontend's writes and the billing
// items as stored.
type world struct {
	db       database.DBClient
	putOp    func(t *testing.T, op database.Operation)
	putRes   func(t *testing.T, id, internalID, active string)
	putBill  func(t *testing.T, b frontend.Billing)
	allBills func(t *testing.T) []*database.Billing
}

func memoryWorld(t *testing.T) world {
	mem := databasetesting.NewMemoryClient(5 * time.Second)
	return world{
		db:    mem,
		putOp: func(t *testing.T, op database.Operation) { mem.PutOperation(&op) },
		putRes: func(t *testing.T, id, internalID, active string) {
			mem.PutResource(&database.Resource{ID: id, PartitionKey: sub, Key: clusterKey, InternalID: internalID,
				ActiveOperationID: active, ProvisioningState: arm.ProvisioningStateAccepted})
		},
		putBill: func(t *testing.T, b frontend.Billing) {
			body, err := json.Marshal(b)
			require.NoError(t, err)
			mem.PutRawBilling(body)
		},
		allBills: func(t *testing.T) []*database.Billing { return mem.BillingItems() },
	}
}

// frontendDB makes a database of the frontend's containers on the shared
// Cosmos test server: the frontend stand-in that writes to it, and
// opstatus's client of it.
func frontendDB(tb testing.TB) (*frontend.Frontend, *database.CosmosClient) {
	testenv.NeedsServers(tb)
	cosmos := testenv.SharedCosmos(tb)
	name := testenv.DatabaseName(tb)
	require.NoError(tb, frontend.CreateSchema(tb.Context(), cosmos.Endpoint, cosmos.Key, name, 5*time.Second))
	fe, err := frontend.New(cosmos.Endpoint, cosmos.Key, name)
	require.NoError(tb, err)
	db, err := database.NewCosmosClient(database.CosmosConfig{
		Endpoint: cosmos.Endpoint, Database: name, Key: cosmos.Key, InsecureSkipVerify: true,
		OperationsContainer: frontend.OperationsContainer, ResourcesContainer: frontend.ResourcesContainer,
		LocksContainer: frontend.LocksContainer, BillingContainer: frontend.BillingContainer,
	})
	require.NoError(tb, err)
	return fe, db
}

func cosmosWorld(t *testing.T) world {
	fe, db := frontendDB(t)
	return world{
		db: db,
		putOp: func(t *testing.T, op database.Operation) {
			body, err := json.Marshal(op)
			require.NoError(t, err)
			require.NoError(t, fe.PutRawOperation(t.Context(), op.PartitionKey, body))
		},
		putRes: func(t *testing.T, id, internalID, active string) {
			require.NoError(t, fe.PutResource(t.Context(), frontend.Resource{ID: id, PartitionKey: sub, Key: clusterKey,
				InternalID: internalID, ActiveOperationID: active, ProvisioningState: "Accepted"}))
		},
		putBill: func(t *testing.T, b frontend.Billing) { require.NoError(t, fe.PutBilling(t.Context(), b)) },
		allBills: func(t *testing.T) []*database.Billing {
			items, err := fe.BillingItems(t.Context(), sub)
			require.NoError(t, err)
			var out []*database.Billing
			for _, it := range items {
				body, err := json.Marshal(it)
				require.NoError(t, err)
				b := &database.Billing{}
				require.NoError(t, b.UnmarshalJSON(body))
				out = append(out, b)
			}
			return out
		},
	}
}

// errKilled is what a killed write returns: the process died there.
var errKilled = errors.New("killed")

// killer kills the process once at one write: before it is sent, or,
// with after, once it is done and before its answer is read.
type killer struct {
	database.DBClient
	mu    sync.Mutex
	at    string
	after bool
}

func (k *killer) killAt(call string, after bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.at, k.after = call, after
}

func (k *killer) dies(call string, after bool) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.at != call || k.after != after {
		return false
	}
	k.at = ""
	return true
}

func killed[T any](k *killer, call string, write func() (T, error)) (T, error) {
	var zero T
	if k.dies(call, false) {
		return zero, errKilled
	}
	v, err := write()
	if err == nil && k.dies(call, true) {
		return zero, errKilled
	}
	return v, err
}

func (k *killer) CreateBilling(ctx context.Context, b *database.Billing) (*database.Billing, error) {
	return killed(k, "CreateBilling", func() (*database.Billing, error) { return k.DBClient.CreateBilling(ctx, b) })
}

func (k *killer) ReplaceBilling(ctx context.Context, b *database.Billing) (*database.Billing, error) {
	return killed(k, "ReplaceBilling", func() (*database.Billing, error) { return k.DBClient.ReplaceBilling(ctx, b) })
}

func (k *killer) ReplaceOperation(ctx context.Context, op *database.Operation) (*database.Operation, error) {
	return killed(k, "ReplaceOperation", func() (*database.Operation, error) { return k.DBClient.ReplaceOperation(ctx, op) })
}

func (k *killer) DeleteResource(ctx context.Context, r database.ResourceRef) error {
	_, err := killed(k, "DeleteResource", func() (struct{}, error) { return struct{}{}, k.DBClient.DeleteResource(ctx, r) })
	return err
}

// lifeFixture polls one world's operations with a Cluster Service that
// knows both lives of the cluster of clusterKey.
type lifeFixture struct {
	world
	kill *killer
	cs   *clusterservicetesting.Fake
	fn   *poll.Function
	now  time.Time
}

func newLifeFixture(t *testing.T, w world) *lifeFixture {
	f := &lifeFixture{world: w, kill: &killer{DBClient: w.db}, now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC),
		cs: clusterservicetesting.New(map[string]clusterservicetesting.Reply{clusterCS: {Code: http.StatusOK, Body: clusterObject}, secondCS: {Code: http.StatusOK, Body: secondObject}})}
	srv := httptest.NewServer(f.cs)
	t.Cleanup(srv.Close)
	client, err := clusterservice.NewClient(clusterservice.Config{URL: srv.URL})
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	f.fn = poll.New(poll.Config{
		DB:       f.kill,
		Cluster:  client,
		Locker:   lock.New(w.db.Locks(), lock.Options{Wait: 2 * time.Second, RetryInterval: 50 * time.Millisecond}),
		Notifier: arm.NewNotifier(true),
		Owner:    "opstatus-test",
		Location: "eastus",
		Now:      func() time.Time { return f.now },
		Interval: 10 * time.Second,
	})
	return f
}

// poll polls opID, then checks that the resource ID has at most one open
// billing item, whatever the poll did.
func (f *lifeFixture) poll(t *testing.T, opID string) poll.Outcome {
	t.Helper()
	fx := &fixture{fn: f.fn}
	outcome := fx.poll(t, opID)
	require.LessOrEqual(t, len(f.open(t)), 1, "at most one open billing item per resource ID, after %s's poll (%s)", opID, outcome)
	return outcome
}

func (f *lifeFixture) open(t *testing.T) []*database.Billing {
	var out []*database.Billing
	for _, b := range f.allBills(t) {
		if b.DeletionTime == nil && strings.EqualFold(b.ResourceID, clusterKey) {
			out = append(out, b)
		}
	}
	return out
}

func (f *lifeFixture) bill(t *testing.T, id string) *database.Billing {
	t.Helper()
	for _, b := range f.allBills(t) {
		if b.ID == id {
			return b
		}
	}
	require.Failf(t, "no billing item", "%s", id)
	return nil
}

func (f *lifeFixture) status(t *testing.T, opID string) arm.ProvisioningState {
	t.Helper()
	op, err := f.db.GetOperation(t.Context(), sub, opID)
	require.NoError(t, err)
	return op.Status
}

// forEachWorld runs test against the in-memory database and, unless
// -short, the Cosmos test server.
func forEachWorld(t *testing.T, test func(t *testing.T, w world)) {
	for name, open := range map[string]func(*testing.T) world{"memory": memoryWorld, "cosmos": cosmosWorld} {
		t.Run(name, func(t *testing.T) { test(t, open(t)) })
	}
}

// A cluster's Delete closes the billing item of the cluster it deleted,
// never that of the cluster re-created under the same resource ID: here
// the Delete's process is killed after it removed the Resources item and
// before it wrote the operation, the frontend takes a Create of the same
// resource, which succeeds, and only then does a later scan finish the
// Delete.
func TestDeleteClosesOnlyTheLifeItDeleted(t *testing.T) {
	forEachWorld(t, func(t *testing.T, w world) {
		f := newLifeFixture(t, w)
		first, second := database.BillingID(clusterKey, "abc"), database.BillingID(clusterKey, "def")
		f.putOp(t, database.Operation{ID: "create1", PartitionKey: sub, Request: arm.RequestCreate, Status: arm.ProvisioningStateProvisioning,
			ExternalID: clusterKey, InternalID: clusterCS, TenantID: "tenant-1"})
		f.putRes(t, "r1", clusterCS, "create1")
		f.cs.SetStatus(clusterCS, http.StatusOK, clusterStatus("ready"))
		require.Equal(t, poll.OutcomeUpdated, f.poll(t, "create1"))
		require.Equal(t, []string{first}, billingIDsOf(f.open(t)))

		f.now = f.now.Add(time.Minute)
		closedAt := f.now
		f.putOp(t, database.Operation{ID: "del1", PartitionKey: sub, Request: arm.RequestDelete, Status: arm.ProvisioningStateDeleting,
			ExternalID: clusterKey, InternalID: clusterCS, StartTime: f.now})
		f.putRes(t, "r1", clusterCS, "del1")
		f.cs.Delete(clusterCS + "/status") // Cluster Service's own 404: deleted
		f.kill.killAt("ReplaceOperation", false)
		require.Equal(t, poll.OutcomeDeferred, f.poll(t, "del1"))
		require.Equal(t, arm.ProvisioningStateDeleting, f.status(t, "del1"))
		require.Empty(t, f.open(t), "the deleted life's item closed before the Resources item went")
		_, err := f.db.GetResource(t.Context(), sub, clusterKey)
		require.ErrorIs(t, err, database.ErrNotFound)

		// The frontend sees no resource and takes a Create: a new life.
		f.now = f.now.Add(5 * time.Minute)
		f.putOp(t, database.Operation{ID: "create2", PartitionKey: sub, Request: arm.RequestCreate, Status: arm.ProvisioningStateAccepted,
			ExternalID: clusterKey, InternalID: secondCS, TenantID: "tenant-1"})
		f.putRes(t, "r2", secondCS, "create2")
		f.cs.SetStatus(secondCS, http.StatusOK, `{"kind":"ClusterStatus","id":"def","state":"ready"}`)
		require.Equal(t, poll.OutcomeUpdated, f.poll(t, "create2"))
		require.Equal(t, []string{second}, billingIDsOf(f.open(t)))

		f.now = f.now.Add(5 * time.Minute)
		require.Equal(t, poll.OutcomeDeleted, f.poll(t, "del1"))
		require.Equal(t, arm.ProvisioningStateSucceeded, f.status(t, "del1"))
		require.Equal(t, []string{second}, billingIDsOf(f.open(t)), "the new life is still billed")
		require.True(t, closedAt.Equal(*f.bill(t, first).DeletionTime), "the deleted life closed once")
		r, err := f.db.GetResource(t.Context(), sub, clusterKey)
		require.NoError(t, err, "the new life's Resources item is kept")
		require.Equal(t, "r2", r.ID)
	})
}

// An open item of an earlier life that was never closed is closed, not
// adopted, when the new life's item is written, ending when the new life
// began; however the process is killed on the way, the resource ID never
// has two open items, and the next poll finishes the job. The earlier
// life's item is opstatus's, or another writer's (a random id, as
// ARO-HCP's backend names them) created before this life.
func TestEarlierLifeIsClosedWhenTheNewOneIsBilled(t *testing.T) {
	for _, earlier := range []struct{ name, id string }{
		{"opstatus's", database.BillingID(clusterKey, "abc")},
		{"another writer's", "3f2a6c1e-1b2d-4c3e-9f40-5a6b7c8d9e0f"},
	} {
		for _, kill := range []struct {
			call  string
			after bool
		}{{}, {"ReplaceBilling", false}, {"ReplaceBilling", true}, {"CreateBilling", false}, {"CreateBilling", true},
			{"ReplaceOperation", false}, {"ReplaceOperation", true}} {
			name := "no kill"
			if kill.call != "" {
				name = "killed before " + kill.call
				if kill.after {
					name = "killed after " + kill.call
				}
			}
			t.Run(earlier.name+"/"+name, func(t *testing.T) {
				forEachWorld(t, func(t *testing.T, w world) {
					f := newLifeFixture(t, w)
					first, second := earlier.id, database.BillingID(clusterKey, "def")
					f.putBill(t, frontend.Billing{ID: first, SubscriptionID: sub, ResourceID: clusterKey, TenantID: "tenant-1",
						CreationTime: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), Extra: map[string]any{"kept": true}})
					f.putOp(t, database.Operation{ID: "create2", PartitionKey: sub, Request: arm.RequestCreate, Status: arm.ProvisioningStateProvisioning,
						ExternalID: clusterKey, InternalID: secondCS, TenantID: "tenant-1"})
					f.cs.SetStatus(secondCS, http.StatusOK, `{"kind":"ClusterStatus","id":"def","state":"ready"}`)

					f.kill.killAt(kill.call, kill.after)
					f.poll(t, "create2")
					f.now = f.now.Add(time.Minute)
					f.poll(t, "create2")
					require.Equal(t, arm.ProvisioningStateSucceeded, f.status(t, "create2"))
					require.Equal(t, []string{second}, billingIDsOf(f.open(t)))
					require.Len(t, f.allBills(t), 2)
					old := f.bill(t, first)
					require.True(t, secondCreated.Equal(*old.DeletionTime), "the earlier life ends when the new one began: %s", old.DeletionTime)
					b := f.bill(t, second)
					require.True(t, secondCreated.Equal(b.CreationTime))
					require.Equal(t, "/subscriptions/"+sub+"/resourceGroups/def-managed", b.ManagedResourceGroup, "the new life's")
				})
			})
		}
	}
}

// An open item of another writer whose creationTime is the cluster's
// creation_timestamp, to the second, is this life's (the backend wrote it
// before the handover to opstatus): it is adopted, and no second item
// written.
func TestForeignBillingItemOfThisLifeIsAdopted(t *testing.T) {
	forEachWorld(t, func(t *testing.T, w world) {
		f := newLifeFixture(t, w)
		foreign := "3f2a6c1e-1b2d-4c3e-9f40-5a6b7c8d9e0f"
		f.putBill(t, frontend.Billing{ID: foreign, SubscriptionID: sub, ResourceID: strings.ToUpper(clusterKey),
			CreationTime: secondCreated.Add(700 * time.Millisecond), ManagedResourceGroup: "/subscriptions/" + sub + "/resourceGroups/def-managed"})
		f.putOp(t, database.Operation{ID: "create2", PartitionKey: sub, Request: arm.RequestCreate, Status: arm.ProvisioningStateProvisioning,
			ExternalID: clusterKey, InternalID: secondCS})
		f.cs.SetStatus(secondCS, http.StatusOK, `{"kind":"ClusterStatus","id":"def","state":"ready"}`)
		require.Equal(t, poll.OutcomeUpdated, f.poll(t, "create2"))
		require.Equal(t, []string{foreign}, billingIDsOf(f.open(t)))
		require.Len(t, f.allBills(t), 1)
	})
}

// An open item of another writer (ARO-HCP's backend before opstatus) is
// of an earlier life when an item of opstatus's is beside it, and closed.
func TestForeignBillingItemBesideAnEarlierLifeIsClosed(t *testing.T) {
	forEachWorld(t, func(t *testing.T, w world) {
		f := newLifeFixture(t, w)
		first, second := database.BillingID(clusterKey, "abc"), database.BillingID(clusterKey, "def")
		for _, id := range []string{"3f2a6c1e-1b2d-4c3e-9f40-5a6b7c8d9e0f", first} {
			f.putBill(t, frontend.Billing{ID: id, SubscriptionID: sub, ResourceID: clusterKey,
				CreationTime: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)})
		}
		f.putOp(t, database.Operation{ID: "create2", PartitionKey: sub, Request: arm.RequestCreate, Status: arm.ProvisioningStateProvisioning,
			ExternalID: clusterKey, InternalID: secondCS})
		f.cs.SetStatus(secondCS, http.StatusOK, `{"kind":"ClusterStatus","id":"def","state":"ready"}`)
		require.Equal(t, poll.OutcomeUpdated, f.poll(t, "create2"))
		require.Equal(t, []string{second}, billingIDsOf(f.open(t)))
		require.Len(t, f.allBills(t), 3)
	})
}

func billingIDsOf(items []*database.Billing) []string {
	ids := make([]string, len(items))
	for i, b := range items {
		ids[i] = b.ID
	}
	return ids
}
