package clustersim

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"
)

// SimulatedKubeconfig is the kubeconfig an issued credential carries, as
// Cluster Service sends one: tests can look for it where it must never
// appear, such as logs.
const SimulatedKubeconfig = "apiVersion: v1\nkind: Config\n# clustersim break-glass kubeconfig: not a secret, never log it\n"

// Paging of the credential list, as OCM pages: pages count from 1.
const (
	defaultPageSize = 100
	// maxPageSize bounds what one page holds, so that a large size cannot
	// make the simulator build a huge answer; the answer's size says how
	// many items came.
	maxPageSize = 10000
)

// credential is one break-glass credential. Its status is a pure function
// of (script, phase, start, created, now), like a lifecycle's state.
type credential struct {
	lifecycle
	created time.Time
}

func (c *credential) expires() time.Time {
	d := c.script.ExpiresIn.D()
	if d == 0 {
		d = DefaultCredentialLifetime
	}
	return c.created.Add(d)
}

// at returns the status at now, when it began, and when the credential was
// revoked (zero unless revoked). A created or issued credential whose
// expiration has passed is expired; one whose status was set is not, so
// that tests can serve an issued credential past its expiration.
func (c *credential) at(now time.Time) (status string, since, revoked time.Time) {
	sc := c.script
	switch c.phase {
	case PhaseCreate:
		end := c.start.Add(sc.Issuing.D())
		switch {
		case now.Before(end):
			status, since = CredentialCreated, c.start
		case sc.Fail:
			return CredentialFailed, end, time.Time{}
		default:
			status, since = CredentialIssued, end
		}
		if exp := c.expires(); !now.Before(exp) {
			return CredentialExpired, exp, time.Time{}
		}
		return status, since, time.Time{}
	case PhaseRevoke:
		end := c.start.Add(sc.Revoking.D())
		switch {
		case now.Before(end):
			return CredentialAwaitingRevocation, c.start, time.Time{}
		case sc.RevokeFail:
			return CredentialFailed, end, time.Time{}
		default:
			return CredentialRevoked, end, end
		}
	default:
		if c.fixed == CredentialRevoked {
			return c.fixed, c.start, c.start
		}
		return c.fixed, c.start, time.Time{}
	}
}

// revoke starts the revocation of a created or issued credential; one
// already awaiting revocation keeps its start. It reports whether a
// revocation started.
func (c *credential) revoke(revoking *time.Duration, now time.Time) (bool, error) {
	status, _, _ := c.at(now)
	switch status {
	case CredentialAwaitingRevocation:
		return false, nil
	case CredentialCreated, CredentialIssued:
	default:
		return false, fmt.Errorf("%w: revocation needs status %q or %q, not %q", ErrConflict, CredentialCreated, CredentialIssued, status)
	}
	if revoking != nil {
		c.script.Revoking = Duration(*revoking)
	}
	c.begin(PhaseRevoke, now)
	return true, nil
}

// finish ends an issue (issued) or a revocation (revoked) at once, for
// ReadyAll, and reports whether it changed anything.
func (c *credential) finish(now time.Time) bool {
	var to string
	switch status, _, _ := c.at(now); status {
	case CredentialCreated:
		to = CredentialIssued
	case CredentialAwaitingRevocation:
		to = CredentialRevoked
	default:
		return false
	}
	c.set(to, now)
	return true
}

func (c *credential) username(id string) string {
	if c.script.Username != "" {
		return c.script.Username
	}
	return "break-glass-" + id
}

// AddCredential creates break-glass credential id of cluster clusterID, or
// replaces it as a new credential (created now). The cluster must exist and
// not be deleting. Credentials are served under clusters_mgmt/v1 whenever
// their cluster is, and stay listed once revoked, failed or expired.
func (s *Sim) AddCredential(clusterID, id string, sc Script) error {
	_, err := s.addChild(KindBreakGlassCredential, clusterID, id, sc)
	return err
}

// Credential returns a break-glass credential as it is now.
func (s *Sim) Credential(clusterID, id string) (Resource, error) {
	return s.resource(KindBreakGlassCredential, clusterID, id)
}

// RevokeCredential starts revoking one created or issued credential: it is
// awaiting_revocation for the given duration, then revoked (failed with the
// script's RevokeFail). Revoking a credential that is awaiting revocation
// changes nothing; any other status gives ErrConflict.
func (s *Sim) RevokeCredential(clusterID, id string, revoking time.Duration) error {
	_, err := s.revokeCredential(clusterID, id, &revoking)
	return err
}

