package clustersim

import (
	"net/http"
	"time"
)

// AddExternalAuth creates external auth ea of cluster clusterID, or
// replaces it and restarts its create lifecycle. The cluster must exist and
// not be deleting. External auths are served under aro_hcp/v1alpha1
// whenever their cluster is.
func (s *Sim) AddExternalAuth(clusterID, ea string, sc Script) error {
	_, err := s.addChild(KindExternalAuth, clusterID, ea, sc)
	return err
}

// DeleteExternalAuth starts deleting an external auth: uninstalling for the
// given duration, then 404.
func (s *Sim) DeleteExternalAuth(clusterID, ea string, uninstalling time.Duration) error {
	_, err := s.deleteResource(KindExternalAuth, clusterID, ea, &uninstalling)
	return err
}

// UpdateExternalAuth starts an update of a ready external auth: updating
// for the given duration, then ready.
func (s *Sim) UpdateExternalAuth(clusterID, ea string, updating time.Duration) error {
	_, err := s.updateResource(KindExternalAuth, clusterID, ea, &updating)
	return err
}

// ExternalAuth returns an external auth as it is now.
func (s *Sim) ExternalAuth(clusterID, ea string) (Resource, error) {
	return s.resource(KindExternalAuth, clusterID, ea)
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
	body, reason := s.externalAuthBody(r.PathValue("id"), r.PathValue("ea"), s.Faults())
	s.reply(w, r, body, reason, "external auth", "status", body.Status != nil)
}

// externalAuthBody returns the object, or the reason of a 404.
func (s *Sim) externalAuthBody(id, ea string, f Faults) (externalAuthJSON, string) {
	return read(s, APIAROHCP, KindExternalAuth, id, ea, func(x ref, now time.Time) externalAuthJSON {
		body := externalAuthJSON{Kind: "ExternalAuth", ID: ea, HREF: externalAuthPath(id, ea)}
		state, since, _ := x.l.at(now)
		switch {
		case f.ExternalAuthNoStatus:
			s.stats.fault(FaultExternalAuthNoStatus)
			return body
		case x.l.script.NoStatus || state == "":
			return body
		case f.UnknownState != "":
			s.stats.fault(FaultUnknownState)
			state = f.UnknownState
		}
		msg := x.l.script.Description
		if state == StateError && x.l.script.ErrorMessage != "" {
			msg = x.l.script.ErrorMessage
		}
		body.Status = &externalAuthStatusJSON{
			Message: msg,
			State:   &externalAuthStateJSON{LastUpdatedTimestamp: since.UTC().Format(time.RFC3339), Value: state},
		}
		return body
	})
}
