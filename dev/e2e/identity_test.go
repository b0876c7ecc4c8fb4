package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/clustersim"
	"github.com/opstatus/opstatus/dev/identity"
	"github.com/opstatus/opstatus/dev/testca"
	"github.com/opstatus/opstatus/internal/testenv"
)

const (
	// csAudience is the audience Cluster Service's gateway accepts.
	csAudience = "api://clusters-service-e2e"
	// identityClientID is the app's user-assigned identity.
	identityClientID = "6f1c2a4e-8b3d-4c5e-9a7f-0d1e2f3a4b5c"
	// identitySecret is IDENTITY_HEADER, which nothing may log.
	identitySecret = "e2e-IDENTITY-HEADER-4f9a2c71-never-logged"
)

// bearerGate stands in front of the Cluster Service simulator as the mesh
// gateway of ARO-HCP's change does (an Istio RequestAuthentication and
// AuthorizationPolicy): it admits a request only with a token the identity
// endpoint issued for csAudience, and records the token of every request.
type bearerGate struct {
	ep   *identity.Endpoint
	next http.Handler

	mu     sync.Mutex
	tokens []string // the bearer token of each request, "" for none
}

func (g *bearerGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	g.mu.Lock()
	g.tokens = append(g.tokens, token)
	g.mu.Unlock()
	if !g.ep.Valid(token, csAudience) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, "Jwt verification fails")
		return
	}
	g.next.ServeHTTP(w, r)
}

func (g *bearerGate) seen() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.tokens...)
}

// identityStack is a handler that reaches the simulator through a bearer
// gate with its managed identity's token.
type identityStack struct {
	*handlerStack
	ep   *identity.Endpoint
	gate *bearerGate
	sim  *clustersim.Sim
}

func startIdentityStack(t *testing.T, lifetime time.Duration, extraEnv ...string) *identityStack {
	t.Helper()
	ep := identity.New(identitySecret, identityClientID)
	ep.SetLifetime(lifetime)
	idServer := httptest.NewServer(ep)
	t.Cleanup(idServer.Close)
	sim := clustersim.New(clustersim.Options{})
	gate := &bearerGate{ep: ep, next: sim}
	csServer := httptest.NewServer(gate)
	t.Cleanup(csServer.Close)
	env := append([]string{"CLUSTER_SERVICE_URL=" + csServer.URL, "CLUSTER_SERVICE_AUDIENCE=" + csAudience}, ep.Env(idServer.URL)...)
	s := startStack(t, append(env, extraEnv...)...)
	return &identityStack{handlerStack: s, ep: ep, gate: gate, sim: sim}
}

// seedClusters adds n installing clusters and their Create operations.
func (s *identityStack) seedClusters(prefix string, n int) []string {
	s.t.Helper()
	var ops []string
	for i := range n {
		id := fmt.Sprintf("%s-%d", prefix, i)
		require.NoError(s.t, s.sim.AddCluster(id, clustersim.Script{Installing: clustersim.Duration(time.Hour)}))
		s.seedOp(subA, id, "/api/aro_hcp/v1alpha1/clusters/"+id, "")
		ops = append(ops, id)
	}
	return ops
}

// requireNothingSecretLogged searches what the handler printed and
// answered for the identity header and every token issued.
func (s *identityStack) requireNothingSecretLogged(t *testing.T, bodies ...string) {
	t.Helper()
	text := s.stdout.String() + s.stderr.String() + strings.Join(bodies, "")
	require.NotContains(t, text, identitySecret)
	for _, tok := range s.ep.Issued() {
		require.NotContains(t, text, tok.Value)
		sig := tok.Value[strings.LastIndex(tok.Value, ".")+1:]
		require.NotContains(t, text, sig)
	}
	require.NotContains(t, text, "Bearer")
}