func (s *Sim) revokeCredential(clusterID, id string, revoking *time.Duration) (Resource, error) {
	if revoking != nil && *revoking < 0 {
		return Resource{}, fmt.Errorf("%w: revoking is negative", ErrInvalid)
	}
	return lookup(s, KindBreakGlassCredential, clusterID, id, func(r ref, now time.Time) (Resource, error) {
		if _, err := r.cr.revoke(revoking, now); err != nil {
			return Resource{}, fmt.Errorf("%s: %w", r.name(), err)
		}
		s.log.Info("credential revoking", r.logArgs("revoking", r.cr.script.Revoking.D())...)
		return r.view(now), nil
	})
}

// RevokeCredentials revokes every created or issued credential of a
// cluster, as Cluster Service's revoke-all does: each is
// awaiting_revocation for the given duration, then revoked. Credentials
// awaiting revocation keep their start; revoked, failed and expired ones
// stay as they are. It returns how many revocations started.
func (s *Sim) RevokeCredentials(clusterID string, revoking time.Duration) (int, error) {
	r, err := s.revokeCredentials(clusterID, &revoking)
	return r.Revoking, err
}

func (s *Sim) revokeCredentials(clusterID string, revoking *time.Duration) (RevokeResponse, error) {
	if revoking != nil && *revoking < 0 {
		return RevokeResponse{}, fmt.Errorf("%w: revoking is negative", ErrInvalid)
	}
	return lookup(s, KindCluster, clusterID, "", func(r ref, now time.Time) (RevokeResponse, error) {
		out := RevokeResponse{Credentials: []Resource{}}
		for _, id := range sortedKeys(r.c.credentials) {
			cr := r.c.credentials[id]
			if started, err := cr.revoke(revoking, now); err == nil && started {
				out.Revoking++
			}
			out.Credentials = append(out.Credentials, credentialView(clusterID, id, r.c, cr, now))
		}
		s.log.Info("credentials revoking", "cluster", clusterID, "revoking", out.Revoking)
		return out, nil
	})
}

func credentialsPath(id string) string {
	return clustersMgmtPrefix + "/clusters/" + id + "/break_glass_credentials"
}

func credentialView(id, bgc string, c *cluster, cr *credential, now time.Time) Resource {
	status, since, revoked := cr.at(now)
	paths := []string{}
	if c.script.serves(APIClustersMgmt) {
		paths = append(paths, credentialsPath(id)+"/"+bgc)
	}
	v := Resource{Kind: KindBreakGlassCredential, ClusterID: id, CredentialID: bgc, Paths: paths, State: status,
		Since: since.UTC(), Phase: cr.phase, Script: cr.script.clone(),
		CreationTimestamp: servedTime(cr.created), ExpirationTimestamp: servedTime(cr.expires())}
	if !revoked.IsZero() {
		v.RevocationTimestamp = servedTime(revoked)
	}
	return v
}

// Wire shapes of break-glass credentials, as ocm-api-model v0.0.465 writes
// them.

type credentialJSON struct {
	Kind                string `json:"kind"`
	ID                  string `json:"id"`
	HREF                string `json:"href"`
	ExpirationTimestamp string `json:"expiration_timestamp,omitempty"`
	Kubeconfig          string `json:"kubeconfig,omitempty"`
	RevocationTimestamp string `json:"revocation_timestamp,omitempty"`
	Status              string `json:"status,omitempty"`
	Username            string `json:"username,omitempty"`
}

// credentialListJSON is one OCM page: Size is how many items it holds.
type credentialListJSON struct {
	Kind  string `json:"kind"`
	HREF  string `json:"href"`
	Page  int    `json:"page"`
	Size  int    `json:"size"`
	Total int    `json:"total"`
	// Items is left out when nil: EmptyCredentialPageNoItems.
	Items []credentialJSON `json:"items,omitzero"`
}

// credentialFaults is what the fault configuration does to credential
// bodies.
type credentialFaults struct {
	unknownState string
	noExpiration bool
}

func (f credentialFaults) apply(b credentialJSON) credentialJSON {
	if f.unknownState != "" {
		b.Status = f.unknownState
	}
	if f.noExpiration {
		b.ExpirationTimestamp = ""
	}
	return b
}

// credentialFaultsFor counts the faults that change this answer.
func (s *Sim) credentialFaultsFor(f Faults) credentialFaults {
	if f.UnknownState != "" {
		s.stats.fault(FaultUnknownState)
	}
	if f.CredentialNoExpiration {
		s.stats.fault(FaultCredentialNoExpiration)
	}
	return credentialFaults{unknownState: f.UnknownState, noExpiration: f.CredentialNoExpiration}
}

func credentialBody(id, bgc string, cr *credential, now time.Time) credentialJSON {
	status, _, revoked := cr.at(now)
	b := credentialJSON{
		Kind:                "BreakGlassCredential",
		ID:                  bgc,
		HREF:                credentialsPath(id) + "/" + bgc,
		ExpirationTimestamp: cr.expires().UTC().Format(time.RFC3339),
		Status:              status,
		Username:            cr.username(bgc),
	}
	if status == CredentialIssued {
		b.Kubeconfig = SimulatedKubeconfig
	}
	if !revoked.IsZero() {
		b.RevocationTimestamp = revoked.UTC().Format(time.RFC3339)
	}
	return b
}

