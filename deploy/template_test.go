package deploy

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opstatus/opstatus/internal/config"
	"github.com/stretchr/testify/require"
)

// fixture is everything the checks read.
type fixture struct {
	template, parameters map[string]any
	values               map[string]any
	functions            []function
	host                 map[string]any
}

func load(t *testing.T) fixture {
	t.Helper()
	var f fixture
	var err error
	f.template, err = readJSON(templateFile)
	require.NoError(t, err)
	f.parameters, err = readJSON(parametersFile)
	require.NoError(t, err)
	f.values, err = parameterValues(f.parameters)
	require.NoError(t, err)
	f.functions, err = readFunctions()
	require.NoError(t, err)
	f.host, err = readJSON(filepath.Join("..", "host.json"))
	require.NoError(t, err)
	return f
}

// checks are the checks a schema cannot make, run on a resolved template.
var checks = []struct {
	name  string
	check func(d *deployment, f fixture) error
}{
	{"role GUIDs", func(d *deployment, _ fixture) error { return checkRoleGUIDs(d) }},
	{"grants", func(d *deployment, _ fixture) error { return checkGrants(d) }},
	{"identity", func(d *deployment, _ fixture) error { return checkIdentity(d) }},
	{"settings", func(d *deployment, f fixture) error { return checkSettings(d, f.functions) }},
	{"bindings", func(d *deployment, f fixture) error { return checkBindings(d, f.functions, f.host) }},
	{"secrets", func(d *deployment, f fixture) error { return checkNoSecrets(texts(f), d) }},
	{"budget", func(d *deployment, _ fixture) error { return checkBudget(d) }},
	{"always ready", func(d *deployment, f fixture) error { return checkAlwaysReady(d, f.functions) }},
	{"flex", func(d *deployment, _ fixture) error { return checkFlex(d) }},
	{"instance floor", func(_ *deployment, f fixture) error { return checkInstanceFloor(f.template) }},
	{"names", checkNames},
	{"network", func(d *deployment, _ fixture) error { return checkNetwork(d) }},
	{"monitoring", checkMonitoring},
}

// texts are the files the secret check searches, as Azure receives them.
func texts(f fixture) map[string]string {
	out := map[string]string{}
	for name, doc := range map[string]map[string]any{templateFile: f.template, parametersFile: f.parameters} {
		b, err := json.Marshal(doc)
		if err != nil {
			panic(err)
		}
		out[name] = string(b)
	}
	return out
}

// runChecks resolves a template with the example parameters and runs every
// check, returning the first failure.
func runChecks(f fixture) error {
	d, err := resolve(f.template, f.values, exampleScope)
	if err != nil {
		return fmt.Errorf("resolve: %w", err)
	}
	for _, c := range checks {
		if err := c.check(d, f); err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
	}
	return nil
}

func TestTemplatePassesEveryCheck(t *testing.T) {
	f := load(t)
	d, err := resolve(f.template, f.values, exampleScope)
	require.NoError(t, err)
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			require.NoError(t, c.check(d, f))
		})
	}
}

func TestDefaultsGiveTheStatedBudget(t *testing.T) {
	f := load(t)
	required := map[string]any{}
	for _, name := range []string{"appName", "storageAccountName", "subnetId", "cosmosAccountName", "cosmosDatabase", "clusterServiceUrl"} {
		required[name] = f.values[name]
	}
	tests := []struct {
		name   string
		values map[string]any
		want   bound
	}{
		{"defaults", nil, bound{poll: 40, pickup: 40, perProcess: 3, wanted: 64, budget: 256}},
		{"pickup off", map[string]any{"pickupEnabled": false}, bound{poll: 40, pickup: 0, perProcess: 6, wanted: 64, budget: 256}},
		{"one physical partition", map[string]any{"pickupMaximumInstanceCount": 1}, bound{poll: 40, pickup: 1, perProcess: 6, wanted: 64, budget: 256}},
		{"pickup off, one physical partition", map[string]any{"pickupEnabled": false, "pickupMaximumInstanceCount": 1}, bound{poll: 40, pickup: 0, perProcess: 6, wanted: 64, budget: 256}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			values := map[string]any{}
			for k, v := range required {
				values[k] = v
			}
			for k, v := range tc.values {
				values[k] = v
			}
			d, err := resolve(f.template, values, exampleScope)
			require.NoError(t, err)
			require.NoError(t, checkBudget(d))
			b, err := clusterServiceBound(d)
			require.NoError(t, err)
			require.Equal(t, tc.want, b)
		})
	}

	d, err := resolve(f.template, f.values, exampleScope)
	require.NoError(t, err)
	b, err := clusterServiceBound(d)
	require.NoError(t, err)
	require.LessOrEqual(t, (b.poll+b.pickup)*b.perProcess, b.budget, "the example environment")
	require.Positive(t, b.perProcess)
}

