// Package clusterservice reads from Cluster Service, through ocm-sdk-go,
// what opstatus needs of each kind of operation: the status of clusters and
// node pools, clusters, external auths and clusters_mgmt node pools
// themselves, and break-glass credentials. What they mean for an operation
// is poll's to decide.
package clusterservice

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	arohcp "github.com/openshift-online/ocm-sdk-go/arohcp/v1alpha1"
	cmv1 "github.com/openshift-online/ocm-sdk-go/clustersmgmt/v1"
	sdkerrors "github.com/openshift-online/ocm-sdk-go/errors"

	"github.com/opstatus/opstatus/internal/entra"
	"github.com/opstatus/opstatus/internal/telemetry"
)

// Defaults for Config.
const (
	DefaultTimeout       = 10 * time.Second
	DefaultMaxReplyBytes = 1 << 20
	// UserAgent is sent with every request.
	UserAgent = "opstatus"
)

// Connection pool sizing: up to 64 idle connections per host are kept;
// requests in flight beyond them (CLUSTER_SERVICE_MAX_IN_FLIGHT, 256 by
// default) dial connections that are closed once done. The number of
// connections is not capped: a poll that waited for one between its
// superseded check and its call could call Cluster Service twice in one
// scan interval.
const (
	maxIdleConnsPerHost = 64
	maxIdleConns        = 128
	idleConnTimeout     = 90 * time.Second
)

// ErrNotFound is returned (wrapped) when Cluster Service answers 404 with
// its own error body, an OCM error: the resource does not exist. A 404 with
// any other body (a router's or an ingress's page, a wrong URL) says nothing
// about the resource and is a non-transient error that does not wrap it.
var ErrNotFound = errors.New("clusterservice: not found")

// ErrReplyTooLarge is returned (wrapped) when a reply is larger than
// Config.MaxReplyBytes. The reply is not read past the limit.
var ErrReplyTooLarge = errors.New("clusterservice: reply too large")

// errRefused marks a request the client would not send (wrong host, path or
// query) or a redirect it would not follow.
var errRefused = errors.New("clusterservice: request refused")

// Config configures a Client.
type Config struct {
	// URL is the Cluster Service base URL (CLUSTER_SERVICE_URL): an absolute
	// http or https URL with a host and no path beyond "/".
	URL string
	// InsecureSkipVerify turns TLS verification off (local servers only). It
	// applies to the token endpoint too (one transport serves both).
	InsecureSkipVerify bool
	// RootCAs are trusted besides the system's roots
	// (CLUSTER_SERVICE_CA_BUNDLE): the CA of a gateway certificate that no
	// public CA issued. The token endpoint's connections trust them too.
	RootCAs []*x509.Certificate
	// ClientID, ClientSecret and TokenURL are OAuth client credentials. All
	// empty means unauthenticated; setting only some of them is an error.
	ClientID, ClientSecret, TokenURL string
	// Credential and Audience authenticate with Microsoft Entra ID: each
	// request carries a token of Credential (the app's managed identity)
	// for Audience (CLUSTER_SERVICE_AUDIENCE). Both or neither, and not
	// with client credentials.
	Credential azcore.TokenCredential
	Audience   string
	// Timeout bounds each request, token request included: each call, and
	// each page of Credentials. Default 10s.
	Timeout time.Duration
	// MaxReplyBytes bounds every reply body (Cluster Service and token
	// endpoint). Default 1 MiB.
	MaxReplyBytes int64
	// Logger receives debug records; nil discards them. Secrets are never
	// logged.
	Logger *slog.Logger
}

// Status is the part of a Cluster Service status that opstatus uses.
//
// For a cluster: State = state, ErrorCode = provision_error_code,
// ErrorMessage = provision_error_message, Description = description.
// For a node pool: State = state.value (NodePoolStateValue in ocm-sdk-go),
// ErrorMessage = message.
type Status struct {
	State        string
	ErrorCode    string
	ErrorMessage string
	Description  string
}

