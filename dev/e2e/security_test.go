package e2e

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/clustersim"
	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/internal/testenv"
)

// listeners returns the local addresses of the listening TCP sockets on
// port, from /proc/net/tcp and /proc/net/tcp6, as "ADDR:PORT" in the
// kernel's hexadecimal notation.
func listeners(t *testing.T, port int) []string {
	t.Helper()
	var out []string
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(file)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		require.NoError(t, err)
		sc := bufio.NewScanner(f)
		sc.Scan() // header
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 4 || fields[3] != "0A" { // 0A: TCP_LISTEN
				continue
			}
			_, p, _ := strings.Cut(fields[1], ":")
			if n, err := strconv.ParseInt(p, 16, 32); err == nil && int(n) == port {
				out = append(out, fields[1])
			}
		}
		f.Close()
		require.NoError(t, sc.Err())
	}
	return out
}

// TestHandlerListensOnLoopbackOnly checks the handler's socket: bound to
// 127.0.0.1 and nothing else, so that only the host on the same machine can
// invoke it.
func TestHandlerListensOnLoopbackOnly(t *testing.T) {
	s := startStack(t)
	u, err := url.Parse(s.url)
	require.NoError(t, err)
	port, err := strconv.Atoi(u.Port())
	require.NoError(t, err)

	want := fmt.Sprintf("0100007F:%04X", port) // 127.0.0.1, little-endian
	require.Equal(t, []string{want}, listeners(t, port), "exactly one listening socket, on 127.0.0.1")
	require.Contains(t, s.stdout.String(), fmt.Sprintf(`"addr":"127.0.0.1:%d"`, port))

	// Another loopback address of this machine reaches a wildcard socket,
	// not one bound to 127.0.0.1.
	for _, addr := range []string{"127.0.0.2", "127.1.2.3", "::1"} {
		c, err := net.DialTimeout("tcp", net.JoinHostPort(addr, u.Port()), 5*time.Second)
		if err == nil {
			c.Close()
		}
		require.Error(t, err, "%s:%d accepted a connection", addr, port)
		if addr != "::1" { // a machine without IPv6 answers differently
			require.ErrorIs(t, err, syscall.ECONNREFUSED)
		}
	}
	s.requireAlive()

	// A port that names a host is refused at start: the handler chooses
	// the address, never the setting.
	free, err := testenv.FreePort()
	require.NoError(t, err)
	cmd := exec.Command(testenv.Build(t, "."))
	cmd.Env = []string{"FUNCTIONS_CUSTOMHANDLER_PORT=0.0.0.0:" + strconv.Itoa(free), "COSMOS_ENDPOINT=https://127.0.0.1:1",
		"COSMOS_DATABASE=d", "AZURE_LOCATION=eastus", "CLUSTER_SERVICE_URL=http://127.0.0.1:2"}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	require.Equal(t, 1, exit.ExitCode())
	require.Contains(t, string(out), "FUNCTIONS_CUSTOMHANDLER_PORT")
}

// countingHandler counts the requests that reach h.
type countingHandler struct {
	h http.Handler
	n atomic.Int64
}

func (c *countingHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.n.Add(1)
	c.h.ServeHTTP(w, r)
}

