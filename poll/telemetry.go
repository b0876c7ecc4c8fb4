package poll

import (
	"context"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/opstatus/opstatus/internal/clusterservice"
	"github.com/opstatus/opstatus/internal/queuemsg"
	"github.com/opstatus/opstatus/internal/telemetry"
)

// Span attributes of poll's own.
const (
	outcomeKey    = attribute.Key("opstatus.outcome")
	operationsKey = attribute.Key("opstatus.message.operations")
)

// observeMessage records a message's age since its scan, and its size on
// the invocation's span.
func observeMessage(ctx context.Context, msg queuemsg.Read, now time.Time) {
	if age := now.Sub(msg.ScannedAt); !msg.ScannedAt.IsZero() && age >= 0 {
		telemetry.MessageAge(ctx, age)
	}
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(operationsKey.Int(len(msg.Entries)))
	}
}

// observeDuration records the duration of an invocation that began at
// start.
func observeDuration(ctx context.Context, start time.Time) {
	telemetry.PollDuration(ctx, time.Since(start))
}

// traced starts the operation's span under ctx, when tracing is on, and
// returns ctx with it: its read and Cluster Service call are traced under
// it.
func (it *item) traced(ctx context.Context) context.Context {
	if !telemetry.Tracing() {
		return ctx
	}
	ctx, it.span = telemetry.Start(ctx, telemetry.SpanPollOperation, trace.WithAttributes(
		telemetry.SubscriptionIDKey.String(it.msg.SubscriptionID),
		telemetry.OperationIDKey.String(it.msg.OperationID)))
	return ctx
}

// within returns ctx with the operation's span, if it has one: the work
// done for it under a lock, whose context comes from the lock, is traced
// under the operation.
func (it *item) within(ctx context.Context) context.Context {
	if it.span == nil {
		return ctx
	}
	return trace.ContextWithSpan(ctx, it.span)
}

// tracedCluster is a ClusterService that puts the Cluster Service ids of
// each object it reads, and the state Cluster Service gave it, on the
// operation's span (the caller's, when it is recording).
type tracedCluster struct{ ClusterService }

// traceObject sets the attributes of id, and of state when known, on ctx's
// span.
func traceObject(ctx context.Context, id clusterservice.InternalID, state string) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{telemetry.ClusterIDKey.String(id.ClusterID)}
	var stateKey attribute.Key
	switch id.Kind {
	case clusterservice.KindCluster:
		stateKey = telemetry.ClusterStateKey
	case clusterservice.KindNodePool:
		attrs = append(attrs, telemetry.NodePoolIDKey.String(id.NodePoolID))
		stateKey = telemetry.NodePoolStateKey
	case clusterservice.KindExternalAuth:
		attrs = append(attrs, telemetry.ExternalAuthIDKey.String(id.ExternalAuthID))
		stateKey = telemetry.ExternalAuthStateKey
	case clusterservice.KindBreakGlassCredential:
		attrs = append(attrs, telemetry.CredentialIDKey.String(id.CredentialID))
		stateKey = telemetry.CredentialStatusKey
	}
	if state != "" && stateKey != "" {
		attrs = append(attrs, stateKey.String(state))
	}
	span.SetAttributes(attrs...)
}

func (c tracedCluster) Status(ctx context.Context, id clusterservice.InternalID) (clusterservice.Status, error) {
	st, err := c.ClusterService.Status(ctx, id)
	traceObject(ctx, id, st.State)
	return st, err
}

func (c tracedCluster) NodePool(ctx context.Context, id clusterservice.InternalID) error {
	err := c.ClusterService.NodePool(ctx, id)
	traceObject(ctx, id, "")
	return err
}

func (c tracedCluster) ExternalAuth(ctx context.Context, id clusterservice.InternalID) (clusterservice.ExternalAuth, error) {
	a, err := c.ClusterService.ExternalAuth(ctx, id)
	traceObject(ctx, id, a.State)
	return a, err
}

func (c tracedCluster) Credential(ctx context.Context, id clusterservice.InternalID) (clusterservice.Credential, error) {
	cred, err := c.ClusterService.Credential(ctx, id)
	traceObject(ctx, id, cred.Status)
	return cred, err
}

func (c tracedCluster) Credentials(ctx context.Context, cluster clusterservice.InternalID) ([]clusterservice.Credential, error) {
	creds, err := c.ClusterService.Credentials(ctx, cluster)
	traceObject(ctx, cluster, "")
	return creds, err
}

// finish counts the operation's outcome and ends its span.
func (it *item) finish() {
	ctx := context.Background()
	request := ""
	if it.op != nil {
		request = string(it.op.Request)
	}
	telemetry.PollOperation(ctx, string(it.outcome), request)
	if it.outcome == OutcomeUpdated && it.overdue {
		telemetry.PastDeadline(ctx, request)
	}
	if it.span == nil {
		return
	}
	it.span.SetAttributes(outcomeKey.String(string(it.outcome)))
	if it.op != nil {
		it.span.SetAttributes(
			telemetry.OperationTypeKey.String(request),
			telemetry.OperationStatusKey.String(string(it.op.Status)),
			telemetry.ResourceNameKey.String(resourceName(it.op.ExternalID)))
	}
	if it.outcome == OutcomeDeferred {
		telemetry.Fail(it.span, it.err)
	}
	it.span.End()
}

// resourceName is the name of the resource an ARM resource ID names: its
// last segment.
func resourceName(id string) string {
	id = strings.TrimRight(id, "/")
	return id[strings.LastIndexByte(id, '/')+1:]
}

// countSuperseded counts the n operations of a message dropped whole.
func countSuperseded(ctx context.Context, n int) {
	telemetry.PollOperations(ctx, string(OutcomeSuperseded), n)
}
