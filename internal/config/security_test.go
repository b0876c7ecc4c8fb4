package config

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// managedIdentity is validEnv with the managed identity's token for
// Cluster Service instead of client credentials, and no Cosmos DB key: the
// handler sends Entra tokens to both.
func managedIdentity(kv ...string) map[string]string {
	env := with("CLUSTER_SERVICE_CLIENT_ID", "", "CLUSTER_SERVICE_CLIENT_SECRET", "", "CLUSTER_SERVICE_TOKEN_URL", "",
		"COSMOS_KEY", "", "CLUSTER_SERVICE_AUDIENCE", "api://clusters-service")
	for i := 0; i < len(kv); i += 2 {
		env[kv[i]] = kv[i+1]
	}
	return env
}

// TestCredentialsOnlyOverVerifiedTLS: plain http and unverified
// certificates are refused at start unless the host is this machine, since
// a client secret, a token or a key's signature travels over them.
func TestCredentialsOnlyOverVerifiedTLS(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"the client secret to an http token URL", with("CLUSTER_SERVICE_TOKEN_URL", "http://sso.example.internal/token"),
			"CLUSTER_SERVICE_TOKEN_URL: plain http only to a loopback host (localhost, 127.0.0.1, ::1); use https"},
		{"a client-credentials token to an http Cluster Service", with("CLUSTER_SERVICE_URL", "http://api.example.internal"),
			"CLUSTER_SERVICE_URL: plain http only to a loopback host"},
		{"the managed identity's token to an http Cluster Service", managedIdentity("CLUSTER_SERVICE_URL", "http://10.0.0.4:8000"),
			"CLUSTER_SERVICE_URL: plain http only to a loopback host"},
		{"the client secret unverified", with("CLUSTER_SERVICE_INSECURE_SKIP_VERIFY", "true"),
			"CLUSTER_SERVICE_INSECURE_SKIP_VERIFY, CLUSTER_SERVICE_URL: certificates go unverified only to a loopback host (trust a private CA with CLUSTER_SERVICE_CA_BUNDLE)"},
		{"the client secret unverified at the token URL only", with("CLUSTER_SERVICE_INSECURE_SKIP_VERIFY", "true", "CLUSTER_SERVICE_URL", "https://127.0.0.1:8443"),
			"CLUSTER_SERVICE_INSECURE_SKIP_VERIFY, CLUSTER_SERVICE_TOKEN_URL: certificates go unverified only to a loopback host"},
		{"the managed identity's token unverified", managedIdentity("CLUSTER_SERVICE_INSECURE_SKIP_VERIFY", "true"),
			"CLUSTER_SERVICE_INSECURE_SKIP_VERIFY, CLUSTER_SERVICE_URL: certificates go unverified only to a loopback host"},
		{"Cosmos DB's token unverified", managedIdentity("COSMOS_INSECURE_SKIP_VERIFY", "true"),
			"COSMOS_INSECURE_SKIP_VERIFY, COSMOS_ENDPOINT: certificates go unverified only to a loopback host (an emulator)"},
		{"Cosmos DB's key over http", with("COSMOS_ENDPOINT", "http://account.documents.azure.com"),
			"COSMOS_ENDPOINT: plain http only to a loopback host"},
		{"no credentials, still http", with("CLUSTER_SERVICE_CLIENT_ID", "", "CLUSTER_SERVICE_CLIENT_SECRET", "", "CLUSTER_SERVICE_TOKEN_URL", "",
			"CLUSTER_SERVICE_URL", "http://api.example.internal"), "CLUSTER_SERVICE_URL: plain http only to a loopback host"},
		{"0.0.0.0 is not loopback", with("CLUSTER_SERVICE_URL", "http://0.0.0.0:8000"), "CLUSTER_SERVICE_URL: plain http"},
		{"0x7f.1 is not loopback", with("CLUSTER_SERVICE_URL", "http://0x7f.1:8000"), "CLUSTER_SERVICE_URL: plain http"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(getenv(tc.env))
			require.Error(t, err)
			require.True(t, strings.HasPrefix(err.Error(), tc.want), err.Error())
			require.NotContains(t, err.Error(), "\n", "one line")
			requireNoSecret(t, err.Error())
		})
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
	}{
		{"http and skip-verify to loopback hosts", with("COSMOS_ENDPOINT", "https://127.0.0.1:8081", "COSMOS_INSECURE_SKIP_VERIFY", "true",
			"CLUSTER_SERVICE_URL", "http://localhost:8000", "CLUSTER_SERVICE_TOKEN_URL", "https://[::1]:8444/token", "CLUSTER_SERVICE_INSECURE_SKIP_VERIFY", "true")},
		{"http to 127.0.0.2", with("CLUSTER_SERVICE_URL", "http://127.0.0.2:8000", "CLUSTER_SERVICE_TOKEN_URL", "http://127.0.0.1:8001/token")},
		{"the managed identity to a loopback gateway", managedIdentity("CLUSTER_SERVICE_URL", "http://127.0.0.1:8000",
			"COSMOS_ENDPOINT", "https://localhost:8081", "COSMOS_INSECURE_SKIP_VERIFY", "true")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(getenv(tc.env))
			require.NoError(t, err)
		})
	}
}

