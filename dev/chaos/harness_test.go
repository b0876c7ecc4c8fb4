package chaos

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"
	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/clustersim"
	"github.com/opstatus/opstatus/dev/faultproxy"
	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/dev/hostemu"
	"github.com/opstatus/opstatus/dev/stack"
	"github.com/opstatus/opstatus/internal/testenv"
)

var soakFlag = flag.Bool("soak", false, "run the long chaos soak (also OPSTATUS_SOAK=1 or OPSTATUS_SOAK=<duration>)")

// scanInterval is the schedule of scan/function.json (every 10 s).
const scanInterval = 10 * time.Second

// pollQueue and poisonQueue are the queue of poll/function.json and the
// host's poison queue for it.
const (
	pollQueue   = "operations"
	poisonQueue = "operations-poison"
)

// frontendOwner is the owner the simulated frontend writes in its lock items.
const frontendOwner = "frontend"

// seed returns the run's random seed: OPSTATUS_CHAOS_SEED, or the clock.
func seed(t *testing.T) int64 {
	t.Helper()
	if v := os.Getenv("OPSTATUS_CHAOS_SEED"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		require.NoError(t, err, "OPSTATUS_CHAOS_SEED")
		return n
	}
	return time.Now().UnixNano() % 1_000_000
}

// envOptions configure startEnv.
type envOptions struct {
	lockTTL time.Duration
	seed    int64
	sim     clustersim.Faults
	// recordCalls keeps the simulator's call log (Sim.Calls).
	recordCalls bool
	// instances is the number of host instances (default 1);
	// invocationTimeout, when set, is the emulator's functionTimeout.
	instances         int
	invocationTimeout time.Duration
	// flex runs the host as Flex Consumption does, calling onScale after
	// every scale decision.
	flex    *hostemu.FlexOptions
	onScale func(hostemu.ScaleDecision)
	// settings are extra app settings for the handler.
	settings map[string]string
	// simHandler wraps the simulator's HTTP handler.
	simHandler func(http.Handler) http.Handler
	// layout is the Cosmos account's layout (default today's).
	layout testenv.Layout
}

// env is a running stack whose handler reaches Cosmos through a fault proxy,
// with recorders of what happened.
type env struct {
	t *testing.T
	s *stack.Stack
	// fe2024 serves requests as ARO-HCP's 2024-10 frontend did, straight
	// to the Cosmos server.
	fe2024  *frontend.Frontend
	proxy   *faultproxy.Proxy
	inv     *invocations
	db      *direct
	lockTTL time.Duration
	started time.Time

	closeOnce sync.Once
	closeErr  error
}

// startEnv starts the stack with a fault proxy (TLS, no faults yet) in front
// of Cosmos for the handler. Close runs at cleanup, and may be called earlier.
func startEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	testenv.NeedsServers(t)
	ctx := context.Background()
	e := &env{t: t, inv: &invocations{}, lockTTL: o.lockTTL, started: time.Now()}
	s, err := stack.Start(ctx, stack.Options{
		LockTTL:    o.lockTTL,
		Sim:        clustersim.Options{Seed: o.seed, Faults: o.sim, RecordCalls: o.recordCalls},
		SimHandler: o.simHandler,
		Settings:   o.settings,
		Layout:     o.layout,
		Host: hostemu.Options{OnInvocation: e.inv.record, Instances: o.instances,
			InvocationTimeout: o.invocationTimeout, Flex: o.flex, OnScale: o.onScale},
		CosmosWrap: func(endpoint string) (string, error) {
			if err := seedLedger(ctx, endpoint, o.settings["CLUSTER_SERVICE_BUDGET"]); err != nil {
				return "", err
			}
			p, err := faultproxy.New(endpoint, faultproxy.Options{TLS: true, Seed: o.seed, Name: "handler"})
			if err != nil {
				return "", err
			}
			if err := p.Start(); err != nil {
				return "", err
			}
			e.proxy = p
			return p.URL(), nil
		},
	})
	if e.proxy != nil {
		t.Cleanup(func() { require.NoError(t, e.proxy.Close()) })
	}
	require.NoError(t, err)
	e.s = s
	t.Cleanup(func() { require.NoError(t, e.Close()) })
	t.Logf("stack up in %s; handler and host log: %s", time.Since(e.started).Round(time.Millisecond), s.LogPath)
	e.db, err = newDirect(s.Cosmos.Endpoint, s.Cosmos.Key)
	require.NoError(t, err)
	e.db.billingOnPartitionKey = o.layout == testenv.Layout2024
	e.fe2024, err = frontend.New(s.Cosmos.Endpoint, s.Cosmos.Key, stack.Database)
	require.NoError(t, err)
	e.fe2024.Shape, e.fe2024.Location = frontend.Shape2024_10, stack.Location
	return e
}