// TestBudgetHoldsForAnyParameters deploys the template with parameter values
// chosen to break the bound, including more instances than the budget, with
// pickup on and off: the per-process cap is the one the handler would
// compute from the budget and the instances (the cap wanted, if it fits),
// or 0, which the handler refuses at start.
func TestBudgetHoldsForAnyParameters(t *testing.T) {
	f := load(t)
	n := 0
	for _, instances := range []int64{1, 2, 3, 4, 5, 7, 8, 9, 16, 40, 100, 255, 256, 257, 1000} {
		for _, pickupMax := range []int64{0, 1, 2, 40, instances} {
			for _, pickup := range []bool{true, false} {
				for _, perProcess := range []int64{1, 3, 32, 64, 65, 100, 4096} {
					for _, budget := range []int64{1, 100, 256, 1000} {
						values := map[string]any{}
						for k, v := range f.values {
							values[k] = v
						}
						values["maximumInstanceCount"] = instances
						values["pickupMaximumInstanceCount"] = min(pickupMax, instances)
						values["pickupEnabled"] = pickup
						values["clusterServiceMaxInFlight"] = perProcess
						values["clusterServiceBudget"] = budget
						what := fmt.Sprintf("%v", values)
						d, err := resolve(f.template, values, exampleScope)
						require.NoError(t, err, what)
						require.NoError(t, checkBudget(d), what)
						b, err := clusterServiceBound(d)
						require.NoError(t, err, what)
						require.Equal(t, handlerCap(t, d, perProcess), b.perProcess, what)
						n++
					}
				}
			}
		}
	}
	require.Equal(t, 15*5*2*7*4, n)
}

// handlerCap is the cap the handler computes from the deployment's
// settings with CLUSTER_SERVICE_MAX_IN_FLIGHT left out, as wanted if that
// fits: 0 when the budget is less than one request for each instance.
func handlerCap(t *testing.T, d *deployment, wanted int64) int64 {
	t.Helper()
	settings, err := d.appSettings()
	require.NoError(t, err)
	env := map[string]string{"FUNCTIONS_CUSTOMHANDLER_PORT": "7071"}
	for k, v := range settings {
		env[k] = v
	}
	delete(env, "CLUSTER_SERVICE_MAX_IN_FLIGHT")
	cfg, err := config.Load(func(k string) string { return env[k] })
	if err != nil {
		require.ErrorContains(t, err, "is less than one request in flight")
		return 0
	}
	return min(wanted, int64(cfg.ClusterServiceMaxInFlight))
}

func TestParametersFileDeclaresOnlyTemplateParameters(t *testing.T) {
	f := load(t)
	f.values["cosmosContainer"] = "Operations"
	_, err := resolve(f.template, f.values, exampleScope)
	require.ErrorContains(t, err, "cosmosContainer is given but the template declares none")
}

