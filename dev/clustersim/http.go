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
	admin.HandleFunc("PUT /admin/clusters/{id}", s.adminPutCluster)
	admin.HandleFunc("GET /admin/clusters/{id}", s.adminGetCluster)
	admin.HandleFunc("DELETE /admin/clusters/{id}", s.adminDeleteCluster)
	admin.HandleFunc("POST /admin/clusters/{id}/update", s.adminUpdateCluster)
	admin.HandleFunc("PUT /admin/clusters/{id}/node_pools/{np}", s.adminPutNodePool)
	admin.HandleFunc("GET /admin/clusters/{id}/node_pools/{np}", s.adminGetNodePool)
	admin.HandleFunc("DELETE /admin/clusters/{id}/node_pools/{np}", s.adminDeleteNodePool)
	admin.HandleFunc("POST /admin/clusters/{id}/node_pools/{np}/update", s.adminUpdateNodePool)
	admin.HandleFunc("PUT /admin/clusters/{id}/external_auths/{ea}", s.adminPutExternalAuth)
	admin.HandleFunc("GET /admin/clusters/{id}/external_auths/{ea}", s.adminGetExternalAuth)
	admin.HandleFunc("DELETE /admin/clusters/{id}/external_auths/{ea}", s.adminDeleteExternalAuth)
	admin.HandleFunc("POST /admin/clusters/{id}/external_auths/{ea}/update", s.adminUpdateExternalAuth)
	admin.HandleFunc("PUT /admin/clusters/{id}/break_glass_credentials/{bgc}", s.adminPutCredential)
	admin.HandleFunc("GET /admin/clusters/{id}/break_glass_credentials/{bgc}", s.adminGetCredential)
	admin.HandleFunc("POST /admin/clusters/{id}/break_glass_credentials/{bgc}/revoke", s.adminRevokeCredential)
	admin.HandleFunc("POST /admin/clusters/{id}/break_glass_credentials/revoke", s.adminRevokeCredentials)
	admin.HandleFunc("POST /admin/ready-all", s.adminReadyAll)
	admin.HandleFunc("POST /admin/state", s.adminSetState)
	admin.HandleFunc("GET /admin/stats", s.adminStats)
	admin.HandleFunc("DELETE /admin/stats", s.adminResetStats)
	admin.HandleFunc("GET /admin/faults", s.adminGetFaults)
	admin.HandleFunc("PUT /admin/faults", s.adminPutFaults)

	mux := http.NewServeMux()
	mux.Handle("/admin/", loopbackOnly(admin))
	mux.HandleFunc("/api/clusters_mgmt/v1/clusters/{id}", s.clusterHandler(APIClustersMgmt, PathKindClustersMgmtClusterObject))
	mux.HandleFunc("/api/aro_hcp/v1alpha1/clusters/{id}", s.clusterHandler(APIAROHCP, PathKindAROHCPClusterObject))
	mux.HandleFunc("/api/clusters_mgmt/v1/clusters/{id}/status", s.clusterStatusHandler(APIClustersMgmt, PathKindClustersMgmtCluster))
	mux.HandleFunc("/api/aro_hcp/v1alpha1/clusters/{id}/status", s.clusterStatusHandler(APIAROHCP, PathKindAROHCPCluster))
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

type nodePoolStatusJSON struct {
	Kind    string            `json:"kind"`
	ID      string            `json:"id"`
	HREF    string            `json:"href"`
	State   nodePoolStateJSON `json:"state"`
	Message string            `json:"message,omitempty"`
}

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

func (s *Sim) clusterStatusHandler(api, kind string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.beginStatusCall(w, r, kind) {
			return
		}
		id := r.PathValue("id")
		body, ok := s.clusterStatus(api, id)
		if !ok {
			s.writeOCMError(w, http.StatusNotFound, fmt.Sprintf("Cluster '%s' not found", id))
			return
		}
		s.log.Debug("cluster status", "path", r.URL.Path, "state", body.State)
		s.writeStatus(w, http.StatusOK, body)
	}
}

