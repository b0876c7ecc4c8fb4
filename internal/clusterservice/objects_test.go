package clusterservice

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// Objects as Cluster Service sends them, secrets included: the client must
// keep none of them and quote none of them in an error.
const (
	clusterJSON = `{"kind":"Cluster","id":"abc123","href":"/api/aro_hcp/v1alpha1/clusters/abc123","name":"c1",
		"creation_timestamp":"2026-01-02T03:04:05.123456Z","state":"ready",
		"azure":{"subscription_id":"sub","resource_group_name":"rg","resource_name":"c1","managed_resource_group_name":"mrg-c1"},
		"future":{"a":[1,2]}}`
	externalAuthJSON = `{"kind":"ExternalAuth","id":"ea-1","href":"/api/aro_hcp/v1alpha1/clusters/abc123/external_auth_config/external_auths/ea-1",
		"issuer":{"url":"https://issuer.example","audiences":["a"]},
		"clients":[{"id":"c","component":{"name":"console","namespace":"openshift-console"},"secret":"` + secretValue + `"}],
		"status":{"state":{"value":"error","last_updated_timestamp":"2026-01-02T03:04:05Z"},"message":"issuer unreachable"}}`
	// cmNodePoolJSON is a clusters_mgmt node pool as that API served it in
	// 2024-10: its status has current_replicas and a message, no state.
	cmNodePoolJSON = `{"kind":"NodePool","id":"np-1","href":"/api/clusters_mgmt/v1/clusters/x/node_pools/np-1",
		"replicas":2,"azure_node_pool":{"vm_size":"Standard_D8s_v3"},"status":{"current_replicas":1,"message":"scaling up"}}`
	credentialJSON = `{"kind":"BreakGlassCredential","id":"bgc-1","href":"/api/clusters_mgmt/v1/clusters/x/break_glass_credentials/bgc-1",
		"username":"u","status":"issued","expiration_timestamp":"2026-02-01T00:00:00Z","revocation_timestamp":"2026-01-15T00:00:00Z",
		"kubeconfig":"` + secretValue + `"}`
	secretValue = "SECRET-client-key-data-never-quoted"
)

var (
	hcpExternalAuth = mustParse("/api/aro_hcp/v1alpha1/clusters/abc123/external_auth_config/external_auths/ea-1")
	cmCredential    = mustParse("/api/clusters_mgmt/v1/clusters/2a3b4c5d6e7f8g9h0i1j2k3l4m5n6o7p/break_glass_credentials/bgc-1")
	cmPool          = mustParse("/api/clusters_mgmt/v1/clusters/2a3b4c5d6e7f8g9h0i1j2k3l4m5n6o7p/node_pools/np-1")
)

// credentialListPath is where the credentials of id's cluster are listed,
// written apart from the client.
func credentialListPath(id InternalID) string {
	return "/api/clusters_mgmt/v1/clusters/" + id.ClusterID + "/break_glass_credentials"
}

// objectCall is one of the calls that read an object or list, as a test
// table row.
type objectCall struct {
	name string
	id   InternalID
	path string // the request it makes first
	do   func(context.Context, *Client) (any, error)
}

func objectCalls() []objectCall {
	cluster := func(id InternalID) objectCall {
		return objectCall{"Cluster " + id.Path, id, id.Path, func(ctx context.Context, c *Client) (any, error) { return c.Cluster(ctx, id) }}
	}
	credentials := func(id InternalID) objectCall {
		return objectCall{"Credentials " + id.Path, id, credentialListPath(id) + "?page=1&size=100",
			func(ctx context.Context, c *Client) (any, error) { return c.Credentials(ctx, id) }}
	}
	return []objectCall{
		cluster(cmCluster),
		cluster(hcpCluster),
		{"ExternalAuth", hcpExternalAuth, hcpExternalAuth.Path,
			func(ctx context.Context, c *Client) (any, error) { return c.ExternalAuth(ctx, hcpExternalAuth) }},
		{"Credential", cmCredential, cmCredential.Path,
			func(ctx context.Context, c *Client) (any, error) { return c.Credential(ctx, cmCredential) }},
		{"NodePool", cmPool, cmPool.Path,
			func(ctx context.Context, c *Client) (any, error) { return nil, c.NodePool(ctx, cmPool) }},
		credentials(cmCluster),
		credentials(hcpCluster),
	}
}

func requestURI(r *http.Request) string {
	if r.URL.RawQuery == "" {
		return r.URL.Path
	}
	return r.URL.Path + "?" + r.URL.RawQuery
}

func TestClusterPathsAndBodies(t *testing.T) {
	for _, id := range []InternalID{cmCluster, hcpCluster} {
		t.Run(id.Path, func(t *testing.T) {
			rec := &recorder{reply: replyJSON(http.StatusOK, clusterJSON)}
			srv := httptest.NewServer(rec)
			defer srv.Close()
			got, err := newClient(t, Config{URL: srv.URL}).Cluster(context.Background(), id)
			require.NoError(t, err)
			require.Equal(t, Cluster{
				CreationTimestamp:        time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC),
				ManagedResourceGroupName: "mrg-c1",
			}, got)
			seen := rec.seen()
			require.Len(t, seen, 1)
			require.Equal(t, http.MethodGet, seen[0].Method)
			require.Equal(t, id.Path, requestURI(seen[0]))
			require.Equal(t, UserAgent, seen[0].Header.Get("User-Agent"))
		})
	}
}

