package hostemu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
)

// The lease documents of the change feed processor of Microsoft.Azure.Cosmos
// 3.41, which the Cosmos DB extension 4.x runs (ChangeFeed/LeaseManagement).
const (
	// leaseSeparator joins the lease prefix and a range's lease token
	// (DocumentServiceLeaseStoreManagerOptions.PartitionLeasePrefixSeparator).
	leaseSeparator = ".."
	// leaseModeIncremental is the Mode of a lease of the latest-version
	// feed (HttpConstants.A_IMHeaderValues.IncrementalFeed).
	leaseModeIncremental = "Incremental feed"
	// leaseUpdateRetries is how often an update that met a 412 re-reads the
	// lease and tries again (DocumentServiceLeaseUpdaterCosmos.
	// RetryCountOnConflict).
	leaseUpdateRetries = 5
	// bootstrapLockTTL is the time to live of the lock document that one
	// instance holds while it creates the leases (BootstrapperCore.
	// DefaultLockTime).
	bootstrapLockTTL = 30 * time.Second
	// defaultBootstrapRetry is how long an instance waits when another holds
	// that lock (BootstrapperCore.DefaultSleepTime).
	defaultBootstrapRetry = 15 * time.Second
)

// leaseDoc is a lease document as DocumentServiceLeaseCore writes it: the
// lease of one partition key range. Owner is null while nobody holds it;
// ContinuationToken is the etag of the last page checkpointed, null until
// the first checkpoint; timestamp is when its owner last wrote it.
type leaseDoc struct {
	ID                string            `json:"id"`
	PartitionKey      string            `json:"partitionKey,omitempty"`
	Version           int               `json:"version"`
	LeaseToken        string            `json:"LeaseToken"`
	FeedRange         *leaseFeedRange   `json:"FeedRange,omitempty"`
	Owner             *string           `json:"Owner"`
	ContinuationToken *string           `json:"ContinuationToken"`
	Properties        map[string]string `json:"properties"`
	Timestamp         *string           `json:"timestamp"`
	Mode              string            `json:"Mode,omitempty"`

	// etag and ts are the system properties read with it.
	etag string
	ts   int64
}

// leaseFeedRange is a lease's FeedRange (FeedRangeInternalConverter,
// RangeJsonConverter).
type leaseFeedRange struct {
	Range struct {
		Min string `json:"min"`
		Max string `json:"max"`
	} `json:"Range"`
}

// owner is the lease's owner, "" when free.
func (l *leaseDoc) owner() string {
	if l.Owner == nil {
		return ""
	}
	return *l.Owner
}

// continuation is the lease's continuation, "" before the first
// checkpoint.
func (l *leaseDoc) continuation() string {
	if l.ContinuationToken == nil {
		return ""
	}
	return *l.ContinuationToken
}

// time is DocumentServiceLease.Timestamp: the timestamp its writer set, or
// the server's _ts when it has none.
func (l *leaseDoc) time() time.Time {
	if l.Timestamp != nil {
		if t, err := time.Parse(time.RFC3339Nano, *l.Timestamp); err == nil {
			return t
		}
	}
	return time.Unix(l.ts, 0)
}

// clone copies the lease so that a failed update leaves the cached one
// alone.
func (l *leaseDoc) clone() *leaseDoc {
	c := *l
	if l.Owner != nil {
		o := *l.Owner
		c.Owner = &o
	}
	if l.ContinuationToken != nil {
		t := *l.ContinuationToken
		c.ContinuationToken = &t
	}
	if l.Timestamp != nil {
		t := *l.Timestamp
		c.Timestamp = &t
	}
	c.Properties = make(map[string]string, len(l.Properties))
	for k, v := range l.Properties {
		c.Properties[k] = v
	}
	return &c
}

// decodeLease reads a lease document; a lease written by the version 2
// processor names its token PartitionId.
func decodeLease(data []byte) (*leaseDoc, error) {
	var l leaseDoc
	if err := json.Unmarshal(data, &l); err != nil {
		return nil, err
	}
	var sys struct {
		ETag        string `json:"_etag"`
		TS          int64  `json:"_ts"`
		PartitionID string `json:"PartitionId"`
	}
	if err := json.Unmarshal(data, &sys); err != nil {
		return nil, err
	}
	l.etag, l.ts = sys.ETag, sys.TS
	if l.LeaseToken == "" {
		l.LeaseToken = sys.PartitionID
	}
	if l.Properties == nil {
		l.Properties = map[string]string{}
	}
	return &l, nil
}

