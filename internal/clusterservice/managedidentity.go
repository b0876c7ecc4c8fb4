package clusterservice

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
)

// Refresh of an Entra token, as azcore's BearerTokenPolicy does it: from
// the credential's RefreshOn when it gives one, else entraRefreshBefore
// before the token expires (azidentity's own cache treats such a token as
// expired, so asking then gets a new one). A refresh that fails while the
// token is still good keeps it and is tried again after entraRetryAfter.
const (
	entraRefreshBefore = 5 * time.Minute
	entraRetryAfter    = 30 * time.Second
)

// accessTokens gives the access token each Cluster Service request
// carries.
type accessTokens interface {
	get(ctx context.Context) (string, error)
	// invalidate is told that Cluster Service refused token.
	invalidate(ctx context.Context, token string)
}

// entraTokens gets Entra access tokens for one scope from a credential (the
// app's managed identity) and keeps the current one until it should be
// refreshed. One request at a time goes to the credential, so that a burst
// of calls at start fetches one token; a caller whose context ends stops
// waiting. It is not azcore's BearerTokenPolicy, which only runs in an
// azcore pipeline: that would read every body whole and retry requests the
// guard must see once.
type entraTokens struct {
	cred   azcore.TokenCredential
	scope  string
	logger *slog.Logger
	now    func() time.Time

	sem     chan struct{} // holds the right to read or renew the token
	token   azcore.AccessToken
	retryAt time.Time // no refresh before, after one failed
}

func newEntraTokens(cred azcore.TokenCredential, scope string, logger *slog.Logger) *entraTokens {
	return &entraTokens{cred: cred, scope: scope, logger: logger, now: time.Now, sem: make(chan struct{}, 1)}
}

func (s *entraTokens) get(ctx context.Context) (string, error) {
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return "", fmt.Errorf("waiting for a managed identity token: %w", ctx.Err())
	}
	defer func() { <-s.sem }()
	now := s.now()
	// A token is used while at least tokenRenewBefore of it is left, so
	// that none expires on the way.
	usable := s.token.Token != "" && now.Before(s.token.ExpiresOn.Add(-tokenRenewBefore))
	if usable && (!s.refreshDue(now) || now.Before(s.retryAt)) {
		return s.token.Token, nil
	}
	tk, err := s.cred.GetToken(ctx, policy.TokenRequestOptions{Scopes: []string{s.scope}})
	if err == nil && tk.Token == "" {
		err = errors.New("the credential gave an empty token")
	}
	if err != nil {
		err = managedIdentityError(ctx, err)
		if usable {
			s.retryAt = now.Add(entraRetryAfter)
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
func (s *entraTokens) refreshDue(now time.Time) bool {
	if !s.token.RefreshOn.IsZero() {
		return !now.Before(s.token.RefreshOn)
	}
	return !now.Before(s.token.ExpiresOn.Add(-entraRefreshBefore))
}

// invalidate keeps the token: azidentity would hand the same one back from
// its cache until its refresh time. A token Cluster Service refuses is
// refused for a reason a new one does not change (audience, authorization
// policy); a 401 is not transient and says so.
func (s *entraTokens) invalidate(context.Context, string) {}

// managedIdentityError says why no token came, without the identity
// endpoint's reply body: its status as an httpStatusError, so that a 5xx or
// 429 is transient as Cluster Service's are, or the context's end.
func managedIdentityError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("managed identity token: %w", ctx.Err())
	}
	var failed *azidentity.AuthenticationFailedError
	if errors.As(err, &failed) && failed.RawResponse != nil {
		return fmt.Errorf("managed identity token: %w", &httpStatusError{code: failed.RawResponse.StatusCode})
	}
	return fmt.Errorf("managed identity token: %w", err)
}