func TestClusterBodies(t *testing.T) {
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	longest := strings.Repeat("é", maxResourceGroupNameRunes)
	for _, tc := range []struct {
		name string
		body string
		want Cluster
		err  string // part of the error; "" for none
	}{
		{name: "only the two fields", body: `{"creation_timestamp":"2026-01-02T03:04:05Z","azure":{"managed_resource_group_name":"m"}}`,
			want: Cluster{CreationTimestamp: created, ManagedResourceGroupName: "m"}},
		{name: "offset timestamp", body: `{"creation_timestamp":"2026-01-02T05:04:05+02:00","azure":{"managed_resource_group_name":"m"}}`,
			want: Cluster{CreationTimestamp: created.In(time.FixedZone("", 2*3600)), ManagedResourceGroupName: "m"}},
		{name: "the longest name Azure allows", body: `{"creation_timestamp":"2026-01-02T03:04:05Z","azure":{"managed_resource_group_name":"` + longest + `"}}`,
			want: Cluster{CreationTimestamp: created, ManagedResourceGroupName: longest}},
		{name: "no creation_timestamp", body: `{"kind":"Cluster","azure":{"managed_resource_group_name":"m"}}`, err: "malformed reply: no creation_timestamp"},
		{name: "no azure", body: `{"kind":"Cluster","creation_timestamp":"2026-01-02T03:04:05Z"}`, err: "malformed reply: no azure.managed_resource_group_name"},
		{name: "no managed resource group", body: `{"creation_timestamp":"2026-01-02T03:04:05Z","azure":{"resource_group_name":"rg"}}`,
			err: "malformed reply: no azure.managed_resource_group_name"},
		{name: "empty managed resource group", body: `{"creation_timestamp":"2026-01-02T03:04:05Z","azure":{"managed_resource_group_name":""}}`,
			err: "malformed reply: no azure.managed_resource_group_name"},
		{name: "name longer than Azure allows", body: `{"creation_timestamp":"2026-01-02T03:04:05Z","azure":{"managed_resource_group_name":"` + longest + `x"}}`,
			err: "longer than 90 characters"},
		{name: "timestamp not RFC 3339", body: `{"creation_timestamp":"yesterday","azure":{"managed_resource_group_name":"m"}}`, err: "malformed reply"},
		{name: "timestamp a number", body: `{"creation_timestamp":1767323045,"azure":{"managed_resource_group_name":"m"}}`, err: "malformed reply"},
		{name: "empty object", body: `{}`, err: "no creation_timestamp"},
		{name: "null", body: `null`, err: "no creation_timestamp"},
		{name: "empty body", body: ``, err: "no creation_timestamp"},
		{name: "not JSON", body: `<html>oops</html>`, err: "malformed reply"},
		{name: "truncated", body: `{"creation_timestamp":"2026-01-02T03:04:05Z","azure":{`, err: "malformed reply"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(replyJSON(http.StatusOK, tc.body))
			defer srv.Close()
			got, err := newClient(t, Config{URL: srv.URL}).Cluster(context.Background(), hcpCluster)
			if tc.err == "" {
				require.NoError(t, err)
				require.Equal(t, tc.want, got)
				return
			}
			require.Error(t, err)
			require.Contains(t, err.Error(), "GET "+hcpCluster.Path+": ")
			require.Contains(t, err.Error(), tc.err)
			require.False(t, IsTransient(err), "a malformed reply is not transient: %v", err)
			require.NotErrorIs(t, err, ErrNotFound)
			require.Equal(t, Cluster{}, got)
		})
	}
}

