package hostemu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"
)

// CosmosTriggerOptions shortens the intervals of the cosmosDBTrigger
// listeners, for tests. A zero field keeps function.json's value, or the
// extension's default.
type CosmosTriggerOptions struct {
	// FeedPollDelay, LeaseAcquireInterval, LeaseExpirationInterval and
	// LeaseRenewInterval replace function.json's values (see CosmosTrigger).
	FeedPollDelay           time.Duration
	LeaseAcquireInterval    time.Duration
	LeaseExpirationInterval time.Duration
	LeaseRenewInterval      time.Duration
	// BootstrapRetry is how long a listener waits while another instance
	// creates the leases. Default 15 s (BootstrapperCore.DefaultSleepTime).
	BootstrapRetry time.Duration
	// ListenerRetryMin and ListenerRetryMax bound the back-off between
	// attempts to start a listener that failed to start. Default 2 s and
	// 2 minutes (FunctionListener).
	ListenerRetryMin time.Duration
	ListenerRetryMax time.Duration
}

// Back-off of a listener that fails to start (FunctionListener's
// _minRetryInterval and _maxRetryInterval).
const (
	defaultListenerRetryMin = 2 * time.Second
	defaultListenerRetryMax = 2 * time.Minute
)

// waitKind names what a listener waits for, so that tests can tell the
// waits apart.
type waitKind int

const (
	waitFeedPoll      waitKind = iota // nothing changed: FeedPollDelay
	waitAcquire                       // between looks for leases: LeaseAcquireInterval
	waitRenew                         // between renewals: LeaseRenewInterval (half of it first)
	waitBootstrap                     // another instance creates the leases
	waitListenerRetry                 // the listener failed to start
)

// changeFeedSource reads a container's change feed; tests replace it.
type changeFeedSource interface {
	read(ctx context.Context, rangeID string, start feedStart, maxItems int) (feedPage, error)
}

// clientFeed is a changeFeedSource on a Cosmos DB container.
type clientFeed struct {
	c        *cosmosClient
	db, coll string
}

func (f clientFeed) read(ctx context.Context, rangeID string, start feedStart, maxItems int) (feedPage, error) {
	return f.c.readChangeFeed(ctx, f.db, f.coll, rangeID, start, maxItems)
}

// Errors that end a lease's processing.
var (
	// errListenerStopped is the cancellation CosmosDBTriggerListener.
	// ProcessChangesAsync throws after an invocation when the listener was
	// stopped meanwhile, so that the batch is not checkpointed.
	errListenerStopped = errors.New("the listener stopped during the invocation")
	// errUserDocuments is a page whose documents do not deserialize, which
	// the processor reports as the observer's failure.
	errUserDocuments = errors.New("the documents do not deserialize")
)

// cosmosListener is one instance's listener of a cosmosDBTrigger function:
// the change feed processor that CosmosDBTriggerListener builds and starts
// (ChangeFeedProcessorCore, PartitionManagerCore, PartitionLoadBalancerCore,
// PartitionControllerCore, PartitionSupervisorCore, FeedProcessorCore,
// LeaseRenewerCore, AutoCheckpointer), wrapped in the WebJobs SDK's
// FunctionListener.
type cosmosListener struct {
	h   *Host
	in  *Instance
	fn  *Function
	cfg CosmosTrigger // fn.Cosmos with Options.CosmosTrigger applied
	log *slog.Logger
	// name is the processor's instance name, new for every listener
	// (CosmosDBTriggerListener._hostName is a new GUID), so a listener never
	// finds leases of its own when it starts.
	name string
	// drain is drain mode (FUNCTIONS_ENABLE_DRAIN_ON_APP_STOPPING, and on
	// Flex Consumption, whose scale-in drains an instance): a batch in
	// flight when the listener stops is still checkpointed.
	drain bool
	// retryMin, retryMax and bootstrapRetry are the start waits.
	retryMin, retryMax, bootstrapRetry time.Duration

	// start connects the listener (set by newCosmosListener; tests
	// replace it). It sets feed, store, prefix and byPartitionKey.
	start          func(ctx context.Context) error
	feed           changeFeedSource
	store          leaseBackend
	prefix         string // lease ids are prefix + ".." + lease token
	byPartitionKey bool   // the lease container's key is /partitionKey

	// sleep waits d unless ctx ends first; now is the clock of lease
	// timestamps; deliver invokes the function with a page's documents and
	// reports whether the invocation succeeded, or errUserDocuments when
	// they do not deserialize. Tests replace them.
	sleep   func(ctx context.Context, why waitKind, d time.Duration) bool
	now     func() time.Time
	deliver func(ctx context.Context, documents json.RawMessage, count int) (bool, error)

	mu    sync.Mutex
	owned map[string]bool // lease tokens being processed
}

