package clustersim

import "sync"

// Path kinds counted in Stats.Requests.
const (
	PathKindClustersMgmtCluster = "clusters_mgmt/v1/cluster"
	PathKindAROHCPCluster       = "aro_hcp/v1alpha1/cluster"
	PathKindAROHCPNodePool      = "aro_hcp/v1alpha1/node_pool"
	// Node pool object calls (GET {node pool}), by the API of the path.
	PathKindClustersMgmtNodePoolObject = "clusters_mgmt/v1/node_pool_object"
	PathKindAROHCPNodePoolObject       = "aro_hcp/v1alpha1/node_pool_object"
	// Inflight checks calls, by the API of the cluster's path.
	PathKindClustersMgmtInflightChecks = "clusters_mgmt/v1/inflight_checks"
	PathKindAROHCPInflightChecks       = "aro_hcp/v1alpha1/inflight_checks"
	// Cluster object calls (GET {cluster}), by the API of the path.
	PathKindClustersMgmtClusterObject = "clusters_mgmt/v1/cluster_object"
	PathKindAROHCPClusterObject       = "aro_hcp/v1alpha1/cluster_object"
	PathKindAROHCPExternalAuth        = "aro_hcp/v1alpha1/external_auth"
	PathKindClustersMgmtCredential    = "clusters_mgmt/v1/break_glass_credential"
	// Credential list calls, one per page.
	PathKindClustersMgmtCredentialList = "clusters_mgmt/v1/break_glass_credential_list"
	PathKindOther                      = "other"
)

// statusClientClosed is counted in Stats.Statuses when the client went away
// before an answer (nginx's convention); nothing is written to the client.
const statusClientClosed = 499

// Stats counts the Cluster Service calls the simulator served (admin calls
// are not counted).
type Stats struct {
	// Requests counts calls by path kind (PathKind* constants).
	Requests map[string]int64 `json:"requests"`
	// Statuses counts answers by HTTP status code; 499 means the client
	// went away before the answer.
	Statuses map[int]int64 `json:"statuses"`
	// Faults counts injected faults by kind (Fault* constants).
	Faults map[string]int64 `json:"faults"`
}

type statCounters struct {
	mu sync.Mutex
	s  Stats
}

func newStatCounters() *statCounters {
	c := &statCounters{}
	c.reset()
	return c
}

func (c *statCounters) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.s = Stats{Requests: map[string]int64{}, Statuses: map[int]int64{}, Faults: map[string]int64{}}
}

func (c *statCounters) request(kind string) {
	c.mu.Lock()
	c.s.Requests[kind]++
	c.mu.Unlock()
}

func (c *statCounters) status(code int) {
	c.mu.Lock()
	c.s.Statuses[code]++
	c.mu.Unlock()
}

func (c *statCounters) fault(kind string) {
	c.mu.Lock()
	c.s.Faults[kind]++
	c.mu.Unlock()
}

func (c *statCounters) snapshot() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := Stats{Requests: map[string]int64{}, Statuses: map[int]int64{}, Faults: map[string]int64{}}
	for k, v := range c.s.Requests {
		out.Requests[k] = v
	}
	for k, v := range c.s.Statuses {
		out.Statuses[k] = v
	}
	for k, v := range c.s.Faults {
		out.Faults[k] = v
	}
	return out
}

// Stats returns a copy of the counters.
func (s *Sim) Stats() Stats { return s.stats.snapshot() }

// ResetStats sets every counter back to zero.
func (s *Sim) ResetStats() { s.stats.reset() }
