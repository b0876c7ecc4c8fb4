// Package identity is a stand-in for the managed identity endpoint that App
// Service and Azure Functions (Flex Consumption included) give an app's
// processes: IDENTITY_ENDPOINT, a local URL, and IDENTITY_HEADER, the
// secret every request carries. It speaks API version 2019-08-01 as
// azidentity v1.13.1 calls it through MSAL (apps/managedidentity
// createAppServiceAuthRequest): GET with api-version, resource and
// client_id in the query and the secret in X-IDENTITY-HEADER; the answer
// is access_token, expires_on (Unix seconds, a string), resource,
// token_type and client_id, as App Service documents it.
//
// Undocumented, and assumed here: a request with a wrong or missing secret
// is answered 401, an unknown identity or a missing resource 400, with the
// JSON error body {"statusCode":…,"message":…}.
package identity

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Path is where the endpoint answers, as App Service's IDENTITY_ENDPOINT
// names it.
const Path = "/msi/token"

// APIVersion is the only API version the endpoint takes.
const APIVersion = "2019-08-01"

// DefaultLifetime is how long a token lives unless SetLifetime says: App
// Service's tokens live about a day.
const DefaultLifetime = 24 * time.Hour

// Token is one access token the endpoint issued.
type Token struct {
	Value     string
	Resource  string // the audience asked for
	ClientID  string
	ExpiresOn time.Time // whole seconds, as expires_on carries it
}

// Endpoint is the stand-in: an http.Handler to serve at Path.
type Endpoint struct {
	secret   string
	clientID string

	mu       sync.Mutex
	lifetime time.Duration
	fail     int // 0: serve; otherwise the status every request gets
	requests int
	issued   []Token
}

// New returns an endpoint of an app whose one identity, user-assigned,
// has client ID clientID, and whose IDENTITY_HEADER is secret.
func New(secret, clientID string) *Endpoint {
	return &Endpoint{secret: secret, clientID: clientID, lifetime: DefaultLifetime}
}

// Env is the process environment that points azidentity at the endpoint
// served at base (scheme and host): what the platform sets, and
// AZURE_CLIENT_ID as the template sets it.
func (e *Endpoint) Env(base string) []string {
	return []string{"IDENTITY_ENDPOINT=" + base + Path, "IDENTITY_HEADER=" + e.secret, "AZURE_CLIENT_ID=" + e.clientID}
}

// SetLifetime sets the lifetime of the tokens issued from now on.
func (e *Endpoint) SetLifetime(d time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.lifetime = d
}

// Fail makes every request from now on get status code (a 5xx: the
// endpoint is failing); 0 serves again.
func (e *Endpoint) Fail(code int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.fail = code
}

// Requests is the number of requests received, whatever their answer.
func (e *Endpoint) Requests() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.requests
}

// Issued returns the tokens issued, in order.
func (e *Endpoint) Issued() []Token {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]Token(nil), e.issued...)
}

// Valid reports whether value is a token the endpoint issued for audience
// that has not expired: what a gateway checking Entra tokens would accept.
func (e *Endpoint) Valid(value, audience string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, t := range e.issued {
		if t.Value == value {
			return t.Resource == audience && time.Now().Before(t.ExpiresOn)
		}
	}
	return false
}

// ServeHTTP answers a token request.
func (e *Endpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.requests++
	q := r.URL.Query()
	switch {
	case e.fail != 0:
		writeError(w, e.fail, "the identity endpoint is failing")
	case r.URL.Path != Path:
		writeError(w, http.StatusNotFound, "no such path")
	case r.Method != http.MethodGet:
		writeError(w, http.StatusMethodNotAllowed, "GET only")
	case r.Header.Get("X-IDENTITY-HEADER") != e.secret:
		writeError(w, http.StatusUnauthorized, "X-IDENTITY-HEADER is missing or wrong")
	case q.Get("api-version") != APIVersion:
		writeError(w, http.StatusBadRequest, "api-version must be "+APIVersion)
	case q.Get("resource") == "":
		writeError(w, http.StatusBadRequest, "resource is required")
	case q.Get("client_id") != e.clientID:
		// The app has no system-assigned identity, and one user-assigned.
		writeError(w, http.StatusBadRequest, "No User Assigned or Delegated Managed Identity found for specified ClientId/ResourceId/PrincipalId.")
	default:
		e.issue(w, q.Get("resource"))
	}
}

// issue writes a new token for resource; e.mu is held.
func (e *Endpoint) issue(w http.ResponseWriter, resource string) {
	now := time.Now()
	expires := time.Unix(now.Add(e.lifetime).Unix(), 0)
	n := len(e.issued) + 1
	enc := base64.RawURLEncoding
	claims, _ := json.Marshal(map[string]any{
		"aud": resource, "appid": e.clientID, "iat": now.Unix(), "exp": expires.Unix(),
		"jti": fmt.Sprintf("identity-stand-in-%d", n),
	})
	value := enc.EncodeToString([]byte(`{"alg":"RS256","typ":"JWT"}`)) + "." + enc.EncodeToString(claims) + "." +
		enc.EncodeToString(fmt.Appendf(nil, "identity-stand-in-signature-%d", n))
	e.issued = append(e.issued, Token{Value: value, Resource: resource, ClientID: e.clientID, ExpiresOn: expires})
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]string{
		"access_token": value,
		"expires_on":   strconv.FormatInt(expires.Unix(), 10),
		"resource":     resource,
		"token_type":   "Bearer",
		"client_id":    e.clientID,
	})
}

func writeError(w http.ResponseWriter, code int, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"statusCode": code, "message": message})
}
