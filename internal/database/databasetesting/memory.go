// Package databasetesting holds the test doubles of package database: an
// in-memory DBClient that behaves as the Cosmos one does, and the fixtures
// that fill it the way the frontend would. Only tests import it.
package databasetesting

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"

	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/database"
)

// MemoryClient is an in-memory database.DBClient that answers as
// database.CosmosClient does against Cosmos DB: the same items, etags,
// sentinel errors, partitions, query filters and lock expiry. Items are
// stored as JSON, so fields opstatus does not know round-trip as they do
// through Cosmos.
type MemoryClient struct {
	mu         sync.Mutex
	seq        int
	operations map[itemKey]memItem
	resources  map[itemKey]memItem
	locks      map[string]memItem // the Locks container's partition key is the id
	billing    memBilling
	// defaultTTL is the Locks container's DefaultTimeToLive in seconds:
	// 0 when it has none, -1 when items expire only by their own ttl.
	defaultTTL int

	// OperationsPartition is where the Operations items are, as
	// database.CosmosConfig's: by subscription (zero) or in one fixed
	// partition. Set it before the first call.
	OperationsPartition database.OperationsPartition
	// BillingKey is the Billing container's partition key path:
	// /subscriptionId when zero, or /partitionKey as ARO-HCP created it in
	// 2024-10. Set it before the first call.
	BillingKey database.BillingKey

	// Hook, when set, runs before every call with the call's Op; an error
	// it returns fails the call. Tests use it to count calls and inject
	// faults.
	Hook func(op Op) error
}

// Op names a MemoryClient call for Hook: a DBClient method, or a
// LockStore one (Lock.*).
type Op string

// The calls, each by its method's name.
const (
	OpPendingOperations Op = "PendingOperations"
	OpGetOperation      Op = "GetOperation"
	OpReplaceOperation  Op = "ReplaceOperation"
	OpGetResource       Op = "GetResource"
	OpResourceHeads     Op = "ResourceHeads"
	OpChildResources    Op = "ChildResources"
	OpReplaceResource   Op = "ReplaceResource"
	OpDeleteResource    Op = "DeleteResource"
	OpCreateBilling     Op = "CreateBilling"
	OpOpenBilling       Op = "OpenBilling"
	OpReplaceBilling    Op = "ReplaceBilling"
	OpLockTTL           Op = "Lock.TTL"
	OpLockCreate        Op = "Lock.Create"
	OpLockRenew         Op = "Lock.Renew"
	OpLockGet           Op = "Lock.Get"
	OpLockDelete        Op = "Lock.Delete"
)

// itemKey names an item as Cosmos DB does: by partition and id.
type itemKey struct {
	partition string
	id        string
}

type memItem struct {
	body    []byte // with the system fields _etag and _ts
	etag    azcore.ETag
	expires time.Time // zero: never
}

var _ database.DBClient = (*MemoryClient)(nil)

// NewMemoryClient returns an empty store whose Locks container has lockTTL
// as its DefaultTimeToLive, in whole seconds as Cosmos DB keeps it. A zero
// lockTTL is a container without one, where no lock item expires; a
// negative one is DefaultTimeToLive -1, where lock items expire by their
// own ttl alone.
func NewMemoryClient(lockTTL time.Duration) *MemoryClient {
	defaultTTL := int(lockTTL / time.Second)
	if lockTTL < 0 {
		defaultTTL = -1
	}
	return &MemoryClient{
		operations: map[itemKey]memItem{},
		resources:  map[itemKey]memItem{},
		locks:      map[string]memItem{},
		defaultTTL: defaultTTL,
	}
}

// lookup is the key of a point operation, whose partition is the
// lowercased subscription ID as CosmosClient sends it.
func lookup(subscriptionID, id string) itemKey {
	return itemKey{partition: strings.ToLower(subscriptionID), id: id}
}

