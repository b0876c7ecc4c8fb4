package clustersim

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
)

// Errors returned by the Go API; the admin API maps them to 400, 404 and 409.
var (
	ErrInvalid  = errors.New("invalid request")
	ErrNotFound = errors.New("not found")
	ErrConflict = errors.New("conflict")
)

// Options configures a Sim. The zero value is usable.
type Options struct {
	// Clock drives lifecycles; nil means the real clock.
	Clock Clock
	// Seed seeds the fault-injection random source so runs are reproducible.
	Seed int64
	// Logger receives admin actions (Info) and status calls (Debug); nil
	// discards.
	Logger *slog.Logger
	// Defaults fills the fields an admin API request leaves out (PUT bodies,
	// and the uninstalling/updating durations of DELETE and update). The Go
	// API takes scripts as given.
	Defaults Script
	// Faults is the fault configuration at start.
	Faults Faults
	// RecordCalls keeps the arrival time of every status call, for Calls.
	// Off by default: a long run would keep them all.
	RecordCalls bool
}

// Sim is a simulated Cluster Service. It is an http.Handler and is safe for
// concurrent use.
type Sim struct {
	clock    Clock
	log      *slog.Logger
	defaults Script
	mux      *http.ServeMux

	mu       sync.Mutex
	clusters map[string]*cluster

	faultMu sync.Mutex // guards faults and rng
	faults  Faults
	rng     *rand.Rand

	stats *statCounters

	recordCalls bool
	callLog     callLog

	closeOnce sync.Once
	closed    chan struct{}
}

type cluster struct {
	lifecycle
	// created is served as creation_timestamp; a replace keeps it, since
	// billing reads it as the cluster's own.
	created       time.Time
	nodePools     map[string]*lifecycle
	externalAuths map[string]*lifecycle
	credentials   map[string]*credential
}

// Resource kinds, as Resource.Kind names them.
const (
	KindCluster              = "Cluster"
	KindNodePool             = "NodePool"
	KindExternalAuth         = "ExternalAuth"
	KindBreakGlassCredential = "BreakGlassCredential"
)

// Resource describes one simulated cluster, node pool, external auth or
// break-glass credential at a moment.
type Resource struct {
	// Kind is KindCluster, KindNodePool, KindExternalAuth or
	// KindBreakGlassCredential.
	Kind string `json:"kind"`
	// ClusterID is the cluster's ID (for a cluster, its own).
	ClusterID string `json:"clusterId"`
	// NodePoolID is set for a node pool only.
	NodePoolID string `json:"nodePoolId,omitempty"`
	// ExternalAuthID is set for an external auth only.
	ExternalAuthID string `json:"externalAuthId,omitempty"`
	// CredentialID is set for a break-glass credential only.
	CredentialID string `json:"credentialId,omitempty"`
	// Paths are the Cluster Service paths (internalId values) it is served at.
	Paths []string `json:"paths"`
	// State is the Cluster Service state (a credential's status); empty
	// once Deleted, and while an external auth has no status.
	State string `json:"state,omitempty"`
	// Since is when State began (or when the delete finished).
	Since time.Time `json:"since"`
	// Phase is PhaseCreate, PhaseUpdate, PhaseDelete or PhaseSet.
	Phase string `json:"phase"`
	// Deleted is true when a delete has finished: the resource now answers 404.
	Deleted bool `json:"deleted,omitempty"`
	// Script is the resource's lifecycle script.
	Script Script `json:"script"`
	// CreationTimestamp is a cluster's or credential's creation time as
	// served, in whole seconds.
	CreationTimestamp time.Time `json:"creationTimestamp,omitzero"`
	// ExpirationTimestamp and RevocationTimestamp are a credential's, as
	// served (RevocationTimestamp once revoked).
	ExpirationTimestamp time.Time `json:"expirationTimestamp,omitzero"`
	RevocationTimestamp time.Time `json:"revocationTimestamp,omitzero"`
}