// Errors of lease writes.
var (
	// errLeaseConflict is a 412: someone wrote the lease since it was read.
	errLeaseConflict = errors.New("the lease changed since it was read")
	// errLeaseLost is LeaseLostException: another instance owns the lease,
	// or it is gone.
	errLeaseLost = errors.New("lease lost")
)

// leaseBackend is the lease container as the processor uses it; tests
// replace it. pk is the document's partition key value: its id in a
// container partitioned by /id, its partitionKey field otherwise.
type leaseBackend interface {
	// list returns every document whose id starts with prefix.
	list(ctx context.Context, prefix string) ([]*leaseDoc, error)
	// exists reports whether the document id is there.
	exists(ctx context.Context, id, pk string) (bool, error)
	// create writes a new document; created is false when the id is taken.
	create(ctx context.Context, id, pk string, doc any) (created bool, etag string, err error)
	// read returns the lease; errCosmosNotFound when it is gone.
	read(ctx context.Context, id, pk string) (*leaseDoc, error)
	// replace writes l if its etag is still the document's: errLeaseConflict
	// when it is not, errCosmosNotFound when the lease is gone. It returns
	// the etag written.
	replace(ctx context.Context, l *leaseDoc) (string, error)
	// remove deletes the document if its etag is still etag.
	remove(ctx context.Context, id, pk, etag string) error
}

// pk is the lease's partition key value (RequestOptionsFactory.
// GetPartitionKey): its partitionKey field when it has one, else its id.
func (l *leaseDoc) pk() string {
	if l.PartitionKey != "" {
		return l.PartitionKey
	}
	return l.ID
}

// azLeaseBackend is a leaseBackend on a Cosmos DB container.
type azLeaseBackend struct {
	c *azcosmos.ContainerClient
}

func (b *azLeaseBackend) list(ctx context.Context, prefix string) ([]*leaseDoc, error) {
	// DocumentServiceLeaseContainerCosmos.ListDocumentsAsync, across
	// partitions.
	pager := b.c.NewQueryItemsPager("SELECT * FROM c WHERE STARTSWITH(c.id, @prefix)", azcosmos.NewPartitionKey(),
		&azcosmos.QueryOptions{QueryParameters: []azcosmos.QueryParameter{{Name: "@prefix", Value: prefix}}})
	var out []*leaseDoc
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("listing leases: %w", err)
		}
		for _, raw := range page.Items {
			l, err := decodeLease(raw)
			if err != nil {
				return nil, fmt.Errorf("listing leases: %w", err)
			}
			out = append(out, l)
		}
	}
	return out, nil
}

func (b *azLeaseBackend) exists(ctx context.Context, id, pk string) (bool, error) {
	_, err := b.c.ReadItem(ctx, azcosmos.NewPartitionKeyString(pk), id, nil)
	switch {
	case err == nil:
		return true, nil
	case cosmosStatus(err) == http.StatusNotFound:
		return false, nil
	}
	return false, fmt.Errorf("reading %s: %w", id, err)
}

func (b *azLeaseBackend) create(ctx context.Context, id, pk string, doc any) (bool, string, error) {
	body, err := json.Marshal(doc)
	if err != nil {
		return false, "", err
	}
	resp, err := b.c.CreateItem(ctx, azcosmos.NewPartitionKeyString(pk), body, nil)
	switch {
	case err == nil:
		return true, string(resp.ETag), nil
	case cosmosStatus(err) == http.StatusConflict:
		return false, "", nil
	}
	return false, "", fmt.Errorf("creating %s: %w", id, err)
}