// TestManagedIdentityToken runs the handler with CLUSTER_SERVICE_AUDIENCE
// against the identity endpoint stand-in: every Cluster Service request
// carries the identity's token for the audience, one token serves a scan's
// worth of concurrent polls, a token near its expiry is replaced, and a
// failing endpoint defers the operations with an error that says so.
func TestManagedIdentityToken(t *testing.T) {
	t.Run("one token for many requests", func(t *testing.T) {
		s := startIdentityStack(t, time.Hour)
		ops := s.seedClusters("mi-many", 8)
		var bodies []string
		for round := range 2 {
			msgs := s.scanMessages()
			require.NotEmpty(t, msgs)
			for _, m := range msgs {
				r := s.poll(m)
				require.Equal(t, http.StatusOK, r.Status, r.Logs)
				b, _ := json.Marshal(r)
				bodies = append(bodies, string(b))
			}
			if round == 0 {
				for _, op := range ops {
					require.Equal(t, "Provisioning", s.opStatus(subA, op))
				}
			}
		}
		require.Equal(t, 1, s.ep.Requests(), "one token request for %d Cluster Service requests", len(s.gate.seen()))
		issued := s.ep.Issued()
		require.Len(t, issued, 1)
		seen := s.gate.seen()
		require.GreaterOrEqual(t, len(seen), 2*len(ops))
		for _, tok := range seen {
			require.Equal(t, issued[0].Value, tok)
		}
		s.requireNothingSecretLogged(t, bodies...)
	})

	t.Run("replaced near expiry", func(t *testing.T) {
		// azidentity and the client replace a token five minutes before it
		// expires: this one is due two seconds after it is issued.
		s := startIdentityStack(t, 5*time.Minute+2*time.Second)
		s.seedClusters("mi-expiry", 1)
		require.Equal(t, "updated", s.pollOp(subA, "mi-expiry-0"))
		first := s.ep.Issued()[0]
		require.Equal(t, first.Value, s.gate.seen()[0])

		time.Sleep(time.Until(first.ExpiresOn.Add(-5*time.Minute)) + 100*time.Millisecond)
		s.pollOp(subA, "mi-expiry-0")
		issued, seen := s.ep.Issued(), s.gate.seen()
		require.GreaterOrEqual(t, len(issued), 2)
		require.Equal(t, len(issued), s.ep.Requests())
		require.Equal(t, issued[len(issued)-1].Value, seen[len(seen)-1], "the last request carries the new token")
		require.NotEqual(t, first.Value, seen[len(seen)-1])
		s.requireNothingSecretLogged(t)
	})

	t.Run("endpoint failing", func(t *testing.T) {
		s := startIdentityStack(t, time.Hour)
		s.seedClusters("mi-fail", 1)
		before := s.snapshot(opRef(subA, "mi-fail-0"), resRef(subA, "res-mi-fail-0"))
		s.ep.Fail(http.StatusInternalServerError)
		r, raw := s.post("poll", envelope(pollData(fmt.Sprintf(`{"subscriptionId":%q,"operationId":"mi-fail-0"}`, subA))))
		require.Equal(t, http.StatusOK, r.Status, r.Logs)
		require.Equal(t, "deferred", outcome(t, r))
		// A 5xx of the endpoint is transient: a warning.
		s.requireLog(t, r, testenv.HostWarning, "operation left unchanged", "managed identity token: HTTP 500 Internal Server Error")
		require.Empty(t, s.gate.seen(), "no request to Cluster Service without a token")
		require.Equal(t, 3, s.ep.Requests(), "the request and two quick retries")
		s.requireUnchanged(before)
		s.requireAlive()

		s.ep.Fail(0)
		require.Equal(t, "updated", s.pollOp(subA, "mi-fail-0"))
		require.Equal(t, []string{s.ep.Issued()[0].Value}, s.gate.seen())
		s.requireNothingSecretLogged(t, string(raw))
	})
}

// monitorAudience is the resource azidentity asks the identity endpoint
// for with the remote write's scope.
const monitorAudience = "https://monitor.azure.com/"

// monitorGate stands in for an Azure Monitor data collection endpoint's
// authentication: it admits a remote write only with a token the identity
// endpoint issued for Azure Monitor, and counts what it admitted. Requests
// wait until ep is set and ready closed.
type monitorGate struct {
	ep    *identity.Endpoint
	ready chan struct{}

	mu               sync.Mutex
	admitted, denied int
	tokens           map[string]bool
}