// New returns a simulator with no resources.
func New(opts Options) *Sim {
	s := &Sim{
		clock:    opts.Clock,
		log:      opts.Logger,
		defaults: opts.Defaults,
		clusters: map[string]*cluster{},
		faults:   opts.Faults,
		rng:      rand.New(rand.NewPCG(uint64(opts.Seed), 0x636c757374657273)),
		stats:    newStatCounters(),
		closed:   make(chan struct{}),

		recordCalls: opts.RecordCalls,
	}
	if s.clock == nil {
		s.clock = realClock{}
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.mux = s.routes()
	return s
}

// Close releases requests held by injected latency or timeouts; they answer
// 503. Call it before shutting an http.Server down. The Sim keeps serving.
func (s *Sim) Close() {
	s.closeOnce.Do(func() { close(s.closed) })
}

// validID accepts the characters Cluster Service IDs use, so that an ID
// always forms a clean path segment.
func validID(id string) error {
	if id == "" || len(id) > 256 || id == "." || id == ".." {
		return fmt.Errorf("%w: id %q", ErrInvalid, id)
	}
	for _, r := range id {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-._~", r)
		if !ok {
			return fmt.Errorf("%w: id %q has %q (allowed: letters, digits, -._~)", ErrInvalid, id, r)
		}
	}
	return nil
}

// AddCluster creates cluster id, or replaces it and restarts its create
// lifecycle (keeping its node pools) if it exists.
func (s *Sim) AddCluster(id string, sc Script) error {
	_, err := s.addCluster(id, sc)
	return err
}

// addCluster differs from addChild on purpose: a replaced cluster keeps
// its creation time and its children.
func (s *Sim) addCluster(id string, sc Script) (Resource, error) {
	if err := checkAdd(KindCluster, sc, id); err != nil {
		return Resource{}, err
	}
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.getCluster(id, now)
	if c == nil {
		c = &cluster{created: now, nodePools: map[string]*lifecycle{},
			externalAuths: map[string]*lifecycle{}, credentials: map[string]*credential{}}
		s.clusters[id] = c
	}
	c.lifecycle = lifecycle{script: sc.clone(), phase: PhaseCreate, start: now}
	s.log.Info("cluster created", "cluster", id)
	return clusterView(id, c, now), nil
}

// AddNodePool creates node pool np of cluster clusterID, or replaces it and
// restarts its create lifecycle. The cluster must exist and not be deleting.
func (s *Sim) AddNodePool(clusterID, np string, sc Script) error {
	_, err := s.addChild(KindNodePool, clusterID, np, sc)
	return err
}

// addChild creates (or replaces) a node pool, external auth or credential
// of a live cluster.
func (s *Sim) addChild(kind, clusterID, child string, sc Script) (Resource, error) {
	if err := checkAdd(kind, sc, clusterID, child); err != nil {
		return Resource{}, err
	}
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.liveCluster(clusterID, now)
	if err != nil {
		return Resource{}, err
	}
	r := ref{kind: kind, cluster: clusterID, child: child, c: c}
	l := lifecycle{script: sc.clone(), phase: PhaseCreate, start: now}
	if kind == KindBreakGlassCredential {
		r.cr = &credential{lifecycle: l, created: now}
		r.l = &r.cr.lifecycle
		c.credentials[child] = r.cr
	} else {
		r.l = &l
		c.lifecycles(kind)[child] = r.l
	}
	s.log.Info(kindNames[kind].noun+" created", r.logArgs()...)
	return r.view(now), nil
}

// checkAdd validates the IDs and script of an add. Only external auths may
// go without a status.
func checkAdd(kind string, sc Script, ids ...string) error {
	for _, id := range ids {
		if err := validID(id); err != nil {
			return err
		}
	}
	if err := sc.validate(); err != nil {
		return err
	}
	if kind != KindExternalAuth && (sc.NoStatus || sc.NoStatusFor != 0) {
		return fmt.Errorf("%w: noStatus and noStatusFor are for external auths, not a %s", ErrInvalid, kindNames[kind].noun)
	}
	return nil
}

func (c *cluster) managedResourceGroup(id string) string {
	if c.script.ManagedResourceGroup != "" {
		return c.script.ManagedResourceGroup
	}
	return id + "-managed"
}

// lifecycles returns the map of the cluster's node pools or external auths.
func (c *cluster) lifecycles(kind string) map[string]*lifecycle {
	if kind == KindNodePool {
		return c.nodePools
	}
	return c.externalAuths
}

// liveCluster returns a cluster that children can be added to: it exists
// and is not being deleted. s.mu must be held.
func (s *Sim) liveCluster(id string, now time.Time) (*cluster, error) {
	c := s.getCluster(id, now)
	if c == nil {
		return nil, fmt.Errorf("cluster %q: %w", id, ErrNotFound)
	}
	if c.phase == PhaseDelete {
		return nil, fmt.Errorf("cluster %q is being deleted: %w", id, ErrConflict)
	}
	return c, nil
}

// DeleteCluster starts deleting cluster id: it is uninstalling for the given
// duration and then answers 404, as do its node pools, external auths and
// credentials. Deleting a cluster
// that is already deleting changes nothing.
func (s *Sim) DeleteCluster(id string, uninstalling time.Duration) error {
	_, err := s.deleteResource(KindCluster, id, "", &uninstalling)
	return err
}

// DeleteNodePool starts deleting a node pool: uninstalling for the given
// duration, then 404.
func (s *Sim) DeleteNodePool(clusterID, np string, uninstalling time.Duration) error {
	_, err := s.deleteResource(KindNodePool, clusterID, np, &uninstalling)
	return err
}

// deleteResource starts deleting a cluster, node pool or external auth; a
// nil uninstalling keeps the script's.
func (s *Sim) deleteResource(kind, clusterID, child string, uninstalling *time.Duration) (Resource, error) {
	return lookup(s, kind, clusterID, child, func(r ref, now time.Time) (Resource, error) {
		if err := startDelete(r.l, uninstalling, now); err != nil {
			return Resource{}, err
		}
		v := r.view(now)
		if v.Deleted {
			r.forget(s)
		}
		s.log.Info(kindNames[kind].noun+" deleting", r.logArgs("uninstalling", r.l.script.Uninstalling.D())...)
		return v, nil
	})
}

func startDelete(l *lifecycle, uninstalling *time.Duration, now time.Time) error {
	if l.phase == PhaseDelete {
		return nil // already deleting: keep the original start
	}
	if uninstalling != nil {
		if *uninstalling < 0 {
			return fmt.Errorf("%w: uninstalling is negative", ErrInvalid)
		}
		l.script.Uninstalling = Duration(*uninstalling)
	}
	l.begin(PhaseDelete, now)
	return nil
}

// UpdateCluster starts an update of a ready cluster: updating for the given
// duration, then ready. A cluster in any other state gives ErrConflict.
func (s *Sim) UpdateCluster(id string, updating time.Duration) error {
	_, err := s.updateResource(KindCluster, id, "", &updating)
	return err
}

// UpdateNodePool starts an update of a ready node pool: updating for the
// given duration, then ready.
func (s *Sim) UpdateNodePool(clusterID, np string, updating time.Duration) error {
	_, err := s.updateResource(KindNodePool, clusterID, np, &updating)
	return err
}

// updateResource starts an update of a cluster, node pool or external
// auth; a nil updating keeps the script's.
func (s *Sim) updateResource(kind, clusterID, child string, updating *time.Duration) (Resource, error) {
	return lookup(s, kind, clusterID, child, func(r ref, now time.Time) (Resource, error) {
		if err := startUpdate(r.l, updating, now); err != nil {
			return Resource{}, fmt.Errorf("%s: %w", r.name(), err)
		}
		s.log.Info(kindNames[kind].noun+" updating", r.logArgs("updating", r.l.script.Updating.D())...)
		return r.view(now), nil
	})
}

func startUpdate(l *lifecycle, updating *time.Duration, now time.Time) error {
	if state, _, _ := l.at(now); state != StateReady {
		return fmt.Errorf("%w: update needs state %q, not %q", ErrConflict, StateReady, state)
	}
	if updating != nil {
		if *updating < 0 {
			return fmt.Errorf("%w: updating is negative", ErrInvalid)
		}
		l.script.Updating = Duration(*updating)
	}
	l.begin(PhaseUpdate, now)
	return nil
}

// Cluster returns cluster id as it is now.
func (s *Sim) Cluster(id string) (Resource, error) {
	return s.resource(KindCluster, id, "")
}

// NodePool returns a node pool as it is now.
func (s *Sim) NodePool(clusterID, np string) (Resource, error) {
	return s.resource(KindNodePool, clusterID, np)
}

// resource returns a resource of any kind as it is now.
func (s *Sim) resource(kind, clusterID, child string) (Resource, error) {
	return lookup(s, kind, clusterID, child, func(r ref, now time.Time) (Resource, error) {
		return r.view(now), nil
	})
}

// Resources returns every live resource, clusters sorted by ID, each
// followed by its node pools, external auths and credentials, each kind
// sorted by ID.
func (s *Sim) Resources() []Resource {
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Resource
	for _, id := range sortedKeys(s.clusters) {
		c := s.getCluster(id, now)
		if c == nil {
			continue
		}
		out = append(out, clusterView(id, c, now))
		for _, k := range []struct {
			kind string
			ids  []string
		}{
			{KindNodePool, sortedKeys(c.nodePools)},
			{KindExternalAuth, sortedKeys(c.externalAuths)},
			{KindBreakGlassCredential, sortedKeys(c.credentials)},
		} {
			for _, child := range k.ids {
				if r, err := s.find(k.kind, id, child, now); err == nil {
					out = append(out, r.view(now))
				}
			}
		}
	}
	return out
}

// SetState fixes the state of the resource at path, a Cluster Service path
// such as /api/aro_hcp/v1alpha1/clusters/{id}/node_pools/{np} (a trailing
// /status is allowed for clusters and node pools), an external auth's path
// or a break-glass credential's (whose status it sets). The state stays
// until the next create, update, delete or revocation of that resource; any
// non-empty string is accepted so that tests can produce states the
// lifecycles never reach.
func (s *Sim) SetState(path, state string) error {
	_, err := s.setState(path, state)
	return err
}

func (s *Sim) setState(path, state string) (Resource, error) {
	if state == "" {
		return Resource{}, fmt.Errorf("%w: empty state", ErrInvalid)
	}
	rp, ok := parseResourcePath(path)
	if !ok {
		return Resource{}, fmt.Errorf("%w: path %q is not a Cluster Service cluster, node pool, external auth or credential path", ErrInvalid, path)
	}
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.served(rp.api, rp.cluster, now) {
		return Resource{}, fmt.Errorf("cluster %q: %w", rp.cluster, ErrNotFound)
	}
	r, err := s.find(rp.kind, rp.cluster, rp.child, now)
	if err != nil {
		return Resource{}, err
	}
	r.l.set(state, now)
	s.log.Info("state set", "path", path, "state", state)
	return r.view(now), nil
}

// ReadyAll ends every lifecycle at once: every cluster, node pool and
// external auth that is not being deleted becomes ready (failing scripts
// included), every delete finishes (404), every credential being issued is
// issued and every revocation ends revoked. It returns how many resources
// changed.
func (s *Sim) ReadyAll() int {
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	finish := func(l *lifecycle) (gone bool) {
		state, _, gone := l.at(now)
		switch {
		case gone:
			return true
		case l.phase == PhaseDelete:
			n++
			return true
		case state != StateReady:
			n++
			l.set(StateReady, now)
		}
		return false
	}
	for id, c := range s.clusters {
		if finish(&c.lifecycle) {
			n += countLiveChildren(c, now)
			delete(s.clusters, id)
			continue
		}
		for _, m := range []map[string]*lifecycle{c.nodePools, c.externalAuths} {
			for child, l := range m {
				if finish(l) {
					delete(m, child)
				}
			}
		}
		for _, cr := range c.credentials {
			if cr.finish(now) {
				n++
			}
		}
	}
	s.log.Info("ready-all", "changed", n)
	return n
}

// countLiveChildren counts what a cluster's finished delete takes with it.
func countLiveChildren(c *cluster, now time.Time) int {
	n := len(c.credentials)
	for _, m := range []map[string]*lifecycle{c.nodePools, c.externalAuths} {
		for _, l := range m {
			if _, _, gone := l.at(now); !gone {
				n++
			}
		}
	}
	return n
}

// getCluster returns the live cluster id, forgetting it (and its node pools)
// once its delete has finished. s.mu must be held.
func (s *Sim) getCluster(id string, now time.Time) *cluster {
	c := s.clusters[id]
	if c == nil {
		return nil
	}
	if _, _, gone := c.at(now); gone {
		delete(s.clusters, id)
		return nil
	}
	return c
}

// served reports whether cluster id is live and served under api. s.mu
// must be held.
func (s *Sim) served(api, id string, now time.Time) bool {
	c := s.getCluster(id, now)
	return c != nil && c.script.serves(api)
}

// kindNames are how errors and logs (noun, logKey) and Cluster Service's
// 404 reasons (title) name each kind.
var kindNames = map[string]struct{ noun, logKey, title string }{
	KindCluster:              {"cluster", "cluster", "Cluster"},
	KindNodePool:             {"node pool", "nodePool", "Node pool"},
	KindExternalAuth:         {"external auth", "externalAuth", "External auth"},
	KindBreakGlassCredential: {"credential", "credential", "Break glass credential"},
}

// ref is one live resource of any kind, as find returns it, so that one
// piece of code can look up, change and show every kind.
type ref struct {
	kind    string // a Kind* constant
	cluster string // the cluster's ID
	child   string // the node pool's, external auth's or credential's ID
	c       *cluster
	l       *lifecycle  // the resource's own (a credential's embedded one)
	cr      *credential // credentials only
}

// find returns the live resource of kind; child is empty for a cluster.
// It forgets a node pool or external auth whose delete has finished;
// credentials go only with their cluster. s.mu must be held.
func (s *Sim) find(kind, clusterID, child string, now time.Time) (ref, error) {
	c := s.getCluster(clusterID, now)
	if c == nil {
		return ref{}, fmt.Errorf("cluster %q: %w", clusterID, ErrNotFound)
	}
	r := ref{kind: kind, cluster: clusterID, child: child, c: c}
	switch kind {
	case KindCluster:
		r.l = &c.lifecycle
		return r, nil
	case KindBreakGlassCredential:
		if r.cr = c.credentials[child]; r.cr != nil {
			r.l = &r.cr.lifecycle
			return r, nil
		}
	default:
		if r.l = c.lifecycles(kind)[child]; r.l != nil {
			if _, _, gone := r.l.at(now); !gone {
				return r, nil
			}
			r.forget(s)
		}
	}
	return ref{}, fmt.Errorf("%s: %w", r.name(), ErrNotFound)
}

// lookup runs f under s.mu on the live resource of kind (see find) and
// returns what f returns, or find's error.
func lookup[T any](s *Sim, kind, clusterID, child string, f func(r ref, now time.Time) (T, error)) (T, error) {
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.find(kind, clusterID, child, now)
	if err != nil {
		var none T
		return none, err
	}
	return f(r, now)
}

// name is how errors name the resource.
func (r ref) name() string {
	if r.kind == KindCluster {
		return fmt.Sprintf("cluster %q", r.cluster)
	}
	return fmt.Sprintf("%s %q of cluster %q", kindNames[r.kind].noun, r.child, r.cluster)
}

// logArgs are the attributes that name the resource in admin log lines,
// followed by more.
func (r ref) logArgs(more ...any) []any {
	args := []any{"cluster", r.cluster}
	if r.kind != KindCluster {
		args = append(args, kindNames[r.kind].logKey, r.child)
	}
	return append(args, more...)
}

// forget drops a cluster, node pool or external auth whose delete has
// finished.
func (r ref) forget(s *Sim) {
	if r.kind == KindCluster {
		delete(s.clusters, r.cluster)
		return
	}
	delete(r.c.lifecycles(r.kind), r.child)
}

// view shows the resource as it is at now.
func (r ref) view(now time.Time) Resource {
	switch r.kind {
	case KindCluster:
		return clusterView(r.cluster, r.c, now)
	case KindNodePool:
		return nodePoolView(r.cluster, r.child, r.c, r.l, now)
	case KindExternalAuth:
		return externalAuthView(r.cluster, r.child, r.c, r.l, now)
	default:
		return credentialView(r.cluster, r.child, r.c, r.cr, now)
	}
}

const (
	clustersMgmtPrefix = "/api/clusters_mgmt/v1"
	aroHCPPrefix       = "/api/aro_hcp/v1alpha1"
)

func clusterPath(api, id string) string {
	return "/api/" + api + "/clusters/" + id
}

func nodePoolPath(api, id, np string) string {
	return clusterPath(api, id) + "/node_pools/" + np
}

func clusterView(id string, c *cluster, now time.Time) Resource {
	state, since, gone := c.at(now)
	var paths []string
	for _, api := range []string{APIClustersMgmt, APIAROHCP} {
		if c.script.serves(api) {
			paths = append(paths, clusterPath(api, id))
		}
	}
	return Resource{Kind: KindCluster, ClusterID: id, Paths: paths, State: state, Since: since.UTC(),
		Phase: c.phase, Deleted: gone, Script: c.script.clone(), CreationTimestamp: servedTime(c.created)}
}

func nodePoolView(id, np string, c *cluster, l *lifecycle, now time.Time) Resource {
	state, since, gone := l.at(now)
	paths := []string{}
	for _, api := range []string{APIClustersMgmt, APIAROHCP} {
		if c.script.serves(api) {
			paths = append(paths, nodePoolPath(api, id, np))
		}
	}
	return Resource{Kind: KindNodePool, ClusterID: id, NodePoolID: np, Paths: paths, State: state,
		Since: since.UTC(), Phase: l.phase, Deleted: gone, Script: l.script.clone()}
}

// servedTime is t as Cluster Service writes it: UTC, whole seconds.
func servedTime(t time.Time) time.Time {
	return t.UTC().Truncate(time.Second)
}

// resourcePath is a parsed Cluster Service path of one simulated resource.
type resourcePath struct {
	api, cluster string
	kind         string // a Kind* constant
	child        string // the node pool, external auth or credential ID
}

// parseResourcePath splits a Cluster Service path of a cluster or node
// pool (optionally ending in /status), an external auth or a break-glass
// credential.
func parseResourcePath(p string) (resourcePath, bool) {
	var rp resourcePath
	var rest string
	switch {
	case strings.HasPrefix(p, clustersMgmtPrefix+"/clusters/"):
		rp.api, rest = APIClustersMgmt, strings.TrimPrefix(p, clustersMgmtPrefix+"/clusters/")
	case strings.HasPrefix(p, aroHCPPrefix+"/clusters/"):
		rp.api, rest = APIAROHCP, strings.TrimPrefix(p, aroHCPPrefix+"/clusters/")
	default:
		return resourcePath{}, false
	}
	parts := strings.Split(rest, "/")
	if n := len(parts); (n == 2 || n == 4 && parts[1] == "node_pools") && parts[n-1] == "status" {
		parts = parts[:n-1] // a cluster's or node pool's status path
	}
	switch {
	case len(parts) == 1:
		rp.kind = KindCluster
	case len(parts) == 3 && parts[1] == "node_pools":
		rp.kind, rp.child = KindNodePool, parts[2]
	case len(parts) == 4 && rp.api == APIAROHCP && parts[1] == "external_auth_config" && parts[2] == "external_auths":
		rp.kind, rp.child = KindExternalAuth, parts[3]
	case len(parts) == 3 && rp.api == APIClustersMgmt && parts[1] == "break_glass_credentials":
		rp.kind, rp.child = KindBreakGlassCredential, parts[2]
	default:
		return resourcePath{}, false
	}
	rp.cluster = parts[0]
	if validID(rp.cluster) != nil || rp.kind != KindCluster && validID(rp.child) != nil {
		return resourcePath{}, false
	}
	return rp, true
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
