package clustersim

import (
	"fmt"
	"net/http"
	"time"
)

// AddExternalAuth creates external auth ea of cluster clusterID, or
// replaces it and restarts its create lifecycle. The cluster must exist and
// not be deleting. External auths are served under aro_hcp/v1alpha1
// whenever their cluster is.
func (s *Sim) AddExternalAuth(clusterID, ea string, sc Script) error {
	_, err := s.addExternalAuth(clusterID, ea, sc)
	return err
}

func (s *Sim) addExternalAuth(clusterID, ea string, sc Script) (Resource, error) {
	if err := validID(clusterID); err != nil {
		return Resource{}, err
	}
	if err := validID(ea); err != nil {
		return Resource{}, err
	}
	if err := sc.validate(); err != nil {
		return Resource{}, err
	}
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.liveCluster(clusterID, now)
	if err != nil {
		return Resource{}, err
	}
	l := &lifecycle{script: sc.clone(), phase: PhaseCreate, start: now}
	c.externalAuths[ea] = l
	s.log.Info("external auth created", "cluster", clusterID, "externalAuth", ea)
	return externalAuthView(clusterID, ea, c, l, now), nil
}

// DeleteExternalAuth starts deleting an external auth: uninstalling for the
// given duration, then 404.
func (s *Sim) DeleteExternalAuth(clusterID, ea string, uninstalling time.Duration) error {
	_, err := s.deleteExternalAuth(clusterID, ea, &uninstalling)
	return err
}

func (s *Sim) deleteExternalAuth(clusterID, ea string, uninstalling *time.Duration) (Resource, error) {
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	c, l, err := s.getExternalAuth(clusterID, ea, now)
	if err != nil {
		return Resource{}, err
	}
	if err := startDelete(l, uninstalling, now); err != nil {
		return Resource{}, err
	}
	v := externalAuthView(clusterID, ea, c, l, now)
	if v.Deleted {
		delete(c.externalAuths, ea)
	}
	s.log.Info("external auth deleting", "cluster", clusterID, "externalAuth", ea, "uninstalling", l.script.Uninstalling.D())
	return v, nil
}

// UpdateExternalAuth starts an update of a ready external auth: updating
// for the given duration, then ready.
func (s *Sim) UpdateExternalAuth(clusterID, ea string, updating time.Duration) error {
	_, err := s.updateExternalAuth(clusterID, ea, &updating)
	return err
}

func (s *Sim) updateExternalAuth(clusterID, ea string, updating *time.Duration) (Resource, error) {
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	c, l, err := s.getExternalAuth(clusterID, ea, now)
	if err != nil {
		return Resource{}, err
	}
	if err := startUpdate(l, updating, now); err != nil {
		return Resource{}, fmt.Errorf("external auth %q of cluster %q: %w", ea, clusterID, err)
	}
	s.log.Info("external auth updating", "cluster", clusterID, "externalAuth", ea, "updating", l.script.Updating.D())
	return externalAuthView(clusterID, ea, c, l, now), nil
}

// ExternalAuth returns an external auth as it is now.
func (s *Sim) ExternalAuth(clusterID, ea string) (Resource, error) {
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	c, l, err := s.getExternalAuth(clusterID, ea, now)
	if err != nil {
		return Resource{}, err
	}
	return externalAuthView(clusterID, ea, c, l, now), nil
}

// getExternalAuth returns a live external auth and its live cluster. s.mu
// must be held.
func (s *Sim) getExternalAuth(clusterID, ea string, now time.Time) (*cluster, *lifecycle, error) {
	c := s.getCluster(clusterID, now)
	if c == nil {
		return nil, nil, fmt.Errorf("cluster %q: %w", clusterID, ErrNotFound)
	}
	l := c.externalAuths[ea]
	if l == nil {
		return nil, nil, fmt.Errorf("external auth %q of cluster %q: %w", ea, clusterID, ErrNotFound)
	}
	if _, _, gone := l.at(now); gone {
		delete(c.externalAuths, ea)
		return nil, nil, fmt.Errorf("external auth %q of cluster %q: %w", ea, clusterID, ErrNotFound)
	}
	return c, l, nil
}

func externalAuthPath(id, ea string) string {
	return aroHCPPrefix + "/clusters/" + id + "/external_auth_config/external_auths/" + ea
}

func externalAuthView(id, ea string, c *cluster, l *lifecycle, now time.Time) Resource {
	state, since, gone := l.at(now)
	if l.script.NoStatus {
		state = ""
	}
	paths := []string{}
	if c.script.serves(APIAROHCP) {
		paths = append(paths, externalAuthPath(id, ea))
	}
	return Resource{Kind: KindExternalAuth, ClusterID: id, ExternalAuthID: ea, Paths: paths, State: state,
		Since: since.UTC(), Phase: l.phase, Deleted: gone, Script: l.script.clone()}
}