// TestChecksFailOnEditedTemplate edits a copy of the template the way a
// mistake would and sees the check that guards against it fail.
func TestChecksFailOnEditedTemplate(t *testing.T) {
	tests := []struct {
		name  string
		check string
		// values are parameter values the case deploys the copy with.
		values map[string]any
		edit   func(t *testing.T, tmpl map[string]any)
		want   string
	}{
		{
			name:  "a role GUID that is not the role its name says",
			check: "role GUIDs",
			edit: func(t *testing.T, tmpl map[string]any) {
				// Storage Blob Data Contributor's GUID under Owner's name.
				variables(tmpl)["roles"].(map[string]any)["Storage Blob Data Owner"] = "ba92f5b4-2d11-453d-a403-e96b0029c9fe"
			},
			want: "Storage Blob Data Owner is ba92f5b4-2d11-453d-a403-e96b0029c9fe, but that role's GUID is b7e6dc6d-f1e8-4753-8033-0f276bb0955b",
		},
		{
			name:  "an assignment of a role the checks do not know",
			check: "role GUIDs",
			edit: func(t *testing.T, tmpl map[string]any) {
				// Storage Blob Data Contributor, written out.
				props(findResource(t, tmpl, "Microsoft.Authorization/roleAssignments", "Blob"))["roleDefinitionId"] = "[subscriptionResourceId('Microsoft.Authorization/roleDefinitions', 'ba92f5b4-2d11-453d-a403-e96b0029c9fe')]"
			},
			want: "ba92f5b4-2d11-453d-a403-e96b0029c9fe is not a built-in Azure role these checks know",
		},
		{
			name:  "an assignment described as another role",
			check: "role GUIDs",
			edit: func(t *testing.T, tmpl map[string]any) {
				props(findResource(t, tmpl, "Microsoft.Authorization/roleAssignments", "Queue"))["description"] = "Storage Blob Data Owner: queues"
			},
			want: "does not name its role",
		},
		{
			name:  "the Cosmos DB reader role instead of the contributor",
			check: "role GUIDs",
			edit: func(t *testing.T, tmpl map[string]any) {
				variables(tmpl)["roles"].(map[string]any)["Cosmos DB Built-in Data Contributor"] = "00000000-0000-0000-0000-000000000001"
			},
			want: "Cosmos DB Built-in Data Contributor is 00000000-0000-0000-0000-000000000001",
		},
		{
			name:  "a role more than the identity needs",
			check: "grants",
			edit: func(t *testing.T, tmpl map[string]any) {
				extra := deepCopy(findResource(t, tmpl, "Microsoft.Authorization/roleAssignments", "Queue"))
				extra["name"] = "[guid('extra')]"
				props(extra)["description"] = "Monitoring Metrics Publisher: one more"
				props(extra)["roleDefinitionId"] = "[subscriptionResourceId('Microsoft.Authorization/roleDefinitions', variables('roles')['Monitoring Metrics Publisher'])]"
				tmpl["resources"] = append(tmpl["resources"].([]any), extra)
			},
			want: "want exactly",
		},
		{
			name:  "a role on the resource group instead of the storage account",
			check: "role GUIDs",
			edit: func(t *testing.T, tmpl map[string]any) {
				delete(findResource(t, tmpl, "Microsoft.Authorization/roleAssignments", "Blob"), "scope")
			},
			want: "no scope",
		},
		{
			name:  "the Cosmos DB role on the whole account",
			check: "grants",
			edit: func(t *testing.T, tmpl map[string]any) {
				props(cosmosRoleAssignment(t, tmpl))["scope"] = "[resourceId('Microsoft.DocumentDB/databaseAccounts', parameters('accountName'))]"
			},
			want: "want exactly",
		},
		{
			name:  "COSMOS_ENDPOINT naming another account than the role's",
			check: "grants",
			edit: func(t *testing.T, tmpl map[string]any) {
				setSetting(t, tmpl, "COSMOS_ENDPOINT", "[reference(resourceId(parameters('cosmosResourceGroup'), 'Microsoft.DocumentDB/databaseAccounts', 'other'), '2024-11-15').documentEndpoint]")
			},
			want: "is not the endpoint of an account the identity is given a role on",
		},
		{
			name:  "AZURE_CLIENT_ID of another identity",
			check: "identity",
			edit: func(t *testing.T, tmpl map[string]any) {
				setSetting(t, tmpl, "AZURE_CLIENT_ID", "[reference(resourceId('Microsoft.ManagedIdentity/userAssignedIdentities', 'other-id'), '2023-01-31').clientId]")
			},
			want: "AZURE_CLIENT_ID is",
		},
		{
			name:  "pickup's Cosmos DB connection as another identity",
			check: "identity",
			edit: func(t *testing.T, tmpl map[string]any) {
				setSetting(t, tmpl, "COSMOS__clientId", "[reference(resourceId('Microsoft.ManagedIdentity/userAssignedIdentities', 'other-id'), '2023-01-31').clientId]")
			},
			want: "COSMOS__clientId is",
		},
		{
			name:  "pickup's Cosmos DB connection with another credential",
			check: "identity",
			edit:  func(t *testing.T, tmpl map[string]any) { setSetting(t, tmpl, "COSMOS__credential", "azurecli") },
			want:  "COSMOS__credential is",
		},
		{
			name:  "pickup's Cosmos DB connection to another account than the role's",
			check: "grants",
			edit: func(t *testing.T, tmpl map[string]any) {
				setSetting(t, tmpl, "COSMOS__accountEndpoint", "[reference(resourceId(parameters('cosmosResourceGroup'), 'Microsoft.DocumentDB/databaseAccounts', 'other'), '2024-11-15').documentEndpoint]")
			},
			want: "COSMOS__accountEndpoint",
		},
		{
			name:  "a role given to another principal",
			check: "identity",
			edit: func(t *testing.T, tmpl map[string]any) {
				props(findResource(t, tmpl, "Microsoft.Authorization/roleAssignments", "Blob"))["principalId"] = "[reference(resourceId('Microsoft.ManagedIdentity/userAssignedIdentities', 'other-id'), '2023-01-31').principalId]"
			},
			want: "not the app's identity",
		},
		{
			name:  "the deployment package read as another identity",
			check: "identity",
			edit: func(t *testing.T, tmpl map[string]any) {
				auth := path(props(findResource(t, tmpl, "Microsoft.Web/sites", "")), "functionAppConfig", "deployment", "storage", "authentication").(map[string]any)
				auth["userAssignedIdentityResourceId"] = "[resourceId('Microsoft.ManagedIdentity/userAssignedIdentities', 'other-id')]"
			},
			want: "deployment storage authenticates as",
		},
		{
			name:  "the deployment package read with a connection string",
			check: "identity",
			edit: func(t *testing.T, tmpl map[string]any) {
				auth := path(props(findResource(t, tmpl, "Microsoft.Web/sites", "")), "functionAppConfig", "deployment", "storage", "authentication").(map[string]any)
				auth["type"] = "SystemAssignedIdentity"
			},
			want: "want UserAssignedIdentity",
		},
		{
			name:  "SCAN_SCHEDULE missing",
			check: "settings",
			edit:  func(t *testing.T, tmpl map[string]any) { removeSetting(t, tmpl, "SCAN_SCHEDULE") },
			want:  "scan/function.json reads %SCAN_SCHEDULE%",
		},
		{
			name:  "COSMOS_DATABASE missing",
			check: "settings",
			edit:  func(t *testing.T, tmpl map[string]any) { removeSetting(t, tmpl, "COSMOS_DATABASE") },
			want:  "COSMOS_DATABASE: required setting is missing",
		},
		{
			name:  "AZURE_LOCATION a display name",
			check: "settings",
			edit:  func(t *testing.T, tmpl map[string]any) { setSetting(t, tmpl, "AZURE_LOCATION", "East US") },
			want:  "AZURE_LOCATION",
		},
		{
			name:  "AZURE_CLIENT_ID missing",
			check: "settings",
			edit:  func(t *testing.T, tmpl map[string]any) { removeSetting(t, tmpl, "AZURE_CLIENT_ID") },
			want:  "AZURE_CLIENT_ID is not set",
		},
		{
			name:  "the host's storage as a connection string setting",
			check: "settings",
			edit: func(t *testing.T, tmpl map[string]any) {
				addSetting(t, tmpl, "AzureWebJobsStorage", "[parameters('storageAccountName')]")
			},
			want: "setting AzureWebJobsStorage is a connection string",
		},
		{
			name:  "COSMOS_LEASES_CONTAINER missing",
			check: "settings",
			edit:  func(t *testing.T, tmpl map[string]any) { removeSetting(t, tmpl, "COSMOS_LEASES_CONTAINER") },
			want:  "pickup/function.json reads %COSMOS_LEASES_CONTAINER%",
		},
		{
			name:  "pickup's Cosmos DB connection without its endpoint",
			check: "settings",
			edit:  func(t *testing.T, tmpl map[string]any) { removeSetting(t, tmpl, "COSMOS__accountEndpoint") },
			want:  "connection COSMOS needs COSMOS__accountEndpoint",
		},
		{
			name:  "pickup's Cosmos DB connection as a connection string setting",
			check: "settings",
			edit: func(t *testing.T, tmpl map[string]any) {
				addSetting(t, tmpl, "COSMOS", "[parameters('cosmosAccountName')]")
			},
			want: "setting COSMOS is a connection string; use COSMOS__accountEndpoint",
		},
		{
			name:  "FUNCTIONS_WORKER_RUNTIME, which Flex replaces",
			check: "settings",
			edit:  func(t *testing.T, tmpl map[string]any) { addSetting(t, tmpl, "FUNCTIONS_WORKER_RUNTIME", "custom") },
			want:  "FUNCTIONS_WORKER_RUNTIME is not used on Flex Consumption",
		},
		{
			name:  "a queue name function.json does not use",
			check: "bindings",
			edit:  func(t *testing.T, tmpl map[string]any) { variables(tmpl)["queueName"] = "operation" },
			want:  "the bindings' queue and its poison queue",
		},
		{
			name:  "the host's storage in another account than the queue's",
			check: "bindings",
			edit: func(t *testing.T, tmpl map[string]any) {
				setSetting(t, tmpl, "AzureWebJobsStorage__accountName", "[format('{0}x', parameters('storageAccountName'))]")
			},
			want: "is not a storage account of the template",
		},
		{
			name:  "a deployment container the template does not create",
			check: "bindings",
			edit: func(t *testing.T, tmpl map[string]any) {
				storage := path(props(findResource(t, tmpl, "Microsoft.Web/sites", "")), "functionAppConfig", "deployment", "storage").(map[string]any)
				storage["value"] = "[format('{0}{1}', reference(variables('storageId'), '2023-05-01').primaryEndpoints.blob, 'packages')]"
			},
			want: "deployment container packages is not created",
		},
		{
			name:  "shared keys on",
			check: "secrets",
			edit: func(t *testing.T, tmpl map[string]any) {
				props(findResource(t, tmpl, "Microsoft.Storage/storageAccounts", ""))["allowSharedKeyAccess"] = true
			},
			want: "allowSharedKeyAccess true",
		},
		{
			name:  "Application Insights with local auth",
			check: "secrets",
			edit: func(t *testing.T, tmpl map[string]any) {
				props(findResource(t, tmpl, "Microsoft.Insights/components", ""))["DisableLocalAuth"] = false
			},
			want: "DisableLocalAuth false",
		},
		{
			name:  "a Cosmos DB key read with listKeys into an output",
			check: "secrets",
			edit: func(t *testing.T, tmpl map[string]any) {
				tmpl["outputs"].(map[string]any)["cosmos"] = map[string]any{
					"type":  "string",
					"value": "[listKeys(resourceId(parameters('cosmosResourceGroup'), 'Microsoft.DocumentDB/databaseAccounts', parameters('cosmosAccountName')), '2024-11-15').primaryMasterKey]",
				}
			},
			want: "a list function reads keys",
		},
		{
			name:  "a storage connection string",
			check: "secrets",
			edit: func(t *testing.T, tmpl map[string]any) {
				addSetting(t, tmpl, "STORAGE", "[format('DefaultEndpointsProtocol=https;AccountName={0}', parameters('storageAccountName'))]")
			},
			want: "DefaultEndpointsProtocol",
		},
		{
			name:  "a setting that looks like a credential",
			check: "secrets",
			edit: func(t *testing.T, tmpl map[string]any) {
				addSetting(t, tmpl, "CLUSTER_SERVICE_TOKEN", "[parameters('clusterServiceUrl')]")
			},
			want: "setting CLUSTER_SERVICE_TOKEN looks like a credential",
		},
		{
			name:  "basic-auth publishing left on",
			check: "secrets",
			edit: func(t *testing.T, tmpl map[string]any) {
				props(findResource(t, tmpl, "Microsoft.Web/sites/basicPublishingCredentialsPolicies", "scm"))["allow"] = true
			},
			want: "basic-auth publishing credentials must be off",
		},
		{
			name:  "the per-process cap taken as given",
			check: "budget",
			edit: func(t *testing.T, tmpl map[string]any) {
				variables(tmpl)["clusterServiceMaxInFlight"] = "[parameters('clusterServiceMaxInFlight')]"
				parameters(tmpl)["maximumInstanceCount"].(map[string]any)["defaultValue"] = 8
			},
			want: "CLUSTER_SERVICE_MAX_IN_FLIGHT is 64, want min(64, 256 / (8 + 8)) = 16",
		},
		{
			name:  "the cap shared among poll's instances alone",
			check: "budget",
			edit: func(t *testing.T, tmpl map[string]any) {
				variables(tmpl)["clusterServiceInstances"] = "[parameters('maximumInstanceCount')]"
			},
			want: "CLUSTER_SERVICE_MAX_IN_FLIGHT is 6, want min(64, 256 / (40 + 40)) = 3",
		},
		{
			name:   "pickup's instances counted when the host does not run it",
			check:  "budget",
			values: map[string]any{"pickupEnabled": false},
			edit: func(t *testing.T, tmpl map[string]any) {
				variables(tmpl)["clusterServiceInstances"] = "[add(parameters('maximumInstanceCount'), variables('pickupInstances'))]"
			},
			want: "CLUSTER_SERVICE_MAX_IN_FLIGHT is 3, want min(64, 256 / (40 + 0)) = 6",
		},
		{
			name:   "pickup's reach left out of the cap",
			check:  "budget",
			values: map[string]any{"pickupMaximumInstanceCount": 1},
			edit: func(t *testing.T, tmpl map[string]any) {
				variables(tmpl)["clusterServiceInstances"] = "[mul(2, parameters('maximumInstanceCount'))]"
			},
			want: "CLUSTER_SERVICE_MAX_IN_FLIGHT is 3, want min(64, 256 / (40 + 1)) = 6",
		},
		{
			name:  "PICKUP_MAXIMUM_INSTANCE_COUNT larger than the cap was computed for",
			check: "budget",
			edit: func(t *testing.T, tmpl map[string]any) {
				variables(tmpl)["clusterServiceInstances"] = "[add(parameters('maximumInstanceCount'), 1)]"
				setSetting(t, tmpl, "PICKUP_MAXIMUM_INSTANCE_COUNT", "40")
			},
			want: "CLUSTER_SERVICE_MAX_IN_FLIGHT is 6, want min(64, 256 / (40 + 40)) = 3",
		},
		{
			name:  "the handler told another instance limit than the site's",
			check: "budget",
			edit: func(t *testing.T, tmpl map[string]any) {
				setSetting(t, tmpl, "MAXIMUM_INSTANCE_COUNT", "20")
			},
			want: "MAXIMUM_INSTANCE_COUNT is \"20\" but the site's maximumInstanceCount is 40",
		},
		{
			name:  "more always-ready instances than the instance limit",
			check: "always ready",
			edit: func(t *testing.T, tmpl map[string]any) {
				variables(tmpl)["alwaysReady"] = "[createArray(createObject('name', 'function:poll', 'instanceCount', add(parameters('maximumInstanceCount'), 1)))]"
			},
			want: "alwaysReady entry function:poll has 41 instances, over maximumInstanceCount 40",
		},
		{
			name:   "an always-ready instance billed for pickup when the host does not run it",
			check:  "always ready",
			values: map[string]any{"pickupEnabled": false},
			edit: func(t *testing.T, tmpl map[string]any) {
				variables(tmpl)["alwaysReady"] = "[createArray(createObject('name', 'function:pickup', 'instanceCount', parameters('alwaysReadyPickup')))]"
			},
			want: "alwaysReady entry function:pickup bills 1 instances of a function the host does not run",
		},
		{
			name:   "an always-ready entry of 0 instances",
			check:  "always ready",
			values: map[string]any{"alwaysReadyPoll": 0},
			edit: func(t *testing.T, tmpl map[string]any) {
				variables(tmpl)["alwaysReady"] = "[createArray(createObject('name', 'function:poll', 'instanceCount', parameters('alwaysReadyPoll')))]"
			},
			want: "alwaysReady entry function:poll has 0 instances: leave it out",
		},
		{
			name:  "an always-ready entry named as a group Flex does not have",
			check: "always ready",
			edit: func(t *testing.T, tmpl map[string]any) {
				variables(tmpl)["alwaysReady"] = strings.Replace(variables(tmpl)["alwaysReady"].(string), "'function:poll'", "'poll'", 1)
			},
			want: "alwaysReady entry \"poll\" is not function:<name> of a function of the app",
		},
		{
			name:  "no instance limit",
			check: "budget",
			edit: func(t *testing.T, tmpl map[string]any) {
				sc := path(props(findResource(t, tmpl, "Microsoft.Web/sites", "")), "functionAppConfig", "scaleAndConcurrency").(map[string]any)
				delete(sc, "maximumInstanceCount")
			},
			want: "maximumInstanceCount is not set",
		},
		{
			name:  "the site left out of the subnet",
			check: "network",
			edit: func(t *testing.T, tmpl map[string]any) {
				delete(props(findResource(t, tmpl, "Microsoft.Web/sites", "")), "virtualNetworkSubnetId")
			},
			want: "the site's virtualNetworkSubnetId is \"\", not subnetId",
		},
		{
			name:  "outbound traffic not all through the subnet",
			check: "network",
			edit: func(t *testing.T, tmpl map[string]any) {
				props(findResource(t, tmpl, "Microsoft.Web/sites", ""))["vnetRouteAllEnabled"] = false
			},
			want: "vnetRouteAllEnabled is false",
		},
		{
			name:  "an endpoint on no network path the guide describes",
			check: "network",
			edit: func(t *testing.T, tmpl map[string]any) {
				addSetting(t, tmpl, "BILLING_EXPORT_URL", "https://billing.example.com")
			},
			want: "setting BILLING_EXPORT_URL names an endpoint on no network path",
		},
		{
			name:  "the table endpoint of another account",
			check: "network",
			edit: func(t *testing.T, tmpl map[string]any) {
				setSetting(t, tmpl, "AzureWebJobsStorage__tableServiceUri", "https://other.table.core.windows.net/")
			},
			want: "not an endpoint of the host's storage account",
		},
		{
			name:  "storage closed to public traffic but its network rules open",
			check: "network",
			edit: func(t *testing.T, tmpl map[string]any) {
				props(findResource(t, tmpl, "Microsoft.Storage/storageAccounts", ""))["publicNetworkAccess"] = "Disabled"
			},
			want: "publicNetworkAccess Disabled with networkAcls.defaultAction Allow",
		},
		{
			name:  "no role on the host's diagnostic events table",
			check: "grants",
			edit: func(t *testing.T, tmpl map[string]any) {
				removeResource(t, tmpl, findResource(t, tmpl, "Microsoft.Authorization/roleAssignments", "Table"))
			},
			want: "want exactly",
		},
		{
			name:  "tableServiceUri missing",
			check: "settings",
			edit: func(t *testing.T, tmpl map[string]any) {
				removeSetting(t, tmpl, "AzureWebJobsStorage__tableServiceUri")
			},
			want: "AzureWebJobsStorage__tableServiceUri is not set",
		},
		{
			name:  "the client secret as a plain setting",
			check: "secrets",
			edit: func(t *testing.T, tmpl map[string]any) {
				setSetting(t, tmpl, "CLUSTER_SERVICE_CLIENT_SECRET", "[parameters('clusterServiceSecretName')]")
			},
			want: "setting CLUSTER_SERVICE_CLIENT_SECRET looks like a credential and is not a Key Vault reference",
		},
		{
			name:  "Key Vault Secrets User on the whole vault",
			check: "grants",
			edit: func(t *testing.T, tmpl map[string]any) {
				keyVaultRoleAssignment(t, tmpl)["scope"] = "[format('Microsoft.KeyVault/vaults/{0}', parameters('vaultName'))]"
			},
			want: "refers to Key Vault secret vaults/arohcp-int-eastus-svc/secrets/opstatus-cluster-service, on which the identity is given no Key Vault Secrets User",
		},
		{
			name:  "Key Vault references resolved as another identity",
			check: "identity",
			edit: func(t *testing.T, tmpl map[string]any) {
				delete(props(findResource(t, tmpl, "Microsoft.Web/sites", "")), "keyVaultReferenceIdentity")
			},
			want: "keyVaultReferenceIdentity is <nil>",
		},
		{
			name:  "an instance limit under the platform's floor by default",
			check: "instance floor",
			edit: func(t *testing.T, tmpl map[string]any) {
				parameters(tmpl)["maximumInstanceCount"].(map[string]any)["defaultValue"] = 4
			},
			want: "maximumInstanceCount defaults to 4, under 40",
		},
		{
			name:  "an appName too long for the plan's name",
			check: "names",
			edit: func(t *testing.T, tmpl map[string]any) {
				parameters(tmpl)["appName"].(map[string]any)["maxLength"] = 56
			},
			want: "an appName of 56 characters names Microsoft.Web/serverfarms",
		},
		{
			name:  "a runtime other than the custom handler",
			check: "flex",
			edit: func(t *testing.T, tmpl map[string]any) {
				rt := path(props(findResource(t, tmpl, "Microsoft.Web/sites", "")), "functionAppConfig", "runtime").(map[string]any)
				rt["name"] = "node"
			},
			want: "want custom 1.0",
		},
		{
			name:  "the Go runtime's threads not held to the instance's cores",
			check: "flex",
			edit: func(t *testing.T, tmpl map[string]any) {
				setSetting(t, tmpl, "GOMAXPROCS", "2")
			},
			want: `GOMAXPROCS is "2", want 1: the cores of a 2048 MB instance`,
		},
	}
	f := load(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			edited := f
			edited.template = deepCopy(f.template)
			if tc.check == "budget" {
				// The example sets the budget's parameters; the edits
				// change their defaults.
				edited.values = map[string]any{}
				for k, v := range f.values {
					if k != "maximumInstanceCount" && k != "clusterServiceMaxInFlight" && k != "clusterServiceBudget" {
						edited.values[k] = v
					}
				}
			}
			if tc.values != nil {
				values := map[string]any{}
				for k, v := range edited.values {
					values[k] = v
				}
				for k, v := range tc.values {
					values[k] = v
				}
				edited.values = values
			}
			tc.edit(t, edited.template)
			d, err := resolve(edited.template, edited.values, exampleScope)
			require.NoError(t, err)
			var check func(*deployment, fixture) error
			for _, c := range checks {
				if c.name == tc.check {
					check = c.check
				}
			}
			require.NotNil(t, check, tc.check)
			require.ErrorContains(t, check(d, edited), tc.want)
			require.Error(t, runChecks(edited))
		})
	}
}