// Client reads statuses, inflight checks, objects and break-glass
// credentials from Cluster Service, and decides nothing about them. It is
// safe for concurrent use.
//
// It uses ocm-sdk-go's typed clients of the two APIs over its own transport
// (guardTransport) and token source rather than an ocm-sdk-go Connection,
// which would link every OCM API and its dependencies into the binary.
type Client struct {
	clustersMgmt *cmv1.Client
	aroHCP       *arohcp.Client
	transport    *http.Transport
	timeout      time.Duration
	logger       *slog.Logger
}

// NewClient validates cfg and builds a client. It does not contact any
// server: the first token is requested with the first call.
func NewClient(cfg Config) (*Client, error) {
	base, err := parseBaseURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	var token *url.URL
	switch countSet(cfg.ClientID, cfg.ClientSecret, cfg.TokenURL) {
	case 0:
	case 3:
		if token, err = parseTokenURL(cfg.TokenURL); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("clusterservice: ClientID, ClientSecret and TokenURL must be set together or not at all (missing: %s)",
			missingNames(cfg))
	}
	switch {
	case (cfg.Credential == nil) != (cfg.Audience == ""):
		return nil, fmt.Errorf("clusterservice: Credential and Audience must be set together or not at all")
	case cfg.Credential != nil && token != nil:
		return nil, fmt.Errorf("clusterservice: a managed identity (Credential, Audience) and client credentials are exclusive")
	}
	timeout := cfg.Timeout
	switch {
	case timeout < 0:
		return nil, fmt.Errorf("clusterservice: Timeout %s is negative", timeout)
	case timeout == 0:
		timeout = DefaultTimeout
	}
	maxReply := cfg.MaxReplyBytes
	switch {
	case maxReply < 0:
		return nil, fmt.Errorf("clusterservice: MaxReplyBytes %d is negative", maxReply)
	case maxReply == 0:
		maxReply = DefaultMaxReplyBytes
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}

	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConns = maxIdleConns
	transport.MaxIdleConnsPerHost = maxIdleConnsPerHost
	transport.IdleConnTimeout = idleConnTimeout
	transport.TLSHandshakeTimeout = DefaultTimeout
	transport.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: cfg.InsecureSkipVerify} //nolint:gosec // local servers only, documented
	if len(cfg.RootCAs) > 0 {
		transport.TLSClientConfig.RootCAs = rootCAs(cfg.RootCAs)
	}
	// Each Cluster Service request is traced and timed; the token endpoint's
	// are not.
	guard := &guardTransport{base: base, maxReply: maxReply, next: telemetry.Transport(transport)}
	switch {
	case token != nil:
		guard.tokens = newTokenSource(token, cfg.ClientID, cfg.ClientSecret, transport, maxReply, logger)
	case cfg.Credential != nil:
		guard.tokens = entraTokens{entra.NewTokens(cfg.Credential, entra.Scope(cfg.Audience), logger)}
	}
	return &Client{
		clustersMgmt: cmv1.NewClient(guard, "/api/clusters_mgmt/v1"),
		aroHCP:       arohcp.NewClient(guard, "/api/aro_hcp/v1alpha1"),
		transport:    transport,
		timeout:      timeout,
		logger:       logger,
	}, nil
}

// rootCAs is the system's roots and cas. Without the system's (none
// found), it is cas alone.
func rootCAs(cas []*x509.Certificate) *x509.CertPool {
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	for _, c := range cas {
		pool.AddCert(c)
	}
	return pool
}

// Close releases the client's idle connections.
func (c *Client) Close() error {
	c.transport.CloseIdleConnections()
	return nil
}