func (g *monitorGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	select {
	case <-g.ready:
	case <-r.Context().Done():
		return
	}
	token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	g.mu.Lock()
	defer g.mu.Unlock()
	if r.Method != http.MethodPost || !g.ep.Valid(token, monitorAudience) {
		g.denied++
		http.Error(w, "bad or missing bearer token", http.StatusUnauthorized)
		return
	}
	g.admitted++
	g.tokens[token] = true
	w.WriteHeader(http.StatusNoContent)
}

func (g *monitorGate) counts() (admitted, denied, tokens int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.admitted, g.denied, len(g.tokens)
}

// TestManagedIdentityForClusterServiceAndRemoteWrite: with
// METRICS_REMOTE_WRITE_URL set (read by config, passed to telemetry), the
// metrics' pushes and the Cluster Service requests carry tokens of the
// one identity in AZURE_CLIENT_ID, one token per audience for all of them.
func TestManagedIdentityForClusterServiceAndRemoteWrite(t *testing.T) {
	// The identity endpoint is the stack's: the gate learns it once started.
	gate := &monitorGate{ready: make(chan struct{}), tokens: map[string]bool{}}
	monitor := httptest.NewServer(gate)
	t.Cleanup(monitor.Close)
	s := startIdentityStack(t, time.Hour, "METRICS_REMOTE_WRITE_URL="+monitor.URL+"/write", "OTEL_METRIC_EXPORT_INTERVAL=200")
	gate.ep = s.ep
	close(gate.ready)

	s.seedClusters("mi-rw", 3)
	for _, m := range s.scanMessages() {
		r := s.poll(m)
		require.Equal(t, http.StatusOK, r.Status, r.Logs)
	}
	require.Eventually(t, func() bool {
		admitted, _, _ := gate.counts()
		return admitted >= 3
	}, 10*time.Second, 50*time.Millisecond, "remote writes admitted")
	admitted, denied, tokens := gate.counts()
	require.Zero(t, denied, "every push carried the identity's token for Azure Monitor")
	require.Equal(t, 1, tokens, "one token for %d pushes", admitted)

	var resources []string
	for _, tok := range s.ep.Issued() {
		resources = append(resources, tok.Resource)
		require.Equal(t, identityClientID, tok.ClientID)
	}
	require.ElementsMatch(t, []string{csAudience, monitorAudience}, resources, "one token per audience")
	require.Equal(t, 2, s.ep.Requests())
	require.GreaterOrEqual(t, len(s.gate.seen()), 3)
	s.requireNothingSecretLogged(t)
}

