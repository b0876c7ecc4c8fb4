package hostemu

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
)

// Defaults of the Cosmos DB extension 4.x (CosmosDBTriggerAttribute,
// CosmosDBTriggerConstants, Constants) and of the change feed processor of
// Microsoft.Azure.Cosmos 3.41 that it builds (ChangeFeedProcessorOptions,
// ChangeFeedLeaseOptions).
const (
	defaultCosmosConnection     = "CosmosDB"
	defaultLeaseContainerName   = "leases"
	defaultFeedPollDelay        = 5 * time.Second
	defaultLeaseAcquireInterval = 13 * time.Second
	defaultLeaseExpiration      = 60 * time.Second
	defaultLeaseRenewInterval   = 17 * time.Second
)

// CosmosTrigger is a cosmosDBTrigger binding with the extension's defaults
// filled in. Intervals that function.json leaves out or sets to 0 or less
// take the processor's defaults, as CosmosDBTriggerListener.
// InitializeBuilder sets only positive ones.
type CosmosTrigger struct {
	Binding string
	// Connection and LeaseConnection are setting names; LeaseConnection
	// defaults to Connection, Connection to "CosmosDB".
	Connection      string
	LeaseConnection string
	// The names below have %SETTING% resolved. LeaseDatabaseName defaults
	// to DatabaseName, LeaseContainerName to "leases".
	DatabaseName       string
	ContainerName      string
	LeaseDatabaseName  string
	LeaseContainerName string
	// LeaseContainerPrefix starts the id of every lease document, so that
	// triggers can share a lease container.
	LeaseContainerPrefix string
	// CreateLeaseContainerIfNotExists makes the host create the lease
	// container (partition key /id, time to live on) before the listener
	// starts; without it a missing lease container keeps the listener from
	// starting.
	CreateLeaseContainerIfNotExists bool
	// FeedPollDelay is the wait after a read of the feed found nothing
	// (default 5 s); LeaseAcquireInterval how often the listener looks for
	// leases to take (13 s); LeaseExpirationInterval how long a lease stays
	// its owner's without renewal (60 s); LeaseRenewInterval how often the
	// owner renews it (17 s).
	FeedPollDelay           time.Duration
	LeaseAcquireInterval    time.Duration
	LeaseExpirationInterval time.Duration
	LeaseRenewInterval      time.Duration
	// MaxItemsPerInvocation bounds the documents of one invocation; 0
	// leaves the page size to the service.
	MaxItemsPerInvocation int
	// StartFromBeginning and StartFromTime say where a lease without a
	// continuation starts reading; neither means from now.
	StartFromBeginning bool
	StartFromTime      time.Time

	account, leaseAccount cosmosAccount
}

