package database

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/tracing"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/opstatus/opstatus/internal/arm"
)

// CosmosConfig says where the containers are and how to reach them.
type CosmosConfig struct {
	Endpoint string
	Database string
	Key      string // account key; empty means Credential
	// Credential is the app's Entra identity (entra.Credential), used
	// when Key is empty.
	Credential          azcore.TokenCredential
	InsecureSkipVerify  bool // local emulators with self-signed certificates only
	OperationsContainer string
	ResourcesContainer  string
	LocksContainer      string
	BillingContainer    string
	// OperationsPartition is where the frontend writes the Operations
	// items: by subscription (zero) or in one fixed partition.
	OperationsPartition OperationsPartition
	// PageSize is the scan query's page size; 0 means 1000.
	PageSize int32
	// TracingProvider traces the client's calls and requests; the zero
	// value traces nothing.
	TracingProvider tracing.Provider
}

// CosmosClient is the DBClient for Cosmos DB.
type CosmosClient struct {
	client     *azcosmos.Client
	database   string
	operations *azcosmos.ContainerClient
	resources  *azcosmos.ContainerClient
	locks      *cosmosLocks
	billing    *azcosmos.ContainerClient
	billingKey billingKey
	partition  OperationsPartition
	pageSize   int32
}

var _ DBClient = (*CosmosClient)(nil)

// maxConnsPerHost bounds the connections to the account.
const maxConnsPerHost = 64

// NewCosmosClient connects to the account. It makes no request.
func NewCosmosClient(cfg CosmosConfig) (*CosmosClient, error) {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	// As many connections as the host runs polls at once (host.json:
	// batchSize + newBatchThreshold), all kept for reuse. The cap matters
	// in bursts: without it every request that finds no idle connection
	// dials one, and a burst of changed polls started 133 TLS handshakes at
	// once (BENCHMARKS.md).
	transport.MaxIdleConnsPerHost = maxConnsPerHost
	transport.MaxConnsPerHost = maxConnsPerHost
	transport.DialContext = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	if cfg.InsecureSkipVerify {
		transport.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // local emulators only, by setting
	}
	opts := &azcosmos.ClientOptions{ClientOptions: policy.ClientOptions{
		Transport:       &http.Client{Transport: transport, Timeout: 30 * time.Second},
		Telemetry:       policy.TelemetryOptions{ApplicationID: "opstatus"},
		TracingProvider: cfg.TracingProvider,
	}}
	var (
		client *azcosmos.Client
		err    error
	)
	if cfg.Key != "" {
		cred, kerr := azcosmos.NewKeyCredential(cfg.Key)
		if kerr != nil {
			return nil, fmt.Errorf("COSMOS_KEY: %w", kerr)
		}
		client, err = azcosmos.NewClientWithKey(cfg.Endpoint, cred, opts)
	} else {
		if cfg.Credential == nil {
			return nil, errors.New("cosmos client: no key and no credential")
		}
		client, err = azcosmos.NewClient(cfg.Endpoint, cfg.Credential, opts)
	}
	if err != nil {
		return nil, fmt.Errorf("cosmos client: %w", err)
	}
	container := func(name string) (*azcosmos.ContainerClient, error) {
		c, err := client.NewContainer(cfg.Database, name)
		if err != nil {
			return nil, fmt.Errorf("cosmos container %s: %w", name, err)
		}
		return c, nil
	}
	c := &CosmosClient{client: client, database: cfg.Database, partition: cfg.OperationsPartition, pageSize: cfg.PageSize}
	if c.pageSize <= 0 {
		c.pageSize = 1000
	}
	if c.operations, err = container(cfg.OperationsContainer); err != nil {
		return nil, err
	}
	if c.resources, err = container(cfg.ResourcesContainer); err != nil {
		return nil, err
	}
	locks, err := container(cfg.LocksContainer)
	if err != nil {
		return nil, err
	}
	c.locks = &cosmosLocks{container: locks}
	if c.billing, err = container(cfg.BillingContainer); err != nil {
		return nil, err
	}
	return c, nil
}

