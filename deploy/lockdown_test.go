package deploy

import (
	"fmt"
	"strings"
	"testing"

	"github.com/opstatus/opstatus/deploy/internal/armeval"
	"github.com/stretchr/testify/require"
)

// checkZoneRedundancy checks the plan's zone redundancy: it is the
// zoneRedundant parameter's, and when on, poll and, when the host runs it,
// pickup each have at least two always-ready instances, since the platform
// keeps two of every group then and bills them as always-ready
// (learn.microsoft.com/azure/reliability/reliability-functions).
func checkZoneRedundancy(d *armeval.Deployment) error {
	plan, err := d.One("Microsoft.Web/serverfarms")
	if err != nil {
		return err
	}
	on := armeval.Path(plan.Body, "properties", "zoneRedundant")
	if on != d.Params["zoneRedundant"] {
		return fmt.Errorf("the plan's zoneRedundant is %v, not the zoneRedundant parameter %v", on, d.Params["zoneRedundant"])
	}
	if on != true {
		return nil
	}
	// LRS keeps its copies in one zone: the host's queues, leases and
	// package would not outlive it.
	storage, err := d.One("Microsoft.Storage/storageAccounts")
	if err != nil {
		return err
	}
	if sku := armeval.Path(storage.Body, "sku", "name"); sku != "Standard_ZRS" {
		return fmt.Errorf("zone redundant with the host's storage %s %v: its queues, leases and package stay in one zone; want Standard_ZRS", storage.Name, sku)
	}
	site, err := d.One("Microsoft.Web/sites")
	if err != nil {
		return err
	}
	settings, err := appSettings(d)
	if err != nil {
		return err
	}
	groups := []string{"function:poll"}
	if runs, err := pickupRuns(settings); err != nil {
		return err
	} else if runs {
		groups = append(groups, "function:pickup")
	}
	entries, _ := armeval.Path(site.Body, "properties", "functionAppConfig", "scaleAndConcurrency", "alwaysReady").([]any)
	for _, g := range groups {
		n := int64(0)
		for _, e := range entries {
			if armeval.Path(e, "name") == g {
				n, _ = armeval.Path(e, "instanceCount").(int64)
			}
		}
		if n < 2 {
			return fmt.Errorf("zone redundant with %d always-ready instances of %s: the platform keeps and bills 2 of every group", n, g)
		}
	}
	return nil
}

// checkLeases checks pickup's Leases container: declared, when
// createLeasesContainer, in COSMOS_DATABASE of COSMOS_ENDPOINT's account
// under the name COSMOS_LEASES_CONTAINER gives, partitioned by /id as the
// change feed trigger's leases are, with the autoscale maximum
// leasesMaxThroughput asks for or no throughput of its own; and the site
// depends on every nested deployment, so the roles and the container
// exist before the host starts.
func checkLeases(d *armeval.Deployment) error {
	settings, err := appSettings(d)
	if err != nil {
		return err
	}
	containers := d.ByType("Microsoft.DocumentDB/databaseAccounts/sqlDatabases/containers")
	if d.Params["createLeasesContainer"] == false {
		if len(containers) != 0 {
			return fmt.Errorf("createLeasesContainer is false, but the template declares %d containers", len(containers))
		}
	} else {
		if len(containers) != 1 {
			return fmt.Errorf("%d containers declared, want the Leases container alone", len(containers))
		}
		c := containers[0]
		account, err := cosmosAccount(d, "COSMOS_ENDPOINT", settings["COSMOS_ENDPOINT"])
		if err != nil {
			return err
		}
		// Database and container names are case-sensitive.
		name := settings["COSMOS_LEASES_CONTAINER"]
		in := "/sqlDatabases/" + settings["COSMOS_DATABASE"] + "/containers/" + name
		if want := account + in; !strings.EqualFold(c.ID, want) || !strings.HasSuffix(c.ID, in) {
			return fmt.Errorf("the Leases container is %s, not %s: pickup's trigger would find no leases container", c.ID, want)
		}
		if id := armeval.Path(c.Body, "properties", "resource", "id"); id != name {
			return fmt.Errorf("container %s has resource.id %v", c.Name, id)
		}
		pk := armeval.Path(c.Body, "properties", "resource", "partitionKey")
		if paths, _ := armeval.Path(pk, "paths").([]any); len(paths) != 1 || paths[0] != "/id" || armeval.Path(pk, "kind") != "Hash" {
			return fmt.Errorf("container %s has partition key %v, want /id (Hash): the change feed trigger's leases", c.Name, pk)
		}
		options, _ := armeval.Path(c.Body, "properties", "options").(map[string]any)
		if max, _ := d.Params["leasesMaxThroughput"].(int64); max > 0 {
			if got := armeval.Path(options, "autoscaleSettings", "maxThroughput"); got != max || len(options) != 1 {
				return fmt.Errorf("container %s has options %v, want autoscale to leasesMaxThroughput %d", c.Name, options, max)
			}
		} else if len(options) != 0 {
			return fmt.Errorf("container %s has options %v, want none with leasesMaxThroughput 0", c.Name, options)
		}
	}
	site, err := d.One("Microsoft.Web/sites")
	if err != nil {
		return err
	}
	for _, r := range d.ByType("Microsoft.Resources/deployments") {
		if !dependsOn(site, r.ID) {
			return fmt.Errorf("the site does not depend on nested deployment %s: the host could start before what it makes", r.Name)
		}
	}
	return nil
}

