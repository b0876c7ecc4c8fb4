// Package clusterservice reads the status of clusters and node pools from
// Cluster Service through ocm-sdk-go, and maps it onto ARM provisioning
// states (Decide).
package clusterservice

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	sdk "github.com/openshift-online/ocm-sdk-go"
	arohcp "github.com/openshift-online/ocm-sdk-go/arohcp/v1alpha1"
	cmv1 "github.com/openshift-online/ocm-sdk-go/clustersmgmt/v1"
	sdkerrors "github.com/openshift-online/ocm-sdk-go/errors"
	"github.com/openshift-online/ocm-sdk-go/logging"
)

// Defaults for Config.
const (
	DefaultTimeout       = 10 * time.Second
	DefaultMaxReplyBytes = 1 << 20
	// UserAgent is sent with every request.
	UserAgent = "opstatus"
)

// Connection pool sizing: enough idle connections per host for about 32
// concurrent polls to reuse their connections.
const (
	maxIdleConnsPerHost = 64
	maxIdleConns        = 128
	idleConnTimeout     = 90 * time.Second
)

// ErrNotFound is returned (wrapped) when Cluster Service answers 404.
var ErrNotFound = errors.New("clusterservice: not found")

// ErrReplyTooLarge is returned (wrapped) when a reply is larger than
// Config.MaxReplyBytes. The reply is not read past the limit.
var ErrReplyTooLarge = errors.New("clusterservice: reply too large")

// errRefused marks a request the client would not send (wrong host or path)
// or a redirect it would not follow.
var errRefused = errors.New("clusterservice: request refused")

// Config configures a Client.
type Config struct {
	// URL is the Cluster Service base URL (CLUSTER_SERVICE_URL): an absolute
	// http or https URL with a host and no path beyond "/".
	URL string
	// InsecureSkipVerify turns TLS verification off (local servers only). It
	// applies to the token endpoint too (ocm-sdk-go shares the setting).
	InsecureSkipVerify bool
	// ClientID, ClientSecret and TokenURL are OAuth client credentials. All
	// empty means unauthenticated; setting only some of them is an error.
	ClientID, ClientSecret, TokenURL string
	// Timeout bounds each Status call, token request included. Default 10s.
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

// Client reads statuses from Cluster Service. It is safe for concurrent use.
type Client struct {
	conn    *sdk.Connection
	timeout time.Duration
	logger  *slog.Logger
}

// NewClient validates cfg and builds a client. It does not contact any
// server: the first token is requested with the first Status call.
func NewClient(ctx context.Context, cfg Config) (*Client, error) {
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

	guard := &guardTransport{base: originOf(base), maxReply: maxReply}
	var b *sdk.ConnectionBuilder
	if token == nil {
		b = sdk.NewUnauthenticatedConnectionBuilder()
	} else {
		guard.token = originOf(token)
		guard.tokenPath = token.Path
		b = sdk.NewConnectionBuilder().
			TokenURL(cfg.TokenURL).
			Client(cfg.ClientID, cfg.ClientSecret)
	}
	conn, err := b.
		Logger(&sdkLogger{logger: logger, secret: cfg.ClientSecret}).
		URL(base.String()).
		Agent(UserAgent).
		Insecure(cfg.InsecureSkipVerify).
		// No SDK retries: its back-off sleeps ignore the context, and the
		// Functions host retries the queue message anyway.
		RetryLimit(0).
		TransportWrapper(guard.wrap).
		BuildContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("clusterservice: building connection: %w", err)
	}
	return &Client{conn: conn, timeout: timeout, logger: logger}, nil
}

// Close releases the client's connections.
func (c *Client) Close() error {
	if err := c.conn.Close(); err != nil {
		return fmt.Errorf("clusterservice: closing connection: %w", err)
	}
	return nil
}

