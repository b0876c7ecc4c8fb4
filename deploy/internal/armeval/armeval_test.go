package armeval

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const (
	sub   = "11111111-2222-3333-4444-555555555555"
	rg    = "/subscriptions/" + sub + "/resourceGroups/rg"
	vnet  = "/subscriptions/" + sub + "/resourceGroups/net/providers/Microsoft.Network/virtualNetworks/vnet"
	ident = rg + "/providers/Microsoft.ManagedIdentity/userAssignedIdentities/id1"
)

var scope = Scope{
	Subscription:  sub,
	ResourceGroup: "rg",
	Location:      "eastus",
	Existing: map[string]map[string]any{
		// Lowercase, as Resolve looks them up.
		"/subscriptions/" + sub + "/resourcegroups/net/providers/microsoft.network/virtualnetworks/vnet": {
			"location":   "westus",
			"properties": map[string]any{"addressSpace": "10.0.0.0/16"},
		},
	},
}

// eval resolves a template whose variable v is the expression given.
func eval(t *testing.T, expr string) (any, error) {
	t.Helper()
	tmpl := map[string]any{
		"parameters": map[string]any{
			"name":  map[string]any{"type": "string", "defaultValue": "opstatus"},
			"count": map[string]any{"type": "int", "defaultValue": 2},
		},
		"variables": map[string]any{"v": expr, "other": "[parameters('name')]"},
		"resources": []any{},
	}
	d, err := Resolve(tmpl, nil, scope)
	if err != nil {
		return nil, err
	}
	return d.Variables["v"], nil
}