// refusal is a choice of parameters, and of the network they name, with
// which the app could not run, which the template itself must refuse with
// fail(): at validation where the parameters show it, else, for what only
// the existing subnet tells, before the site is made.
type refusal struct {
	name   string
	values map[string]any
	scope  armeval.Scope
	want   string
}

// refusals are the choices the template must refuse.
func refusals() []refusal {
	subnet := exampleVnet + "/subnets/opstatus"
	under := exampleVnet + "/subnets/ops_status"
	return []refusal{
		{"zone redundancy with one always-ready poll instance", map[string]any{"zoneRedundant": true, "alwaysReadyPoll": 1, "alwaysReadyPickup": 2}, exampleScope,
			"zoneRedundant needs alwaysReadyPoll, and alwaysReadyPickup when pickupEnabled, of 2 or more"},
		{"zone redundancy with one always-ready pickup instance", map[string]any{"zoneRedundant": true, "alwaysReadyPoll": 2, "alwaysReadyPickup": 1}, exampleScope,
			"zoneRedundant needs alwaysReadyPoll, and alwaysReadyPickup when pickupEnabled, of 2 or more"},
		{"a subnet name with _", map[string]any{"subnetId": under},
			exampleScope.WithExisting(under, map[string]any{"properties": map[string]any{"addressPrefix": "10.128.64.0/26", "delegations": delegatedTo("Microsoft.App/environments")}}),
			"subnet ops_status: Flex Consumption refuses a subnet name with _"},
		{"a /28 subnet", nil,
			exampleScope.WithExisting(subnet, map[string]any{"properties": map[string]any{"addressPrefix": "10.128.64.0/28", "delegations": delegatedTo("Microsoft.App/environments")}}),
			"subnet opstatus is smaller than the /27 Flex Consumption needs"},
		{"a /28 subnet given by addressPrefixes", nil,
			exampleScope.WithExisting(subnet, map[string]any{"properties": map[string]any{"addressPrefixes": []any{"10.128.64.0/28"}, "delegations": delegatedTo("Microsoft.App/environments")}}),
			"subnet opstatus is smaller than the /27 Flex Consumption needs"},
		{"a subnet with no delegation", nil,
			exampleScope.WithExisting(subnet, map[string]any{"properties": map[string]any{"addressPrefix": "10.128.64.0/26", "delegations": []any{}}}),
			"subnet opstatus is not delegated to Microsoft.App/environments"},
		{"a subnet delegated as other plans want it", nil,
			exampleScope.WithExisting(subnet, map[string]any{"properties": map[string]any{"addressPrefix": "10.128.64.0/26", "delegations": delegatedTo("Microsoft.Web/serverFarms")}}),
			"subnet opstatus is delegated to Microsoft.Web/serverFarms, not Microsoft.App/environments"},
		{"a subnet holding a private endpoint", nil,
			exampleScope.WithExisting(subnet, map[string]any{"properties": map[string]any{"addressPrefix": "10.128.64.0/26", "delegations": delegatedTo("Microsoft.App/environments"), "privateEndpoints": []any{map[string]any{"id": "pe"}}}}),
			"subnet opstatus holds private endpoints"},
		{"the region's workspace in another region", map[string]any{"monitorWorkspaceId": exampleWorkspace},
			exampleScope.WithExisting(exampleWorkspace, map[string]any{"location": "westus3", "properties": map[string]any{}}),
			"is in westus3, not the app's region eastus"},
		{"a subnet in another region", nil,
			exampleScope.WithExisting(exampleVnet, map[string]any{"location": "westus3", "properties": map[string]any{}}),
			"subnet opstatus is not in the app's region eastus"},
		{"a subnet ID that names a virtual network", map[string]any{"subnetId": exampleVnet}, exampleScope,
			"is not a subnet's resource ID"},
		{"private storage without VNet integration", map[string]any{"subnetId": "", "storagePublicNetworkAccess": "Disabled"}, exampleScope,
			"publicNetworkAccess Disabled without VNet integration"},
		{"private storage without its zones", map[string]any{"storageQueueDnsZoneId": ""}, exampleScope,
			"storagePublicNetworkAccess Disabled needs privateEndpointSubnetId and the blob, queue and table privatelink zone IDs"},
		{"storage endpoints in the integration subnet", map[string]any{"privateEndpointSubnetId": exampleVnet + "/subnets/opstatus", "sitePrivateEndpoint": false}, exampleScope,
			"privateEndpointSubnetId is subnetId"},
		{"the app's endpoint in the integration subnet", map[string]any{"privateEndpointSubnetId": exampleVnet + "/subnets/opstatus", "storagePublicNetworkAccess": "Enabled"}, exampleScope,
			"privateEndpointSubnetId is subnetId"},
		{"the app's private endpoint without its zone", map[string]any{"siteDnsZoneId": ""}, exampleScope,
			"sitePrivateEndpoint needs privateEndpointSubnetId and siteDnsZoneId"},
		{"Cluster Service over http", map[string]any{"clusterServiceUrl": "http://api.clusters-service.int.example.internal"}, exampleScope,
			"clusterServiceUrl must be an https URL"},
		{"Cluster Service's URL with no scheme", map[string]any{"clusterServiceUrl": "api.clusters-service.int.example.internal"}, exampleScope,
			"clusterServiceUrl must be an https URL"},
		{"the token endpoint over http", withValues(clientCredentials, map[string]any{"clusterServiceTokenUrl": "http://sso.int.example.internal/token"}), exampleScope,
			"clusterServiceTokenUrl must be an https URL"},
	}
}