// keyOf returns the key Cosmos DB files body under, the item's id and the
// partition key in its field partitionField; a partition key that is not a
// string (or is missing) gets a partition that no lowercased subscription
// ID names. It panics, as Cosmos DB answers 400, when body is not a JSON
// object with an id.
func keyOf(body []byte, partitionField string) itemKey {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		panic(fmt.Sprintf("databasetesting: an item must be a JSON object: %v", err))
	}
	var id string
	if err := json.Unmarshal(fields["id"], &id); err != nil || id == "" {
		panic(fmt.Sprintf("databasetesting: an item must have a string id: %.200s", body))
	}
	var partition string
	if err := json.Unmarshal(fields[partitionField], &partition); err != nil {
		partition = "\x00" + string(fields[partitionField])
	}
	return itemKey{partition: partition, id: id}
}

// partitionKeyField holds the partition key of Operations and Resources
// items.
const partitionKeyField = "partitionKey"

// always is the items of a container that is never missing, for replace.
func always(items map[itemKey]memItem) func() (map[itemKey]memItem, error) {
	return func() (map[itemKey]memItem, error) { return items, nil }
}

func (m *MemoryClient) hook(op Op) error {
	if m.Hook == nil {
		return nil
	}
	if err := m.Hook(op); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

// begin runs the hook, then fails the call as the Cosmos client's request
// fails when ctx is done.
func (m *MemoryClient) begin(ctx context.Context, op Op) error {
	if err := m.hook(op); err != nil {
		return err
	}
	return ctxErr(ctx)
}

// ctxErr returns ctx's error as the Cosmos client reports it: a canceled
// context as it is, an expired one as ErrUnavailable too.
func ctxErr(ctx context.Context) error {
	err := ctx.Err()
	if err == nil || errors.Is(err, context.Canceled) {
		return err
	}
	return fmt.Errorf("%w: %w", database.ErrUnavailable, err)
}

// stamp returns body with a new _etag and _ts, as Cosmos DB writes it at
// now, and the etag. The caller holds m.mu.
func (m *MemoryClient) stamp(body []byte, now time.Time) ([]byte, azcore.ETag, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return nil, "", err
	}
	m.seq++
	etag := azcore.ETag(`"` + strconv.Itoa(m.seq) + `"`)
	fields["_etag"], _ = json.Marshal(string(etag))
	fields["_ts"], _ = json.Marshal(now.Unix())
	body, err := json.Marshal(fields)
	return body, etag, err
}

// upsert stores body as the frontend would, without an etag check. The
// caller holds m.mu.
func (m *MemoryClient) upsert(items map[itemKey]memItem, body []byte) {
	k := keyOf(body, partitionKeyField)
	body, etag, err := m.stamp(body, time.Now())
	if err != nil {
		panic(fmt.Sprintf("databasetesting: %v", err))
	}
	items[k] = memItem{body: body, etag: etag}
}

func mustMarshal(v any) []byte {
	body, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("databasetesting: %v", err))
	}
	return body
}

// PutOperation stores op as the frontend would: its partitionKey
// lowercased, with no etag check.
func (m *MemoryClient) PutOperation(op *database.Operation) {
	o := *op
	o.PartitionKey = strings.ToLower(o.PartitionKey)
	m.PutRawOperation(mustMarshal(o))
}

// PutResource stores r as the frontend would: its partitionKey lowercased,
// with no etag check.
func (m *MemoryClient) PutResource(r *database.Resource) {
	res := *r
	res.PartitionKey = strings.ToLower(res.PartitionKey)
	m.PutRawResource(mustMarshal(res))
}

// PutRawOperation stores body, any JSON object with a string id, as an
// operation item in the partition its partitionKey names, with no etag
// check: for tests of ill-typed items. It panics when body is not such an
// object. Unlike Cosmos DB it takes any id, '/' included, so that tests
// can show what the handler does with ids it cannot use.
func (m *MemoryClient) PutRawOperation(body []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.upsert(m.operations, body)
}

// PutRawResource is PutRawOperation for a resource item.
func (m *MemoryClient) PutRawResource(body []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.upsert(m.resources, body)
}

// RawOperation returns the operation item id of subscriptionID (in its
// partition, or in the fixed one) as stored, with its _etag and _ts, or
// nil when there is none.
func (m *MemoryClient) RawOperation(subscriptionID, id string) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.operations[m.operationKey(subscriptionID, id)].body)
}

