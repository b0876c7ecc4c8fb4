package clusterservice

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	cmv1 "github.com/openshift-online/ocm-sdk-go/clustersmgmt/v1"
)

// Cluster is what billing needs of a cluster.
type Cluster struct {
	// CreationTimestamp is the cluster's creation_timestamp, the billing
	// item's creationTime.
	CreationTimestamp time.Time
	// ManagedResourceGroupName is the cluster's
	// azure.managed_resource_group_name, from which the billing item's
	// managedResourceGroup is built.
	ManagedResourceGroupName string
}

// ExternalAuth is the part of an external auth that opstatus uses: it has
// no status of its own to GET, so its state is read from the object.
type ExternalAuth struct {
	// HasState is false when the object has no status.state at all, which
	// is a valid answer: external auths had no states at first.
	HasState bool
	// State is status.state.value, empty when status.state has no value.
	State string
	// Message is status.message.
	Message string
}

// Credential is the part of a break-glass credential that opstatus uses.
// Its kubeconfig is never kept.
type Credential struct {
	// ID is the credential's id.
	ID string
	// Status is its status as Cluster Service sent it, such as issued or
	// revoked; empty when absent.
	Status string
	// Expiration is its expiration_timestamp; zero when absent.
	Expiration time.Time
}

// Paging of Credentials: pages of credentialPageSize items, at most
// maxCredentialPages of them, so that a list that never ends (a server that
// ignores the page or repeats full pages) costs a bounded number of
// requests and memory.
const (
	credentialPageSize = 100
	maxCredentialPages = 100
)

// maxResourceGroupNameRunes is Azure's limit on a resource group name. A
// longer one cannot be the cluster's, and cutting it would bill another.
const maxResourceGroupNameRunes = 90

// errListDoesNotEnd is wrapped by the error of Credentials when the list is
// still going after maxCredentialPages pages.
var errListDoesNotEnd = errors.New("clusterservice: the list does not end")

// Cluster reads GET {URL}{id.Path}, a cluster of either API, for billing.
// Its errors are Status's, and a reply without creation_timestamp or
// azure.managed_resource_group_name (billing needs both), or with a
// resource group name longer than Azure allows, is malformed. Other kinds
// are refused without a request.
func (c *Client) Cluster(ctx context.Context, id InternalID) (Cluster, error) {
	if id.Kind != KindCluster {
		return Cluster{}, fmt.Errorf("%w %s: not a cluster", errInvalidInternalID, quote(id.Path))
	}
	var cl Cluster
	code, err := c.call(ctx, id, id.Path, "", func(ctx context.Context) (err error) {
		cl, err = c.getCluster(ctx, id)
		return err
	})
	c.logger.DebugContext(ctx, "cluster service cluster", "path", id.Path, "httpStatus", code)
	switch {
	case err != nil:
		return Cluster{}, err
	case cl.CreationTimestamp.IsZero():
		return Cluster{}, fmt.Errorf("GET %s: malformed reply: no creation_timestamp", id.Path)
	case cl.ManagedResourceGroupName == "":
		return Cluster{}, fmt.Errorf("GET %s: malformed reply: no azure.managed_resource_group_name", id.Path)
	case utf8.RuneCountInString(cl.ManagedResourceGroupName) > maxResourceGroupNameRunes:
		return Cluster{}, fmt.Errorf("GET %s: malformed reply: azure.managed_resource_group_name is longer than %d characters",
			id.Path, maxResourceGroupNameRunes)
	}
	return cl, nil
}

// ExternalAuth reads GET {URL}{id.Path}, an external auth. Its errors are
// Status's, and a reply that is not an object with an id is malformed. Its
// strings are bounded as Status bounds its own. Other kinds are refused
// without a request.
func (c *Client) ExternalAuth(ctx context.Context, id InternalID) (ExternalAuth, error) {
	if id.Kind != KindExternalAuth {
		return ExternalAuth{}, fmt.Errorf("%w %s: not an external auth", errInvalidInternalID, quote(id.Path))
	}
	var ea ExternalAuth
	var found bool
	code, err := c.call(ctx, id, id.Path, "", func(ctx context.Context) (err error) {
		ea, found, err = c.getExternalAuth(ctx, id)
		return err
	})
	c.logger.DebugContext(ctx, "cluster service external auth", "path", id.Path, "httpStatus", code, "state", ea.State)
	switch {
	case err != nil:
		return ExternalAuth{}, err
	case !found:
		return ExternalAuth{}, fmt.Errorf("GET %s: malformed reply: not an external auth (no id)", id.Path)
	}
	ea.State = truncate(ea.State, maxStateBytes)
	ea.Message = truncate(ea.Message, maxMessageBytes)
	return ea, nil
}

