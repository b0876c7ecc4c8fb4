package clusterservice

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/testca"
	"github.com/opstatus/opstatus/dev/testenv"
)

// fakeCredential hands out token-1, token-2, … living lifetime from the
// fake clock, or fails with err; it records the scopes asked for.
type fakeCredential struct {
	mu        sync.Mutex
	now       func() time.Time
	lifetime  time.Duration
	refreshIn time.Duration // 0: no RefreshOn
	err       error
	calls     int
	scopes    [][]string
	hold      chan struct{} // when set, GetToken waits for it to close
}

func (f *fakeCredential) GetToken(ctx context.Context, opts policy.TokenRequestOptions) (azcore.AccessToken, error) {
	f.mu.Lock()
	hold := f.hold
	f.mu.Unlock()
	if hold != nil {
		<-hold
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	f.scopes = append(f.scopes, opts.Scopes)
	if f.err != nil {
		return azcore.AccessToken{}, f.err
	}
	now := f.now()
	tk := azcore.AccessToken{Token: fmt.Sprintf("token-%d", f.calls), ExpiresOn: now.Add(f.lifetime)}
	if f.refreshIn > 0 {
		tk.RefreshOn = now.Add(f.refreshIn)
	}
	return tk, nil
}

func (f *fakeCredential) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

func (f *fakeCredential) fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

// clock is a manual clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newEntraFixture(lifetime time.Duration, logger *slog.Logger) (*entraTokens, *fakeCredential, *clock) {
	clk := &clock{t: time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)}
	cred := &fakeCredential{now: clk.now, lifetime: lifetime}
	s := newEntraTokens(cred, "api://cluster-service/.default", logger)
	s.now = clk.now
	return s, cred, clk
}

func TestEntraTokenFetchedOnceForConcurrentCalls(t *testing.T) {
	s, cred, _ := newEntraFixture(time.Hour, slog.New(slog.DiscardHandler))
	cred.hold = make(chan struct{})
	var wg sync.WaitGroup
	got := make(chan string, 16)
	for range 16 {
		wg.Go(func() {
			tok, err := s.get(context.Background())
			if err == nil {
				got <- tok
			}
		})
	}
	close(cred.hold)
	wg.Wait()
	close(got)
	n := 0
	for tok := range got {
		require.Equal(t, "token-1", tok)
		n++
	}
	require.Equal(t, 16, n)
	require.Equal(t, 1, cred.callCount())
	require.Equal(t, [][]string{{"api://cluster-service/.default"}}, cred.scopes)
}

func TestEntraTokenRefreshedBeforeExpiry(t *testing.T) {
	for _, tc := range []struct {
		name            string
		lifetime, refIn time.Duration
		keep, refreshAt time.Duration // still token-1 at keep; token-2 at refreshAt
	}{
		{name: "five minutes before it expires", lifetime: time.Hour, keep: 55*time.Minute - time.Second, refreshAt: 55 * time.Minute},
		{name: "at the credential's RefreshOn", lifetime: 24 * time.Hour, refIn: 12 * time.Hour, keep: 12*time.Hour - time.Second, refreshAt: 12 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, cred, clk := newEntraFixture(tc.lifetime, slog.New(slog.DiscardHandler))
			cred.refreshIn = tc.refIn
			tok, err := s.get(context.Background())
			require.NoError(t, err)
			require.Equal(t, "token-1", tok)
			clk.advance(tc.keep)
			tok, err = s.get(context.Background())
			require.NoError(t, err)
			require.Equal(t, "token-1", tok)
			clk.advance(tc.refreshAt - tc.keep)
			tok, err = s.get(context.Background())
			require.NoError(t, err)
			require.Equal(t, "token-2", tok)
			require.Equal(t, 2, cred.callCount())
		})
	}
}

func TestEntraFailedRefreshKeepsTheValidToken(t *testing.T) {
	logs := &testenv.SyncBuffer{}
	s, cred, clk := newEntraFixture(time.Hour, debugLogger(logs))
	_, err := s.get(context.Background())
	require.NoError(t, err)

	clk.advance(56 * time.Minute) // due for refresh, 4 minutes left
	cred.fail(errors.New("endpoint down"))
	tok, err := s.get(context.Background())
	require.NoError(t, err)
	require.Equal(t, "token-1", tok, "still valid: kept")
	require.Contains(t, logs.String(), "managed identity token not renewed")
	tok, err = s.get(context.Background())
	require.NoError(t, err)
	require.Equal(t, "token-1", tok)
	require.Equal(t, 2, cred.callCount(), "no new attempt before entraRetryAfter")

	clk.advance(entraRetryAfter)
	cred.fail(nil)
	tok, err = s.get(context.Background())
	require.NoError(t, err)
	require.Equal(t, "token-3", tok, "the failed attempt was the second call")

	// A token with less than tokenRenewBefore left is not used: no token,
	// an error.
	clk.advance(59*time.Minute + time.Second)
	cred.fail(errors.New("endpoint down"))
	_, err = s.get(context.Background())
	require.ErrorContains(t, err, "managed identity token: endpoint down")
	requireNoSecrets(t, logs.String()+err.Error(), "token-1", "token-3", "no-client")
}