// operationKey is the key of subscriptionID's operation id, as
// CosmosClient reads it.
func (m *MemoryClient) operationKey(subscriptionID, id string) itemKey {
	return itemKey{partition: m.OperationsPartition.Key(subscriptionID), id: id}
}

// RawResource returns the resource item id of subscriptionID as stored,
// or nil when there is none.
func (m *MemoryClient) RawResource(subscriptionID, id string) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.resources[lookup(subscriptionID, id)].body)
}

// Resources returns every resource item that decodes, sorted by key, for
// assertions.
func (m *MemoryClient) Resources() []*database.Resource {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*database.Resource
	for _, it := range m.resources {
		r := &database.Resource{}
		if r.UnmarshalJSON(it.body) == nil {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b *database.Resource) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// PendingOperations filters every operation, or those of the fixed
// partition, as the Cosmos query does, and reads what it projects: an item
// listed whose id or partitionKey is not a non-empty string is reported as
// malformed, one whose subscription cannot be told with
// ErrNoSubscription.
func (m *MemoryClient) PendingOperations(ctx context.Context) iter.Seq2[database.PendingOperation, error] {
	return func(yield func(database.PendingOperation, error) bool) {
		if err := m.begin(ctx, OpPendingOperations); err != nil {
			yield(database.PendingOperation{}, fmt.Errorf("query pending operations: %w", err))
			return
		}
		type listed struct {
			key  itemKey
			body []byte
		}
		m.mu.Lock()
		var items []listed
		for k, it := range m.operations {
			if m.OperationsPartition.Fixed() && k.partition != string(m.OperationsPartition) {
				continue
			}
			if pending(it.body) {
				items = append(items, listed{k, it.body})
			}
		}
		m.mu.Unlock()
		// One order from call to call, as the Cosmos query keeps.
		slices.SortFunc(items, func(a, b listed) int {
			return cmpKeys(a.key, b.key)
		})
		for _, it := range items {
			if !yield(m.OperationsPartition.ReadPending(it.body)) {
				return
			}
		}
	}
}

func cmpKeys(a, b itemKey) int {
	if c := strings.Compare(a.partition, b.partition); c != 0 {
		return c
	}
	return strings.Compare(a.id, b.id)
}

// pending is the filter of the Cosmos query:
//
//	c.status NOT IN ('Succeeded','Failed','Canceled')
//	OR (IS_STRING(c.notificationUri) AND LENGTH(c.notificationUri) > 0)
//
// A status that is missing makes NOT IN undefined, not true; one of any
// other type, null included, is not in the list, so NOT IN is true.
func pending(body []byte) bool {
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) != nil {
		return false
	}
	if raw, ok := fields["status"]; ok {
		var status string
		if json.Unmarshal(raw, &status) != nil || !slices.Contains(arm.TerminalStates, arm.ProvisioningState(status)) {
			return true
		}
	}
	var uri string
	return json.Unmarshal(fields["notificationUri"], &uri) == nil && uri != ""
}

// GetOperation point-reads one operation in the partition of its
// subscription, or in the fixed one.
func (m *MemoryClient) GetOperation(ctx context.Context, subscriptionID, operationID string) (*database.Operation, error) {
	if err := m.begin(ctx, OpGetOperation); err != nil {
		return nil, fmt.Errorf("read operation %s: %w", operationID, err)
	}
	m.mu.Lock()
	it, ok := m.operations[m.operationKey(subscriptionID, operationID)]
	m.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("read operation %s: %w", operationID, database.ErrNotFound)
	}
	return m.OperationsPartition.ReadOperation(it.body, subscriptionID)
}

// ReplaceOperation replaces op if its item still has op.ETag, in the
// partition of its partitionKey lowercased, or in the fixed one.
func (m *MemoryClient) ReplaceOperation(ctx context.Context, op *database.Operation) (*database.Operation, error) {
	out := &database.Operation{}
	k := m.operationKey(op.PartitionKey, op.ID)
	if err := m.replaceAt(ctx, OpReplaceOperation, always(m.operations), partitionKeyField, k, op, op.ETag, out); err != nil {
		return nil, fmt.Errorf("replace operation %s: %w", op.ID, err)
	}
	if err := m.OperationsPartition.Tell(out); err != nil {
		return nil, err
	}
	return out, nil
}

