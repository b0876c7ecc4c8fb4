package entra

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/internal/testenv"
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

func newFixture(lifetime time.Duration, logger *slog.Logger) (*Tokens, *fakeCredential, *clock) {
	clk := &clock{t: time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)}
	cred := &fakeCredential{now: clk.now, lifetime: lifetime}
	s := NewTokens(cred, "api://cluster-service/.default", logger)
	s.now = clk.now
	return s, cred, clk
}

func debugLogger(buf *testenv.SyncBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func TestTokenFetchedOnceForConcurrentCalls(t *testing.T) {
	s, cred, _ := newFixture(time.Hour, slog.New(slog.DiscardHandler))
	cred.hold = make(chan struct{})
	var wg sync.WaitGroup
	got := make(chan string, 16)
	for range 16 {
		wg.Go(func() {
			tok, err := s.Token(context.Background())
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

// TestWaitingCallerLeavesWhenItsContextEnds: a caller behind a token
// request that hangs stops waiting when its own context ends.
func TestWaitingCallerLeavesWhenItsContextEnds(t *testing.T) {
	s, cred, _ := newFixture(time.Hour, slog.New(slog.DiscardHandler))
	cred.hold = make(chan struct{})
	first := make(chan error, 1)
	go func() {
		_, err := s.Token(context.Background())
		first <- err
	}()
	require.Eventually(t, func() bool { return len(s.sem) == 1 }, 5*time.Second, time.Millisecond, "the first caller holds the source")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := s.Token(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "waiting for a managed identity token")
	close(cred.hold)
	require.NoError(t, <-first)
	require.Equal(t, 1, cred.callCount())
}

func TestTokenRefreshedBeforeExpiry(t *testing.T) {
	for _, tc := range []struct {
		name            string
		lifetime, refIn time.Duration
		keep, refreshAt time.Duration // still token-1 at keep; token-2 at refreshAt
	}{
		{name: "five minutes before it expires", lifetime: time.Hour, keep: 55*time.Minute - time.Second, refreshAt: 55 * time.Minute},
		{name: "at the credential's RefreshOn", lifetime: 24 * time.Hour, refIn: 12 * time.Hour, keep: 12*time.Hour - time.Second, refreshAt: 12 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, cred, clk := newFixture(tc.lifetime, slog.New(slog.DiscardHandler))
			cred.refreshIn = tc.refIn
			tok, err := s.Token(context.Background())
			require.NoError(t, err)
			require.Equal(t, "token-1", tok)
			clk.advance(tc.keep)
			tok, err = s.Token(context.Background())
			require.NoError(t, err)
			require.Equal(t, "token-1", tok)
			clk.advance(tc.refreshAt - tc.keep)
			tok, err = s.Token(context.Background())
			require.NoError(t, err)
			require.Equal(t, "token-2", tok)
			require.Equal(t, 2, cred.callCount())
		})
	}
}

func TestFailedRefreshKeepsTheValidToken(t *testing.T) {
	logs := &testenv.SyncBuffer{}
	s, cred, clk := newFixture(time.Hour, debugLogger(logs))
	_, err := s.Token(context.Background())
	require.NoError(t, err)

	clk.advance(56 * time.Minute) // due for refresh, 4 minutes left
	cred.fail(errors.New("endpoint down"))
	tok, err := s.Token(context.Background())
	require.NoError(t, err)
	require.Equal(t, "token-1", tok, "still valid: kept")
	require.Contains(t, logs.String(), "managed identity token not renewed")
	tok, err = s.Token(context.Background())
	require.NoError(t, err)
	require.Equal(t, "token-1", tok)
	require.Equal(t, 2, cred.callCount(), "no new attempt before retryAfter")

	clk.advance(retryAfter)
	cred.fail(nil)
	tok, err = s.Token(context.Background())
	require.NoError(t, err)
	require.Equal(t, "token-3", tok, "the failed attempt was the second call")

	// A token with less than useBefore left is not used: no token, an
	// error.
	clk.advance(59*time.Minute + time.Second)
	cred.fail(errors.New("endpoint down"))
	_, err = s.Token(context.Background())
	require.ErrorContains(t, err, "managed identity token: endpoint down")
	text := logs.String() + err.Error()
	for _, secret := range []string{"token-1", "token-3", "Bearer"} {
		require.NotContains(t, text, secret)
	}
}

func TestTokenErrors(t *testing.T) {
	const body = "identity endpoint body: tenant 72f988bf, request 1234"
	resp := func(code int) error {
		return &azidentity.AuthenticationFailedError{RawResponse: &http.Response{
			StatusCode: code, Status: http.StatusText(code), Body: io.NopCloser(nil), Request: &http.Request{},
		}}
	}
	withBody := func(code int) error {
		err := resp(code).(*azidentity.AuthenticationFailedError)
		err.RawResponse.Body = io.NopCloser(strings.NewReader(body))
		return err
	}
	for _, tc := range []struct {
		name string
		err  error
		want string
		code int // of the *StatusError; 0: none
	}{
		{"endpoint 500", resp(http.StatusInternalServerError), "managed identity token: HTTP 500 Internal Server Error", 500},
		{"endpoint 429", resp(http.StatusTooManyRequests), "managed identity token: HTTP 429 Too Many Requests", 429},
		{"identity not assigned", withBody(http.StatusBadRequest), "managed identity token: HTTP 400 Bad Request", 400},
		{"no response", errors.New("ManagedIdentityCredential: dial tcp: connection refused"), "managed identity token: ManagedIdentityCredential: dial tcp", 0},
		{"empty token", nil, "managed identity token: the credential gave an empty token", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, cred, _ := newFixture(time.Hour, slog.New(slog.DiscardHandler))
			if tc.err == nil {
				s.cred = emptyCredential{}
			}
			cred.fail(tc.err)
			_, err := s.Token(context.Background())
			require.ErrorContains(t, err, tc.want)
			require.NotContains(t, err.Error(), "identity endpoint body")
			var se *StatusError
			require.Equal(t, tc.code != 0, errors.As(err, &se))
			if tc.code != 0 {
				require.Equal(t, tc.code, se.Code)
			}
		})
	}
	t.Run("context ended", func(t *testing.T) {
		s, cred, _ := newFixture(time.Hour, slog.New(slog.DiscardHandler))
		cred.fail(errors.New("whatever the credential says"))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := s.Token(ctx)
		require.ErrorIs(t, err, context.Canceled)
	})
}

type emptyCredential struct{}

func (emptyCredential) GetToken(context.Context, policy.TokenRequestOptions) (azcore.AccessToken, error) {
	return azcore.AccessToken{ExpiresOn: time.Now().Add(time.Hour)}, nil
}
