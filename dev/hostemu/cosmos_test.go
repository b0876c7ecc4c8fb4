package hostemu

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const testCosmosKey = "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw=="

func TestParseCosmosTrigger(t *testing.T) {
	conn := "AccountEndpoint=https://127.0.0.1:8081;AccountKey=" + testCosmosKey + ";DisableServerCertificateValidation=True;"
	account := cosmosAccount{endpoint: "https://127.0.0.1:8081/", key: testCosmosKey, insecure: true}
	tests := []struct {
		name    string
		binding string
		want    CosmosTrigger
		wantErr string
	}{
		{
			name:    "the extension's defaults",
			binding: `"connection":"COSMOS","databaseName":"%DB%","containerName":"Operations"`,
			want: CosmosTrigger{
				Connection: "COSMOS", LeaseConnection: "COSMOS", DatabaseName: "opstatus", ContainerName: "Operations",
				LeaseDatabaseName: "opstatus", LeaseContainerName: "leases",
				FeedPollDelay: 5 * time.Second, LeaseAcquireInterval: 13 * time.Second,
				LeaseExpirationInterval: 60 * time.Second, LeaseRenewInterval: 17 * time.Second,
			},
		},
		{
			name: "every setting, numbers as strings, zero and negative intervals take the defaults",
			binding: `"connection":"COSMOS","databaseName":"%DB%","containerName":"Operations","leaseContainerName":"%LEASES%",
				"leaseDatabaseName":"other","leaseContainerPrefix":"pickup-","createLeaseContainerIfNotExists":"true",
				"feedPollDelay":"250","leaseAcquireInterval":0,"leaseExpirationInterval":-5,"leaseRenewInterval":1000,
				"maxItemsPerInvocation":10,"startFromBeginning":true`,
			want: CosmosTrigger{
				Connection: "COSMOS", LeaseConnection: "COSMOS", DatabaseName: "opstatus", ContainerName: "Operations",
				LeaseDatabaseName: "other", LeaseContainerName: "Leases", LeaseContainerPrefix: "pickup-",
				CreateLeaseContainerIfNotExists: true,
				FeedPollDelay:                   250 * time.Millisecond, LeaseAcquireInterval: 13 * time.Second,
				LeaseExpirationInterval: 60 * time.Second, LeaseRenewInterval: time.Second,
				MaxItemsPerInvocation: 10, StartFromBeginning: true,
			},
		},
		{
			name:    "start time",
			binding: `"connection":"COSMOS","databaseName":"db","containerName":"c","startFromTime":"2021-02-16T14:19:29Z"`,
			want: CosmosTrigger{
				Connection: "COSMOS", LeaseConnection: "COSMOS", DatabaseName: "db", ContainerName: "c",
				LeaseDatabaseName: "db", LeaseContainerName: "leases",
				FeedPollDelay: 5 * time.Second, LeaseAcquireInterval: 13 * time.Second,
				LeaseExpirationInterval: 60 * time.Second, LeaseRenewInterval: 17 * time.Second,
				StartFromTime: time.Date(2021, 2, 16, 14, 19, 29, 0, time.UTC),
			},
		},
		{name: "no container", binding: `"connection":"COSMOS","databaseName":"db"`, wantErr: "containerName is required"},
		{name: "unresolved setting", binding: `"connection":"COSMOS","databaseName":"%NOPE%","containerName":"c"`, wantErr: `setting "NOPE"`},
		{name: "default connection is CosmosDB", binding: `"databaseName":"db","containerName":"c"`, wantErr: `configuration "CosmosDB" does not exist`},
		{name: "identity-based connection", binding: `"connection":"ID","databaseName":"db","containerName":"c"`, wantErr: "identity-based"},
		{name: "both starts", binding: `"connection":"COSMOS","databaseName":"db","containerName":"c","startFromBeginning":true,"startFromTime":"2021-02-16T14:19:29Z"`, wantErr: "only one of StartFromBeginning or StartFromTime"},
		{name: "start time without a zone", binding: `"connection":"COSMOS","databaseName":"db","containerName":"c","startFromTime":"2021-02-16T14:19:29"`, wantErr: "UTC designator"},
		{name: "leases in the monitored container", binding: `"connection":"COSMOS","databaseName":"db","containerName":"leases"`, wantErr: "cannot be the same"},
		{name: "a number that is not", binding: `"connection":"COSMOS","databaseName":"db","containerName":"c","feedPollDelay":"soon"`, wantErr: "feedPollDelay"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			settings := map[string]string{"ID__accountEndpoint": "https://x.documents.azure.com/"}
			for k, v := range map[string]string{"COSMOS": conn, "DB": "opstatus", "LEASES": "Leases"} {
				settings[k] = v
			}
			fj := `{"bindings":[{"name":"documents","type":"cosmosDBTrigger","direction":"in",` + tt.binding + `}]}`
			fn, err := parseFunction("pickup", []byte(fj), settings)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.NotNil(t, fn.Cosmos)
			want := tt.want
			want.Binding = "documents"
			want.account, want.leaseAccount = account, account
			require.Equal(t, want, *fn.Cosmos)
		})
	}

	_, err := parseFunction("pickup", []byte(`{"bindings":[{"name":"documents","type":"cosmosDBTrigger","direction":"in",
		"connection":"COSMOS","databaseName":"db","containerName":"c"}],"retry":{"strategy":"fixedDelay","maxRetryCount":3,"delayInterval":"00:00:05"}}`),
		map[string]string{"COSMOS": conn})
	require.ErrorContains(t, err, "does not model retry policies", "a retry policy the emulator would ignore is refused")
}