// Status reads GET {URL}{id.Path}/status. A 404 whose body is an OCM error
// (JSON, by its Content-Type when it has one, with "kind":"Error") returns
// an error wrapping ErrNotFound; any other 404 returns a non-transient error
// that says what came back, and one whose body breaks off a transport error.
// See IsTransient for the other errors. A node pool of the clusters_mgmt
// form is refused without a request: that API has no node pool status, and
// the 404 of a path it does not serve would say nothing about the node pool
// (read it under aro_hcp, InAPI).
func (c *Client) Status(ctx context.Context, id InternalID) (Status, error) {
	switch {
	case id.Kind != KindCluster && id.Kind != KindNodePool:
		return Status{}, fmt.Errorf("%w %s: only clusters and node pools have a status", errInvalidInternalID, quote(id.Path))
	case id.Kind == KindNodePool && id.API != APIAroHCPV1alpha1:
		return Status{}, fmt.Errorf("%w %s: %s has no node pool status", errInvalidInternalID, quote(id.Path), id.API)
	}
	var st Status
	var found bool
	path := id.Path + "/status"
	code, err := c.call(ctx, id, path, "", func(ctx context.Context) (err error) {
		st, found, err = c.get(ctx, id)
		return err
	})
	c.logger.DebugContext(ctx, "cluster service status", "path", path, "httpStatus", code, "state", st.State)
	switch {
	case err != nil:
		return Status{}, err
	case !found && id.Kind == KindNodePool:
		return Status{}, fmt.Errorf("GET %s: malformed reply: no state.value", path)
	case !found:
		return Status{}, fmt.Errorf("GET %s: malformed reply: no state", path)
	}
	return st.bounded(), nil
}

// InflightCheck is the part of a Cluster Service inflight check that
// opstatus uses.
type InflightCheck struct {
	// Name names the check, such as "egress".
	Name string
	// State is the check's state as Cluster Service sent it: passed,
	// failed, pending or running.
	State string
	// Error is the check's details.error, Cluster Service's message for a
	// failed check; empty when the details hold no such string.
	Error string
}

// maxInflightChecks bounds the checks InflightChecks returns. It is
// Cluster Service's default page size, so a real list is never cut.
const maxInflightChecks = 100

// InflightChecks reads GET {URL}{id.Path}/inflight_checks, the inflight
// checks of a cluster, through the API of id's form. A node pool's id is
// refused without a request. Its errors are Status's, and a reply without
// items is malformed. The first maxInflightChecks checks are returned, their
// strings bounded as Status bounds its own.
func (c *Client) InflightChecks(ctx context.Context, id InternalID) ([]InflightCheck, error) {
	if id.Kind != KindCluster {
		return nil, fmt.Errorf("%w %s: only clusters have inflight checks", errInvalidInternalID, quote(id.Path))
	}
	var checks []InflightCheck
	var found bool
	path := id.Path + "/inflight_checks"
	code, err := c.call(ctx, id, path, "", func(ctx context.Context) (err error) {
		checks, found, err = c.listInflightChecks(ctx, id)
		return err
	})
	c.logger.DebugContext(ctx, "cluster service inflight checks", "path", path, "httpStatus", code, "checks", len(checks))
	switch {
	case err != nil:
		return nil, err
	case !found:
		return nil, fmt.Errorf("GET %s: malformed reply: no items", path)
	}
	return checks, nil
}