// parseCosmosTrigger reads a cosmosDBTrigger binding the way
// CosmosDBTriggerAttributeBindingProvider.TryCreateAsync and
// CosmosDBTriggerListener.InitializeBuilder read the attribute.
func parseCosmosTrigger(b bindingJSON, settings map[string]string) (*CosmosTrigger, error) {
	c := &CosmosTrigger{Binding: b.Name, Connection: b.Connection, LeaseConnection: b.LeaseConnection}
	if c.Connection == "" {
		c.Connection = defaultCosmosConnection
	}
	if c.LeaseConnection == "" {
		c.LeaseConnection = c.Connection
	}
	var err error
	for _, f := range []struct {
		name      string
		raw       string
		dst       *string
		def       string
		mandatory bool
	}{
		{"databaseName", b.DatabaseName, &c.DatabaseName, "", true},
		{"containerName", b.ContainerName, &c.ContainerName, "", true},
		{"leaseContainerName", b.LeaseContainerName, &c.LeaseContainerName, defaultLeaseContainerName, false},
		{"leaseContainerPrefix", b.LeaseContainerPrefix, &c.LeaseContainerPrefix, "", false},
	} {
		v := f.raw
		if v == "" {
			v = f.def
		}
		if *f.dst, err = resolveSettings(v, settings); err != nil {
			return nil, fmt.Errorf("%s: %w", f.name, err)
		}
		if f.mandatory && strings.TrimSpace(*f.dst) == "" {
			return nil, fmt.Errorf("%s is required", f.name)
		}
	}
	c.LeaseDatabaseName = c.DatabaseName
	if b.LeaseDatabaseName != "" {
		if c.LeaseDatabaseName, err = resolveSettings(b.LeaseDatabaseName, settings); err != nil {
			return nil, fmt.Errorf("leaseDatabaseName: %w", err)
		}
	}
	if c.LeaseContainerName == "" {
		return nil, errors.New("leaseContainerName is empty")
	}

	for _, f := range []struct {
		name string
		raw  json.RawMessage
		dst  *time.Duration
		def  time.Duration
	}{
		{"feedPollDelay", b.FeedPollDelay, &c.FeedPollDelay, defaultFeedPollDelay},
		{"leaseAcquireInterval", b.LeaseAcquireInterval, &c.LeaseAcquireInterval, defaultLeaseAcquireInterval},
		{"leaseExpirationInterval", b.LeaseExpirationInterval, &c.LeaseExpirationInterval, defaultLeaseExpiration},
		{"leaseRenewInterval", b.LeaseRenewInterval, &c.LeaseRenewInterval, defaultLeaseRenewInterval},
	} {
		ms, err := jsonInt(f.raw, 0)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.name, err)
		}
		*f.dst = f.def
		if ms > 0 {
			*f.dst = time.Duration(ms) * time.Millisecond
		}
	}
	if c.MaxItemsPerInvocation, err = jsonInt(b.MaxItemsPerInvocation, 0); err != nil {
		return nil, fmt.Errorf("maxItemsPerInvocation: %w", err)
	}
	c.MaxItemsPerInvocation = max(c.MaxItemsPerInvocation, 0)
	if c.CreateLeaseContainerIfNotExists, err = jsonBool(b.CreateLeaseContainerIfNotExists, false); err != nil {
		return nil, fmt.Errorf("createLeaseContainerIfNotExists: %w", err)
	}
	if c.StartFromBeginning, err = jsonBool(b.StartFromBeginning, false); err != nil {
		return nil, fmt.Errorf("startFromBeginning: %w", err)
	}
	if b.StartFromTime != "" {
		v, err := resolveSettings(b.StartFromTime, settings)
		if err != nil {
			return nil, fmt.Errorf("startFromTime: %w", err)
		}
		if c.StartFromBeginning {
			return nil, errors.New("only one of StartFromBeginning or StartFromTime can be used")
		}
		// ChangeFeedProcessorOptions.StartTime refuses a time without a zone.
		if c.StartFromTime, err = time.Parse(time.RFC3339Nano, strings.TrimSpace(v)); err != nil {
			return nil, fmt.Errorf("startFromTime %q: use the ISO 8601 format with the UTC designator, for example 2021-02-16T14:19:29Z", v)
		}
	}

	if strings.EqualFold(c.Connection, c.LeaseConnection) && strings.EqualFold(c.DatabaseName, c.LeaseDatabaseName) &&
		strings.EqualFold(c.ContainerName, c.LeaseContainerName) {
		return nil, errors.New("the monitored container cannot be the same as the container storing the leases")
	}
	if c.account, err = resolveCosmosAccount(c.Connection, settings); err != nil {
		return nil, err
	}
	if c.leaseAccount, err = resolveCosmosAccount(c.LeaseConnection, settings); err != nil {
		return nil, err
	}
	return c, nil
}

// jsonInt reads a number that function.json may write as 5000 or "5000".
func jsonInt(raw json.RawMessage, def int) (int, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return def, nil
	}
	var n int
	if err := json.Unmarshal(raw, &n); err == nil {
		return n, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		if v, err := strconv.Atoi(strings.TrimSpace(s)); err == nil {
			return v, nil
		}
	}
	return 0, fmt.Errorf("%s is not an integer", raw)
}

// cosmosAccount is a Cosmos DB account as a connection string names it.
// It is comparable, so that clients can be shared per account.
type cosmosAccount struct {
	endpoint string // ends with "/"
	key      string
	// insecure is the connection string's DisableServerCertificateValidation,
	// which the SDK honours for emulators with self-signed certificates
	// (CosmosClientOptions.GetCosmosClientOptionsWithCertificateFlag).
	insecure bool
}