func TestParseCosmosConnectionString(t *testing.T) {
	tests := []struct {
		in      string
		want    cosmosAccount
		wantErr string
	}{
		{in: "AccountEndpoint=https://a.documents.azure.com:443/;AccountKey=" + testCosmosKey + ";",
			want: cosmosAccount{endpoint: "https://a.documents.azure.com:443/", key: testCosmosKey}},
		{in: ` accountendpoint = "http://127.0.0.1:1234" ; ACCOUNTKEY=` + testCosmosKey + `;disableServerCertificateValidation=false`,
			want: cosmosAccount{endpoint: "http://127.0.0.1:1234/", key: testCosmosKey}},
		{in: "AccountKey=" + testCosmosKey, wantErr: "missing a required property: AccountEndpoint"},
		{in: "AccountEndpoint=https://a/", wantErr: "missing a required property: AccountKey"},
		{in: "AccountEndpoint=https://a/;AccountKey=not base64!", wantErr: "not base64"},
		{in: "AccountEndpoint=https://a/;AccountKey=" + testCosmosKey + ";DisableServerCertificateValidation=maybe", wantErr: "invalid property"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseCosmosConnectionString(tt.in)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				require.NotContains(t, err.Error(), testCosmosKey, "errors never quote the key")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
	a, err := parseCosmosConnectionString("AccountEndpoint=https://acct.documents.azure.com:443/;AccountKey=" + testCosmosKey)
	require.NoError(t, err)
	require.Equal(t, "acct.documents.azure.com", a.host(), "lease ids carry the host without the port (Uri.Host)")
}

func lease(token, owner string, stamped time.Time) *leaseDoc {
	l := &leaseDoc{ID: "p.." + token, LeaseToken: token, Properties: map[string]string{}}
	if owner != "" {
		l.Owner = &owner
	}
	ts := stamped.UTC().Format(layoutUTC)
	l.Timestamp = &ts
	return l
}

func tokens(ls []*leaseDoc) []string {
	out := []string{}
	for _, l := range ls {
		out = append(out, l.LeaseToken)
	}
	return out
}

func TestLeasesToTake(t *testing.T) {
	// EqualPartitionsBalancingStrategy: a share of ceil(leases / instances);
	// free or expired leases first, else one stolen from the busiest
	// instance when it holds more than its share.
	now := time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)
	const exp = time.Minute
	fresh, stale := now.Add(-10*time.Second), now.Add(-61*time.Second)
	tests := []struct {
		name   string
		leases []*leaseDoc
		want   []string
	}{
		{name: "no leases", want: []string{}},
		{name: "a free lease", leases: []*leaseDoc{lease("0", "", fresh)}, want: []string{"0"}},
		{name: "one lease, another owner: one instance works", leases: []*leaseDoc{lease("0", "other", fresh)}, want: []string{}},
		{name: "one lease, mine", leases: []*leaseDoc{lease("0", "me", fresh)}, want: []string{}},
		{name: "one lease, its owner silent past the expiry", leases: []*leaseDoc{lease("0", "other", stale)}, want: []string{"0"}},
		{name: "just inside the expiry", leases: []*leaseDoc{lease("0", "other", now.Add(-exp))}, want: []string{}},
		{name: "two free leases, I take both", leases: []*leaseDoc{lease("0", "", fresh), lease("1", "", fresh)}, want: []string{"0", "1"}},
		{name: "two leases, one each", leases: []*leaseDoc{lease("0", "other", fresh), lease("1", "", fresh)}, want: []string{"1"}},
		{name: "steal from the busiest", leases: []*leaseDoc{lease("0", "other", fresh), lease("1", "other", fresh)}, want: []string{"0"}},
		{name: "nothing to steal when shares are even", leases: []*leaseDoc{lease("0", "other", fresh), lease("1", "me", fresh)}, want: []string{}},
		{name: "three instances, two leases", leases: []*leaseDoc{lease("0", "a", fresh), lease("1", "b", fresh)}, want: []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, tokens(leasesToTake(tt.leases, "me", exp, now)))
		})
	}
}

