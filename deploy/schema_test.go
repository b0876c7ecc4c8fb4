package deploy

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/opstatus/opstatus/deploy/internal/armeval"
	"github.com/opstatus/opstatus/deploy/internal/armschema"
	"github.com/stretchr/testify/require"
)

// The template and the parameters file are checked against Azure's own
// schemas, at the commit schemas/SOURCE records, read from outside the
// repository (SOURCE says where); armschema does the checking.

// loadSchemas loads the schemas schemas/SOURCE lists. Without them the
// schema tests skip, except in CI, where a skip would let a template that
// Azure refuses pass.
func loadSchemas(t *testing.T) (*armschema.Set, string) {
	t.Helper()
	root, err := armschema.Find(os.Getenv)
	require.NoError(t, err)
	if root == "" {
		t.Skip(armschema.NoSchemas)
	}
	s, err := armschema.Load(root, filepath.Join("schemas", "SOURCE"))
	require.NoError(t, err)
	return s, root
}

func TestTemplateMatchesARMSchemas(t *testing.T) {
	s, root := loadSchemas(t)
	f := load(t)
	require.NoError(t, s.ValidateTemplate(f.template, templateFile))
	for _, what := range s.Unchecked() {
		t.Logf("unchecked, its schema file is requested in schemas/SOURCE and not in %s yet: %s", root, what)
	}
	require.NoError(t, s.Validate(armschema.ParametersSchema, f.parameters, parametersFile))
}

func TestSchemaCheckFailsOnEditedTemplate(t *testing.T) {
	tests := []struct {
		name string
		edit func(t *testing.T, tmpl map[string]any)
		want string
	}{
		{
			name: "a storage kind the API does not have",
			edit: func(t *testing.T, tmpl map[string]any) {
				findResource(t, tmpl, "Microsoft.Storage/storageAccounts", "")["kind"] = "StorageV3"
			},
			want: "value must be one of 'Storage', 'StorageV2'",
		},
		{
			name: "a misspelt property",
			edit: func(t *testing.T, tmpl map[string]any) {
				p := props(findResource(t, tmpl, "Microsoft.Storage/storageAccounts", ""))
				p["allowSharedKeyAcess"] = p["allowSharedKeyAccess"]
				delete(p, "allowSharedKeyAccess")
			},
			want: "additional properties 'allowSharedKeyAcess' not allowed",
		},
		{
			name: "a site network property the API version does not have",
			edit: func(t *testing.T, tmpl map[string]any) {
				props(findResource(t, tmpl, "Microsoft.Web/sites", ""))["outboundVnetRouting"] = map[string]any{"allTraffic": true}
			},
			want: "additional properties 'outboundVnetRouting' not allowed",
		},
		{
			name: "a runtime Flex Consumption does not have",
			edit: func(t *testing.T, tmpl map[string]any) {
				rt := functionAppConfig(t, tmpl, "runtime")
				rt["name"] = "go"
			},
			want: "value must be one of 'dotnet-isolated'",
		},
		{
			name: "an instance count that is not a number",
			edit: func(t *testing.T, tmpl map[string]any) {
				sc := functionAppConfig(t, tmpl, "scaleAndConcurrency")
				sc["maximumInstanceCount"] = "four"
			},
			want: "maximumInstanceCount' [S#/definitions/FunctionsScaleAndConcurrency/properties/maximumInstanceCount/anyOf/0/type]: got string, want integer",
		},
		{
			name: "an API version with no schema here",
			edit: func(t *testing.T, tmpl map[string]any) {
				findResource(t, tmpl, "Microsoft.Web/serverfarms", "")["apiVersion"] = "2099-01-01"
			},
			want: "no schema in schemas/SOURCE for Microsoft.Web/serverfarms at API version 2099-01-01",
		},
		{
			name: "a property the Cosmos DB role assignment does not have",
			edit: func(t *testing.T, tmpl map[string]any) {
				props(cosmosRoleAssignment(t, tmpl))["roleName"] = "Cosmos DB Built-in Data Contributor"
			},
			want: "additional properties 'roleName' not allowed",
		},
		{
			name: "dependsOn that is not a list",
			edit: func(t *testing.T, tmpl map[string]any) {
				findResource(t, tmpl, "Microsoft.Web/sites", "")["dependsOn"] = "[variables('identityId')]"
			},
			want: "at '/dependsOn'",
		},
		{
			name: "a content version that is not four numbers",
			edit: func(t *testing.T, tmpl map[string]any) { tmpl["contentVersion"] = "1.0" },
			want: "'1.0' does not match pattern",
		},
	}
	s, _ := loadSchemas(t)
	f := load(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tmpl := armeval.DeepCopy(f.template)
			tc.edit(t, tmpl)
			require.ErrorContains(t, s.ValidateTemplate(tmpl, templateFile), tc.want)
		})
	}

	params := armeval.DeepCopy(f.parameters)
	delete(params["parameters"].(map[string]any)["appName"].(map[string]any), "value")
	require.ErrorContains(t, s.Validate(armschema.ParametersSchema, params, parametersFile), "appName")
}
