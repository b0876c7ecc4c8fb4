package telemetry

import (
	"context"
	"errors"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Metric names of the Cluster Service budget (internal/budget).
const (
	// MetricBudgetPermits is the Cluster Service permits the process may
	// use now, by group: 0 once its lease has run out.
	MetricBudgetPermits = "opstatus.budget.permits"
	// MetricBudgetTarget is the process's share of the budget as every
	// member computes it.
	MetricBudgetTarget = "opstatus.budget.target"
	// MetricBudgetDemand is the operations queued or in flight in the
	// process, at most its ceiling.
	MetricBudgetDemand = "opstatus.budget.demand"
	// MetricLedgerRequests counts the budget ledger's Cosmos DB requests,
	// by kind (read, replace, create) and status_code (0: no reply).
	MetricLedgerRequests = "opstatus.budget.ledger.requests"
	// MetricLedgerCharge counts the request units the ledger's responses
	// charged (x-ms-request-charge), by kind.
	MetricLedgerCharge = "opstatus.budget.ledger.charge"
	// MetricLedgerReplaced counts the ledgers a process replaced under a
	// new epoch because they did not decode or could not have come from
	// the members (negative permits, a sum over every budget).
	MetricLedgerReplaced = "opstatus.budget.ledger.replaced"
)

// Attribute keys of the budget's metrics.
const (
	GroupKey = attribute.Key("group")
	KindKey  = attribute.Key("kind")
)

// BudgetFigures are what the budget gauges report of the process.
type BudgetFigures struct {
	Group                   string
	Permits, Target, Demand int
}

var budgetSource atomic.Pointer[func() BudgetFigures]

// ObserveBudget makes the budget gauges report what f returns at each
// export; nil reports nothing.
func ObserveBudget(f func() BudgetFigures) {
	if f == nil {
		budgetSource.Store(nil)
		return
	}
	budgetSource.Store(&f)
}

type budgetInstruments struct {
	permits, target, demand metric.Int64ObservableGauge
	requests                metric.Int64Counter
	charge                  metric.Float64Counter
	replaced                metric.Int64Counter
}

func newBudgetInstruments(m metric.Meter) (budgetInstruments, error) {
	var b budgetInstruments
	var errs [6]error
	b.permits, errs[0] = m.Int64ObservableGauge(MetricBudgetPermits, metric.WithUnit("{permit}"),
		metric.WithDescription("Cluster Service permits the process may use now, by group; 0 once its lease has run out."))
	b.target, errs[1] = m.Int64ObservableGauge(MetricBudgetTarget, metric.WithUnit("{permit}"),
		metric.WithDescription("The process's share of the Cluster Service budget."))
	b.demand, errs[2] = m.Int64ObservableGauge(MetricBudgetDemand, metric.WithUnit("{operation}"),
		metric.WithDescription("Operations queued or in flight in the process, at most its ceiling."))
	b.requests, errs[3] = m.Int64Counter(MetricLedgerRequests, metric.WithUnit("{request}"),
		metric.WithDescription("Cosmos DB requests of the budget ledger, by kind and status code."))
	b.charge, errs[4] = m.Float64Counter(MetricLedgerCharge, metric.WithUnit("{request_unit}"),
		metric.WithDescription("Request units the budget ledger's responses charged, by kind."))
	b.replaced, errs[5] = m.Int64Counter(MetricLedgerReplaced, metric.WithUnit("{ledger}"),
		metric.WithDescription("Budget ledgers replaced under a new epoch because they did not decode or were impossible."))
	if err := errors.Join(errs[:]...); err != nil {
		return b, err
	}
	_, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		f := budgetSource.Load()
		if f == nil {
			return nil
		}
		fig := (*f)()
		group := metric.WithAttributes(GroupKey.String(fig.Group))
		o.ObserveInt64(b.permits, int64(fig.Permits), group)
		o.ObserveInt64(b.target, int64(fig.Target), group)
		o.ObserveInt64(b.demand, int64(fig.Demand), group)
		return nil
	}, b.permits, b.target, b.demand)
	return b, err
}

// LedgerRequest counts one request to the budget ledger, of kind, its
// status code (0: no reply) and the request units it charged.
func LedgerRequest(ctx context.Context, kind string, statusCode int, charge float64) {
	m := meters()
	if m == nil {
		return
	}
	kindAttr := KindKey.String(kind)
	m.budget.requests.Add(ctx, 1, metric.WithAttributes(kindAttr, StatusCodeKey.Int(statusCode)))
	if charge > 0 {
		m.budget.charge.Add(ctx, charge, metric.WithAttributes(kindAttr))
	}
}

// LedgerReplaced counts one ledger replaced under a new epoch.
func LedgerReplaced(ctx context.Context) {
	if m := meters(); m != nil {
		m.budget.replaced.Add(ctx, 1)
	}
}
