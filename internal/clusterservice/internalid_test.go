package clusterservice

import (
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
		{"/api/clusters_mgmt/v1/clusters/-", InternalID{Kind: KindCluster, API: APIClustersMgmtV1, ClusterID: "-"}},
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
		{"/api/clusters_mgmt/v1/clusters/abc/node_pools/np", "not a known Cluster Service path"},
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

func TestKindString(t *testing.T) {
	require.Equal(t, "cluster", KindCluster.String())
	require.Equal(t, "nodePool", KindNodePool.String())
	require.Equal(t, "Kind(0)", Kind(0).String())
}

// FuzzParseInternalID: never panics; whatever is accepted re-renders exactly
// and carries nothing that could steer a request elsewhere.
func FuzzParseInternalID(f *testing.F) {
	// More seeds live in testdata/fuzz/FuzzParseInternalID.
	f.Add("/api/clusters_mgmt/v1/clusters/abc")
	f.Add("/api/aro_hcp/v1alpha1/clusters/abc/node_pools/np")
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
		require.Contains(t, []Kind{KindCluster, KindNodePool}, id.Kind)
		require.Contains(t, []string{APIClustersMgmtV1, APIAroHCPV1alpha1}, id.API)
		require.Equal(t, id.Kind == KindNodePool, id.NodePoolID != "")
		// Parsing is stable.
		again, err := ParseInternalID(id.render())
		require.NoError(t, err)
		require.Equal(t, id, again)
	})
}