// replace is a Cosmos replace with If-Match in the subscription's
// partition (see replaceAt).
func (m *MemoryClient) replace(ctx context.Context, call Op, items func() (map[itemKey]memItem, error),
	partitionField, subscriptionID, id string, v any, etag azcore.ETag, out json.Unmarshaler) error {
	return m.replaceAt(ctx, call, items, partitionField, lookup(subscriptionID, id), v, etag, out)
}

// replaceAt is a Cosmos replace of item k with If-Match: 404 before 412,
// and a body whose partition key (its field partitionField) is not the
// partition it is sent to refused (Cosmos DB's 400, which carries no
// sentinel). items returns the container's items, or the error of a
// missing container; it runs under m.mu.
func (m *MemoryClient) replaceAt(ctx context.Context, call Op, items func() (map[itemKey]memItem, error),
	partitionField string, k itemKey, v any, etag azcore.ETag, out json.Unmarshaler) error {
	id := k.id
	if err := m.hook(call); err != nil {
		return err
	}
	// The Cosmos client refuses this before it sends a request.
	if etag == "" {
		return fmt.Errorf("item %s has no etag: read it before writing", id)
	}
	if err := ctxErr(ctx); err != nil {
		return err
	}
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	all, err := items()
	if err != nil {
		return err
	}
	cur, ok := all[k]
	if !ok {
		return database.ErrNotFound
	}
	if !ifMatch(etag, cur.etag) {
		return database.ErrPreconditionFailed
	}
	if err := refusal(containers[call], body, partitionField, k); err != nil {
		return err
	}
	body, newETag, err := m.stamp(body, time.Now())
	if err != nil {
		return err
	}
	all[k] = memItem{body: body, etag: newETag}
	return out.UnmarshalJSON(body)
}

// containers names the container of each replace call, for refusals.
var containers = map[Op]string{
	OpReplaceOperation: "Operations", OpReplaceResource: "Resources", OpReplaceBilling: "Billing",
}

// maxItemBytes is the largest item Cosmos DB stores: 2 MB of JSON.
const maxItemBytes = 2 << 20

// refusal is Cosmos DB's answer to a write of body to item k of container
// that it refuses for good, or nil: 413 for an item over 2 MB, 400 for one
// whose partition key, its field partitionField, is not the partition it
// is sent to.
func refusal(container string, body []byte, partitionField string, k itemKey) error {
	if len(body) > maxItemBytes {
		return &database.RefusedError{Container: container, StatusCode: http.StatusRequestEntityTooLarge,
			Code: "RequestEntityTooLarge", Message: "Request size is too large"}
	}
	if written := keyOf(body, partitionField); written != k {
		return &database.RefusedError{Container: container, StatusCode: http.StatusBadRequest, Code: "BadRequest",
			Message: "PartitionKey extracted from document doesn't match the one specified in the header."}
	}
	return nil
}

// ifMatch reports whether an If-Match header of etag lets a write to an
// item with etag cur go on: Cosmos DB takes an empty one or "*" as no
// condition.
func ifMatch(etag, cur azcore.ETag) bool {
	return etag == "" || etag == azcore.ETagAny || etag == cur
}

// GetResource finds a resource by key, ignoring case. As the Cosmos query
// does, it matches by the key alone and then fails on an item that does not
// decode.
func (m *MemoryClient) GetResource(ctx context.Context, subscriptionID, key string) (*database.Resource, error) {
	if err := m.begin(ctx, OpGetResource); err != nil {
		return nil, fmt.Errorf("find resource %s: %w", key, err)
	}
	var found []*database.Resource
	for _, it := range m.findResources(subscriptionID, func(k string) bool { return strings.EqualFold(k, key) }) {
		r := &database.Resource{}
		if err := r.UnmarshalJSON(it.body); err != nil {
			return nil, fmt.Errorf("find resource %s: %w: %w", key, database.ErrMalformed, err)
		}
		found = append(found, r)
	}
	if len(found) == 0 {
		return nil, fmt.Errorf("find resource %s: %w", key, database.ErrNotFound)
	}
	if len(found) > 1 {
		return nil, fmt.Errorf("find resource %s: %d %w", key, len(found), database.ErrDuplicateKey)
	}
	return found[0], nil
}