// resolveCosmosAccount finds a Cosmos DB connection the way the extension
// does (DefaultCosmosDBServiceFactory.ResolveConnectionInformation,
// GetWebJobsConnectionStringSection): the setting AzureWebJobs<name>, then
// <name>; a value is a connection string. An identity-based connection
// (<name>__accountEndpoint) needs a token the emulator cannot get.
func resolveCosmosAccount(name string, settings map[string]string) (cosmosAccount, error) {
	for _, n := range []string{"AzureWebJobs" + name, name} {
		if v := strings.TrimSpace(settings[n]); v != "" {
			a, err := parseCosmosConnectionString(v)
			if err != nil {
				return cosmosAccount{}, fmt.Errorf("connection setting %q: %w", n, err)
			}
			return a, nil
		}
		if settings[n+"__accountEndpoint"] != "" {
			return cosmosAccount{}, fmt.Errorf("connection %q is identity-based (%s__accountEndpoint): the emulator needs a connection string", name, n)
		}
	}
	return cosmosAccount{}, unresolvedError{fmt.Errorf("cosmos DB connection configuration %q does not exist: make sure that it is a defined app setting", name)}
}

// parseCosmosConnectionString reads "AccountEndpoint=…;AccountKey=…;" with
// DbConnectionStringBuilder's rules: keys in any case, values optionally
// quoted. Its errors never quote the key.
func parseCosmosConnectionString(s string) (cosmosAccount, error) {
	var a cosmosAccount
	for _, part := range strings.Split(s, ";") {
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
			v = v[1 : len(v)-1]
		}
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "accountendpoint":
			a.endpoint = v
		case "accountkey":
			a.key = v
		case "disableservercertificatevalidation":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return cosmosAccount{}, errors.New("the connection string contains invalid property: DisableServerCertificateValidation")
			}
			a.insecure = b
		}
	}
	if a.endpoint == "" {
		return cosmosAccount{}, errors.New("the connection string is missing a required property: AccountEndpoint")
	}
	if a.key == "" {
		return cosmosAccount{}, errors.New("the connection string is missing a required property: AccountKey")
	}
	u, err := url.Parse(a.endpoint)
	if err != nil || u.Host == "" {
		return cosmosAccount{}, errors.New("the connection string's AccountEndpoint is not a URL")
	}
	if _, err := base64.StdEncoding.DecodeString(a.key); err != nil {
		return cosmosAccount{}, errors.New("the connection string's AccountKey is not base64")
	}
	if !strings.HasSuffix(a.endpoint, "/") {
		a.endpoint += "/"
	}
	return a, nil
}

// host is the endpoint's host name without the port (Uri.Host), part of
// every lease id (CosmosContainerExtensions.GetLeasePrefix).
func (a cosmosAccount) host() string {
	u, _ := url.Parse(a.endpoint)
	return u.Hostname()
}

// cosmosClients caches one client per account.
type cosmosClients struct {
	mu      sync.Mutex
	clients map[cosmosAccount]*cosmosClient
}

func (c *cosmosClients) get(a cosmosAccount) (*cosmosClient, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl, ok := c.clients[a]; ok {
		return cl, nil
	}
	cl, err := newCosmosClient(a)
	if err != nil {
		return nil, err
	}
	if c.clients == nil {
		c.clients = map[cosmosAccount]*cosmosClient{}
	}
	c.clients[a] = cl
	return cl, nil
}

// cosmosClient talks to one account: azcosmos for containers and lease
// documents, and REST requests of its own for what azcosmos cannot ask:
// the partition key ranges, and the change feed from now or from a
// continuation that is a plain LSN, as the processor keeps it.
type cosmosClient struct {
	account cosmosAccount
	http    *http.Client
	az      *azcosmos.Client
}

