package clusterservice

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Token lifetimes. A token is renewed when less than tokenRenewBefore of it
// is left, so that no request leaves with a token that expires on the way.
// A reply without expires_in and without a readable JWT exp claim is used
// for tokenDefaultLifetime.
const (
	tokenRenewBefore     = time.Minute
	tokenDefaultLifetime = 5 * time.Minute
)

// tokenSource gets OAuth access tokens with the client credentials grant
// (RFC 6749 section 4.4) and keeps the current one until it is about to
// expire. It stays beside the client, not in entra: its endpoint is
// CLUSTER_SERVICE_TOKEN_URL, Cluster Service's own OAuth server rather
// than Microsoft Entra ID, and it shares the client's transport (CA
// bundle), reply bound and status errors. It is safe for concurrent use; one request at a time goes to the
// token endpoint, and a caller whose context ends stops waiting for it.
//
// It is not x/oauth2's clientcredentials: its ReuseTokenSource takes no
// context and cannot drop a refused token, and its token request refuses a
// reply whose expires_in is not a whole number, cuts replies at 1 MiB and
// puts the server's error description in its errors.
type tokenSource struct {
	url          string
	clientID     string
	clientSecret string
	transport    http.RoundTripper
	maxReply     int64
	logger       *slog.Logger
	now          func() time.Time

	sem     chan struct{} // holds the right to read or renew the token
	token   string
	expires time.Time
}

func newTokenSource(tokenURL *url.URL, clientID, clientSecret string, transport http.RoundTripper, maxReply int64, logger *slog.Logger) *tokenSource {
	return &tokenSource{
		url:          tokenURL.String(),
		clientID:     clientID,
		clientSecret: clientSecret,
		transport:    transport,
		maxReply:     maxReply,
		logger:       logger,
		now:          time.Now,
		sem:          make(chan struct{}, 1),
	}
}

// get returns a valid access token, asking the token endpoint for a new
// one when the current one is missing or about to expire.
func (s *tokenSource) get(ctx context.Context) (string, error) {
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return "", fmt.Errorf("waiting for an access token: %w", ctx.Err())
	}
	defer func() { <-s.sem }()
	if s.token != "" && s.now().Before(s.expires.Add(-tokenRenewBefore)) {
		return s.token, nil
	}
	token, lifetime, err := s.request(ctx)
	if err != nil {
		return "", err
	}
	s.token, s.expires = token, s.now().Add(lifetime)
	s.logger.DebugContext(ctx, "cluster service access token renewed", "expiresIn", lifetime.String())
	return token, nil
}

// invalidate forgets token if it is still the current one: Cluster Service
// refused it, so the next call asks for a new one.
func (s *tokenSource) invalidate(ctx context.Context, token string) {
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return
	}
	defer func() { <-s.sem }()
	if s.token == token {
		s.token = ""
	}
}

// tokenReply is the token endpoint's answer, success or error (RFC 6749
// sections 5.1 and 5.2).
type tokenReply struct {
	AccessToken string          `json:"access_token"`
	TokenType   string          `json:"token_type"`
	ExpiresIn   json.RawMessage `json:"expires_in"`
	Error       string          `json:"error"`
}

func (s *tokenSource) request(ctx context.Context) (string, time.Duration, error) {
	form := url.Values{"grant_type": {"client_credentials"}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, strings.NewReader(form))
	if err != nil {
		return "", 0, fmt.Errorf("token endpoint: %w", err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", UserAgent)
	// Section 2.3.1: both parts form-encoded, then HTTP Basic.
	req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString(
		[]byte(url.QueryEscape(s.clientID)+":"+url.QueryEscape(s.clientSecret))))

	resp, err := s.transport.RoundTrip(req)
	if err != nil {
		// Wrapped like net/http.Client does, so that IsTransient sees a
		// dropped connection the same way for both endpoints.
		return "", 0, fmt.Errorf("token endpoint: %w", &url.Error{Op: "Post", URL: req.URL.Redacted(), Err: err})
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, s.maxReply+1))
	switch {
	case err != nil:
		return "", 0, fmt.Errorf("token endpoint: reading the reply: %w", err)
	case int64(len(body)) > s.maxReply:
		return "", 0, fmt.Errorf("token endpoint: %w", ErrReplyTooLarge)
	}
	var reply tokenReply
	decodeErr := json.Unmarshal(body, &reply)
	if resp.StatusCode != http.StatusOK {
		err := &httpStatusError{code: resp.StatusCode}
		if decodeErr == nil && reply.Error != "" {
			// The OAuth error code (e.g. invalid_client) is safe to show;
			// the description is the server's prose and stays out.
			err.err = fmt.Errorf("%s", quote(truncate(reply.Error, maxCodeBytes)))
		}
		return "", 0, fmt.Errorf("token endpoint: %w", err)
	}
	switch {
	case decodeErr != nil:
		return "", 0, fmt.Errorf("token endpoint: malformed reply: %w", decodeErr)
	case reply.AccessToken == "":
		return "", 0, fmt.Errorf("token endpoint: malformed reply: no access_token")
	case reply.TokenType != "" && !strings.EqualFold(reply.TokenType, "bearer"):
		return "", 0, fmt.Errorf("token endpoint: token_type %s is not Bearer", quote(truncate(reply.TokenType, maxCodeBytes)))
	}
	return reply.AccessToken, s.lifetime(reply), nil
}

// lifetime is expires_in (a number, or a string as some servers send it),
// else the exp claim of a JWT access token, else tokenDefaultLifetime.
func (s *tokenSource) lifetime(reply tokenReply) time.Duration {
	var seconds json.Number
	raw := strings.Trim(string(reply.ExpiresIn), `"`)
	if json.Unmarshal([]byte(raw), &seconds) == nil {
		if n, err := seconds.Float64(); err == nil && n > 0 {
			return time.Duration(n * float64(time.Second))
		}
	}
	if exp, ok := jwtExpiry(reply.AccessToken); ok && exp.After(s.now()) {
		return exp.Sub(s.now())
	}
	return tokenDefaultLifetime
}

// jwtExpiry reads the exp claim of a JWT without verifying it: it only
// decides when to ask for a new token, the server decides what it accepts.
func jwtExpiry(token string) (time.Time, bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return time.Time{}, false
	}
	var claims struct {
		Exp json.Number `json:"exp"`
	}
	if json.Unmarshal(payload, &claims) != nil {
		return time.Time{}, false
	}
	exp, err := claims.Exp.Int64()
	if err != nil || exp <= 0 {
		return time.Time{}, false
	}
	return time.Unix(exp, 0), true
}
