package deploy

import (
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/opstatus/opstatus/deploy/internal/armeval"
)

// The resource provider's Cosmos DB account is private outside dev
// environments and Cluster Service is internal: a Flex Consumption app
// reaches them only through VNet integration with a subnet delegated to
// Microsoft.App/environments, every outbound connection going through it.
// Its own storage and its inbound side are private by default too.

// endpointPaths are the settings that name where the app connects, each
// with how the integrated subnet reaches it, as docs/deploy.md tells the
// deployer to provide.
var endpointPaths = map[string]string{
	"AzureWebJobsStorage__accountName":      "storage",
	"AzureWebJobsStorage__tableServiceUri":  "storage",
	"COSMOS_ENDPOINT":                       "cosmos",
	"COSMOS__accountEndpoint":               "cosmos",
	"CLUSTER_SERVICE_URL":                   "private DNS",
	"OTEL_EXPORTER_OTLP_ENDPOINT":           "private DNS",
	"CLUSTER_SERVICE_TOKEN_URL":             "outbound",
	"APPLICATIONINSIGHTS_CONNECTION_STRING": "outbound",
	"METRICS_REMOTE_WRITE_URL":              "outbound",
}

// namesEndpoint tells whether a setting names somewhere the app connects.
func namesEndpoint(name, value string) bool {
	for _, suffix := range []string{"__accountName", "__accountEndpoint", "ServiceUri", "_URL", "_ENDPOINT", "CONNECTION_STRING"} {
		if strings.HasSuffix(name, suffix) {
			return true
		}
	}
	return strings.HasPrefix(value, "https://") || strings.HasPrefix(value, "http://")
}

// privatelinkZones are the private DNS zones in which Azure's public cloud
// resolves a private endpoint of each group the template connects
// (learn.microsoft.com/azure/private-link/private-endpoint-dns).
var privatelinkZones = map[string]string{
	"blob":  "privatelink.blob.core.windows.net",
	"queue": "privatelink.queue.core.windows.net",
	"table": "privatelink.table.core.windows.net",
	"sites": "privatelink.azurewebsites.net",
}

// hostStorageGroups are the storage services the Functions host uses on
// Flex Consumption: blobs (the package, host keys, timer and listener
// leases), queues (the trigger and output binding) and tables (the host's
// diagnostic events). It uses no file share.
var hostStorageGroups = []string{"blob", "queue", "table"}

// checkNetwork checks the app's network path: with subnetId the site is
// integrated with that subnet, whose name Flex accepts, and sets no
// vnetRouteAllEnabled (Flex routes all traffic through the subnet and
// refuses deprecated site properties); without, every service it needs
// takes public traffic. The host's storage takes public traffic, or only
// its private endpoints for blob, queue and table, each registered in its
// privatelink zone and made before the site, so the host never starts
// without a path to its storage. Private endpoints stay out of the
// integration subnet. The site's public access is its parameter's, and
// its inbound endpoint, when made, is group sites in
// privatelink.azurewebsites.net. Every setting that names an endpoint is
// on a path the deploy guide describes, the storage ones on the host's
// account.
func checkNetwork(d *armeval.Deployment) error {
	site, err := d.One("Microsoft.Web/sites")
	if err != nil {
		return err
	}
	subnet, _ := d.Params["subnetId"].(string)
	got, _ := armeval.Path(site.Body, "properties", "virtualNetworkSubnetId").(string)
	if v, set := site.Body["properties"].(map[string]any)["vnetRouteAllEnabled"]; set {
		return fmt.Errorf("vnetRouteAllEnabled is %v: Flex Consumption routes all traffic through the subnet without it and refuses deprecated site properties", v)
	}
	storages := d.ByType("Microsoft.Storage/storageAccounts")
	if subnet == "" {
		if got != "" {
			return fmt.Errorf("the site is integrated with %s, but subnetId is empty", got)
		}
		for _, r := range storages {
			if access := armeval.Path(r.Body, "properties", "publicNetworkAccess"); access != "Enabled" {
				return fmt.Errorf("storage account %s: publicNetworkAccess %v without VNet integration: the host could not reach its storage", r.Name, access)
			}
		}
	} else {
		if !strings.EqualFold(got, subnet) {
			return fmt.Errorf("the site's virtualNetworkSubnetId is %q, not subnetId %s: it would reach no private endpoint", got, subnet)
		}
		typ, name := armeval.ResourceType(subnet)
		if typ != "Microsoft.Network/virtualNetworks/subnets" {
			return fmt.Errorf("subnetId %s is not a subnet's resource ID", subnet)
		}
		if strings.Contains(name, "_") {
			return fmt.Errorf("subnet %s: Flex Consumption refuses a subnet name with _", name)
		}
	}

	peSubnet, _ := d.Params["privateEndpointSubnetId"].(string)
	endpoints := d.ByType("Microsoft.Network/privateEndpoints")
	if len(endpoints) > 0 {
		if typ, _ := armeval.ResourceType(peSubnet); typ != "Microsoft.Network/virtualNetworks/subnets" {
			return fmt.Errorf("privateEndpointSubnetId %q is not a subnet's resource ID", peSubnet)
		}
		if strings.EqualFold(peSubnet, subnet) {
			return fmt.Errorf("privateEndpointSubnetId is subnetId: Flex Consumption keeps the integration subnet free of private endpoints")
		}
	}
	for _, pe := range endpoints {
		if in, _ := armeval.Path(pe.Body, "properties", "subnet", "id").(string); !strings.EqualFold(in, peSubnet) {
			return fmt.Errorf("private endpoint %s is in %q, not privateEndpointSubnetId %s", pe.Name, in, peSubnet)
		}
	}

	for _, r := range storages {
		access := armeval.Path(r.Body, "properties", "publicNetworkAccess")
		want := map[any]string{"Enabled": "Allow", "Disabled": "Deny"}[access]
		if want == "" {
			return fmt.Errorf("storage account %s: publicNetworkAccess %v, want Enabled or Disabled", r.Name, access)
		}
		if action := armeval.Path(r.Body, "properties", "networkAcls", "defaultAction"); action != want {
			return fmt.Errorf("storage account %s: publicNetworkAccess %v with networkAcls.defaultAction %v, want %s", r.Name, access, action, want)
		}
		if access != "Disabled" {
			continue
		}
		if bypass := armeval.Path(r.Body, "properties", "networkAcls", "bypass"); bypass != "None" {
			return fmt.Errorf("storage account %s: networkAcls.bypass %v, want None: nothing but the private endpoints reaches it", r.Name, bypass)
		}
		for _, group := range hostStorageGroups {
			pe, zones, err := privateEndpoint(d, r.ID, group)
			if err != nil {
				return fmt.Errorf("storage account %s is private: %w", r.Name, err)
			}
			for _, id := range []string{pe.ID, zones.ID} {
				if !dependsOn(site, id) {
					return fmt.Errorf("the site does not depend on %s: the host could start before its storage's %s endpoint resolves", id, group)
				}
			}
		}
	}

	if access, want := armeval.Path(site.Body, "properties", "publicNetworkAccess"), d.Params["sitePublicNetworkAccess"]; access != want || (access != "Enabled" && access != "Disabled") {
		return fmt.Errorf("the site's publicNetworkAccess is %v, not sitePublicNetworkAccess %v", access, want)
	}
	if d.Params["sitePrivateEndpoint"] == true {
		if _, _, err := privateEndpoint(d, site.ID, "sites"); err != nil {
			return fmt.Errorf("sitePrivateEndpoint: %w", err)
		}
	}

	settings, err := appSettings(d)
	if err != nil {
		return err
	}
	storage, err := hostStorage(d, settings, "AzureWebJobsStorage")
	if err != nil {
		return err
	}
	_, account := armeval.ResourceType(storage)
	for name, value := range settings {
		if value == "" || !namesEndpoint(name, value) {
			continue
		}
		route, ok := endpointPaths[name]
		if !ok {
			return fmt.Errorf("setting %s names an endpoint on no network path docs/deploy.md describes", name)
		}
		if route != "storage" || strings.HasSuffix(name, "__accountName") {
			continue
		}
		u, err := url.Parse(value)
		if err != nil || u.Scheme != "https" || !strings.HasPrefix(u.Host, account+".") || !strings.HasSuffix(u.Host, ".core.windows.net") {
			return fmt.Errorf("setting %s is %q, not an endpoint of the host's storage account %s", name, value, account)
		}
	}
	return nil
}