func newCosmosClient(a cosmosAccount) (*cosmosClient, error) {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64
	if a.insecure {
		t.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // DisableServerCertificateValidation, emulators only
	}
	hc := &http.Client{Transport: t}
	cred, err := azcosmos.NewKeyCredential(a.key)
	if err != nil {
		return nil, fmt.Errorf("cosmos account %s: the key is not valid", a.endpoint)
	}
	az, err := azcosmos.NewClientWithKey(a.endpoint, cred, &azcosmos.ClientOptions{ClientOptions: policy.ClientOptions{Transport: hc}})
	if err != nil {
		return nil, fmt.Errorf("cosmos account %s: %w", a.endpoint, err)
	}
	return &cosmosClient{account: a, http: hc, az: az}, nil
}

// errCosmosNotFound is a 404 from Cosmos DB.
var errCosmosNotFound = errors.New("not found")

// cosmosStatus returns the HTTP status of an azcosmos error, 0 when it
// carries none.
func cosmosStatus(err error) int {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode
	}
	return 0
}

// containerInfo is what the processor reads of a container before it
// starts.
type containerInfo struct {
	rid         string
	databaseRID string
	pkPaths     []string
}

// readContainer reads a container's and its database's resource ids and
// its partition key paths; a missing one is errCosmosNotFound.
func (c *cosmosClient) readContainer(ctx context.Context, db, coll string) (containerInfo, error) {
	cc, err := c.az.NewContainer(db, coll)
	if err != nil {
		return containerInfo{}, err
	}
	resp, err := cc.Read(ctx, nil)
	if cosmosStatus(err) == http.StatusNotFound {
		return containerInfo{}, fmt.Errorf("container %s/%s: %w", db, coll, errCosmosNotFound)
	}
	if err != nil {
		return containerInfo{}, fmt.Errorf("reading container %s/%s: %w", db, coll, err)
	}
	info := containerInfo{rid: resp.ContainerProperties.ResourceID, pkPaths: resp.ContainerProperties.PartitionKeyDefinition.Paths}
	dc, err := c.az.NewDatabase(db)
	if err != nil {
		return containerInfo{}, err
	}
	dresp, err := dc.Read(ctx, nil)
	if err != nil {
		return containerInfo{}, fmt.Errorf("reading database %s: %w", db, err)
	}
	info.databaseRID = dresp.DatabaseProperties.ResourceID
	return info, nil
}

// ensureLeaseContainer creates the database and the lease container when
// missing, as CosmosDBUtility.CreateDatabaseAndCollectionIfNotExistAsync
// does for createLeaseContainerIfNotExists: partition key /id, time to
// live on without a default.
func (c *cosmosClient) ensureLeaseContainer(ctx context.Context, db, coll string) error {
	if _, err := c.az.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: db}, nil); err != nil && cosmosStatus(err) != http.StatusConflict {
		return fmt.Errorf("creating database %s: %w", db, err)
	}
	dc, err := c.az.NewDatabase(db)
	if err != nil {
		return err
	}
	cc, err := dc.NewContainer(coll)
	if err != nil {
		return err
	}
	_, err = cc.Read(ctx, nil)
	if cosmosStatus(err) != http.StatusNotFound {
		if err != nil {
			return fmt.Errorf("reading container %s/%s: %w", db, coll, err)
		}
		return nil
	}
	ttl := int32(-1)
	props := azcosmos.ContainerProperties{
		ID:                     coll,
		PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{Paths: []string{"/id"}},
		DefaultTimeToLive:      &ttl,
	}
	if _, err := dc.CreateContainer(ctx, props, nil); err != nil && cosmosStatus(err) != http.StatusConflict {
		return fmt.Errorf("creating container %s/%s: %w", db, coll, err)
	}
	return nil
}

// pkRange is one partition key range of a container.
type pkRange struct {
	ID           string `json:"id"`
	MinInclusive string `json:"minInclusive"`
	MaxExclusive string `json:"maxExclusive"`
}