func newCosmosListener(h *Host, in *Instance, fn *Function) *cosmosListener {
	cfg := *fn.Cosmos
	o := h.opts.CosmosTrigger
	if o == nil {
		o = &CosmosTriggerOptions{}
	}
	for _, f := range []struct {
		dst *time.Duration
		v   time.Duration
	}{
		{&cfg.FeedPollDelay, o.FeedPollDelay},
		{&cfg.LeaseAcquireInterval, o.LeaseAcquireInterval},
		{&cfg.LeaseExpirationInterval, o.LeaseExpirationInterval},
		{&cfg.LeaseRenewInterval, o.LeaseRenewInterval},
	} {
		if f.v > 0 {
			*f.dst = f.v
		}
	}
	l := &cosmosListener{
		h: h, in: in, fn: fn, cfg: cfg,
		log:            h.log.With("function", fn.Name, "instance", in.index),
		name:           newUUID(),
		drain:          isTrue(h.settings["FUNCTIONS_ENABLE_DRAIN_ON_APP_STOPPING"]) || h.opts.Flex != nil,
		retryMin:       positiveOr(o.ListenerRetryMin, defaultListenerRetryMin),
		retryMax:       positiveOr(o.ListenerRetryMax, defaultListenerRetryMax),
		bootstrapRetry: positiveOr(o.BootstrapRetry, defaultBootstrapRetry),
		now:            time.Now,
		owned:          map[string]bool{},
	}
	l.retryMax = max(l.retryMax, l.retryMin)
	l.start = l.connect
	l.sleep = func(ctx context.Context, _ waitKind, d time.Duration) bool { return sleepCtx(ctx, d) }
	l.deliver = l.invoke
	return l
}

func positiveOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// logName is the function's name in the host's logs (FunctionDescriptor.
// ShortName of a script function).
func (l *cosmosListener) logName() string { return "Functions." + l.fn.Name }

// run runs the listener until intake ends: it starts the processor, takes
// leases every LeaseAcquireInterval and processes each in a goroutine of
// its own; invocations and the writes that follow them use work. When
// intake ends it stops looking for leases and waits for every lease's
// processing to end (PartitionManagerCore.StopAsync).
func (l *cosmosListener) run(intake, work context.Context) {
	if !l.startWithRetry(intake) {
		return
	}
	var wg sync.WaitGroup
	for {
		// PartitionLoadBalancerCore.RunAsync: an iteration that fails is
		// logged, and the next comes after the interval all the same.
		all, err := l.store.list(intake, l.prefix+leaseSeparator)
		if err != nil && intake.Err() == nil {
			l.log.Warn("hostemu: looking for leases failed", "err", err)
		}
		for _, lease := range leasesToTake(all, l.name, l.cfg.LeaseExpirationInterval, l.now()) {
			l.acquire(intake, work, lease, &wg)
		}
		if !l.sleep(intake, waitAcquire, l.cfg.LeaseAcquireInterval) {
			break
		}
	}
	wg.Wait()
}

