package deploy

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opstatus/opstatus/deploy/internal/armeval"
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
	f.template, err = armeval.ReadJSON(templateFile)
	require.NoError(t, err)
	f.parameters, err = armeval.ReadJSON(parametersFile)
	require.NoError(t, err)
	f.values, err = armeval.ParameterValues(f.parameters)
	require.NoError(t, err)
	f.functions, err = readFunctions()
	require.NoError(t, err)
	f.host, err = armeval.ReadJSON(filepath.Join("..", "host.json"))
	require.NoError(t, err)
	return f
}

// checks are the checks a schema cannot make, run on a resolved template.
var checks = []struct {
	name  string
	check func(d *armeval.Deployment, f fixture) error
}{
	{"role GUIDs", func(d *armeval.Deployment, _ fixture) error { return checkRoleGUIDs(d) }},
	{"grants", func(d *armeval.Deployment, _ fixture) error { return checkGrants(d) }},
	{"identity", func(d *armeval.Deployment, _ fixture) error { return checkIdentity(d) }},
	{"settings", func(d *armeval.Deployment, f fixture) error { return checkSettings(d, f.functions) }},
	{"bindings", func(d *armeval.Deployment, f fixture) error { return checkBindings(d, f.functions, f.host) }},
	{"secrets", func(d *armeval.Deployment, f fixture) error { return checkNoSecrets(texts(f), d) }},
	{"budget", func(d *armeval.Deployment, _ fixture) error { return checkBudget(d) }},
	{"always ready", func(d *armeval.Deployment, f fixture) error { return checkAlwaysReady(d, f.functions) }},
	{"flex", func(d *armeval.Deployment, _ fixture) error { return checkFlex(d) }},
	{"instance floor", func(_ *armeval.Deployment, f fixture) error { return checkInstanceFloor(f.template) }},
	{"names", checkNames},
	{"network", func(d *armeval.Deployment, _ fixture) error { return checkNetwork(d) }},
	{"zone redundancy", func(d *armeval.Deployment, _ fixture) error { return checkZoneRedundancy(d) }},
	{"leases", func(d *armeval.Deployment, _ fixture) error { return checkLeases(d) }},
	{"refusals", func(_ *armeval.Deployment, f fixture) error { return checkRefusals(f.template, f.parameters) }},
	{"monitoring", checkMonitoring},
	{"dependencies", func(d *armeval.Deployment, _ fixture) error { return checkDependencies(d) }},
	{"sampling", func(_ *armeval.Deployment, f fixture) error { return checkSampling(f.host) }},
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
	d, err := armeval.Resolve(f.template, f.values, exampleScope)
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
	d, err := armeval.Resolve(f.template, f.values, exampleScope)
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
	for _, name := range []string{"appName", "storageAccountName", "subnetId", "privateEndpointSubnetId", "storageBlobDnsZoneId", "storageQueueDnsZoneId", "storageTableDnsZoneId", "siteDnsZoneId", "cosmosAccountName", "cosmosDatabase", "clusterServiceUrl", "runbookBaseUrl"} {
		required[name] = f.values[name]
	}
	for _, extra := range []map[string]any{nil, {"pickupEnabled": false}} {
		t.Run(fmt.Sprint(extra), func(t *testing.T) {
			values := map[string]any{}
			for k, v := range required {
				values[k] = v
			}
			for k, v := range extra {
				values[k] = v
			}
			d, err := armeval.Resolve(f.template, values, exampleScope)
			require.NoError(t, err)
			require.NoError(t, checkBudget(d))
			b, err := clusterServiceBound(d)
			require.NoError(t, err)
			require.Equal(t, bound{perProcess: config.DefaultClusterServiceMaxInFlight, budget: 256}, b)
		})
	}
}

