package clustersim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ServeHTTP serves the Cluster Service paths (see the package doc) and the
// admin API.
func (s *Sim) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mux.ServeHTTP(w, r)
}

func (s *Sim) routes() *http.ServeMux {
	admin := http.NewServeMux()
	admin.HandleFunc("GET /admin/clusters", s.adminList)
	// Clusters, node pools and external auths share one lifecycle; {child}
	// is the node pool's or external auth's ID.
	for _, k := range []struct{ kind, path string }{
		{KindCluster, "/admin/clusters/{id}"},
		{KindNodePool, "/admin/clusters/{id}/node_pools/{child}"},
		{KindExternalAuth, "/admin/clusters/{id}/external_auths/{child}"},
	} {
		admin.HandleFunc("PUT "+k.path, s.adminPut(k.kind))
		admin.HandleFunc("GET "+k.path, s.adminGet(k.kind))
		admin.HandleFunc("DELETE "+k.path, adminCall(http.StatusAccepted, func(r *http.Request, req DeleteRequest) (Resource, error) {
			return s.deleteResource(k.kind, r.PathValue("id"), r.PathValue("child"), (*time.Duration)(req.Uninstalling))
		}))
		admin.HandleFunc("POST "+k.path+"/update", adminCall(http.StatusAccepted, func(r *http.Request, req UpdateRequest) (Resource, error) {
			return s.updateResource(k.kind, r.PathValue("id"), r.PathValue("child"), (*time.Duration)(req.Updating))
		}))
	}
	const credentials = "/admin/clusters/{id}/break_glass_credentials"
	admin.HandleFunc("PUT "+credentials+"/{child}", s.adminPut(KindBreakGlassCredential))
	admin.HandleFunc("GET "+credentials+"/{child}", s.adminGet(KindBreakGlassCredential))
	admin.HandleFunc("POST "+credentials+"/{child}/revoke", adminCall(http.StatusAccepted, func(r *http.Request, req RevokeRequest) (Resource, error) {
		return s.revokeCredential(r.PathValue("id"), r.PathValue("child"), (*time.Duration)(req.Revoking))
	}))
	admin.HandleFunc("POST "+credentials+"/revoke", adminCall(http.StatusAccepted, func(r *http.Request, req RevokeRequest) (RevokeResponse, error) {
		return s.revokeCredentials(r.PathValue("id"), (*time.Duration)(req.Revoking))
	}))
	admin.HandleFunc("POST /admin/ready-all", s.adminReadyAll)
	admin.HandleFunc("POST /admin/state", adminCall(http.StatusOK, func(_ *http.Request, req StateRequest) (Resource, error) {
		return s.setState(req.Path, req.State)
	}))
	admin.HandleFunc("GET /admin/stats", s.adminStats)
	admin.HandleFunc("DELETE /admin/stats", s.adminResetStats)
	admin.HandleFunc("GET /admin/faults", s.adminGetFaults)
	admin.HandleFunc("PUT /admin/faults", adminCall(http.StatusOK, func(_ *http.Request, f Faults) (Faults, error) {
		return f, s.SetFaults(f)
	}))

	mux := http.NewServeMux()
	mux.Handle("/admin/", loopbackOnly(admin))
	mux.HandleFunc("/api/clusters_mgmt/v1/clusters/{id}", s.clusterHandler(APIClustersMgmt, PathKindClustersMgmtClusterObject))
	mux.HandleFunc("/api/aro_hcp/v1alpha1/clusters/{id}", s.clusterHandler(APIAROHCP, PathKindAROHCPClusterObject))
	mux.HandleFunc("/api/clusters_mgmt/v1/clusters/{id}/status", s.clusterStatusHandler(APIClustersMgmt, PathKindClustersMgmtCluster))
	mux.HandleFunc("/api/aro_hcp/v1alpha1/clusters/{id}/status", s.clusterStatusHandler(APIAROHCP, PathKindAROHCPCluster))
	// A node pool is one object under both APIs; only aro_hcp has its
	// /status (clusters_mgmt's answers the 404 of a path it does not serve).
	mux.HandleFunc("/api/clusters_mgmt/v1/clusters/{id}/node_pools/{np}", s.nodePoolHandler(APIClustersMgmt, PathKindClustersMgmtNodePoolObject))
	mux.HandleFunc("/api/aro_hcp/v1alpha1/clusters/{id}/node_pools/{np}", s.nodePoolHandler(APIAROHCP, PathKindAROHCPNodePoolObject))
	mux.HandleFunc("/api/aro_hcp/v1alpha1/clusters/{id}/node_pools/{np}/status", s.nodePoolStatus)
	mux.HandleFunc("/api/clusters_mgmt/v1/clusters/{id}/inflight_checks", s.inflightChecksHandler(APIClustersMgmt, PathKindClustersMgmtInflightChecks))
	mux.HandleFunc("/api/aro_hcp/v1alpha1/clusters/{id}/inflight_checks", s.inflightChecksHandler(APIAROHCP, PathKindAROHCPInflightChecks))
	mux.HandleFunc("/api/aro_hcp/v1alpha1/clusters/{id}/external_auth_config/external_auths/{ea}", s.externalAuthHandler)
	mux.HandleFunc("/api/clusters_mgmt/v1/clusters/{id}/break_glass_credentials", s.credentialListHandler)
	mux.HandleFunc("/api/clusters_mgmt/v1/clusters/{id}/break_glass_credentials/{bgc}", s.credentialHandler)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.stats.request(PathKindOther)
		s.writeOCMError(w, http.StatusNotFound, fmt.Sprintf("Path '%s' not found", r.URL.Path))
	})
	return mux
}

