package poll

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/internal/budget"
	"github.com/opstatus/opstatus/internal/budget/budgettesting"
	"github.com/opstatus/opstatus/internal/clusterservice"
)

// calledCS is a ClusterService that counts the calls reaching it: each
// would have been a request sent without permits.
type calledCS struct {
	ClusterService
	calls int
}

func (c *calledCS) Status(context.Context, clusterservice.InternalID) (clusterservice.Status, error) {
	c.calls++
	return clusterservice.Status{}, nil
}

func (c *calledCS) NodePool(context.Context, clusterservice.InternalID) error {
	c.calls++
	return nil
}

// TestEveryClusterServiceCallNeedsALease: permittedCluster wraps each method
// of ClusterService, so that without a lease none reaches Cluster Service.
// A method added to the interface but not wrapped would be promoted from
// the embedded one and sent ungated.
func TestEveryClusterServiceCallNeedsALease(t *testing.T) {
	next := &calledCS{}
	gate := budget.New(budget.Config{Store: &budgettesting.Store{}, Budget: 4, Ceiling: 4}) // never run: no lease
	pc := reflect.ValueOf(permittedCluster{ClusterService: next, permits: gate})
	iface := reflect.TypeFor[ClusterService]()
	for i := range iface.NumMethod() {
		name := iface.Method(i).Name
		t.Run(name, func(t *testing.T) {
			out := pc.MethodByName(name).Call([]reflect.Value{
				reflect.ValueOf(context.Background()), reflect.ValueOf(clusterservice.InternalID{}),
			})
			err, _ := out[len(out)-1].Interface().(error)
			require.True(t, errors.Is(err, budget.ErrNoLease), "%s: %v", name, err)
		})
	}
	require.Zero(t, next.calls)
}
