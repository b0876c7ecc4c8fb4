package config

import (
	"encoding/pem"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/testca"
)

// managedIdentityEnv is validEnv with the managed identity's token in
// place of client credentials.
func managedIdentityEnv(kv ...string) map[string]string {
	env := with("CLUSTER_SERVICE_CLIENT_ID", "", "CLUSTER_SERVICE_CLIENT_SECRET", "", "CLUSTER_SERVICE_TOKEN_URL", "",
		"CLUSTER_SERVICE_AUDIENCE", "api://cluster-service", "AZURE_CLIENT_ID", "0b7c6f3e-5a2d-4e1f-9c8b-7a6d5e4f3c2b")
	for i := 0; i < len(kv); i += 2 {
		env[kv[i]] = kv[i+1]
	}
	return env
}

func TestClusterServiceAudience(t *testing.T) {
	for _, audience := range []string{"api://cluster-service", "api://0b7c6f3e-5a2d-4e1f-9c8b-7a6d5e4f3c2b",
		"https://clusters.example.internal", "0B7C6F3E-5a2d-4e1f-9c8b-7a6d5e4f3c2b", " api://padded "} {
		c, err := Load(getenv(managedIdentityEnv("CLUSTER_SERVICE_AUDIENCE", audience)))
		require.NoError(t, err, audience)
		require.Equal(t, strings.TrimSpace(audience), c.ClusterServiceAudience)
		require.Equal(t, "0b7c6f3e-5a2d-4e1f-9c8b-7a6d5e4f3c2b", c.AzureClientID)
		require.Empty(t, c.ClusterServiceClientID)
	}
	for _, tc := range []struct{ audience, want string }{
		{"api://cluster-service/.default", "is a scope"},
		{"cluster-service", "is not an application ID URI"},
		{"api://", "is not an application ID URI"},
		{"api://cs?x=1", "is not an application ID URI"},
		{"api://user:pw@cs", "is not an application ID URI"},
		{"api://cluster service", "is not an application ID URI"},
		{"0b7c6f3e5a2d4e1f9c8b7a6d5e4f3c2b", "is not an application ID URI"},
	} {
		_, err := Load(getenv(managedIdentityEnv("CLUSTER_SERVICE_AUDIENCE", tc.audience)))
		require.ErrorContains(t, err, "CLUSTER_SERVICE_AUDIENCE: ", tc.audience)
		require.ErrorContains(t, err, tc.want, tc.audience)
	}

	// The template sets the client credential settings empty when unused.
	_, err := Load(getenv(managedIdentityEnv("CLUSTER_SERVICE_CLIENT_SECRET", "")))
	require.NoError(t, err)
	_, err = Load(getenv(with("CLUSTER_SERVICE_AUDIENCE", "api://cluster-service")))
	require.EqualError(t, err, "CLUSTER_SERVICE_AUDIENCE, CLUSTER_SERVICE_CLIENT_ID: the managed identity's token and client credentials are exclusive; set one")
	requireNoSecret(t, err.Error())
}

func TestClusterServiceCABundle(t *testing.T) {
	ca, other := testca.New(t, "gateway CA"), testca.New(t, "second CA")
	for _, tc := range []struct {
		name, bundle string
		want         int
	}{
		{"one", ca.PEM(), 1},
		{"two, with openssl's text around", "subject=CN = gateway CA\n" + ca.PEM() + "\nissuer=CN = second CA\n" + other.PEM(), 2},
		{"CRLF", strings.ReplaceAll(ca.PEM(), "\n", "\r\n"), 1},
	} {
		c, err := Load(getenv(managedIdentityEnv("CLUSTER_SERVICE_CA_BUNDLE", tc.bundle)))
		require.NoError(t, err, tc.name)
		require.Len(t, c.ClusterServiceCAs, tc.want, tc.name)
		require.True(t, c.ClusterServiceCAs[0].Equal(ca.Cert), tc.name)
	}

	corrupt := strings.Replace(other.PEM(), "\n", "\n!!", 2)
	key := string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: []byte("private key bytes")}))
	notDER := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("not DER")}))
	for _, tc := range []struct{ name, bundle, want string }{
		{"not PEM", "MIIBszCCAVmgAwIBAgIJ", "holds no PEM certificate"},
		{"a Key Vault reference left as it is", "@Microsoft.KeyVault(VaultName=v;SecretName=ca)", "a Key Vault reference the platform did not resolve"},
		{"a corrupt second block", ca.PEM() + corrupt, "PEM block 2 does not decode"},
		{"a private key", ca.PEM() + key, `PEM block 2 is "EC PRIVATE KEY", not a CERTIFICATE`},
		{"not a certificate", notDER, "certificate 1 does not parse"},
	} {
		_, err := Load(getenv(managedIdentityEnv("CLUSTER_SERVICE_CA_BUNDLE", tc.bundle)))
		require.ErrorContains(t, err, "CLUSTER_SERVICE_CA_BUNDLE: "+tc.want, tc.name)
		require.NotContains(t, err.Error(), "MII", "the bundle is not echoed")
		require.NotContains(t, err.Error(), "private key bytes")
	}

	_, err := Load(getenv(managedIdentityEnv("CLUSTER_SERVICE_CA_BUNDLE", ca.PEM(), "CLUSTER_SERVICE_INSECURE_SKIP_VERIFY", "true")))
	require.ErrorContains(t, err, "CLUSTER_SERVICE_CA_BUNDLE, CLUSTER_SERVICE_INSECURE_SKIP_VERIFY")
}
