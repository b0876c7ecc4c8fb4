package clusterservice

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// issuer is a token endpoint that hands out token-1, token-2, … with the
// reply body made by body (given the token), or answers status.
type issuer struct {
	*httptest.Server
	issued  atomic.Int32
	hold    chan struct{} // when set, every request waits for it to close
	status  int
	body    func(token string) string
	lastReq atomic.Pointer[http.Request]
}

func newIssuer(t *testing.T, body func(token string) string) *issuer {
	is := &issuer{status: http.StatusOK, body: body}
	is.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if is.hold != nil {
			<-is.hold
		}
		_ = r.ParseForm()
		is.lastReq.Store(r)
		n := is.issued.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(is.status)
		_, _ = io.WriteString(w, is.body(fmt.Sprintf("token-%d", n)))
	}))
	t.Cleanup(is.Close)
	return is
}

func expiresIn(seconds string) func(string) string {
	return func(token string) string {
		return fmt.Sprintf(`{"access_token":%q,"token_type":"Bearer","expires_in":%s}`, token, seconds)
	}
}

func (is *issuer) source(t *testing.T, clientID, secret string) *tokenSource {
	u, err := url.Parse(is.URL + "/token")
	require.NoError(t, err)
	return newTokenSource(u, clientID, secret, http.DefaultTransport, DefaultMaxReplyBytes, slog.New(slog.DiscardHandler))
}

func TestTokenRequestIsClientCredentials(t *testing.T) {
	is := newIssuer(t, expiresIn("3600"))
	s := is.source(t, "id:with/odd&chars", "p@ss word")
	tok, err := s.get(context.Background())
	require.NoError(t, err)
	require.Equal(t, "token-1", tok)

	r := is.lastReq.Load()
	require.Equal(t, http.MethodPost, r.Method)
	require.Equal(t, "/token", r.URL.Path)
	require.Equal(t, "client_credentials", r.PostForm.Get("grant_type"))
	require.Equal(t, "application/x-www-form-urlencoded", r.Header.Get("Content-Type"))
	require.Equal(t, UserAgent, r.Header.Get("User-Agent"))
	// RFC 6749 section 2.3.1: each part form-encoded before HTTP Basic.
	id, pw, ok := r.BasicAuth()
	require.True(t, ok)
	require.Equal(t, url.QueryEscape("id:with/odd&chars"), id)
	require.Equal(t, url.QueryEscape("p@ss word"), pw)
}

func TestTokenKeptUntilAboutToExpire(t *testing.T) {
	is := newIssuer(t, expiresIn("120"))
	s := is.source(t, "id", "pw")
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return now }

	for range 3 {
		tok, err := s.get(context.Background())
		require.NoError(t, err)
		require.Equal(t, "token-1", tok)
	}
	now = now.Add(120*time.Second - tokenRenewBefore - time.Second)
	tok, err := s.get(context.Background())
	require.NoError(t, err)
	require.Equal(t, "token-1", tok, "still more than tokenRenewBefore left")

	now = now.Add(2 * time.Second)
	tok, err = s.get(context.Background())
	require.NoError(t, err)
	require.Equal(t, "token-2", tok, "renewed before it expires")
	require.Equal(t, int32(2), is.issued.Load())
}

func TestTokenLifetime(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	jwt := func(exp int64) string {
		enc := base64.RawURLEncoding
		return enc.EncodeToString([]byte(`{"alg":"none"}`)) + "." +
			enc.EncodeToString([]byte(fmt.Sprintf(`{"exp":%d}`, exp))) + ".sig"
	}
	for _, tc := range []struct {
		name  string
		reply tokenReply
		want  time.Duration
	}{
		{"expires_in number", tokenReply{ExpiresIn: []byte(`300`)}, 300 * time.Second},
		{"expires_in string", tokenReply{ExpiresIn: []byte(`"300"`)}, 300 * time.Second},
		{"expires_in wins over the JWT", tokenReply{ExpiresIn: []byte(`300`), AccessToken: jwt(now.Unix() + 900)}, 300 * time.Second},
		{"JWT exp", tokenReply{AccessToken: jwt(now.Unix() + 900)}, 900 * time.Second},
		{"JWT exp in the past", tokenReply{AccessToken: jwt(now.Unix() - 10)}, tokenDefaultLifetime},
		{"opaque token", tokenReply{AccessToken: "opaque"}, tokenDefaultLifetime},
		{"zero", tokenReply{ExpiresIn: []byte(`0`)}, tokenDefaultLifetime},
		{"negative", tokenReply{ExpiresIn: []byte(`-5`)}, tokenDefaultLifetime},
		{"not a number", tokenReply{ExpiresIn: []byte(`"soon"`)}, tokenDefaultLifetime},
		{"null", tokenReply{ExpiresIn: []byte(`null`)}, tokenDefaultLifetime},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &tokenSource{now: func() time.Time { return now }}
			require.Equal(t, tc.want, s.lifetime(tc.reply))
		})
	}
}

