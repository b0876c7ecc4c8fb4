package poll_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/clusterservice"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/poll"
)

// BenchmarkCeiling measures what CLUSTER_SERVICE_MAX_IN_FLIGHT a process
// needs: unchanged operations checked per second by one process against a
// Cluster Service answering after 50 ms (a typical Cluster Service
// latency), four invocations of 100-operation messages at once, for each
// ceiling. Run it on one core, as a Flex instance of the template's size
// has: taskset -c 0 go test -run x -bench Ceiling -cpu 1 ./poll. The
// in-memory DBClient stands in for Cosmos DB; the Cluster Service stand-in
// runs in the same process, so its CPU counts against the core too.
func BenchmarkCeiling(b *testing.B) {
	for _, ceiling := range []int{16, 32, 64, 128, 256} {
		b.Run(fmt.Sprint(ceiling), func(b *testing.B) {
			f := newFixture(b)
			slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				time.Sleep(50 * time.Millisecond)
				f.cs.ServeHTTP(w, r)
			}))
			b.Cleanup(slow.Close)
			client, err := clusterservice.NewClient(clusterservice.Config{URL: slow.URL})
			require.NoError(b, err)
			b.Cleanup(func() { _ = client.Close() })
			f.reconfigure(func(c *poll.Config) { c.Cluster, c.MaxInFlight, c.Deadline = client, ceiling, time.Minute })
			f.cs.SetStatus(clusterCS, 200, clusterStatus("installing"))
			var ids []string
			for i := range 100 {
				id := fmt.Sprintf("op%d", i)
				ids = append(ids, id)
				f.putOp(database.Operation{ID: id, Request: arm.RequestCreate, Status: arm.ProvisioningStateProvisioning})
			}
			msg := batchOf(ids...)
			start, cpu := time.Now(), cpuTime(b)
			ops := 0
			for b.Loop() {
				var wg sync.WaitGroup
				for range 4 {
					wg.Go(func() {
						res, err := f.invoke(b, msg)
						require.NoError(b, err)
						require.Equal(b, poll.Tally{poll.OutcomeUnchanged: 100}, res.ReturnValue)
					})
				}
				wg.Wait()
				ops += 400
			}
			elapsed := time.Since(start)
			b.ReportMetric(float64(ops)/elapsed.Seconds(), "checks/s")
			b.ReportMetric(float64(cpuTime(b)-cpu)/float64(ops)/1e3, "cpu-µs/check")
		})
	}
}