// memLeases is a leaseBackend in memory, with etags as Cosmos keeps them.
type memLeases struct {
	mu   sync.Mutex
	docs map[string][]byte
	tags map[string]string
	seq  int
}

func newMemLeases() *memLeases {
	return &memLeases{docs: map[string][]byte{}, tags: map[string]string{}}
}

func (m *memLeases) tag() string { m.seq++; return strconv.Quote(strconv.Itoa(m.seq)) }

func (m *memLeases) list(_ context.Context, prefix string) ([]*leaseDoc, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*leaseDoc
	for id, d := range m.docs {
		if len(id) >= len(prefix) && id[:len(prefix)] == prefix {
			l, err := decodeLease(d)
			if err != nil {
				return nil, err
			}
			l.etag = m.tags[id]
			out = append(out, l)
		}
	}
	return out, nil
}

func (m *memLeases) exists(_ context.Context, id, _ string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.docs[id]
	return ok, nil
}

func (m *memLeases) create(_ context.Context, id, _ string, doc any) (bool, string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.docs[id]; ok {
		return false, "", nil
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return false, "", err
	}
	m.docs[id], m.tags[id] = b, m.tag()
	return true, m.tags[id], nil
}

func (m *memLeases) read(_ context.Context, id, _ string) (*leaseDoc, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, ok := m.docs[id]
	if !ok {
		return nil, errCosmosNotFound
	}
	l, err := decodeLease(d)
	if err != nil {
		return nil, err
	}
	l.etag = m.tags[id]
	return l, nil
}

func (m *memLeases) replace(_ context.Context, l *leaseDoc) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.docs[l.ID]; !ok {
		return "", errCosmosNotFound
	}
	if m.tags[l.ID] != l.etag {
		return "", errLeaseConflict
	}
	b, err := json.Marshal(l)
	if err != nil {
		return "", err
	}
	m.docs[l.ID], m.tags[l.ID] = b, m.tag()
	return m.tags[l.ID], nil
}

func (m *memLeases) remove(_ context.Context, id, _, _ string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.docs, id)
	return nil
}

// feedCall is one read a processor made of a scriptedFeed; the test
// answers it.
type feedCall struct {
	start feedStart
	max   int
	reply chan feedPage
}

// scriptedFeed is a changeFeedSource whose reads the test answers one by
// one.
type scriptedFeed struct{ calls chan feedCall }

func (f *scriptedFeed) read(ctx context.Context, _ string, start feedStart, maxItems int) (feedPage, error) {
	c := feedCall{start: start, max: maxItems, reply: make(chan feedPage)}
	select {
	case f.calls <- c:
	case <-ctx.Done():
		return feedPage{}, ctx.Err()
	}
	select {
	case p := <-c.reply:
		return p, nil
	case <-ctx.Done():
		return feedPage{}, ctx.Err()
	}
}

func nextRead(t *testing.T, f *scriptedFeed) feedCall {
	t.Helper()
	select {
	case c := <-f.calls:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("the processor did not read the feed")
		return feedCall{}
	}
}