// startWithRetry starts the processor. A start that fails is logged as an
// error and tried again after a randomized exponential back-off, until it
// succeeds or intake ends (FunctionListener.StartAsync and
// RetryStartWithBackoffAsync, the host allowing a partial start).
func (l *cosmosListener) startWithRetry(intake context.Context) bool {
	err := l.start(intake)
	if err == nil {
		l.log.Debug("hostemu: the listener started", "prefix", l.prefix, "owner", l.name)
		return true
	}
	b := newBackoff(l.retryMin, l.retryMax)
	for attempt := 1; ; attempt++ {
		if intake.Err() != nil {
			return false
		}
		l.h.stats.listenerFailures.Add(1)
		l.log.Error(fmt.Sprintf("hostemu: the listener for function '%s' was unable to start", l.logName()), "err", err)
		if !l.sleep(intake, waitListenerRetry, b.next(false)) {
			return false
		}
		l.log.Info(fmt.Sprintf("hostemu: retrying to start listener for function '%s' (attempt %d)", l.logName(), attempt))
		if err = l.start(intake); err == nil {
			l.log.Info(fmt.Sprintf("hostemu: listener successfully started for function '%s' after %d retries", l.logName(), attempt))
			return true
		}
	}
}

// connect is ChangeFeedProcessorCore.InitializeAsync and the bootstrap
// that PartitionManagerCore.StartAsync runs: read both containers (a
// missing one stops the start with CosmosDBTriggerListener.StartAsync's
// message), check the lease container's partition key, derive the lease
// prefix, and create the leases if no instance has yet.
func (l *cosmosListener) connect(ctx context.Context) error {
	c := l.cfg
	mc, err := l.h.cosmos.get(c.account)
	if err != nil {
		return err
	}
	lc, err := l.h.cosmos.get(c.leaseAccount)
	if err != nil {
		return err
	}
	missing := fmt.Errorf("either the source container '%s' (in database '%s') or the lease container '%s' (in database '%s') does not exist. "+
		"Both containers must exist before the listener starts. To automatically create the lease container, set 'CreateLeaseContainerIfNotExists' to 'true'",
		c.ContainerName, c.DatabaseName, c.LeaseContainerName, c.LeaseDatabaseName)
	monitored, err := mc.readContainer(ctx, c.DatabaseName, c.ContainerName)
	if errors.Is(err, errCosmosNotFound) {
		return fmt.Errorf("%w: %w", missing, err)
	}
	if err != nil {
		return err
	}
	leases, err := lc.readContainer(ctx, c.LeaseDatabaseName, c.LeaseContainerName)
	if errors.Is(err, errCosmosNotFound) {
		return fmt.Errorf("%w: %w", missing, err)
	}
	if err != nil {
		return err
	}
	// DocumentServiceLeaseStoreManagerBuilder.InitializeAsync.
	if len(leases.pkPaths) != 1 || (leases.pkPaths[0] != "/id" && leases.pkPaths[0] != "/partitionKey") {
		return fmt.Errorf("the lease container, if partitioned, must have partition key equal to /id or /partitionKey, not %v", leases.pkPaths)
	}
	cc, err := lc.az.NewContainer(c.LeaseDatabaseName, c.LeaseContainerName)
	if err != nil {
		return err
	}
	l.store = &azLeaseBackend{c: cc}
	l.byPartitionKey = leases.pkPaths[0] == "/partitionKey"
	l.feed = clientFeed{c: mc, db: c.DatabaseName, coll: c.ContainerName}
	// CosmosContainerExtensions.GetLeasePrefix.
	l.prefix = c.LeaseContainerPrefix + c.account.host() + "_" + monitored.databaseRID + "_" + monitored.rid
	return l.bootstrap(ctx, func(ctx context.Context) ([]pkRange, error) {
		return mc.partitionKeyRanges(ctx, c.DatabaseName, c.ContainerName)
	})
}

// storeDoc is the lease store's marker and lock documents
// (DocumentServiceLeaseStoreCosmos: InitializedDocument, LockDocument).
type storeDoc struct {
	ID           string `json:"id"`
	PartitionKey string `json:"partitionKey,omitempty"`
	TTL          *int   `json:"ttl,omitempty"`
}