func (s *Sim) clusterStatus(api, id string) (clusterStatusJSON, bool) {
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.getCluster(id, now)
	if c == nil || !c.script.serves(api) {
		return clusterStatusJSON{}, false
	}
	state, _, _ := c.at(now)
	body := clusterStatusJSON{
		Kind:        "ClusterStatus",
		ID:          id,
		HREF:        clusterPath(api, id) + "/status",
		State:       state,
		Description: c.script.Description,
	}
	if state == StateError {
		body.ProvisionErrorCode = c.script.ErrorCode
		body.ProvisionErrorMessage = c.script.ErrorMessage
	}
	return body, true
}

// clusterHandler serves the cluster object, which opstatus reads for
// billing. It is not recorded in Calls, which counts the calls that read an
// operation's status.
func (s *Sim) clusterHandler(api, kind string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.beginCall(w, r, kind, "") {
			return
		}
		id := r.PathValue("id")
		body, ok := s.clusterObject(api, id)
		if !ok {
			s.writeOCMError(w, http.StatusNotFound, fmt.Sprintf("Cluster '%s' not found", id))
			return
		}
		s.log.Debug("cluster", "path", r.URL.Path, "state", body.State)
		s.writeStatus(w, http.StatusOK, body)
	}
}

func (s *Sim) clusterObject(api, id string) (clusterJSON, bool) {
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.getCluster(id, now)
	if c == nil || !c.script.serves(api) {
		return clusterJSON{}, false
	}
	state, _, _ := c.at(now)
	return clusterJSON{
		Kind:              "Cluster",
		ID:                id,
		HREF:              clusterPath(api, id),
		Azure:             clusterAzureJSON{ManagedResourceGroupName: c.managedResourceGroup(id)},
		CreationTimestamp: c.created.UTC().Format(time.RFC3339),
		State:             state,
	}, true
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
		id := r.PathValue("id")
		body, ok := s.inflightChecks(api, id)
		if !ok {
			s.writeOCMError(w, http.StatusNotFound, fmt.Sprintf("Cluster '%s' not found", id))
			return
		}
		s.log.Debug("inflight checks", "path", r.URL.Path, "checks", body.Total)
		s.writeStatus(w, http.StatusOK, body)
	}
}

func (s *Sim) inflightChecks(api, id string) (inflightCheckListJSON, bool) {
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.getCluster(id, now)
	if c == nil || !c.script.serves(api) {
		return inflightCheckListJSON{}, false
	}
	href := clusterPath(api, id) + "/inflight_checks"
	items := make([]inflightCheckJSON, 0, len(c.script.InflightChecks))
	for i, check := range c.script.InflightChecks {
		checkID := check.ID
		if checkID == "" {
			checkID = strconv.Itoa(i + 1)
		}
		items = append(items, inflightCheckJSON{
			Kind: "InflightCheck", ID: checkID, HREF: href + "/" + checkID,
			Name: check.Name, State: check.State, Details: check.Details,
		})
	}
	return inflightCheckListJSON{Kind: "InflightCheckList", HREF: href, Page: 1, Size: len(items), Total: len(items), Items: items}, true
}

func (s *Sim) nodePoolStatus(w http.ResponseWriter, r *http.Request) {
	if !s.beginStatusCall(w, r, PathKindAROHCPNodePool) {
		return
	}
	id, np := r.PathValue("id"), r.PathValue("np")
	body, reason := s.nodePoolStatusBody(id, np)
	if reason != "" {
		s.writeOCMError(w, http.StatusNotFound, reason)
		return
	}
	s.log.Debug("node pool status", "path", r.URL.Path, "state", body.State.Value)
	s.writeStatus(w, http.StatusOK, body)
}