func (s *Sim) credentialHandler(w http.ResponseWriter, r *http.Request) {
	if !s.beginCall(w, r, PathKindClustersMgmtCredential, r.URL.Path) {
		return
	}
	body, reason := s.credentialObject(r.PathValue("id"), r.PathValue("bgc"), s.Faults())
	s.reply(w, r, body, reason, "credential", "status", body.Status)
}

// credentialObject returns the credential, or the reason of a 404.
func (s *Sim) credentialObject(id, bgc string, f Faults) (credentialJSON, string) {
	return read(s, APIClustersMgmt, KindBreakGlassCredential, id, bgc, func(x ref, now time.Time) credentialJSON {
		return s.credentialFaultsFor(f).apply(credentialBody(id, bgc, x.cr, now))
	})
}

// parsePaging reads OCM's page and size query parameters.
func parsePaging(r *http.Request) (page, size int, err error) {
	page, size = 1, defaultPageSize
	q := r.URL.Query()
	for name, v := range map[string]*int{"page": &page, "size": &size} {
		raw := q.Get(name)
		if raw == "" {
			continue
		}
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 {
			return 0, 0, fmt.Errorf("parameter '%s' must be a positive integer, not '%s'", name, raw)
		}
		*v = n
	}
	return page, min(size, maxPageSize), nil
}

func (s *Sim) credentialListHandler(w http.ResponseWriter, r *http.Request) {
	if !s.beginCall(w, r, PathKindClustersMgmtCredentialList, r.URL.Path) {
		return
	}
	page, size, err := parsePaging(r)
	if err != nil {
		s.writeOCMError(w, http.StatusBadRequest, err.Error())
		return
	}
	body, reason := s.credentialList(r.PathValue("id"), page, size, s.Faults())
	s.reply(w, r, body, reason, "credential list", "page", page, "size", body.Size, "total", body.Total)
}

// credentialList returns one page of a cluster's credentials, sorted by
// ID, or the reason of a 404. With Faults.EndlessCredentialList every page
// is full and the total always promises another page; with
// Faults.EmptyCredentialPageNoItems an empty page has no items.
func (s *Sim) credentialList(id string, page, size int, f Faults) (credentialListJSON, string) {
	return read(s, APIClustersMgmt, KindCluster, id, "", func(x ref, now time.Time) credentialListJSON {
		cf := s.credentialFaultsFor(f)
		ids := sortedKeys(x.c.credentials)
		items := []credentialJSON{}
		if from := page - 1; from < (len(ids)+size-1)/size {
			for _, bgc := range ids[from*size : min(from*size+size, len(ids))] {
				items = append(items, cf.apply(credentialBody(id, bgc, x.c.credentials[bgc], now)))
			}
		}
		total := len(ids)
		if f.EndlessCredentialList {
			s.stats.fault(FaultEndlessCredentialList)
			for i := len(items); i < size; i++ {
				items = append(items, cf.apply(endlessFiller(id, page, i, now)))
			}
			total = math.MaxInt
			if page < math.MaxInt/size-1 {
				total = (page + 1) * size
			}
		}
		if len(items) == 0 && f.EmptyCredentialPageNoItems {
			s.stats.fault(FaultEmptyCredentialPageNoItems)
			items = nil
		}
		return credentialListJSON{Kind: "BreakGlassCredentialList", HREF: credentialsPath(id),
			Page: page, Size: len(items), Total: total, Items: items}
	})
}

// endlessFiller is an item of a list that never ends: revoked and
// unexpired, so that a reader that stops early and calls the revocation
// done is caught.
func endlessFiller(id string, page, i int, now time.Time) credentialJSON {
	bgc := fmt.Sprintf("endless-%d-%d", page, i)
	return credentialJSON{
		Kind:                "BreakGlassCredential",
		ID:                  bgc,
		HREF:                credentialsPath(id) + "/" + bgc,
		ExpirationTimestamp: now.Add(DefaultCredentialLifetime).UTC().Format(time.RFC3339),
		RevocationTimestamp: now.UTC().Format(time.RFC3339),
		Status:              CredentialRevoked,
		Username:            bgc,
	}
}

// RevokeRequest is the optional body of an admin revocation. Without
// Revoking, each credential's script decides.
type RevokeRequest struct {
	Revoking *Duration `json:"revoking,omitempty"`
}

// RevokeResponse is the answer of a cluster's revoke-all: how many
// revocations started, and every credential of the cluster afterwards.
type RevokeResponse struct {
	Revoking    int        `json:"revoking"`
	Credentials []Resource `json:"credentials"`
}
