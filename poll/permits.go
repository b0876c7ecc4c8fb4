package poll

import (
	"context"
	"errors"

	"github.com/opstatus/opstatus/internal/budget"
	"github.com/opstatus/opstatus/internal/clusterservice"
)

// permittedCluster is a ClusterService whose every request starts only
// with enough of the process's budget lease left, and ends, by its
// context's deadline, before the lease does (budget.Gate.Start); the
// client's own timeout still applies within it.
type permittedCluster struct {
	ClusterService
	permits *budget.Gate
}

// call runs one request under the lease. A request the client gave up on,
// at its own timeout or the lease's deadline, keeps its permit counted for
// the gate's grace: Cluster Service may still be working on it.
func call[T any](ctx context.Context, g *budget.Gate, fn func(context.Context) (T, error)) (T, error) {
	ctx, cancel, err := g.Start(ctx)
	if err != nil {
		var zero T
		return zero, err
	}
	defer cancel()
	v, err := fn(ctx)
	if abandoned(ctx, err) {
		g.Abandoned()
	}
	return v, err
}

// abandoned reports whether a request that ended with err under ctx may
// still run at Cluster Service: the client left before an answer.
func abandoned(ctx context.Context, err error) bool {
	if err == nil {
		return false
	}
	var timeout interface{ Timeout() bool }
	return ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.As(err, &timeout) && timeout.Timeout()
}

func (c permittedCluster) Status(ctx context.Context, id clusterservice.InternalID) (clusterservice.Status, error) {
	return call(ctx, c.permits, func(ctx context.Context) (clusterservice.Status, error) { return c.ClusterService.Status(ctx, id) })
}

func (c permittedCluster) NodePool(ctx context.Context, id clusterservice.InternalID) error {
	_, err := call(ctx, c.permits, func(ctx context.Context) (struct{}, error) { return struct{}{}, c.ClusterService.NodePool(ctx, id) })
	return err
}

func (c permittedCluster) InflightChecks(ctx context.Context, id clusterservice.InternalID) ([]clusterservice.InflightCheck, error) {
	return call(ctx, c.permits, func(ctx context.Context) ([]clusterservice.InflightCheck, error) {
		return c.ClusterService.InflightChecks(ctx, id)
	})
}

func (c permittedCluster) Cluster(ctx context.Context, id clusterservice.InternalID) (clusterservice.Cluster, error) {
	return call(ctx, c.permits, func(ctx context.Context) (clusterservice.Cluster, error) { return c.ClusterService.Cluster(ctx, id) })
}

func (c permittedCluster) ExternalAuth(ctx context.Context, id clusterservice.InternalID) (clusterservice.ExternalAuth, error) {
	return call(ctx, c.permits, func(ctx context.Context) (clusterservice.ExternalAuth, error) {
		return c.ClusterService.ExternalAuth(ctx, id)
	})
}

func (c permittedCluster) Credential(ctx context.Context, id clusterservice.InternalID) (clusterservice.Credential, error) {
	return call(ctx, c.permits, func(ctx context.Context) (clusterservice.Credential, error) {
		return c.ClusterService.Credential(ctx, id)
	})
}

func (c permittedCluster) Credentials(ctx context.Context, cluster clusterservice.InternalID) ([]clusterservice.Credential, error) {
	return call(ctx, c.permits, func(ctx context.Context) ([]clusterservice.Credential, error) {
		return c.ClusterService.Credentials(ctx, cluster)
	})
}
