package database

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
)

// Locks returns the in-memory lock store.
func (m *MemoryClient) Locks() LockStore { return memLocks{m} }

type memLocks struct{ m *MemoryClient }

func (l memLocks) TTL(ctx context.Context) (time.Duration, error) {
	if err := l.m.hook("Lock.TTL"); err != nil {
		return 0, err
	}
	return l.m.lockTTL, nil
}

func (l memLocks) Create(ctx context.Context, id, owner string, ttl time.Duration) (azcore.ETag, error) {
	if err := l.m.hook("Lock.Create"); err != nil {
		return "", err
	}
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	if cur, ok := l.m.locks[id]; ok && !l.m.expired(cur) {
		return "", fmt.Errorf("create lock %s: %w", id, ErrConflict)
	}
	return l.write(id, owner, ttl)
}

func (l memLocks) Renew(ctx context.Context, id, owner string, ttl time.Duration, etag azcore.ETag) (azcore.ETag, error) {
	if err := l.m.hook("Lock.Renew"); err != nil {
		return "", err
	}
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	// As a Cosmos replace: a vanished item is not re-created.
	cur, ok := l.m.locks[id]
	if !ok || l.m.expired(cur) {
		return "", fmt.Errorf("renew lock %s: %w", id, ErrNotFound)
	}
	if cur.etag != etag {
		return "", fmt.Errorf("renew lock %s: %w", id, ErrPreconditionFailed)
	}
	return l.write(id, owner, ttl)
}

func (l memLocks) Get(ctx context.Context, id string) (string, azcore.ETag, error) {
	if err := l.m.hook("Lock.Get"); err != nil {
		return "", "", err
	}
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	cur, ok := l.m.locks[id]
	if !ok || l.m.expired(cur) {
		return "", "", fmt.Errorf("read lock %s: %w", id, ErrNotFound)
	}
	var item Lock
	if err := json.Unmarshal(cur.body, &item); err != nil {
		return "", "", fmt.Errorf("read lock %s: %w: %w", id, ErrMalformed, err)
	}
	return item.Owner, cur.etag, nil
}

// write stores the lock item. It expires as Cosmos may expire it at the
// earliest: ttl after the whole second of its write (its _ts).
func (l memLocks) write(id, owner string, ttl time.Duration) (azcore.ETag, error) {
	written := time.Now()
	etag, _, err := l.m.put(l.m.locks, id, Lock{ID: id, Owner: owner, TTL: ttlSeconds(ttl)})
	if err != nil {
		return "", err
	}
	it := l.m.locks[id]
	it.expires = written.Truncate(time.Second).Add(ttl)
	l.m.locks[id] = it
	return etag, nil
}

func (l memLocks) Delete(ctx context.Context, id string, etag azcore.ETag) error {
	if err := l.m.hook("Lock.Delete"); err != nil {
		return err
	}
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	if err := l.m.deleteLocked(l.m.locks, id, etag); err != nil {
		return fmt.Errorf("delete lock %s: %w", id, err)
	}
	return nil
}

// HoldLock makes owner hold subscriptionID's lock for ttl, as the frontend
// would; it returns the etag to release it with.
func (m *MemoryClient) HoldLock(subscriptionID, owner string, ttl time.Duration) azcore.ETag {
	m.mu.Lock()
	defer m.mu.Unlock()
	etag, _ := memLocks{m}.write(strings.ToLower(subscriptionID), owner, ttl)
	return etag
}