// call makes send's one request, to path with the raw query string query
// (empty for none), as an exchange of its own, and turns what the transport
// guard saw into the error of the call. It returns the reply's HTTP status,
// or 0 when none came.
func (c *Client) call(ctx context.Context, id InternalID, path, query string, send func(context.Context) error) (int, error) {
	// The fields go to ocm-sdk-go and the Path to the transport guard: only an
	// ID exactly as ParseInternalID returns it is accepted.
	if parsed, err := ParseInternalID(id.Path); err != nil {
		return 0, err
	} else if parsed != id {
		return 0, fmt.Errorf("%w %s: fields do not match the path", errInvalidInternalID, quote(id.Path))
	}

	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	ex := &exchange{path: path, query: query}
	ctx = context.WithValue(ctx, exchangeKey{}, ex)

	err := send(ctx)
	code, tooLarge, nf := ex.result()
	where := "GET " + path
	if query != "" {
		where += "?" + query
	}
	switch {
	case tooLarge:
		return code, fmt.Errorf("%s: %w", where, ErrReplyTooLarge)
	case code == http.StatusNotFound && nf == nil && err != nil:
		// The body could not be read: what the 404 was is unknown.
		return code, fmt.Errorf("%s: HTTP 404 Not Found: reading the body: %w", where, err)
	case code == http.StatusNotFound && nf != nil && nf.ocmError:
		return code, fmt.Errorf("%s: %w", where, ErrNotFound)
	case code == http.StatusNotFound && nf != nil:
		return code, fmt.Errorf("%s: %w", where, &httpStatusError{code: code, detail: "not an OCM error (" + nf.what + ")"})
	case code != 0 && (code < 200 || code > 299):
		return code, fmt.Errorf("%s: %w", where, &httpStatusError{code: code, err: err})
	case err != nil:
		return code, fmt.Errorf("%s: %w", where, err)
	}
	return code, nil
}

// Bounds on the strings of a status. Cluster Service's own are far shorter;
// longer ones would reach logs, the operation item and ARM as they are.
const (
	maxStateBytes   = 64
	maxCodeBytes    = 128
	maxMessageBytes = 4 << 10
)

