package deploy

import (
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/opstatus/opstatus/deploy/internal/armeval"
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

// check is one of the checks a schema cannot make, by the name broken
// copies give.
type check struct {
	name  string
	check func(d *armeval.Deployment, f fixture) error
}

// checks are the checks a schema cannot make, run on a resolved template.
var checks = []check{
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
	return checkAll(d, f)
}

// checkAll runs every check on a resolved template, returning the first
// failure.
func checkAll(d *armeval.Deployment, f fixture) error {
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
			d, err := armeval.Resolve(f.template, withValues(required, extra), exampleScope)
			require.NoError(t, err)
			require.NoError(t, checkBudget(d))
			b, err := clusterServiceBound(d)
			require.NoError(t, err)
			require.Equal(t, bound{perProcess: 64, budget: 256}, b, "256 a core of the default 512 MB instance")
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
			for _, perProcess := range []int64{0, 1, 64, 4096} {
				for _, budget := range []int64{4, 256, 1000} {
					for _, memory := range []int64{512, 2048, 4096} {
						values := withValues(f.values, map[string]any{
							"maximumInstanceCount":      instances,
							"pickupEnabled":             pickup,
							"clusterServiceMaxInFlight": perProcess,
							"clusterServiceBudget":      budget,
							"instanceMemoryMB":          memory,
						})
						what := fmt.Sprintf("%v", values)
						d, err := armeval.Resolve(f.template, values, exampleScope)
						require.NoError(t, err, what)
						require.NoError(t, checkBudget(d), what)
						b, err := clusterServiceBound(d)
						require.NoError(t, err, what)
						want := perProcess
						if want == 0 {
							want = memory / 8 // 256 a core, a core every 2,048 MB
						}
						require.Equal(t, bound{perProcess: want, budget: budget}, b, what)
						n++
					}
				}
			}
		}
	}
	require.Equal(t, 4*2*4*3*3, n)
}

func TestParametersFileDeclaresOnlyTemplateParameters(t *testing.T) {
	f := load(t)
	f.values["cosmosContainer"] = "Operations"
	_, err := armeval.Resolve(f.template, f.values, exampleScope)
	require.ErrorContains(t, err, "cosmosContainer is given but the template declares none")
}

// brokenCopy is a copy of the template edited the way a mistake would
// edit it, and the check that guards against that mistake. Each check file
// holds the broken copies of its own checks.
type brokenCopy struct {
	name  string
	check string
	// values are parameter values the case deploys the copy with, over
	// the example's; a nil value leaves the parameter to its default.
	// scope, when set, replaces the example's.
	values map[string]any
	scope  armeval.Scope
	edit   func(t *testing.T, tmpl map[string]any)
	want   string
}

// budgetDefaults leave the budget's parameters, which the example sets, to
// the defaults the budget's broken copies are written against.
var budgetDefaults = map[string]any{"maximumInstanceCount": nil, "clusterServiceMaxInFlight": nil, "clusterServiceBudget": nil}

// runBrokenCopies sees the check of each broken copy fail with the error
// it wants, and every check together fail on it.
func runBrokenCopies(t *testing.T, tests []brokenCopy) {
	t.Helper()
	f := load(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			edited := f
			edited.template = armeval.DeepCopy(f.template)
			edited.values = maps.Clone(f.values)
			for k, v := range tc.values {
				if v == nil {
					delete(edited.values, k)
				} else {
					edited.values[k] = v
				}
			}
			tc.edit(t, edited.template)
			scope := exampleScope
			if tc.scope.Subscription != "" {
				scope = tc.scope
			}
			d, err := armeval.Resolve(edited.template, edited.values, scope)
			require.NoError(t, err)
			i := slices.IndexFunc(checks, func(c check) bool { return c.name == tc.check })
			require.NotEqual(t, -1, i, tc.check)
			require.ErrorContains(t, checks[i].check(d, edited), tc.want)
			require.Error(t, checkAll(d, edited))
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

// replaceIn replaces part of the expression m[key], which must hold old.
func replaceIn(t *testing.T, m map[string]any, key, old, replacement string) {
	t.Helper()
	expr := m[key].(string)
	require.Contains(t, expr, old)
	m[key] = strings.Replace(expr, old, replacement, 1)
}

// editSubnetCheck replaces part of the site's checks of its subnet.
func editSubnetCheck(t *testing.T, tmpl map[string]any, old, replacement string) {
	t.Helper()
	replaceIn(t, props(findResource(t, tmpl, "Microsoft.Web/sites", "")), "virtualNetworkSubnetId", old, replacement)
}

// editStorageAccess replaces part of the storage account's checks of its
// network parameters.
func editStorageAccess(t *testing.T, tmpl map[string]any, old, replacement string) {
	t.Helper()
	replaceIn(t, props(findResource(t, tmpl, "Microsoft.Storage/storageAccounts", "")), "publicNetworkAccess", old, replacement)
}

// editSiteEndpointSubnet replaces part of the app's private endpoint's
// checks of its subnet and zone.
func editSiteEndpointSubnet(t *testing.T, tmpl map[string]any, old, replacement string) {
	t.Helper()
	subnet := props(findResource(t, tmpl, "Microsoft.Network/privateEndpoints", "sitePrivateEndpointName"))["subnet"].(map[string]any)
	replaceIn(t, subnet, "id", old, replacement)
}

// functionAppConfig returns the object at keys under the site's
// functionAppConfig.
func functionAppConfig(t *testing.T, tmpl map[string]any, keys ...string) map[string]any {
	t.Helper()
	m, ok := armeval.Path(props(findResource(t, tmpl, "Microsoft.Web/sites", "")), append([]string{"functionAppConfig"}, keys...)...).(map[string]any)
	require.True(t, ok, "functionAppConfig %v", keys)
	return m
}

// dropDependency removes the one entry of r's dependsOn that holds hint.
func dropDependency(t *testing.T, r map[string]any, hint string) {
	t.Helper()
	deps := r["dependsOn"].([]any)
	kept := slices.DeleteFunc(slices.Clone(deps), func(d any) bool { return strings.Contains(d.(string), hint) })
	require.Len(t, kept, len(deps)-1, "dependsOn %q", hint)
	r["dependsOn"] = kept
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