// loopbackOnly refuses admin calls from anything but a loopback address,
// even if the server was bound more widely.
func loopbackOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
			writeJSON(w, http.StatusForbidden, adminError{Error: "admin API is for loopback clients only"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Wire shapes of Cluster Service, as ocm-api-model v0.0.465 writes them.

type clusterStatusJSON struct {
	Kind                  string `json:"kind"`
	ID                    string `json:"id"`
	HREF                  string `json:"href"`
	State                 string `json:"state"`
	Description           string `json:"description,omitempty"`
	ProvisionErrorCode    string `json:"provision_error_code,omitempty"`
	ProvisionErrorMessage string `json:"provision_error_message,omitempty"`
}

// clusterJSON is the cluster object with the fields opstatus reads, in the
// model's order.
type clusterJSON struct {
	Kind              string           `json:"kind"`
	ID                string           `json:"id"`
	HREF              string           `json:"href"`
	Azure             clusterAzureJSON `json:"azure"`
	CreationTimestamp string           `json:"creation_timestamp"`
	State             string           `json:"state"`
}

type clusterAzureJSON struct {
	ManagedResourceGroupName string `json:"managed_resource_group_name"`
}

// nodePoolStatusJSON is a node pool's status, served at aro_hcp's
// {node pool}/status and inside the node pool object of either API. Under
// clusters_mgmt it has no state, as that API served it in 2024-10
// (ocm-sdk-go v0.1.447); today's model has one there too, which opstatus
// does not read.
type nodePoolStatusJSON struct {
	Kind            string             `json:"kind"`
	ID              string             `json:"id,omitempty"`
	HREF            string             `json:"href,omitempty"`
	CurrentReplicas int                `json:"current_replicas"`
	Message         string             `json:"message,omitempty"`
	State           *nodePoolStateJSON `json:"state,omitempty"`
}

// nodePoolJSON is the node pool object with its status.
type nodePoolJSON struct {
	Kind     string             `json:"kind"`
	ID       string             `json:"id"`
	HREF     string             `json:"href"`
	Replicas int                `json:"replicas"`
	Status   nodePoolStatusJSON `json:"status"`
}

// simReplicas is every simulated node pool's replica count: all of them
// run while it is ready or updating, none before.
const simReplicas = 2

// nodePoolStateJSON: the model names the field NodePoolStateValue but
// declares @json(name="value"), so "value" is what goes on the wire.
type nodePoolStateJSON struct {
	Kind                 string `json:"kind"`
	Value                string `json:"value"`
	LastUpdatedTimestamp string `json:"last_updated_timestamp"`
}

// inflightCheckListJSON is the OCM list shape: one page holding every check.
type inflightCheckListJSON struct {
	Kind  string              `json:"kind"`
	HREF  string              `json:"href"`
	Page  int                 `json:"page"`
	Size  int                 `json:"size"`
	Total int                 `json:"total"`
	Items []inflightCheckJSON `json:"items"`
}

type inflightCheckJSON struct {
	Kind    string         `json:"kind"`
	ID      string         `json:"id"`
	HREF    string         `json:"href"`
	Name    string         `json:"name"`
	State   string         `json:"state"`
	Details map[string]any `json:"details,omitempty"`
}

type ocmErrorJSON struct {
	Kind   string `json:"kind"`
	ID     string `json:"id"`
	HREF   string `json:"href"`
	Code   string `json:"code"`
	Reason string `json:"reason"`
}

func (s *Sim) writeOCMError(w http.ResponseWriter, status int, reason string) {
	code := strconv.Itoa(status)
	s.writeStatus(w, status, ocmErrorJSON{
		Kind:   "Error",
		ID:     code,
		HREF:   clustersMgmtPrefix + "/errors/" + code,
		Code:   "CLUSTERS-MGMT-" + code,
		Reason: reason,
	})
}

// writeStatus answers a Cluster Service call and counts the status code.
func (s *Sim) writeStatus(w http.ResponseWriter, status int, body any) {
	s.stats.status(status)
	writeJSON(w, status, body)
}

// beginStatusCall counts the call, checks the method and injects faults; it
// returns false when the call has been answered (or abandoned) already.
func (s *Sim) beginStatusCall(w http.ResponseWriter, r *http.Request, kind string) bool {
	return s.beginCall(w, r, kind, strings.TrimSuffix(r.URL.Path, "/status"))
}

// beginCall is beginStatusCall for any Cluster Service call; Calls keeps
// it under key, or not at all when key is empty.
func (s *Sim) beginCall(w http.ResponseWriter, r *http.Request, kind, key string) bool {
	s.stats.request(kind)
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		s.writeOCMError(w, http.StatusMethodNotAllowed, fmt.Sprintf("Method '%s' is not allowed", r.Method))
		return false
	}
	if key != "" && s.recordCalls {
		s.callLog.record(key, s.clock.Now())
	}
	status, reason := s.injectFaults(r.Context())
	switch status {
	case 0:
		return true
	case statusClientClosed:
		s.stats.status(status)
	default:
		s.writeOCMError(w, status, reason)
	}
	s.log.Debug("status call faulted", "path", r.URL.Path, "status", status)
	return false
}

// read builds the answer to a Cluster Service read under s.mu, or returns
// the reason of its 404: the cluster must be served under api and the
// resource of kind (the cluster itself for KindCluster) must be live.
func read[T any](s *Sim, api, kind, id, child string, body func(r ref, now time.Time) T) (T, string) {
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	var none T
	if !s.served(api, id, now) {
		return none, fmt.Sprintf("Cluster '%s' not found", id)
	}
	r, err := s.find(kind, id, child, now)
	if err != nil {
		return none, fmt.Sprintf("%s '%s' not found", kindNames[kind].title, child)
	}
	return body(r, now), ""
}

// reply answers a Cluster Service read with body, or with a 404 when
// reason is set; msg and attrs make its debug line.
func (s *Sim) reply(w http.ResponseWriter, r *http.Request, body any, reason, msg string, attrs ...any) {
	if reason != "" {
		s.writeOCMError(w, http.StatusNotFound, reason)
		return
	}
	s.log.Debug(msg, append([]any{"path", r.URL.Path}, attrs...)...)
	s.writeStatus(w, http.StatusOK, body)
}

func (s *Sim) clusterStatusHandler(api, kind string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.beginStatusCall(w, r, kind) {
			return
		}
		body, reason := s.clusterStatus(api, r.PathValue("id"))
		s.reply(w, r, body, reason, "cluster status", "state", body.State)
	}
}

