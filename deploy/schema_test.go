package deploy

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"
)

// The schemas are Azure's own, at the commit schemas/SOURCE records, read
// from outside the repository (SOURCE says where). Every resource is checked
// against the resource definition of its type and API version, its template
// keys (dependsOn, scope, ...) against ARM's resource base, and the template
// and parameters file against their own schemas.
//
// The ARM schemas leave objects open: a misspelt property passes them, and
// Azure ignores it. The checks close every object schema that lists its
// properties, so a property the API version does not have is an error. They
// also read the schemas' oneOf as anyOf: it lists the forms a value may take,
// and an expression can match several (a value of any type, or a name of
// either pattern), which a strict oneOf refuses.

const schemaHost = "https://schema.management.azure.com/"

// templateKeys are a resource's keys that belong to the template language,
// not to the resource's API.
var templateKeys = []string{"dependsOn", "condition", "copy", "comments", "scope", "resourceGroup", "subscriptionId"}

// re2Equivalents stand in for schema patterns Go's regexp cannot compile
// (lookaheads), each matching exactly the same strings.
var re2Equivalents = map[string]func(string) bool{
	// Azure Monitor workspace names: 2 or more of a-z, A-Z, 0-9 and -,
	// neither starting nor ending with a dash.
	`^(?!-)[a-zA-Z0-9-]+[^-]$`: func(s string) bool {
		return regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9-]*[^-]$`).MatchString(s)
	},
	// Queue names: 3 to 63 of a-z, 0-9 and -, starting and ending with a
	// letter or digit, with no two dashes together.
	`^[a-z0-9]([a-z0-9]|(-(?!-))){1,61}[a-z0-9]$`: func(s string) bool {
		return regexp.MustCompile(`^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$`).MatchString(s) && !strings.Contains(s, "--")
	},
}

type stand struct {
	pattern string
	match   func(string) bool
}

func (s stand) String() string            { return s.pattern }
func (s stand) MatchString(v string) bool { return s.match(v) }

func compileRegexp(pattern string) (jsonschema.Regexp, error) {
	re, err := regexp.Compile(pattern)
	if err == nil {
		return re, nil
	}
	if f, ok := re2Equivalents[pattern]; ok {
		return stand{pattern, f}, nil
	}
	return nil, fmt.Errorf("schema pattern %q: %w (add an exact RE2 equivalent to re2Equivalents)", pattern, err)
}

type offline struct{}

func (offline) Load(url string) (any, error) {
	return nil, fmt.Errorf("%s is not in schemas/SOURCE: the checks load nothing from the network", url)
}

// schemaSet holds the compiled schemas and where each resource type's is.
type schemaSet struct {
	compiler *jsonschema.Compiler
	compiled map[string]*jsonschema.Schema
	// definitions maps "type@apiVersion" (type in lowercase) to the URL of
	// its resource definition.
	definitions map[string]string
	// requested are the files SOURCE marks "requested" that the schema
	// folder does not hold yet (shared/ is written by the steering side):
	// resources of their provider and API version go unchecked, and are
	// listed in unchecked, so that a run says what it did not check.
	requested []string
	unchecked []string
}

// awaited reports whether a resource of typ at version is described by a
// requested file that is not there: schemas/<version>/<Provider>[.<part>].json.
func (s *schemaSet) awaited(typ, version string) bool {
	provider, _, _ := strings.Cut(typ, "/")
	for _, rel := range s.requested {
		segs := strings.Split(rel, "/")
		if len(segs) < 2 || segs[len(segs)-2] != version {
			continue
		}
		parts := strings.Split(strings.TrimSuffix(segs[len(segs)-1], ".json"), ".")
		if len(parts) >= 2 && strings.EqualFold(parts[0]+"."+parts[1], provider) {
			return true
		}
	}
	return false
}

// schemaRoot finds the directory holding the files schemas/SOURCE lists.
// Without them the schema tests skip, except in CI, where a skip would let
// a template that Azure refuses pass.
func schemaRoot(t *testing.T) string {
	t.Helper()
	dir, err := findSchemas(os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	if dir == "" {
		t.Skip(noSchemas)
	}
	return dir
}

const noSchemas = "no ARM schemas: set OPSTATUS_ARM_SCHEMAS to a directory holding the files deploy/schemas/SOURCE lists, or put them in shared/arm-schemas"

// findSchemas returns $OPSTATUS_ARM_SCHEMAS, else arm-schemas/ in the
// nearest shared/ folder above the repository (beside it, or beside the
// folder of its worktrees); "" when there is none, and an error instead
// when CI is true.
func findSchemas(getenv func(string) string) (string, error) {
	if dir := getenv("OPSTATUS_ARM_SCHEMAS"); dir != "" {
		return dir, nil
	}
	for up := filepath.Join("..", ".."); ; up = filepath.Join(up, "..") {
		abs, err := filepath.Abs(up)
		if err != nil {
			break
		}
		dir := filepath.Join(abs, "shared", "arm-schemas")
		if _, err := os.Stat(dir); err == nil {
			return dir, nil
		}
		if filepath.Dir(abs) == abs {
			break
		}
	}
	if ci, _ := strconv.ParseBool(getenv("CI")); ci {
		return "", fmt.Errorf("CI=true and %s", noSchemas)
	}
	return "", nil
}

// loadSchemas reads the files SOURCE lists from root, refusing any whose
// hash differs, and indexes every resource definition of the provider
// files by type and API version.
func loadSchemas(root string) (*schemaSet, error) {
	source, err := os.ReadFile(filepath.Join("schemas", "SOURCE"))
	if err != nil {
		return nil, err
	}
	s := &schemaSet{
		compiler:    jsonschema.NewCompiler(),
		compiled:    map[string]*jsonschema.Schema{},
		definitions: map[string]string{},
	}
	s.compiler.DefaultDraft(jsonschema.Draft4)
	s.compiler.UseLoader(offline{})
	s.compiler.UseRegexpEngine(compileRegexp)
	sc := bufio.NewScanner(bytes.NewReader(source))
	files := 0
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		requested := len(fields) == 4 && fields[0] == "requested" && fields[1] == "sha256"
		if requested {
			fields = fields[1:]
		}
		if len(fields) != 3 || fields[0] != "sha256" {
			continue
		}
		want, rel := fields[1], fields[2]
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
		if requested && errors.Is(err, fs.ErrNotExist) {
			s.requested = append(s.requested, rel)
			continue
		}
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(b)
		if got := hex.EncodeToString(sum[:]); got != want {
			return nil, fmt.Errorf("%s: SHA-256 %s, but schemas/SOURCE records %s", rel, got, want)
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", rel, err)
		}
		m, ok := doc.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s: not a JSON object", rel)
		}
		url := schemaHost + rel
		switch {
		case strings.HasSuffix(rel, "/deploymentTemplate.json"):
			// Its resource definition lists every provider's schemas;
			// each resource is checked against its own instead.
			m["definitions"].(map[string]any)["resource"] = map[string]any{"type": "object"}
		case strings.Contains(rel, "/Microsoft."):
			closeObjects(m)
			if err := extendEnums(rel, m); err != nil {
				return nil, err
			}
			defs, _ := m["resourceDefinitions"].(map[string]any)
			for key, def := range defs {
				typ := enumOf(def, "type")
				version := enumOf(def, "apiVersion")
				if typ == "" || version == "" {
					return nil, fmt.Errorf("%s: resource definition %s has no type or apiVersion", rel, key)
				}
				s.definitions[strings.ToLower(typ)+"@"+version] = url + "#/resourceDefinitions/" + key
			}
		}
		if err := s.compiler.AddResource(url, m); err != nil {
			return nil, err
		}
		files++
	}
	if files == 0 {
		return nil, fmt.Errorf("schemas/SOURCE lists no files")
	}
	return s, nil
}

// extensibleEnums are values Azure accepts that a schema's enum leaves
// out: the REST specification declares these enums extensible
// (x-ms-enum modelAsString), and the schema generator closed them.
var extensibleEnums = []struct{ file, definition, property, value string }{
	// KnownDataFlowStreams: a data collection rule's flow of Prometheus
	// metrics into an Azure Monitor workspace, as ARO-HCP's own
	// datacollection.bicep deploys at this API version.
	{"schemas/2022-06-01/Microsoft.Insights.json", "DataFlow", "streams", "Microsoft-PrometheusMetrics"},
}

// extendEnums adds extensibleEnums' values to the schema file rel.
func extendEnums(rel string, doc map[string]any) error {
	for _, e := range extensibleEnums {
		if e.file != rel {
			continue
		}
		prop, _ := path(doc, "definitions", e.definition, "properties", e.property).(map[string]any)
		done := false
		for _, key := range []string{"oneOf", "anyOf"} {
			forms, _ := prop[key].([]any)
			for _, f := range forms {
				items, _ := path(f, "items").(map[string]any)
				if enum, ok := items["enum"].([]any); ok {
					items["enum"] = append(enum, e.value)
					done = true
				}
			}
		}
		if !done {
			return fmt.Errorf("%s: %s.%s has no enum to extend", rel, e.definition, e.property)
		}
	}
	return nil
}

// enumOf returns the single value a definition's property is fixed to.
func enumOf(def any, prop string) string {
	e, _ := path(def, "properties", prop, "enum").([]any)
	if len(e) != 1 {
		return ""
	}
	s, _ := e[0].(string)
	return s
}

// closeObjects forbids properties an object schema does not list, where
// that cannot clash with a composition of schemas. It walks a provider
// file's definitions and every schema inside them.
func closeObjects(doc map[string]any) {
	for k, v := range doc {
		if k == "definitions" || strings.HasSuffix(k, "resourceDefinitions") {
			defs, _ := v.(map[string]any)
			for _, def := range defs {
				closeSchema(def)
			}
		}
	}
}

// closeSchema closes one schema and the schemas inside it. The branches
// of a composition are also allowed the properties their parent lists,
// which the parent checks.
func closeSchema(v any, parentProps ...string) {
	x, ok := v.(map[string]any)
	if !ok {
		return
	}
	if list, ok := x["oneOf"]; ok {
		x["anyOf"] = list
		delete(x, "oneOf")
	}
	props, hasProps := x["properties"].(map[string]any)
	_, addl := x["additionalProperties"]
	composed := false
	for _, k := range []string{"$ref", "allOf", "anyOf", "oneOf"} {
		_, has := x[k]
		composed = composed || has
	}
	if hasProps && !addl && !composed {
		for _, p := range parentProps {
			if _, ok := props[p]; !ok {
				props[p] = map[string]any{}
			}
		}
		x["additionalProperties"] = false
	}
	for _, p := range props {
		closeSchema(p)
	}
	for _, k := range []string{"additionalProperties", "items", "not"} {
		closeSchema(x[k])
	}
	if pp, ok := x["patternProperties"].(map[string]any); ok {
		for _, p := range pp {
			closeSchema(p)
		}
	}
	if list, ok := x["items"].([]any); ok {
		for _, item := range list {
			closeSchema(item)
		}
	}
	var names []string
	for name := range props {
		names = append(names, name)
	}
	names = append(names, parentProps...)
	for _, k := range []string{"allOf", "anyOf"} {
		if list, ok := x[k].([]any); ok {
			for _, item := range list {
				closeSchema(item, names...)
			}
		}
	}
}

func (s *schemaSet) schema(url string) (*jsonschema.Schema, error) {
	if sch, ok := s.compiled[url]; ok {
		return sch, nil
	}
	sch, err := s.compiler.Compile(url)
	if err != nil {
		return nil, err
	}
	s.compiled[url] = sch
	return sch, nil
}

func (s *schemaSet) validate(url string, v any, what string) error {
	sch, err := s.schema(url)
	if err != nil {
		return err
	}
	if err := sch.Validate(v); err != nil {
		return fmt.Errorf("%s: %#v", what, err)
	}
	return nil
}

// validateTemplate checks a template, its resources and its nested
// templates.
func (s *schemaSet) validateTemplate(tmpl map[string]any, where string) error {
	if err := s.validate(schemaHost+"schemas/2019-04-01/deploymentTemplate.json", tmpl, where); err != nil {
		return err
	}
	if tmpl["$schema"] != schemaHost+"schemas/2019-04-01/deploymentTemplate.json#" {
		return fmt.Errorf("%s: $schema %v is not the deploymentTemplate.json these checks use", where, tmpl["$schema"])
	}
	list, _ := tmpl["resources"].([]any)
	for i, item := range list {
		r, _ := item.(map[string]any)
		what := fmt.Sprintf("%s resources[%d] %v@%v", where, i, r["type"], r["apiVersion"])
		api, err := s.apiOf(r, what)
		if err != nil {
			return err
		}
		typ, _ := r["type"].(string)
		version, _ := r["apiVersion"].(string)
		url, ok := s.definitions[strings.ToLower(typ)+"@"+version]
		if !ok && s.awaited(typ, version) {
			s.unchecked = append(s.unchecked, what)
			continue
		}
		if !ok {
			return fmt.Errorf("%s: no schema in schemas/SOURCE for %s at API version %s", what, typ, version)
		}
		if err := s.validate(url, api, what); err != nil {
			return err
		}
		if nested, ok := path(r, "properties", "template").(map[string]any); ok {
			if err := s.validateTemplate(nested, what+" template"); err != nil {
				return err
			}
		}
	}
	return nil
}

// apiOf checks a resource's template keys, its children's included,
// against ARM's resource base and returns the resource without them: what
// its provider's schema describes.
func (s *schemaSet) apiOf(r map[string]any, what string) (map[string]any, error) {
	if err := s.validate(schemaHost+"schemas/common/definitions.json#/definitions/ARMResourceBase", r, what); err != nil {
		return nil, err
	}
	api := map[string]any{}
	for k, v := range r {
		if !contains(templateKeys, k) {
			api[k] = v
		}
	}
	if children, ok := r["resources"].([]any); ok {
		var out []any
		for i, c := range children {
			child, ok := c.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("%s resources[%d]: not an object", what, i)
			}
			cc, err := s.apiOf(child, fmt.Sprintf("%s resources[%d]", what, i))
			if err != nil {
				return nil, err
			}
			out = append(out, cc)
		}
		api["resources"] = out
	}
	return api, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestTemplateMatchesARMSchemas(t *testing.T) {
	root := schemaRoot(t)
	s, err := loadSchemas(root)
	require.NoError(t, err)
	f := load(t)
	require.NoError(t, s.validateTemplate(f.template, templateFile))
	for _, what := range s.unchecked {
		t.Logf("unchecked, its schema file is requested in schemas/SOURCE and not in %s yet: %s", root, what)
	}
	require.NoError(t, s.validate(schemaHost+"schemas/2019-04-01/deploymentParameters.json", f.parameters, parametersFile))
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
				rt := path(props(findResource(t, tmpl, "Microsoft.Web/sites", "")), "functionAppConfig", "runtime").(map[string]any)
				rt["name"] = "go"
			},
			want: "value must be one of 'dotnet-isolated'",
		},
		{
			name: "an instance count that is not a number",
			edit: func(t *testing.T, tmpl map[string]any) {
				sc := path(props(findResource(t, tmpl, "Microsoft.Web/sites", "")), "functionAppConfig", "scaleAndConcurrency").(map[string]any)
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
	s, err := loadSchemas(schemaRoot(t))
	require.NoError(t, err)
	f := load(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tmpl := deepCopy(f.template)
			tc.edit(t, tmpl)
			require.ErrorContains(t, s.validateTemplate(tmpl, templateFile), tc.want)
		})
	}

	params := deepCopy(f.parameters)
	delete(params["parameters"].(map[string]any)["appName"].(map[string]any), "value")
	require.ErrorContains(t, s.validate(schemaHost+"schemas/2019-04-01/deploymentParameters.json", params, parametersFile), "appName")
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
	_, err = loadSchemas(copyDir)
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

	dir, err := findSchemas(env(map[string]string{"CI": "true"}))
	require.ErrorContains(t, err, "CI=true and no ARM schemas")
	require.Empty(t, dir)

	dir, err = findSchemas(env(map[string]string{"CI": "false"}))
	require.NoError(t, err)
	require.Empty(t, dir, "outside CI the schema tests skip")
}

func TestRequestedSchemaFilesLeaveOnlyTheirProvidersUnchecked(t *testing.T) {
	s := &schemaSet{requested: []string{"schemas/2024-05-01/Microsoft.Network.NRP.json", "schemas/2023-03-01/Microsoft.Insights.json"}}
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