func TestExternalAuthBodies(t *testing.T) {
	long := strings.Repeat("é", 100_000)
	for _, tc := range []struct {
		name string
		body string
		want ExternalAuth
		err  string // part of the error; "" for none
	}{
		{name: "as Cluster Service sends it", body: externalAuthJSON,
			want: ExternalAuth{HasState: true, State: "error", Message: "issuer unreachable"}},
		{name: "ready", body: `{"kind":"ExternalAuth","id":"ea-1","status":{"state":{"value":"ready"}}}`,
			want: ExternalAuth{HasState: true, State: "ready"}},
		{name: "no status", body: `{"kind":"ExternalAuth","id":"ea-1","issuer":{"url":"https://issuer.example"}}`,
			want: ExternalAuth{}},
		{name: "status without state", body: `{"id":"ea-1","status":{"message":"m"}}`,
			want: ExternalAuth{Message: "m"}},
		{name: "state without value", body: `{"id":"ea-1","status":{"state":{"last_updated_timestamp":"2026-01-02T03:04:05Z"}}}`,
			want: ExternalAuth{HasState: true}},
		{name: "state kept as sent", body: `{"id":"ea-1","status":{"state":{"value":"Ready"}}}`,
			want: ExternalAuth{HasState: true, State: "Ready"}},
		{name: "no id", body: `{"kind":"ExternalAuth","status":{"state":{"value":"ready"}}}`, err: "malformed reply: not an external auth (no id)"},
		{name: "empty object", body: `{}`, err: "not an external auth (no id)"},
		{name: "null", body: `null`, err: "not an external auth (no id)"},
		{name: "empty body", body: ``, err: "not an external auth (no id)"},
		{name: "not JSON", body: `<html>oops</html>`, err: "malformed reply"},
		{name: "state a string", body: `{"id":"ea-1","status":{"state":"ready"}}`, err: "malformed reply"},
		{name: "broken after the secret", body: strings.Replace(externalAuthJSON, `"}],`, `"}],:`, 1), err: "malformed reply"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(replyJSON(http.StatusOK, tc.body))
			defer srv.Close()
			got, err := newClient(t, Config{URL: srv.URL}).ExternalAuth(context.Background(), hcpExternalAuth)
			if tc.err == "" {
				require.NoError(t, err)
				require.Equal(t, tc.want, got)
				return
			}
			require.Error(t, err)
			require.Contains(t, err.Error(), "GET "+hcpExternalAuth.Path+": ")
			require.Contains(t, err.Error(), tc.err)
			require.NotContains(t, err.Error(), secretValue)
			require.NotContains(t, err.Error(), "SECRET")
			require.False(t, IsTransient(err), "a malformed reply is not transient: %v", err)
			require.NotErrorIs(t, err, ErrNotFound)
			require.Equal(t, ExternalAuth{}, got)
		})
	}
	t.Run("strings are bounded", func(t *testing.T) {
		body := fmt.Sprintf(`{"id":"ea-1","status":{"state":{"value":%q},"message":%q}}`, long, long)
		srv := httptest.NewServer(replyJSON(http.StatusOK, body))
		defer srv.Close()
		got, err := newClient(t, Config{URL: srv.URL}).ExternalAuth(context.Background(), hcpExternalAuth)
		require.NoError(t, err)
		requireBounded(t, got.State, maxStateBytes)
		requireBounded(t, got.Message, maxMessageBytes)
	})
}

func requireBounded(t *testing.T, s string, limit int) {
	t.Helper()
	require.LessOrEqual(t, len(s), limit+len("…"))
	require.True(t, utf8.ValidString(s))
	require.True(t, strings.HasSuffix(s, "…"))
}

// TestNodePoolBodies: a clusters_mgmt node pool is there when Cluster
// Service answers with an object that has an id, whatever its status holds.
func TestNodePoolBodies(t *testing.T) {
	for _, tc := range []struct {
		name string
		body string
		err  string // part of the error; "" for none
	}{
		{name: "as clusters_mgmt served it in 2024-10", body: cmNodePoolJSON},
		{name: "with a state, as today's model has it", body: `{"kind":"NodePool","id":"np-1","status":{"state":{"value":"ready"}}}`},
		{name: "no status", body: `{"kind":"NodePool","id":"np-1"}`},
		{name: "no id", body: `{"kind":"NodePool","status":{"current_replicas":1}}`, err: "malformed reply: not a node pool (no id)"},
		{name: "empty object", body: `{}`, err: "not a node pool (no id)"},
		{name: "null", body: `null`, err: "not a node pool (no id)"},
		{name: "empty body", body: ``, err: "not a node pool (no id)"},
		{name: "not JSON", body: `<html>oops</html>`, err: "malformed reply"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{reply: replyJSON(http.StatusOK, tc.body)}
			srv := httptest.NewServer(rec)
			defer srv.Close()
			err := newClient(t, Config{URL: srv.URL}).NodePool(context.Background(), cmPool)
			require.Len(t, rec.seen(), 1)
			require.Equal(t, cmPool.Path, requestURI(rec.seen()[0]))
			if tc.err == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, "GET "+cmPool.Path+": ")
			require.ErrorContains(t, err, tc.err)
			require.False(t, IsTransient(err), "a malformed reply is not transient: %v", err)
			require.NotErrorIs(t, err, ErrNotFound)
		})
	}
}

func TestCredentialBodies(t *testing.T) {
	expires := time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		body string
		want Credential
		err  string // part of the error; "" for none
	}{
		{name: "as Cluster Service sends it", body: credentialJSON, want: Credential{ID: "bgc-1", Status: "issued", Expiration: expires}},
		{name: "no status, no expiration", body: `{"kind":"BreakGlassCredential","id":"bgc-1"}`, want: Credential{ID: "bgc-1"}},
		{name: "status kept as sent", body: `{"id":"bgc-1","status":"Revoked"}`, want: Credential{ID: "bgc-1", Status: "Revoked"}},
		{name: "no id", body: `{"kind":"BreakGlassCredential","status":"issued"}`, err: "malformed reply: not a break-glass credential (no id)"},
		{name: "empty object", body: `{}`, err: "not a break-glass credential (no id)"},
		{name: "null", body: `null`, err: "not a break-glass credential (no id)"},
		{name: "empty body", body: ``, err: "not a break-glass credential (no id)"},
		{name: "expiration not RFC 3339", body: `{"id":"bgc-1","expiration_timestamp":"soon"}`, err: "malformed reply"},
		{name: "not JSON", body: `<html>oops</html>`, err: "malformed reply"},
		{name: "broken after the kubeconfig", body: strings.Replace(credentialJSON, secretValue+`"}`, secretValue+`",}`, 1), err: "malformed reply"},
		{name: "broken inside the kubeconfig", body: strings.Replace(credentialJSON, secretValue, secretValue+`\x`+secretValue, 1), err: "malformed reply"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(replyJSON(http.StatusOK, tc.body))
			defer srv.Close()
			got, err := newClient(t, Config{URL: srv.URL}).Credential(context.Background(), cmCredential)
			if tc.err == "" {
				require.NoError(t, err)
				require.Equal(t, tc.want, got)
				return
			}
			require.Error(t, err)
			require.Contains(t, err.Error(), "GET "+cmCredential.Path+": ")
			require.Contains(t, err.Error(), tc.err)
			require.NotContains(t, err.Error(), "SECRET")
			require.False(t, IsTransient(err), "a malformed reply is not transient: %v", err)
			require.NotErrorIs(t, err, ErrNotFound)
			require.Equal(t, Credential{}, got)
		})
	}
	t.Run("strings are bounded", func(t *testing.T) {
		long := strings.Repeat("é", 100_000)
		body := fmt.Sprintf(`{"id":%q,"status":%q}`, long, long)
		srv := httptest.NewServer(replyJSON(http.StatusOK, body))
		defer srv.Close()
		got, err := newClient(t, Config{URL: srv.URL}).Credential(context.Background(), cmCredential)
		require.NoError(t, err)
		requireBounded(t, got.ID, maxCodeBytes)
		requireBounded(t, got.Status, maxStateBytes)
	})
}