func page(lsn int, ids ...string) feedPage {
	if len(ids) == 0 {
		return feedPage{status: http.StatusNotModified, etag: strconv.Quote(strconv.Itoa(lsn))}
	}
	docs := make([]map[string]any, len(ids))
	for i, id := range ids {
		docs[i] = map[string]any{"id": id}
	}
	b, _ := json.Marshal(docs)
	return feedPage{status: http.StatusOK, etag: strconv.Quote(strconv.Itoa(lsn)), documents: b, count: len(ids)}
}

// wait is one wait a listener asked for.
type wait struct {
	why waitKind
	d   time.Duration
}

// testProcessor is a listener on a scripted feed and leases in memory,
// owning lease "0", whose waits are recorded and end at once (or when
// the test closes hold). deliver answers each batch.
type testProcessor struct {
	l     *cosmosListener
	feed  *scriptedFeed
	store *memLeases
	lease *leaseDoc

	mu      sync.Mutex
	waits   []wait
	batches [][]string
}

func newTestProcessor(t *testing.T, cfg CosmosTrigger, deliver func(ids []string) bool) *testProcessor {
	t.Helper()
	h := &Host{}
	h.log = slog.New(slog.DiscardHandler)
	in := &Instance{h: h, crash: make(chan struct{})}
	tp := &testProcessor{feed: &scriptedFeed{calls: make(chan feedCall)}, store: newMemLeases()}
	cfg.Binding = "documents"
	tp.l = &cosmosListener{
		h: h, in: in, fn: &Function{Name: "pickup", Cosmos: &cfg}, cfg: cfg, log: h.log,
		name: "me", feed: tp.feed, store: tp.store, prefix: "p", now: time.Now, owned: map[string]bool{},
	}
	tp.l.sleep = func(ctx context.Context, why waitKind, d time.Duration) bool {
		tp.mu.Lock()
		tp.waits = append(tp.waits, wait{why, d})
		tp.mu.Unlock()
		if why == waitRenew {
			<-ctx.Done() // no renewals: they would write the lease too
			return false
		}
		return ctx.Err() == nil
	}
	tp.l.deliver = func(_ context.Context, documents json.RawMessage, _ int) (bool, error) {
		var docs []struct{ ID string }
		require.NoError(t, json.Unmarshal(documents, &docs))
		var ids []string
		for _, d := range docs {
			ids = append(ids, d.ID)
		}
		tp.mu.Lock()
		tp.batches = append(tp.batches, ids)
		tp.mu.Unlock()
		return deliver(ids), nil
	}
	owner := "me"
	tp.lease = &leaseDoc{ID: "p..0", LeaseToken: "0", Owner: &owner, Properties: map[string]string{}}
	_, etag, err := tp.store.create(t.Context(), tp.lease.ID, tp.lease.ID, tp.lease)
	require.NoError(t, err)
	tp.lease.etag = etag
	return tp
}

// run processes the lease until intake ends; it returns what ended it.
func (tp *testProcessor) run(intake, work context.Context) <-chan error {
	done := make(chan error, 1)
	go func() { done <- tp.l.processFeed(intake, intake, work, tp.l.log, tp.lease) }()
	return done
}

func (tp *testProcessor) continuation(t *testing.T) string {
	t.Helper()
	l, err := tp.store.read(t.Context(), "p..0", "p..0")
	require.NoError(t, err)
	return l.continuation()
}

func (tp *testProcessor) feedWaits() []wait {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	var out []wait
	for _, w := range tp.waits {
		if w.why == waitFeedPoll {
			out = append(out, w)
		}
	}
	return out
}

