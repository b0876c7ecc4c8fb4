package database

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"

	"github.com/opstatus/opstatus/internal/arm"
)

// MemoryClient is an in-memory DBClient with the semantics of the Cosmos one
// (etags, 404/409/412, lock TTL), for unit tests of logic. Items are stored as
// JSON so unknown fields round-trip as they do through Cosmos.
type MemoryClient struct {
	mu         sync.Mutex
	seq        int
	operations map[string]memItem // partition/id
	resources  map[string]memItem
	locks      map[string]memItem
	lockTTL    time.Duration
	// Hook, when set, runs before every call with the call's name
	// ("GetOperation", "ReplaceResource", "Lock.Create", ...); an error it
	// returns fails the call. Tests use it to count calls and inject faults.
	Hook func(call string) error
}

type memItem struct {
	body    []byte
	etag    azcore.ETag
	expires time.Time // zero: never
}

var _ DBClient = (*MemoryClient)(nil)

// NewMemoryClient returns an empty store whose lock container has lockTTL.
func NewMemoryClient(lockTTL time.Duration) *MemoryClient {
	return &MemoryClient{
		operations: map[string]memItem{},
		resources:  map[string]memItem{},
		locks:      map[string]memItem{},
		lockTTL:    lockTTL,
	}
}

func key(partition, id string) string { return strings.ToLower(partition) + "/" + id }

func (m *MemoryClient) hook(call string) error {
	if m.Hook == nil {
		return nil
	}
	if err := m.Hook(call); err != nil {
		return fmt.Errorf("%s: %w", call, err)
	}
	return nil
}

func (m *MemoryClient) put(items map[string]memItem, k string, v any) (azcore.ETag, []byte, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return "", nil, err
	}
	m.seq++
	etag := azcore.ETag(`"` + strconv.Itoa(m.seq) + `"`)
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return "", nil, err
	}
	fields["_etag"], _ = json.Marshal(string(etag))
	fields["_ts"], _ = json.Marshal(time.Now().Unix())
	body, _ = json.Marshal(fields)
	items[k] = memItem{body: body, etag: etag}
	return etag, body, nil
}

// PutOperation stores op as the frontend would (no etag check).
func (m *MemoryClient) PutOperation(op *Operation) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, _, _ = m.put(m.operations, key(op.PartitionKey, op.ID), op)
}

// PutResource stores r as the frontend would (no etag check).
func (m *MemoryClient) PutResource(r *Resource) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, _, _ = m.put(m.resources, key(r.PartitionKey, r.ID), r)
}

// PutRaw stores a raw operation item, for tests of malformed items.
func (m *MemoryClient) PutRaw(partition, id string, body []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seq++
	m.operations[key(partition, id)] = memItem{body: body, etag: azcore.ETag(strconv.Itoa(m.seq))}
}

// PutRawResource stores a raw resource item, for tests of malformed items.
func (m *MemoryClient) PutRawResource(partition, id string, body []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seq++
	m.resources[key(partition, id)] = memItem{body: body, etag: azcore.ETag(strconv.Itoa(m.seq))}
}