// Status reads GET {URL}{id.Path}/status. A 404 returns an error wrapping
// ErrNotFound; see IsTransient for the other errors.
func (c *Client) Status(ctx context.Context, id InternalID) (Status, error) {
	// The fields go to ocm-sdk-go and the Path to the transport guard: only an
	// ID exactly as ParseInternalID returns it is accepted.
	if parsed, err := ParseInternalID(id.Path); err != nil {
		return Status{}, err
	} else if parsed != id {
		return Status{}, fmt.Errorf("%w %s: fields do not match the path", errInvalidInternalID, quote(id.Path))
	}

	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	ex := &exchange{path: id.Path + "/status"}
	ctx = context.WithValue(ctx, exchangeKey{}, ex)

	st, found, err := c.get(ctx, id)
	code, tokenCode, tooLarge := ex.result()
	c.logger.DebugContext(ctx, "cluster service status", "path", ex.path, "httpStatus", code, "state", st.State)

	where := "GET " + ex.path
	switch {
	case tooLarge:
		return Status{}, fmt.Errorf("%s: %w", where, ErrReplyTooLarge)
	case code == http.StatusNotFound:
		return Status{}, fmt.Errorf("%s: %w", where, ErrNotFound)
	case code != 0 && (code < 200 || code > 299):
		return Status{}, fmt.Errorf("%s: %w", where, &httpStatusError{code: code, err: err})
	case err != nil && code == 0 && tokenCode != 0 && tokenCode != http.StatusOK:
		return Status{}, fmt.Errorf("%s: token endpoint: %w", where, &httpStatusError{code: tokenCode, err: err})
	case err != nil:
		return Status{}, fmt.Errorf("%s: %w", where, err)
	case !found && id.Kind == KindNodePool:
		return Status{}, fmt.Errorf("%s: malformed reply: no state.value", where)
	case !found:
		return Status{}, fmt.Errorf("%s: malformed reply: no state", where)
	}
	return st.bounded(), nil
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
		resp, err = c.conn.ClustersMgmt().V1().Clusters().Cluster(id.ClusterID).Status().Get().SendContext(ctx)
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
		resp, err = c.conn.AroHCP().V1alpha1().Clusters().Cluster(id.ClusterID).Status().Get().SendContext(ctx)
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
		resp, err = c.conn.AroHCP().V1alpha1().Clusters().Cluster(id.ClusterID).
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

// httpStatusError is a non-2xx reply other than 404.
type httpStatusError struct {
	code int
	err  error // what ocm-sdk-go made of the reply; may be nil
}

func (e *httpStatusError) Error() string {
	msg := fmt.Sprintf("HTTP %d %s", e.code, http.StatusText(e.code))
	var sdkErr *sdkerrors.Error
	if errors.As(e.err, &sdkErr) {
		// Cluster Service's own error: code and reason, no headers or bodies.
		return fmt.Sprintf("%s: %s: %s", msg, sdkErr.Code(), sdkErr.Reason())
	}
	if e.err != nil {
		return msg + ": " + e.err.Error()
	}
	return msg
}

func (e *httpStatusError) Unwrap() error { return e.err }

// IsTransient reports whether err is worth retrying later: 5xx and 429
// replies (from Cluster Service or the token endpoint), timeouts, context
// deadlines and cancellations, refused, reset or dropped connections. 404,
// other 4xx replies, invalid IDs, redirects, oversized and malformed replies
// are not transient.
func IsTransient(err error) bool {
	if err == nil || errors.Is(err, ErrNotFound) || errors.Is(err, ErrReplyTooLarge) ||
		errors.Is(err, errRefused) || errors.Is(err, errInvalidInternalID) {
		return false
	}
	var hs *httpStatusError
	if errors.As(err, &hs) {
		return hs.code >= 500 || hs.code == http.StatusTooManyRequests
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	for _, errno := range []error{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED, syscall.EPIPE} {
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

// exchange carries one Status call's expectations to the transport guard and
// what the guard saw back to Status.
type exchange struct {
	path string // the only Cluster Service path this call may request

	mu        sync.Mutex
	code      int // last Cluster Service reply status
	tokenCode int // last token endpoint reply status
	tooLarge  bool
}

type exchangeKey struct{}

func (e *exchange) result() (code, tokenCode int, tooLarge bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.code, e.tokenCode, e.tooLarge
}

func (e *exchange) record(token bool, code int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if token {
		e.tokenCode = code
	} else {
		e.code = code
	}
}

func (e *exchange) markTooLarge() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.tooLarge = true
}

// origin is a normalized scheme, host and port.
type origin struct{ scheme, host, port string }

func originOf(u *url.URL) origin {
	scheme := strings.ToLower(u.Scheme)
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[scheme]
	}
	return origin{scheme: scheme, host: strings.ToLower(u.Hostname()), port: port}
}

// guardTransport is the innermost transport wrapper of every HTTP client that
// ocm-sdk-go creates (Cluster Service and token endpoint). It sends only the
// one request a Status call expects, never follows redirects, bounds reply
// bodies, records reply statuses, and sizes the connection pool.
type guardTransport struct {
	base      origin
	token     origin // zero when unauthenticated
	tokenPath string
	maxReply  int64
}

// wrap is given to ConnectionBuilder.TransportWrapper.
func (g *guardTransport) wrap(next http.RoundTripper) http.RoundTripper {
	if t, ok := next.(*http.Transport); ok {
		// ocm-sdk-go builds a fresh transport for us with the default of 2
		// idle connections per host; polls run concurrently.
		t.MaxIdleConns = maxIdleConns
		t.MaxIdleConnsPerHost = maxIdleConnsPerHost
		t.IdleConnTimeout = idleConnTimeout
		t.TLSHandshakeTimeout = DefaultTimeout
	}
	return &guardRoundTripper{guard: g, next: next}
}

type guardRoundTripper struct {
	guard *guardTransport
	next  http.RoundTripper
}

func (rt *guardRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	g := rt.guard
	ex, _ := req.Context().Value(exchangeKey{}).(*exchange)
	if ex == nil {
		return nil, fmt.Errorf("%w: %s %s outside of Client.Status", errRefused, req.Method, req.URL.Redacted())
	}
	o := originOf(req.URL)
	var isToken bool
	switch {
	case o == g.base && req.Method == http.MethodGet && req.URL.Path == ex.path && req.URL.RawQuery == "":
	case g.token != (origin{}) && o == g.token && req.Method == http.MethodPost && req.URL.Path == g.tokenPath:
		isToken = true
	default:
		return nil, fmt.Errorf("%w: %s %s is not the expected request", errRefused, req.Method, req.URL.Redacted())
	}
	if req.Header.Get("User-Agent") != UserAgent {
		req = req.Clone(req.Context()) // a RoundTripper must not modify its request
		req.Header.Set("User-Agent", UserAgent)
	}

	resp, err := rt.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	ex.record(isToken, resp.StatusCode)
	if resp.StatusCode >= 300 && resp.StatusCode <= 399 {
		_ = resp.Body.Close()
		return nil, fmt.Errorf("%w: redirect %d from %s is not followed", errRefused, resp.StatusCode, req.URL.Redacted())
	}
	if resp.ContentLength > g.maxReply {
		_ = resp.Body.Close()
		ex.markTooLarge()
		return nil, fmt.Errorf("%w: Content-Length %d, limit %d", ErrReplyTooLarge, resp.ContentLength, g.maxReply)
	}
	resp.Body = &limitedBody{rc: resp.Body, max: g.maxReply, ex: ex}
	return resp, nil
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

// sdkLogger adapts ocm-sdk-go's logger to slog. Debug and info are reported
// as disabled: with debug enabled ocm-sdk-go installs a transport wrapper
// that dumps requests and replies, token replies included. Its warnings and
// errors go to slog at debug level, with the client secret masked should it
// ever appear.
type sdkLogger struct {
	logger *slog.Logger
	secret string
}

var _ logging.Logger = (*sdkLogger)(nil)

func (l *sdkLogger) DebugEnabled() bool { return false }
func (l *sdkLogger) InfoEnabled() bool  { return false }
func (l *sdkLogger) WarnEnabled() bool {
	return l.logger.Enabled(context.Background(), slog.LevelDebug)
}
func (l *sdkLogger) ErrorEnabled() bool { return l.WarnEnabled() }

func (l *sdkLogger) Debug(context.Context, string, ...any) {}
func (l *sdkLogger) Info(context.Context, string, ...any)  {}
func (l *sdkLogger) Warn(ctx context.Context, format string, args ...any) {
	l.log(ctx, "warn", format, args)
}
func (l *sdkLogger) Error(ctx context.Context, format string, args ...any) {
	l.log(ctx, "error", format, args)
}

// Fatal logs like Error. ocm-sdk-go documents it as exiting the process; a
// library has no business doing that, and the SDK code we use never calls it.
func (l *sdkLogger) Fatal(ctx context.Context, format string, args ...any) {
	l.log(ctx, "fatal", format, args)
}

func (l *sdkLogger) log(ctx context.Context, level, format string, args []any) {
	if ctx == nil {
		ctx = context.Background()
	}
	if !l.logger.Enabled(ctx, slog.LevelDebug) {
		return
	}
	msg := fmt.Sprintf(format, args...)
	if l.secret != "" {
		msg = strings.ReplaceAll(msg, l.secret, "REDACTED")
	}
	l.logger.DebugContext(ctx, "ocm-sdk-go: "+msg, "sdkLevel", level)
}

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
	case strings.Contains(u.Hostname(), ":"):
		// ocm-sdk-go rebuilds the host without brackets, which breaks IPv6 literals.
		return nil, fmt.Errorf("clusterservice: %s %q: IPv6 literal hosts are not supported", name, u.Redacted())
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
