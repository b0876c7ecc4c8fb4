package deploy

import (
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/deploy/internal/armeval"
	"github.com/opstatus/opstatus/dev/testca"
	"github.com/opstatus/opstatus/internal/config"
)

// caBundlePEM is what the platform puts in CLUSTER_SERVICE_CA_BUNDLE when
// it resolves the Key Vault reference: the secret's value, PEM.
var caBundlePEM = sync.OnceValue(func() string {
	ca, err := testca.Generate("deploy test gateway CA")
	if err != nil {
		panic(err)
	}
	return ca.PEM()
})

// handlerEnv is the environment the handler starts with under settings:
// the host's port, and the CA bundle's Key Vault reference resolved, since
// the handler reads that secret's value (the client secret it only
// passes on).
func handlerEnv(settings map[string]string) map[string]string {
	env := map[string]string{"FUNCTIONS_CUSTOMHANDLER_PORT": "7071"}
	for k, v := range settings {
		env[k] = v
	}
	if keyVaultReference.MatchString(env["CLUSTER_SERVICE_CA_BUNDLE"]) {
		env["CLUSTER_SERVICE_CA_BUNDLE"] = caBundlePEM()
	}
	return env
}

// withValues returns a copy of values with each of more set over it.
func withValues(values map[string]any, more ...map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range values {
		out[k] = v
	}
	for _, m := range more {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// clientCredentials are the parameter values that configure Cluster
// Service by OAuth client credentials, the scheme outside ARO-HCP, instead
// of the managed identity's token the example uses.
var clientCredentials = map[string]any{
	"clusterServiceAudience":            "",
	"clusterServiceClientId":            "opstatus",
	"clusterServiceTokenUrl":            "https://sso.int.example.internal/token",
	"clusterServiceSecretVault":         "arohcp-int-eastus-svc",
	"clusterServiceSecretName":          "opstatus-cluster-service",
	"clusterServiceSecretResourceGroup": "arohcp-int-eastus-rp",
}

// noCABundle are the parameter values that trust the system's roots alone.
var noCABundle = map[string]any{
	"clusterServiceCaBundleVault":      "",
	"clusterServiceCaBundleSecretName": "",
}

// managedIdentityValues are the example's values with the managed
// identity's token for Cluster Service under another audience, and a CA
// bundle in another vault's group when caBundle, else none.
func managedIdentityValues(example map[string]any, caBundle bool) map[string]any {
	v := withValues(example, map[string]any{"clusterServiceAudience": "api://clusters-service"})
	if !caBundle {
		return withValues(v, noCABundle)
	}
	return withValues(v, map[string]any{
		"clusterServiceCaBundleVault":         "arohcp-int-eastus-svc",
		"clusterServiceCaBundleSecretName":    "opstatus-cluster-service-ca",
		"clusterServiceCaBundleResourceGroup": "arohcp-int-eastus-svc-rg",
	})
}

// TestClusterServiceManagedIdentity deploys the template with the managed
// identity's token, with and without a CA bundle, and the example as
// ARO-HCP configures it: every check passes, the handler's configuration
// loads and says what the parameters chose, and the bundle is a Key Vault
// reference to a secret the identity may read, alone.
func TestClusterServiceManagedIdentity(t *testing.T) {
	f := load(t)
	tests := []struct {
		name      string
		values    map[string]any
		audience  string
		reference string // CLUSTER_SERVICE_CA_BUNDLE; empty: no bundle
		scope     string // the one Key Vault Secrets User's
	}{
		{
			name:     "no CA bundle",
			values:   managedIdentityValues(f.values, false),
			audience: "api://clusters-service",
		},
		{
			name:      "a CA bundle in another group",
			values:    managedIdentityValues(f.values, true),
			audience:  "api://clusters-service",
			reference: "@Microsoft.KeyVault(VaultName=arohcp-int-eastus-svc;SecretName=opstatus-cluster-service-ca)",
			scope:     "/subscriptions/11111111-2222-3333-4444-555555555555/resourcegroups/arohcp-int-eastus-svc-rg/providers/microsoft.keyvault/vaults/arohcp-int-eastus-svc/secrets/opstatus-cluster-service-ca",
		},
		{
			name:      "the example: ARO-HCP's internal gateway",
			values:    f.values,
			audience:  "22222222-2222-2222-2222-222222222222",
			reference: "@Microsoft.KeyVault(VaultName=arohcp-int-eastus-svc;SecretName=opstatus-clusters-service-ca)",
			scope:     "/subscriptions/11111111-2222-3333-4444-555555555555/resourcegroups/arohcp-int-eastus-rp/providers/microsoft.keyvault/vaults/arohcp-int-eastus-svc/secrets/opstatus-clusters-service-ca",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			edited := f
			edited.values = tc.values
			require.NoError(t, runChecks(edited))
			d, err := armeval.Resolve(edited.template, edited.values, exampleScope)
			require.NoError(t, err)
			settings, err := appSettings(d)
			require.NoError(t, err)
			cfg, err := config.Load(func(k string) string { return handlerEnv(settings)[k] })
			require.NoError(t, err)
			require.Equal(t, tc.audience, cfg.ClusterServiceAudience)
			require.Empty(t, cfg.ClusterServiceClientID)
			require.Empty(t, settings["CLUSTER_SERVICE_CLIENT_SECRET"])
			require.NotEmpty(t, cfg.AzureClientID, "the user-assigned identity's client ID")
			require.Equal(t, tc.reference, settings["CLUSTER_SERVICE_CA_BUNDLE"])
			got, err := grants(d)
			require.NoError(t, err)
			var scopes []string
			for _, g := range got {
				if g.role == "Key Vault Secrets User" {
					scopes = append(scopes, strings.ToLower(g.scope))
				}
			}
			if tc.reference == "" {
				require.Empty(t, cfg.ClusterServiceCAs)
				require.Empty(t, scopes)
				return
			}
			require.Len(t, cfg.ClusterServiceCAs, 1)
			require.Equal(t, []string{tc.scope}, scopes)
		})
	}
}

// TestClusterServiceAuthChecksFail: broken copies of the parameters and
// the template that the checks refuse.
func TestClusterServiceAuthChecksFail(t *testing.T) {
	f := load(t)
	t.Run("audience with client credentials", func(t *testing.T) {
		edited := f
		edited.values = withValues(f.values, clientCredentials, map[string]any{"clusterServiceAudience": f.values["clusterServiceAudience"]})
		require.NotEmpty(t, edited.values["clusterServiceAudience"])
		require.ErrorContains(t, runChecks(edited), "CLUSTER_SERVICE_AUDIENCE, CLUSTER_SERVICE_CLIENT_ID: the managed identity's token and client credentials are exclusive")
	})
	t.Run("an audience that is a scope", func(t *testing.T) {
		edited := f
		edited.values = managedIdentityValues(f.values, false)
		edited.values["clusterServiceAudience"] = "api://clusters-service/.default"
		require.ErrorContains(t, runChecks(edited), "CLUSTER_SERVICE_AUDIENCE: \"api://clusters-service/.default\" is a scope")
	})
	t.Run("no role on the CA bundle", func(t *testing.T) {
		edited := f
		edited.values = managedIdentityValues(f.values, true)
		edited.template = armeval.DeepCopy(f.template)
		dep := findResource(t, edited.template, "Microsoft.Resources/deployments", "cabundle-role")
		dep["condition"] = false
		require.ErrorContains(t, runChecks(edited), "CLUSTER_SERVICE_CA_BUNDLE refers to Key Vault secret vaults/arohcp-int-eastus-svc/secrets/opstatus-cluster-service-ca, on which the identity is given no Key Vault Secrets User")
	})
	t.Run("the CA bundle not PEM", func(t *testing.T) {
		edited := f
		edited.values = managedIdentityValues(f.values, false)
		edited.template = armeval.DeepCopy(f.template)
		setSetting(t, edited.template, "CLUSTER_SERVICE_CA_BUNDLE", "[parameters('clusterServiceAudience')]")
		require.ErrorContains(t, runChecks(edited), "CLUSTER_SERVICE_CA_BUNDLE: holds no PEM certificate")
	})
}
