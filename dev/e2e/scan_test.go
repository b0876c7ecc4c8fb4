package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/faultproxy"
	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/internal/testenv"
)

// A scan whose listing fails after its first page answers 500 with no
// messages, so the host sends none; the next scan sends every operation
// once.
func TestScanFailingPartWaySendsNothing(t *testing.T) {
	proxy, err := faultproxy.New(testenv.SharedCosmos(t).Endpoint, faultproxy.Options{TLS: true, Name: "scan"})
	require.NoError(t, err)
	require.NoError(t, proxy.Start())
	t.Cleanup(func() { _ = proxy.Close() })
	s := startStack(t, "COSMOS_ENDPOINT="+proxy.URL())

	// More than one page (1,000) of pending operations.
	const n = 1100
	ctx := context.Background()
	var want []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				sub := fmt.Sprintf("00000000-0000-0000-0000-%012d", i%50)
				id := fmt.Sprintf("op-%04d", i)
				errs <- s.fe.PutOperation(ctx, frontend.Operation{ID: id, PartitionKey: sub, Request: "Create", Status: "Accepted",
					ExternalID: clusterKey(sub, id), InternalID: "/api/aro_hcp/v1alpha1/clusters/" + id})
				mu.Lock()
				want = append(want, sub+"/"+id)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	// Every page of a query after its first fails.
	proxy.SetFaults(faultproxy.Faults{Rate503: 1, Match: func(r faultproxy.Request) bool {
		return r.IsQuery && r.Header.Get("x-ms-continuation") != ""
	}})
	req, err := http.NewRequest(http.MethodPost, s.url+"/scan", strings.NewReader(
		`{"Data":{"timer":{"ScheduleStatus":null,"IsPastDue":false}},"Metadata":{}}`))
	require.NoError(t, err)
	req.Header.Set("X-Azure-Functions-InvocationId", "scan-broken")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusInternalServerError, resp.StatusCode, "%s", body)
	require.NotContains(t, string(body), "op-0", "no message of the failed listing goes out")
	require.Eventually(t, func() bool {
		log := s.stderr.String()
		return strings.Contains(log, `"invocation_id":"scan-broken"`) && strings.Contains(log, "list pending operations")
	}, 10*time.Second, 50*time.Millisecond, "the handler logs why the scan failed")

	proxy.SetFaults(faultproxy.Faults{})
	for range 2 {
		var got []string
		for _, m := range s.scan() {
			got = append(got, m["subscriptionId"]+"/"+m["operationId"])
		}
		slices.Sort(got)
		slices.Sort(want)
		require.Equal(t, want, got, "every operation exactly once")
	}
}
