package entra

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
)

// Refresh of a token, as azcore's BearerTokenPolicy does it: from the
// credential's RefreshOn when it gives one, else refreshBefore before the
// token expires (azidentity's own cache treats such a token as expired, so
// asking then gets a new one). A refresh that fails while the token is
// still good keeps it and is tried again after retryAfter. A token is used
// while at least useBefore of it is left, so that none expires on the way.
const (
	refreshBefore = 5 * time.Minute
	retryAfter    = 30 * time.Second
	useBefore     = time.Minute
)

// Tokens gives the access tokens of one scope (one audience) from a
// credential, the app's managed identity, and keeps the current one until
// it should be refreshed. One request at a time goes to the credential, so
// that a burst of calls at start fetches one token; a caller whose context
// ends stops waiting. It is not azcore's BearerTokenPolicy, which only runs
// in an azcore pipeline: that would read every body whole and retry
// requests the Cluster Service client must see once.
//
// A token the server refuses is kept: azidentity would hand the same one
// back from its cache until its refresh time, and a refusal has a reason a
// new token does not change (audience, authorization policy).
type Tokens struct {
	cred   azcore.TokenCredential
	scope  string
	logger *slog.Logger
	now    func() time.Time

	sem     chan struct{} // holds the right to read or renew the token
	token   azcore.AccessToken
	retryAt time.Time // no refresh before, after one failed
}

// NewTokens returns the token source of scope (see Scope) from cred. It
// logs a refresh at Debug and a failed one it survives at Warn, without
// the token.
func NewTokens(cred azcore.TokenCredential, scope string, logger *slog.Logger) *Tokens {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Tokens{cred: cred, scope: scope, logger: logger, now: time.Now, sem: make(chan struct{}, 1)}
}

// Token returns a token with at least a minute left, asking the credential
// when the current one is missing or due for refresh. The error says why
// none came without the identity endpoint's reply body: a *StatusError for
// the endpoint's status, or the context's end.
func (s *Tokens) Token(ctx context.Context) (string, error) {
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return "", fmt.Errorf("waiting for a managed identity token: %w", ctx.Err())
	}
	defer func() { <-s.sem }()
	now := s.now()
	usable := s.token.Token != "" && now.Before(s.token.ExpiresOn.Add(-useBefore))
	if usable && (!s.refreshDue(now) || now.Before(s.retryAt)) {
		return s.token.Token, nil
	}
	tk, err := s.cred.GetToken(ctx, policy.TokenRequestOptions{Scopes: []string{s.scope}})
	if err == nil && tk.Token == "" {
		err = errors.New("the credential gave an empty token")
	}
	if err != nil {
		err = tokenError(ctx, err)
		if usable {
			s.retryAt = now.Add(retryAfter)
			s.logger.WarnContext(ctx, "managed identity token not renewed; the current one is used until it expires",
				"error", err, "expires", s.token.ExpiresOn.UTC().Format(time.RFC3339))
			return s.token.Token, nil
		}
		return "", err
	}
	s.token, s.retryAt = tk, time.Time{}
	s.logger.DebugContext(ctx, "managed identity token renewed", "expires", tk.ExpiresOn.UTC().Format(time.RFC3339))
	return tk.Token, nil
}

// refreshDue says whether the current token should be replaced.
func (s *Tokens) refreshDue(now time.Time) bool {
	if !s.token.RefreshOn.IsZero() {
		return !now.Before(s.token.RefreshOn)
	}
	return !now.Before(s.token.ExpiresOn.Add(-refreshBefore))
}

// StatusError is the identity endpoint's refusal, by its HTTP status
// alone: azidentity's error carries the reply body, which stays out of
// errors and logs. Callers tell a transient refusal (5xx, 429) by Code.
type StatusError struct {
	Code int
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("HTTP %d %s", e.Code, http.StatusText(e.Code))
}

// tokenError says why no token came: the endpoint's status as a
// *StatusError, the context's end, or the credential's own error when no
// reply came.
func tokenError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("managed identity token: %w", ctx.Err())
	}
	var failed *azidentity.AuthenticationFailedError
	if errors.As(err, &failed) && failed.RawResponse != nil {
		return fmt.Errorf("managed identity token: %w", &StatusError{Code: failed.RawResponse.StatusCode})
	}
	return fmt.Errorf("managed identity token: %w", err)
}