// TestObjectCallsHTTPErrors: every call has Status's error rules.
func TestObjectCallsHTTPErrors(t *testing.T) {
	for _, tc := range []struct {
		name      string
		reply     http.HandlerFunc
		notFound  bool
		transient bool
		tooLarge  bool
		err       string
	}{
		{name: "OCM 404", reply: replyJSON(404, notFoundJSON), notFound: true},
		{name: "404 text", reply: http.NotFound, err: "HTTP 404 Not Found: not an OCM error (content type"},
		{name: "404 empty", reply: reply404("-", ""), err: "not an OCM error (no content type, empty body)"},
		{name: "404 HTML labelled JSON", reply: reply404("application/json", "<html>404</html>"), err: "not a JSON object"},
		{name: "500", reply: replyJSON(500, `{"kind":"Error","id":"500","code":"CLUSTERS-MGMT-500","reason":"boom"}`),
			transient: true, err: "HTTP 500 Internal Server Error: CLUSTERS-MGMT-500: boom"},
		{name: "502 HTML", reply: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(502)
			_, _ = io.WriteString(w, "<html>bad gateway</html>")
		}, transient: true, err: "HTTP 502"},
		{name: "503", reply: replyJSON(503, `{"kind":"Error","reason":"unavailable"}`), transient: true},
		{name: "429", reply: replyJSON(429, `{"kind":"Error","reason":"slow down"}`), transient: true},
		{name: "403", reply: replyJSON(403, `{"kind":"Error","reason":"no"}`), err: "HTTP 403"},
		{name: "HTML 200", reply: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			_, _ = io.WriteString(w, "<html>login</html>")
		}, err: `malformed reply: content type "text/html"`},
		{name: "not JSON", reply: replyJSON(200, `{"kind":`), err: "malformed reply"},
		{name: "too large", reply: replyJSON(200, `{"id":"`+strings.Repeat("x", 5000)+`"}`), tooLarge: true},
		{name: "connection closed without a reply", reply: func(w http.ResponseWriter, _ *http.Request) {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_ = conn.Close()
			}
		}, transient: true},
		{name: "connection closed in the middle of the body", reply: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", "1000")
			_, _ = io.WriteString(w, `{"id":"x","kubeconfig":"`)
		}, transient: true},
	} {
		for _, call := range objectCalls() {
			t.Run(tc.name+"/"+call.name, func(t *testing.T) {
				rec := &recorder{reply: tc.reply}
				srv := httptest.NewServer(rec)
				defer srv.Close()
				_, err := call.do(context.Background(), newClient(t, Config{URL: srv.URL, MaxReplyBytes: 4096}))
				require.Error(t, err)
				require.Len(t, rec.seen(), 1)
				require.Equal(t, call.path, requestURI(rec.seen()[0]))
				require.Equal(t, tc.notFound, errors.Is(err, ErrNotFound), "ErrNotFound: %v", err)
				require.Equal(t, tc.transient, IsTransient(err), "IsTransient: %v", err)
				require.Equal(t, tc.tooLarge, errors.Is(err, ErrReplyTooLarge), "ErrReplyTooLarge: %v", err)
				require.Contains(t, err.Error(), "GET "+call.path+": ")
				require.Contains(t, err.Error(), tc.err)
			})
		}
	}
}

func TestObjectCallsTimeoutIsTransient(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	c := newClient(t, Config{URL: srv.URL, Timeout: 100 * time.Millisecond})
	for _, call := range objectCalls() {
		_, err := call.do(context.Background(), c)
		require.ErrorIs(t, err, context.DeadlineExceeded, call.name)
		require.True(t, IsTransient(err), call.name)
	}
}