func TestEntraErrors(t *testing.T) {
	resp := func(code int) error {
		return &azidentity.AuthenticationFailedError{RawResponse: &http.Response{
			StatusCode: code, Status: http.StatusText(code), Body: io.NopCloser(nil), Request: &http.Request{},
		}}
	}
	for _, tc := range []struct {
		name      string
		err       error
		want      string
		transient bool
	}{
		{"endpoint 500", resp(http.StatusInternalServerError), "managed identity token: HTTP 500 Internal Server Error", true},
		{"endpoint 429", resp(http.StatusTooManyRequests), "managed identity token: HTTP 429 Too Many Requests", true},
		{"identity not assigned", resp(http.StatusBadRequest), "managed identity token: HTTP 400 Bad Request", false},
		{"no response", errors.New("ManagedIdentityCredential: dial tcp: connection refused"), "managed identity token: ManagedIdentityCredential: dial tcp", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, cred, _ := newEntraFixture(time.Hour, slog.New(slog.DiscardHandler))
			cred.fail(tc.err)
			_, err := s.get(context.Background())
			require.ErrorContains(t, err, tc.want)
			require.Equal(t, tc.transient, IsTransient(err))
		})
	}
	t.Run("context ended", func(t *testing.T) {
		s, cred, _ := newEntraFixture(time.Hour, slog.New(slog.DiscardHandler))
		cred.fail(errors.New("whatever the credential says"))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		cred.hold = nil
		_, err := s.get(ctx)
		require.ErrorIs(t, err, context.Canceled)
		require.True(t, IsTransient(err))
	})
}

// TestManagedIdentityBearer: every request carries the credential's token
// for the audience, fetched once; without a token no request is sent.
func TestManagedIdentityBearer(t *testing.T) {
	rec := &recorder{reply: statusReplies()}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	cred := &fakeCredential{now: time.Now, lifetime: time.Hour}
	logs := &testenv.SyncBuffer{}
	c := newClient(t, Config{URL: srv.URL, Credential: cred, Audience: "api://cluster-service", Logger: debugLogger(logs)})
	for _, id := range []InternalID{cmCluster, hcpCluster, hcpPool} {
		_, err := c.Status(context.Background(), id)
		require.NoError(t, err)
	}
	require.Equal(t, 1, cred.callCount())
	require.Equal(t, [][]string{{"api://cluster-service/.default"}}, cred.scopes)
	for _, r := range rec.seen() {
		require.Equal(t, "Bearer token-1", r.Header.Get("Authorization"))
	}
	requireNoSecrets(t, logs.String(), "token-1", "token-1", "no-client")

	failing := newClient(t, Config{URL: srv.URL, Audience: "api://cluster-service",
		Credential: &fakeCredential{now: time.Now, err: errors.New("no identity here")}})
	_, err := failing.Status(context.Background(), hcpCluster)
	require.ErrorContains(t, err, "managed identity token: no identity here")
	require.Len(t, rec.seen(), 3, "no request without a token")
}

func TestManagedIdentityConfig(t *testing.T) {
	cred := &fakeCredential{now: time.Now}
	for _, tc := range []struct {
		name string
		cfg  Config
		err  string
	}{
		{"credential without audience", Config{URL: "https://cs", Credential: cred}, "Credential and Audience must be set together"},
		{"audience without credential", Config{URL: "https://cs", Audience: "api://cs"}, "Credential and Audience must be set together"},
		{"with client credentials", Config{URL: "https://cs", Credential: cred, Audience: "api://cs",
			ClientID: "id", ClientSecret: "pw", TokenURL: "https://login/token"}, "exclusive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewClient(tc.cfg)
			require.ErrorContains(t, err, tc.err)
		})
	}
}

// TestCABundle: a server whose certificate a private CA issued is refused
// with the system's roots alone and trusted with the CA added; another
// CA's bundle does not turn verification off.
func TestCABundle(t *testing.T) {
	ca := testca.New(t, "gateway CA")
	rec := &recorder{reply: statusReplies()}
	srv := httptest.NewUnstartedServer(rec)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are expected
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.ServerCert(t)}}
	srv.StartTLS()
	defer srv.Close()

	for _, tc := range []struct {
		name string
		cas  []*x509.Certificate
		ok   bool
	}{
		{"system roots", nil, false},
		{"another CA", []*x509.Certificate{testca.New(t, "other CA").Cert}, false},
		{"the gateway's CA", []*x509.Certificate{ca.Cert}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(rec.seen())
			c := newClient(t, Config{URL: srv.URL, RootCAs: tc.cas})
			_, err := c.Status(context.Background(), hcpCluster)
			if tc.ok {
				require.NoError(t, err)
				require.Len(t, rec.seen(), before+1)
				return
			}
			require.ErrorContains(t, err, "certificate")
			require.False(t, IsTransient(err))
			require.Len(t, rec.seen(), before, "no request over an unverified connection")
		})
	}
}