// Close stops the host (and the handler), then the servers. The proxy stays
// up until cleanup so that its log and stats remain readable either way.
func (e *env) Close() error {
	e.closeOnce.Do(func() { e.closeErr = e.s.Close() })
	return e.closeErr
}

// proxiedFrontend is a frontend client whose requests go through the proxy,
// so that the proxy's write log holds its lock items.
func (e *env) proxiedFrontend() *frontend.Frontend {
	e.t.Helper()
	fe, err := frontend.New(e.proxy.URL(), e.s.Cosmos.Key, stack.Database)
	require.NoError(e.t, err)
	fe.OperationsPartition = e.s.Frontend.OperationsPartition
	return fe
}

// enqueueRaw puts text on the poll queue as the host's base64 encoding wants.
func (e *env) enqueueRaw(ctx context.Context, text string) {
	e.t.Helper()
	_, err := e.s.Queue.NewQueueClient(pollQueue).EnqueueMessage(ctx, base64.StdEncoding.EncodeToString([]byte(text)), nil)
	require.NoError(e.t, err)
}

// poisoned returns the texts of the messages in the poison queue (at most
// 32: the tests queue far fewer malformed ones).
func (e *env) poisoned(ctx context.Context) ([]string, error) {
	resp, err := e.s.Queue.NewQueueClient(poisonQueue).PeekMessages(ctx, &azqueue.PeekMessagesOptions{NumberOfMessages: &peekMax})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range resp.Messages {
		if m == nil || m.MessageText == nil {
			continue
		}
		b, err := base64.StdEncoding.DecodeString(*m.MessageText)
		if err != nil {
			out = append(out, *m.MessageText)
			continue
		}
		out = append(out, string(b))
	}
	slices.Sort(out)
	return out, nil
}

// peekMax is the most messages one peek returns.
var peekMax int32 = 32

// handlerLog returns the handler's and the host's log so far.
func (e *env) handlerLog() string {
	b, err := os.ReadFile(e.s.LogPath)
	require.NoError(e.t, err)
	return string(b)
}

// invocation is one finished invocation, as the host emulator reported it.
type invocation struct {
	Function string
	ID       string
	Instance int       // the host instance that ran it
	Start    time.Time // when it began
	At       time.Time // when it finished
	Duration time.Duration
	Status   int
	// Outcomes counts what the invocation did: for a poll its ReturnValue
	// (operations by outcome), "ok" for a successful scan, "HTTP <status>"
	// for a failed invocation, "no response" when the handler died or could
	// not be reached.
	Outcomes map[string]int
	// Pending is a successful scan's ReturnValue (operations listed); -1
	// otherwise.
	Pending int
}

// invocations records every invocation; safe for concurrent use.
type invocations struct {
	mu   sync.Mutex
	list []invocation
}