// TestCallsRefuseOtherKinds: each call reads one kind and sends nothing for
// another, nor for an id whose fields do not match its path.
func TestCallsRefuseOtherKinds(t *testing.T) {
	forged := []InternalID{
		{},
		{Path: hcpExternalAuth.Path, Kind: KindExternalAuth, API: APIAroHCPV1alpha1, ClusterID: "abc123", ExternalAuthID: "../../node_pools/np"},
		{Path: hcpExternalAuth.Path, Kind: KindExternalAuth, API: APIClustersMgmtV1, ClusterID: "abc123", ExternalAuthID: "ea-1"},
		{Path: cmCredential.Path, Kind: KindBreakGlassCredential, API: APIClustersMgmtV1, ClusterID: cmCredential.ClusterID, CredentialID: "other"},
		{Path: cmCredential.Path, Kind: KindBreakGlassCredential, API: APIClustersMgmtV1, ClusterID: cmCredential.ClusterID,
			CredentialID: cmCredential.CredentialID, NodePoolID: "np"},
		{Path: cmCluster.Path, Kind: KindCluster, API: APIClustersMgmtV1, ClusterID: "../../accounts_mgmt"},
		{Path: cmPool.Path, Kind: KindNodePool, API: APIAroHCPV1alpha1, ClusterID: cmPool.ClusterID, NodePoolID: cmPool.NodePoolID},
		{Path: hcpPool.Path, Kind: KindNodePool, API: APIClustersMgmtV1, ClusterID: hcpPool.ClusterID, NodePoolID: hcpPool.NodePoolID},
		{Path: cmPool.Path, Kind: KindNodePool, API: APIClustersMgmtV1, ClusterID: cmPool.ClusterID, NodePoolID: "../np-2"},
		{Path: "/api/clusters_mgmt/v1/clusters/%2e%2e", Kind: KindCluster, API: APIClustersMgmtV1, ClusterID: "%2e%2e"},
	}
	all := []InternalID{cmCluster, hcpCluster, hcpPool, cmPool, hcpExternalAuth, cmCredential}
	for _, tc := range []struct {
		name  string
		takes []InternalID
		do    func(*Client, InternalID) error
	}{
		// clusters_mgmt has no node pool status: cmPool is refused.
		{"Status", []InternalID{cmCluster, hcpCluster, hcpPool}, func(c *Client, id InternalID) error {
			_, err := c.Status(context.Background(), id)
			return err
		}},
		{"NodePool", []InternalID{cmPool}, func(c *Client, id InternalID) error {
			return c.NodePool(context.Background(), id)
		}},
		{"Cluster", []InternalID{cmCluster, hcpCluster}, func(c *Client, id InternalID) error {
			_, err := c.Cluster(context.Background(), id)
			return err
		}},
		{"ExternalAuth", []InternalID{hcpExternalAuth}, func(c *Client, id InternalID) error {
			_, err := c.ExternalAuth(context.Background(), id)
			return err
		}},
		{"Credential", []InternalID{cmCredential}, func(c *Client, id InternalID) error {
			_, err := c.Credential(context.Background(), id)
			return err
		}},
		{"Credentials", []InternalID{cmCluster, hcpCluster}, func(c *Client, id InternalID) error {
			_, err := c.Credentials(context.Background(), id)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{reply: replyJSON(404, notFoundJSON)}
			srv := httptest.NewServer(rec)
			defer srv.Close()
			c := newClient(t, Config{URL: srv.URL})
			for _, id := range append(all, forged...) {
				if parsed, err := ParseInternalID(id.Path); err == nil && parsed == id && contains(tc.takes, id) {
					continue
				}
				err := tc.do(c, id)
				require.ErrorIs(t, err, errInvalidInternalID, "%+v", id)
				require.False(t, IsTransient(err))
			}
			require.Empty(t, rec.seen())
		})
	}
}

func contains(ids []InternalID, id InternalID) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// listServer is a fake Cluster Service list of n break-glass credentials,
// paged as Cluster Service pages it unless told to misbehave.
type listServer struct {
	n          int  // credentials in the list
	total      int  // the total sent; -1: none; 0 with n > 0: n
	page       int  // the page sent; 0: the one asked for; -1: none
	size       int  // items on a full page; 0: the size asked for
	ignorePage bool // serve the first page whatever is asked
	noEmpty    bool // leave items out of a page that has none
}

func (l listServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	page, _ := strconv.Atoi(q.Get("page"))
	size, _ := strconv.Atoi(q.Get("size"))
	if l.size != 0 {
		size = l.size
	}
	if l.ignorePage {
		page = 1
	}
	var items []string
	for i := (page - 1) * size; i < page*size && i < l.n; i++ {
		items = append(items, fmt.Sprintf(
			`{"kind":"BreakGlassCredential","id":"bgc-%d","status":"revoked","expiration_timestamp":"2026-02-01T00:00:00Z","kubeconfig":%q}`,
			i, secretValue))
	}
	fields := []string{`"kind":"BreakGlassCredentialList"`, fmt.Sprintf(`"size":%d`, len(items))}
	switch {
	case l.page == 0:
		fields = append(fields, fmt.Sprintf(`"page":%d`, page))
	case l.page > 0:
		fields = append(fields, fmt.Sprintf(`"page":%d`, l.page))
	}
	switch {
	case l.total == 0:
		fields = append(fields, fmt.Sprintf(`"total":%d`, l.n))
	case l.total > 0:
		fields = append(fields, fmt.Sprintf(`"total":%d`, l.total))
	}
	if len(items) > 0 || !l.noEmpty {
		fields = append(fields, `"items":[`+strings.Join(items, ",")+`]`)
	}
	replyJSON(http.StatusOK, "{"+strings.Join(fields, ",")+"}")(w, r)
}

