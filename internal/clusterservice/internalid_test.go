package clusterservice

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseInternalIDAccepted(t *testing.T) {
	long := strings.Repeat("a", MaxIDLength)
	for _, tc := range []struct {
		in   string
		want InternalID
	}{
		{"/api/clusters_mgmt/v1/clusters/2a3b4c5d6e7f8g9h0i1j2k3l4m5n6o7p",
			InternalID{Kind: KindCluster, API: APIClustersMgmtV1, ClusterID: "2a3b4c5d6e7f8g9h0i1j2k3l4m5n6o7p"}},
		{"/api/aro_hcp/v1alpha1/clusters/abc",
			InternalID{Kind: KindCluster, API: APIAroHCPV1alpha1, ClusterID: "abc"}},
		{"/api/aro_hcp/v1alpha1/clusters/abc/node_pools/np-1_X",
			InternalID{Kind: KindNodePool, API: APIAroHCPV1alpha1, ClusterID: "abc", NodePoolID: "np-1_X"}},
		{"/api/aro_hcp/v1alpha1/clusters/" + long + "/node_pools/" + long,
			InternalID{Kind: KindNodePool, API: APIAroHCPV1alpha1, ClusterID: long, NodePoolID: long}},
		// The form ARO-HCP's 2024-10 frontend wrote.
		{"/api/clusters_mgmt/v1/clusters/abc/node_pools/np-1_X",
			InternalID{Kind: KindNodePool, API: APIClustersMgmtV1, ClusterID: "abc", NodePoolID: "np-1_X"}},
		{"/api/clusters_mgmt/v1/clusters/" + long + "/node_pools/" + long,
			InternalID{Kind: KindNodePool, API: APIClustersMgmtV1, ClusterID: long, NodePoolID: long}},
		{"/api/clusters_mgmt/v1/clusters/-", InternalID{Kind: KindCluster, API: APIClustersMgmtV1, ClusterID: "-"}},
		{"/api/aro_hcp/v1alpha1/clusters/abc/external_auth_config/external_auths/ea-1_X",
			InternalID{Kind: KindExternalAuth, API: APIAroHCPV1alpha1, ClusterID: "abc", ExternalAuthID: "ea-1_X"}},
		{"/api/aro_hcp/v1alpha1/clusters/" + long + "/external_auth_config/external_auths/" + long,
			InternalID{Kind: KindExternalAuth, API: APIAroHCPV1alpha1, ClusterID: long, ExternalAuthID: long}},
		{"/api/clusters_mgmt/v1/clusters/2a3b4c5d6e7f8g9h0i1j2k3l4m5n6o7p/break_glass_credentials/2q3r4s5t6u7v8w9x0y1z",
			InternalID{Kind: KindBreakGlassCredential, API: APIClustersMgmtV1, ClusterID: "2a3b4c5d6e7f8g9h0i1j2k3l4m5n6o7p", CredentialID: "2q3r4s5t6u7v8w9x0y1z"}},
		{"/api/clusters_mgmt/v1/clusters/" + long + "/break_glass_credentials/" + long,
			InternalID{Kind: KindBreakGlassCredential, API: APIClustersMgmtV1, ClusterID: long, CredentialID: long}},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseInternalID(tc.in)
			require.NoError(t, err)
			tc.want.Path = tc.in
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.in, got.String())
			require.Equal(t, tc.in, got.render())
		})
	}
}

