package testenv

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
)

// CosmosEmulatorKey is the well-known account key of the Cosmos DB emulator.
// The test server accepts any key; clients still need a valid base64 one.
const CosmosEmulatorKey = "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw=="

// CosmosOptions configures StartCosmos.
type CosmosOptions struct {
	// PlainHTTP serves http instead of https. Over https the server's
	// certificate is self-signed (and expired): clients must skip
	// verification (COSMOS_INSECURE_SKIP_VERIFY=true).
	PlainHTTP bool
}

// Cosmos is a running Cosmos DB test server (dev/cosmosdb/server.js),
// in memory and empty when it starts.
type Cosmos struct {
	// Endpoint is the account endpoint, e.g. "https://127.0.0.1:41234/".
	Endpoint string
	// Key is an account key the server accepts (CosmosEmulatorKey).
	Key string
	// LogPath is the file that receives the server's stdout and stderr.
	LogPath string

	proc *process
}

// nodeYoungGeneration sizes the server's V8 young generation: every request
// allocates short-lived objects, and at V8's default semi-space size the
// scavenges were a large share of the server's CPU under a burst of writes.
const nodeYoungGeneration = "--max-semi-space-size=64"

// StartCosmos starts a Cosmos DB test server on 127.0.0.1 and a free port,
// installing dev/node_modules first if needed, and returns once it listens.
// Call Stop when done.
func StartCosmos(ctx context.Context, opts CosmosOptions) (*Cosmos, error) {
	if err := EnsureNodeModules(ctx); err != nil {
		return nil, fmt.Errorf("starting cosmos: %w", err)
	}
	dev, err := devDir()
	if err != nil {
		return nil, fmt.Errorf("starting cosmos: %w", err)
	}
	args := []string{"node", nodeYoungGeneration, filepath.Join(dev, "cosmosdb", "server.js"), "--port", "0", "--host", "127.0.0.1"}
	if opts.PlainHTTP {
		args = append(args, "--no-ssl")
	}
	var endpoint string
	proc, err := startProcess(ctx, "cosmos", dev, args, func(line string) bool {
		url, ok := strings.CutPrefix(line, "ready ")
		if ok {
			endpoint = strings.TrimSpace(url) + "/"
		}
		return ok
	})
	if err != nil {
		return nil, err
	}
	return &Cosmos{Endpoint: endpoint, Key: CosmosEmulatorKey, LogPath: proc.logPath, proc: proc}, nil
}

// RequestCount is how many requests the server answered to one container,
// of one kind, with one status (0 when the connection closed first).
type RequestCount struct {
	// Container is the container's id, empty for account, database and
	// container requests.
	Container string `json:"container"`
	// Kind is "read", "changefeed" (a read of the feed with A-IM),
	// "query", "create", "upsert", "replace", "delete", "patch", "batch",
	// or "meta" for anything but items.
	Kind   string `json:"kind"`
	Status int    `json:"status"`
	Count  int64  `json:"count"`
}

// Counts returns the requests the server has answered for database db,
// counted by the server itself (dev/cosmosdb/lib/counts.js), so that a
// benchmark needs no counting proxy in front of it.
func (c *Cosmos) Counts(ctx context.Context, db string) ([]RequestCount, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.Endpoint+"_opstatus/counts/"+url.PathEscape(db), nil)
	if err != nil {
		return nil, fmt.Errorf("reading request counts: %w", err)
	}
	resp, err := countsClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading request counts: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("reading request counts: status %s", resp.Status)
	}
	var out []RequestCount
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("reading request counts: %w", err)
	}
	return out, nil
}

// countsClient reads counts from a server whose certificate is self-signed.
var countsClient = &http.Client{Transport: &http.Transport{
	TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // local test server
}}

// Stop ends the server and waits for it to exit. Its data is lost.
func (c *Cosmos) Stop() error {
	return c.proc.Stop()
}

// MaxRequestBytes is the largest request body the test server takes, as
// Cosmos DB: 2 MB, an item with it; a larger one is answered 413.
const MaxRequestBytes = 2 << 20

// ContainerSpec describes a container for CreateDatabase.
type ContainerSpec struct {
	// Name is the container id.
	Name string
	// PartitionKeyPath is the partition key path, e.g. "/partitionKey".
	PartitionKeyPath string
	// HierarchicalPaths, when set, makes the partition key hierarchical
	// (MultiHash) over these paths, in place of PartitionKeyPath.
	HierarchicalPaths []string
	// DefaultTTL is the container's DefaultTimeToLive in seconds: nil turns
	// time to live off, -1 turns it on without a default expiry.
	DefaultTTL *int32
}

// Layout is the partition key paths of the containers opstatus uses, as a
// revision of ARO-HCP's dev-infrastructure created the account.
type Layout int

const (
	// LayoutCurrent is ARO-HCP's layout from 2025-06: Billing on
	// /subscriptionId.
	LayoutCurrent Layout = iota
	// Layout2024 is the account as ARO-HCP created it in 2024-10
	// (dev-infrastructure at 0195ac565): Locks on /id and every other
	// container of the frontend's, Billing too, on /partitionKey.
	Layout2024
)