// privateEndpoint returns the private endpoint of the deployment that
// connects to target's group, and its DNS zone group, which must register
// it in the group's privatelink zone.
func privateEndpoint(d *armeval.Deployment, target, group string) (pe, zones armeval.Resource, err error) {
	var found []armeval.Resource
	for _, r := range d.ByType("Microsoft.Network/privateEndpoints") {
		conns, _ := armeval.Path(r.Body, "properties", "privateLinkServiceConnections").([]any)
		for _, c := range conns {
			id, _ := armeval.Path(c, "properties", "privateLinkServiceId").(string)
			groups, _ := armeval.Path(c, "properties", "groupIds").([]any)
			if strings.EqualFold(id, target) && len(groups) == 1 && groups[0] == group {
				found = append(found, r)
			}
		}
	}
	if len(found) != 1 {
		return pe, zones, fmt.Errorf("%d private endpoints for %s of %s, want 1", len(found), group, target)
	}
	pe = found[0]
	var groups []armeval.Resource
	for _, r := range d.ByType("Microsoft.Network/privateEndpoints/privateDnsZoneGroups") {
		if strings.HasPrefix(strings.ToLower(r.ID), strings.ToLower(pe.ID+"/privateDnsZoneGroups/")) {
			groups = append(groups, r)
		}
	}
	if len(groups) != 1 {
		return pe, zones, fmt.Errorf("private endpoint %s has %d DNS zone groups, want 1: its name would not resolve to it", pe.Name, len(groups))
	}
	zones = groups[0]
	configs, _ := armeval.Path(zones.Body, "properties", "privateDnsZoneConfigs").([]any)
	if len(configs) != 1 {
		return pe, zones, fmt.Errorf("zone group %s has %d zones, want 1", zones.Name, len(configs))
	}
	zone, _ := armeval.Path(configs[0], "properties", "privateDnsZoneId").(string)
	if typ, name := armeval.ResourceType(zone); typ != "Microsoft.Network/privateDnsZones" || name != privatelinkZones[group] {
		return pe, zones, fmt.Errorf("zone group %s registers %s in %q, not a %s private DNS zone", zones.Name, group, zone, privatelinkZones[group])
	}
	return pe, zones, nil
}

// dependsOn tells whether a resource's dependsOn names id.
func dependsOn(r armeval.Resource, id string) bool {
	list, _ := r.Body["dependsOn"].([]any)
	for _, x := range list {
		if s, _ := x.(string); strings.EqualFold(s, id) {
			return true
		}
	}
	return false
}

// TestNetworkChecksFailOnBrokenCopies edits copies of the template the way a
// mistake would and sees checkNetwork fail.
func TestNetworkChecksFailOnBrokenCopies(t *testing.T) {
	runBrokenCopies(t, []brokenCopy{
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
				dropDependency(t, findResource(t, tmpl, "Microsoft.Web/sites", ""), "privateDnsZoneGroups', format('{0}-blob-pe'")
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
	})
}