// newTLSServer starts an https server with httptest's self-signed
// certificate; refused handshakes are expected, so they are not logged.
func newTLSServer(t *testing.T, h http.Handler) *httptest.Server {
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// TestTLSVerificationIsOnByDefault runs the binary against servers with
// self-signed certificates: without the insecure settings it refuses them
// (and says so), with them it works.
func TestTLSVerificationIsOnByDefault(t *testing.T) {
	t.Run("Cosmos", func(t *testing.T) {
		s := startStack(t, "COSMOS_INSECURE_SKIP_VERIFY=")
		s.seedOp(subA, "op-tls", "/api/aro_hcp/v1alpha1/clusters/c1", "")
		require.NoError(t, s.sim.AddCluster("c1", clustersim.Script{Installing: clustersim.Duration(time.Hour)}))
		before := s.snapshot(opRef(subA, "op-tls"), resRef(subA, "res-op-tls"))

		r, _ := s.post("scan", []byte(`{"Data":{"timer":{}}}`))
		require.Equal(t, http.StatusInternalServerError, r.Status, r.Logs)
		s.requireLog(t, r, anyLevel, "list pending operations", "certificate")

		r, _ = s.post("poll", envelope(pollData(fmt.Sprintf(`{"subscriptionId":%q,"operationId":"op-tls"}`, subA))))
		require.Equal(t, http.StatusOK, r.Status, r.Logs)
		require.Equal(t, "deferred", outcome(t, r))
		s.requireLog(t, r, anyLevel, "operation left unchanged", "certificate")
		require.Zero(t, s.csRequests(), "nothing read, nothing to ask")
		s.requireUnchanged(before)
		s.requireAlive()
	})

	t.Run("Cluster Service", func(t *testing.T) {
		sim := clustersim.New(clustersim.Options{})
		require.NoError(t, sim.AddCluster("c1", clustersim.Script{Installing: clustersim.Duration(time.Hour)}))
		counted := &countingHandler{h: sim}
		csTLS := newTLSServer(t, counted)

		strict := startStack(t, "CLUSTER_SERVICE_URL="+csTLS.URL, "CLUSTER_SERVICE_INSECURE_SKIP_VERIFY=")
		strict.seedOp(subA, "op-tls", "/api/aro_hcp/v1alpha1/clusters/c1", "")
		before := strict.snapshot(opRef(subA, "op-tls"), resRef(subA, "res-op-tls"))
		r, _ := strict.post("poll", envelope(pollData(fmt.Sprintf(`{"subscriptionId":%q,"operationId":"op-tls"}`, subA))))
		require.Equal(t, http.StatusOK, r.Status, r.Logs)
		require.Equal(t, "deferred", outcome(t, r))
		strict.requireLog(t, r, testenv.HostError, "operation left unchanged", "certificate")
		require.Zero(t, counted.n.Load(), "no request went over the unverified connection")
		strict.requireUnchanged(before)
		strict.requireAlive()

		insecure := startStack(t, "CLUSTER_SERVICE_URL="+csTLS.URL, "CLUSTER_SERVICE_INSECURE_SKIP_VERIFY=true")
		insecure.seedOp(subA, "op-tls", "/api/aro_hcp/v1alpha1/clusters/c1", "")
		require.Equal(t, "updated", insecure.pollOp(subA, "op-tls"))
		require.Equal(t, "Provisioning", insecure.opStatus(subA, "op-tls"))
		require.Equal(t, int64(1), counted.n.Load())
	})
}

// tcpProxy forwards connections to a target until it is closed, which then
// refuses new connections and cuts the open ones: a server going down.
type tcpProxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	conns  []net.Conn
	closed bool
}

func startProxy(t *testing.T, target string) *tcpProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &tcpProxy{ln: ln, target: target}
	go p.serve()
	t.Cleanup(p.Close)
	return p
}

func (p *tcpProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.pipe(c)
	}
}

func (p *tcpProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns = append(p.conns, c)
	return true
}

func (p *tcpProxy) pipe(c net.Conn) {
	if !p.track(c) {
		return
	}
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	if !p.track(up) {
		c.Close()
		return
	}
	go func() {
		_, _ = io.Copy(up, c)
		up.Close()
	}()
	_, _ = io.Copy(c, up)
	c.Close()
}

// Close stops the proxy.
func (p *tcpProxy) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	p.ln.Close()
	for _, c := range p.conns {
		c.Close()
	}
}

// tokenIssuer is an OAuth token endpoint for client credentials. Its access
// tokens live 30 s, less than ocm-sdk-go's one-minute margin, so that every
// Cluster Service call fetches a new one: more secrets in flight.
type tokenIssuer struct {
	clientID, secret string
	fail             atomic.Int32 // 0: serve; otherwise answer that status
	mu               sync.Mutex
	issued           []string
	seq              int
}

func (ti *tokenIssuer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	switch code := int(ti.fail.Load()); code {
	case 0:
	case http.StatusUnauthorized:
		w.WriteHeader(code)
		_, _ = io.WriteString(w, `{"error":"invalid_client","error_description":"client credentials revoked"}`)
		return
	default:
		w.WriteHeader(code)
		_, _ = io.WriteString(w, `{"error":"temporarily_unavailable","error_description":"the token endpoint is down"}`)
		return
	}
	id, pw, ok := r.BasicAuth()
	if !ok && r.ParseForm() == nil {
		id, pw = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	if r.URL.Path != "/oauth2/token" || id != ti.clientID || pw != ti.secret {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"error":"invalid_client","error_description":"bad client credentials"}`)
		return
	}
	ti.mu.Lock()
	ti.seq++
	now := time.Now().Unix()
	enc := base64.RawURLEncoding
	token := enc.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`)) + "." +
		enc.EncodeToString([]byte(fmt.Sprintf(`{"typ":"Bearer","sub":"e2e-ACCESS-TOKEN-%d","jti":"jti-7Yq2-%d","iat":%d,"exp":%d}`, ti.seq, ti.seq, now, now+30))) + "." +
		enc.EncodeToString([]byte(fmt.Sprintf("e2e-token-signature-%d", ti.seq)))
	ti.issued = append(ti.issued, token)
	ti.mu.Unlock()
	_, _ = fmt.Fprintf(w, `{"access_token":%q,"token_type":"Bearer","expires_in":30}`, token)
}