// caServer serves h over TLS with a certificate ca issued.
func caServer(t *testing.T, ca *testca.CA, h http.Handler) *httptest.Server {
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are expected
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.ServerCert(t)}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// TestClusterServiceCABundle runs the handler against a Cluster Service
// whose certificate a private CA issued (as a mesh gateway's would be): it
// refuses the server with the system's roots or another CA's bundle, and
// trusts it with CLUSTER_SERVICE_CA_BUNDLE, which it never logs.
func TestClusterServiceCABundle(t *testing.T) {
	ca := testca.New(t, "opstatus e2e gateway CA")
	sim := clustersim.New(clustersim.Options{})
	require.NoError(t, sim.AddCluster("c1", clustersim.Script{Installing: clustersim.Duration(time.Hour)}))
	counted := &countingHandler{h: sim}
	cs := caServer(t, ca, counted)
	caBody := strings.Split(ca.PEM(), "\n")[1] // a line of the certificate's base64

	for _, tc := range []struct {
		name   string
		bundle string
	}{
		{"system roots", ""},
		{"another CA", testca.New(t, "opstatus e2e other CA").PEM()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startStack(t, "CLUSTER_SERVICE_URL="+cs.URL, "CLUSTER_SERVICE_CA_BUNDLE="+tc.bundle)
			s.seedOp(subA, "op-ca", "/api/aro_hcp/v1alpha1/clusters/c1", "")
			before := s.snapshot(opRef(subA, "op-ca"), resRef(subA, "res-op-ca"))
			r, _ := s.post("poll", envelope(pollData(fmt.Sprintf(`{"subscriptionId":%q,"operationId":"op-ca"}`, subA))))
			require.Equal(t, http.StatusOK, r.Status, r.Logs)
			require.Equal(t, "deferred", outcome(t, r))
			s.requireLog(t, r, testenv.HostError, "operation left unchanged", "certificate signed by unknown authority")
			require.Zero(t, counted.n.Load(), "no request over an unverified connection")
			s.requireUnchanged(before)
		})
	}

	t.Run("the gateway's CA", func(t *testing.T) {
		s := startStack(t, "CLUSTER_SERVICE_URL="+cs.URL, "CLUSTER_SERVICE_CA_BUNDLE="+ca.PEM())
		s.seedOp(subA, "op-ca", "/api/aro_hcp/v1alpha1/clusters/c1", "")
		require.Equal(t, "updated", s.pollOp(subA, "op-ca"))
		require.Equal(t, "Provisioning", s.opStatus(subA, "op-ca"))
		require.Positive(t, counted.n.Load())
		require.NotContains(t, s.stdout.String()+s.stderr.String(), caBody, "the bundle is not logged")
	})
}

// TestClusterServiceAuthSettingsAtStart: settings that cannot work stop the
// handler at start with one line naming them, and never the values.
func TestClusterServiceAuthSettingsAtStart(t *testing.T) {
	ca := testca.New(t, "opstatus e2e CA")
	corrupt := strings.Replace(ca.PEM(), "\n", "\n!!", 2)
	for _, tc := range []struct {
		name string
		env  []string
		want string
	}{
		{"audience and client credentials", []string{"CLUSTER_SERVICE_AUDIENCE=" + csAudience, "CLUSTER_SERVICE_CLIENT_ID=opstatus",
			"CLUSTER_SERVICE_CLIENT_SECRET=e2e-CLIENT-SECRET-3a7d", "CLUSTER_SERVICE_TOKEN_URL=https://127.0.0.1:3/token"},
			"opstatus: setting CLUSTER_SERVICE_AUDIENCE, CLUSTER_SERVICE_CLIENT_ID: the managed identity's token and client credentials are exclusive; set one"},
		{"a malformed CA bundle", []string{"CLUSTER_SERVICE_CA_BUNDLE=" + corrupt},
			"opstatus: setting CLUSTER_SERVICE_CA_BUNDLE: PEM block 1 does not decode"},
		{"an unresolved Key Vault reference", []string{"CLUSTER_SERVICE_CA_BUNDLE=@Microsoft.KeyVault(VaultName=v;SecretName=ca)"},
			"opstatus: setting CLUSTER_SERVICE_CA_BUNDLE: a Key Vault reference the platform did not resolve (the identity's access to the secret, keyVaultReferenceIdentity)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := refusedAtStart(t, tc.env...)
			require.Equal(t, tc.want+"\n", out)
		})
	}
}

// refusedAtStart runs the built handler with a minimal valid environment
// plus env, requires it to stop at start with status 1, and returns what it
// printed. A handler that starts instead is stopped after 30 s, and fails
// the test.
func refusedAtStart(t *testing.T, env ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	port, err := testenv.FreePort()
	require.NoError(t, err)
	cmd := exec.CommandContext(ctx, testenv.Build(t, "."))
	cmd.Env = append([]string{"FUNCTIONS_CUSTOMHANDLER_PORT=" + strconv.Itoa(port), "COSMOS_ENDPOINT=https://127.0.0.1:1",
		"COSMOS_DATABASE=d", "AZURE_LOCATION=eastus", "CLUSTER_SERVICE_URL=https://127.0.0.1:2"}, env...)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, string(out))
	require.Equal(t, 1, exit.ExitCode())
	return string(out)
}