// bootstrap is BootstrapperCore.InitializeAsync: unless the marker
// <prefix>.info exists, take the lock <prefix>.lock (a document with a
// time to live), create a lease for every partition key range that has
// none (PartitionSynchronizerCore.CreateMissingLeasesAsync), write the
// marker and delete the lock; while another instance holds the lock,
// wait and look again.
func (l *cosmosListener) bootstrap(ctx context.Context, ranges func(context.Context) ([]pkRange, error)) error {
	info, lock := l.prefix+".info", l.prefix+".lock"
	for {
		done, err := l.store.exists(ctx, info, info)
		if err != nil || done {
			return err
		}
		ttl := int(bootstrapLockTTL / time.Second)
		locked, etag, err := l.store.create(ctx, lock, lock, storeDoc{ID: lock, PartitionKey: l.storeKey(lock), TTL: &ttl})
		if err != nil {
			return err
		}
		if !locked {
			l.log.Debug("hostemu: another instance is creating the leases")
			if !l.sleep(ctx, waitBootstrap, l.bootstrapRetry) {
				return ctx.Err()
			}
			continue
		}
		err = l.createMissingLeases(ctx, ranges)
		if err == nil {
			var created bool
			created, _, err = l.store.create(ctx, info, info, storeDoc{ID: info, PartitionKey: l.storeKey(info)})
			if err == nil && !created {
				err = fmt.Errorf("creating %s: it exists", info)
			}
		}
		if rerr := l.store.remove(ctx, lock, lock, etag); err == nil {
			err = rerr
		}
		return err
	}
}

// storeKey is the partitionKey field of the store's own documents: their
// id when the lease container is keyed by /partitionKey, none otherwise.
func (l *cosmosListener) storeKey(id string) string {
	if l.byPartitionKey {
		return id
	}
	return ""
}

// createMissingLeases creates a lease, without a continuation, for every
// partition key range that no lease covers yet; a lease another instance
// created meanwhile is left alone.
func (l *cosmosListener) createMissingLeases(ctx context.Context, ranges func(context.Context) ([]pkRange, error)) error {
	rs, err := ranges(ctx)
	if err != nil {
		return err
	}
	existing, err := l.store.list(ctx, l.prefix+leaseSeparator)
	if err != nil {
		return err
	}
	have := map[string]bool{}
	for _, e := range existing {
		have[e.LeaseToken] = true
		if e.FeedRange != nil {
			have["min:"+e.FeedRange.Range.Min] = true
			have["max:"+e.FeedRange.Range.Max] = true
		}
	}
	for _, r := range rs {
		if have[r.ID] || (existing != nil && (have["min:"+r.MinInclusive] || have["max:"+r.MaxExclusive])) {
			continue
		}
		lease := &leaseDoc{
			ID: l.prefix + leaseSeparator + r.ID, LeaseToken: r.ID,
			FeedRange: &leaseFeedRange{}, Properties: map[string]string{}, Mode: leaseModeIncremental,
		}
		lease.FeedRange.Range.Min, lease.FeedRange.Range.Max = r.MinInclusive, r.MaxExclusive
		if l.byPartitionKey {
			lease.PartitionKey = newUUID()
		}
		if _, _, err := l.store.create(ctx, lease.ID, lease.pk(), lease); err != nil {
			return err
		}
	}
	return nil
}

// acquire takes a lease and starts processing it
// (PartitionControllerCore.AddOrUpdateLeaseAsync, DocumentServiceLease-
// ManagerCosmos.AcquireAsync): the lease is written with this listener as
// its owner, provided its owner is still the one the listing showed.
func (l *cosmosListener) acquire(intake, work context.Context, lease *leaseDoc, wg *sync.WaitGroup) {
	l.mu.Lock()
	if l.owned[lease.LeaseToken] {
		l.mu.Unlock()
		return
	}
	l.owned[lease.LeaseToken] = true
	l.mu.Unlock()
	log := l.log.With("lease", lease.LeaseToken)

	previous := lease.owner()
	acquired, err := updateLease(intake, l.store, lease, l.now, func(s *leaseDoc) error {
		if s.owner() != previous {
			return fmt.Errorf("%w: lease %s was taken over by owner '%s'", errLeaseLost, s.LeaseToken, s.owner())
		}
		s.Owner = &l.name
		return nil
	})
	if err != nil {
		l.mu.Lock()
		delete(l.owned, lease.LeaseToken)
		l.mu.Unlock()
		l.reportLeaseError(log, err)
		return
	}
	l.h.stats.leasesAcquired.Add(1)
	log.Debug("hostemu: lease acquired", "previousOwner", previous, "continuation", acquired.continuation())
	wg.Go(func() {
		l.process(intake, work, acquired)
		l.mu.Lock()
		delete(l.owned, lease.LeaseToken)
		l.mu.Unlock()
	})
}