func (s *Sim) clusterStatus(api, id string) (clusterStatusJSON, string) {
	return read(s, api, KindCluster, id, "", func(x ref, now time.Time) clusterStatusJSON {
		state, _, _ := x.c.at(now)
		body := clusterStatusJSON{
			Kind:        "ClusterStatus",
			ID:          id,
			HREF:        clusterPath(api, id) + "/status",
			State:       state,
			Description: x.c.script.Description,
		}
		if state == StateError {
			body.ProvisionErrorCode = x.c.script.ErrorCode
			body.ProvisionErrorMessage = x.c.script.ErrorMessage
		}
		return body
	})
}

// clusterHandler serves the cluster object, which opstatus reads for
// billing. It is not recorded in Calls, which counts the calls that read an
// operation's status.
func (s *Sim) clusterHandler(api, kind string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.beginCall(w, r, kind, "") {
			return
		}
		body, reason := s.clusterObject(api, r.PathValue("id"))
		s.reply(w, r, body, reason, "cluster", "state", body.State)
	}
}

func (s *Sim) clusterObject(api, id string) (clusterJSON, string) {
	return read(s, api, KindCluster, id, "", func(x ref, now time.Time) clusterJSON {
		state, _, _ := x.c.at(now)
		return clusterJSON{
			Kind:              "Cluster",
			ID:                id,
			HREF:              clusterPath(api, id),
			Azure:             clusterAzureJSON{ManagedResourceGroupName: x.c.managedResourceGroup(id)},
			CreationTimestamp: x.c.created.UTC().Format(time.RFC3339),
			State:             state,
		}
	})
}