func (r *invocations) record(inv hostemu.Invocation) {
	rec := invocation{Function: inv.Function, ID: inv.ID, Instance: inv.Instance, Start: inv.Start, At: time.Now(),
		Duration: inv.Duration, Status: inv.Status, Pending: -1}
	switch {
	case inv.Err == nil && inv.Status/100 == 2:
		rec.Outcomes = map[string]int{"ok": 1}
		var tally map[string]int
		if inv.Function == "poll" && json.Unmarshal(inv.ReturnValue, &tally) == nil {
			rec.Outcomes = tally
		}
		var n int
		if inv.Function == "scan" && json.Unmarshal(inv.ReturnValue, &n) == nil {
			rec.Pending = n
		}
	case inv.Status == 0:
		rec.Outcomes = map[string]int{"no response": 1}
	default:
		rec.Outcomes = map[string]int{fmt.Sprintf("HTTP %d", inv.Status): 1}
	}
	r.mu.Lock()
	r.list = append(r.list, rec)
	r.mu.Unlock()
}

// all returns the invocations so far, in the order they finished.
func (r *invocations) all() []invocation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.list)
}

// outcomes sums function's invocations' outcomes.
func (r *invocations) outcomes(function string) map[string]int {
	out := map[string]int{}
	for _, inv := range r.all() {
		if inv.Function == function {
			for o, n := range inv.Outcomes {
				out[o] += n
			}
		}
	}
	return out
}

// direct reads the Cosmos server without the proxy, for the tests' own
// checks.
type direct struct {
	ops, res, locks, billing, leases *azcosmos.ContainerClient
	// billingOnPartitionKey: the Billing container's key is /partitionKey
	// (2024-10 layout), which billing items then carry.
	billingOnPartitionKey bool
}

func newDirect(endpoint, key string) (*direct, error) {
	cred, err := azcosmos.NewKeyCredential(key)
	if err != nil {
		return nil, err
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the local test server
	client, err := azcosmos.NewClientWithKey(endpoint, cred, &azcosmos.ClientOptions{
		ClientOptions: azcore.ClientOptions{Transport: &http.Client{Transport: transport, Timeout: 30 * time.Second}},
	})
	if err != nil {
		return nil, err
	}
	d := &direct{}
	for name, c := range map[string]**azcosmos.ContainerClient{
		frontend.OperationsContainer: &d.ops, frontend.ResourcesContainer: &d.res, frontend.LocksContainer: &d.locks,
		frontend.BillingContainer: &d.billing, frontend.LeasesContainer: &d.leases,
	} {
		if *c, err = client.NewContainer(stack.Database, name); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// item is a Cosmos item as a generic map.
type item map[string]any

func (i item) str(field string) string {
	s, _ := i[field].(string)
	return s
}

// all returns every item of c by id (ids are unique across partitions in
// these tests).
func (d *direct) all(ctx context.Context, c *azcosmos.ContainerClient) (map[string]item, error) {
	pager := c.NewQueryItemsPager("SELECT * FROM c", azcosmos.NewPartitionKey(), nil)
	out := map[string]item{}
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, raw := range page.Items {
			var it item
			if err := json.Unmarshal(raw, &it); err != nil {
				return nil, err
			}
			out[it.str("id")] = it
		}
	}
	return out, nil
}

func (d *direct) operations(ctx context.Context) (map[string]item, error) { return d.all(ctx, d.ops) }
func (d *direct) resources(ctx context.Context) (map[string]item, error)  { return d.all(ctx, d.res) }
func (d *direct) bills(ctx context.Context) (map[string]item, error)      { return d.all(ctx, d.billing) }

// putBilling writes a billing item as ARO-HCP's backend did, in its
// subscription's partition.
func (d *direct) putBilling(ctx context.Context, b item) error {
	if d.billingOnPartitionKey {
		b = maps.Clone(b)
		b["partitionKey"] = b.str("subscriptionId")
	}
	body, err := json.Marshal(b)
	if err != nil {
		return err
	}
	_, err = d.billing.UpsertItem(ctx, testenv.PK(b.str("subscriptionId")), body, nil)
	return err
}

// lock returns subscription's lock item, nil when there is none.
func (d *direct) lock(ctx context.Context, subscription string) (item, error) {
	id := strings.ToLower(subscription)
	resp, err := d.locks.ReadItem(ctx, testenv.PK(id), id, nil)
	if testenv.StatusOf(err) == http.StatusNotFound {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var it item
	return it, json.Unmarshal(resp.Value, &it)
}
