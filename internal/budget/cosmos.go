package budget

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/internal/telemetry"
)

// Cosmos keeps the ledger in a Cosmos DB container whose partition key is
// /id: the Leases container, beside the change feed processor's leases
// (which it reads by its own id prefix only). Each request is counted with
// its status and the request units it charged.
type Cosmos struct {
	container *azcosmos.ContainerClient
}

var _ Store = (*Cosmos)(nil)

// NewCosmos returns the Store of the ledger in container.
func NewCosmos(container *azcosmos.ContainerClient) *Cosmos { return &Cosmos{container: container} }

var ledgerKey = azcosmos.NewPartitionKeyString(ID)

// retries are the ledger's own retry options, short and few: the Gate
// reads again every ReadEvery anyway, and a call that waits out the
// client's default retries (4 tries of up to 30 s, Retry-After honoured up
// to 60 s) would hold the tick loop long after Leases answers again.
var retries = policy.RetryOptions{MaxRetries: 1, TryTimeout: time.Second,
	RetryDelay: 100 * time.Millisecond, MaxRetryDelay: 500 * time.Millisecond}

// Read reads the ledger item.
func (c *Cosmos) Read(ctx context.Context) (Ledger, string, error) {
	resp, err := c.container.ReadItem(policy.WithRetryOptions(ctx, retries), ledgerKey, ID, nil)
	count(ctx, "read", resp, err)
	if err != nil {
		return Ledger{}, "", classify(err)
	}
	var l Ledger
	if err := json.Unmarshal(resp.Value, &l); err != nil {
		return Ledger{}, string(resp.ETag), fmt.Errorf("%w: %w", ErrUnreadable, err)
	}
	if l.Holders == nil {
		l.Holders = map[string]Entry{}
	}
	return l, string(resp.ETag), nil
}

// Replace writes l with If-Match etag; never unconditionally.
func (c *Cosmos) Replace(ctx context.Context, l Ledger, etag string) (string, error) {
	if etag == "" {
		return "", errors.New("budget ledger: replace without an etag")
	}
	body, err := json.Marshal(l)
	if err != nil {
		return "", err
	}
	e := azcore.ETag(etag)
	resp, err := c.container.ReplaceItem(policy.WithRetryOptions(ctx, retries), ledgerKey, ID, body, &azcosmos.ItemOptions{IfMatchEtag: &e})
	count(ctx, "replace", resp, err)
	if err != nil {
		return "", classify(err)
	}
	return string(resp.ETag), nil
}

// Create creates the ledger item.
func (c *Cosmos) Create(ctx context.Context, l Ledger) (string, error) {
	body, err := json.Marshal(l)
	if err != nil {
		return "", err
	}
	resp, err := c.container.CreateItem(policy.WithRetryOptions(ctx, retries), ledgerKey, body, nil)
	count(ctx, "create", resp, err)
	if err != nil {
		return "", classify(err)
	}
	return string(resp.ETag), nil
}

// count records a request of kind with its status code and charge.
func count(ctx context.Context, kind string, resp azcosmos.ItemResponse, err error) {
	status, charge := 0, float64(resp.RequestCharge)
	var re *azcore.ResponseError
	switch {
	case err == nil && resp.RawResponse != nil:
		status = resp.RawResponse.StatusCode
	case errors.As(err, &re):
		status = re.StatusCode
		if re.RawResponse != nil {
			charge, _ = strconv.ParseFloat(re.RawResponse.Header.Get("x-ms-request-charge"), 64)
		}
	}
	telemetry.LedgerRequest(ctx, kind, status, charge)
}

// classify maps Cosmos DB's answers, as the database package reads them,
// to the Store's errors: ErrNotFound only for a missing item, so that
// neither a missing container nor a replica behind the session (404
// sub-status 1002, which passes) reads as a missing ledger, which the
// Gate would create again after dropping its permits.
func classify(err error) error {
	err = database.Classify(err)
	switch {
	case errors.Is(err, database.ErrNotFound):
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	case errors.Is(err, database.ErrConflict):
		return fmt.Errorf("%w: %w", ErrConflict, err)
	case errors.Is(err, database.ErrPreconditionFailed):
		return fmt.Errorf("%w: %w", ErrPreconditionFailed, err)
	}
	return fmt.Errorf("budget ledger: %w", err)
}