func TestProcessFeedPollDelay(t *testing.T) {
	// FeedProcessorCore: a read that finds nothing waits FeedPollDelay; a
	// page with documents is followed by the next read at once, without a
	// wait, until one finds nothing again.
	tp := newTestProcessor(t, CosmosTrigger{FeedPollDelay: 5 * time.Second, MaxItemsPerInvocation: 2}, func([]string) bool { return true })
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := tp.run(ctx, ctx)

	c := nextRead(t, tp.feed)
	require.Equal(t, feedStart{}, c.start, "a lease without a continuation starts from now")
	require.Equal(t, 2, c.max, "maxItemsPerInvocation is the page size")
	c.reply <- page(3)
	c = nextRead(t, tp.feed)
	require.Equal(t, []wait{{waitFeedPoll, 5 * time.Second}}, tp.feedWaits(), "nothing new: one FeedPollDelay")
	require.Equal(t, feedStart{continuation: `"3"`}, c.start, "the next read goes on from the answer's etag")
	require.Empty(t, tp.continuation(t), "an answer with nothing is not checkpointed")

	c.reply <- page(5, "a", "b")
	c = nextRead(t, tp.feed)
	require.Len(t, tp.feedWaits(), 1, "after a page with documents the next read comes at once")
	require.Equal(t, `"5"`, tp.continuation(t), "the page is checkpointed before the next read")
	c.reply <- page(6, "c")
	c = nextRead(t, tp.feed)
	require.Len(t, tp.feedWaits(), 1)
	c.reply <- page(6)
	c = nextRead(t, tp.feed)
	require.Equal(t, []wait{{waitFeedPoll, 5 * time.Second}, {waitFeedPoll, 5 * time.Second}}, tp.feedWaits())
	require.Equal(t, [][]string{{"a", "b"}, {"c"}}, tp.batches)
	require.Equal(t, `"6"`, tp.continuation(t))

	cancel()
	require.NoError(t, <-done)
}

func TestProcessFeedCheckpointsAFailedBatch(t *testing.T) {
	// CosmosDBTriggerListener.ProcessChangesAsync only logs a failed
	// invocation: the batch is checkpointed and the feed goes on after it.
	tp := newTestProcessor(t, CosmosTrigger{FeedPollDelay: time.Second}, func(ids []string) bool { return ids[0] != "fail" })
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := tp.run(ctx, ctx)

	nextRead(t, tp.feed).reply <- page(4, "fail", "x")
	c := nextRead(t, tp.feed)
	require.Equal(t, `"4"`, tp.continuation(t), "checkpointed although the invocation failed")
	require.Equal(t, feedStart{continuation: `"4"`}, c.start, "the failed batch is not asked for again")
	c.reply <- page(5, "y")
	nextRead(t, tp.feed)
	require.Equal(t, [][]string{{"fail", "x"}, {"y"}}, tp.batches)
	cancel()
	require.NoError(t, <-done)
}

func TestProcessFeedStoppedDuringABatch(t *testing.T) {
	// A listener stopped while an invocation runs lets it finish, then
	// throws before the checkpoint (outside drain mode), so the next owner
	// gets the batch again; in drain mode the batch is checkpointed.
	for _, drain := range []bool{false, true} {
		t.Run(fmt.Sprintf("drain=%v", drain), func(t *testing.T) {
			intake, stop := context.WithCancel(t.Context())
			entered, finish := make(chan struct{}), make(chan struct{})
			tp := newTestProcessor(t, CosmosTrigger{FeedPollDelay: time.Second}, func([]string) bool {
				close(entered)
				<-finish
				return true
			})
			tp.l.drain = drain
			done := tp.run(intake, t.Context())
			nextRead(t, tp.feed).reply <- page(7, "a")
			<-entered
			stop()
			close(finish)
			err := <-done
			if drain {
				require.NoError(t, err)
				require.Equal(t, `"7"`, tp.continuation(t))
				return
			}
			require.ErrorIs(t, err, errListenerStopped)
			require.Empty(t, tp.continuation(t), "not checkpointed: the batch comes again")
		})
	}
}

func TestProcessFeedLostLease(t *testing.T) {
	// DocumentServiceLeaseCheckpointerCore: a checkpoint on a lease that
	// another instance took meanwhile fails with LeaseLostException and
	// leaves that owner's lease alone.
	var tp *testProcessor
	tp = newTestProcessor(t, CosmosTrigger{FeedPollDelay: time.Second}, func([]string) bool {
		l, err := tp.store.read(context.Background(), "p..0", "p..0")
		require.NoError(t, err)
		other := "other"
		l.Owner = &other
		_, err = tp.store.replace(context.Background(), l)
		require.NoError(t, err)
		return true
	})
	done := tp.run(t.Context(), t.Context())
	nextRead(t, tp.feed).reply <- page(9, "a")
	require.ErrorIs(t, <-done, errLeaseLost)
	require.Empty(t, tp.continuation(t))
}