func TestResolveRefusesWhatTheChecksCannotFollow(t *testing.T) {
	tests := []struct {
		name string
		edit func(t *testing.T, tmpl map[string]any)
		want string
	}{
		{
			name: "a function the evaluator does not know",
			edit: func(t *testing.T, tmpl map[string]any) {
				setSetting(t, tmpl, "AZURE_LOCATION", "[toLower(parameters('azureLocation'))]")
			},
			want: "function toLower is not one these checks evaluate",
		},
		{
			name: "a concat of strings, which the checks do not follow",
			edit: func(t *testing.T, tmpl map[string]any) {
				setSetting(t, tmpl, "AZURE_LOCATION", "[concat(parameters('azureLocation'), '')]")
			},
			want: "these checks concatenate arrays only",
		},
		{
			name: "a runtime property no check models",
			edit: func(t *testing.T, tmpl map[string]any) {
				setSetting(t, tmpl, "AZURE_CLIENT_ID", "[reference(variables('identityId'), '2023-01-31').tenantId]")
			},
			want: "is not a property these checks model",
		},
		{
			name: "a nested template in the parent's scope",
			edit: func(t *testing.T, tmpl map[string]any) {
				opts := path(props(findResource(t, tmpl, "Microsoft.Resources/deployments", "cosmos-role")), "expressionEvaluationOptions").(map[string]any)
				opts["scope"] = "outer"
			},
			want: "expressionEvaluationOptions.scope inner",
		},
		{
			name: "a parameter over its maximum",
			edit: func(t *testing.T, tmpl map[string]any) {
				parameters(tmpl)["maximumInstanceCount"].(map[string]any)["maxValue"] = 2
			},
			want: "maximumInstanceCount: 40 is over its maxValue 2",
		},
	}
	f := load(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tmpl := deepCopy(f.template)
			tc.edit(t, tmpl)
			_, err := resolve(tmpl, f.values, exampleScope)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// Editing helpers for copies of the template.

func variables(tmpl map[string]any) map[string]any  { return tmpl["variables"].(map[string]any) }
func parameters(tmpl map[string]any) map[string]any { return tmpl["parameters"].(map[string]any) }
func props(r map[string]any) map[string]any         { return r["properties"].(map[string]any) }

// findResource returns the raw resource of a type whose name or description
// holds hint.
func findResource(t *testing.T, tmpl map[string]any, typ, hint string) map[string]any {
	t.Helper()
	var found []map[string]any
	for _, r := range tmpl["resources"].([]any) {
		m := r.(map[string]any)
		if m["type"] != typ {
			continue
		}
		b, _ := json.Marshal(m["name"])
		desc, _ := path(m, "properties", "description").(string)
		if strings.Contains(string(b), hint) || strings.Contains(desc, hint) {
			found = append(found, m)
		}
	}
	require.Len(t, found, 1, "%s %q", typ, hint)
	return found[0]
}

func cosmosRoleAssignment(t *testing.T, tmpl map[string]any) map[string]any {
	t.Helper()
	dep := findResource(t, tmpl, "Microsoft.Resources/deployments", "cosmos-role")
	return path(dep, "properties", "template", "resources").([]any)[0].(map[string]any)
}

func keyVaultRoleAssignment(t *testing.T, tmpl map[string]any) map[string]any {
	t.Helper()
	dep := findResource(t, tmpl, "Microsoft.Resources/deployments", "keyvault-role")
	return path(dep, "properties", "template", "resources").([]any)[0].(map[string]any)
}

func removeResource(t *testing.T, tmpl map[string]any, r map[string]any) {
	t.Helper()
	var kept []any
	for _, x := range tmpl["resources"].([]any) {
		if fmt.Sprint(x) != fmt.Sprint(r) {
			kept = append(kept, x)
		}
	}
	require.Len(t, kept, len(tmpl["resources"].([]any))-1)
	tmpl["resources"] = kept
}

func appSettingsOf(t *testing.T, tmpl map[string]any) map[string]any {
	t.Helper()
	return path(props(findResource(t, tmpl, "Microsoft.Web/sites", "")), "siteConfig").(map[string]any)
}

func setSetting(t *testing.T, tmpl map[string]any, name, value string) {
	t.Helper()
	for _, s := range appSettingsOf(t, tmpl)["appSettings"].([]any) {
		if m := s.(map[string]any); m["name"] == name {
			m["value"] = value
			return
		}
	}
	t.Fatalf("no setting %s", name)
}

func addSetting(t *testing.T, tmpl map[string]any, name, value string) {
	t.Helper()
	sc := appSettingsOf(t, tmpl)
	sc["appSettings"] = append(sc["appSettings"].([]any), map[string]any{"name": name, "value": value})
}

func removeSetting(t *testing.T, tmpl map[string]any, name string) {
	t.Helper()
	sc := appSettingsOf(t, tmpl)
	var kept []any
	for _, s := range sc["appSettings"].([]any) {
		if s.(map[string]any)["name"] != name {
			kept = append(kept, s)
		}
	}
	require.Len(t, kept, len(sc["appSettings"].([]any))-1, "no setting %s", name)
	sc["appSettings"] = kept
}
