package clustersim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// AdminClient calls a simulator's admin API over HTTP.
type AdminClient struct {
	base string
	hc   *http.Client
}

// AdminError is a non-2xx answer of the admin API.
type AdminError struct {
	StatusCode int
	Message    string
}

// Error reports the status and the server's message.
func (e *AdminError) Error() string {
	return fmt.Sprintf("clustersim admin: %d %s: %s", e.StatusCode, http.StatusText(e.StatusCode), e.Message)
}

// NewAdminClient returns a client for the simulator at baseURL (such as
// "http://127.0.0.1:8080"). A nil hc means http.DefaultClient.
func NewAdminClient(baseURL string, hc *http.Client) *AdminClient {
	if hc == nil {
		hc = http.DefaultClient
	}
	return &AdminClient{base: strings.TrimSuffix(baseURL, "/"), hc: hc}
}

func clusterAdminPath(id string) string {
	return "/admin/clusters/" + url.PathEscape(id)
}

func nodePoolAdminPath(clusterID, np string) string {
	return clusterAdminPath(clusterID) + "/node_pools/" + url.PathEscape(np)
}

// PutCluster creates or replaces a cluster with exactly the given script
// (every field is sent, so the server's defaults do not apply).
func (c *AdminClient) PutCluster(ctx context.Context, id string, sc Script) (Resource, error) {
	return c.resource(ctx, http.MethodPut, clusterAdminPath(id), sc)
}

// Cluster returns a cluster's current state.
func (c *AdminClient) Cluster(ctx context.Context, id string) (Resource, error) {
	return c.resource(ctx, http.MethodGet, clusterAdminPath(id), nil)
}

// DeleteCluster starts deleting a cluster, uninstalling for the given time.
func (c *AdminClient) DeleteCluster(ctx context.Context, id string, uninstalling time.Duration) (Resource, error) {
	d := Duration(uninstalling)
	return c.resource(ctx, http.MethodDelete, clusterAdminPath(id), DeleteRequest{Uninstalling: &d})
}

// UpdateCluster starts an update of a ready cluster, updating for the given
// time.
func (c *AdminClient) UpdateCluster(ctx context.Context, id string, updating time.Duration) (Resource, error) {
	d := Duration(updating)
	return c.resource(ctx, http.MethodPost, clusterAdminPath(id)+"/update", UpdateRequest{Updating: &d})
}

// PutNodePool creates or replaces a node pool with exactly the given script.
func (c *AdminClient) PutNodePool(ctx context.Context, clusterID, np string, sc Script) (Resource, error) {
	return c.resource(ctx, http.MethodPut, nodePoolAdminPath(clusterID, np), sc)
}

// NodePool returns a node pool's current state.
func (c *AdminClient) NodePool(ctx context.Context, clusterID, np string) (Resource, error) {
	return c.resource(ctx, http.MethodGet, nodePoolAdminPath(clusterID, np), nil)
}

// DeleteNodePool starts deleting a node pool.
func (c *AdminClient) DeleteNodePool(ctx context.Context, clusterID, np string, uninstalling time.Duration) (Resource, error) {
	d := Duration(uninstalling)
	return c.resource(ctx, http.MethodDelete, nodePoolAdminPath(clusterID, np), DeleteRequest{Uninstalling: &d})
}

// UpdateNodePool starts an update of a ready node pool.
func (c *AdminClient) UpdateNodePool(ctx context.Context, clusterID, np string, updating time.Duration) (Resource, error) {
	d := Duration(updating)
	return c.resource(ctx, http.MethodPost, nodePoolAdminPath(clusterID, np)+"/update", UpdateRequest{Updating: &d})
}

func externalAuthAdminPath(clusterID, ea string) string {
	return clusterAdminPath(clusterID) + "/external_auths/" + url.PathEscape(ea)
}

func credentialAdminPath(clusterID, id string) string {
	return clusterAdminPath(clusterID) + "/break_glass_credentials/" + url.PathEscape(id)
}

// PutExternalAuth creates or replaces an external auth with exactly the
// given script.
func (c *AdminClient) PutExternalAuth(ctx context.Context, clusterID, ea string, sc Script) (Resource, error) {
	return c.resource(ctx, http.MethodPut, externalAuthAdminPath(clusterID, ea), sc)
}

// ExternalAuth returns an external auth's current state.
func (c *AdminClient) ExternalAuth(ctx context.Context, clusterID, ea string) (Resource, error) {
	return c.resource(ctx, http.MethodGet, externalAuthAdminPath(clusterID, ea), nil)
}