// ResourceHeads lists the resources of key, whatever their other fields
// hold, as the Cosmos query's projection does.
func (m *MemoryClient) ResourceHeads(ctx context.Context, subscriptionID, key string) ([]database.ResourceHead, error) {
	if err := m.begin(ctx, OpResourceHeads); err != nil {
		return nil, fmt.Errorf("list resources of %s: %w", key, err)
	}
	var out []database.ResourceHead
	for _, it := range m.findResources(subscriptionID, func(k string) bool { return strings.EqualFold(k, key) }) {
		h, err := database.ReadResourceHead(it.body, subscriptionID)
		if err != nil {
			return nil, fmt.Errorf("list resources of %s: %w", key, err)
		}
		out = append(out, h)
	}
	return out, nil
}

// ChildResources lists the resources below key, whatever their other
// fields hold, as the Cosmos query's projection does.
func (m *MemoryClient) ChildResources(ctx context.Context, subscriptionID, key string) ([]database.ResourceRef, error) {
	if err := m.begin(ctx, OpChildResources); err != nil {
		return nil, fmt.Errorf("list children of %s: %w", key, err)
	}
	prefix := strings.ToLower(key + "/")
	var out []database.ResourceRef
	for _, it := range m.findResources(subscriptionID, func(k string) bool {
		return strings.HasPrefix(strings.ToLower(k), prefix)
	}) {
		out = append(out, database.ResourceRef{ID: it.id, PartitionKey: strings.ToLower(subscriptionID), Key: it.key, ETag: it.etag})
	}
	return out, nil
}

// foundResource is an item of findResources.
type foundResource struct {
	id, key string
	etag    azcore.ETag
	body    []byte
}

// findResources returns the items of the subscription's partition whose
// key, a string, matches, sorted by key. Only the key is decoded.
func (m *MemoryClient) findResources(subscriptionID string, match func(key string) bool) []foundResource {
	partition := strings.ToLower(subscriptionID)
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []foundResource
	for k, it := range m.resources {
		if k.partition != partition {
			continue
		}
		var fields struct {
			Key any `json:"key"`
		}
		_ = json.Unmarshal(it.body, &fields) // stored items are JSON objects
		if key, ok := fields.Key.(string); ok && match(key) {
			out = append(out, foundResource{id: k.id, key: key, etag: it.etag, body: it.body})
		}
	}
	slices.SortFunc(out, func(a, b foundResource) int { return strings.Compare(a.key, b.key) })
	return out
}

// ReplaceResource replaces r if its item still has r.ETag.
func (m *MemoryClient) ReplaceResource(ctx context.Context, r *database.Resource) (*database.Resource, error) {
	out := &database.Resource{}
	if err := m.replace(ctx, OpReplaceResource, always(m.resources), partitionKeyField, r.PartitionKey, r.ID, r, r.ETag, out); err != nil {
		return nil, fmt.Errorf("replace resource %s: %w", r.Key, err)
	}
	return out, nil
}

// DeleteResource deletes the item r names if it still has r.ETag.
func (m *MemoryClient) DeleteResource(ctx context.Context, r database.ResourceRef) error {
	if err := m.begin(ctx, OpDeleteResource); err != nil {
		return fmt.Errorf("delete resource %s: %w", r.Key, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	k := lookup(r.PartitionKey, r.ID)
	cur, ok := m.resources[k]
	if !ok {
		return fmt.Errorf("delete resource %s: %w", r.Key, database.ErrNotFound)
	}
	if !ifMatch(r.ETag, cur.etag) {
		return fmt.Errorf("delete resource %s: %w", r.Key, database.ErrPreconditionFailed)
	}
	delete(m.resources, k)
	return nil
}