// bounded cuts every string of st to its bound, on a rune boundary, marking
// the cut with "…". A cut state matches no known state, so it is unhandled.
func (st Status) bounded() Status {
	st.State = truncate(st.State, maxStateBytes)
	st.ErrorCode = truncate(st.ErrorCode, maxCodeBytes)
	st.ErrorMessage = truncate(st.ErrorMessage, maxMessageBytes)
	st.Description = truncate(st.Description, maxMessageBytes)
	return st
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// get sends the request through the typed client for id. found is false when
// the reply had no state.
func (c *Client) get(ctx context.Context, id InternalID) (st Status, found bool, err error) {
	switch {
	case id.Kind == KindCluster && id.API == APIClustersMgmtV1:
		var resp *cmv1.ClusterStatusGetResponse
		resp, err = c.clustersMgmt.Clusters().Cluster(id.ClusterID).Status().Get().SendContext(ctx)
		if err != nil {
			return st, false, err
		}
		body, ok := resp.GetBody()
		if !ok {
			return st, false, nil
		}
		state, ok := body.GetState()
		return Status{
			State:        string(state),
			ErrorCode:    body.ProvisionErrorCode(),
			ErrorMessage: body.ProvisionErrorMessage(),
			Description:  body.Description(),
		}, ok, nil
	case id.Kind == KindCluster && id.API == APIAroHCPV1alpha1:
		var resp *arohcp.ClusterStatusGetResponse
		resp, err = c.aroHCP.Clusters().Cluster(id.ClusterID).Status().Get().SendContext(ctx)
		if err != nil {
			return st, false, err
		}
		body, ok := resp.GetBody()
		if !ok {
			return st, false, nil
		}
		state, ok := body.GetState()
		return Status{
			State:        string(state),
			ErrorCode:    body.ProvisionErrorCode(),
			ErrorMessage: body.ProvisionErrorMessage(),
			Description:  body.Description(),
		}, ok, nil
	case id.Kind == KindNodePool && id.API == APIAroHCPV1alpha1:
		var resp *arohcp.NodePoolStatusGetResponse
		resp, err = c.aroHCP.Clusters().Cluster(id.ClusterID).
			NodePools().NodePool(id.NodePoolID).Status().Get().SendContext(ctx)
		if err != nil {
			return st, false, err
		}
		body, ok := resp.GetBody()
		if !ok {
			return st, false, nil
		}
		state, ok := body.GetState()
		if !ok {
			return st, false, nil
		}
		value, ok := state.GetNodePoolStateValue()
		return Status{State: value, ErrorMessage: body.Message()}, ok, nil
	}
	return st, false, fmt.Errorf("%w %s: no client for %s %s", errInvalidInternalID, quote(id.Path), id.API, id.Kind)
}

// listInflightChecks sends the request through the typed client of id's
// API. found is false when the reply had no items.
func (c *Client) listInflightChecks(ctx context.Context, id InternalID) (checks []InflightCheck, found bool, err error) {
	switch id.API {
	case APIClustersMgmtV1:
		var resp *cmv1.InflightChecksListResponse
		resp, err = c.clustersMgmt.Clusters().Cluster(id.ClusterID).InflightChecks().List().SendContext(ctx)
		if err != nil {
			return nil, false, err
		}
		list, ok := resp.GetItems()
		if !ok {
			return nil, false, nil
		}
		for _, item := range list.Items() {
			checks = append(checks, inflightCheck(item.Name(), string(item.State()), item.Details()))
		}
	case APIAroHCPV1alpha1:
		var resp *arohcp.InflightChecksListResponse
		resp, err = c.aroHCP.Clusters().Cluster(id.ClusterID).InflightChecks().List().SendContext(ctx)
		if err != nil {
			return nil, false, err
		}
		list, ok := resp.GetItems()
		if !ok {
			return nil, false, nil
		}
		for _, item := range list.Items() {
			checks = append(checks, inflightCheck(item.Name(), string(item.State()), item.Details()))
		}
	default:
		return nil, false, fmt.Errorf("%w %s: no client for %s %s", errInvalidInternalID, quote(id.Path), id.API, id.Kind)
	}
	if len(checks) > maxInflightChecks {
		checks = checks[:maxInflightChecks]
	}
	if checks == nil {
		checks = []InflightCheck{}
	}
	return checks, true, nil
}

// inflightCheck keeps what opstatus uses of a check, bounded. details is
// free-form JSON in the API model; Cluster Service puts a failed check's
// message in its "error" string.
func inflightCheck(name, state string, details any) InflightCheck {
	fields, _ := details.(map[string]any)
	msg, _ := fields["error"].(string)
	return InflightCheck{
		Name:  truncate(name, maxCodeBytes),
		State: truncate(state, maxStateBytes),
		Error: truncate(msg, maxMessageBytes),
	}
}

// httpStatusError is a non-2xx reply other than a 404 from Cluster Service.
type httpStatusError struct {
	code   int
	err    error  // what ocm-sdk-go made of the reply; may be nil
	detail string // what the reply was, when that says more than err
}

func (e *httpStatusError) Error() string {
	msg := fmt.Sprintf("HTTP %d %s", e.code, http.StatusText(e.code))
	if e.detail != "" {
		return msg + ": " + e.detail
	}
	var sdkErr *sdkerrors.Error
	if errors.As(e.err, &sdkErr) {
		// Cluster Service's own error: code and reason, no headers or
		// bodies, bounded as its other strings are.
		return fmt.Sprintf("%s: %s: %s", msg, truncate(sdkErr.Code(), maxCodeBytes), truncate(sdkErr.Reason(), maxMessageBytes))
	}
	if e.err != nil {
		return msg + ": " + e.err.Error()
	}
	return msg
}

func (e *httpStatusError) Unwrap() error { return e.err }

// IsTransient reports whether err is worth retrying later: 5xx and 429
// replies (from Cluster Service, the token endpoint or the managed
// identity's endpoint), timeouts, context deadlines and cancellations,
// refused, reset or dropped connections, and the network's failures on the
// way to the host: any DNS failure, an unreachable or down network or
// host, a TCP timeout. 404s (ErrNotFound and a 404 that is not an OCM
// error), other 4xx replies, invalid IDs, redirects, oversized and
// malformed replies are not transient, nor is a certificate that is not
// trusted.
//
// Every DNS failure counts, NXDOMAIN too: the only names resolved are the
// configured hosts', so a failure says nothing about an operation and hits
// all of them at once; a private DNS zone unlinked from the VNet, or its
// record lost, answers NXDOMAIN for an internal name, which resolvers then
// cache. A host name set wrong keeps every operation pending rather than
// failing them, and shows as status code 0 in the request metric.
func IsTransient(err error) bool {
	if err == nil || errors.Is(err, ErrNotFound) || errors.Is(err, ErrReplyTooLarge) ||
		errors.Is(err, errRefused) || errors.Is(err, errInvalidInternalID) {
		return false
	}
	var hs *httpStatusError
	if errors.As(err, &hs) {
		return hs.code >= 500 || hs.code == http.StatusTooManyRequests
	}
	var identity *entra.StatusError
	if errors.As(err, &identity) {
		return identity.Code >= 500 || identity.Code == http.StatusTooManyRequests
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return true
	}
	// By errno wherever it sits in the chain: the first net.Error of a
	// chain (a url.Error around a wrapped read error) can hide the
	// Timeout() of an ETIMEDOUT below it.
	for _, errno := range []error{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED, syscall.EPIPE,
		syscall.ETIMEDOUT, syscall.ENETUNREACH, syscall.EHOSTUNREACH, syscall.ENETDOWN, syscall.EHOSTDOWN, syscall.ENETRESET} {
		if errors.Is(err, errno) {
			return true
		}
	}
	// A connection that ends early: before the reply (io.EOF from the
	// transport) or in the middle of a body with a Content-Length.
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	var ue *url.Error
	return errors.As(err, &ue) && errors.Is(ue.Err, io.EOF)
}

// exchange carries one request's expectations (a call, or one page of
// Credentials) to the transport guard and what the guard saw back to the
// call.
type exchange struct {
	path  string // the only Cluster Service path this call may request
	query string // its only raw query string, empty for none

	mu       sync.Mutex
	code     int // Cluster Service reply status
	tooLarge bool
	notFound *notFoundReply // set once a 404's body has been read whole
}

type exchangeKey struct{}

// notFoundReply is what a 404's body was.
type notFoundReply struct {
	ocmError bool   // Cluster Service's own error: the resource does not exist
	what     string // otherwise, a short description of the reply
}

func (e *exchange) result() (code int, tooLarge bool, notFound *notFoundReply) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.code, e.tooLarge, e.notFound
}