// TestTokenLifetimeFromTheReply: an expires_in that is not a whole number
// of seconds neither fails the token request nor is ignored. (x/oauth2's
// clientcredentials rejects such a reply as a whole.)
func TestTokenLifetimeFromTheReply(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for seconds, want := range map[string]time.Duration{
		`300.5`:  300500 * time.Millisecond,
		`"soon"`: tokenDefaultLifetime,
	} {
		is := newIssuer(t, expiresIn(seconds))
		s := is.source(t, "id", "pw")
		s.now = func() time.Time { return now }
		tok, err := s.get(context.Background())
		require.NoError(t, err, seconds)
		require.Equal(t, "token-1", tok)
		require.Equal(t, want, s.expires.Sub(now), seconds)
	}
}

func TestTokenEndpointFailures(t *testing.T) {
	for _, tc := range []struct {
		name      string
		status    int
		body      string
		err       string
		transient bool
		tooLarge  bool
	}{
		{name: "400 invalid_client", status: 400, body: `{"error":"invalid_client","error_description":"who are you"}`,
			err: `HTTP 400 Bad Request: "invalid_client"`},
		{name: "401 without a body", status: 401, err: "HTTP 401"},
		{name: "503", status: 503, body: `<html>down</html>`, err: "HTTP 503", transient: true},
		{name: "429", status: 429, err: "HTTP 429", transient: true},
		{name: "no access_token", status: 200, body: `{"token_type":"Bearer"}`, err: "no access_token"},
		{name: "not JSON", status: 200, body: `access_token=x`, err: "malformed reply"},
		{name: "not a bearer token", status: 200, body: `{"access_token":"x","token_type":"mac"}`, err: "not Bearer"},
		{name: "too large", status: 200, body: `{"access_token":"` + strings.Repeat("x", DefaultMaxReplyBytes) + `"}`, tooLarge: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			is := newIssuer(t, func(string) string { return tc.body })
			is.status = tc.status
			_, err := is.source(t, "id", "pw").get(context.Background())
			require.Error(t, err)
			require.Contains(t, err.Error(), "token endpoint")
			require.Contains(t, err.Error(), tc.err)
			require.Equal(t, tc.transient, IsTransient(err), "%v", err)
			require.Equal(t, tc.tooLarge, errors.Is(err, ErrReplyTooLarge))
			require.NotContains(t, err.Error(), "who are you", "the server's prose stays out of errors")
		})
	}
}

func TestTokenEndpointDownIsTransient(t *testing.T) {
	is := newIssuer(t, expiresIn("3600"))
	s := is.source(t, "id", "pw")
	is.Close()
	_, err := s.get(context.Background())
	require.Error(t, err)
	require.True(t, IsTransient(err), "%v", err)
}

// TestConcurrentCallersShareOneTokenRequest: 32 polls start together with no
// token; one request goes to the token endpoint, the rest wait for it.
func TestConcurrentCallersShareOneTokenRequest(t *testing.T) {
	is := newIssuer(t, expiresIn("3600"))
	is.hold = make(chan struct{})
	s := is.source(t, "id", "pw")
	var wg sync.WaitGroup
	got := make(chan string, 32)
	for range 32 {
		wg.Go(func() {
			tok, err := s.get(context.Background())
			if err != nil {
				tok = err.Error()
			}
			got <- tok
		})
	}
	time.Sleep(50 * time.Millisecond) // let them pile up; the count below holds either way
	close(is.hold)
	wg.Wait()
	close(got)
	for tok := range got {
		require.Equal(t, "token-1", tok)
	}
	require.Equal(t, int32(1), is.issued.Load())
}

func TestWaitingForATokenStopsWithTheContext(t *testing.T) {
	is := newIssuer(t, expiresIn("3600"))
	is.hold = make(chan struct{})
	defer close(is.hold)
	s := is.source(t, "id", "pw")
	first := make(chan error, 1)
	go func() {
		_, err := s.get(context.Background())
		first <- err
	}()
	require.Eventually(t, func() bool { return len(s.sem) == 1 }, 10*time.Second, time.Millisecond)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.get(ctx)
	require.ErrorIs(t, err, context.Canceled)
	require.True(t, IsTransient(err))
}

// TestRefusedTokenIsRenewed: Cluster Service answers 401 to a token the
// token endpoint said was valid (revoked, or keys rotated): that call fails,
// and the next one asks for a new token instead of reusing the refused one.
func TestRefusedTokenIsRenewed(t *testing.T) {
	is := newIssuer(t, expiresIn("3600"))
	var refuse atomic.Bool
	refuse.Store(true)
	rec := &recorder{reply: func(w http.ResponseWriter, r *http.Request) {
		if refuse.Load() && r.Header.Get("Authorization") == "Bearer token-1" {
			replyJSON(http.StatusUnauthorized, `{"kind":"Error","reason":"token revoked"}`)(w, r)
			return
		}
		statusReplies()(w, r)
	}}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	c := newClient(t, Config{URL: srv.URL, ClientID: "id", ClientSecret: "pw", TokenURL: is.URL + "/token"})

	_, err := c.Status(context.Background(), hcpCluster)
	require.Error(t, err)
	require.Contains(t, err.Error(), "401")
	require.False(t, IsTransient(err))

	st, err := c.Status(context.Background(), hcpCluster)
	require.NoError(t, err)
	require.Equal(t, "error", st.State)
	require.Equal(t, int32(2), is.issued.Load())
	seen := rec.seen()
	require.Equal(t, "Bearer token-2", seen[len(seen)-1].Header.Get("Authorization"))
}