// nodePoolStatusBody returns the status, or the reason of a 404.
func (s *Sim) nodePoolStatusBody(id, np string) (nodePoolStatusJSON, string) {
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.getCluster(id, now)
	if c == nil || !c.script.serves(APIAROHCP) {
		return nodePoolStatusJSON{}, fmt.Sprintf("Cluster '%s' not found", id)
	}
	_, l, err := s.getNodePool(id, np, now)
	if err != nil {
		return nodePoolStatusJSON{}, fmt.Sprintf("Node pool '%s' not found", np)
	}
	state, since, _ := l.at(now)
	msg := l.script.Description
	if (state == StateError || state == "recoverable_error") && l.script.ErrorMessage != "" {
		msg = l.script.ErrorMessage
	}
	return nodePoolStatusJSON{
		Kind: "NodePoolStatus",
		ID:   np,
		HREF: nodePoolPath(id, np) + "/status",
		State: nodePoolStateJSON{
			Kind:                 "NodePoolState",
			Value:                state,
			LastUpdatedTimestamp: since.UTC().Format(time.RFC3339),
		},
		Message: msg,
	}, ""
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

func (s *Sim) adminPutCluster(w http.ResponseWriter, r *http.Request) {
	sc, err := s.decodeScript(r)
	if err != nil {
		writeAdmin(w, 0, nil, err)
		return
	}
	v, err := s.addCluster(r.PathValue("id"), sc)
	writeAdmin(w, http.StatusOK, v, err)
}

func (s *Sim) adminGetCluster(w http.ResponseWriter, r *http.Request) {
	v, err := s.Cluster(r.PathValue("id"))
	writeAdmin(w, http.StatusOK, v, err)
}

func (s *Sim) adminDeleteCluster(w http.ResponseWriter, r *http.Request) {
	var req DeleteRequest
	if err := decodeBody(r, &req); err != nil {
		writeAdmin(w, 0, nil, err)
		return
	}
	v, err := s.deleteCluster(r.PathValue("id"), (*time.Duration)(req.Uninstalling))
	writeAdmin(w, http.StatusAccepted, v, err)
}

func (s *Sim) adminUpdateCluster(w http.ResponseWriter, r *http.Request) {
	var req UpdateRequest
	if err := decodeBody(r, &req); err != nil {
		writeAdmin(w, 0, nil, err)
		return
	}
	v, err := s.updateCluster(r.PathValue("id"), (*time.Duration)(req.Updating))
	writeAdmin(w, http.StatusAccepted, v, err)
}

func (s *Sim) adminPutNodePool(w http.ResponseWriter, r *http.Request) {
	sc, err := s.decodeScript(r)
	if err != nil {
		writeAdmin(w, 0, nil, err)
		return
	}
	v, err := s.addNodePool(r.PathValue("id"), r.PathValue("np"), sc)
	writeAdmin(w, http.StatusOK, v, err)
}

func (s *Sim) adminGetNodePool(w http.ResponseWriter, r *http.Request) {
	v, err := s.NodePool(r.PathValue("id"), r.PathValue("np"))
	writeAdmin(w, http.StatusOK, v, err)
}

func (s *Sim) adminDeleteNodePool(w http.ResponseWriter, r *http.Request) {
	var req DeleteRequest
	if err := decodeBody(r, &req); err != nil {
		writeAdmin(w, 0, nil, err)
		return
	}
	v, err := s.deleteNodePool(r.PathValue("id"), r.PathValue("np"), (*time.Duration)(req.Uninstalling))
	writeAdmin(w, http.StatusAccepted, v, err)
}

func (s *Sim) adminUpdateNodePool(w http.ResponseWriter, r *http.Request) {
	var req UpdateRequest
	if err := decodeBody(r, &req); err != nil {
		writeAdmin(w, 0, nil, err)
		return
	}
	v, err := s.updateNodePool(r.PathValue("id"), r.PathValue("np"), (*time.Duration)(req.Updating))
	writeAdmin(w, http.StatusAccepted, v, err)
}

func (s *Sim) adminReadyAll(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, ReadyAllResponse{Changed: s.ReadyAll()})
}

func (s *Sim) adminSetState(w http.ResponseWriter, r *http.Request) {
	var req StateRequest
	if err := decodeBody(r, &req); err != nil {
		writeAdmin(w, 0, nil, err)
		return
	}
	v, err := s.setState(req.Path, req.State)
	writeAdmin(w, http.StatusOK, v, err)
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

func (s *Sim) adminPutFaults(w http.ResponseWriter, r *http.Request) {
	var f Faults
	if err := decodeBody(r, &f); err != nil {
		writeAdmin(w, 0, nil, err)
		return
	}
	err := s.SetFaults(f)
	writeAdmin(w, http.StatusOK, f, err)
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