// NodePool reads GET {URL}{id.Path}, a node pool of the clusters_mgmt form,
// to learn whether Cluster Service has it: nil when the reply is an object
// with an id. That API's node pools have no status to GET; their state is
// read under aro_hcp (Status, InAPI). Its errors are Status's (an OCM 404:
// the node pool does not exist), and a reply that is not an object with an
// id is malformed. Other kinds, and aro_hcp node pools, are refused without
// a request.
func (c *Client) NodePool(ctx context.Context, id InternalID) error {
	if id.Kind != KindNodePool || id.API != APIClustersMgmtV1 {
		return fmt.Errorf("%w %s: not a %s node pool", errInvalidInternalID, quote(id.Path), APIClustersMgmtV1)
	}
	var found bool
	code, err := c.call(ctx, id, id.Path, "", func(ctx context.Context) error {
		resp, err := c.clustersMgmt.Clusters().Cluster(id.ClusterID).
			NodePools().NodePool(id.NodePoolID).Get().SendContext(ctx)
		if err != nil {
			return parseError(resp.Status(), err)
		}
		body, ok := resp.GetBody()
		found = ok && body.ID() != ""
		return nil
	})
	c.logger.DebugContext(ctx, "cluster service node pool", "path", id.Path, "httpStatus", code)
	switch {
	case err != nil:
		return err
	case !found:
		return fmt.Errorf("GET %s: malformed reply: not a node pool (no id)", id.Path)
	}
	return nil
}

// Credential reads GET {URL}{id.Path}, a break-glass credential. Its errors
// are Status's, and a reply that is not an object with an id is malformed.
// Other kinds are refused without a request.
func (c *Client) Credential(ctx context.Context, id InternalID) (Credential, error) {
	if id.Kind != KindBreakGlassCredential {
		return Credential{}, fmt.Errorf("%w %s: not a break-glass credential", errInvalidInternalID, quote(id.Path))
	}
	var cred Credential
	var found bool
	code, err := c.call(ctx, id, id.Path, "", func(ctx context.Context) error {
		resp, err := c.clustersMgmt.Clusters().Cluster(id.ClusterID).
			BreakGlassCredentials().BreakGlassCredential(id.CredentialID).Get().SendContext(ctx)
		if err != nil {
			return parseError(resp.Status(), err)
		}
		body, ok := resp.GetBody()
		cred, found = credential(body), ok && body.ID() != ""
		return nil
	})
	c.logger.DebugContext(ctx, "cluster service break-glass credential", "path", id.Path, "httpStatus", code, "status", cred.Status)
	switch {
	case err != nil:
		return Credential{}, err
	case !found:
		return Credential{}, fmt.Errorf("GET %s: malformed reply: not a break-glass credential (no id)", id.Path)
	}
	return cred, nil
}

// Credentials reads every break-glass credential of a cluster, given by its
// id of either form, from
// GET {URL}/api/clusters_mgmt/v1/clusters/{c}/break_glass_credentials
// (ocm-sdk-go's aro_hcp client has no break-glass credentials), page by
// page, credentialPageSize a page. Each page is a request of its own with
// Status's errors (an OCM 404: the cluster does not exist). The list ends
// with a page of fewer items than the page size, or once the items reach
// the list's total. A page without items is an empty page, as ARO-HCP's
// client reads it (Cluster Service may leave out an empty list); a reply
// with neither items nor page, size or total is no page at all. Another
// page than asked for, more items than asked for or than the total, a
// credential listed twice (pages that shifted or repeat), or a list that
// ends short of its total is malformed; one still going after maxCredentialPages pages is a
// non-transient error wrapping errListDoesNotEnd. Other kinds are refused
// without a request.
func (c *Client) Credentials(ctx context.Context, cluster InternalID) ([]Credential, error) {
	if cluster.Kind != KindCluster {
		return nil, fmt.Errorf("%w %s: not a cluster", errInvalidInternalID, quote(cluster.Path))
	}
	path := "/api/" + APIClustersMgmtV1 + "/clusters/" + cluster.ClusterID + "/break_glass_credentials"
	creds := []Credential{}
	seen := map[string]bool{}
	for page := 1; page <= maxCredentialPages; page++ {
		// As ocm-sdk-go encodes Page and Size; the guard accepts nothing else.
		query := fmt.Sprintf("page=%d&size=%d", page, credentialPageSize)
		var p credentialPage
		code, err := c.call(ctx, cluster, path, query, func(ctx context.Context) (err error) {
			p, err = c.listCredentials(ctx, cluster, page)
			return err
		})
		c.logger.DebugContext(ctx, "cluster service break-glass credentials",
			"path", path, "page", page, "httpStatus", code, "items", len(p.items))
		where := "GET " + path + "?" + query
		switch {
		case err != nil:
			return nil, err
		case !p.isPage:
			return nil, fmt.Errorf("%s: malformed reply: not a page (no items, page, size or total)", where)
		case p.hasPage && p.page != page:
			return nil, fmt.Errorf("%s: malformed reply: page %d instead of %d", where, p.page, page)
		case len(p.items) > credentialPageSize:
			return nil, fmt.Errorf("%s: malformed reply: %d items, more than the page size %d", where, len(p.items), credentialPageSize)
		}
		for _, item := range p.items {
			cred := credential(item)
			switch {
			case cred.ID == "":
				return nil, fmt.Errorf("%s: malformed reply: an item is not a break-glass credential (no id)", where)
			case seen[cred.ID]:
				return nil, fmt.Errorf("%s: malformed reply: credential %s listed twice", where, quote(cred.ID))
			}
			seen[cred.ID] = true
			creds = append(creds, cred)
		}
		short := len(p.items) < credentialPageSize
		switch {
		case p.hasTotal && len(creds) > p.total:
			return nil, fmt.Errorf("%s: malformed reply: %d items so far, more than the total %d", where, len(creds), p.total)
		case p.hasTotal && len(creds) == p.total:
			return creds, nil
		case p.hasTotal && short:
			return nil, fmt.Errorf("%s: malformed reply: the list ends at %d items, short of its total %d", where, len(creds), p.total)
		case short:
			return creds, nil
		}
	}
	return nil, fmt.Errorf("GET %s: %w within %d pages of %d", path, errListDoesNotEnd, maxCredentialPages, credentialPageSize)
}

