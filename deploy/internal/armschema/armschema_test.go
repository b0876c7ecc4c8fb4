package armschema

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opstatus/opstatus/deploy/internal/armeval"
	"github.com/stretchr/testify/require"
)

// source is deploy's list of the real schemas.
var source = filepath.Join("..", "..", "schemas", "SOURCE")

// schemaRoot finds the real schemas, skipping without them outside CI.
func schemaRoot(t *testing.T) string {
	t.Helper()
	dir, err := Find(os.Getenv)
	require.NoError(t, err)
	if dir == "" {
		t.Skip(NoSchemas)
	}
	return dir
}

func TestSchemaFilesAreTheRecordedOnes(t *testing.T) {
	root := schemaRoot(t)
	copyDir := t.TempDir()
	err := filepath.WalkDir(root, func(p string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if filepath.Base(p) == "Microsoft.Storage.json" {
			b = bytes.Replace(b, []byte(`"StorageV2"`), []byte(`"StorageV3"`), 1)
		}
		require.NoError(t, os.MkdirAll(filepath.Join(copyDir, filepath.Dir(rel)), 0o755))
		return os.WriteFile(filepath.Join(copyDir, rel), b, 0o644)
	})
	require.NoError(t, err)
	_, err = Load(copyDir, source)
	require.ErrorContains(t, err, "schemas/2023-05-01/Microsoft.Storage.json: SHA-256")
}

func TestRE2EquivalentsMatchTheirPatterns(t *testing.T) {
	queue := re2Equivalents[`^[a-z0-9]([a-z0-9]|(-(?!-))){1,61}[a-z0-9]$`]
	for name, want := range map[string]bool{
		"operations":            true,
		"operations-poison":     true,
		"a-b":                   true,
		"abc":                   true,
		"ab":                    false,
		strings.Repeat("a", 63): true,
		strings.Repeat("a", 64): false,
		"operations--poison":    false,
		"-operations":           false,
		"operations-":           false,
		"Operations":            false,
		"operations_poison":     false,
	} {
		require.Equal(t, want, queue(name), name)
	}
}

func TestSchemasMissingFailInCI(t *testing.T) {
	env := func(kv map[string]string) func(string) string {
		return func(k string) string { return kv[k] }
	}
	// From a directory with no shared/ above it.
	t.Chdir(t.TempDir())

	dir, err := Find(env(map[string]string{"CI": "true"}))
	require.ErrorContains(t, err, "CI=true and no ARM schemas")
	require.Empty(t, dir)

	dir, err = Find(env(map[string]string{"CI": "false"}))
	require.NoError(t, err)
	require.Empty(t, dir, "outside CI the schema tests skip")
}

func TestRequestedSchemaFilesLeaveOnlyTheirProvidersUnchecked(t *testing.T) {
	s := &Set{requested: []string{"schemas/2024-05-01/Microsoft.Network.NRP.json", "schemas/2023-03-01/Microsoft.Insights.json"}}
	for _, c := range []struct {
		typ, version string
		want         bool
	}{
		{"Microsoft.Network/privateEndpoints", "2024-05-01", true},
		{"microsoft.network/privateEndpoints/privateDnsZoneGroups", "2024-05-01", true},
		{"Microsoft.Network/privateEndpoints", "2023-11-01", false},
		{"Microsoft.Insights/actionGroups", "2023-03-01", true},
		{"Microsoft.Web/sites", "2024-05-01", false},
		{"Microsoft.NetworkFunction/azureTrafficCollectors", "2024-05-01", false},
	} {
		require.Equal(t, c.want, s.awaited(c.typ, c.version), "%s@%s", c.typ, c.version)
	}
}