func TestParseInternalIDRejected(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string // part of the error message
	}{
		{"", "empty"},
		{"/api/../x", "'..'"},
		{"/api/clusters_mgmt/v1/clusters/..", "'..'"},
		{"/api/clusters_mgmt/v1/clusters/.", "'.'"},
		{"/api/clusters_mgmt/v1/clusters/a/../../../accounts_mgmt/v1/x", "'..'"},
		{"/api/clusters_mgmt/v1/clusters/a..b", "only letters"},
		{"/api/clusters_mgmt/v1/clusters/%2e%2e", "percent-encoding"},
		{"/api/clusters_mgmt/v1/clusters/a%2Fb", "percent-encoding"},
		{"https://evil.example/api/clusters_mgmt/v1/clusters/abc", "not a URL"},
		{"http://127.0.0.1/api/clusters_mgmt/v1/clusters/abc", "not a URL"},
		{"//evil/api/clusters_mgmt/v1/clusters/abc", "network-path"},
		{"//evil.example/api/aro_hcp/v1alpha1/clusters/abc", "network-path"},
		{"api/clusters_mgmt/v1/clusters/abc", "absolute path"},
		{"/api/clusters_mgmt/v1/clusters/abc?x=1", "query"},
		{"/api/clusters_mgmt/v1/clusters/abc?", "query"},
		{"/api/clusters_mgmt/v1/clusters/abc#frag", "fragment"},
		{"/api/clusters_mgmt/v1/clusters/abc/", "trailing slash"},
		{"/api/clusters_mgmt/v1/clusters//abc", "empty path segment"},
		{"/api//clusters_mgmt/v1/clusters/abc", "empty path segment"},
		{"/api/clusters_mgmt/v1/clusters/", "trailing slash"},
		{"/api/clusters_mgmt/v1/clusters", "not a known Cluster Service path"},
		{"/api/clusters_mgmt/v1/clusters/abc/status", "not a known Cluster Service path"},
		{"/api/clusters_mgmt/v1/clusters/abc/node_pools", "not a known Cluster Service path"},
		{"/api/clusters_mgmt/v1/clusters/abc/node_pools/np/status", "not a known Cluster Service path"},
		{"/api/clusters_mgmt/v1/clusters/abc/node_pools/np/", "trailing slash"},
		{"/api/clusters_mgmt/v1/clusters/abc/node_pools/..", "'..'"},
		{"/api/clusters_mgmt/v1/clusters/abc/node_pools/n.p", "node pool ID contains '.'"},
		{"/api/clusters_mgmt/v1/clusters/abc/node_pools/" + strings.Repeat("n", MaxIDLength+1), "node pool ID must be 1 to 64"},
		{"/api/clusters_mgmt/v1/clusters/abc/nodepools/np", "not a known Cluster Service path"},
		{"/api/aro_hcp/v1alpha1/clusters/abc/node_pools", "not a known Cluster Service path"},
		{"/api/aro_hcp/v1alpha1/clusters/abc/machine_pools/np", "not a known Cluster Service path"},
		{"/api/aro_hcp/v1/clusters/abc", "not a known Cluster Service path"},
		{"/api/accounts_mgmt/v1/accounts/abc", "not a known Cluster Service path"},
		{"/API/clusters_mgmt/v1/clusters/abc", "not a known Cluster Service path"},
		{"/api/clusters_mgmt/v1/clusters/a'b", "only letters"},
		{"/api/clusters_mgmt/v1/clusters/a\"b", "only letters"},
		{"/api/clusters_mgmt/v1/clusters/a b", "only letters"},
		{"/api/clusters_mgmt/v1/clusters/a;b", "only letters"},
		{"/api/clusters_mgmt/v1/clusters/a:b", "only letters"},
		{"/api/clusters_mgmt/v1/clusters/a@b", "only letters"},
		{"/api/clusters_mgmt/v1/clusters/a\\b", "backslash"},
		{"/api/clusters_mgmt/v1/clusters/a\x00b", "control character"},
		{"/api/clusters_mgmt/v1/clusters/a\nb", "control character"},
		{"/api/clusters_mgmt/v1/clusters/a\rb", "control character"},
		{"/api/clusters_mgmt/v1/clusters/a\tb", "control character"},
		{"/api/clusters_mgmt/v1/clusters/a\x7fb", "control character"},
		{"/api/clusters_mgmt/v1/clusters/abç", "non-ASCII"},
		{"/api/clusters_mgmt/v1/clusters/аbc", "non-ASCII"},      // Cyrillic а
		{"/api/clusters_mgmt/v1/clusters/a\u2215b", "non-ASCII"}, // division slash
		{"/api/clusters_mgmt/v1/clusters/\xff", "non-ASCII"},
		{"/api/clusters_mgmt/v1/clusters/" + strings.Repeat("a", MaxIDLength+1), "1 to 64 characters"},
		{"/api/aro_hcp/v1alpha1/clusters/abc/node_pools/" + strings.Repeat("n", MaxIDLength+1), "node pool ID must be 1 to 64"},
		{"/api/clusters_mgmt/v1/clusters/" + strings.Repeat("a", 1000), "longer than"},
		{" /api/clusters_mgmt/v1/clusters/abc", "absolute path"},
		// External auths: aro_hcp only, exactly these segments.
		{"/api/clusters_mgmt/v1/clusters/abc/external_auth_config/external_auths/ea", "not a known Cluster Service path"},
		{"/api/aro_hcp/v1alpha1/clusters/abc/external_auth_config/external_auths", "not a known Cluster Service path"},
		{"/api/aro_hcp/v1alpha1/clusters/abc/external_auth_config/external_auths/", "trailing slash"},
		{"/api/aro_hcp/v1alpha1/clusters/abc/external_auth_config", "not a known Cluster Service path"},
		{"/api/aro_hcp/v1alpha1/clusters/abc/external_auth_config/ea", "not a known Cluster Service path"},
		{"/api/aro_hcp/v1alpha1/clusters/abc/external_auths/ea", "not a known Cluster Service path"},
		{"/api/aro_hcp/v1alpha1/clusters/abc/external_auth_config/external_auths/ea/status", "not a known Cluster Service path"},
		{"/api/aro_hcp/v1alpha1/clusters/abc/external_auth_config/external_auths/ea/x/y", "not a known Cluster Service path"},
		{"/api/aro_hcp/v1alpha1/clusters/abc/external_auth_configs/external_auths/ea", "not a known Cluster Service path"},
		{"/api/aro_hcp/v1alpha1/clusters/abc/node_pools/np/external_auth_config/external_auths/ea", "not a known Cluster Service path"},
		{"/api/aro_hcp/v1alpha1/clusters/abc/external_auth_config/external_auths/..", "'..'"},
		{"/api/aro_hcp/v1alpha1/clusters/abc/external_auth_config/../node_pools/np", "'..'"},
		{"/api/aro_hcp/v1alpha1/clusters/abc/external_auth_config/external_auths/%2e%2e", "percent-encoding"},
		{"/api/aro_hcp/v1alpha1/clusters/abc/external_auth_config/external_auths/e%61", "percent-encoding"},
		{"/api/aro_hcp/v1alpha1/clusters/abc/external_auth_config/external_auths/e.a", "external auth ID contains '.'"},
		{"/api/aro_hcp/v1alpha1/clusters/abc/external_auth_config/external_auths/" + strings.Repeat("e", MaxIDLength+1),
			"external auth ID must be 1 to 64"},
		{"/api/aro_hcp/v1alpha1/clusters/a.b/external_auth_config/external_auths/ea", "cluster ID contains '.'"},
		// Break-glass credentials: clusters_mgmt only, exactly these segments.
		{"/api/aro_hcp/v1alpha1/clusters/abc/break_glass_credentials/bgc", "not a known Cluster Service path"},
		{"/api/clusters_mgmt/v1/clusters/abc/break_glass_credentials", "not a known Cluster Service path"},
		{"/api/clusters_mgmt/v1/clusters/abc/break_glass_credentials/", "trailing slash"},
		{"/api/clusters_mgmt/v1/clusters/abc/break_glass_credentials/bgc/", "trailing slash"},
		{"/api/clusters_mgmt/v1/clusters/abc/break_glass_credentials/bgc/kubeconfig", "not a known Cluster Service path"},
		{"/api/clusters_mgmt/v1/clusters/abc/break_glass_credential/bgc", "not a known Cluster Service path"},
		{"/api/clusters_mgmt/v1/clusters/abc/break_glass_credentials/bgc?page=2", "query"},
		{"/api/clusters_mgmt/v1/clusters/abc/break_glass_credentials/..", "'..'"},
		{"/api/clusters_mgmt/v1/clusters/abc/break_glass_credentials/%2e%2e", "percent-encoding"},
		{"/api/clusters_mgmt/v1/clusters/abc/break_glass_credentials//bgc", "empty path segment"},
		{"/api/clusters_mgmt/v1/clusters/abc/break_glass_credentials/b:c", "break-glass credential ID contains ':'"},
		{"/api/clusters_mgmt/v1/clusters/abc/break_glass_credentials/" + strings.Repeat("b", MaxIDLength+1),
			"break-glass credential ID must be 1 to 64"},
		{"/api/clusters_mgmt/v1/clusters/abc/break_glass_credentials/" + strings.Repeat("b", 1000), "longer than"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseInternalID(tc.in)
			require.Error(t, err)
			require.ErrorIs(t, err, errInvalidInternalID)
			require.Contains(t, err.Error(), tc.want)
			require.Equal(t, InternalID{}, got)
			require.False(t, IsTransient(err))
		})
	}
}