// Containers returns the specs of the containers opstatus uses, by their
// default names: Operations, Resources, Locks (expiring items after
// lockTTL, in whole seconds), Billing and Leases (pickup's, /id).
func (l Layout) Containers(lockTTL time.Duration) []ContainerSpec {
	ttl := int32(lockTTL / time.Second)
	billing := "/subscriptionId"
	if l == Layout2024 {
		billing = "/partitionKey"
	}
	return []ContainerSpec{
		{Name: "Operations", PartitionKeyPath: "/partitionKey"},
		{Name: "Resources", PartitionKeyPath: "/partitionKey"},
		{Name: "Locks", PartitionKeyPath: "/id", DefaultTTL: &ttl},
		{Name: "Billing", PartitionKeyPath: billing},
		{Name: "Leases", PartitionKeyPath: "/id"},
	}
}

// String names the layout by the ARO-HCP revisions that created it.
func (l Layout) String() string {
	if l == Layout2024 {
		return "2024-10"
	}
	return "current"
}

// CreateDatabase creates database name with the given containers at a Cosmos
// DB endpoint. It skips certificate verification, for test servers only.
func CreateDatabase(ctx context.Context, endpoint, key, name string, containers ...ContainerSpec) error {
	client, err := NewCosmosClient(endpoint, key)
	if err != nil {
		return fmt.Errorf("creating database %s: %w", name, err)
	}
	if _, err := client.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: name}, nil); err != nil {
		return fmt.Errorf("creating database %s: %w", name, err)
	}
	db, err := client.NewDatabase(name)
	if err != nil {
		return fmt.Errorf("creating database %s: %w", name, err)
	}
	for _, spec := range containers {
		if spec.Name == "" || spec.PartitionKeyPath == "" && len(spec.HierarchicalPaths) == 0 {
			return errors.New("creating database " + name + ": a container needs a name and a partition key path")
		}
		key := azcosmos.PartitionKeyDefinition{Paths: []string{spec.PartitionKeyPath}}
		if len(spec.HierarchicalPaths) > 0 {
			key = azcosmos.PartitionKeyDefinition{Kind: azcosmos.PartitionKeyKindMultiHash, Version: 2, Paths: spec.HierarchicalPaths}
		}
		props := azcosmos.ContainerProperties{
			ID:                     spec.Name,
			PartitionKeyDefinition: key,
			DefaultTimeToLive:      spec.DefaultTTL,
		}
		if _, err := db.CreateContainer(ctx, props, nil); err != nil {
			return fmt.Errorf("creating container %s/%s: %w", name, spec.Name, err)
		}
	}
	return nil
}

// NewCosmosClient returns a client for a test server, whose certificate is
// self-signed.
func NewCosmosClient(endpoint, key string) (*azcosmos.Client, error) {
	cred, err := azcosmos.NewKeyCredential(key)
	if err != nil {
		return nil, err
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // local test server
	transport.MaxIdleConnsPerHost = 32
	return azcosmos.NewClientWithKey(endpoint, cred, &azcosmos.ClientOptions{
		ClientOptions: azcore.ClientOptions{Transport: &http.Client{Transport: transport}},
	})
}

// Database is a database of one test on a Cosmos test server.
type Database struct {
	// Name is the database's id.
	Name string
	// Containers are clients of its containers, by name.
	Containers map[string]*azcosmos.ContainerClient
}

// NewDatabase creates on c a database of the test's own (see
// DatabaseName) with one container per spec, and returns it with a client
// of each container.
func (c *Cosmos) NewDatabase(t testing.TB, specs ...ContainerSpec) *Database {
	t.Helper()
	name := DatabaseName(t)
	if err := CreateDatabase(t.Context(), c.Endpoint, c.Key, name, specs...); err != nil {
		t.Fatal(err)
	}
	client, err := NewCosmosClient(c.Endpoint, c.Key)
	if err != nil {
		t.Fatal(err)
	}
	db := &Database{Name: name, Containers: map[string]*azcosmos.ContainerClient{}}
	for _, spec := range specs {
		if db.Containers[spec.Name], err = client.NewContainer(name, spec.Name); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

var databaseSeq atomic.Int64

// unsafeInName matches what a database name made from a test name leaves
// out.
var unsafeInName = regexp.MustCompile(`[^A-Za-z0-9]+`)

// DatabaseName returns a name for a database of the test's own: the
// test's name and a number no other call in this test binary returns, so
// that tests sharing a server never meet.
func DatabaseName(t testing.TB) string {
	name := unsafeInName.ReplaceAllString(t.Name(), "-")
	// Cosmos DB ids have at most 255 characters.
	if len(name) > 200 {
		name = name[:200]
	}
	return fmt.Sprintf("%s-%d", name, databaseSeq.Add(1))
}

// PK is the partition key whose value is s.
func PK(s string) azcosmos.PartitionKey { return azcosmos.NewPartitionKeyString(s) }

// StatusOf returns the HTTP status of an Azure SDK error, or 0 when the
// error carries no response (a transport error).
func StatusOf(err error) int {
	var respErr *azcore.ResponseError
	if errors.As(err, &respErr) {
		return respErr.StatusCode
	}
	return 0
}