func TestCredentialsPages(t *testing.T) {
	for _, tc := range []struct {
		name     string
		list     listServer
		requests int
	}{
		{name: "none", list: listServer{n: 0}, requests: 1},
		{name: "one", list: listServer{n: 1}, requests: 1},
		{name: "a full page", list: listServer{n: 100}, requests: 1},
		{name: "a full page without total", list: listServer{n: 100, total: -1}, requests: 2},
		{name: "three pages", list: listServer{n: 250}, requests: 3},
		{name: "three pages without total", list: listServer{n: 250, total: -1}, requests: 3},
		{name: "without page numbers", list: listServer{n: 250, page: -1}, requests: 3},
		{name: "none, without items", list: listServer{n: 0, noEmpty: true}, requests: 1},
		{name: "none, without items or total", list: listServer{n: 0, total: -1, noEmpty: true}, requests: 1},
		{name: "a full page, then one without items", list: listServer{n: 100, total: -1, noEmpty: true}, requests: 2},
		{name: "as many as the bound", list: listServer{n: maxCredentialPages * credentialPageSize}, requests: maxCredentialPages},
	} {
		for _, id := range []InternalID{cmCluster, hcpCluster} {
			t.Run(tc.name+id.Path, func(t *testing.T) {
				rec := &recorder{reply: tc.list.ServeHTTP}
				srv := httptest.NewServer(rec)
				defer srv.Close()
				got, err := newClient(t, Config{URL: srv.URL}).Credentials(context.Background(), id)
				require.NoError(t, err)
				require.NotNil(t, got)
				require.Len(t, got, tc.list.n)
				for i, cred := range got {
					require.Equal(t, Credential{ID: fmt.Sprintf("bgc-%d", i), Status: "revoked",
						Expiration: time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)}, cred)
				}
				seen := rec.seen()
				require.Len(t, seen, tc.requests)
				for i, r := range seen {
					require.Equal(t, http.MethodGet, r.Method)
					require.Equal(t, fmt.Sprintf("/api/clusters_mgmt/v1/clusters/%s/break_glass_credentials?page=%d&size=100", id.ClusterID, i+1),
						requestURI(r))
				}
			})
		}
	}
}

// TestCredentialsListThatDoesNotEnd: a list that never ends, or whose
// pages and totals disagree, costs a bounded number of requests and ends
// in a non-transient error.
func TestCredentialsListThatDoesNotEnd(t *testing.T) {
	const endless = 1 << 30
	for _, tc := range []struct {
		name     string
		list     listServer
		requests int
		err      string
	}{
		{name: "full pages without end", list: listServer{n: endless, total: -1}, requests: maxCredentialPages,
			err: "the list does not end within 100 pages of 100"},
		{name: "a total too large", list: listServer{n: endless, total: endless}, requests: maxCredentialPages,
			err: "the list does not end within 100 pages of 100"},
		{name: "a total that says 5", list: listServer{n: endless, total: 5}, requests: 1,
			err: "malformed reply: 100 items so far, more than the total 5"},
		{name: "a list short of its total", list: listServer{n: 150, total: 250}, requests: 2,
			err: "?page=2&size=100: malformed reply: the list ends at 150 items, short of its total 250"},
		{name: "a page number that does not advance", list: listServer{n: endless, total: -1, page: 1}, requests: 2,
			err: "malformed reply: page 1 instead of 2"},
		{name: "the first page again and again", list: listServer{n: endless, total: -1, page: -1, ignorePage: true}, requests: 2,
			err: `malformed reply: credential "bgc-0" listed twice`},
		{name: "the first page again with a total", list: listServer{n: 1000, page: -1, ignorePage: true}, requests: 2,
			err: `listed twice`},
		{name: "more items than asked for", list: listServer{n: endless, size: credentialPageSize + 1}, requests: 1,
			err: "malformed reply: 101 items, more than the page size 100"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{reply: tc.list.ServeHTTP}
			srv := httptest.NewServer(rec)
			defer srv.Close()
			got, err := newClient(t, Config{URL: srv.URL}).Credentials(context.Background(), hcpCluster)
			require.Error(t, err)
			require.Nil(t, got)
			require.Contains(t, err.Error(), "GET "+credentialListPath(hcpCluster))
			require.Contains(t, err.Error(), tc.err)
			require.False(t, IsTransient(err), "%v", err)
			require.NotErrorIs(t, err, ErrNotFound)
			require.Len(t, rec.seen(), tc.requests)
			require.Equal(t, tc.requests == maxCredentialPages, errors.Is(err, errListDoesNotEnd), "%v", err)
		})
	}
}