// TestBudgetHoldsForAnyParameters deploys the template with parameter values
// that once broke the static split (more instances than the budget, a
// ceiling over it), with pickup on and off: the handler gets the budget and
// the ceiling as stated and starts.
func TestBudgetHoldsForAnyParameters(t *testing.T) {
	f := load(t)
	n := 0
	for _, instances := range []int64{1, 40, 257, 1000} {
		for _, pickup := range []bool{true, false} {
			for _, perProcess := range []int64{1, 64, 4096} {
				for _, budget := range []int64{4, 256, 1000} {
					values := map[string]any{}
					for k, v := range f.values {
						values[k] = v
					}
					values["maximumInstanceCount"] = instances
					values["pickupEnabled"] = pickup
					values["clusterServiceMaxInFlight"] = perProcess
					values["clusterServiceBudget"] = budget
					what := fmt.Sprintf("%v", values)
					d, err := armeval.Resolve(f.template, values, exampleScope)
					require.NoError(t, err, what)
					require.NoError(t, checkBudget(d), what)
					b, err := clusterServiceBound(d)
					require.NoError(t, err, what)
					require.Equal(t, bound{perProcess: perProcess, budget: budget}, b, what)
					n++
				}
			}
		}
	}
	require.Equal(t, 4*2*3*3, n)
}

func TestParametersFileDeclaresOnlyTemplateParameters(t *testing.T) {
	f := load(t)
	f.values["cosmosContainer"] = "Operations"
	_, err := armeval.Resolve(f.template, f.values, exampleScope)
	require.ErrorContains(t, err, "cosmosContainer is given but the template declares none")
}

