package deploy

import (
	"fmt"
	"net/url"
	"strings"
)

// The resource provider's Cosmos DB account is private outside dev
// environments and Cluster Service is internal: a Flex Consumption app
// reaches them only through VNet integration with a subnet delegated to
// Microsoft.App/environments, every outbound connection going through it.

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

// checkNetwork checks the app's network path: with subnetId the site is
// integrated with that subnet and routes all outbound traffic through it;
// without, every service it needs takes public traffic. The host's storage
// takes public traffic or only private endpoints, as its parameter says;
// every setting that names an endpoint is on a path the deploy guide
// describes, the storage ones on the host's account.
func checkNetwork(d *deployment) error {
	site, err := d.one("Microsoft.Web/sites")
	if err != nil {
		return err
	}
	subnet, _ := d.params["subnetId"].(string)
	got, _ := path(site.Body, "properties", "virtualNetworkSubnetId").(string)
	routeAll := path(site.Body, "properties", "vnetRouteAllEnabled")
	storages := d.byType("Microsoft.Storage/storageAccounts")
	if subnet == "" {
		if got != "" {
			return fmt.Errorf("the site is integrated with %s, but subnetId is empty", got)
		}
		for _, r := range storages {
			if access := path(r.Body, "properties", "publicNetworkAccess"); access != "Enabled" {
				return fmt.Errorf("storage account %s: publicNetworkAccess %v without VNet integration: the host could not reach its storage", r.Name, access)
			}
		}
	} else {
		if !strings.EqualFold(got, subnet) {
			return fmt.Errorf("the site's virtualNetworkSubnetId is %q, not subnetId %s: it would reach no private endpoint", got, subnet)
		}
		if typ, _ := resourceType(subnet); typ != "Microsoft.Network/virtualNetworks/subnets" {
			return fmt.Errorf("subnetId %s is not a subnet's resource ID", subnet)
		}
		if routeAll != true {
			return fmt.Errorf("vnetRouteAllEnabled is %v: outbound traffic would not all go through the subnet", routeAll)
		}
	}
	if subnet == "" && routeAll != false {
		return fmt.Errorf("vnetRouteAllEnabled is %v without a subnet", routeAll)
	}
	for _, r := range storages {
		access := path(r.Body, "properties", "publicNetworkAccess")
		want := map[any]string{"Enabled": "Allow", "Disabled": "Deny"}[access]
		if want == "" {
			return fmt.Errorf("storage account %s: publicNetworkAccess %v, want Enabled or Disabled", r.Name, access)
		}
		if action := path(r.Body, "properties", "networkAcls", "defaultAction"); action != want {
			return fmt.Errorf("storage account %s: publicNetworkAccess %v with networkAcls.defaultAction %v, want %s", r.Name, access, action, want)
		}
	}

	settings, err := d.appSettings()
	if err != nil {
		return err
	}
	storage, err := hostStorage(d, settings, "AzureWebJobsStorage")
	if err != nil {
		return err
	}
	_, account := resourceType(storage)
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
