package poll_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/functions"
	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/clusterservice"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/internal/testenv"
	"github.com/opstatus/opstatus/poll"
)

const (
	ocm404Body = `{"kind":"Error","id":"404","href":"/api/aro_hcp/v1alpha1/errors/404","code":"CLUSTERS-MGMT-404","reason":"Cluster 'abc' not found"}`
	nginx404   = "<html>\r\n<head><title>404 Not Found</title></head>\r\n<body>\r\n<center><h1>404 Not Found</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n"
)

// notFoundServer answers every path with the same 404 and counts calls.
type notFoundServer struct {
	mu          sync.Mutex
	contentType string // "-": no Content-Type header
	body        string
	paths       []string
}

func (s *notFoundServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.paths = append(s.paths, r.URL.Path)
	contentType, body := s.contentType, s.body
	s.mu.Unlock()
	testenv.WriteNotFound(w, contentType, body)
}

func (s *notFoundServer) answer(contentType, body string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.contentType, s.body = contentType, body
}

func (s *notFoundServer) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.paths...)
}

// notFoundFixture is a fixture whose Cluster Service is a real client of a
// server that answers 404, with a pending cluster delete ("del", its cluster
// item and a node pool item) and a pending node pool delete ("npdel", its
// item).
func notFoundFixture(t *testing.T) (*fixture, *notFoundServer) {
	t.Helper()
	f := newFixture(t)
	srv := &notFoundServer{}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	client, err := clusterservice.NewClient(clusterservice.Config{URL: hs.URL})
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	f.fn.Cluster = client

	start := f.now.Add(-5 * time.Minute)
	f.putOp(database.Operation{ID: "del", Request: arm.RequestDelete, Status: arm.ProvisioningStateDeleting,
		StartTime: start, LastTransitionTime: start, NotificationURI: f.armURL,
		OperationID: "/subscriptions/" + sub + "/providers/x/hcpOperationStatuses/del"})
	f.putOp(database.Operation{ID: "npdel", Request: arm.RequestDelete, Status: arm.ProvisioningStateDeleting,
		StartTime: start, LastTransitionTime: start, NotificationURI: f.armURL,
		OperationID: "/subscriptions/" + sub + "/providers/x/hcpOperationStatuses/npdel",
		ExternalID:  clusterKey + "/nodePools/np2", InternalID: clusterCS + "/node_pools/np2"})
	f.db.PutResource(&database.Resource{ID: "r1", PartitionKey: sub, Key: clusterKey, InternalID: clusterCS,
		ActiveOperationID: "del", ProvisioningState: arm.ProvisioningStateDeleting})
	f.db.PutResource(&database.Resource{ID: "r2", PartitionKey: sub, Key: clusterKey + "/nodePools/np1",
		InternalID: clusterCS + "/node_pools/np1", ProvisioningState: arm.ProvisioningStateSucceeded})
	f.db.PutResource(&database.Resource{ID: "r3", PartitionKey: sub, Key: clusterKey + "/nodePools/np2",
		InternalID: clusterCS + "/node_pools/np2", ActiveOperationID: "npdel", ProvisioningState: arm.ProvisioningStateDeleting})
	return f, srv
}

// snapshot is every Operations and Resources item of the fixture as stored.
func (f *fixture) snapshot(t *testing.T) (ops []*database.Operation, resources []*database.Resource) {
	t.Helper()
	for _, id := range []string{"del", "npdel"} {
		ops = append(ops, f.op(t, id))
	}
	return ops, f.db.Resources()
}

// pollLogged polls opID as the host would and returns the outcome and what
// was logged.
func (f *fixture) pollLogged(t *testing.T, opID string) (poll.Outcome, string) {
	t.Helper()
	var logs bytes.Buffer
	res, err := f.fn.Handle(context.Background(), &functions.Invocation{
		ID:       "inv-1",
		Function: "poll",
		Data:     map[string]json.RawMessage{"operation": json.RawMessage(`{"subscriptionId":"` + sub + `","operationId":"` + opID + `"}`)},
		Metadata: map[string]json.RawMessage{},
		Log:      slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	require.NoError(t, err)
	return only(t, res), logs.String()
}

// TestDeleteIsNotFinishedByA404ThatIsNotAnOCMError: a 404 from anything but
// Cluster Service's API says nothing about the resource, so neither a
// cluster's nor a node pool's delete moves, nothing is deleted and nobody is
// notified; the poll is deferred and logged as an error.
func TestDeleteIsNotFinishedByA404ThatIsNotAnOCMError(t *testing.T) {
	for _, tc := range []struct {
		name, contentType, body string
	}{
		{"router text", "text/plain; charset=utf-8", "404 page not found\n"},
		{"ingress HTML", "text/html", nginx404},
		{"JSON without kind", "application/json", `{"message":"not found"}`},
		{"JSON of another kind", "application/json", `{"kind":"ClusterStatus","id":"abc","state":"ready"}`},
		{"OCM error body labelled text", "text/plain", ocm404Body},
		{"empty body", "-", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, srv := notFoundFixture(t)
			srv.answer(tc.contentType, tc.body)
			ops, resources := f.snapshot(t)
			require.Len(t, resources, 3)
			f.resetCounts()

			for _, id := range []string{"del", "npdel"} {
				outcome, logs := f.pollLogged(t, id)
				require.Equal(t, poll.OutcomeDeferred, outcome, id)
				require.Contains(t, logs, "level=ERROR", id)
				require.Contains(t, logs, "not an OCM error", id)
			}
			require.Equal(t, []string{clusterCS + "/status", clusterCS + "/node_pools/np2/status"}, srv.seen())
			require.Zero(t, f.writes())
			require.Zero(t, f.lockOps())
			require.Empty(t, f.arm.got())
			gotOps, gotResources := f.snapshot(t)
			require.Equal(t, ops, gotOps)
			require.Equal(t, resources, gotResources)
		})
	}
}

// TestDeleteIsFinishedByAnOCMNotFound: Cluster Service's own 404 still ends
// both deletes: items deleted, operations Succeeded, ARM notified.
func TestDeleteIsFinishedByAnOCMNotFound(t *testing.T) {
	for _, contentType := range []string{"application/json", "-"} {
		t.Run(contentType, func(t *testing.T) {
			f, srv := notFoundFixture(t)
			srv.answer(contentType, ocm404Body)

			outcome, _ := f.pollLogged(t, "npdel")
			require.Equal(t, poll.OutcomeDeleted, outcome)
			var keys []string
			for _, r := range f.db.Resources() {
				keys = append(keys, r.Key)
			}
			require.ElementsMatch(t, []string{clusterKey, clusterKey + "/nodePools/np1"}, keys)

			outcome, _ = f.pollLogged(t, "del")
			require.Equal(t, poll.OutcomeDeleted, outcome)
			require.Empty(t, f.db.Resources())

			for _, id := range []string{"npdel", "del"} {
				op := f.op(t, id)
				require.Equal(t, arm.ProvisioningStateSucceeded, op.Status, id)
				require.Empty(t, op.NotificationURI, "%s: notified and cleared", id)
			}
			got := f.arm.got()
			require.Len(t, got, 2)
			require.Equal(t, "npdel", got[0].Name)
			require.Equal(t, "del", got[1].Name)
			for _, st := range got {
				require.Equal(t, arm.ProvisioningStateSucceeded, st.Status)
			}
		})
	}
}
