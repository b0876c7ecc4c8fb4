package entra

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/identity"
)

const clientID = "0b7c6f3e-5a2d-4e1f-9c8b-7a6d5e4f3c2b"

// standIn serves the identity endpoint and points the process at it, as
// the Functions host does. MSAL's token cache is the process's: each test
// asks for its own audience.
func standIn(t *testing.T) *identity.Endpoint {
	ep := identity.New("identity-header-secret", clientID)
	srv := httptest.NewServer(ep)
	t.Cleanup(srv.Close)
	for _, kv := range ep.Env(srv.URL) {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	return ep
}

func token(t *testing.T, audience string) (string, time.Time, error) {
	t.Helper()
	cred, err := Credential(clientID)
	require.NoError(t, err)
	tk, err := cred.GetToken(context.Background(), policy.TokenRequestOptions{Scopes: []string{Scope(audience)}})
	return tk.Token, tk.ExpiresOn, err
}

func TestScope(t *testing.T) {
	require.Equal(t, "api://cluster-service/.default", Scope("api://cluster-service"))
	require.Equal(t, "api://cluster-service/.default", Scope("api://cluster-service/"))
	require.Equal(t, clientID+"/.default", Scope(clientID))
}

// TestCredentialIsTheUserAssignedIdentity: the stand-in refuses any request
// but azidentity's App Service one for the one identity, so a token means
// the request was that.
func TestCredentialIsTheUserAssignedIdentity(t *testing.T) {
	ep := standIn(t)
	tok, expires, err := token(t, "api://entra-test-identity")
	require.NoError(t, err)
	require.True(t, ep.Valid(tok, "api://entra-test-identity"), "the resource is the audience, without /.default")
	require.True(t, ep.Issued()[0].ExpiresOn.Equal(expires), "expires_on read as sent")

	cred, err := Credential("99999999-2222-3333-4444-555555555555")
	require.NoError(t, err)
	_, err = cred.GetToken(context.Background(), policy.TokenRequestOptions{Scopes: []string{Scope("api://entra-test-identity-other")}})
	var failed *azidentity.AuthenticationFailedError
	require.ErrorAs(t, err, &failed)
	require.Equal(t, http.StatusBadRequest, failed.RawResponse.StatusCode)
}

// TestCredentialCachesUntilNearExpiry checks what Tokens relies on:
// azidentity hands back its token until five minutes before it expires,
// and a new one within them.
func TestCredentialCachesUntilNearExpiry(t *testing.T) {
	ep := standIn(t)
	first, _, err := token(t, "api://entra-test-cache")
	require.NoError(t, err)
	again, _, err := token(t, "api://entra-test-cache")
	require.NoError(t, err)
	require.Equal(t, first, again)
	require.Equal(t, 1, ep.Requests())

	ep.SetLifetime(5*time.Minute - time.Second)
	short, _, err := token(t, "api://entra-test-near-expiry")
	require.NoError(t, err)
	next, _, err := token(t, "api://entra-test-near-expiry")
	require.NoError(t, err)
	require.NotEqual(t, short, next, "a token within five minutes of its expiry is not reused")
	require.Equal(t, 3, ep.Requests())
}

func TestCredentialRetriesAFailingEndpointBriefly(t *testing.T) {
	ep := standIn(t)
	ep.Fail(http.StatusServiceUnavailable)
	_, _, err := token(t, "api://entra-test-failing")
	var failed *azidentity.AuthenticationFailedError
	require.ErrorAs(t, err, &failed)
	require.Equal(t, http.StatusServiceUnavailable, failed.RawResponse.StatusCode)
	require.Equal(t, 1+maxRetries, ep.Requests())
}