// ReadContainer reads container name of the client's database, the one
// for what holds says, so that a setting that names one that does not
// exist, or one whose partition key opstatus cannot fill, is found at
// start, before a request to it fails: ErrContainerNotFound when it or its
// database does not exist, a *PartitionKeyError when its partition key is
// not one opstatus fills for what it holds.
func (c *CosmosClient) ReadContainer(ctx context.Context, name string, holds Holds) error {
	container, err := c.client.NewContainer(c.database, name)
	if err != nil {
		return fmt.Errorf("cosmos container %s: %w", name, err)
	}
	resp, err := container.Read(ctx, nil)
	if err != nil {
		return fmt.Errorf("read container %s: %w", name, classify(err))
	}
	if _, err := servedPath(holds, resp.ContainerProperties.PartitionKeyDefinition); err != nil {
		return err
	}
	return nil
}

// pendingQuery keeps the filter on the server and projects only what a queue
// message needs (the externalId too: in a fixed partition it tells the
// subscription), what scan decides by whether poll can act on an operation
// and whether pickup has just checked it, and what scan's metrics count.
var pendingQuery = "SELECT c.id, c.partitionKey, c.externalId, c.status, c.request, c.startTime, c.internalId, c._ts FROM c WHERE c.status NOT IN (" +
	quoted(arm.TerminalStates) + ")" + " OR (IS_STRING(c.notificationUri) AND LENGTH(c.notificationUri) > 0)"

// quoted lists states as SQL string literals: 'Succeeded','Failed',...
func quoted(states []arm.ProvisioningState) string {
	parts := make([]string, len(states))
	for i, st := range states {
		parts[i] = "'" + string(st) + "'"
	}
	return strings.Join(parts, ",")
}

// PendingOperations pages through one cross-partition query, or a query of
// the fixed partition.
func (c *CosmosClient) PendingOperations(ctx context.Context) iter.Seq2[PendingOperation, error] {
	return func(yield func(PendingOperation, error) bool) {
		scope := azcosmos.NewPartitionKey()
		if c.partition.Fixed() {
			scope = azcosmos.NewPartitionKeyString(string(c.partition))
		}
		pager := c.operations.NewQueryItemsPager(pendingQuery, scope, &azcosmos.QueryOptions{PageSizeHint: c.pageSize})
		for pager.More() {
			page, err := pager.NextPage(ctx)
			if err != nil {
				yield(PendingOperation{}, fmt.Errorf("query pending operations: %w", classify(err)))
				return
			}
			for _, raw := range page.Items {
				if !yield(c.partition.ReadPending(raw)) {
					return
				}
			}
		}
	}
}

// GetOperation point-reads one operation in the partition of its
// subscription, or in the fixed one.
func (c *CosmosClient) GetOperation(ctx context.Context, subscriptionID, operationID string) (*Operation, error) {
	resp, err := c.operations.ReadItem(ctx, azcosmos.NewPartitionKeyString(c.partition.Key(subscriptionID)), operationID, nil)
	if err != nil {
		return nil, fmt.Errorf("read operation %s: %w", operationID, classify(err))
	}
	op, err := c.partition.ReadOperation(resp.Value, subscriptionID)
	if err != nil {
		return nil, err
	}
	if op.ETag == "" {
		op.ETag = resp.ETag
	}
	return op, nil
}

// ReplaceOperation replaces op with If-Match on op.ETag, in the partition
// of its partitionKey lowercased, or in the fixed one.
func (c *CosmosClient) ReplaceOperation(ctx context.Context, op *Operation) (*Operation, error) {
	out := &Operation{}
	partition := azcosmos.NewPartitionKeyString(c.partition.Key(op.PartitionKey))
	if err := replaceIn(ctx, c.operations, partition, op.ID, op, op.ETag, out); err != nil {
		return nil, fmt.Errorf("replace operation %s: %w", op.ID, err)
	}
	if err := c.partition.Tell(out); err != nil {
		return nil, err
	}
	return out, nil
}