// Wire shapes of an external auth, as ocm-api-model v0.0.465 writes them:
// the object carries its status; there is no /status path.

type externalAuthJSON struct {
	Kind   string                  `json:"kind"`
	ID     string                  `json:"id"`
	HREF   string                  `json:"href"`
	Status *externalAuthStatusJSON `json:"status,omitempty"`
}

type externalAuthStatusJSON struct {
	Message string                 `json:"message,omitempty"`
	State   *externalAuthStateJSON `json:"state,omitempty"`
}

type externalAuthStateJSON struct {
	LastUpdatedTimestamp string `json:"last_updated_timestamp"`
	Value                string `json:"value"`
}

func (s *Sim) externalAuthHandler(w http.ResponseWriter, r *http.Request) {
	if !s.beginCall(w, r, PathKindAROHCPExternalAuth, r.URL.Path) {
		return
	}
	id, ea := r.PathValue("id"), r.PathValue("ea")
	body, reason := s.externalAuthBody(id, ea, s.Faults())
	if reason != "" {
		s.writeOCMError(w, http.StatusNotFound, reason)
		return
	}
	s.log.Debug("external auth", "path", r.URL.Path, "status", body.Status != nil)
	s.writeStatus(w, http.StatusOK, body)
}

// externalAuthBody returns the object, or the reason of a 404.
func (s *Sim) externalAuthBody(id, ea string, f Faults) (externalAuthJSON, string) {
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.getCluster(id, now)
	if c == nil || !c.script.serves(APIAROHCP) {
		return externalAuthJSON{}, fmt.Sprintf("Cluster '%s' not found", id)
	}
	_, l, err := s.getExternalAuth(id, ea, now)
	if err != nil {
		return externalAuthJSON{}, fmt.Sprintf("External auth '%s' not found", ea)
	}
	body := externalAuthJSON{Kind: "ExternalAuth", ID: ea, HREF: externalAuthPath(id, ea)}
	state, since, _ := l.at(now)
	switch {
	case f.ExternalAuthNoStatus:
		s.stats.fault(FaultExternalAuthNoStatus)
		return body, ""
	case l.script.NoStatus || state == "":
		return body, ""
	case f.UnknownState != "":
		s.stats.fault(FaultUnknownState)
		state = f.UnknownState
	}
	msg := l.script.Description
	if state == StateError && l.script.ErrorMessage != "" {
		msg = l.script.ErrorMessage
	}
	body.Status = &externalAuthStatusJSON{
		Message: msg,
		State:   &externalAuthStateJSON{LastUpdatedTimestamp: since.UTC().Format(time.RFC3339), Value: state},
	}
	return body, ""
}

func (s *Sim) adminPutExternalAuth(w http.ResponseWriter, r *http.Request) {
	sc, err := s.decodeScript(r)
	if err != nil {
		writeAdmin(w, 0, nil, err)
		return
	}
	id, ea := r.PathValue("id"), r.PathValue("ea")
	v, err := s.addExternalAuth(id, ea, sc)
	writeAdmin(w, http.StatusOK, v, err)
}

func (s *Sim) adminGetExternalAuth(w http.ResponseWriter, r *http.Request) {
	id, ea := r.PathValue("id"), r.PathValue("ea")
	v, err := s.ExternalAuth(id, ea)
	writeAdmin(w, http.StatusOK, v, err)
}

func (s *Sim) adminDeleteExternalAuth(w http.ResponseWriter, r *http.Request) {
	var req DeleteRequest
	if err := decodeBody(r, &req); err != nil {
		writeAdmin(w, 0, nil, err)
		return
	}
	id, ea := r.PathValue("id"), r.PathValue("ea")
	v, err := s.deleteExternalAuth(id, ea, (*time.Duration)(req.Uninstalling))
	writeAdmin(w, http.StatusAccepted, v, err)
}

func (s *Sim) adminUpdateExternalAuth(w http.ResponseWriter, r *http.Request) {
	var req UpdateRequest
	if err := decodeBody(r, &req); err != nil {
		writeAdmin(w, 0, nil, err)
		return
	}
	id, ea := r.PathValue("id"), r.PathValue("ea")
	v, err := s.updateExternalAuth(id, ea, (*time.Duration)(req.Updating))
	writeAdmin(w, http.StatusAccepted, v, err)
}