// process runs one lease until it is lost, fails or the listener stops
// (PartitionSupervisorCore.RunAsync, PartitionControllerCore.
// ProcessPartitionAsync): the feed processor and the lease renewer run
// side by side, and the end of either ends the other; the renewer keeps
// the lease while an invocation in flight finishes. Then the lease is
// released, unless the instance has crashed.
func (l *cosmosListener) process(intake, work context.Context, lease *leaseDoc) {
	log := l.log.With("lease", lease.LeaseToken)
	procCtx, stopProc := context.WithCancel(intake)
	defer stopProc()
	renewCtx, stopRenew := context.WithCancel(context.Background())
	defer stopRenew()
	go func() {
		select {
		case <-l.in.crash:
			stopRenew()
		case <-renewCtx.Done():
		}
	}()
	renewed := make(chan error, 1)
	go func() {
		renewed <- l.renew(renewCtx, log, lease)
		stopProc()
	}()
	err := l.processFeed(procCtx, intake, work, log, lease)
	stopRenew()
	if rerr := <-renewed; err == nil {
		err = rerr
	}
	if l.in.crashed() {
		return
	}
	if err != nil {
		l.reportLeaseError(log, err)
	}
	l.release(work, log, lease)
}

// processFeed is FeedProcessorCore.RunAsync with the extension's observer:
// read the range's feed from the lease's continuation (or from where the
// trigger starts); a page with documents is one invocation, and then the
// page's continuation is checkpointed into the lease (AutoCheckpointer),
// whether the invocation succeeded or not
// (CosmosDBTriggerListener.ProcessChangesAsync only logs a failure); the
// next page is read at once. An answer with nothing new waits
// FeedPollDelay. A batch whose invocation ends after the listener was
// stopped is not checkpointed, outside drain mode.
func (l *cosmosListener) processFeed(ctx, intake, work context.Context, log *slog.Logger, lease *leaseDoc) error {
	start := feedStart{continuation: lease.continuation(), beginning: l.cfg.StartFromBeginning, since: l.cfg.StartFromTime}
	checkpointed := lease
	for ctx.Err() == nil {
		page, err := l.feed.read(ctx, lease.LeaseToken, start, l.cfg.MaxItemsPerInvocation)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		l.h.stats.feedReads.Add(1)
		if page.etag != "" {
			// The iterator goes on from the page's etag, checkpointed or not
			// (ChangeFeedPartitionKeyResultSetIteratorCore.ReadNextAsync).
			start = feedStart{continuation: page.etag}
		}
		if page.status == http.StatusNotModified {
			if !l.sleep(ctx, waitFeedPoll, l.cfg.FeedPollDelay) {
				return nil
			}
			continue
		}
		if page.count > 0 {
			ok, err := l.deliver(work, page.documents, page.count)
			if err != nil {
				// ChangeFeedObserverFactoryCore.AsIReadOnlyCollection throws
				// before the extension sees the batch: no checkpoint.
				return err
			}
			if l.in.crashed() {
				return nil
			}
			if !ok {
				// CosmosDBTriggerHealthMonitor.OnErrorAsync for the
				// ChangeFeedProcessorUserException ProcessChangesAsync
				// reports; the batch is checkpointed all the same.
				log.Warn("hostemu: the lease's batch failed; it is checkpointed and not delivered again", "documents", page.count)
			}
			if intake.Err() != nil && !l.drain {
				return errListenerStopped
			}
		}
		if page.etag == "" {
			// DocumentServiceLeaseCheckpointerCore refuses an empty
			// continuation.
			return errors.New("the change feed answered without an etag")
		}
		next, err := updateLease(work, l.store, checkpointed, l.now, func(s *leaseDoc) error {
			if s.owner() != l.name {
				return fmt.Errorf("%w: lease %s was taken over by owner '%s'", errLeaseLost, s.LeaseToken, s.owner())
			}
			s.ContinuationToken = &page.etag
			return nil
		})
		if err != nil {
			return err
		}
		checkpointed = next
		l.h.stats.checkpoints.Add(1)
		log.Debug("hostemu: checkpoint", "continuation", page.etag)
	}
	return nil
}