// TestAudienceOfAnAzureServiceIsRefused: a token for Cosmos DB, Key Vault,
// Storage, ARM or Monitor would go to whatever answers at
// CLUSTER_SERVICE_URL.
func TestAudienceOfAnAzureServiceIsRefused(t *testing.T) {
	for _, aud := range []string{
		"https://cosmos.azure.com",
		"https://account.documents.azure.com",
		"https://account.documents.azure.com:443/",
		"https://vault.azure.net",
		"https://storage.azure.com/",
		"https://account.blob.core.windows.net",
		"https://management.azure.com/",
		"https://management.core.windows.net/",
		"https://monitor.azure.com",
		"https://graph.microsoft.com",
		"https://management.usgovcloudapi.net",
		"https://vault.usgovcloudapi.net",
		"https://MANAGEMENT.AZURE.COM",
		"https://management.azure.com./",
		"api://management.azure.com",
		"797f4846-ba00-4fd7-ba43-dac1f8f63013",
		"CFA8B339-82A2-471A-A3C9-0FC0BE7A4093",
	} {
		_, err := Load(getenv(managedIdentity("CLUSTER_SERVICE_AUDIENCE", aud)))
		require.ErrorContains(t, err, "CLUSTER_SERVICE_AUDIENCE: ", aud)
		require.ErrorContains(t, err, "whatever answers at CLUSTER_SERVICE_URL would get a token for it", aud)
	}
	for _, aud := range []string{"api://clusters-service", "https://clusters-service.example.com", "api://azure.com.example", "https://notazure.com",
		"2f3c9e2a-4d0b-4f55-9b7e-0d6f6b0c8a11"} {
		c, err := Load(getenv(managedIdentity("CLUSTER_SERVICE_AUDIENCE", aud)))
		require.NoError(t, err, aud)
		require.Equal(t, aud, c.ClusterServiceAudience)
	}
}

func TestNotificationHosts(t *testing.T) {
	c, err := Load(getenv(validEnv()))
	require.NoError(t, err)
	require.Nil(t, c.NotificationHosts, "ARM's, the notifier's default")

	c, err = Load(getenv(with("NOTIFICATIONS_ALLOWED_HOSTS", " Management.Azure.com, management.usgovcloudapi.net,notify.example.test ")))
	require.NoError(t, err)
	require.Equal(t, []string{"management.azure.com", "management.usgovcloudapi.net", "notify.example.test"}, c.NotificationHosts)

	for _, bad := range []string{"localhost", "com", "127.0.0.1", "0x7f.1", "10.0.0.4", "::1", "[::1]", "management.azure.com:443",
		"https://management.azure.com", "*.azure.com", "management.azure.com,", ",", "a..b", "-a.example.com", "a_b.example.com"} {
		_, err := Load(getenv(with("NOTIFICATIONS_ALLOWED_HOSTS", bad)))
		require.ErrorContains(t, err, "NOTIFICATIONS_ALLOWED_HOSTS: ", bad)
		require.ErrorContains(t, err, "is not a host name with a domain", bad)
	}
}