func (ti *tokenIssuer) tokens() []string {
	ti.mu.Lock()
	defer ti.mu.Unlock()
	return append([]string(nil), ti.issued...)
}

func (ti *tokenIssuer) valid(token string) bool {
	ti.mu.Lock()
	defer ti.mu.Unlock()
	for _, t := range ti.issued {
		if t == token {
			return true
		}
	}
	return false
}

// authCS is a Cluster Service stand-in that requires a token from issuer:
// cluster c-ok answers state, c-500 a server error, c-401 always refuses.
type authCS struct {
	issuer     *tokenIssuer
	state      atomic.Value // string
	unauthed   atomic.Int64 // requests without a valid token
	authorized atomic.Int64
}

func (cs *authCS) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || !cs.issuer.valid(token) {
		cs.unauthed.Add(1)
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"kind":"Error","id":"401","href":"/api/clusters_mgmt/v1/errors/401","code":"CLUSTERS-MGMT-401","reason":"Invalid token"}`)
		return
	}
	cs.authorized.Add(1)
	switch r.URL.Path {
	case "/api/clusters_mgmt/v1/clusters/c-ok/status":
		_, _ = fmt.Fprintf(w, `{"kind":"ClusterStatus","state":%q}`, cs.state.Load())
	case "/api/clusters_mgmt/v1/clusters/c-ok": // billing reads the cluster a Create ends with
		_, _ = io.WriteString(w, `{"kind":"Cluster","id":"c-ok","creation_timestamp":"2026-12-01T00:00:00Z","azure":{"managed_resource_group_name":"c-ok-rg"}}`)
	case "/api/clusters_mgmt/v1/clusters/c-500/status":
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, `{"kind":"Error","id":"500","code":"CLUSTERS-MGMT-500","reason":"Cluster Service is having a bad day"}`)
	case "/api/clusters_mgmt/v1/clusters/c-401/status":
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"kind":"Error","id":"401","code":"CLUSTERS-MGMT-401","reason":"Account is not allowed"}`)
	default:
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"kind":"Error","id":"404","code":"CLUSTERS-MGMT-404","reason":"Not found"}`)
	}
}

// notification is one request a notification endpoint received.
type notification struct {
	Method string
	Path   string
	Header http.Header
	Body   []byte
}

// notifyRecorder records notifications; it answers with a session cookie
// that a well-behaved notifier never sends back.
type notifyRecorder struct {
	mu   sync.Mutex
	reqs []notification
}

func (n *notifyRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	n.mu.Lock()
	n.reqs = append(n.reqs, notification{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
	n.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: "session", Value: "e2e-cookie-value", Path: "/"})
	w.WriteHeader(http.StatusOK)
}

func (n *notifyRecorder) got() []notification {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]notification(nil), n.reqs...)
}

// requireNoCredentials checks that a notification carries no credentials.
func requireNoCredentials(t *testing.T, n notification) {
	t.Helper()
	for _, h := range []string{"Authorization", "Proxy-Authorization", "Cookie", "X-Ms-Authorization-Auxiliary"} {
		require.Empty(t, n.Header.Values(h), "notification sent %s", h)
	}
}

// TestSecretsNeverLogged runs the handler with a Cosmos key and OAuth client
// credentials, drives scans and polls through success and failure paths
// (Cluster Service 500 and 401, token endpoint down and refusing, lock held,
// Cosmos down after start), then searches everything it logged, to stdout, stderr
// and in every response, for the key, the client secret and every access
// token, plain and base64-encoded.
func TestSecretsNeverLogged(t *testing.T) {
	cosmosKey := base64.StdEncoding.EncodeToString([]byte("e2e-COSMOS-ACCOUNT-KEY-3b9f1c7d-never-logged-0123456789abcdef"))
	issuer := &tokenIssuer{clientID: "e2e-client-id-5d2a", secret: "e2e-CLIENT-SECRET-8c41f0e2"}
	tokenServer := httptest.NewServer(issuer)
	t.Cleanup(tokenServer.Close)
	cs := &authCS{issuer: issuer}
	cs.state.Store("installing")
	csServer := httptest.NewServer(cs)
	t.Cleanup(csServer.Close)
	notify := &notifyRecorder{}
	notifyServer := httptest.NewServer(notify)
	t.Cleanup(notifyServer.Close)
	proxy := startProxy(t, strings.TrimSuffix(strings.TrimPrefix(testenv.SharedCosmos(t).Endpoint, "https://"), "/"))

	s := startStack(t,
		"COSMOS_ENDPOINT=https://"+proxy.ln.Addr().String()+"/",
		"COSMOS_KEY="+cosmosKey,
		"CLUSTER_SERVICE_URL="+csServer.URL,
		"CLUSTER_SERVICE_CLIENT_ID="+issuer.clientID,
		"CLUSTER_SERVICE_CLIENT_SECRET="+issuer.secret,
		"CLUSTER_SERVICE_TOKEN_URL="+tokenServer.URL+"/oauth2/token",
	)
	var bodies []string // every response body, Logs included
	poll := func(op string) response {
		t.Helper()
		r, raw := s.post("poll", envelope(pollData(fmt.Sprintf(`{"subscriptionId":%q,"operationId":%q}`, subA, op))))
		bodies = append(bodies, string(raw))
		require.Equal(t, http.StatusOK, r.Status, r.Logs)
		return r
	}
	scan := func() response {
		t.Helper()
		r, raw := s.post("scan", []byte(`{"Data":{"timer":{"IsPastDue":true}},"Metadata":{}}`))
		bodies = append(bodies, string(raw))
		return r
	}

	s.seedOp(subA, "op-ok", "/api/clusters_mgmt/v1/clusters/c-ok", notifyServer.URL+"/notify/op-ok")
	s.seedOp(subA, "op-500", "/api/clusters_mgmt/v1/clusters/c-500", "")
	s.seedOp(subA, "op-401", "/api/clusters_mgmt/v1/clusters/c-401", "")
	s.seedOp(subA, "op-404", "/api/clusters_mgmt/v1/clusters/c-404", "")
	require.NoError(t, s.fe.PutOperation(context.Background(), frontend.Operation{
		ID: "op-done", PartitionKey: subA, Request: "Create", Status: "Failed",
		ExternalID: clusterKey(subA, "done"), InternalID: "/api/clusters_mgmt/v1/clusters/done",
		NotificationURI: notifyServer.URL + "/notify/op-done", LastTransitionTime: time.Now().UTC(),
	}))

	r := scan()
	require.Equal(t, http.StatusOK, r.Status, r.Logs)
	require.Equal(t, "updated", outcome(t, poll("op-ok")))
	require.Equal(t, "deferred", outcome(t, poll("op-500")))
	require.Equal(t, "deferred", outcome(t, poll("op-401")))
	require.Equal(t, "unchanged", outcome(t, poll("op-404")))
	require.Equal(t, "notified", outcome(t, poll("op-done")))
	require.Zero(t, cs.unauthed.Load(), "every Cluster Service call carried a token we issued")
	require.GreaterOrEqual(t, len(issuer.tokens()), 4, "a token per call: they expire within ocm-sdk-go's margin")

	// The token endpoint fails, then refuses the credentials.
	cs.state.Store("ready")
	issuer.fail.Store(http.StatusServiceUnavailable)
	r = poll("op-ok")
	require.Equal(t, "deferred", outcome(t, r))
	s.requireLog(t, r, anyLevel, "token endpoint")
	issuer.fail.Store(http.StatusUnauthorized)
	r = poll("op-ok")
	require.Equal(t, "deferred", outcome(t, r))
	s.requireLog(t, r, testenv.HostError, "token endpoint", "401", "invalid_client")
	issuer.fail.Store(0)

	// The frontend holds the lock.
	release := s.holdLock(subA)
	require.Equal(t, "deferred", outcome(t, poll("op-ok")))
	release()
	require.Equal(t, "updated", outcome(t, poll("op-ok")))
	require.Equal(t, "Succeeded", s.opStatus(subA, "op-ok"))

	// Cosmos goes away.
	proxy.Close()
	r = scan()
	require.Equal(t, http.StatusInternalServerError, r.Status, r.Logs)
	r = poll("op-500")
	require.Equal(t, "deferred", outcome(t, r))
	s.requireLog(t, r, anyLevel, "database unavailable")

	// Stop the handler so that every line it wrote is in.
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, s.cmd.Wait())
	all := s.stdout.String() + s.stderr.String() + strings.Join(bodies, "\n")

	// The failure paths were exercised and logged.
	for _, want := range []string{"HTTP 500", "HTTP 401", "token endpoint", "lock", "database unavailable", "operation status changed"} {
		require.Contains(t, all, want)
	}

	secrets := map[string]string{
		"Cosmos key":                 cosmosKey,
		"Cosmos key, decoded":        "e2e-COSMOS-ACCOUNT-KEY-3b9f1c7d-never-logged-0123456789abcdef",
		"Cosmos key, base64":         base64.StdEncoding.EncodeToString([]byte(cosmosKey)),
		"client secret":              issuer.secret,
		"client secret, base64":      base64.StdEncoding.EncodeToString([]byte(issuer.secret)),
		"client secret, URL-encoded": url.QueryEscape(issuer.secret),
		"basic credentials":          base64.StdEncoding.EncodeToString([]byte(issuer.clientID + ":" + issuer.secret)),
		"token signature":            base64.RawURLEncoding.EncodeToString([]byte("e2e-token-signature-1")),
	}
	for i, tok := range issuer.tokens() {
		secrets[fmt.Sprintf("token %d", i)] = tok
		secrets[fmt.Sprintf("token %d, base64", i)] = base64.StdEncoding.EncodeToString([]byte(tok))
		secrets[fmt.Sprintf("token %d, claims", i)] = strings.Split(tok, ".")[1]
	}
	for name, secret := range secrets {
		// Not require.NotContains: a failure would print the whole log.
		require.False(t, strings.Contains(all, secret), "the %s was logged", name)
	}
	require.NotContains(t, all, "Bearer ")
	require.NotContains(t, all, "e2e-ACCESS-TOKEN")

	// Notifications never carried the Cluster Service token or the cookie.
	got := notify.got()
	require.Len(t, got, 2)
	for _, n := range got {
		requireNoCredentials(t, n)
	}
}

// TestNotificationURIRules checks where notifications go and what they carry:
// https only unless NOTIFICATIONS_ALLOW_HTTP, verified TLS, no credentials,
// no redirects, the ARM operation status as the body. Internal targets are
// TestNotifierRefusesInternalTargets'.
func TestNotificationURIRules(t *testing.T) {
	rec := &notifyRecorder{}
	recServer := httptest.NewServer(rec)
	t.Cleanup(recServer.Close)

	t.Run("http refused without NOTIFICATIONS_ALLOW_HTTP", func(t *testing.T) {
		s := startStack(t, "NOTIFICATIONS_ALLOW_HTTP=")
		require.NoError(t, s.sim.AddCluster("c1", clustersim.Script{}))
		s.seedOp(subA, "op-http", "/api/aro_hcp/v1alpha1/clusters/c1", recServer.URL+"/notify/op-http")
		r, _ := s.post("poll", envelope(pollData(fmt.Sprintf(`{"subscriptionId":%q,"operationId":"op-http"}`, subA))))
		require.Equal(t, http.StatusOK, r.Status, r.Logs)
		require.Equal(t, "updated", outcome(t, r), "the operation completes anyway")
		s.requireLog(t, r, testenv.HostError, "notification rejected", "https only unless NOTIFICATIONS_ALLOW_HTTP")
		op, err := s.fe.Operation(context.Background(), subA, "op-http")
		require.NoError(t, err)
		require.Equal(t, "Succeeded", op["status"])
		require.NotContains(t, op, "notificationUri", "a refused URI is given up, not retried")
		require.Empty(t, rec.got(), "nothing was sent over http")
	})

	t.Run("TLS verified locally too", func(t *testing.T) {
		// https to a loopback receiver whose certificate does not verify:
		// not sent, kept for a later try.
		s := startStack(t, "NOTIFICATIONS_ALLOW_HTTP=true")
		require.NoError(t, s.sim.AddCluster("c1", clustersim.Script{}))
		tlsRec := &notifyRecorder{}
		tlsServer := newTLSServer(t, tlsRec)
		s.seedOp(subA, "op-https", "/api/aro_hcp/v1alpha1/clusters/c1", tlsServer.URL+"/notify/op-https")
		r, _ := s.post("poll", envelope(pollData(fmt.Sprintf(`{"subscriptionId":%q,"operationId":"op-https"}`, subA))))
		require.Equal(t, http.StatusOK, r.Status, r.Logs)
		require.Equal(t, "updated", outcome(t, r))
		s.requireLog(t, r, anyLevel, "notification failed", "certificate")
		require.Empty(t, tlsRec.got())
		op, err := s.fe.Operation(context.Background(), subA, "op-https")
		require.NoError(t, err)
		require.Equal(t, tlsServer.URL+"/notify/op-https", op["notificationUri"])
	})

	t.Run("http allowed locally", func(t *testing.T) {
		s := startStack(t, "NOTIFICATIONS_ALLOW_HTTP=true")
		require.NoError(t, s.sim.AddCluster("c1", clustersim.Script{}))

		for _, id := range []string{"op-n1", "op-n2"} {
			s.seedOp(subA, id, "/api/aro_hcp/v1alpha1/clusters/c1", recServer.URL+"/notify/"+id)
			seeded, err := s.fe.Operation(context.Background(), subA, id)
			require.NoError(t, err)
			require.Equal(t, "updated", s.pollOp(subA, id))
			op, err := s.fe.Operation(context.Background(), subA, id)
			require.NoError(t, err)
			require.NotContains(t, op, "notificationUri", "delivered once, then cleared")
			require.Equal(t, "done", s.pollOp(subA, id), "not sent twice")

			var sent []notification
			for _, n := range rec.got() {
				if n.Path == "/notify/"+id {
					sent = append(sent, n)
				}
			}
			require.Len(t, sent, 1)
			n := sent[0]
			require.Equal(t, http.MethodPost, n.Method)
			require.Equal(t, "application/json", n.Header.Get("Content-Type"))
			requireNoCredentials(t, n) // op-n2 comes after a Set-Cookie answer
			var body map[string]any
			require.NoError(t, json.Unmarshal(n.Body, &body), string(n.Body))
			require.Equal(t, map[string]any{
				"id":        "/subscriptions/" + subA + "/providers/Microsoft.RedHatOpenShift/locations/eastus/hcpOperationStatuses/" + id,
				"name":      id,
				"status":    "Succeeded",
				"startTime": seeded["startTime"],
				"endTime":   op["lastTransitionTime"],
			}, body)
		}

		// Credentials in the URI: refused, and not logged.
		u := strings.Replace(recServer.URL, "http://", "http://arm:e2e-uri-password-Q3@", 1) + "/notify/op-cred"
		s.seedOp(subA, "op-cred", "/api/aro_hcp/v1alpha1/clusters/c1", u)
		r, _ := s.post("poll", envelope(pollData(fmt.Sprintf(`{"subscriptionId":%q,"operationId":"op-cred"}`, subA))))
		require.Equal(t, "updated", outcome(t, r))
		s.requireLog(t, r, anyLevel, "notification rejected", "credentials")
		for _, n := range rec.got() {
			require.NotEqual(t, "/notify/op-cred", n.Path)
		}
		for _, line := range s.hostLines(r) {
			require.NotContains(t, line.text, "e2e-uri-password-Q3")
		}

		// A redirect is not followed: the target never hears of it and the
		// notification stays due.
		target := &countingHandler{h: rec}
		targetServer := httptest.NewServer(target)
		t.Cleanup(targetServer.Close)
		for _, code := range []int{http.StatusTemporaryRedirect, http.StatusFound, http.StatusPermanentRedirect} {
			id := fmt.Sprintf("op-redirect-%d", code)
			redirector := &countingHandler{h: http.RedirectHandler(targetServer.URL+"/stolen/"+id, code)}
			redirectServer := httptest.NewServer(redirector)
			t.Cleanup(redirectServer.Close)
			s.seedOp(subA, id, "/api/aro_hcp/v1alpha1/clusters/c1", redirectServer.URL+"/notify/"+id)
			r, _ := s.post("poll", envelope(pollData(fmt.Sprintf(`{"subscriptionId":%q,"operationId":%q}`, subA, id))))
			require.Equal(t, http.StatusOK, r.Status, r.Logs)
			require.Equal(t, "updated", outcome(t, r))
			s.requireLog(t, r, anyLevel, "notification failed", strconv.Itoa(code))
			require.Equal(t, "deferred", s.pollOp(subA, id), "the next try meets the same redirect")
			require.Equal(t, int64(2), redirector.n.Load())
			op, err := s.fe.Operation(context.Background(), subA, id)
			require.NoError(t, err)
			require.Equal(t, "Succeeded", op["status"])
			require.Equal(t, redirectServer.URL+"/notify/"+id, op["notificationUri"], "still due")
		}
		require.Zero(t, target.n.Load(), "a redirect was followed")
		s.requireAlive()
	})
}

// acceptCounter is a TCP listener on 127.0.0.1 that counts the connections
// it accepts and closes them: a notification that reaches it at all, TLS
// handshake or not, is counted.
type acceptCounter struct {
	ln net.Listener
	n  atomic.Int64
}

func newAcceptCounter(t *testing.T) *acceptCounter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	a := &acceptCounter{ln: ln}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			a.n.Add(1)
			_ = c.Close()
		}
	}()
	return a
}

func (a *acceptCounter) port() string {
	_, p, _ := net.SplitHostPort(a.ln.Addr().String())
	return p
}

// TestNotifierRefusesInternalTargets: a notificationUri, which whoever
// writes an Operations item chooses, reaches no internal address through
// the built handler: this machine in every spelling, the instance metadata
// service, Azure's host endpoint, private networks. Each is given up at
// once (a 'notification rejected' Error, the URI cleared) and no
// connection reaches a listener on 127.0.0.1. With NOTIFICATIONS_ALLOW_HTTP
// a loopback receiver is admitted, and still nothing else internal.
func TestNotifierRefusesInternalTargets(t *testing.T) {
	listener := newAcceptCounter(t)
	port := listener.port()
	production := []string{
		"https://127.0.0.1:" + port + "/notify",
		"https://localhost:" + port + "/notify",
		"https://[::1]:" + port + "/notify",
		"https://[::ffff:127.0.0.1]:" + port + "/notify",
		"https://0x7f.1:" + port + "/notify",
		"https://2130706433:" + port + "/notify",
		"https://:" + port + "/notify",
		"https://0.0.0.0:" + port + "/notify",
		"https://169.254.169.254/metadata/identity/oauth2/token?api-version=2018-02-01",
		"https://[::ffff:a9fe:a9fe]/metadata/instance",
		"https://10.0.0.4:10250/pods",
		"https://168.63.129.16/machine",
		"https://management.azure.com:" + port + "/subscriptions/s/notify",
		"http://management.azure.com/subscriptions/s/notify",
		"https://management.azure.com.127.0.0.1.nip.io/subscriptions/s/notify",
	}
	local := []string{
		"http://169.254.169.254/metadata/identity/oauth2/token?api-version=2018-02-01",
		"http://[::ffff:a9fe:a9fe]/metadata/instance",
		"http://10.0.0.4:10250/pods",
		"http://168.63.129.16/machine",
		"http://0.0.0.0:" + port + "/notify",
		"http://:" + port + "/notify",
	}
	for _, tc := range []struct {
		name    string
		env     string
		targets []string
	}{
		{"production", "NOTIFICATIONS_ALLOW_HTTP=", production},
		{"locally", "NOTIFICATIONS_ALLOW_HTTP=true", local},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startStack(t, tc.env)
			require.NoError(t, s.sim.AddCluster("c1", clustersim.Script{}))
			for i, target := range tc.targets {
				id := fmt.Sprintf("op-internal-%d", i)
				s.seedOp(subA, id, "/api/aro_hcp/v1alpha1/clusters/c1", target)
				r, _ := s.post("poll", envelope(pollData(fmt.Sprintf(`{"subscriptionId":%q,"operationId":%q}`, subA, id))))
				require.Equal(t, http.StatusOK, r.Status, r.Logs)
				require.Equal(t, "updated", outcome(t, r), target)
				s.requireLog(t, r, testenv.HostError, "notification rejected")
				op, err := s.fe.Operation(context.Background(), subA, id)
				require.NoError(t, err)
				require.Equal(t, "Succeeded", op["status"], "the operation completes anyway")
				require.NotContains(t, op, "notificationUri", "%s: given up, not retried", target)
			}
			require.Zero(t, listener.n.Load(), "a notification reached 127.0.0.1")
			s.requireAlive()
		})
	}
}

// TestFailedNotificationLogsNoSignature: the query of a notificationUri,
// which signs it, is in no line the built handler logs when the delivery
// fails; the host and path are.
func TestFailedNotificationLogsNoSignature(t *testing.T) {
	s := startStack(t, "NOTIFICATIONS_ALLOW_HTTP=true")
	require.NoError(t, s.sim.AddCluster("c1", clustersim.Script{}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // refused: the delivery fails
	s.seedOp(subA, "op-sig", "/api/aro_hcp/v1alpha1/clusters/c1", "http://"+addr+"/subscriptions/"+subA+"/notify?api-version=2020-01-01&sig=e2e-SIGNATURE-7Qx")
	r, _ := s.post("poll", envelope(pollData(fmt.Sprintf(`{"subscriptionId":%q,"operationId":"op-sig"}`, subA))))
	require.Equal(t, http.StatusOK, r.Status, r.Logs)
	require.Equal(t, "updated", outcome(t, r))
	s.requireLog(t, r, anyLevel, "notification failed", "http://"+addr+"/subscriptions/"+subA+"/notify")
	all := s.stdout.String() + s.stderr.String() + strings.Join(r.Logs, "\n")
	require.False(t, strings.Contains(all, "e2e-SIGNATURE-7Qx"), "the signature was logged")
}

// TestInsecureSettingsAreRefusedAtStart: settings under which a credential
// would travel in clear, reach an unverified peer, or be a token for an
// Azure service stop the handler at start with one line naming them, and
// never their values.
func TestInsecureSettingsAreRefusedAtStart(t *testing.T) {
	const secret = "e2e-CLIENT-SECRET-9b1c"
	creds := []string{"CLUSTER_SERVICE_CLIENT_ID=opstatus", "CLUSTER_SERVICE_CLIENT_SECRET=" + secret}
	for _, tc := range []struct {
		name string
		env  []string
		want string
	}{
		{"the client secret to an http token URL", append([]string{"CLUSTER_SERVICE_TOKEN_URL=http://sso.example.internal/token"}, creds...),
			"opstatus: setting CLUSTER_SERVICE_TOKEN_URL: plain http only to a loopback host (localhost, 127.0.0.1, ::1); use https"},
		{"a client-credentials token to an http Cluster Service", append([]string{"CLUSTER_SERVICE_URL=http://api.example.internal",
			"CLUSTER_SERVICE_TOKEN_URL=https://sso.example.internal/token"}, creds...),
			"opstatus: setting CLUSTER_SERVICE_URL: plain http only to a loopback host (localhost, 127.0.0.1, ::1); use https"},
		{"the managed identity's token to an http Cluster Service", []string{"CLUSTER_SERVICE_URL=http://10.0.0.4:8000", "CLUSTER_SERVICE_AUDIENCE=" + csAudience},
			"opstatus: setting CLUSTER_SERVICE_URL: plain http only to a loopback host (localhost, 127.0.0.1, ::1); use https"},
		{"the client secret to an unverified peer", append([]string{"CLUSTER_SERVICE_URL=https://api.example.internal",
			"CLUSTER_SERVICE_TOKEN_URL=https://sso.example.internal/token", "CLUSTER_SERVICE_INSECURE_SKIP_VERIFY=true"}, creds...),
			"opstatus: setting CLUSTER_SERVICE_INSECURE_SKIP_VERIFY, CLUSTER_SERVICE_URL: certificates go unverified only to a loopback host (trust a private CA with CLUSTER_SERVICE_CA_BUNDLE)"},
		{"the managed identity's token to an unverified peer", []string{"CLUSTER_SERVICE_URL=https://api.example.internal",
			"CLUSTER_SERVICE_AUDIENCE=" + csAudience, "CLUSTER_SERVICE_INSECURE_SKIP_VERIFY=true"},
			"opstatus: setting CLUSTER_SERVICE_INSECURE_SKIP_VERIFY, CLUSTER_SERVICE_URL: certificates go unverified only to a loopback host (trust a private CA with CLUSTER_SERVICE_CA_BUNDLE)"},
		{"Cosmos DB's token to an unverified peer", []string{"COSMOS_ENDPOINT=https://account.documents.azure.com", "COSMOS_INSECURE_SKIP_VERIFY=true"},
			"opstatus: setting COSMOS_INSECURE_SKIP_VERIFY, COSMOS_ENDPOINT: certificates go unverified only to a loopback host (an emulator)"},
		{"an audience of Key Vault", []string{"CLUSTER_SERVICE_AUDIENCE=https://vault.azure.net"},
			`opstatus: setting CLUSTER_SERVICE_AUDIENCE: "https://vault.azure.net" is the audience of an Azure service: whatever answers at CLUSTER_SERVICE_URL would get a token for it; give Cluster Service's own (api://…)`},
		{"an audience of a Cosmos DB account", []string{"CLUSTER_SERVICE_AUDIENCE=https://account.documents.azure.com"},
			`opstatus: setting CLUSTER_SERVICE_AUDIENCE: "https://account.documents.azure.com" is the audience of an Azure service`},
		{"a notification host that is an address", []string{"NOTIFICATIONS_ALLOWED_HOSTS=management.azure.com,169.254.169.254"},
			`opstatus: setting NOTIFICATIONS_ALLOWED_HOSTS: "169.254.169.254" is not a host name with a domain (such as management.azure.com)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := refusedAtStart(t, tc.env...)
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			require.Len(t, lines, 1, out)
			require.True(t, strings.HasPrefix(lines[0], tc.want), lines[0])
			require.NotContains(t, out, secret)
		})
	}
}
