package deploy

import (
	"fmt"
	"strings"

	"github.com/opstatus/opstatus/deploy/internal/armeval"
)

// The checks read the template twice: raw, as Azure receives it, for the
// schemas and the text searches; and resolved by armeval, every expression
// evaluated the way ARM would for one deployment, so that each value can be
// followed back to the resource it names.

const (
	templateFile   = "azuredeploy.json"
	parametersFile = "example.parameters.json"
)

// exampleScope stands for the deployment the example parameters describe.
var exampleScope = armeval.Scope{
	Subscription:  "11111111-2222-3333-4444-555555555555",
	ResourceGroup: "opstatus-int-eastus",
	Location:      "eastus",
	Existing: map[string]map[string]any{
		strings.ToLower(exampleVnet):      {"location": "eastus", "properties": map[string]any{}},
		strings.ToLower(exampleWorkspace): {"location": "eastus", "properties": map[string]any{}},
		strings.ToLower(exampleVnet + "/subnets/opstatus"): {"properties": map[string]any{
			"addressPrefix": "10.128.64.0/26",
			"delegations":   delegatedTo("Microsoft.App/environments"),
		}},
	},
}

// exampleWorkspace is the region's Azure Monitor workspace a deployment
// may send its metrics to (monitorWorkspaceId).
const exampleWorkspace = "/subscriptions/11111111-2222-3333-4444-555555555555/resourceGroups/arohcp-int-eastus-svc/providers/Microsoft.Monitor/accounts/services-eastus"

// exampleVnet is the resource provider's virtual network the example
// parameters name.
const exampleVnet = "/subscriptions/11111111-2222-3333-4444-555555555555/resourceGroups/arohcp-int-eastus-rp/providers/Microsoft.Network/virtualNetworks/arohcp-int-eastus"

// appSettings returns the Function App's settings by name.
func appSettings(d *armeval.Deployment) (map[string]string, error) {
	site, err := d.One("Microsoft.Web/sites")
	if err != nil {
		return nil, err
	}
	list, ok := armeval.Path(site.Body, "properties", "siteConfig", "appSettings").([]any)
	if !ok {
		return nil, fmt.Errorf("Microsoft.Web/sites: properties.siteConfig.appSettings is not a list")
	}
	settings := map[string]string{}
	for _, item := range list {
		m, _ := item.(map[string]any)
		name, ok1 := m["name"].(string)
		value, ok2 := m["value"].(string)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("app setting %v: name and value must be strings", item)
		}
		if _, dup := settings[name]; dup {
			return nil, fmt.Errorf("app setting %s is set twice", name)
		}
		settings[name] = value
	}
	return settings, nil
}
