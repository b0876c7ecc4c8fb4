package deploy

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/opstatus/opstatus/deploy/internal/armeval"
	"github.com/opstatus/opstatus/internal/config"
	"github.com/stretchr/testify/require"
)

// A template deployment replaces the whole app-settings collection, so a
// setting added by hand is lost at the next one: every setting the app
// uses comes from the template.

// localOnly are the settings the handler reads that a deployment leaves
// unset: the host gives the port, and the others exist for emulators and
// local runs (COSMOS is the local connection string of pickup's trigger);
// AzureWebJobs_pickup_Disabled is the host's other name for the dotted
// setting the template sets.
var localOnly = map[string]bool{
	"FUNCTIONS_CUSTOMHANDLER_PORT":         true,
	"COSMOS_KEY":                           true,
	"COSMOS_INSECURE_SKIP_VERIFY":          true,
	"CLUSTER_SERVICE_INSECURE_SKIP_VERIFY": true,
	"NOTIFICATIONS_ALLOW_HTTP":             true,
	"COSMOS":                               true,
	"AzureWebJobs_pickup_Disabled":         true,
}

// handlerReads returns the settings config.Load reads, given settings.
func handlerReads(settings map[string]string) []string {
	read := map[string]bool{}
	_, _ = config.Load(func(name string) string {
		read[name] = true
		if name == "FUNCTIONS_CUSTOMHANDLER_PORT" {
			return "7071"
		}
		return settings[name]
	})
	var out []string
	for name := range read {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// unsetHandlerSettings lists the settings the handler reads that the
// template does not set and a deployment needs.
func unsetHandlerSettings(d *armeval.Deployment) ([]string, error) {
	settings, err := appSettings(d)
	if err != nil {
		return nil, err
	}
	var missing []string
	for _, name := range handlerReads(settings) {
		if _, ok := settings[name]; !ok && !localOnly[name] {
			missing = append(missing, name)
		}
	}
	return missing, nil
}

func TestEveryHandlerSettingIsInTheTemplate(t *testing.T) {
	f := load(t)
	d, err := armeval.Resolve(f.template, f.values, exampleScope)
	require.NoError(t, err)
	missing, err := unsetHandlerSettings(d)
	require.NoError(t, err)
	require.Empty(t, missing, "settings the handler reads that only a hand edit would set, which the next deployment removes")

	edited := armeval.DeepCopy(f.template)
	removeSetting(t, edited, "OPERATION_DEADLINE_CREATE")
	d, err = armeval.Resolve(edited, f.values, exampleScope)
	require.NoError(t, err)
	missing, err = unsetHandlerSettings(d)
	require.NoError(t, err)
	require.Equal(t, []string{"OPERATION_DEADLINE_CREATE"}, missing)
}

// combination is one choice of every parameter that changes the settings.
type combination struct {
	subnet, storageAccess string
	// auth is how opstatus authenticates to Cluster Service: token (the
	// example's managed identity token and CA bundle), credentials (OAuth
	// client credentials, the system's roots) or none.
	auth         string
	pickup       bool
	partitionKey string
	deadline     string
	telemetry    bool
	// alwaysReady is both alwaysReadyPoll and alwaysReadyPickup.
	alwaysReady int64
}

func (c combination) values(example map[string]any) map[string]any {
	v := map[string]any{}
	for k, x := range example {
		v[k] = x
	}
	v["subnetId"] = c.subnet
	v["storagePublicNetworkAccess"] = c.storageAccess
	switch c.auth {
	case "credentials":
		v = withValues(v, clientCredentials, noCABundle)
	case "none":
		v = withValues(v, map[string]any{"clusterServiceAudience": ""}, noCABundle)
	}
	v["pickupEnabled"] = c.pickup
	v["alwaysReadyPoll"] = c.alwaysReady
	v["alwaysReadyPickup"] = c.alwaysReady
	v["cosmosOperationsPartitionKey"] = c.partitionKey
	for _, k := range []string{"Create", "Update", "Delete", "RequestCredential", "RevokeCredentials"} {
		v["operationDeadline"+k] = c.deadline
	}
	if c.telemetry {
		v["otlpEndpoint"] = "https://otel.int.example.internal:4318"
		v["otelServiceName"] = "opstatus-int"
		v["otelResourceAttributes"] = "deployment.environment=int"
		v["otelTracesSampler"] = "parentbased_traceidratio"
		v["otelTracesSamplerArg"] = "0.1"
		v["otelMetricExportInterval"] = "30000"
	}
	return v
}

// TestHandlerStartsInEveryCombination deploys the template with every
// combination of the parameters that change the app's settings and checks
// that the handler's configuration loads from those settings alone, says
// what the parameters chose, and that every other check holds.
func TestHandlerStartsInEveryCombination(t *testing.T) {
	f := load(t)
	subnet := f.values["subnetId"].(string)
	networks := [][2]string{{subnet, "Enabled"}, {subnet, "Disabled"}, {"", "Enabled"}}
	n := 0
	for _, network := range networks {
		for _, auth := range []string{"token", "credentials", "none"} {
			for _, pickup := range []bool{true, false} {
				for _, partitionKey := range []string{"", "workaround"} {
					for _, deadline := range []string{"", "none", "90m"} {
						for _, telemetry := range []bool{false, true} {
							for _, alwaysReady := range []int64{0, 1} {
								c := combination{network[0], network[1], auth, pickup, partitionKey, deadline, telemetry, alwaysReady}
								checkCombination(t, f, c)
								n++
							}
						}
					}
				}
			}
		}
	}
	require.Equal(t, 432, n)
}

func checkCombination(t *testing.T, f fixture, c combination) {
	t.Helper()
	what := fmt.Sprintf("%+v", c)
	f.values = c.values(f.values)
	d, err := armeval.Resolve(f.template, f.values, exampleScope)
	require.NoError(t, err, what)
	for _, check := range checks {
		if check.name == "refusals" {
			continue // the same for every combination: it starts from the example
		}
		require.NoError(t, check.check(d, f), "%s: %s", check.name, what)
	}
	settings, err := appSettings(d)
	require.NoError(t, err)
	env := handlerEnv(settings)
	cfg, err := config.Load(func(k string) string { return env[k] })
	require.NoError(t, err, what)

	require.Equal(t, c.pickup, cfg.PickupRuns, what)
	require.Equal(t, c.auth == "credentials", cfg.ClusterServiceClientSecret != "", what)
	require.Equal(t, c.auth == "credentials", cfg.ClusterServiceClientID != "", what)
	require.Equal(t, c.auth == "credentials", cfg.ClusterServiceTokenURL != "", what)
	if c.auth == "credentials" {
		require.Equal(t, "@Microsoft.KeyVault(VaultName=arohcp-int-eastus-svc;SecretName=opstatus-cluster-service)", cfg.ClusterServiceClientSecret, what)
	}
	require.Equal(t, c.auth == "token", cfg.ClusterServiceAudience != "", what)
	require.Equal(t, c.auth == "token", settings["CLUSTER_SERVICE_CA_BUNDLE"] != "", what)
	if c.auth == "token" {
		require.Equal(t, "22222222-2222-2222-2222-222222222222", cfg.ClusterServiceAudience, what)
		require.Equal(t, "@Microsoft.KeyVault(VaultName=arohcp-int-eastus-svc;SecretName=opstatus-clusters-service-ca)", settings["CLUSTER_SERVICE_CA_BUNDLE"], what)
		require.Len(t, cfg.ClusterServiceCAs, 1, what)
	}
	want := map[string]time.Duration{"": config.DefaultCreateDeadline, "none": 0, "90m": 90 * time.Minute}[c.deadline]
	require.Equal(t, want, cfg.CreateDeadline, what)
	require.Equal(t, c.partitionKey, settings["COSMOS_OPERATIONS_PARTITION_KEY"], what)
	require.Equal(t, c.telemetry, settings["OTEL_EXPORTER_OTLP_ENDPOINT"] != "", what)
	require.Equal(t, int64(40), d.Params["maximumInstanceCount"])
	require.Equal(t, 64, cfg.ClusterServiceMaxInFlight, "256 a core of a 512 MB instance: %s", what)
	require.Equal(t, 256, cfg.ClusterServiceBudget, what)

	site, err := d.One("Microsoft.Web/sites")
	require.NoError(t, err)
	var wantReady []any
	if c.alwaysReady > 0 {
		wantReady = append(wantReady, map[string]any{"name": "function:poll", "instanceCount": c.alwaysReady})
		if c.pickup {
			wantReady = append(wantReady, map[string]any{"name": "function:pickup", "instanceCount": c.alwaysReady})
		}
	}
	require.ElementsMatch(t, wantReady, armeval.Path(site.Body, "properties", "functionAppConfig", "scaleAndConcurrency", "alwaysReady"), what)
}

// TestChecksRefuseUnworkableParameters deploys parameter values with which
// the app could not run and sees a check refuse each.
func TestChecksRefuseUnworkableParameters(t *testing.T) {
	tests := []struct {
		name   string
		values map[string]any
		want   string
	}{
		{
			name:   "private storage without VNet integration",
			values: map[string]any{"subnetId": "", "storagePublicNetworkAccess": "Disabled"},
			want:   "publicNetworkAccess Disabled without VNet integration",
		},
		{
			name:   "a subnet ID that names a virtual network",
			values: map[string]any{"subnetId": "/subscriptions/11111111-2222-3333-4444-555555555555/resourceGroups/rp/providers/Microsoft.Network/virtualNetworks/rp"},
			want:   "is not a subnet's resource ID",
		},
		{
			name:   "a storage account name with a dash",
			values: map[string]any{"storageAccountName": "opstatus-int"},
			want:   "is not 3 to 24 lowercase letters and digits",
		},
		{
			name:   "client credentials without the vault",
			values: withValues(clientCredentials, map[string]any{"clusterServiceSecretVault": ""}),
			want:   "key vault secrets user on /subscriptions/11111111-2222-3333-4444-555555555555/resourcegroups/arohcp-int-eastus-rp/providers/microsoft.keyvault/vaults//secrets/opstatus-cluster-service ",
		},
		{
			name:   "a CA bundle without the vault",
			values: map[string]any{"clusterServiceCaBundleVault": ""},
			want:   "key vault secrets user on /subscriptions/11111111-2222-3333-4444-555555555555/resourcegroups/arohcp-int-eastus-rp/providers/microsoft.keyvault/vaults//secrets/opstatus-clusters-service-ca ",
		},
		{
			name:   "more always-ready poll instances than the instance limit",
			values: map[string]any{"alwaysReadyPoll": 41},
			want:   "alwaysReady entry function:poll has 41 instances, over maximumInstanceCount 40",
		},
		{
			name:   "a deadline that is not a duration",
			values: map[string]any{"operationDeadlineDelete": "soon"},
			want:   "OPERATION_DEADLINE_DELETE",
		},
	}
	f := load(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			edited := f
			edited.values = map[string]any{}
			for k, v := range f.values {
				edited.values[k] = v
			}
			for k, v := range tc.values {
				edited.values[k] = v
			}
			require.ErrorContains(t, runChecks(edited), tc.want)
		})
	}
}