func (b *azLeaseBackend) read(ctx context.Context, id, pk string) (*leaseDoc, error) {
	resp, err := b.c.ReadItem(ctx, azcosmos.NewPartitionKeyString(pk), id, nil)
	if cosmosStatus(err) == http.StatusNotFound {
		return nil, fmt.Errorf("lease %s: %w", id, errCosmosNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("reading lease %s: %w", id, err)
	}
	return decodeLease(resp.Value)
}

func (b *azLeaseBackend) replace(ctx context.Context, l *leaseDoc) (string, error) {
	body, err := json.Marshal(l)
	if err != nil {
		return "", err
	}
	etag := azcore.ETag(l.etag)
	resp, err := b.c.ReplaceItem(ctx, azcosmos.NewPartitionKeyString(l.pk()), l.ID, body, &azcosmos.ItemOptions{IfMatchEtag: &etag})
	switch cosmosStatus(err) {
	case 0:
		if err != nil {
			return "", fmt.Errorf("replacing lease %s: %w", l.ID, err)
		}
		return string(resp.ETag), nil
	case http.StatusPreconditionFailed:
		return "", errLeaseConflict
	case http.StatusNotFound:
		return "", fmt.Errorf("lease %s: %w", l.ID, errCosmosNotFound)
	}
	return "", fmt.Errorf("replacing lease %s: %w", l.ID, err)
}

func (b *azLeaseBackend) remove(ctx context.Context, id, pk, etag string) error {
	opts := &azcosmos.ItemOptions{}
	if etag != "" {
		e := azcore.ETag(etag)
		opts.IfMatchEtag = &e
	}
	if _, err := b.c.DeleteItem(ctx, azcosmos.NewPartitionKeyString(pk), id, opts); err != nil && cosmosStatus(err) != http.StatusNotFound {
		return fmt.Errorf("deleting %s: %w", id, err)
	}
	return nil
}

// updateLease is DocumentServiceLeaseUpdaterCosmos.UpdateLeaseAsync: apply
// change to the lease (which may refuse with errLeaseLost), stamp it, and
// replace it if nobody wrote it since; on a 412 read it again and start
// over, up to leaseUpdateRetries times. A lease that is gone is lost.
func updateLease(ctx context.Context, store leaseBackend, cached *leaseDoc, now func() time.Time, change func(*leaseDoc) error) (*leaseDoc, error) {
	l := cached
	for retries := leaseUpdateRetries; retries >= 0; retries-- {
		next := l.clone()
		if err := change(next); err != nil {
			return nil, err
		}
		ts := now().UTC().Format(layoutUTC)
		next.Timestamp = &ts
		etag, err := store.replace(ctx, next)
		switch {
		case err == nil:
			next.etag = etag
			return next, nil
		case errors.Is(err, errCosmosNotFound):
			return nil, fmt.Errorf("%w: %w", errLeaseLost, err)
		case !errors.Is(err, errLeaseConflict):
			return nil, err
		}
		if l, err = store.read(ctx, cached.ID, cached.pk()); err != nil {
			if errors.Is(err, errCosmosNotFound) {
				return nil, fmt.Errorf("%w: %w", errLeaseLost, err)
			}
			return nil, err
		}
	}
	return nil, fmt.Errorf("%w: lease %s kept changing", errLeaseLost, cached.ID)
}

// leasesToTake is EqualPartitionsBalancingStrategy.SelectLeasesToTake with
// the processor's defaults (no minimum or maximum count): each instance
// aims at ceil(leases / instances) leases, the instances being the owners
// of leases that have not expired and itself. Below that it takes free or
// expired leases, else steals one from the instance with the most when
// that one has more than its share. A lease expires when its timestamp is
// more than expiration ago.
func leasesToTake(all []*leaseDoc, me string, expiration time.Duration, now time.Time) []*leaseDoc {
	var expired, partitions []*leaseDoc
	counts := map[string]int{}
	var workers []string // in the order first met, as the Dictionary enumerates
	seen := map[string]bool{}
	for _, l := range all {
		if seen[l.LeaseToken] {
			continue
		}
		seen[l.LeaseToken] = true
		partitions = append(partitions, l)
		if strings.TrimSpace(l.owner()) == "" || l.time().Add(expiration).Before(now) {
			expired = append(expired, l)
			continue
		}
		if _, ok := counts[l.owner()]; !ok {
			workers = append(workers, l.owner())
		}
		counts[l.owner()]++
	}
	if _, ok := counts[me]; !ok {
		workers = append(workers, me)
		counts[me] = 0
	}
	if len(partitions) == 0 {
		return nil
	}
	target := 1
	if len(partitions) > len(workers) {
		target = int(math.Ceil(float64(len(partitions)) / float64(len(workers))))
	}
	needed := target - counts[me]
	if needed <= 0 {
		return nil
	}
	if len(expired) > 0 {
		return expired[:min(needed, len(expired))]
	}
	most, mostCount := "", 0
	for _, w := range workers {
		if mostCount <= counts[w] {
			most, mostCount = w, counts[w]
		}
	}
	slack := 0
	if needed > 1 {
		slack = 1
	}
	if mostCount > target-slack {
		for _, l := range partitions {
			if strings.EqualFold(l.owner(), most) {
				return []*leaseDoc{l}
			}
		}
	}
	return nil
}