// files are a small schema folder in the layout of Azure's: the template
// and parameters schemas, the common definitions and one provider file.
func files() map[string]any {
	return map[string]any{
		"schemas/2019-04-01/deploymentTemplate.json": map[string]any{
			"type":     "object",
			"required": []any{"$schema", "resources"},
			"properties": map[string]any{
				"$schema":        map[string]any{"type": "string"},
				"contentVersion": map[string]any{"type": "string", "pattern": `^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$`},
				"resources":      map[string]any{"type": "array", "items": map[string]any{"$ref": "#/definitions/resource"}},
			},
			"definitions": map[string]any{
				// Load lets any object through here: each resource is
				// checked against its own provider's schema.
				"resource": map[string]any{"type": "object", "required": []any{"nothing-has-this"}},
			},
		},
		"schemas/2019-04-01/deploymentParameters.json": map[string]any{
			"type":       "object",
			"properties": map[string]any{"parameters": map[string]any{"type": "object"}},
		},
		"schemas/common/definitions.json": map[string]any{
			"definitions": map[string]any{
				"ARMResourceBase": map[string]any{
					"type":       "object",
					"properties": map[string]any{"dependsOn": map[string]any{"type": "array"}},
				},
			},
		},
		"schemas/2099-01-01/Microsoft.Test.json": map[string]any{
			"resourceDefinitions": map[string]any{
				"widgets": map[string]any{
					"type": "object",
					"properties": map[string]any{
						"type":       map[string]any{"enum": []any{"Microsoft.Test/widgets"}},
						"apiVersion": map[string]any{"enum": []any{"2099-01-01"}},
						"name":       map[string]any{"type": "string"},
						// "A" matches both forms: a strict oneOf would
						// refuse it.
						"kind": map[string]any{"oneOf": []any{
							map[string]any{"type": "string", "pattern": "^[A-Z]$"},
							map[string]any{"enum": []any{"A", "B"}},
						}},
						"properties": map[string]any{"$ref": "#/definitions/WidgetProperties"},
					},
					"required": []any{"type", "apiVersion", "name"},
				},
			},
			"definitions": map[string]any{
				"WidgetProperties": map[string]any{
					"type": "object",
					"properties": map[string]any{
						"size": map[string]any{"type": "integer"},
						// A lookahead, which RE2 cannot compile.
						"queue": map[string]any{"type": "string", "pattern": `^[a-z0-9]([a-z0-9]|(-(?!-))){1,61}[a-z0-9]$`},
					},
				},
			},
		},
	}
}

// writeSchemas writes files into a folder and a SOURCE listing them with
// their hashes, the lines of requested appended; it returns both paths.
func writeSchemas(t *testing.T, docs map[string]any, requested ...string) (root, src string) {
	t.Helper()
	root = t.TempDir()
	var list strings.Builder
	list.WriteString("# a comment line\nrepository https://github.com/Azure/azure-resource-manager-schemas\n\n")
	for rel, doc := range docs {
		b, ok := doc.([]byte)
		if !ok {
			var err error
			b, err = json.Marshal(doc)
			require.NoError(t, err)
		}
		p := filepath.Join(root, filepath.FromSlash(rel))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, b, 0o644))
		sum := sha256.Sum256(b)
		list.WriteString("sha256 " + hex.EncodeToString(sum[:]) + " " + rel + "\n")
	}
	for _, rel := range requested {
		list.WriteString("requested sha256 0000 " + rel + "\n")
	}
	src = filepath.Join(t.TempDir(), "SOURCE")
	require.NoError(t, os.WriteFile(src, []byte(list.String()), 0o644))
	return root, src
}

// widget is a template of one resource of the test provider.
func widget(edit func(r map[string]any)) map[string]any {
	r := map[string]any{
		"type":       "Microsoft.Test/widgets",
		"apiVersion": "2099-01-01",
		"name":       "[parameters('name')]",
		"kind":       "A",
		"dependsOn":  []any{"[resourceId('Microsoft.Test/widgets', 'other')]"},
		"properties": map[string]any{"size": 3, "queue": "operations-poison"},
	}
	if edit != nil {
		edit(r)
	}
	return map[string]any{
		"$schema":        TemplateSchema + "#",
		"contentVersion": "1.0.0.0",
		"resources":      []any{r},
	}
}