// DeleteExternalAuth starts deleting an external auth.
func (c *AdminClient) DeleteExternalAuth(ctx context.Context, clusterID, ea string, uninstalling time.Duration) (Resource, error) {
	d := Duration(uninstalling)
	return c.resource(ctx, http.MethodDelete, externalAuthAdminPath(clusterID, ea), DeleteRequest{Uninstalling: &d})
}

// UpdateExternalAuth starts an update of a ready external auth.
func (c *AdminClient) UpdateExternalAuth(ctx context.Context, clusterID, ea string, updating time.Duration) (Resource, error) {
	d := Duration(updating)
	return c.resource(ctx, http.MethodPost, externalAuthAdminPath(clusterID, ea)+"/update", UpdateRequest{Updating: &d})
}

// PutCredential creates or replaces a break-glass credential with exactly
// the given script.
func (c *AdminClient) PutCredential(ctx context.Context, clusterID, id string, sc Script) (Resource, error) {
	return c.resource(ctx, http.MethodPut, credentialAdminPath(clusterID, id), sc)
}

// Credential returns a break-glass credential's current state.
func (c *AdminClient) Credential(ctx context.Context, clusterID, id string) (Resource, error) {
	return c.resource(ctx, http.MethodGet, credentialAdminPath(clusterID, id), nil)
}

// RevokeCredential starts revoking one credential, awaiting revocation for
// the given time.
func (c *AdminClient) RevokeCredential(ctx context.Context, clusterID, id string, revoking time.Duration) (Resource, error) {
	d := Duration(revoking)
	return c.resource(ctx, http.MethodPost, credentialAdminPath(clusterID, id)+"/revoke", RevokeRequest{Revoking: &d})
}

// RevokeCredentials revokes every created or issued credential of a
// cluster (see Sim.RevokeCredentials).
func (c *AdminClient) RevokeCredentials(ctx context.Context, clusterID string, revoking time.Duration) (RevokeResponse, error) {
	var r RevokeResponse
	d := Duration(revoking)
	err := c.do(ctx, http.MethodPost, clusterAdminPath(clusterID)+"/break_glass_credentials/revoke", RevokeRequest{Revoking: &d}, &r)
	return r, err
}

// Resources lists every live resource (see Sim.Resources).
func (c *AdminClient) Resources(ctx context.Context) ([]Resource, error) {
	var r []Resource
	err := c.do(ctx, http.MethodGet, "/admin/clusters", nil, &r)
	return r, err
}

// ReadyAll ends every lifecycle (see Sim.ReadyAll) and returns how many
// resources changed.
func (c *AdminClient) ReadyAll(ctx context.Context) (int, error) {
	var r ReadyAllResponse
	err := c.do(ctx, http.MethodPost, "/admin/ready-all", nil, &r)
	return r.Changed, err
}

// SetState fixes the state of the resource at a Cluster Service path.
func (c *AdminClient) SetState(ctx context.Context, path, state string) (Resource, error) {
	return c.resource(ctx, http.MethodPost, "/admin/state", StateRequest{Path: path, State: state})
}

// SetFaults replaces the fault configuration.
func (c *AdminClient) SetFaults(ctx context.Context, f Faults) error {
	return c.do(ctx, http.MethodPut, "/admin/faults", f, nil)
}

// Faults returns the fault configuration.
func (c *AdminClient) Faults(ctx context.Context) (Faults, error) {
	var f Faults
	err := c.do(ctx, http.MethodGet, "/admin/faults", nil, &f)
	return f, err
}

// Stats returns the request, status and fault counters.
func (c *AdminClient) Stats(ctx context.Context) (Stats, error) {
	var s Stats
	err := c.do(ctx, http.MethodGet, "/admin/stats", nil, &s)
	return s, err
}

// ResetStats sets the counters back to zero.
func (c *AdminClient) ResetStats(ctx context.Context) error {
	return c.do(ctx, http.MethodDelete, "/admin/stats", nil, nil)
}

// resource makes an admin call whose answer is a Resource.
func (c *AdminClient) resource(ctx context.Context, method, path string, in any) (Resource, error) {
	var r Resource
	err := c.do(ctx, method, path, in, &r)
	return r, err
}

func (c *AdminClient) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("clustersim admin %s %s: encoding body: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return fmt.Errorf("clustersim admin %s %s: %w", method, path, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("clustersim admin %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("clustersim admin %s %s: reading answer: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		var e adminError
		if json.Unmarshal(b, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(b))
		}
		return &AdminError{StatusCode: resp.StatusCode, Message: e.Error}
	}
	if out == nil || resp.StatusCode == http.StatusNoContent {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("clustersim admin %s %s: decoding answer: %w", method, path, err)
	}
	return nil
}
