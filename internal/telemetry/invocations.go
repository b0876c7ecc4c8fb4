package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// MetricInvocationsFailed counts the invocations the handler answered with
// a failure, by function. A failed poll invocation leaves its message in
// the queue; after host.json's maxDequeueCount tries the host moves it to
// the poison queue. Poll fails an invocation only for a message it can
// never act on (malformed) or a panic, so each one heads there.
const MetricInvocationsFailed = "opstatus.invocations.failed"

// FunctionKey is the function an invocation ran.
const FunctionKey = attribute.Key("function")

func newInvocationsFailed(m metric.Meter) (metric.Int64Counter, error) {
	return m.Int64Counter(MetricInvocationsFailed, metric.WithUnit("{invocation}"),
		metric.WithDescription("Invocations answered with a failure, by function: a poll message that fails maxDequeueCount times goes to the poison queue."))
}

// InvocationFailed counts a failed invocation of function.
func InvocationFailed(ctx context.Context, function string) {
	if m := meters(); m != nil {
		m.invocationsFailed.Add(ctx, 1, metric.WithAttributes(FunctionKey.String(function)))
	}
}