func (e *exchange) recordNotFound(r *notFoundReply) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.notFound = r
}

func (e *exchange) record(code int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.code = code
}

func (e *exchange) markTooLarge() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.tooLarge = true
}

// accessTokens gives the access token each Cluster Service request
// carries.
type accessTokens interface {
	get(ctx context.Context) (string, error)
	// invalidate is told that Cluster Service refused token.
	invalidate(ctx context.Context, token string)
}

// entraTokens are the managed identity's tokens for Cluster Service's
// audience. A token Cluster Service refuses is kept (see entra.Tokens): a
// 401 is not transient and says so.
type entraTokens struct{ *entra.Tokens }

func (e entraTokens) get(ctx context.Context) (string, error) { return e.Token(ctx) }

func (entraTokens) invalidate(context.Context, string) {}

// guardTransport is the transport of both typed clients. It completes
// their relative requests with the base URL, the User-Agent and the access
// token, sends only the one request (path and query) an exchange expects,
// never follows redirects, bounds reply bodies, records reply statuses and
// reads each 404 whole to tell Cluster Service's own error from any other
// page.
type guardTransport struct {
	base     *url.URL
	maxReply int64
	tokens   accessTokens // nil when unauthenticated
	next     http.RoundTripper
}

func (g *guardTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ex, _ := req.Context().Value(exchangeKey{}).(*exchange)
	switch {
	case ex == nil:
		return nil, fmt.Errorf("%w: %s %s outside of a Client call", errRefused, req.Method, req.URL.Redacted())
	case req.URL.IsAbs() || req.URL.Host != "" || req.Method != http.MethodGet || req.URL.Path != ex.path ||
		req.URL.RawPath != "" || req.URL.RawQuery != ex.query || req.URL.ForceQuery || req.URL.Fragment != "":
		return nil, fmt.Errorf("%w: %s %s is not the expected request", errRefused, req.Method, req.URL.Redacted())
	}
	// A RoundTripper must not modify its request.
	out := req.Clone(req.Context())
	out.URL.Scheme, out.URL.Host, out.Host = g.base.Scheme, g.base.Host, ""
	if out.Header == nil {
		out.Header = http.Header{}
	}
	out.Header.Set("User-Agent", UserAgent)
	out.Header.Set("Accept", "application/json")
	var token string
	if g.tokens != nil {
		var err error
		if token, err = g.tokens.get(req.Context()); err != nil {
			return nil, err
		}
		out.Header.Set("Authorization", "Bearer "+token)
	}

	resp, err := g.next.RoundTrip(out)
	if err != nil {
		// Wrapped like net/http.Client does (see IsTransient).
		return nil, &url.Error{Op: "Get", URL: out.URL.Redacted(), Err: err}
	}
	ex.record(resp.StatusCode)
	if resp.StatusCode == http.StatusUnauthorized && token != "" {
		g.tokens.invalidate(req.Context(), token)
	}
	if resp.StatusCode >= 300 && resp.StatusCode <= 399 {
		_ = resp.Body.Close()
		return nil, fmt.Errorf("%w: redirect %d from %s is not followed", errRefused, resp.StatusCode, out.URL.Redacted())
	}
	if resp.ContentLength > g.maxReply {
		_ = resp.Body.Close()
		ex.markTooLarge()
		return nil, fmt.Errorf("%w: Content-Length %d, limit %d", ErrReplyTooLarge, resp.ContentLength, g.maxReply)
	}
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		// An HTML page from a proxy in front of Cluster Service says more
		// by its type than by the JSON error its first byte would give.
		if ct := resp.Header.Get("Content-Type"); ct != "" {
			if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
				_ = resp.Body.Close()
				return nil, fmt.Errorf("malformed reply: content type %s, want application/json", quote(truncate(ct, maxCodeBytes)))
			}
		}
	}
	body := &limitedBody{rc: resp.Body, max: g.maxReply, ex: ex}
	if resp.StatusCode == http.StatusNotFound {
		// ocm-sdk-go makes an error of any JSON object whatever its kind, and
		// none of an empty body, so only the body itself tells a deleted
		// resource from a 404 that something else sent. ocm-sdk-go then
		// reads the body as it was read here.
		data, err := io.ReadAll(body)
		_ = body.Close()
		if err != nil {
			return nil, &url.Error{Op: "Get", URL: out.URL.Redacted(), Err: err}
		}
		ex.recordNotFound(judgeNotFound(resp.Header.Get("Content-Type"), data))
		resp.Body = io.NopCloser(bytes.NewReader(data))
		return resp, nil
	}
	resp.Body = body
	return resp, nil
}

