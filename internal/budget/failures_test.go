package budget_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/opstatus/opstatus/internal/budget"
	"github.com/opstatus/opstatus/internal/budget/budgettesting"
	"github.com/opstatus/opstatus/internal/telemetry"
	"github.com/opstatus/opstatus/internal/testenv"
)

// A ledger item that does not decode is replaced under a new epoch, and
// the members hold permits again after E. Through the Cosmos test server.
func TestUnreadableLedgerIsReplacedThroughCosmos(t *testing.T) {
	testenv.NeedsServers(t)
	reader := sdkmetric.NewManualReader()
	t.Cleanup(telemetry.Use(nil, sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	ctx := context.Background()
	c := leasesContainer(t)
	s := budget.NewCosmos(c)
	require.NoError(t, budget.Seed(ctx, s, 10))
	_, err := c.UpsertItem(ctx, azcosmos.NewPartitionKeyString(budget.ID),
		[]byte(`{"id":"`+budget.ID+`","epoch":"e0","budget":10,"holders":[1,2]}`), nil)
	require.NoError(t, err)
	_, _, err = s.Read(ctx)
	require.ErrorIs(t, err, budget.ErrUnreadable)

	a := join(t, s, 10)
	a.Queue(100)
	for range 40 {
		require.NoError(t, a.Tick(ctx))
		advance(time.Second, a)
	}
	a.tick(t)
	require.Equal(t, 10, a.Held(), "ten minutes after the ledger became unreadable")
	l, _, err := s.Read(ctx)
	require.NoError(t, err)
	require.NotEqual(t, "e0", l.Epoch)
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	replaced := int64(0)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == telemetry.MetricLedgerReplaced {
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					replaced += dp.Value
				}
			}
		}
	}
	require.Equal(t, int64(1), replaced, "ledgers replaced")
}

// Ledgers no member could have written are replaced under a new epoch
// behind the creator's fence: negative permits, permits summing over every
// budget, too many holders. Until then nobody grows past the budget.
func TestImpossibleLedgerIsReplaced(t *testing.T) {
	many := map[string]budget.Entry{}
	for i := range budget.MaxHolders + 1 {
		many[fmt.Sprint("h", i)] = budget.Entry{Seq: 1}
	}
	for _, tc := range []struct {
		name    string
		holders map[string]budget.Entry
	}{
		{"negative permits", map[string]budget.Entry{"x": {Permits: -5, Demand: 1, Seq: 1}}},
		{"sum over the budget", map[string]budget.Entry{"x": {Permits: 8, Seq: 1}, "y": {Permits: 8, Seq: 1}}},
		{"permits that wrap the sum", map[string]budget.Entry{"x": {Permits: 1<<62 + 1<<61, Seq: 1}, "y": {Permits: 1<<62 + 1<<61, Seq: 1}}},
		{"too many holders", many},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &budgettesting.Store{}
			s.Put(budget.Ledger{ID: budget.ID, Epoch: "e0", Budget: 10, Holders: tc.holders})
			c := busy(t, s, 10)
			require.Zero(t, c.Held(), "grew into a ledger that cannot be")
			l := ledger(t, s)
			require.NotEqual(t, "e0", l.Epoch)
			require.Equal(t, map[string]budget.Entry{c.Figures().Owner: l.Holders[c.Figures().Owner]}, l.Holders)
			require.Equal(t, 10, l.Holders[c.Figures().Owner].Permits, "the creator's fence")
			for range 31 {
				advance(time.Second, c)
				c.tick(t)
			}
			require.Equal(t, 10, c.Held())
		})
	}
}

// An entry no member writes is dropped as expired: a dead entry with a
// bogus unchangedMs (negative, or one that wraps when read as a duration)
// or a negative seq must not pin its permits for good.
func TestInvalidEntryIsDroppedAsExpired(t *testing.T) {
	for _, tc := range []struct {
		name  string
		entry budget.Entry
	}{
		{"negative unchangedMs", budget.Entry{Permits: 10, Seq: 3, UnchangedMs: -1e12}},
		{"unchangedMs that wraps", budget.Entry{Permits: 10, Seq: 3, UnchangedMs: 9_223_372_036_855}},
		{"negative seq", budget.Entry{Permits: 10, Seq: -1}},
		{"negative demand", budget.Entry{Permits: 10, Demand: -1, Seq: 3}},
		{"floor over the budget", budget.Entry{Group: budget.GroupPickup, Permits: 10, Floor: 11, Seq: 3}},
		{"permits over its own budget", budget.Entry{Permits: 10, Seq: 3, Budget: 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &budgettesting.Store{}
			s.Put(budget.Ledger{ID: budget.ID, Epoch: "e0", Budget: 10, Holders: map[string]budget.Entry{"dead": tc.entry}})
			a := join(t, s, 10)
			a.Queue(100)
			for range 600 { // ten minutes
				a.tick(t)
				advance(time.Second, a)
			}
			a.tick(t)
			require.NotContains(t, ledger(t, s).Holders, "dead")
			require.Equal(t, 10, a.Held())
		})
	}
}