// inflightChecksHandler serves a cluster's inflight checks. They are not
// recorded in Calls, which counts status calls.
func (s *Sim) inflightChecksHandler(api, kind string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.beginCall(w, r, kind, "") {
			return
		}
		if status := s.Faults().InflightChecksStatus; status != 0 {
			s.stats.fault(FaultInflightChecks)
			s.log.Debug("inflight checks call faulted", "path", r.URL.Path, "status", status)
			s.writeOCMError(w, status, "Inflight checks unavailable (simulated)")
			return
		}
		body, reason := s.inflightChecks(api, r.PathValue("id"))
		s.reply(w, r, body, reason, "inflight checks", "checks", body.Total)
	}
}

func (s *Sim) inflightChecks(api, id string) (inflightCheckListJSON, string) {
	return read(s, api, KindCluster, id, "", func(x ref, _ time.Time) inflightCheckListJSON {
		href := clusterPath(api, id) + "/inflight_checks"
		items := make([]inflightCheckJSON, 0, len(x.c.script.InflightChecks))
		for i, check := range x.c.script.InflightChecks {
			checkID := check.ID
			if checkID == "" {
				checkID = strconv.Itoa(i + 1)
			}
			items = append(items, inflightCheckJSON{
				Kind: "InflightCheck", ID: checkID, HREF: href + "/" + checkID,
				Name: check.Name, State: check.State, Details: check.Details,
			})
		}
		return inflightCheckListJSON{Kind: "InflightCheckList", HREF: href, Page: 1, Size: len(items), Total: len(items), Items: items}
	})
}

func (s *Sim) nodePoolStatus(w http.ResponseWriter, r *http.Request) {
	if !s.beginStatusCall(w, r, PathKindAROHCPNodePool) {
		return
	}
	body, reason := s.nodePoolStatusBody(r.PathValue("id"), r.PathValue("np"))
	state := ""
	if body.State != nil {
		state = body.State.Value
	}
	s.reply(w, r, body, reason, "node pool status", "state", state)
}

// nodePoolStatusBody returns aro_hcp's status, or the reason of a 404.
func (s *Sim) nodePoolStatusBody(id, np string) (nodePoolStatusJSON, string) {
	return read(s, APIAROHCP, KindNodePool, id, np, func(x ref, now time.Time) nodePoolStatusJSON {
		st := nodePoolStatus(APIAROHCP, x, now)
		st.ID, st.HREF = np, nodePoolPath(APIAROHCP, id, np)+"/status"
		return st
	})
}

// nodePoolStatus is the status of node pool x as api serves it.
func nodePoolStatus(api string, x ref, now time.Time) nodePoolStatusJSON {
	state, since, _ := x.l.at(now)
	msg := x.l.script.Description
	if (state == StateError || state == "recoverable_error") && x.l.script.ErrorMessage != "" {
		msg = x.l.script.ErrorMessage
	}
	st := nodePoolStatusJSON{Kind: "NodePoolStatus", Message: msg}
	if state == StateReady || state == StateUpdating {
		st.CurrentReplicas = simReplicas
	}
	if api == APIAROHCP {
		st.State = &nodePoolStateJSON{Kind: "NodePoolState", Value: state, LastUpdatedTimestamp: since.UTC().Format(time.RFC3339)}
	}
	return st
}

// nodePoolHandler serves the node pool object under api. It is recorded in
// Calls under its path: opstatus reads a clusters_mgmt node pool's object
// for its operation.
func (s *Sim) nodePoolHandler(api, kind string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.beginCall(w, r, kind, r.URL.Path) {
			return
		}
		id, np := r.PathValue("id"), r.PathValue("np")
		body, reason := read(s, api, KindNodePool, id, np, func(x ref, now time.Time) nodePoolJSON {
			return nodePoolJSON{Kind: "NodePool", ID: np, HREF: nodePoolPath(api, id, np), Replicas: simReplicas,
				Status: nodePoolStatus(api, x, now)}
		})
		s.reply(w, r, body, reason, "node pool", "replicas", body.Status.CurrentReplicas)
	}
}