// maxSnippetBytes bounds the part of a body quoted in an error.
const maxSnippetBytes = 64

// judgeNotFound decides whether a 404's reply is an OCM error: JSON (by its
// Content-Type, when it has one) holding an object whose "kind" is "Error",
// as Cluster Service writes every error. Otherwise it describes the reply
// by its content type and a short snippet of its body.
func judgeNotFound(contentType string, body []byte) *notFoundReply {
	var what []string
	jsonType := true
	if contentType == "" {
		what = append(what, "no content type")
	} else {
		what = append(what, "content type "+quote(truncate(contentType, maxCodeBytes)))
		mt, _, err := mime.ParseMediaType(contentType)
		jsonType = err == nil && mt == "application/json"
	}
	if len(body) == 0 {
		return &notFoundReply{what: strings.Join(append(what, "empty body"), ", ")}
	}
	if jsonType {
		var fields map[string]json.RawMessage
		var kind string
		switch {
		case json.Unmarshal(body, &fields) != nil || fields == nil:
			what = append(what, "not a JSON object")
		case json.Unmarshal(fields["kind"], &kind) != nil || kind != "Error":
			what = append(what, `no "kind":"Error"`)
		default:
			return &notFoundReply{ocmError: true}
		}
	}
	what = append(what, fmt.Sprintf("body %q", truncate(string(body), maxSnippetBytes)))
	return &notFoundReply{what: strings.Join(what, ", ")}
}

