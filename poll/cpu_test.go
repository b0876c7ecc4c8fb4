package poll_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/functions"
	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/clusterservice"
	"github.com/opstatus/opstatus/internal/lock"
	"github.com/opstatus/opstatus/poll"
)

// readyCS is a Cluster Service whose every cluster is ready: a status path
// answers its ClusterStatus, any other its Cluster object.
func readyCS(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	path, status := strings.CutSuffix(r.URL.Path, "/status")
	id := path[strings.LastIndex(path, "/")+1:]
	if status {
		_, _ = io.WriteString(w, `{"kind":"ClusterStatus","id":"`+id+`","state":"ready"}`)
		return
	}
	_, _ = fmt.Fprintf(w, `{"kind":"Cluster","id":%q,"creation_timestamp":"2026-11-30T11:00:00Z","azure":{"managed_resource_group_name":"%s-managed"}}`, id, id)
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	require.NoError(tb, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkChangedPoll is the handler's side of a changed operation as
// the bench makes it (a cluster Create that Cluster Service has finished:
// the Resources item read, the cluster object, the lock, a billing item,
// the Resources item and the operation written), against the Cosmos test
// server over https. cpu-ms/op is the process's CPU time spent in the
// handler per operation, every write included; the frontend's seeding of
// the next operation is left out
// (go test -run '^$' -bench ChangedPoll -cpuprofile cpu.out ./poll).
func BenchmarkChangedPoll(b *testing.B) {
	ctx := b.Context()
	fe, db := frontendDB(b)
	csServer := httptest.NewServer(http.HandlerFunc(readyCS))
	b.Cleanup(csServer.Close)
	client, err := clusterservice.NewClient(clusterservice.Config{URL: csServer.URL})
	require.NoError(b, err)
	b.Cleanup(func() { _ = client.Close() })
	fn := poll.New(poll.Config{
		DB:       db,
		Cluster:  client,
		Locker:   lock.New(db.Locks(), lock.Options{Wait: 5 * time.Second, RetryInterval: 50 * time.Millisecond}),
		Notifier: arm.NewNotifier(true),
		Owner:    "opstatus-bench",
		Location: "eastus",
		Interval: 10 * time.Second,
	})
	seed := func(i int) string {
		id := fmt.Sprintf("op-%d", i)
		key := fmt.Sprintf("/subscriptions/%s/resourceGroups/rg/providers/Microsoft.RedHatOpenShift/hcpOpenShiftClusters/c%d", sub, i)
		internal := fmt.Sprintf("/api/aro_hcp/v1alpha1/clusters/c%d", i)
		now := time.Now().UTC()
		require.NoError(b, fe.PutOperation(ctx, frontend.Operation{ID: id, PartitionKey: sub, TenantID: "72f988bf-86f1-41af-91ab-2d7cd011db47",
			Request: "Create", Status: "Provisioning", ExternalID: key, InternalID: internal,
			OperationID: "/subscriptions/" + sub + "/providers/Microsoft.RedHatOpenShift/locations/eastus/hcpOperationStatuses/" + id,
			StartTime:   now, LastTransitionTime: now}))
		require.NoError(b, fe.PutResource(ctx, frontend.Resource{ID: "res-" + id, PartitionKey: sub, Key: key, InternalID: internal,
			ActiveOperationID: id, ProvisioningState: "Provisioning"}))
		return `{"subscriptionId":"` + sub + `","operationId":"` + id + `"}`
	}
	handle := func(msg string) poll.Outcome {
		res, err := fn.Handle(ctx, &functions.Invocation{
			ID: "inv-1", Function: "poll",
			Data:     map[string]json.RawMessage{"operation": json.RawMessage(msg)},
			Metadata: map[string]json.RawMessage{},
			Log:      slog.New(slog.DiscardHandler),
		})
		require.NoError(b, err)
		return only(b, res)
	}
	handle(seed(-1)) // connections made, as in a running handler
	var cpu time.Duration
	i := 0
	for b.Loop() {
		b.StopTimer()
		msg := seed(i)
		i++
		b.StartTimer()
		before := cpuTime(b)
		if got := handle(msg); got != poll.OutcomeUpdated {
			b.Fatalf("outcome %s", got)
		}
		cpu += cpuTime(b) - before
	}
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(i), "cpu-ms/op")
}