func TestValidateTemplate(t *testing.T) {
	tests := []struct {
		name string
		tmpl map[string]any
		want string // "" for none
	}{
		{name: "a resource as its schema has it", tmpl: widget(nil)},
		{
			name: "a property the schema does not list",
			tmpl: widget(func(r map[string]any) { r["properties"].(map[string]any)["sise"] = 3 }),
			want: "additional properties 'sise' not allowed",
		},
		{
			name: "a top-level property the schema does not list",
			tmpl: widget(func(r map[string]any) { r["colour"] = "red" }),
			want: "additional properties 'colour' not allowed",
		},
		{
			name: "a value of the wrong type",
			tmpl: widget(func(r map[string]any) { r["properties"].(map[string]any)["size"] = "three" }),
			want: "got string, want integer",
		},
		{
			name: "a value matching two forms of a oneOf",
			tmpl: widget(func(r map[string]any) { r["kind"] = "A" }),
		},
		{
			name: "a value matching no form",
			tmpl: widget(func(r map[string]any) { r["kind"] = "ab" }),
			want: "kind",
		},
		{
			name: "a lookahead pattern, through its RE2 equivalent",
			tmpl: widget(func(r map[string]any) { r["properties"].(map[string]any)["queue"] = "operations--poison" }),
			want: "does not match pattern",
		},
		{
			name: "template keys checked against ARM's resource base",
			tmpl: widget(func(r map[string]any) { r["dependsOn"] = "[resourceId('Microsoft.Test/widgets', 'other')]" }),
			want: "at '/dependsOn'",
		},
		{
			name: "an API version with no schema",
			tmpl: widget(func(r map[string]any) { r["apiVersion"] = "2000-01-01" }),
			want: "no schema in schemas/SOURCE for Microsoft.Test/widgets at API version 2000-01-01",
		},
		{
			name: "a type with no schema",
			tmpl: widget(func(r map[string]any) { r["type"] = "Microsoft.Other/things" }),
			want: "no schema in schemas/SOURCE for Microsoft.Other/things at API version 2099-01-01",
		},
		{
			name: "a template schema other than the one checked",
			tmpl: func() map[string]any {
				tmpl := widget(nil)
				tmpl["$schema"] = Host + "schemas/2015-01-01/deploymentTemplate.json#"
				return tmpl
			}(),
			want: "is not the deploymentTemplate.json these checks use",
		},
		{
			name: "the template's own schema",
			tmpl: func() map[string]any {
				tmpl := widget(nil)
				tmpl["contentVersion"] = "1.0"
				return tmpl
			}(),
			want: "'1.0' does not match pattern",
		},
		{
			name: "a child resource's template keys",
			tmpl: widget(func(r map[string]any) {
				r["resources"] = []any{map[string]any{"type": "parts", "dependsOn": "x"}}
			}),
			want: "test.json resources[0] Microsoft.Test/widgets@2099-01-01 resources[0]",
		},
	}
	root, src := writeSchemas(t, files())
	s, err := Load(root, src)
	require.NoError(t, err)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := s.ValidateTemplate(tc.tmpl, "test.json")
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestValidateParameters(t *testing.T) {
	root, src := writeSchemas(t, files())
	s, err := Load(root, src)
	require.NoError(t, err)
	require.NoError(t, s.Validate(ParametersSchema, map[string]any{"parameters": map[string]any{}}, "p.json"))
	require.ErrorContains(t, s.Validate(ParametersSchema, map[string]any{"parameters": []any{}}, "p.json"), "p.json")
}

func TestRequestedFilesLeaveTheirResourcesUnchecked(t *testing.T) {
	root, src := writeSchemas(t, files(), "schemas/2099-01-01/Microsoft.Other.json")
	s, err := Load(root, src)
	require.NoError(t, err)
	tmpl := widget(nil)
	other := widget(func(r map[string]any) { r["type"] = "Microsoft.Other/things" })
	tmpl["resources"] = append(tmpl["resources"].([]any), other["resources"].([]any)...)
	require.NoError(t, s.ValidateTemplate(tmpl, "test.json"))
	require.Equal(t, []string{"test.json resources[1] Microsoft.Other/things@2099-01-01"}, s.Unchecked())
}

func TestLoadRefuses(t *testing.T) {
	tests := []struct {
		name string
		edit func(docs map[string]any)
		// after edits the written folder, once SOURCE is written.
		after func(t *testing.T, root string)
		want  string
		is    error
	}{
		{
			name: "a file whose hash differs from SOURCE's",
			after: func(t *testing.T, root string) {
				p := filepath.Join(root, "schemas", "common", "definitions.json")
				b, err := os.ReadFile(p)
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(p, bytes.Replace(b, []byte("array"), []byte("object"), 1), 0o644))
			},
			want: "schemas/common/definitions.json: SHA-256",
		},
		{
			name: "a file SOURCE lists and the folder lacks",
			after: func(t *testing.T, root string) {
				require.NoError(t, os.Remove(filepath.Join(root, "schemas", "common", "definitions.json")))
			},
			is: fs.ErrNotExist,
		},
		{
			name: "a file that is not a JSON object",
			edit: func(docs map[string]any) { docs["schemas/common/definitions.json"] = []byte(`[]`) },
			want: "schemas/common/definitions.json: not a JSON object",
		},
		{
			name: "a file that is not JSON",
			edit: func(docs map[string]any) { docs["schemas/common/definitions.json"] = []byte(`{`) },
			want: "schemas/common/definitions.json:",
		},
		{
			name: "a resource definition whose type is not fixed",
			edit: func(docs map[string]any) {
				def := armeval.Path(docs["schemas/2099-01-01/Microsoft.Test.json"], "resourceDefinitions", "widgets", "properties").(map[string]any)
				def["type"] = map[string]any{"type": "string"}
			},
			want: "resource definition widgets has no type or apiVersion",
		},
		{
			name: "an extensible enum with no enum to extend",
			edit: func(docs map[string]any) {
				docs["schemas/2022-06-01/Microsoft.Insights.json"] = map[string]any{
					"definitions": map[string]any{"DataFlow": map[string]any{"properties": map[string]any{"streams": map[string]any{"type": "array"}}}},
				}
			},
			want: "DataFlow.streams has no enum to extend",
		},
		{
			name: "a SOURCE that lists no files",
			edit: func(docs map[string]any) { clear(docs) },
			want: "schemas/SOURCE lists no files",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			docs := files()
			if tc.edit != nil {
				tc.edit(docs)
			}
			root, src := writeSchemas(t, docs)
			if tc.after != nil {
				tc.after(t, root)
			}
			_, err := Load(root, src)
			if tc.is != nil {
				require.ErrorIs(t, err, tc.is)
				return
			}
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestExtensibleEnumsAccepted(t *testing.T) {
	docs := files()
	docs["schemas/2022-06-01/Microsoft.Insights.json"] = map[string]any{
		"definitions": map[string]any{"DataFlow": map[string]any{
			"type": "object",
			"properties": map[string]any{"streams": map[string]any{"oneOf": []any{
				map[string]any{"type": "array", "items": map[string]any{"type": "string", "enum": []any{"Microsoft-Event"}}},
				map[string]any{"type": "string", "pattern": `^\[.*\]$`},
			}}},
		}},
	}
	root, src := writeSchemas(t, docs)
	s, err := Load(root, src)
	require.NoError(t, err)
	flow := Host + "schemas/2022-06-01/Microsoft.Insights.json#/definitions/DataFlow"
	require.NoError(t, s.Validate(flow, map[string]any{"streams": []any{"Microsoft-PrometheusMetrics"}}, "flow"))
	require.NoError(t, s.Validate(flow, map[string]any{"streams": []any{"Microsoft-Event"}}, "flow"))
	require.ErrorContains(t, s.Validate(flow, map[string]any{"streams": []any{"Microsoft-Other"}}, "flow"), "flow")
}

func TestNothingLoadedFromTheNetwork(t *testing.T) {
	docs := files()
	props := armeval.Path(docs["schemas/2099-01-01/Microsoft.Test.json"], "definitions", "WidgetProperties", "properties").(map[string]any)
	props["size"] = map[string]any{"$ref": "https://schema.example/elsewhere.json"}
	root, src := writeSchemas(t, docs)
	s, err := Load(root, src)
	require.NoError(t, err)
	require.ErrorContains(t, s.ValidateTemplate(widget(nil), "test.json"), "https://schema.example/elsewhere.json is not in schemas/SOURCE: the checks load nothing from the network")
}

func TestFind(t *testing.T) {
	env := func(kv map[string]string) func(string) string {
		return func(k string) string { return kv[k] }
	}
	top := t.TempDir()
	shared := filepath.Join(top, "shared", "arm-schemas")
	require.NoError(t, os.MkdirAll(shared, 0o755))
	work := filepath.Join(top, "wt", "repo", "deploy")
	require.NoError(t, os.MkdirAll(work, 0o755))
	t.Chdir(work)

	dir, err := Find(env(map[string]string{"OPSTATUS_ARM_SCHEMAS": "/elsewhere", "CI": "true"}))
	require.NoError(t, err)
	require.Equal(t, "/elsewhere", dir, "the variable wins")

	dir, err = Find(env(map[string]string{"CI": "true"}))
	require.NoError(t, err)
	want, err := filepath.EvalSymlinks(shared)
	require.NoError(t, err)
	got, err := filepath.EvalSymlinks(dir)
	require.NoError(t, err)
	require.Equal(t, want, got, "the nearest shared/ above")
}