// Admin API.

type adminError struct {
	Error string `json:"error"`
}

// DeleteRequest is the optional body of an admin DELETE. Without
// Uninstalling, the resource's script decides.
type DeleteRequest struct {
	Uninstalling *Duration `json:"uninstalling,omitempty"`
}

// UpdateRequest is the optional body of an admin update. Without Updating,
// the resource's script decides.
type UpdateRequest struct {
	Updating *Duration `json:"updating,omitempty"`
}

// StateRequest is the body of POST /admin/state.
type StateRequest struct {
	Path  string `json:"path"`
	State string `json:"state"`
}

// ReadyAllResponse is the answer of POST /admin/ready-all.
type ReadyAllResponse struct {
	Changed int `json:"changed"`
}

const maxAdminBody = 1 << 20

// decodeBody decodes an optional JSON body over *v; unknown fields are
// refused so that typos do not pass silently.
func decodeBody(r *http.Request, v any) error {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxAdminBody+1))
	if err != nil {
		return fmt.Errorf("%w: reading body: %w", ErrInvalid, err)
	}
	if len(b) > maxAdminBody {
		return fmt.Errorf("%w: body larger than %d bytes", ErrInvalid, maxAdminBody)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: body: %w", ErrInvalid, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: body has data after the JSON value", ErrInvalid)
	}
	return nil
}

func writeAdmin(w http.ResponseWriter, status int, v any, err error) {
	switch {
	case err == nil:
		writeJSON(w, status, v)
	case errors.Is(err, ErrInvalid):
		writeJSON(w, http.StatusBadRequest, adminError{Error: err.Error()})
	case errors.Is(err, ErrNotFound):
		writeJSON(w, http.StatusNotFound, adminError{Error: err.Error()})
	case errors.Is(err, ErrConflict):
		writeJSON(w, http.StatusConflict, adminError{Error: err.Error()})
	default:
		writeJSON(w, http.StatusInternalServerError, adminError{Error: err.Error()})
	}
}

func (s *Sim) adminList(w http.ResponseWriter, _ *http.Request) {
	res := s.Resources()
	if res == nil {
		res = []Resource{}
	}
	writeJSON(w, http.StatusOK, res)
}

// decodeScript reads a PUT body over the defaults. A JSON array decoded
// over the defaults' checks would write the body's checks into their
// elements field by field, so the decode starts without them; they apply
// when the body has none.
func (s *Sim) decodeScript(r *http.Request) (Script, error) {
	sc := s.defaults
	sc.InflightChecks = nil
	if err := decodeBody(r, &sc); err != nil {
		return Script{}, err
	}
	if sc.InflightChecks == nil {
		sc.InflightChecks = s.defaults.InflightChecks // addCluster copies them
	}
	return sc, nil
}

// adminPut creates or replaces a resource of kind from a script read over
// the defaults.
func (s *Sim) adminPut(kind string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sc, err := s.decodeScript(r)
		if err != nil {
			writeAdmin(w, 0, nil, err)
			return
		}
		var v Resource
		if kind == KindCluster {
			v, err = s.addCluster(r.PathValue("id"), sc)
		} else {
			v, err = s.addChild(kind, r.PathValue("id"), r.PathValue("child"), sc)
		}
		writeAdmin(w, http.StatusOK, v, err)
	}
}

func (s *Sim) adminGet(kind string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		v, err := s.resource(kind, r.PathValue("id"), r.PathValue("child"))
		writeAdmin(w, http.StatusOK, v, err)
	}
}

// adminCall is an admin handler that decodes the optional body into a Req,
// calls do and answers what it returns with status.
func adminCall[Req, Resp any](status int, do func(r *http.Request, req Req) (Resp, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req Req
		if err := decodeBody(r, &req); err != nil {
			writeAdmin(w, 0, nil, err)
			return
		}
		v, err := do(r, req)
		writeAdmin(w, status, v, err)
	}
}

func (s *Sim) adminReadyAll(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, ReadyAllResponse{Changed: s.ReadyAll()})
}

func (s *Sim) adminStats(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.Stats())
}

func (s *Sim) adminResetStats(w http.ResponseWriter, _ *http.Request) {
	s.ResetStats()
	w.WriteHeader(http.StatusNoContent)
}

func (s *Sim) adminGetFaults(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.Faults())
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":"encoding response"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
