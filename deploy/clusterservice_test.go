package deploy

import (
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

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

// managedIdentityValues are the example's values with the managed
// identity's token for Cluster Service instead of client credentials, and
// a CA bundle when caBundle.
func managedIdentityValues(example map[string]any, caBundle bool) map[string]any {
	v := map[string]any{}
	for k, x := range example {
		v[k] = x
	}
	for _, k := range []string{"clusterServiceClientId", "clusterServiceTokenUrl", "clusterServiceSecretVault", "clusterServiceSecretName"} {
		v[k] = ""
	}
	v["clusterServiceAudience"] = "api://clusters-service"
	if caBundle {
		v["clusterServiceCaBundleVault"] = "arohcp-int-eastus-svc"
		v["clusterServiceCaBundleSecretName"] = "opstatus-cluster-service-ca"
		v["clusterServiceCaBundleResourceGroup"] = "arohcp-int-eastus-svc-rg"
	}
	return v
}

// TestClusterServiceManagedIdentity deploys the template with the managed
// identity's token and with a CA bundle: every check passes, the handler's
// configuration loads and says what the parameters chose, and the bundle
// is a Key Vault reference to a secret the identity may read, alone.
func TestClusterServiceManagedIdentity(t *testing.T) {
	f := load(t)
	for _, caBundle := range []bool{false, true} {
		edited := f
		edited.values = managedIdentityValues(f.values, caBundle)
		require.NoError(t, runChecks(edited))
		d, err := resolve(edited.template, edited.values, exampleScope)
		require.NoError(t, err)
		settings, err := d.appSettings()
		require.NoError(t, err)
		cfg, err := config.Load(func(k string) string { return handlerEnv(settings)[k] })
		require.NoError(t, err)
		require.Equal(t, "api://clusters-service", cfg.ClusterServiceAudience)
		require.Empty(t, cfg.ClusterServiceClientID)
		require.NotEmpty(t, cfg.AzureClientID, "the user-assigned identity's client ID")
		if !caBundle {
			require.Empty(t, settings["CLUSTER_SERVICE_CA_BUNDLE"])
			require.Empty(t, cfg.ClusterServiceCAs)
			continue
		}
		require.Equal(t, "@Microsoft.KeyVault(VaultName=arohcp-int-eastus-svc;SecretName=opstatus-cluster-service-ca)", settings["CLUSTER_SERVICE_CA_BUNDLE"])
		require.Len(t, cfg.ClusterServiceCAs, 1)
		got, err := grants(d)
		require.NoError(t, err)
		var scopes []string
		for _, g := range got {
			if g.role == "Key Vault Secrets User" {
				scopes = append(scopes, strings.ToLower(g.scope))
			}
		}
		require.Equal(t, []string{"/subscriptions/11111111-2222-3333-4444-555555555555/resourcegroups/arohcp-int-eastus-svc-rg/providers/microsoft.keyvault/vaults/arohcp-int-eastus-svc/secrets/opstatus-cluster-service-ca"}, scopes)
	}
}

// TestClusterServiceAuthChecksFail: broken copies of the parameters and
// the template that the checks refuse.
func TestClusterServiceAuthChecksFail(t *testing.T) {
	f := load(t)
	t.Run("audience with client credentials", func(t *testing.T) {
		edited := f
		edited.values = map[string]any{}
		for k, v := range f.values {
			edited.values[k] = v
		}
		edited.values["clusterServiceAudience"] = "api://clusters-service"
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
		edited.template = deepCopy(f.template)
		dep := findResource(t, edited.template, "Microsoft.Resources/deployments", "cabundle-role")
		dep["condition"] = false
		require.ErrorContains(t, runChecks(edited), "CLUSTER_SERVICE_CA_BUNDLE refers to Key Vault secret vaults/arohcp-int-eastus-svc/secrets/opstatus-cluster-service-ca, on which the identity is given no Key Vault Secrets User")
	})
	t.Run("the CA bundle not PEM", func(t *testing.T) {
		edited := f
		edited.values = managedIdentityValues(f.values, false)
		edited.template = deepCopy(f.template)
		setSetting(t, edited.template, "CLUSTER_SERVICE_CA_BUNDLE", "[parameters('clusterServiceAudience')]")
		require.ErrorContains(t, runChecks(edited), "CLUSTER_SERVICE_CA_BUNDLE: holds no PEM certificate")
	})
}