// partitionKeyRanges lists a container's partition key ranges, as the
// processor's PartitionKeyRangeCache does, to make one lease per range.
func (c *cosmosClient) partitionKeyRanges(ctx context.Context, db, coll string) ([]pkRange, error) {
	link := "dbs/" + db + "/colls/" + coll
	status, _, body, err := c.rest(ctx, http.MethodGet, "pkranges", link, link+"/pkranges", nil)
	if err != nil {
		return nil, err
	}
	if status != http.StatusOK {
		return nil, fmt.Errorf("listing the partition key ranges of %s: status %d: %s", link, status, snippet(body))
	}
	var page struct {
		PartitionKeyRanges []pkRange `json:"PartitionKeyRanges"`
	}
	if err := json.Unmarshal(body, &page); err != nil {
		return nil, fmt.Errorf("listing the partition key ranges of %s: %w", link, err)
	}
	return page.PartitionKeyRanges, nil
}

// feedStart says where a read of the change feed starts.
type feedStart struct {
	// continuation is the LSN etag to read after; when empty, beginning
	// reads from the start, since from a time, and neither from now.
	continuation string
	beginning    bool
	since        time.Time
}

// feedPage is one answer of the change feed.
type feedPage struct {
	// status is 200 with documents, 304 when nothing changed.
	status int
	// etag is the continuation after this page.
	etag string
	// documents is the page's JSON array of documents, as Cosmos sent it.
	documents json.RawMessage
	count     int
}

// readChangeFeed reads one page of a partition key range's change feed as
// ChangeFeedPartitionKeyResultSetIteratorCore asks for it (A-IM:
// Incremental feed; ChangeFeedStartFromRequestOptionPopulator: If-None-Match
// "*" from now, the etag from a continuation, If-Modified-Since from a
// time, nothing from the beginning; x-ms-max-item-count when maxItems is
// set).
func (c *cosmosClient) readChangeFeed(ctx context.Context, db, coll, rangeID string, start feedStart, maxItems int) (feedPage, error) {
	link := "dbs/" + db + "/colls/" + coll
	h := map[string]string{
		"A-IM":                                "Incremental feed",
		"x-ms-documentdb-partitionkeyrangeid": rangeID,
	}
	switch {
	case start.continuation != "":
		h["If-None-Match"] = start.continuation
	case start.beginning:
	case !start.since.IsZero():
		h["If-Modified-Since"] = start.since.UTC().Format(http.TimeFormat)
	default:
		h["If-None-Match"] = "*"
	}
	if maxItems > 0 {
		h["x-ms-max-item-count"] = strconv.Itoa(maxItems)
	}
	status, header, body, err := c.rest(ctx, http.MethodGet, "docs", link, link+"/docs", h)
	if err != nil {
		return feedPage{}, err
	}
	page := feedPage{status: status, etag: header.Get("etag")}
	switch status {
	case http.StatusNotModified:
		return page, nil
	case http.StatusOK:
	default:
		return page, fmt.Errorf("reading the change feed of %s: status %d (substatus %s): %s", link, status, header.Get("x-ms-substatus"), snippet(body))
	}
	var doc struct {
		Documents json.RawMessage `json:"Documents"`
		Count     int             `json:"_count"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return page, fmt.Errorf("reading the change feed of %s: %w", link, err)
	}
	page.documents, page.count = doc.Documents, doc.Count
	return page, nil
}

// rest sends a request signed with the account key as the SDKs sign them.
func (c *cosmosClient) rest(ctx context.Context, method, resourceType, resourceLink, path string, header map[string]string) (int, http.Header, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.account.endpoint+path, nil)
	if err != nil {
		return 0, nil, nil, err
	}
	date := strings.ToLower(time.Now().UTC().Format(http.TimeFormat))
	key, err := base64.StdEncoding.DecodeString(c.account.key)
	if err != nil {
		return 0, nil, nil, errors.New("the account key is not base64")
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(strings.ToLower(method) + "\n" + resourceType + "\n" + resourceLink + "\n" + date + "\n\n"))
	sig := base64.StdEncoding.EncodeToString(mac.Sum(nil))
	req.Header.Set("authorization", url.QueryEscape("type=master&ver=1.0&sig="+sig))
	req.Header.Set("x-ms-date", date)
	req.Header.Set("x-ms-version", "2020-07-15")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return resp.StatusCode, resp.Header, nil, fmt.Errorf("%s %s: reading the response: %w", method, path, err)
	}
	return resp.StatusCode, resp.Header, bytes.TrimSpace(body), nil
}