// An always-ready pickup process that idles never starves poll, however
// small the budget.
func TestIdlePickupFloorLeavesPollItsShareOfASmallBudget(t *testing.T) {
	for _, b := range []int{4, 8, 12} {
		s := seeded(b)
		p := join(t, s, b)
		p.Serve(budget.GroupPickup)
		p.tick(t)
		a := join(t, s, b)
		a.Queue(100)
		for range 5 {
			advance(time.Second, a, p)
			p.tick(t)
			a.tick(t)
		}
		require.GreaterOrEqual(t, a.Held(), b-b/4, "budget %d: poll beside an idle pickup", b)
	}
}

// A deployment that lowers the budget beside old processes still running
// gets its share, and the two sides do not take turns writing the
// ledger's budget.
func TestLowerBudgetDeploymentGetsItsShareBesideTheOld(t *testing.T) {
	s := seeded(20)
	old := join(t, s, 20)
	old.Queue(100)
	for range 40 { // running longer than E
		old.tick(t)
		advance(time.Second, old)
	}
	require.Equal(t, 20, old.Held())
	young := join(t, s, 10)
	young.Queue(100)
	writes := s.Writes()
	for range 60 {
		advance(time.Second, old, young)
		old.tick(t)
		young.tick(t)
		require.LessOrEqual(t, ledger(t, s).Sum(), 20)
	}
	require.Equal(t, 5, young.Held())
	require.Equal(t, 5, old.Held())
	require.Equal(t, 10, ledger(t, s).Budget)
	// Renewals every 4 s by each, and the give-back and the growth.
	require.LessOrEqual(t, s.Writes()-writes, 2*60/4+4, "ledger writes by 2 processes in 60 s")
}

// hangingStore is a ledger store whose calls hang, until their context
// ends, while hang is set: a Leases container that stopped answering.
type hangingStore struct {
	budget.Store
	hang  atomic.Bool
	calls atomic.Int64
}

func (h *hangingStore) wait(ctx context.Context) error {
	h.calls.Add(1)
	if !h.hang.Load() {
		return nil
	}
	<-ctx.Done()
	return errors.New("leases: no answer")
}

func (h *hangingStore) Read(ctx context.Context) (budget.Ledger, string, error) {
	if err := h.wait(ctx); err != nil {
		return budget.Ledger{}, "", err
	}
	return h.Store.Read(ctx)
}

func (h *hangingStore) Replace(ctx context.Context, l budget.Ledger, etag string) (string, error) {
	if err := h.wait(ctx); err != nil {
		return "", err
	}
	return h.Store.Replace(ctx, l, etag)
}

// Every ledger call has its own deadline: a Leases container that stops
// answering holds a tick for at most CallTimeout, so permits come back
// within a read interval of it answering again. Real clock.
func TestLedgerCallsHaveTheirOwnDeadline(t *testing.T) {
	h := &hangingStore{Store: seeded(4)}
	g := budget.New(budget.Config{Store: h, Budget: 4, Ceiling: 4, CallTimeout: 200 * time.Millisecond})
	g.Queue(10)
	require.NoError(t, g.Tick(context.Background()))
	require.Equal(t, 4, g.Held())
	h.hang.Store(true)
	done := make(chan error, 1)
	begun := time.Now()
	go func() { done <- g.Tick(context.Background()) }()
	select {
	case err := <-done:
		require.Error(t, err)
		require.Less(t, time.Since(begun), 2*time.Second)
	case <-time.After(5 * time.Second):
		t.Fatal("a ledger read with no answer held the tick for 5 s")
	}
	h.hang.Store(false)
	require.NoError(t, g.Tick(context.Background()))
	require.Equal(t, 4, g.Held())
}