func TestInAPI(t *testing.T) {
	for _, tc := range []struct{ in, api, want string }{
		{"/api/clusters_mgmt/v1/clusters/abc/node_pools/np1", APIAroHCPV1alpha1, "/api/aro_hcp/v1alpha1/clusters/abc/node_pools/np1"},
		{"/api/aro_hcp/v1alpha1/clusters/abc/node_pools/np1", APIClustersMgmtV1, "/api/clusters_mgmt/v1/clusters/abc/node_pools/np1"},
		{"/api/aro_hcp/v1alpha1/clusters/abc/node_pools/np1", APIAroHCPV1alpha1, "/api/aro_hcp/v1alpha1/clusters/abc/node_pools/np1"},
		{"/api/clusters_mgmt/v1/clusters/abc", APIAroHCPV1alpha1, "/api/aro_hcp/v1alpha1/clusters/abc"},
	} {
		t.Run(tc.in+" "+tc.api, func(t *testing.T) {
			id, err := ParseInternalID(tc.in)
			require.NoError(t, err)
			got, err := id.InAPI(tc.api)
			require.NoError(t, err)
			want, err := ParseInternalID(tc.want)
			require.NoError(t, err)
			require.Equal(t, want, got)
		})
	}
	for _, tc := range []struct{ in, api, want string }{
		// Single-API kinds.
		{"/api/aro_hcp/v1alpha1/clusters/abc/external_auth_config/external_auths/ea", APIClustersMgmtV1, "no other API's form"},
		{"/api/clusters_mgmt/v1/clusters/abc/break_glass_credentials/b1", APIAroHCPV1alpha1, "no other API's form"},
		// Not an API.
		{"/api/clusters_mgmt/v1/clusters/abc/node_pools/np1", "../../accounts_mgmt/v1", "'..'"},
		{"/api/clusters_mgmt/v1/clusters/abc/node_pools/np1", "aro_hcp/v1", "not a known Cluster Service path"},
	} {
		t.Run(tc.in+" "+tc.api, func(t *testing.T) {
			id, err := ParseInternalID(tc.in)
			require.NoError(t, err)
			got, err := id.InAPI(tc.api)
			require.ErrorIs(t, err, errInvalidInternalID)
			require.ErrorContains(t, err, tc.want)
			require.Equal(t, InternalID{}, got)
		})
	}
	_, err := InternalID{}.InAPI(APIAroHCPV1alpha1)
	require.ErrorIs(t, err, errInvalidInternalID)
}