// limitedBody fails with ErrReplyTooLarge once more than max bytes arrive.
// ocm-sdk-go then closes it, which drops the connection without reading the
// rest.
type limitedBody struct {
	rc  io.ReadCloser
	max int64
	n   int64
	ex  *exchange
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.n > b.max {
		return 0, ErrReplyTooLarge
	}
	// Read at most one byte past the limit: enough to know it was exceeded.
	if room := b.max - b.n + 1; int64(len(p)) > room {
		p = p[:room]
	}
	n, err := b.rc.Read(p)
	b.n += int64(n)
	if b.n > b.max {
		b.ex.markTooLarge()
		return n - int(b.n-b.max), ErrReplyTooLarge
	}
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }

// parseBaseURL checks Config.URL.
func parseBaseURL(raw string) (*url.URL, error) {
	u, err := parseHTTPURL("URL", raw)
	if err != nil {
		return nil, err
	}
	if u.Path != "" && u.Path != "/" || u.RawPath != "" {
		return nil, fmt.Errorf("clusterservice: URL %q must not have a path", u.Redacted())
	}
	return &url.URL{Scheme: u.Scheme, Host: u.Host}, nil
}

// parseTokenURL checks Config.TokenURL.
func parseTokenURL(raw string) (*url.URL, error) {
	u, err := parseHTTPURL("TokenURL", raw)
	if err != nil {
		return nil, err
	}
	if u.RawPath != "" {
		return nil, fmt.Errorf("clusterservice: TokenURL %q must not be percent-encoded", u.Redacted())
	}
	return u, nil
}

// parseHTTPURL accepts an absolute http or https URL with a host and no user
// information, query or fragment.
func parseHTTPURL(name, raw string) (*url.URL, error) {
	if raw == "" {
		return nil, fmt.Errorf("clusterservice: %s is required", name)
	}
	u, err := url.Parse(raw)
	if err != nil {
		// url.Parse quotes the input in its error; it may hold credentials.
		return nil, fmt.Errorf("clusterservice: %s is not a valid URL", name)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("clusterservice: %s %q must be an absolute http or https URL", name, u.Redacted())
	case u.User != nil:
		return nil, fmt.Errorf("clusterservice: %s must not contain user information", name)
	case u.Hostname() == "":
		return nil, fmt.Errorf("clusterservice: %s %q has no host", name, u.Redacted())
	case u.RawQuery != "" || u.ForceQuery:
		return nil, fmt.Errorf("clusterservice: %s %q must not have a query", name, u.Redacted())
	case u.Fragment != "":
		return nil, fmt.Errorf("clusterservice: %s %q must not have a fragment", name, u.Redacted())
	case u.Opaque != "":
		return nil, fmt.Errorf("clusterservice: %s %q must be an absolute URL", name, u.Redacted())
	}
	return u, nil
}

func countSet(values ...string) int {
	n := 0
	for _, v := range values {
		if v != "" {
			n++
		}
	}
	return n
}

func missingNames(cfg Config) string {
	var missing []string
	for _, f := range []struct{ name, value string }{
		{"ClientID", cfg.ClientID}, {"ClientSecret", cfg.ClientSecret}, {"TokenURL", cfg.TokenURL},
	} {
		if f.value == "" {
			missing = append(missing, f.name)
		}
	}
	return strings.Join(missing, ", ")
}
