package databasetesting

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"

	"github.com/opstatus/opstatus/internal/database"
)

// Locks returns the in-memory lock store.
func (m *MemoryClient) Locks() database.LockStore { return memLocks{m} }

type memLocks struct{ m *MemoryClient }

func (l memLocks) TTL(ctx context.Context) (time.Duration, error) {
	if err := l.m.begin(ctx, OpLockTTL); err != nil {
		return 0, fmt.Errorf("read locks container: %w", err)
	}
	return time.Duration(max(l.m.defaultTTL, 0)) * time.Second, nil
}

func (l memLocks) Create(ctx context.Context, id, owner string, ttl time.Duration) (azcore.ETag, error) {
	if err := l.m.begin(ctx, OpLockCreate); err != nil {
		return "", fmt.Errorf("create lock %s: %w", id, err)
	}
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	if _, ok := l.live(id); ok {
		return "", fmt.Errorf("create lock %s: %w", id, database.ErrConflict)
	}
	return l.write(id, owner, ttl), nil
}

// Renew is a replace, as in Cosmos DB: a vanished item is not re-created.
func (l memLocks) Renew(ctx context.Context, id, owner string, ttl time.Duration, etag azcore.ETag) (azcore.ETag, error) {
	if err := l.m.begin(ctx, OpLockRenew); err != nil {
		return "", fmt.Errorf("renew lock %s: %w", id, err)
	}
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	cur, ok := l.live(id)
	if !ok {
		return "", fmt.Errorf("renew lock %s: %w", id, database.ErrNotFound)
	}
	if !ifMatch(etag, cur.etag) {
		return "", fmt.Errorf("renew lock %s: %w", id, database.ErrPreconditionFailed)
	}
	return l.write(id, owner, ttl), nil
}

func (l memLocks) Get(ctx context.Context, id string) (string, azcore.ETag, error) {
	if err := l.m.begin(ctx, OpLockGet); err != nil {
		return "", "", fmt.Errorf("read lock %s: %w", id, err)
	}
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	cur, ok := l.live(id)
	if !ok {
		return "", "", fmt.Errorf("read lock %s: %w", id, database.ErrNotFound)
	}
	var item database.Lock
	if err := json.Unmarshal(cur.body, &item); err != nil {
		return "", "", fmt.Errorf("read lock %s: %w: %w", id, database.ErrMalformed, err)
	}
	return item.Owner, cur.etag, nil
}

func (l memLocks) Delete(ctx context.Context, id string, etag azcore.ETag) error {
	if err := l.m.begin(ctx, OpLockDelete); err != nil {
		return fmt.Errorf("delete lock %s: %w", id, err)
	}
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	cur, ok := l.live(id)
	if !ok {
		return fmt.Errorf("delete lock %s: %w", id, database.ErrNotFound)
	}
	if !ifMatch(etag, cur.etag) {
		return fmt.Errorf("delete lock %s: %w", id, database.ErrPreconditionFailed)
	}
	delete(l.m.locks, id)
	return nil
}

// live returns the lock item id unless it is missing or has expired. The
// caller holds l.m.mu.
func (l memLocks) live(id string) (memItem, bool) {
	it, ok := l.m.locks[id]
	if !ok {
		return memItem{}, false
	}
	if !it.expires.IsZero() && !time.Now().Before(it.expires) {
		delete(l.m.locks, id)
		return memItem{}, false
	}
	return it, true
}

// write stores the lock item as CosmosClient writes it, its ttl in whole
// seconds rounded up. Cosmos DB expires it at its _ts, the whole second of
// the write, plus that ttl, and only when the container has a
// DefaultTimeToLive. The caller holds l.m.mu.
func (l memLocks) write(id, owner string, ttl time.Duration) azcore.ETag {
	seconds := max(int((ttl+time.Second-1)/time.Second), 1)
	now := time.Now()
	body, etag, err := l.m.stamp(mustMarshal(database.Lock{ID: id, Owner: owner, TTL: seconds}), now)
	if err != nil {
		panic(fmt.Sprintf("databasetesting: %v", err))
	}
	it := memItem{body: body, etag: etag}
	if l.m.defaultTTL != 0 {
		it.expires = time.Unix(now.Unix()+int64(seconds), 0)
	}
	l.m.locks[id] = it
	return etag
}

// HoldLock makes owner hold subscriptionID's lock for ttl, as the frontend
// would, writing the lock item whether or not someone holds it (as
// frontend.StealLock does); it returns the etag to release it with.
func (m *MemoryClient) HoldLock(subscriptionID, owner string, ttl time.Duration) azcore.ETag {
	m.mu.Lock()
	defer m.mu.Unlock()
	return memLocks{m}.write(strings.ToLower(subscriptionID), owner, ttl)
}