// GetResource finds a resource by its ARM ID within the subscription.
func (c *CosmosClient) GetResource(ctx context.Context, subscriptionID, key string) (*Resource, error) {
	var found []*Resource
	err := c.queryResources(ctx, subscriptionID, "SELECT * FROM c WHERE STRINGEQUALS(c.key, @key, true)", key,
		func(raw []byte) error {
			r := &Resource{}
			if err := r.UnmarshalJSON(raw); err != nil {
				return fmt.Errorf("%w: %w", ErrMalformed, err)
			}
			found = append(found, r)
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("find resource %s: %w", key, err)
	}
	if len(found) == 0 {
		return nil, fmt.Errorf("find resource %s: %w", key, ErrNotFound)
	}
	if len(found) > 1 {
		return nil, fmt.Errorf("find resource %s: %d %w", key, len(found), ErrDuplicateKey)
	}
	return found[0], nil
}

// headQuery projects what deleting an item and telling its owner need, so
// that the items GetResource cannot return can still be named and deleted.
const headQuery = "SELECT c.id, c.key, c._etag, c.activeOperationId FROM c WHERE STRINGEQUALS(c.key, @key, true)"

// ResourceHeads lists the resources of key.
func (c *CosmosClient) ResourceHeads(ctx context.Context, subscriptionID, key string) ([]ResourceHead, error) {
	var found []ResourceHead
	err := c.queryResources(ctx, subscriptionID, headQuery, key, func(raw []byte) error {
		h, err := ReadResourceHead(raw, subscriptionID)
		if err != nil {
			return err
		}
		found = append(found, h)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list resources of %s: %w", key, err)
	}
	return found, nil
}

// childQuery projects what deleting a child needs, so that a child whose
// other fields are ill-typed cannot keep its parent's delete from finishing.
const childQuery = "SELECT c.id, c.key, c._etag FROM c WHERE STARTSWITH(c.key, @key, true)"

// ChildResources lists the resources below key.
func (c *CosmosClient) ChildResources(ctx context.Context, subscriptionID, key string) ([]ResourceRef, error) {
	var found []ResourceRef
	err := c.queryResources(ctx, subscriptionID, childQuery, key+"/", func(raw []byte) error {
		var ref ResourceRef
		if err := json.Unmarshal(raw, &ref); err != nil || ref.ID == "" || ref.ETag == "" {
			return fmt.Errorf("%w: child resource %.200s", ErrMalformed, raw)
		}
		ref.PartitionKey = strings.ToLower(subscriptionID)
		found = append(found, ref)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list children of %s: %w", key, err)
	}
	return found, nil
}

// queryResources runs query with @key in one subscription's partition and
// passes each item to add.
func (c *CosmosClient) queryResources(ctx context.Context, subscriptionID, query, key string, add func([]byte) error) error {
	pager := c.resources.NewQueryItemsPager(query, pk(subscriptionID), &azcosmos.QueryOptions{
		QueryParameters: []azcosmos.QueryParameter{{Name: "@key", Value: key}},
	})
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return classify(err)
		}
		for _, raw := range page.Items {
			if err := add(raw); err != nil {
				return err
			}
		}
	}
	return nil
}

// ReplaceResource replaces r with If-Match on r.ETag.
func (c *CosmosClient) ReplaceResource(ctx context.Context, r *Resource) (*Resource, error) {
	out := &Resource{}
	if err := replace(ctx, c.resources, r.PartitionKey, r.ID, r, r.ETag, out); err != nil {
		return nil, fmt.Errorf("replace resource %s: %w", r.Key, err)
	}
	return out, nil
}

// DeleteResource deletes the item r names with If-Match on r.ETag.
func (c *CosmosClient) DeleteResource(ctx context.Context, r ResourceRef) error {
	_, err := c.resources.DeleteItem(ctx, pk(r.PartitionKey), r.ID, &azcosmos.ItemOptions{IfMatchEtag: etagOpt(r.ETag)})
	if err != nil {
		return fmt.Errorf("delete resource %s: %w", r.Key, classify(err))
	}
	return nil
}

// replace writes v with If-Match in the subscription's partition and
// decodes the written item into out.
func replace(ctx context.Context, c *azcosmos.ContainerClient, subscriptionID, id string, v any, etag azcore.ETag, out json.Unmarshaler) error {
	return replaceIn(ctx, c, pk(subscriptionID), id, v, etag, out)
}

// replaceIn is replace in partition.
func replaceIn(ctx context.Context, c *azcosmos.ContainerClient, partition azcosmos.PartitionKey, id string, v any, etag azcore.ETag, out json.Unmarshaler) error {
	if etag == "" {
		return fmt.Errorf("item %s has no etag: read it before writing", id)
	}
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	resp, err := c.ReplaceItem(ctx, partition, id, body, &azcosmos.ItemOptions{
		IfMatchEtag:                  etagOpt(etag),
		EnableContentResponseOnWrite: true,
	})
	if err != nil {
		return classify(err)
	}
	if err := out.UnmarshalJSON(resp.Value); err != nil {
		return fmt.Errorf("decode written item: %w", err)
	}
	return nil
}

// pk is the partition key of a subscription's items: its lowercase ID.
func pk(subscriptionID string) azcosmos.PartitionKey {
	return azcosmos.NewPartitionKeyString(strings.ToLower(subscriptionID))
}

func etagOpt(e azcore.ETag) *azcore.ETag { return &e }

func ttlSeconds(d time.Duration) int {
	s := int((d + time.Second - 1) / time.Second)
	return max(s, 1)
}

// Classify wraps an error of an azcosmos request with the package's
// sentinel for its status, for clients of containers of their own (the
// budget ledger's): ErrNotFound only for a missing item.
func Classify(err error) error { return classify(err) }

// classify wraps a Cosmos error with the package's sentinel for its status.
func classify(err error) error {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		switch re.StatusCode {
		case http.StatusNotFound:
			return classifyNotFound(re, err)
		case http.StatusConflict:
			return fmt.Errorf("%w: %w", ErrConflict, err)
		case http.StatusPreconditionFailed:
			return fmt.Errorf("%w: %w", ErrPreconditionFailed, err)
		case http.StatusRequestTimeout, http.StatusTooManyRequests, 449, // 449: retry with
			http.StatusInternalServerError, http.StatusBadGateway,
			http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		if refused(re.StatusCode) {
			return refusal(re, err)
		}
		return err
	}
	if errors.Is(err, context.Canceled) {
		return err
	}
	// Not an HTTP answer: a timeout, a refused or broken connection.
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// refusal is the RefusedError of re, a refusal for good, with Cosmos DB's
// code and message from its body.
func refusal(re *azcore.ResponseError, err error) error {
	out := &RefusedError{StatusCode: re.StatusCode, Code: re.ErrorCode, err: err}
	if re.RawResponse == nil {
		return out
	}
	out.Container = targetOf(re.RawResponse.Request).container
	var body struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	if payload, perr := runtime.Payload(re.RawResponse); perr == nil && json.Unmarshal(payload, &body) == nil {
		out.Code = cmp.Or(body.Code, out.Code)
		out.Message = body.Message
	}
	if len(out.Message) > maxRefusalMessage {
		out.Message = strings.ToValidUTF8(out.Message[:maxRefusalMessage], "") + "..."
	}
	return out
}

// Sub-statuses of a 404, in its x-ms-substatus header.
const (
	subStatusHeader = "x-ms-substatus"
	// subStatusReadSessionNotAvailable: the replica has not caught up with
	// the client's session yet.
	subStatusReadSessionNotAvailable = "1002"
	// subStatusOwnerNotFound: the container or database of the request does
	// not exist.
	subStatusOwnerNotFound = "1003"
)

// classifyNotFound wraps err, a 404, with its sentinel. A 404 means that an
// item is missing only when the request named one item and no sub-status
// says otherwise: a query, a create or a container read names no item, so
// its 404 says that the container or its database does not exist, which
// must never read as "no such item".
func classifyNotFound(re *azcore.ResponseError, err error) error {
	var (
		subStatus string
		target    requestTarget
	)
	if re.RawResponse != nil {
		subStatus = re.RawResponse.Header.Get(subStatusHeader)
		target = targetOf(re.RawResponse.Request)
	}
	switch {
	case subStatus == subStatusReadSessionNotAvailable:
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	case subStatus == subStatusOwnerNotFound || target.item == "":
		return fmt.Errorf("%w: container %q of database %q: %w", ErrContainerNotFound, target.container, target.database, err)
	}
	return fmt.Errorf("%w: %w", ErrNotFound, err)
}

// requestTarget is what a request's path names:
// /dbs/{database}/colls/{container}/docs/{item}, as far as it goes.
type requestTarget struct {
	database, container, item string
}

// targetOf reads the path of req by its segments: a container may be named
// "docs".
func targetOf(req *http.Request) requestTarget {
	var t requestTarget
	if req == nil || req.URL == nil {
		return t
	}
	seg := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	if len(seg) < 2 || seg[0] != "dbs" {
		return t
	}
	t.database = seg[1]
	if len(seg) >= 4 && seg[2] == "colls" {
		t.container = seg[3]
		if len(seg) == 6 && seg[4] == "docs" {
			t.item = seg[5]
		}
	}
	return t
}
