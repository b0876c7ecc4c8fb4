package clusterservice

import (
	"errors"
	"fmt"
	"strings"
)

// Kind says which kind of Cluster Service object an internal ID names: it
// decides which call reads the object's state.
type Kind int

// Kinds of Cluster Service objects. The zero value is deliberately invalid so
// that an InternalID that was never parsed is not mistaken for a cluster.
const (
	KindCluster Kind = iota + 1
	KindNodePool
	KindExternalAuth
	KindBreakGlassCredential
)

// String returns "cluster", "nodePool", "externalAuth" or
// "breakGlassCredential": the names scan's metrics use.
func (k Kind) String() string {
	switch k {
	case KindCluster:
		return "cluster"
	case KindNodePool:
		return "nodePool"
	case KindExternalAuth:
		return "externalAuth"
	case KindBreakGlassCredential:
		return "breakGlassCredential"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// APIs that an internal ID can belong to.
const (
	APIClustersMgmtV1 = "clusters_mgmt/v1"
	APIAroHCPV1alpha1 = "aro_hcp/v1alpha1"
)

// MaxIDLength bounds the length of each identifier in an internal ID.
// Cluster Service identifiers are 32 characters and node pool names at most
// 15; the bound leaves room without letting arbitrary data into a URL.
const MaxIDLength = 64

// maxInputLength bounds the whole path: the longest form with two
// identifiers of MaxIDLength. Anything longer cannot be valid.
const maxInputLength = len("/api/aro_hcp/v1alpha1/clusters//external_auth_config/external_auths/") + 2*MaxIDLength

// InternalID is a parsed Cluster Service path, the `internalId` of an
// operation or resource item.
type InternalID struct {
	// Path is the path exactly as accepted, e.g. /api/aro_hcp/v1alpha1/clusters/abc.
	Path string
	// Kind is KindCluster, KindNodePool, KindExternalAuth or
	// KindBreakGlassCredential.
	Kind Kind
	// API is APIClustersMgmtV1 or APIAroHCPV1alpha1.
	API string
	// ClusterID is the cluster identifier, of the cluster itself or of the
	// cluster the object belongs to.
	ClusterID string
	// NodePoolID is the node pool identifier, empty for other kinds.
	NodePoolID string
	// ExternalAuthID is the external auth identifier, empty for other kinds.
	ExternalAuthID string
	// CredentialID is the break-glass credential identifier, empty for other
	// kinds.
	CredentialID string
}

// String returns the path.
func (id InternalID) String() string { return id.Path }

// render builds the path from the parsed fields. ParseInternalID accepts a
// path only when it equals the rendering of what it parsed, so the fields
// (which the client hands to ocm-sdk-go) and Path can never disagree.
func (id InternalID) render() string {
	p := "/api/" + id.API + "/clusters/" + id.ClusterID
	switch id.Kind {
	case KindNodePool:
		p += "/node_pools/" + id.NodePoolID
	case KindExternalAuth:
		p += "/external_auth_config/external_auths/" + id.ExternalAuthID
	case KindBreakGlassCredential:
		p += "/break_glass_credentials/" + id.CredentialID
	}
	return p
}

// InAPI returns the internal ID of the same object under api. Cluster
// Service serves a cluster, and a node pool, as one object under both APIs
// with the same identifiers; other kinds live in one API only and are
// refused.
func (id InternalID) InAPI(api string) (InternalID, error) {
	if id.Kind != KindCluster && id.Kind != KindNodePool {
		return InternalID{}, fmt.Errorf("%w %s: a %s has no other API's form", errInvalidInternalID, quote(id.Path), id.Kind)
	}
	other := id
	other.API = api
	// Parsed again: only an accepted form comes out, its Path and fields
	// agreeing.
	return ParseInternalID(other.render())
}

// errInvalidInternalID is wrapped by every ParseInternalID error.
var errInvalidInternalID = errors.New("invalid Cluster Service internal ID")

// ParseInternalID accepts exactly these paths:
//
//	/api/clusters_mgmt/v1/clusters/{id}
//	/api/aro_hcp/v1alpha1/clusters/{id}
//	/api/aro_hcp/v1alpha1/clusters/{id}/node_pools/{np}
//	/api/clusters_mgmt/v1/clusters/{id}/node_pools/{np}
//	/api/aro_hcp/v1alpha1/clusters/{id}/external_auth_config/external_auths/{ea}
//	/api/clusters_mgmt/v1/clusters/{id}/break_glass_credentials/{bgc}
//
// where each identifier is 1 to MaxIDLength letters, digits, '-' or '_'.
// Everything else is rejected with an error saying what is wrong: URLs,
// relative paths, '.' and '..' segments, percent-encoding, query strings,
// fragments, empty segments, trailing slashes, control and non-ASCII
// characters. ocm-sdk-go sends a path as given, so this is what keeps the
// client on the Cluster Service paths it is meant to read.
func ParseInternalID(s string) (InternalID, error) {
	if err := checkSyntax(s); err != nil {
		return InternalID{}, fmt.Errorf("%w %s: %s", errInvalidInternalID, quote(s), err)
	}
	id, err := parseSegments(strings.Split(s[1:], "/"))
	if err != nil {
		return InternalID{}, fmt.Errorf("%w %s: %s", errInvalidInternalID, quote(s), err)
	}
	id.Path = s
	if id.render() != s { // cannot happen after the checks above; kept as the last guard
		return InternalID{}, fmt.Errorf("%w %s: does not re-render to itself", errInvalidInternalID, quote(s))
	}
	return id, nil
}

// checkSyntax rejects everything that is not a plain absolute ASCII path.
func checkSyntax(s string) error {
	switch {
	case s == "":
		return errors.New("empty")
	case len(s) > maxInputLength:
		return fmt.Errorf("longer than %d characters", maxInputLength)
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c == 0x7f:
			return fmt.Errorf("control character at offset %d", i)
		case c >= 0x80:
			return fmt.Errorf("non-ASCII character at offset %d", i)
		case c == '%':
			return errors.New("percent-encoding is not allowed")
		case c == '?':
			return errors.New("query strings are not allowed")
		case c == '#':
			return errors.New("fragments are not allowed")
		case c == '\\':
			return errors.New("backslashes are not allowed")
		}
	}
	switch {
	case strings.Contains(s, "://"):
		return errors.New("must be a path, not a URL")
	case s[0] != '/':
		return errors.New("must be an absolute path starting with /api/")
	case strings.HasPrefix(s, "//"):
		return errors.New("must be a path, not a network-path reference (//host)")
	case strings.HasSuffix(s, "/"):
		return errors.New("trailing slash")
	case strings.Contains(s, "//"):
		return errors.New("empty path segment")
	}
	return nil
}

// parseSegments matches the segments after the leading slash against the
// known shapes. Clusters and node pools have both forms (ARO-HCP's 2024-10
// frontend wrote node pools under clusters_mgmt); external auths and
// break-glass credentials live in one API only, the one whose ocm-sdk-go
// client reads them.
func parseSegments(seg []string) (InternalID, error) {
	for _, sg := range seg {
		if sg == "." || sg == ".." {
			return InternalID{}, errors.New("'.' and '..' segments are not allowed")
		}
	}
	cm := len(seg) >= 5 && seg[0] == "api" && seg[1] == "clusters_mgmt" && seg[2] == "v1" && seg[3] == "clusters"
	hcp := len(seg) >= 5 && seg[0] == "api" && seg[1] == "aro_hcp" && seg[2] == "v1alpha1" && seg[3] == "clusters"
	var id InternalID
	var child struct{ what, value string }
	switch {
	case cm && len(seg) == 5:
		id = InternalID{Kind: KindCluster, API: APIClustersMgmtV1, ClusterID: seg[4]}
	case hcp && len(seg) == 5:
		id = InternalID{Kind: KindCluster, API: APIAroHCPV1alpha1, ClusterID: seg[4]}
	case hcp && len(seg) == 7 && seg[5] == "node_pools":
		id = InternalID{Kind: KindNodePool, API: APIAroHCPV1alpha1, ClusterID: seg[4], NodePoolID: seg[6]}
		child.what, child.value = "node pool ID", seg[6]
	case cm && len(seg) == 7 && seg[5] == "node_pools":
		id = InternalID{Kind: KindNodePool, API: APIClustersMgmtV1, ClusterID: seg[4], NodePoolID: seg[6]}
		child.what, child.value = "node pool ID", seg[6]
	case hcp && len(seg) == 8 && seg[5] == "external_auth_config" && seg[6] == "external_auths":
		id = InternalID{Kind: KindExternalAuth, API: APIAroHCPV1alpha1, ClusterID: seg[4], ExternalAuthID: seg[7]}
		child.what, child.value = "external auth ID", seg[7]
	case cm && len(seg) == 7 && seg[5] == "break_glass_credentials":
		id = InternalID{Kind: KindBreakGlassCredential, API: APIClustersMgmtV1, ClusterID: seg[4], CredentialID: seg[6]}
		child.what, child.value = "break-glass credential ID", seg[6]
	default:
		return InternalID{}, errors.New("not a known Cluster Service path; want " +
			"/api/clusters_mgmt/v1/clusters/{id}, /api/aro_hcp/v1alpha1/clusters/{id}, " +
			"/api/aro_hcp/v1alpha1/clusters/{id}/node_pools/{np}, " +
			"/api/clusters_mgmt/v1/clusters/{id}/node_pools/{np}, " +
			"/api/aro_hcp/v1alpha1/clusters/{id}/external_auth_config/external_auths/{ea} " +
			"or /api/clusters_mgmt/v1/clusters/{id}/break_glass_credentials/{bgc}")
	}
	if err := checkIdentifier("cluster ID", id.ClusterID); err != nil {
		return InternalID{}, err
	}
	if child.what != "" {
		if err := checkIdentifier(child.what, child.value); err != nil {
			return InternalID{}, err
		}
	}
	return id, nil
}

// checkIdentifier allows letters, digits, '-' and '_', 1 to MaxIDLength long.
func checkIdentifier(what, v string) error {
	if v == "" || len(v) > MaxIDLength {
		return fmt.Errorf("%s must be 1 to %d characters long", what, MaxIDLength)
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("%s contains %q; only letters, digits, '-' and '_' are allowed", what, c)
		}
	}
	return nil
}

// quote renders untrusted input for an error message, bounded in length.
func quote(s string) string {
	const limit = 256
	if len(s) > limit {
		return fmt.Sprintf("%q...", s[:limit])
	}
	return fmt.Sprintf("%q", s)
}