func TestCredentialsPageBodies(t *testing.T) {
	for _, tc := range []struct {
		name string
		body string
		want []Credential
		err  string // part of the error; "" for none
	}{
		{name: "empty list", body: `{"kind":"BreakGlassCredentialList","page":1,"size":0,"total":0,"items":[]}`, want: []Credential{}},
		{name: "no total, no page", body: `{"items":[{"id":"a","status":"issued"}]}`, want: []Credential{{ID: "a", Status: "issued"}}},
		{name: "no items", body: `{"kind":"BreakGlassCredentialList","page":1,"size":0,"total":0}`, want: []Credential{}},
		{name: "only a size", body: `{"size":0}`, want: []Credential{}},
		{name: "null items", body: `{"page":1,"total":0,"items":null}`, want: []Credential{}},
		{name: "empty object", body: `{}`, err: "malformed reply: not a page"},
		{name: "no items, short of its total", body: `{"kind":"BreakGlassCredentialList","page":1,"size":0,"total":3}`,
			err: "malformed reply: the list ends at 0 items, short of its total 3"},
		{name: "empty body", body: ``, err: "malformed reply: not a page"},
		{name: "an item without id", body: `{"items":[{"id":"a"},{"status":"issued"}]}`, err: "an item is not a break-glass credential (no id)"},
		{name: "a null item", body: `{"items":[null]}`, err: "no id"},
		{name: "twice on one page", body: `{"items":[{"id":"a"},{"id":"a"}]}`, err: `credential "a" listed twice`},
		{name: "items not an array", body: `{"items":{"id":"a"}}`, err: "malformed reply"},
		{name: "total not a number", body: `{"total":"5","items":[]}`, err: "malformed reply"},
		{name: "broken after a kubeconfig", body: `{"items":[{"id":"a","kubeconfig":"` + secretValue + `"},]}`, err: "malformed reply"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(replyJSON(http.StatusOK, tc.body))
			defer srv.Close()
			got, err := newClient(t, Config{URL: srv.URL}).Credentials(context.Background(), cmCluster)
			if tc.err == "" {
				require.NoError(t, err)
				require.Equal(t, tc.want, got)
				return
			}
			require.Error(t, err)
			require.Contains(t, err.Error(), "GET "+credentialListPath(cmCluster)+"?page=1&size=100: ")
			require.Contains(t, err.Error(), tc.err)
			require.NotContains(t, err.Error(), "SECRET")
			require.False(t, IsTransient(err), "%v", err)
			require.Nil(t, got)
		})
	}
}

// TestCredentialsErrorOnALaterPage: a later page's error is the call's,
// whatever came before.
func TestCredentialsErrorOnALaterPage(t *testing.T) {
	for _, tc := range []struct {
		name      string
		reply     http.HandlerFunc
		notFound  bool
		transient bool
	}{
		{name: "OCM 404", reply: replyJSON(404, notFoundJSON), notFound: true},
		{name: "503", reply: replyJSON(503, `{"kind":"Error","reason":"unavailable"}`), transient: true},
		{name: "403", reply: replyJSON(403, `{"kind":"Error","reason":"no"}`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			list := listServer{n: 250}
			rec := &recorder{reply: func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Query().Get("page") == "2" {
					tc.reply(w, r)
					return
				}
				list.ServeHTTP(w, r)
			}}
			srv := httptest.NewServer(rec)
			defer srv.Close()
			got, err := newClient(t, Config{URL: srv.URL}).Credentials(context.Background(), cmCluster)
			require.Error(t, err)
			require.Nil(t, got)
			require.Len(t, rec.seen(), 2)
			require.Contains(t, err.Error(), "?page=2&size=100: ")
			require.Equal(t, tc.notFound, errors.Is(err, ErrNotFound), "%v", err)
			require.Equal(t, tc.transient, IsTransient(err), "%v", err)
		})
	}
}

// TestGuardExpectsTheQuery: an exchange sends its one path with its one
// query string, exactly as expected, and nothing else.
func TestGuardExpectsTheQuery(t *testing.T) {
	rec := &recorder{reply: replyJSON(http.StatusOK, `{"items":[]}`)}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	base, err := parseBaseURL(srv.URL)
	require.NoError(t, err)
	g := &guardTransport{base: base, maxReply: DefaultMaxReplyBytes, next: http.DefaultTransport}
	list := credentialListPath(cmCluster)
	for _, tc := range []struct {
		name    string
		expect  reqURL
		request *reqURL
		ok      bool
	}{
		{"the page", reqURL{path: list, query: "page=2&size=100"}, &reqURL{path: list, query: "page=2&size=100"}, true},
		{"the object", reqURL{path: cmCredential.Path}, &reqURL{path: cmCredential.Path}, true},
		{"another page", reqURL{path: list, query: "page=2&size=100"}, &reqURL{path: list, query: "page=3&size=100"}, false},
		{"another size", reqURL{path: list, query: "page=2&size=100"}, &reqURL{path: list, query: "page=2&size=1000"}, false},
		{"no query", reqURL{path: list, query: "page=2&size=100"}, &reqURL{path: list}, false},
		{"another order", reqURL{path: list, query: "page=2&size=100"}, &reqURL{path: list, query: "size=100&page=2"}, false},
		{"one more parameter", reqURL{path: list, query: "page=2&size=100"}, &reqURL{path: list, query: "page=2&size=100&search=x"}, false},
		{"the query on another path", reqURL{path: list, query: "page=2&size=100"}, &reqURL{path: cmCluster.Path, query: "page=2&size=100"}, false},
		{"the list of another cluster", reqURL{path: list, query: "page=1&size=100"},
			&reqURL{path: credentialListPath(hcpCluster), query: "page=1&size=100"}, false},
		{"a query where none is expected", reqURL{path: cmCredential.Path}, &reqURL{path: cmCredential.Path, query: "page=1&size=100"}, false},
		{"an empty query where none is expected", reqURL{path: cmCredential.Path}, &reqURL{path: cmCredential.Path, forceQuery: true}, false},
		{"an encoded path", reqURL{path: cmCredential.Path}, &reqURL{path: cmCredential.Path, rawPath: strings.Replace(cmCredential.Path, "/bgc", "%2Fbgc", 1)}, false},
		{"a fragment", reqURL{path: cmCredential.Path}, &reqURL{path: cmCredential.Path, fragment: "x"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(rec.seen())
			ex := &exchange{path: tc.expect.path, query: tc.expect.query}
			req, err := http.NewRequestWithContext(context.WithValue(context.Background(), exchangeKey{}, ex), http.MethodGet, "", nil)
			require.NoError(t, err)
			req.URL.Path, req.URL.RawPath, req.URL.RawQuery = tc.request.path, tc.request.rawPath, tc.request.query
			req.URL.ForceQuery, req.URL.Fragment = tc.request.forceQuery, tc.request.fragment
			resp, err := g.RoundTrip(req)
			if !tc.ok {
				require.ErrorIs(t, err, errRefused)
				require.Len(t, rec.seen(), before, "nothing is sent")
				return
			}
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			require.Len(t, rec.seen(), before+1)
		})
	}
}