// credentialPage is one page of a credential list as it came.
type credentialPage struct {
	items             []*cmv1.BreakGlassCredential
	isPage            bool // the reply had items, a page, a size or a total
	page, total       int
	hasPage, hasTotal bool // the reply had a page, a total
}

// listCredentials sends the request of one page of the credential list.
func (c *Client) listCredentials(ctx context.Context, cluster InternalID, page int) (credentialPage, error) {
	resp, err := c.clustersMgmt.Clusters().Cluster(cluster.ClusterID).
		BreakGlassCredentials().List().Page(page).Size(credentialPageSize).SendContext(ctx)
	if err != nil {
		return credentialPage{}, parseError(resp.Status(), err)
	}
	list, hasItems := resp.GetItems()
	_, hasSize := resp.GetSize()
	p := credentialPage{items: list.Items()}
	p.page, p.hasPage = resp.GetPage()
	p.total, p.hasTotal = resp.GetTotal()
	p.isPage = hasItems || hasSize || p.hasPage || p.hasTotal
	return p, nil
}

// credential keeps what opstatus uses of a credential, bounded.
func credential(body *cmv1.BreakGlassCredential) Credential {
	return Credential{
		ID:         truncate(body.ID(), maxCodeBytes),
		Status:     truncate(string(body.Status()), maxStateBytes),
		Expiration: body.ExpirationTimestamp(),
	}
}

// getCluster sends the request through the typed client of id's API.
func (c *Client) getCluster(ctx context.Context, id InternalID) (Cluster, error) {
	switch id.API {
	case APIClustersMgmtV1:
		resp, err := c.clustersMgmt.Clusters().Cluster(id.ClusterID).Get().SendContext(ctx)
		if err != nil {
			return Cluster{}, parseError(resp.Status(), err)
		}
		body, _ := resp.GetBody()
		return Cluster{CreationTimestamp: body.CreationTimestamp(), ManagedResourceGroupName: body.Azure().ManagedResourceGroupName()}, nil
	case APIAroHCPV1alpha1:
		resp, err := c.aroHCP.Clusters().Cluster(id.ClusterID).Get().SendContext(ctx)
		if err != nil {
			return Cluster{}, parseError(resp.Status(), err)
		}
		body, _ := resp.GetBody()
		return Cluster{CreationTimestamp: body.CreationTimestamp(), ManagedResourceGroupName: body.Azure().ManagedResourceGroupName()}, nil
	}
	return Cluster{}, fmt.Errorf("%w %s: no client for %s %s", errInvalidInternalID, quote(id.Path), id.API, id.Kind)
}

// getExternalAuth sends the request through the aro_hcp client. found is
// false when the reply was no object with an id.
func (c *Client) getExternalAuth(ctx context.Context, id InternalID) (ea ExternalAuth, found bool, err error) {
	resp, err := c.aroHCP.Clusters().Cluster(id.ClusterID).ExternalAuthConfig().
		ExternalAuths().ExternalAuth(id.ExternalAuthID).Get().SendContext(ctx)
	if err != nil {
		return ea, false, parseError(resp.Status(), err)
	}
	body, ok := resp.GetBody()
	if !ok || body.ID() == "" {
		return ea, false, nil
	}
	status := body.Status()
	state, hasState := status.GetState()
	return ExternalAuth{HasState: hasState, State: state.Value(), Message: status.Message()}, true, nil
}

// parseError turns what ocm-sdk-go's JSON parser made of a 2xx reply into a
// malformed-reply error without the excerpt of the body it quotes:
// external auths carry client secrets and credentials kubeconfigs. Errors
// of the transport, of the reply's size, and of non-2xx replies pass
// unchanged.
func parseError(status int, err error) error {
	if status < 200 || status > 299 || errors.Is(err, ErrReplyTooLarge) || IsTransient(err) {
		return err
	}
	msg, _, _ := strings.Cut(err.Error(), ", error found in #")
	return fmt.Errorf("malformed reply: %s", truncate(msg, maxCodeBytes))
}
