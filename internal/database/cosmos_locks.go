package database

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
)

// Locks returns the lock store.
func (c *CosmosClient) Locks() LockStore { return c.locks }

type cosmosLocks struct {
	container *azcosmos.ContainerClient
}

func (l *cosmosLocks) TTL(ctx context.Context) (time.Duration, error) {
	resp, err := l.container.Read(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("read locks container: %w", classify(err))
	}
	ttl := resp.ContainerProperties.DefaultTimeToLive
	if ttl == nil || *ttl <= 0 {
		return 0, nil // package lock says what is wrong with it
	}
	return time.Duration(*ttl) * time.Second, nil
}

func (l *cosmosLocks) Create(ctx context.Context, id, owner string, ttl time.Duration) (azcore.ETag, error) {
	body, err := json.Marshal(Lock{ID: id, Owner: owner, TTL: ttlSeconds(ttl)})
	if err != nil {
		return "", err
	}
	resp, err := l.container.CreateItem(ctx, azcosmos.NewPartitionKeyString(id), body, nil)
	if err != nil {
		return "", fmt.Errorf("create lock %s: %w", id, classify(err))
	}
	return resp.ETag, nil
}

func (l *cosmosLocks) Get(ctx context.Context, id string) (string, azcore.ETag, error) {
	resp, err := l.container.ReadItem(ctx, azcosmos.NewPartitionKeyString(id), id, nil)
	if err != nil {
		return "", "", fmt.Errorf("read lock %s: %w", id, classify(err))
	}
	var item Lock
	if err := json.Unmarshal(resp.Value, &item); err != nil {
		return "", "", fmt.Errorf("read lock %s: %w: %w", id, ErrMalformed, err)
	}
	return item.Owner, resp.ETag, nil
}

// Renew replaces, never upserts: an upsert with If-Match re-creates an item
// that has vanished, hiding that the lock was lost meanwhile.
func (l *cosmosLocks) Renew(ctx context.Context, id, owner string, ttl time.Duration, etag azcore.ETag) (azcore.ETag, error) {
	body, err := json.Marshal(Lock{ID: id, Owner: owner, TTL: ttlSeconds(ttl)})
	if err != nil {
		return "", err
	}
	resp, err := l.container.ReplaceItem(ctx, azcosmos.NewPartitionKeyString(id), id, body,
		&azcosmos.ItemOptions{IfMatchEtag: etagOpt(etag)})
	if err != nil {
		return "", fmt.Errorf("renew lock %s: %w", id, classify(err))
	}
	return resp.ETag, nil
}

func (l *cosmosLocks) Delete(ctx context.Context, id string, etag azcore.ETag) error {
	_, err := l.container.DeleteItem(ctx, azcosmos.NewPartitionKeyString(id), id,
		&azcosmos.ItemOptions{IfMatchEtag: etagOpt(etag)})
	if err != nil {
		return fmt.Errorf("delete lock %s: %w", id, classify(err))
	}
	return nil
}