// invoke delivers a page's documents to the function the way the host
// hands them to a custom handler: the Cosmos SDK reads them into JObjects
// (Newtonsoft's default settings: dates become DateTimes), the extension
// turns them into one compact JSON array text for the host's string
// parameter (CosmosDBTriggerValueBinder), and the host serializes that
// string once more into Data (ScriptInvocationContextExtensions.
// GetHttpScriptInvocationContextValue). The trigger adds no binding data,
// so Metadata carries only "sys".
func (l *cosmosListener) invoke(ctx context.Context, documents json.RawMessage, count int) (bool, error) {
	tok, err := parseJToken(documents, l.h.opts.Location)
	if err == nil && tok.kind != jArray {
		err = fmt.Errorf("a %v, not an array", tok.kind)
	}
	if err != nil {
		return false, fmt.Errorf("%w: %w", errUserDocuments, err)
	}
	l.h.stats.documents.Add(int64(count))
	data := map[string]any{l.cfg.Binding: jsonString(tok.compact())}
	return l.in.invoke(ctx, l.fn, data, nil, 0), nil
}

// renew keeps the lease (LeaseRenewerCore.RunAsync): the first renewal
// after half of LeaseRenewInterval, then one every LeaseRenewInterval,
// each a fresh read and a write that stamps the lease. A renewal that
// finds another owner ends with errLeaseLost; other failures are logged
// and the next renewal tries again.
func (l *cosmosListener) renew(ctx context.Context, log *slog.Logger, lease *leaseDoc) error {
	if !l.sleep(ctx, waitRenew, l.cfg.LeaseRenewInterval/2) {
		return nil
	}
	for {
		fresh, err := l.store.read(ctx, lease.ID, lease.pk())
		if err == nil {
			_, err = updateLease(ctx, l.store, fresh, l.now, func(s *leaseDoc) error {
				if s.owner() != l.name {
					return fmt.Errorf("%w: lease %s was taken over by owner '%s'", errLeaseLost, s.LeaseToken, s.owner())
				}
				return nil
			})
		}
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, errLeaseLost):
			return err
		case err != nil:
			log.Warn("hostemu: renewing the lease failed", "err", err)
		}
		if !l.sleep(ctx, waitRenew, l.cfg.LeaseRenewInterval) {
			return nil
		}
	}
}

// release gives the lease up (DocumentServiceLeaseManagerCosmos.
// ReleaseAsync): a fresh read, then the lease written without an owner,
// unless another instance owns it already.
func (l *cosmosListener) release(ctx context.Context, log *slog.Logger, lease *leaseDoc) {
	fresh, err := l.store.read(ctx, lease.ID, lease.pk())
	if err == nil {
		_, err = updateLease(ctx, l.store, fresh, l.now, func(s *leaseDoc) error {
			if s.owner() != l.name {
				return fmt.Errorf("%w: lease %s was taken over by owner '%s'", errLeaseLost, s.LeaseToken, s.owner())
			}
			s.Owner = nil
			return nil
		})
	}
	switch {
	case err == nil:
		log.Debug("hostemu: lease released")
	case errors.Is(err, errLeaseLost), errors.Is(err, errCosmosNotFound):
		log.Debug("hostemu: lease taken by another instance before its release")
	default:
		log.Warn("hostemu: releasing the lease failed", "err", err)
	}
}

// reportLeaseError logs what ended a lease's processing at the level
// CosmosDBTriggerHealthMonitor.OnErrorAsync gives it: a lease lost to
// another instance is expected (Information), the observer's failure (a
// batch interrupted by the listener's stop, documents that do not
// deserialize) a Warning, anything else an Error.
func (l *cosmosListener) reportLeaseError(log *slog.Logger, err error) {
	switch {
	case errors.Is(err, errLeaseLost):
		log.Info("hostemu: the lease was lost; this is expected during scaling and briefly during initialization", "err", err)
	case errors.Is(err, errListenerStopped), errors.Is(err, errUserDocuments):
		log.Warn("hostemu: the lease encountered an unhandled user exception during processing", "err", err)
	default:
		log.Error("hostemu: the lease experienced an error during processing", "err", err)
	}
}