// reqURL is the parts of a request URL the guard looks at.
type reqURL struct {
	path, rawPath, query, fragment string
	forceQuery                     bool
}

// allowedRequest is every request the client may send, from docs/design.md's
// Kinds table, written apart from the client and the parser.
var allowedRequest = regexp.MustCompile(`^/api/(` +
	`(clusters_mgmt/v1|aro_hcp/v1alpha1)/clusters/[A-Za-z0-9_-]{1,64}(/status|/inflight_checks)?` + `|` +
	`aro_hcp/v1alpha1/clusters/[A-Za-z0-9_-]{1,64}/node_pools/[A-Za-z0-9_-]{1,64}/status` + `|` +
	`clusters_mgmt/v1/clusters/[A-Za-z0-9_-]{1,64}/node_pools/[A-Za-z0-9_-]{1,64}` + `|` +
	`aro_hcp/v1alpha1/clusters/[A-Za-z0-9_-]{1,64}/external_auth_config/external_auths/[A-Za-z0-9_-]{1,64}` + `|` +
	`clusters_mgmt/v1/clusters/[A-Za-z0-9_-]{1,64}/break_glass_credentials/[A-Za-z0-9_-]{1,64}` + `|` +
	`clusters_mgmt/v1/clusters/[A-Za-z0-9_-]{1,64}/break_glass_credentials\?page=1&size=100` +
	`)$`)

// FuzzClientRequests: whatever internalId comes, every call of the client
// sends only requests of the Kinds table, as they reach the server.
func FuzzClientRequests(f *testing.F) {
	for _, s := range []string{
		cmCluster.Path, hcpCluster.Path, hcpPool.Path, hcpExternalAuth.Path, cmCredential.Path,
		"/api/clusters_mgmt/v1/clusters/abc/node_pools/np",
		"/api/clusters_mgmt/v1/clusters/abc/external_auth_config/external_auths/ea",
		"/api/aro_hcp/v1alpha1/clusters/abc/break_glass_credentials/bgc",
		"/api/clusters_mgmt/v1/clusters/abc/break_glass_credentials",
		"/api/clusters_mgmt/v1/clusters/abc/break_glass_credentials/..",
		"/api/clusters_mgmt/v1/clusters/abc/break_glass_credentials/%2e%2e/x",
		"/api/aro_hcp/v1alpha1/clusters/abc/external_auth_config/external_auths/../../node_pools/np",
		"/api/clusters_mgmt/v1/clusters/abc/break_glass_credentials/b?page=2&size=100",
		"/api/clusters_mgmt/v1/clusters/abc/break_glass_credentials/b#x",
		"//evil.example/api/clusters_mgmt/v1/clusters/abc/break_glass_credentials/b",
	} {
		f.Add(s)
	}
	rec := &recorder{reply: replyJSON(404, notFoundJSON)}
	srv := httptest.NewServer(rec)
	f.Cleanup(srv.Close)
	c, err := NewClient(Config{URL: srv.URL})
	require.NoError(f, err)
	f.Cleanup(func() { _ = c.Close() })
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseInternalID(s)
		if err != nil {
			return
		}
		rec.mu.Lock()
		rec.requests = nil
		rec.mu.Unlock()
		ctx := context.Background()
		_, _ = c.Status(ctx, id)
		_, _ = c.InflightChecks(ctx, id)
		_, _ = c.Cluster(ctx, id)
		_ = c.NodePool(ctx, id)
		_, _ = c.ExternalAuth(ctx, id)
		_, _ = c.Credential(ctx, id)
		_, _ = c.Credentials(ctx, id)
		seen := rec.seen()
		require.NotEmpty(t, seen)
		for _, r := range seen {
			require.Equal(t, http.MethodGet, r.Method)
			require.Regexp(t, allowedRequest, r.RequestURI)
			require.True(t, strings.HasPrefix(r.URL.Path, "/api/"+APIClustersMgmtV1+"/clusters/"+id.ClusterID) ||
				strings.HasPrefix(r.URL.Path, "/api/"+APIAroHCPV1alpha1+"/clusters/"+id.ClusterID), "%s for %s", r.RequestURI, s)
		}
	})
}