func TestFunctions(t *testing.T) {
	tests := []struct {
		expr string
		want any
	}{
		{"plain text", "plain text"},
		{"[[not an expression]", "[not an expression]"},
		{"['it''s']", "it's"},
		{"[parameters('name')]", "opstatus"},
		{"[variables('other')]", "opstatus"},
		{"[parameters('count')]", int64(2)},
		{"[length(createArray(1, 2, 3))]", int64(3)},
		{"[length('abcd')]", int64(4)},
		{"[startsWith('ABCdef', 'abc')]", true},
		{"[startsWith('abc', 'd')]", false},
		{"[resourceGroup().name]", "rg"},
		{"[resourceGroup().location]", "eastus"},
		{"[resourceGroup().id]", rg},
		{"[subscription().subscriptionId]", sub},
		{"[subscription().id]", "/subscriptions/" + sub},
		{"[resourceId('Microsoft.Storage/storageAccounts/queueServices', 'a', 'default')]", rg + "/providers/Microsoft.Storage/storageAccounts/a/queueServices/default"},
		{"[resourceId('other', 'Microsoft.Web/sites', 'app')]", "/subscriptions/" + sub + "/resourceGroups/other/providers/Microsoft.Web/sites/app"},
		{"[subscriptionResourceId('Microsoft.Authorization/roleDefinitions', 'g')]", "/subscriptions/" + sub + "/providers/Microsoft.Authorization/roleDefinitions/g"},
		{"[extensionResourceId('/x', 'Microsoft.Authorization/roleAssignments', 'n')]", "/x/providers/Microsoft.Authorization/roleAssignments/n"},
		{"[format('{0}-{1}-{2}-{0}', 'a', 2, true())]", "a-2-true-a"},
		{"[string(12)]", "12"},
		{"[string(false())]", "false"},
		{"[min(3, 1, 2)]", int64(1)},
		{"[div(7, 2)]", int64(3)},
		{"[mul(7, 2)]", int64(14)},
		{"[add(7, -2)]", int64(5)},
		{"[greater(2, 2)]", false},
		{"[greaterOrEquals(2, 2)]", true},
		{"[empty('')]", true},
		{"[empty(createArray(1))]", false},
		{"[empty(null())]", true},
		{"[equals(1, 1)]", true},
		{"[equals('a', 'b')]", false},
		{"[and(true(), true(), false())]", false},
		{"[or(false(), true())]", true},
		{"[not(true())]", false},
		{"[toLower('AbC')]", "abc"},
		{"[split('a/b', '/')]", []any{"a", "b"}},
		{"[lastIndexOf('a/b/c', '/')]", int64(3)},
		{"[substring('abcdef', 1, 3)]", "bcd"},
		{"[contains('abc', 'b')]", true},
		{"[contains(createObject('k', 1), 'j')]", false},
		{"[first(createArray(1, 2))]", int64(1)},
		{"[last(createArray(1, 2))]", int64(2)},
		{"[parseCidr('10.128.64.5/26')]", map[string]any{"network": "10.128.64.0", "cidr": int64(26)}},
		{"[createObject('a', 1)]", map[string]any{"a": int64(1)}},
		{"[concat(createArray(1), createArray(2, 3))]", []any{int64(1), int64(2), int64(3)}},
		{"[null()]", nil},
		{"[createObject('a', createObject('b', 1)).a.b]", int64(1)},
		{"[createObject('a', 1)['a']]", int64(1)},
		{"[createArray(1, 2)[1]]", int64(2)},
		// Only the branch the condition chooses is evaluated, as in ARM.
		{"[if(true(), 'a', fail('not evaluated'))]", "a"},
		{"[if(false(), parameters('missing'), 'b')]", "b"},
		{"[if(equals(parameters('count'), 2), if(false(), 1, 2), 3)]", int64(2)},
		// The state of a resource outside the template, as given in Scope.
		{"[reference('" + vnet + "').addressSpace]", "10.0.0.0/16"},
		{"[reference('" + vnet + "', '2024-05-01', 'Full').location]", "westus"},
		// The runtime properties modelled: an identity's stand for
		// themselves, endpoints as the public cloud builds them.
		{"[reference(resourceId('Microsoft.ManagedIdentity/userAssignedIdentities', 'id1'), '2023-01-31').clientId]", "clientId(" + ident + ")"},
		{"[reference(resourceId('Microsoft.Storage/storageAccounts', 'acct'), '2023-05-01').primaryEndpoints.blob]", "https://acct.blob.core.windows.net/"},
	}
	for _, tc := range tests {
		t.Run(tc.expr, func(t *testing.T) {
			got, err := eval(t, tc.expr)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestFunctionErrors(t *testing.T) {
	tests := []struct{ expr, want string }{
		{"[toUpper('a')]", "function toUpper is not one these checks evaluate"},
		{"['abc]", "unterminated string"},
		{"['a' $]", `unexpected '$'`},
		{"['a' 'b']", `unexpected "b"`},
		{"[createArray(1, 2]", `expected ')'`},
		{"[createObject('a', 1).]", "expected a property name after '.'"},
		{"[parameters('missing')]", "parameters('missing'): no such parameter"},
		{"[variables('missing')]", "variables('missing'): no such variable"},
		{"[variables('v')]", "variable v refers to itself"},
		{"[resourceId('s', 'rg', 'Microsoft.Web/sites', 'app')]", "a subscription argument is not something these checks follow"},
		{"[resourceId('Microsoft.Web/sites')]", "resourceId: needs a type and names"},
		{"[subscriptionResourceId('g')]", "subscriptionResourceId takes a type and names"},
		{"[string(createArray())]", "is not a string, int or bool"},
		{"[div(1, 0)]", "div by zero"},
		{"[add(1, 'a')]", "add takes two ints"},
		{"[and(true())]", "and takes two or more bools"},
		{"[or(true(), 'yes')]", "or: yes is not a bool"},
		{"[fail('no')]", "the deployment fails: no"},
		{"[substring('abc', 2, 2)]", "out of range"},
		{"[first(createArray())]", "is not an array with items"},
		{"[parseCidr('10.0.0.0')]", "parseCidr:"},
		{"[createObject('a')]", "createObject takes pairs of names and values"},
		{"[concat('a', 'b')]", "these checks concatenate arrays only"},
		{"[length(1)]", "length: 1 is not an array or a string"},
		{"[empty(1)]", "empty: 1 is not a string or an array"},
		{"[if('x', 1, 2)]", "if: the condition x is not a bool"},
		{"[if(true(), 1)]", "if takes a condition and two values"},
		{"[createArray(1)[5]]", "index 5 out of range"},
		{"[createObject('a', 1).b]", "no property b"},
		{"[copyIndex()]", "copyIndex outside a copy loop"},
		{"[reference('vnet')]", "give the resource's full ID"},
		{"[reference(resourceId('Microsoft.Web/sites', 'app'), '2024-04-01', 'Full')]", "of a resource these checks do not model"},
		{"[reference(resourceId('Microsoft.ManagedIdentity/userAssignedIdentities', 'id1'), '2023-01-31')]", "is used whole; only its modelled properties can be"},
		{"[reference(resourceId('Microsoft.ManagedIdentity/userAssignedIdentities', 'id1'), '2023-01-31').tenantId]", "tenantId is not a property these checks model"},
	}
	for _, tc := range tests {
		t.Run(tc.expr, func(t *testing.T) {
			_, err := eval(t, tc.expr)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestGUIDIsStableAndDistinct(t *testing.T) {
	a, err := eval(t, "[guid('a', 'b')]")
	require.NoError(t, err)
	again, err := eval(t, "[guid('a', 'b')]")
	require.NoError(t, err)
	other, err := eval(t, "[guid('ab')]")
	require.NoError(t, err)
	require.Regexp(t, regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`), a)
	require.Equal(t, a, again)
	require.NotEqual(t, a, other)
}

func TestParameters(t *testing.T) {
	tests := []struct {
		name  string
		def   map[string]any
		given map[string]any
		want  any
		err   string
	}{
		{name: "the default", def: map[string]any{"type": "string", "defaultValue": "d"}, want: "d"},
		{name: "given over the default", def: map[string]any{"type": "string", "defaultValue": "d"}, given: map[string]any{"p": "g"}, want: "g"},
		{name: "a default from another parameter", def: map[string]any{"type": "string", "defaultValue": "[parameters('q')]"}, want: "q's"},
		{name: "no value", def: map[string]any{"type": "string"}, err: "parameter p: no value given and no default"},
		{name: "not a string", def: map[string]any{"type": "string"}, given: map[string]any{"p": 1}, err: "parameter p: 1 is not a string"},
		{name: "not an int", def: map[string]any{"type": "int"}, given: map[string]any{"p": "1"}, err: "parameter p: 1 is not an int"},
		{name: "not a bool", def: map[string]any{"type": "bool"}, given: map[string]any{"p": "true"}, err: "parameter p: true is not a bool"},
		{name: "a type the template may not use", def: map[string]any{"type": "securestring"}, given: map[string]any{"p": "s"}, err: `type "securestring" is not one this template may use`},
		{name: "an allowed value", def: map[string]any{"type": "int", "allowedValues": []any{1, 2}}, given: map[string]any{"p": 2}, want: int64(2)},
		{name: "a value not allowed", def: map[string]any{"type": "string", "allowedValues": []any{"a"}}, given: map[string]any{"p": "b"}, err: "parameter p: b is not one of [a]"},
		{name: "under minValue", def: map[string]any{"type": "int", "minValue": 1}, given: map[string]any{"p": 0}, err: "0 is under its minValue 1"},
		{name: "over maxValue", def: map[string]any{"type": "int", "maxValue": 1}, given: map[string]any{"p": 2}, err: "2 is over its maxValue 1"},
		{name: "shorter than minLength", def: map[string]any{"type": "string", "minLength": 2}, given: map[string]any{"p": "a"}, err: `"a" is shorter than 2`},
		{name: "longer than maxLength", def: map[string]any{"type": "string", "maxLength": 2}, given: map[string]any{"p": "abc"}, err: `"abc" is longer than 2`},
		{name: "a default out of bounds", def: map[string]any{"type": "int", "defaultValue": 5, "maxValue": 4}, err: "5 is over its maxValue 4"},
		{name: "a default that refers to itself", def: map[string]any{"type": "string", "defaultValue": "[parameters('p')]"}, err: "parameter p: its default refers to itself"},
		{name: "a value for no parameter", def: map[string]any{"type": "string", "defaultValue": "d"}, given: map[string]any{"nope": 1}, err: "parameter nope is given but the template declares none of that name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tmpl := map[string]any{
				"parameters": map[string]any{"p": tc.def, "q": map[string]any{"type": "string", "defaultValue": "q's"}},
				"resources":  []any{},
			}
			d, err := Resolve(DeepCopy(tmpl), tc.given, scope)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, d.Params["p"])
		})
	}
}

// site is a resource of the template, edited by the case.
func site(name string, edit func(r map[string]any)) map[string]any {
	r := map[string]any{"type": "Microsoft.Web/sites", "apiVersion": "2024-04-01", "name": name, "properties": map[string]any{}}
	if edit != nil {
		edit(r)
	}
	return r
}

func TestResources(t *testing.T) {
	type want struct {
		ids      []string // the resolved resources' IDs, in order
		declared []string // further IDs only declared
	}
	tests := []struct {
		name      string
		resources []any
		want      want
		err       string
	}{
		{
			name:      "a resource",
			resources: []any{site("[parameters('name')]", nil)},
			want:      want{ids: []string{rg + "/providers/Microsoft.Web/sites/app"}},
		},
		{
			name: "a resource in another resource group",
			resources: []any{site("app", func(r map[string]any) {
				r["resourceGroup"] = "other"
			})},
			want: want{ids: []string{"/subscriptions/" + sub + "/resourceGroups/other/providers/Microsoft.Web/sites/app"}},
		},
		{
			name: "a child, its type and name continuing its parent's",
			resources: []any{site("app", func(r map[string]any) {
				r["resources"] = []any{map[string]any{"type": "config", "apiVersion": "2024-04-01", "name": "web"}}
			})},
			want: want{ids: []string{rg + "/providers/Microsoft.Web/sites/app", rg + "/providers/Microsoft.Web/sites/app/config/web"}},
		},
		{
			name: "an extension resource on a scope in the resource group",
			resources: []any{map[string]any{
				"type": "Microsoft.Authorization/roleAssignments", "apiVersion": "2022-04-01", "name": "ra",
				"scope": "Microsoft.Storage/storageAccounts/acct",
			}},
			want: want{ids: []string{rg + "/providers/Microsoft.Storage/storageAccounts/acct/providers/Microsoft.Authorization/roleAssignments/ra"}},
		},
		{
			name:      "a condition that holds",
			resources: []any{site("app", func(r map[string]any) { r["condition"] = "[equals(parameters('name'), 'app')]" })},
			want:      want{ids: []string{rg + "/providers/Microsoft.Web/sites/app"}},
		},
		{
			name: "a condition that does not: declared, children too, not deployed",
			resources: []any{site("app", func(r map[string]any) {
				r["condition"] = "[false()]"
				r["properties"] = map[string]any{"x": "[fail('not evaluated')]"}
				r["resources"] = []any{map[string]any{"type": "config", "apiVersion": "2024-04-01", "name": "web"}}
			})},
			want: want{declared: []string{rg + "/providers/Microsoft.Web/sites/app", rg + "/providers/Microsoft.Web/sites/app/config/web"}},
		},
		{
			name: "a copy loop",
			resources: []any{site("[format('app{0}', copyIndex(1))]", func(r map[string]any) {
				r["copy"] = map[string]any{"name": "apps", "count": "[parameters('count')]"}
				r["properties"] = map[string]any{"index": "[copyIndex()]"}
			})},
			want: want{ids: []string{rg + "/providers/Microsoft.Web/sites/app1", rg + "/providers/Microsoft.Web/sites/app2"}},
		},
		{
			name: "a copy loop of none",
			resources: []any{site("[format('app{0}', copyIndex())]", func(r map[string]any) {
				r["copy"] = map[string]any{"name": "apps", "count": 0}
			})},
		},
		{
			name:      "a condition that is not a bool",
			resources: []any{site("app", func(r map[string]any) { r["condition"] = "[parameters('name')]" })},
			err:       "resources[0]: condition app is not a bool",
		},
		{
			name: "a copy count out of bounds",
			resources: []any{site("[format('app{0}', copyIndex())]", func(r map[string]any) {
				r["copy"] = map[string]any{"name": "apps", "count": 801}
			})},
			err: "copy count 801 is not a whole number from 0 to 800",
		},
		{
			name:      "a copy loop without a name",
			resources: []any{site("app", func(r map[string]any) { r["copy"] = map[string]any{"count": 1} })},
			err:       "copy has no name",
		},
		{
			name: "a copy loop of a child",
			resources: []any{site("app", func(r map[string]any) {
				r["resources"] = []any{map[string]any{"type": "config", "apiVersion": "2024-04-01", "name": "web", "copy": map[string]any{"name": "c", "count": 1}}}
			})},
			err: "only a loop of a template's own resource is something these checks follow",
		},
		{
			name: "a child giving its parent's type",
			resources: []any{site("app", func(r map[string]any) {
				r["resources"] = []any{map[string]any{"type": "Microsoft.Web/sites/config", "apiVersion": "2024-04-01", "name": "web"}}
			})},
			err: "give its own type and name segment only",
		},
		{
			name:      "another subscription",
			resources: []any{site("app", func(r map[string]any) { r["subscriptionId"] = sub })},
			err:       "subscriptionId is not something these checks follow",
		},
		{
			name:      "a resource without a name",
			resources: []any{site("", nil)},
			err:       "a resource needs a type, an apiVersion and a name",
		},
		{
			name:      "a resource that is not an object",
			resources: []any{"app"},
			err:       "resources[0] is not an object",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tmpl := map[string]any{
				"parameters": map[string]any{
					"name":  map[string]any{"type": "string", "defaultValue": "app"},
					"count": map[string]any{"type": "int", "defaultValue": 2},
				},
				"resources": tc.resources,
			}
			d, err := Resolve(tmpl, nil, scope)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			var ids []string
			declared := map[string]bool{}
			for _, r := range d.Resources {
				ids = append(ids, r.ID)
				declared[lower(r.ID)] = true
			}
			require.Equal(t, tc.want.ids, ids)
			for _, id := range tc.want.declared {
				declared[lower(id)] = true
			}
			require.Equal(t, declared, d.Declared[0])
		})
	}
}

func TestCopyLoopIndexes(t *testing.T) {
	tmpl := map[string]any{"resources": []any{site("[format('app{0}', copyIndex())]", func(r map[string]any) {
		r["copy"] = map[string]any{"name": "apps", "count": 3}
		r["properties"] = map[string]any{"next": "[copyIndex(1)]"}
	})}}
	d, err := Resolve(tmpl, nil, scope)
	require.NoError(t, err)
	require.Len(t, d.ByType("microsoft.web/sites"), 3)
	for i, r := range d.Resources {
		require.Equal(t, "app"+string(rune('0'+i)), r.Name)
		require.Equal(t, int64(i+1), Path(r.Body, "properties", "next"))
	}
	_, err = d.One("Microsoft.Web/sites")
	require.ErrorContains(t, err, "3 resources of type Microsoft.Web/sites, want 1")
}

func TestPropertiesResolved(t *testing.T) {
	tmpl := map[string]any{"resources": []any{site("app", func(r map[string]any) {
		r["properties"] = map[string]any{
			"gone":                   "[null()]",
			"[format('{0}', 'key')]": "[createArray(resourceGroup().name)]",
			"kept":                   1,
		}
	})}}
	d, err := Resolve(tmpl, nil, scope)
	require.NoError(t, err)
	site, err := d.One("Microsoft.Web/sites")
	require.NoError(t, err)
	require.Equal(t, map[string]any{"key": []any{"rg"}, "kept": int64(1)}, site.Body["properties"], "a null value leaves its property out, as in ARM")
}

func TestNestedDeployment(t *testing.T) {
	nested := func(scope string, params map[string]any) map[string]any {
		return map[string]any{
			"type": "Microsoft.Resources/deployments", "apiVersion": "2022-09-01", "name": "inner",
			"resourceGroup": "other",
			"properties": map[string]any{
				"mode":                        "Incremental",
				"expressionEvaluationOptions": map[string]any{"scope": scope},
				"parameters":                  params,
				"template": map[string]any{
					"parameters": map[string]any{"site": map[string]any{"type": "string"}},
					"resources": []any{
						site("[parameters('site')]", func(r map[string]any) {
							r["properties"] = map[string]any{"group": "[resourceGroup().name]"}
						}),
						site("never", func(r map[string]any) { r["condition"] = false }),
					},
				},
			},
		}
	}
	tmpl := map[string]any{
		"resources": []any{site("outer", nil), nested("inner", map[string]any{"site": map[string]any{"value": "app"}})},
		"outputs":   map[string]any{"id": map[string]any{"type": "string", "value": "[resourceId('Microsoft.Web/sites', 'outer')]"}},
	}
	d, err := Resolve(tmpl, nil, scope)
	require.NoError(t, err)
	require.Len(t, d.Resources, 3)
	app := d.Resources[2]
	require.Equal(t, "/subscriptions/"+sub+"/resourceGroups/other/providers/Microsoft.Web/sites/app", app.ID)
	require.Equal(t, "other", Path(app.Body, "properties", "group"), "the nested template runs in the group it targets")
	require.Equal(t, 1, app.Template)
	require.Len(t, d.Declared, 2)
	require.True(t, d.Declared[1][lower("/subscriptions/"+sub+"/resourceGroups/other/providers/Microsoft.Web/sites/never")])
	require.False(t, d.Declared[0][lower("/subscriptions/"+sub+"/resourceGroups/other/providers/Microsoft.Web/sites/app")], "each template declares its own")
	require.Nil(t, Path(d.Resources[1].Body, "properties", "template"), "the nested template is resolved, not kept")

	id, err := d.Output("id")
	require.NoError(t, err)
	require.Equal(t, rg+"/providers/Microsoft.Web/sites/outer", id)
	_, err = d.Output("missing")
	require.ErrorContains(t, err, "the template has no output missing")

	_, err = Resolve(map[string]any{"resources": []any{nested("outer", map[string]any{"site": map[string]any{"value": "app"}})}}, nil, scope)
	require.ErrorContains(t, err, "a nested template must have expressionEvaluationOptions.scope inner")
	_, err = Resolve(map[string]any{"resources": []any{nested("inner", map[string]any{"site": map[string]any{"reference": "kv"}})}}, nil, scope)
	require.ErrorContains(t, err, "nested parameter site has no value")
}

func TestWithExistingLeavesTheScopeAlone(t *testing.T) {
	s := scope.WithExisting("/subscriptions/S/resourceGroups/R/providers/Microsoft.Network/virtualNetworks/V", map[string]any{"location": "x"})
	require.Len(t, scope.Existing, 1)
	require.Len(t, s.Existing, 2)
	require.Contains(t, s.Existing, "/subscriptions/s/resourcegroups/r/providers/microsoft.network/virtualnetworks/v")
}

func TestParameterValues(t *testing.T) {
	file, err := DecodeJSON([]byte(`{"parameters": {"a": {"value": 1}, "b": {"value": "x"}}}`))
	require.NoError(t, err)
	values, err := ParameterValues(file)
	require.NoError(t, err)
	require.Equal(t, int64(1), Normalize(values["a"]))
	require.Equal(t, "x", values["b"])

	file, err = DecodeJSON([]byte(`{"parameters": {"a": {"reference": {"keyVault": {}}}}}`))
	require.NoError(t, err)
	_, err = ParameterValues(file)
	require.ErrorContains(t, err, "parameter a: no value")
}

func TestResourceType(t *testing.T) {
	tests := []struct{ id, typ, name string }{
		{rg + "/providers/Microsoft.Web/sites/app", "Microsoft.Web/sites", "app"},
		{rg + "/providers/Microsoft.Storage/storageAccounts/a/queueServices/default", "Microsoft.Storage/storageAccounts/queueServices", "default"},
		{rg + "/providers/Microsoft.Storage/storageAccounts/a/providers/Microsoft.Authorization/roleAssignments/r", "Microsoft.Authorization/roleAssignments", "r"},
		{rg, "", ""},
	}
	for _, tc := range tests {
		typ, name := ResourceType(tc.id)
		require.Equal(t, tc.typ, typ, tc.id)
		require.Equal(t, tc.name, name, tc.id)
	}
}

func lower(s string) string { return strings.ToLower(s) }
