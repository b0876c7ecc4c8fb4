// Package entra builds the app's Microsoft Entra ID credential: its managed
// identity, which the Functions host hands to the process as the local
// endpoint IDENTITY_ENDPOINT with the secret IDENTITY_HEADER (IMDS
// elsewhere). Every client that needs an Entra token (Cosmos DB, Cluster
// Service, the metrics' remote write) shares the one credential. Tokens
// keeps the token of one audience for the clients that set it on their
// own requests (Cluster Service, the remote write); Cosmos DB's azcore
// pipeline keeps its own.
package entra

import (
	"fmt"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
)

// Retries of a token request that fails with a 5xx, a 429 or a dropped
// connection. The token is asked for on the way of a request that has its
// own timeout (10 s for Cluster Service), and the next scan retries what
// fails: a few quick retries, not azcore's default of about six seconds.
const (
	maxRetries    = 2
	retryDelay    = 200 * time.Millisecond
	maxRetryDelay = time.Second
)

// Credential returns the managed identity credential of the user-assigned
// identity whose client ID is clientID (AZURE_CLIENT_ID, which the template
// sets), or of the app's system-assigned identity when clientID is empty.
// It contacts nothing until a token is asked for. azidentity (MSAL) keeps
// each token in memory until five minutes before it expires and refreshes
// it from its refresh time on (half its lifetime when that is over two
// hours).
func Credential(clientID string) (azcore.TokenCredential, error) {
	opts := &azidentity.ManagedIdentityCredentialOptions{
		ClientOptions: azcore.ClientOptions{
			Retry: policy.RetryOptions{MaxRetries: maxRetries, RetryDelay: retryDelay, MaxRetryDelay: maxRetryDelay},
		},
	}
	if clientID != "" {
		opts.ID = azidentity.ClientID(clientID)
	}
	cred, err := azidentity.NewManagedIdentityCredential(opts)
	if err != nil {
		return nil, fmt.Errorf("managed identity credential: %w", err)
	}
	return cred, nil
}

// Scope is the scope of a token for audience, an application ID URI such
// as api://cluster-service or an application's client ID: the audience and
// "/.default".
func Scope(audience string) string {
	return strings.TrimSuffix(audience, "/") + "/.default"
}