// delegatedTo is a subnet's delegations as Azure answers them.
func delegatedTo(service string) []any {
	return []any{map[string]any{"name": "delegation", "properties": map[string]any{"serviceName": service}}}
}

// checkRefusals deploys the template with each refusal, from the example
// parameters, and sees it fail with the refusal's message.
func checkRefusals(tmpl, parametersFile map[string]any) error {
	example, err := armeval.ParameterValues(parametersFile)
	if err != nil {
		return err
	}
	for _, r := range refusals() {
		_, err := armeval.Resolve(tmpl, withValues(example, r.values), r.scope)
		if err == nil || !strings.Contains(err.Error(), r.want) {
			return fmt.Errorf("the template accepts %s (want the deployment to fail with %q, got %v)", r.name, r.want, err)
		}
		if !strings.Contains(err.Error(), "the deployment fails: ") {
			return fmt.Errorf("%s: refused by these checks' evaluator, not by the template's fail(): %v", r.name, err)
		}
	}
	return nil
}

// TestTemplateRefusesUnworkableParameters sees the template accept what is
// left once a refusal's cause is taken away; that it refuses each of
// refusals() is the "refusals" check, run by TestTemplatePassesEveryCheck.
func TestTemplateRefusesUnworkableParameters(t *testing.T) {
	f := load(t)
	values := withValues(f.values, map[string]any{"subnetId": exampleVnet + "/subnets/ops-status"})
	_, err := armeval.Resolve(f.template, values, exampleScope.WithExisting(exampleVnet+"/subnets/ops-status", map[string]any{"properties": map[string]any{"addressPrefix": "10.128.64.0/27", "delegations": delegatedTo("Microsoft.App/environments")}}))
	require.NoError(t, err, "a /27 subnet named with - instead")
	_, err = armeval.Resolve(f.template, f.values, exampleScope.WithExisting(exampleVnet+"/subnets/opstatus", map[string]any{"properties": map[string]any{"addressPrefixes": []any{"10.128.64.0/27", "10.128.66.0/28"}, "delegations": delegatedTo("Microsoft.App/environments"), "privateEndpoints": []any{}}}))
	require.NoError(t, err, "a /27 subnet given by addressPrefixes")
	values["subnetId"] = f.values["subnetId"]
	values["zoneRedundant"] = true
	values["alwaysReadyPoll"] = 2
	values["alwaysReadyPickup"] = 2
	_, err = armeval.Resolve(f.template, values, exampleScope)
	require.NoError(t, err, "zone redundancy with two always-ready instances a group")
	values["pickupEnabled"] = false
	values["alwaysReadyPickup"] = 0
	_, err = armeval.Resolve(f.template, values, exampleScope)
	require.NoError(t, err, "zone redundancy without pickup needs no always-ready pickup instance")
}