// TestChecksFailOnEditedTemplate edits a copy of the template the way a
// mistake would and sees the check that guards against it fail.
func TestChecksFailOnEditedTemplate(t *testing.T) {
	tests := []struct {
		name  string
		check string
		// values are parameter values the case deploys the copy with,
		// into scope when set.
		values map[string]any
		scope  armeval.Scope
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
				extra := armeval.DeepCopy(findResource(t, tmpl, "Microsoft.Authorization/roleAssignments", "Queue"))
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
			name:  "the Cosmos DB role on the whole database, the frontend's containers included",
			check: "grants",
			edit: func(t *testing.T, tmpl map[string]any) {
				props(cosmosRoleAssignment(t, tmpl))["scope"] = "[format('{0}/dbs/{1}', resourceId('Microsoft.DocumentDB/databaseAccounts', parameters('accountName')), parameters('database'))]"
			},
			want: "want exactly",
		},
		{
			name:  "the Cosmos DB role on a container opstatus does not use",
			check: "grants",
			edit: func(t *testing.T, tmpl map[string]any) {
				dep := findResource(t, tmpl, "Microsoft.Resources/deployments", "cosmos")
				armeval.Path(dep, "properties", "parameters", "dataContainers").(map[string]any)["value"] = []any{"Operations", "Resources", "Locks", "Billing", "Subscriptions"}
			},
			want: "want exactly",
		},
		{
			name:  "the Cosmos DB role missing on a container opstatus uses",
			check: "grants",
			edit: func(t *testing.T, tmpl map[string]any) {
				dep := findResource(t, tmpl, "Microsoft.Resources/deployments", "cosmos")
				armeval.Path(dep, "properties", "parameters", "dataContainers").(map[string]any)["value"] = []any{"Operations", "Resources", "Locks"}
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
				auth := armeval.Path(props(findResource(t, tmpl, "Microsoft.Web/sites", "")), "functionAppConfig", "deployment", "storage", "authentication").(map[string]any)
				auth["userAssignedIdentityResourceId"] = "[resourceId('Microsoft.ManagedIdentity/userAssignedIdentities', 'other-id')]"
			},
			want: "deployment storage authenticates as",
		},
		{
			name:  "the deployment package read with a connection string",
			check: "identity",
			edit: func(t *testing.T, tmpl map[string]any) {
				auth := armeval.Path(props(findResource(t, tmpl, "Microsoft.Web/sites", "")), "functionAppConfig", "deployment", "storage", "authentication").(map[string]any)
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
			edit: func(t *testing.T, tmpl map[string]any) {
				removeSetting(t, tmpl, "COSMOS_LEASES_CONTAINER")
				removeSetting(t, tmpl, "CLUSTER_SERVICE_BUDGET") // else the handler refuses to start first
			},
			want: "pickup/function.json reads %COSMOS_LEASES_CONTAINER%",
		},
		{
			name:  "COSMOS_LEASES_CONTAINER missing with a budget",
			check: "settings",
			edit:  func(t *testing.T, tmpl map[string]any) { removeSetting(t, tmpl, "COSMOS_LEASES_CONTAINER") },
			want:  "CLUSTER_SERVICE_BUDGET: needs COSMOS_LEASES_CONTAINER",
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
				storage := armeval.Path(props(findResource(t, tmpl, "Microsoft.Web/sites", "")), "functionAppConfig", "deployment", "storage").(map[string]any)
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
			name:  "a setting of the static split left in",
			check: "budget",
			edit: func(t *testing.T, tmpl map[string]any) {
				addSetting(t, tmpl, "MAXIMUM_INSTANCE_COUNT", "[string(parameters('maximumInstanceCount'))]")
			},
			want: "MAXIMUM_INSTANCE_COUNT is set, but the handler no longer reads it",
		},
		{
			name:  "the ceiling lowered by the static split",
			check: "budget",
			edit: func(t *testing.T, tmpl map[string]any) {
				setSetting(t, tmpl, "CLUSTER_SERVICE_MAX_IN_FLIGHT", "[string(min(parameters('clusterServiceMaxInFlight'), div(parameters('clusterServiceBudget'), mul(2, parameters('maximumInstanceCount')))))]")
			},
			want: "CLUSTER_SERVICE_MAX_IN_FLIGHT is 3, not clusterServiceMaxInFlight 256",
		},
		{
			name:  "the budget without the ledger's container",
			check: "budget",
			edit: func(t *testing.T, tmpl map[string]any) {
				setSetting(t, tmpl, "COSMOS_LEASES_CONTAINER", "")
			},
			want: "CLUSTER_SERVICE_BUDGET: needs COSMOS_LEASES_CONTAINER",
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
				sc := armeval.Path(props(findResource(t, tmpl, "Microsoft.Web/sites", "")), "functionAppConfig", "scaleAndConcurrency").(map[string]any)
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
			name:  "vnetRouteAllEnabled, which Flex deprecates",
			check: "network",
			edit: func(t *testing.T, tmpl map[string]any) {
				props(findResource(t, tmpl, "Microsoft.Web/sites", ""))["vnetRouteAllEnabled"] = true
			},
			want: "vnetRouteAllEnabled is true: Flex Consumption routes all traffic through the subnet without it",
		},
		{
			name:  "private storage letting trusted Azure services in",
			check: "network",
			edit: func(t *testing.T, tmpl map[string]any) {
				props(findResource(t, tmpl, "Microsoft.Storage/storageAccounts", ""))["networkAcls"].(map[string]any)["bypass"] = "AzureServices"
			},
			want: "networkAcls.bypass AzureServices, want None",
		},
		{
			name:  "no private endpoint for the host's queues",
			check: "network",
			edit: func(t *testing.T, tmpl map[string]any) {
				removeResource(t, tmpl, findResource(t, tmpl, "Microsoft.Network/privateEndpoints", "-queue-pe"))
			},
			want: "0 private endpoints for queue of",
		},
		{
			name:  "the table endpoint registered in the blob zone",
			check: "network",
			edit: func(t *testing.T, tmpl map[string]any) {
				variables(tmpl)["storageDnsZones"].(map[string]any)["table"] = "[parameters('storageBlobDnsZoneId')]"
			},
			want: "not a privatelink.table.core.windows.net private DNS zone",
		},
		{
			name:  "the site made before its storage's blob endpoint resolves",
			check: "network",
			edit: func(t *testing.T, tmpl map[string]any) {
				site := findResource(t, tmpl, "Microsoft.Web/sites", "")
				var kept []any
				for _, d := range site["dependsOn"].([]any) {
					if !strings.Contains(d.(string), "privateDnsZoneGroups', format('{0}-blob-pe'") {
						kept = append(kept, d)
					}
				}
				require.Len(t, kept, len(site["dependsOn"].([]any))-1)
				site["dependsOn"] = kept
			},
			want: "the site does not depend on",
		},
		{
			name:  "a storage private endpoint in the integration subnet",
			check: "network",
			edit: func(t *testing.T, tmpl map[string]any) {
				props(findResource(t, tmpl, "Microsoft.Network/privateEndpoints", "-blob-pe"))["subnet"] = map[string]any{"id": "[parameters('subnetId')]"}
			},
			want: "not privateEndpointSubnetId",
		},
		{
			name:  "the site open to public traffic whatever its parameter",
			check: "network",
			edit: func(t *testing.T, tmpl map[string]any) {
				props(findResource(t, tmpl, "Microsoft.Web/sites", ""))["publicNetworkAccess"] = "Enabled"
			},
			want: "the site's publicNetworkAccess is Enabled, not sitePublicNetworkAccess Disabled",
		},
		{
			name:  "the app's private endpoint to another group than sites",
			check: "network",
			edit: func(t *testing.T, tmpl map[string]any) {
				conn := props(findResource(t, tmpl, "Microsoft.Network/privateEndpoints", "sitePrivateEndpointName"))["privateLinkServiceConnections"].([]any)[0]
				props(conn.(map[string]any))["groupIds"] = []any{"scm"}
			},
			want: "sitePrivateEndpoint: 0 private endpoints for sites",
		},
		{
			name:   "a subnet name with _, the template's own check removed",
			check:  "network",
			values: map[string]any{"subnetId": exampleVnet + "/subnets/ops_status"},
			scope:  exampleScope.WithExisting(exampleVnet+"/subnets/ops_status", map[string]any{"properties": map[string]any{"addressPrefix": "10.128.64.0/26", "delegations": delegatedTo("Microsoft.App/environments")}}),
			edit: func(t *testing.T, tmpl map[string]any) {
				editSubnetCheck(t, tmpl, "contains(variables('integrationSubnetName'), '_')", "false()")
			},
			want: "subnet ops_status: Flex Consumption refuses a subnet name with _",
		},
		{
			name:  "the template accepting a subnet name with _",
			check: "refusals",
			edit: func(t *testing.T, tmpl map[string]any) {
				editSubnetCheck(t, tmpl, "contains(variables('integrationSubnetName'), '_')", "false()")
			},
			want: "the template accepts a subnet name with _",
		},
		{
			name:  "the template accepting a subnet under /27",
			check: "refusals",
			edit:  func(t *testing.T, tmpl map[string]any) { editSubnetCheck(t, tmpl, ".cidr, 27)", ".cidr, 32)") },
			want:  "the template accepts a /28 subnet",
		},
		{
			name:  "the template accepting a subnet delegated as other plans want it",
			check: "refusals",
			edit: func(t *testing.T, tmpl map[string]any) {
				editSubnetCheck(t, tmpl, "not(equals(first(reference(parameters('subnetId'), '2024-05-01').delegations).properties.serviceName, 'Microsoft.App/environments'))", "false()")
			},
			want: "the template accepts a subnet delegated as other plans want it",
		},
		{
			name:  "the template accepting a subnet that holds private endpoints",
			check: "refusals",
			edit: func(t *testing.T, tmpl map[string]any) {
				editSubnetCheck(t, tmpl, "not(empty(reference(parameters('subnetId'), '2024-05-01').privateEndpoints))", "false()")
			},
			want: "the template accepts a subnet holding a private endpoint",
		},
		{
			name:  "the template accepting a subnet in another region",
			check: "refusals",
			edit: func(t *testing.T, tmpl map[string]any) {
				editSubnetCheck(t, tmpl, "not(equals(toLower(reference(variables('integrationVnetId'), '2024-05-01', 'Full').location), toLower(parameters('location'))))", "false()")
			},
			want: "the template accepts a subnet in another region",
		},
		{
			name:  "the template accepting private storage without its zones",
			check: "refusals",
			edit: func(t *testing.T, tmpl map[string]any) {
				p := props(findResource(t, tmpl, "Microsoft.Storage/storageAccounts", ""))
				p["publicNetworkAccess"] = strings.Replace(p["publicNetworkAccess"].(string), "empty(parameters('storageQueueDnsZoneId'))", "false()", 1)
			},
			want: "the template accepts private storage without its zones",
		},
		{
			name:  "the template accepting a subnetId that is not a subnet's",
			check: "refusals",
			edit: func(t *testing.T, tmpl map[string]any) {
				editSubnetCheck(t, tmpl, "empty(variables('integrationVnetId'))", "false()")
			},
			want: "the template accepts a subnet ID that names a virtual network",
		},
		{
			name:  "the template accepting private storage without VNet integration",
			check: "refusals",
			edit: func(t *testing.T, tmpl map[string]any) {
				editStorageAccess(t, tmpl, "empty(parameters('subnetId'))", "false()")
			},
			want: "the template accepts private storage without VNet integration",
		},
		{
			name:  "the template accepting storage endpoints in the integration subnet",
			check: "refusals",
			edit: func(t *testing.T, tmpl map[string]any) {
				editStorageAccess(t, tmpl, "equals(toLower(parameters('privateEndpointSubnetId')), toLower(parameters('subnetId')))", "false()")
			},
			want: "the template accepts storage endpoints in the integration subnet",
		},
		{
			name:  "the template accepting the app's endpoint in the integration subnet",
			check: "refusals",
			edit: func(t *testing.T, tmpl map[string]any) {
				editSiteEndpointSubnet(t, tmpl, "equals(toLower(parameters('privateEndpointSubnetId')), toLower(parameters('subnetId')))", "false()")
			},
			want: "the template accepts the app's endpoint in the integration subnet",
		},
		{
			name:  "the template accepting the app's endpoint without its zone",
			check: "refusals",
			edit: func(t *testing.T, tmpl map[string]any) {
				editSiteEndpointSubnet(t, tmpl, "empty(parameters('siteDnsZoneId'))", "false()")
			},
			want: "the template accepts the app's private endpoint without its zone",
		},
		{
			name:   "private endpoints in the integration subnet, the template's own checks removed",
			check:  "network",
			values: map[string]any{"privateEndpointSubnetId": exampleVnet + "/subnets/opstatus"},
			edit: func(t *testing.T, tmpl map[string]any) {
				same := "equals(toLower(parameters('privateEndpointSubnetId')), toLower(parameters('subnetId')))"
				editStorageAccess(t, tmpl, same, "false()")
				editSiteEndpointSubnet(t, tmpl, same, "false()")
			},
			want: "privateEndpointSubnetId is subnetId",
		},
		{
			name:  "Leases under another name than the handler's setting",
			check: "leases",
			edit: func(t *testing.T, tmpl map[string]any) {
				findResource(t, tmpl, "Microsoft.Resources/deployments", "cosmos")["properties"].(map[string]any)["parameters"].(map[string]any)["leasesContainer"] = map[string]any{"value": "leases"}
			},
			want: "/containers/Leases: pickup's trigger would find no leases container",
		},
		{
			name:   "Leases declared though the resource provider declares it",
			check:  "leases",
			values: map[string]any{"createLeasesContainer": false},
			edit:   func(t *testing.T, tmpl map[string]any) { delete(leasesContainer(t, tmpl), "condition") },
			want:   "createLeasesContainer is false, but the template declares 1 containers",
		},
		{
			name:  "the template accepting zone redundancy with one always-ready instance",
			check: "refusals",
			edit: func(t *testing.T, tmpl map[string]any) {
				props(findResource(t, tmpl, "Microsoft.Web/serverfarms", ""))["zoneRedundant"] = "[parameters('zoneRedundant')]"
			},
			want: "the template accepts zone redundancy with one always-ready poll instance",
		},
		{
			name:   "zone redundancy with one always-ready instance, the template's own check removed",
			check:  "zone redundancy",
			values: map[string]any{"zoneRedundant": true},
			edit: func(t *testing.T, tmpl map[string]any) {
				props(findResource(t, tmpl, "Microsoft.Web/serverfarms", ""))["zoneRedundant"] = "[parameters('zoneRedundant')]"
			},
			want: "zone redundant with 1 always-ready instances of function:poll",
		},
		{
			name:   "zone redundancy asked for and not set",
			check:  "zone redundancy",
			values: map[string]any{"zoneRedundant": true, "alwaysReadyPoll": 2, "alwaysReadyPickup": 2},
			edit: func(t *testing.T, tmpl map[string]any) {
				delete(props(findResource(t, tmpl, "Microsoft.Web/serverfarms", "")), "zoneRedundant")
			},
			want: "the plan's zoneRedundant is <nil>, not the zoneRedundant parameter true",
		},
		{
			name:  "no principal ID for the resource provider's IaC",
			check: "identity",
			edit: func(t *testing.T, tmpl map[string]any) {
				delete(tmpl["outputs"].(map[string]any), "identityPrincipalId")
			},
			want: "output identityPrincipalId",
		},
		{
			name:   "the Cosmos DB role assigned though left to the resource provider",
			check:  "grants",
			values: map[string]any{"assignCosmosRole": false},
			edit:   func(t *testing.T, tmpl map[string]any) { delete(cosmosRoleAssignment(t, tmpl), "condition") },
			want:   "want exactly",
		},
		{
			name:   "the Key Vault role assigned though left to the resource provider",
			check:  "grants",
			values: withValues(clientCredentials, map[string]any{"assignKeyVaultRole": false}),
			edit: func(t *testing.T, tmpl map[string]any) {
				findResource(t, tmpl, "Microsoft.Resources/deployments", "keyvault-role")["condition"] = "[variables('clusterServiceCredentials')]"
			},
			want: "want exactly",
		},
		{
			name:   "the CA bundle's Key Vault role assigned though left to the resource provider",
			check:  "grants",
			values: map[string]any{"assignKeyVaultRole": false},
			edit: func(t *testing.T, tmpl map[string]any) {
				findResource(t, tmpl, "Microsoft.Resources/deployments", "cabundle-role")["condition"] = "[variables('clusterServiceCaBundle')]"
			},
			want: "want exactly",
		},
		{
			name:  "Leases partitioned by another path than the trigger's",
			check: "leases",
			edit: func(t *testing.T, tmpl map[string]any) {
				armeval.Path(leasesContainer(t, tmpl), "properties", "resource", "partitionKey").(map[string]any)["paths"] = []any{"/partitionKey"}
			},
			want: "want /id (Hash)",
		},
		{
			name:   "the Leases throughput parameter ignored",
			check:  "leases",
			values: map[string]any{"leasesMaxThroughput": 4000},
			edit: func(t *testing.T, tmpl map[string]any) {
				props(leasesContainer(t, tmpl))["options"] = "[createObject()]"
			},
			want: "want autoscale to leasesMaxThroughput 4000",
		},
		{
			name:  "the site not waiting for the Cosmos DB deployment",
			check: "leases",
			edit: func(t *testing.T, tmpl map[string]any) {
				site := findResource(t, tmpl, "Microsoft.Web/sites", "")
				var kept []any
				for _, d := range site["dependsOn"].([]any) {
					if !strings.Contains(d.(string), "-cosmos'") {
						kept = append(kept, d)
					}
				}
				require.Len(t, kept, len(site["dependsOn"].([]any))-1)
				site["dependsOn"] = kept
			},
			want: "the site does not depend on nested deployment",
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
				props(findResource(t, tmpl, "Microsoft.Storage/storageAccounts", ""))["networkAcls"].(map[string]any)["defaultAction"] = "Allow"
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
			name:   "the client secret as a plain setting",
			check:  "secrets",
			values: clientCredentials,
			edit: func(t *testing.T, tmpl map[string]any) {
				setSetting(t, tmpl, "CLUSTER_SERVICE_CLIENT_SECRET", "[parameters('clusterServiceSecretName')]")
			},
			want: "setting CLUSTER_SERVICE_CLIENT_SECRET looks like a credential and is not a Key Vault reference",
		},
		{
			name:   "Key Vault Secrets User on the whole vault",
			check:  "grants",
			values: clientCredentials,
			edit: func(t *testing.T, tmpl map[string]any) {
				keyVaultRoleAssignment(t, tmpl, "keyvault-role")["scope"] = "[format('Microsoft.KeyVault/vaults/{0}', parameters('vaultName'))]"
			},
			want: "CLUSTER_SERVICE_CLIENT_SECRET refers to Key Vault secret vaults/arohcp-int-eastus-svc/secrets/opstatus-cluster-service, on which the identity is given no Key Vault Secrets User",
		},
		{
			name:  "Key Vault Secrets User on the CA bundle's whole vault",
			check: "grants",
			edit: func(t *testing.T, tmpl map[string]any) {
				keyVaultRoleAssignment(t, tmpl, "cabundle-role")["scope"] = "[format('Microsoft.KeyVault/vaults/{0}', parameters('vaultName'))]"
			},
			want: "CLUSTER_SERVICE_CA_BUNDLE refers to Key Vault secret vaults/arohcp-int-eastus-svc/secrets/opstatus-clusters-service-ca, on which the identity is given no Key Vault Secrets User",
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
				rt := armeval.Path(props(findResource(t, tmpl, "Microsoft.Web/sites", "")), "functionAppConfig", "runtime").(map[string]any)
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
			edited.template = armeval.DeepCopy(f.template)
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
			scope := exampleScope
			if tc.scope.Subscription != "" {
				scope = tc.scope
			}
			d, err := armeval.Resolve(edited.template, edited.values, scope)
			require.NoError(t, err)
			var check func(*armeval.Deployment, fixture) error
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
				setSetting(t, tmpl, "AZURE_LOCATION", "[toUpper(parameters('azureLocation'))]")
			},
			want: "function toUpper is not one these checks evaluate",
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
				opts := armeval.Path(props(findResource(t, tmpl, "Microsoft.Resources/deployments", "cosmos")), "expressionEvaluationOptions").(map[string]any)
				opts["scope"] = "outer"
			},
			want: "expressionEvaluationOptions.scope inner",
		},
		{
			name: "copyIndex outside a loop",
			edit: func(t *testing.T, tmpl map[string]any) {
				setSetting(t, tmpl, "AZURE_LOCATION", "[string(copyIndex())]")
			},
			want: "copyIndex outside a copy loop",
		},
		{
			name: "copyIndex naming a loop",
			edit: func(t *testing.T, tmpl map[string]any) {
				props(cosmosRoleAssignment(t, tmpl))["scope"] = "[string(copyIndex('containerRoles'))]"
			},
			want: "a loop's name is not something these checks follow",
		},
		{
			name: "a loop without a count",
			edit: func(t *testing.T, tmpl map[string]any) {
				delete(cosmosRoleAssignment(t, tmpl)["copy"].(map[string]any), "count")
			},
			want: "copy count",
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
			tmpl := armeval.DeepCopy(f.template)
			tc.edit(t, tmpl)
			_, err := armeval.Resolve(tmpl, f.values, exampleScope)
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
		desc, _ := armeval.Path(m, "properties", "description").(string)
		if strings.Contains(string(b), hint) || strings.Contains(desc, hint) {
			found = append(found, m)
		}
	}
	require.Len(t, found, 1, "%s %q", typ, hint)
	return found[0]
}