func TestKindString(t *testing.T) {
	require.Equal(t, "cluster", KindCluster.String())
	require.Equal(t, "nodePool", KindNodePool.String())
	require.Equal(t, "externalAuth", KindExternalAuth.String())
	require.Equal(t, "breakGlassCredential", KindBreakGlassCredential.String())
	require.Equal(t, "Kind(0)", Kind(0).String())
}

// knownPath is the internalId forms of docs/design.md's Kinds table,
// written apart from the parser.
var knownPath = regexp.MustCompile(`^/api/(` +
	`clusters_mgmt/v1/clusters/[A-Za-z0-9_-]{1,64}(/node_pools/[A-Za-z0-9_-]{1,64}|/break_glass_credentials/[A-Za-z0-9_-]{1,64})?` + `|` +
	`aro_hcp/v1alpha1/clusters/[A-Za-z0-9_-]{1,64}(/node_pools/[A-Za-z0-9_-]{1,64}|/external_auth_config/external_auths/[A-Za-z0-9_-]{1,64})?` +
	`)$`)

// FuzzParseInternalID: never panics; whatever is accepted re-renders exactly
// and carries nothing that could steer a request elsewhere.
func FuzzParseInternalID(f *testing.F) {
	// More seeds live in testdata/fuzz/FuzzParseInternalID.
	f.Add("/api/clusters_mgmt/v1/clusters/abc")
	f.Add("/api/aro_hcp/v1alpha1/clusters/abc/node_pools/np")
	f.Add("/api/clusters_mgmt/v1/clusters/abc/node_pools/np")
	f.Add("/api/aro_hcp/v1alpha1/clusters/abc/external_auth_config/external_auths/ea")
	f.Add("/api/clusters_mgmt/v1/clusters/abc/break_glass_credentials/bgc")
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseInternalID(s)
		if err != nil {
			require.Equal(t, InternalID{}, id)
			return
		}
		require.Equal(t, s, id.Path)
		require.Equal(t, s, id.render())
		for _, bad := range []string{"..", "%", "?", "#", "//", "\\"} {
			require.NotContains(t, s, bad)
		}
		require.True(t, strings.HasPrefix(s, "/api/"))
		require.Contains(t, []Kind{KindCluster, KindNodePool, KindExternalAuth, KindBreakGlassCredential}, id.Kind)
		require.Contains(t, []string{APIClustersMgmtV1, APIAroHCPV1alpha1}, id.API)
		require.Equal(t, id.Kind == KindNodePool, id.NodePoolID != "")
		require.Equal(t, id.Kind == KindExternalAuth, id.ExternalAuthID != "")
		require.Equal(t, id.Kind == KindBreakGlassCredential, id.CredentialID != "")
		// Matched independently of the parser: one of the forms of
		// the Kinds table, nothing else.
		require.Regexp(t, knownPath, s)
		// Parsing is stable.
		again, err := ParseInternalID(id.render())
		require.NoError(t, err)
		require.Equal(t, id, again)
	})
}