// TestSwitchesLeaveRolesAndLeasesToTheResourceProvider deploys every
// choice of what is left to the resource provider's IaC, of the Leases
// throughput, of zone redundancy and of the app's inbound side, and sees
// the template make exactly what they ask and pass every check.
func TestSwitchesLeaveRolesAndLeasesToTheResourceProvider(t *testing.T) {
	f := load(t)
	n := 0
	for _, cosmosRole := range []bool{true, false} {
		for _, keyVaultRole := range []bool{true, false} {
			for _, leases := range []bool{true, false} {
				for _, throughput := range []int64{0, 4000} {
					for _, zones := range []bool{false, true} {
						for _, public := range []bool{false, true} {
							values := withValues(f.values, map[string]any{
								"assignCosmosRole":      cosmosRole,
								"assignKeyVaultRole":    keyVaultRole,
								"createLeasesContainer": leases,
								"leasesMaxThroughput":   throughput,
								"zoneRedundant":         zones,
							})
							if zones {
								values["alwaysReadyPoll"] = 2
								values["alwaysReadyPickup"] = 2
							}
							if public {
								values["sitePublicNetworkAccess"] = "Enabled"
								values["sitePrivateEndpoint"] = false
								values["storagePublicNetworkAccess"] = "Enabled"
							}
							what := fmt.Sprintf("%v", values)
							d, err := armeval.Resolve(f.template, values, exampleScope)
							require.NoError(t, err, what)
							for _, c := range checks {
								if c.name != "refusals" {
									require.NoError(t, c.check(d, f), "%s: %s", c.name, what)
								}
							}
							count := func(typ string) int { return len(d.ByType(typ)) }
							one := map[bool]int{true: 1}
							// One a container: Operations, Resources, Locks, Billing, Leases.
							require.Equal(t, 5*one[cosmosRole], count("Microsoft.DocumentDB/databaseAccounts/sqlRoleAssignments"), what)
							require.Equal(t, one[leases], count("Microsoft.DocumentDB/databaseAccounts/sqlDatabases/containers"), what)
							require.Equal(t, one[cosmosRole || leases]+one[keyVaultRole], count("Microsoft.Resources/deployments"), what)
							// The storage account's three, Application Insights' and the data collection rule's.
							require.Equal(t, 5+one[keyVaultRole], count("Microsoft.Authorization/roleAssignments"), what)
							require.Equal(t, 4*one[!public], count("Microsoft.Network/privateEndpoints"), what)
							out, err := d.Output("identityPrincipalId")
							require.NoError(t, err)
							require.Equal(t, "principalId(/subscriptions/11111111-2222-3333-4444-555555555555/resourceGroups/opstatus-int-eastus/providers/Microsoft.ManagedIdentity/userAssignedIdentities/opstatus-int-eastus-id)", out)
							n++
						}
					}
				}
			}
		}
	}
	require.Equal(t, 64, n)
}

// TestLockdownChecksFailOnBrokenCopies edits copies of the template the way a
// mistake would and sees the check of this file that guards against it
// fail.
func TestLockdownChecksFailOnBrokenCopies(t *testing.T) {
	runBrokenCopies(t, []brokenCopy{
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
				editStorageAccess(t, tmpl, "empty(parameters('storageQueueDnsZoneId'))", "false()")
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
				dropDependency(t, findResource(t, tmpl, "Microsoft.Web/sites", ""), "-cosmos'")
			},
			want: "the site does not depend on nested deployment",
		},
	})
}