func cosmosRoleAssignment(t *testing.T, tmpl map[string]any) map[string]any {
	t.Helper()
	dep := findResource(t, tmpl, "Microsoft.Resources/deployments", "cosmos")
	return armeval.Path(dep, "properties", "template", "resources").([]any)[0].(map[string]any)
}

func leasesContainer(t *testing.T, tmpl map[string]any) map[string]any {
	t.Helper()
	dep := findResource(t, tmpl, "Microsoft.Resources/deployments", "cosmos")
	return armeval.Path(dep, "properties", "template", "resources").([]any)[1].(map[string]any)
}

// editSubnetCheck replaces part of the site's checks of its subnet.
func editSubnetCheck(t *testing.T, tmpl map[string]any, old, replacement string) {
	t.Helper()
	p := props(findResource(t, tmpl, "Microsoft.Web/sites", ""))
	expr := p["virtualNetworkSubnetId"].(string)
	require.Contains(t, expr, old)
	p["virtualNetworkSubnetId"] = strings.Replace(expr, old, replacement, 1)
}

// editStorageAccess replaces part of the storage account's checks of its
// network parameters.
func editStorageAccess(t *testing.T, tmpl map[string]any, old, replacement string) {
	t.Helper()
	p := props(findResource(t, tmpl, "Microsoft.Storage/storageAccounts", ""))
	expr := p["publicNetworkAccess"].(string)
	require.Contains(t, expr, old)
	p["publicNetworkAccess"] = strings.Replace(expr, old, replacement, 1)
}

// editSiteEndpointSubnet replaces part of the app's private endpoint's
// checks of its subnet and zone.
func editSiteEndpointSubnet(t *testing.T, tmpl map[string]any, old, replacement string) {
	t.Helper()
	subnet := props(findResource(t, tmpl, "Microsoft.Network/privateEndpoints", "sitePrivateEndpointName"))["subnet"].(map[string]any)
	expr := subnet["id"].(string)
	require.Contains(t, expr, old)
	subnet["id"] = strings.Replace(expr, old, replacement, 1)
}

// keyVaultRoleAssignment returns the role assignment of the nested
// deployment named for hint: keyvault-role (the client secret's) or
// cabundle-role.
func keyVaultRoleAssignment(t *testing.T, tmpl map[string]any, hint string) map[string]any {
	t.Helper()
	dep := findResource(t, tmpl, "Microsoft.Resources/deployments", hint)
	return armeval.Path(dep, "properties", "template", "resources").([]any)[0].(map[string]any)
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
	return armeval.Path(props(findResource(t, tmpl, "Microsoft.Web/sites", "")), "siteConfig").(map[string]any)
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
