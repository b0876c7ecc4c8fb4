package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/clustersim"
	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/internal/testenv"
)

// frontOfCS stands where a router or an ingress stands in front of Cluster
// Service: it answers every request with its own 404 until pass is set, and
// then hands requests on to the simulator.
type frontOfCS struct {
	mu          sync.Mutex
	contentType string // "-": no Content-Type header
	body        string
	sim         *clustersim.Sim // nil: answer the 404
	requests    atomic.Int64
}

func (f *frontOfCS) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.requests.Add(1)
	f.mu.Lock()
	contentType, body, sim := f.contentType, f.body, f.sim
	f.mu.Unlock()
	if sim != nil {
		sim.ServeHTTP(w, r)
		return
	}
	testenv.WriteNotFound(w, contentType, body)
}

func (f *frontOfCS) answer404(contentType, body string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.contentType, f.body, f.sim = contentType, body, nil
}

func (f *frontOfCS) pass(sim *clustersim.Sim) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sim = sim
}

// TestDeleteIsFinishedOnlyByAnOCMNotFound points the handler at a server
// that answers 404 pages that are not Cluster Service's: a cluster's delete
// (with a node pool item) and a node pool's delete stay as they are, nobody
// is notified, and each poll is deferred with an error line saying what came
// back. Once the requests reach Cluster Service (the simulator), its OCM 404
// finishes both deletes.
func TestDeleteIsFinishedOnlyByAnOCMNotFound(t *testing.T) {
	front := &frontOfCS{}
	frontServer := httptest.NewServer(front)
	t.Cleanup(frontServer.Close)
	s := startStack(t, "CLUSTER_SERVICE_URL="+frontServer.URL)
	ctx := t.Context()

	const (
		clusterPath = "/api/clusters_mgmt/v1/clusters/cd"
		poolPath    = "/api/aro_hcp/v1alpha1/clusters/ce/node_pools/np2"
	)
	require.NoError(t, s.sim.AddCluster("cd", clustersim.Script{}))
	require.NoError(t, s.sim.AddNodePool("cd", "np1", clustersim.Script{}))
	s.seed(subB, "op-del", "Delete", "Deleting", clusterKey(subB, "cd"), clusterPath)
	require.NoError(t, s.fe.PutResource(ctx, frontend.Resource{ID: "res-np1", PartitionKey: subB,
		Key: clusterKey(subB, "cd") + "/nodePools/np1", InternalID: "/api/aro_hcp/v1alpha1/clusters/cd/node_pools/np1",
		ProvisioningState: "Succeeded"}))
	require.NoError(t, s.sim.AddCluster("ce", clustersim.Script{}))
	require.NoError(t, s.sim.AddNodePool("ce", "np2", clustersim.Script{}))
	s.seed(subA, "op-npdel", "Delete", "Deleting", clusterKey(subA, "ce")+"/nodePools/np2", poolPath)
	require.NoError(t, s.sim.DeleteCluster("cd", 10*time.Second))
	require.NoError(t, s.sim.DeleteNodePool("ce", "np2", 10*time.Second))

	items := []itemRef{opRef(subB, "op-del"), resRef(subB, "res-op-del"), resRef(subB, "res-np1"),
		opRef(subA, "op-npdel"), resRef(subA, "res-op-npdel")}
	ops := []struct{ sub, id, path string }{{subB, "op-del", clusterPath}, {subA, "op-npdel", poolPath}}
	pollOp := func(sub, id string) response {
		t.Helper()
		r, _ := s.post("poll", envelope(pollData(fmt.Sprintf(`{"subscriptionId":%q,"operationId":%q}`, sub, id))))
		require.Equal(t, http.StatusOK, r.Status, r.Logs)
		return r
	}

	for _, tc := range []struct {
		name, contentType, body, log string
	}{
		{"router text", "text/plain; charset=utf-8", "404 page not found\n",
			`not an OCM error (content type \"text/plain; charset=utf-8\", body \"404 page not found\\n\")`},
		{"ingress HTML", "text/html", "<html>\r\n<head><title>404 Not Found</title></head>\r\n<body>\r\n<center><h1>404 Not Found</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n",
			`not an OCM error (content type \"text/html\", body \"<html>`},
		{"JSON without kind", "application/json", `{"message":"not found"}`,
			`not an OCM error (content type \"application/json\", no \"kind\":\"Error\"`},
		{"OCM error body labelled text", "text/plain", `{"kind":"Error","id":"404","reason":"not found"}`,
			`not an OCM error (content type \"text/plain\"`},
		{"empty body", "-", "", "not an OCM error (no content type, empty body)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer s.use(t)()
			front.answer404(tc.contentType, tc.body)
			before := s.snapshot(items...)
			requests := front.requests.Load()
			for _, op := range ops {
				r := pollOp(op.sub, op.id)
				require.Equal(t, "deferred", outcome(t, r))
				s.requireLog(t, r, testenv.HostError, "operation left unchanged",
					"GET "+op.path+"/status: HTTP 404 Not Found", tc.log)
				for _, line := range s.hostLines(r) {
					require.Less(t, len(line.text), 2048, "a 404 page is summarized, not logged whole")
				}
				s.requireNoLockLeft(op.sub)
			}
			require.Equal(t, requests+2, front.requests.Load(), "one call per poll")
			s.requireUnchanged(before)
			require.Empty(t, s.arm.Bodies())
		})
	}

	// Cluster Service itself: uninstalling first, then its OCM 404.
	front.pass(s.sim)
	for _, op := range ops {
		require.Equal(t, "unchanged", outcome(t, pollOp(op.sub, op.id)), op.id)
	}
	s.clock.Advance(20 * time.Second)
	for _, op := range ops {
		require.Equal(t, "deleted", outcome(t, pollOp(op.sub, op.id)), op.id)
		require.Equal(t, "Succeeded", s.opStatus(op.sub, op.id))
	}
	for _, ref := range items {
		if ref.resource {
			require.Nil(t, s.snapshot(ref)[ref], "%s should be deleted", ref.id)
		}
	}
	var notified []string
	for _, n := range s.arm.Bodies() {
		notified = append(notified, fmt.Sprint(n["name"], "=", n["status"]))
	}
	slices.Sort(notified)
	require.Equal(t, []string{"op-del=Succeeded", "op-npdel=Succeeded"}, notified)
}