// Resources returns every resource item, for assertions.
func (m *MemoryClient) Resources() []*Resource {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*Resource
	for _, it := range m.resources {
		r := &Resource{}
		if json.Unmarshal(it.body, r) == nil {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b *Resource) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// PendingOperations filters every operation as the Cosmos query does.
func (m *MemoryClient) PendingOperations(ctx context.Context) iter.Seq2[PendingOperation, error] {
	return func(yield func(PendingOperation, error) bool) {
		if err := m.hook("PendingOperations"); err != nil {
			yield(PendingOperation{}, err)
			return
		}
		m.mu.Lock()
		var pending []PendingOperation
		malformed := 0
		for _, it := range m.operations {
			var fields struct {
				ID              string `json:"id"`
				PartitionKey    string `json:"partitionKey"`
				Status          any    `json:"status"`
				NotificationURI any    `json:"notificationUri"`
			}
			if json.Unmarshal(it.body, &fields) != nil {
				malformed++
				continue
			}
			status, _ := fields.Status.(string)
			uri, _ := fields.NotificationURI.(string)
			terminal := arm.ProvisioningState(status).IsTerminal()
			if (fields.Status != nil && !terminal) || uri != "" {
				p := PendingOperation{ID: fields.ID, PartitionKey: fields.PartitionKey}
				p.ReadDetails(it.body)
				pending = append(pending, p)
			}
		}
		m.mu.Unlock()
		slices.SortFunc(pending, func(a, b PendingOperation) int {
			return strings.Compare(a.PartitionKey+"/"+a.ID, b.PartitionKey+"/"+b.ID)
		})
		for range malformed {
			if !yield(PendingOperation{}, fmt.Errorf("%w: pending operation", ErrMalformed)) {
				return
			}
		}
		for _, p := range pending {
			if ctx.Err() != nil {
				yield(PendingOperation{}, ctx.Err())
				return
			}
			if !yield(p, nil) {
				return
			}
		}
	}
}

// GetOperation reads one operation.
func (m *MemoryClient) GetOperation(ctx context.Context, subscriptionID, operationID string) (*Operation, error) {
	if err := m.hook("GetOperation"); err != nil {
		return nil, err
	}
	m.mu.Lock()
	it, ok := m.operations[key(subscriptionID, operationID)]
	m.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("read operation %s: %w", operationID, ErrNotFound)
	}
	op := &Operation{}
	if err := json.Unmarshal(it.body, op); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	op.ETag = it.etag
	return op, nil
}

// ReplaceOperation replaces op if its etag matches.
func (m *MemoryClient) ReplaceOperation(ctx context.Context, op *Operation) (*Operation, error) {
	out := &Operation{}
	if err := m.replace("ReplaceOperation", m.operations, key(op.PartitionKey, op.ID), op, op.ETag, out); err != nil {
		return nil, fmt.Errorf("replace operation %s: %w", op.ID, err)
	}
	return out, nil
}

func (m *MemoryClient) replace(call string, items map[string]memItem, k string, v any, etag azcore.ETag, out any) error {
	if err := m.hook(call); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, ok := items[k]
	if !ok {
		return ErrNotFound
	}
	if cur.etag != etag {
		return ErrPreconditionFailed
	}
	_, body, err := m.put(items, k, v)
	if err != nil {
		return err
	}
	return json.Unmarshal(body, out)
}

// GetResource finds a resource by key, ignoring case. As the Cosmos query
// does, it matches by the key alone and then fails on an item that does not
// decode.
func (m *MemoryClient) GetResource(ctx context.Context, subscriptionID, k string) (*Resource, error) {
	if err := m.hook("GetResource"); err != nil {
		return nil, err
	}
	found := m.findResources(subscriptionID, func(key string) bool { return strings.EqualFold(key, k) })
	if len(found) == 0 {
		return nil, fmt.Errorf("find resource %s: %w", k, ErrNotFound)
	}
	if len(found) > 1 {
		return nil, fmt.Errorf("find resource %s: %d items share the key", k, len(found))
	}
	r := &Resource{}
	if err := r.UnmarshalJSON(found[0].body); err != nil {
		return nil, fmt.Errorf("find resource %s: %w: %w", k, ErrMalformed, err)
	}
	r.ETag = found[0].etag
	return r, nil
}

// ChildResources lists the resources below k, whatever their other fields
// hold, as the Cosmos query's projection does.
func (m *MemoryClient) ChildResources(ctx context.Context, subscriptionID, k string) ([]ResourceRef, error) {
	if err := m.hook("ChildResources"); err != nil {
		return nil, err
	}
	prefix := k + "/"
	var out []ResourceRef
	for _, it := range m.findResources(subscriptionID, func(key string) bool {
		return len(key) >= len(prefix) && strings.EqualFold(key[:len(prefix)], prefix)
	}) {
		out = append(out, ResourceRef{ID: it.id, PartitionKey: strings.ToLower(subscriptionID), Key: it.key, ETag: it.etag})
	}
	return out, nil
}

// foundResource is an item of findResources.
type foundResource struct {
	id, key string
	etag    azcore.ETag
	body    []byte
}

// findResources returns the subscription's resources whose key, a string,
// matches, sorted by key. Only id and key are decoded.
func (m *MemoryClient) findResources(subscriptionID string, match func(key string) bool) []foundResource {
	m.mu.Lock()
	defer m.mu.Unlock()
	prefix := strings.ToLower(subscriptionID) + "/"
	var out []foundResource
	for k, it := range m.resources {
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		var fields struct {
			ID  string `json:"id"`
			Key any    `json:"key"`
		}
		_ = json.Unmarshal(it.body, &fields)
		if key, ok := fields.Key.(string); ok && match(key) {
			out = append(out, foundResource{id: fields.ID, key: key, etag: it.etag, body: it.body})
		}
	}
	slices.SortFunc(out, func(a, b foundResource) int { return strings.Compare(a.key, b.key) })
	return out
}

// ReplaceResource replaces r if its etag matches.
func (m *MemoryClient) ReplaceResource(ctx context.Context, r *Resource) (*Resource, error) {
	out := &Resource{}
	if err := m.replace("ReplaceResource", m.resources, key(r.PartitionKey, r.ID), r, r.ETag, out); err != nil {
		return nil, fmt.Errorf("replace resource %s: %w", r.Key, err)
	}
	return out, nil
}

// DeleteResource deletes the item r names if its etag matches.
func (m *MemoryClient) DeleteResource(ctx context.Context, r ResourceRef) error {
	if err := m.hook("DeleteResource"); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.deleteLocked(m.resources, key(r.PartitionKey, r.ID), r.ETag)
}

func (m *MemoryClient) deleteLocked(items map[string]memItem, k string, etag azcore.ETag) error {
	cur, ok := items[k]
	if !ok || m.expired(cur) {
		return ErrNotFound
	}
	if cur.etag != etag {
		return ErrPreconditionFailed
	}
	delete(items, k)
	return nil
}

func (m *MemoryClient) expired(it memItem) bool {
	return !it.expires.IsZero() && !time.Now().Before(it.expires)
}
