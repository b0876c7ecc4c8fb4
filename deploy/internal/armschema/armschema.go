// Package armschema checks ARM templates against Azure's own JSON schemas,
// read offline from a folder at the commit a SOURCE file records: every
// resource against the resource definition of its type and API version,
// its template keys (dependsOn, scope, ...) against ARM's resource base,
// and the template and parameters file against their own schemas.
//
// The ARM schemas leave objects open: a misspelt property passes them, and
// Azure ignores it. Load closes every object schema that lists its
// properties, so a property the API version does not have is an error. It
// also reads the schemas' oneOf as anyOf: it lists the forms a value may
// take, and an expression can match several (a value of any type, or a name
// of either pattern), which a strict oneOf refuses.
//
// It is test machinery: only deploy's tests import it.
package armschema

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
	"slices"
	"strconv"
	"strings"

	"github.com/opstatus/opstatus/deploy/internal/armeval"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Host is where the schemas' URLs point; nothing is loaded from it.
const Host = "https://schema.management.azure.com/"

// The schemas of a template and of a parameters file.
const (
	TemplateSchema   = Host + "schemas/2019-04-01/deploymentTemplate.json"
	ParametersSchema = Host + "schemas/2019-04-01/deploymentParameters.json"
)

// templateKeys are a resource's keys that belong to the template language,
// not to the resource's API.
var templateKeys = []string{"dependsOn", "condition", "copy", "comments", "scope", "resourceGroup", "subscriptionId"}

var queueName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$`)

// re2Equivalents stand in for schema patterns Go's regexp cannot compile
// (lookaheads), each matching exactly the same strings.
var re2Equivalents = map[string]func(string) bool{
	// Azure Monitor workspace names: 2 or more of a-z, A-Z, 0-9 and -,
	// neither starting nor ending with a dash.
	`^(?!-)[a-zA-Z0-9-]+[^-]$`: regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9-]*[^-]$`).MatchString,
	// Queue names: 3 to 63 of a-z, 0-9 and -, starting and ending with a
	// letter or digit, with no two dashes together.
	`^[a-z0-9]([a-z0-9]|(-(?!-))){1,61}[a-z0-9]$`: func(s string) bool {
		return queueName.MatchString(s) && !strings.Contains(s, "--")
	},
}

// stand is an RE2 equivalent standing in for a schema pattern.
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

// offline refuses every URL the SOURCE files do not cover.
type offline struct{}

func (offline) Load(url string) (any, error) {
	return nil, fmt.Errorf("%s is not in schemas/SOURCE: the checks load nothing from the network", url)
}

// Set holds the compiled schemas and where each resource type's is.
type Set struct {
	compiler *jsonschema.Compiler
	compiled map[string]*jsonschema.Schema
	// definitions maps "type@apiVersion" (type in lowercase) to the URL of
	// its resource definition.
	definitions map[string]string
	// requested are the files SOURCE marks "requested" that the schema
	// folder does not hold yet (shared/ is written by the steering side):
	// resources of their provider and API version go unchecked, and are
	// listed in unchecked, so that a run can say what it did not check.
	requested []string
	unchecked []string
}

// awaited reports whether a resource of typ at version is described by a
// requested file that is not there: schemas/<version>/<Provider>[.<part>].json.
func (s *Set) awaited(typ, version string) bool {
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

// NoSchemas says where the schemas are looked for.
const NoSchemas = "no ARM schemas: set OPSTATUS_ARM_SCHEMAS to a directory holding the files deploy/schemas/SOURCE lists, or put them in shared/arm-schemas"

// Find returns $OPSTATUS_ARM_SCHEMAS, else arm-schemas/ in the nearest
// shared/ folder two or more levels above the working directory (from
// deploy/: beside the repository, or beside the folder of its worktrees);
// "" when there is
// none, and an error instead when CI is true, where a skip would let a
// template that Azure refuses pass.
func Find(getenv func(string) string) (string, error) {
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
		return "", fmt.Errorf("CI=true and %s", NoSchemas)
	}
	return "", nil
}

// Load reads the files the SOURCE file at source lists from root, refusing
// any whose hash differs, and indexes every resource definition of the
// provider files by type and API version.
func Load(root, source string) (*Set, error) {
	list, err := os.ReadFile(source)
	if err != nil {
		return nil, err
	}
	s := &Set{
		compiler:    jsonschema.NewCompiler(),
		compiled:    map[string]*jsonschema.Schema{},
		definitions: map[string]string{},
	}
	s.compiler.DefaultDraft(jsonschema.Draft4)
	s.compiler.UseLoader(offline{})
	s.compiler.UseRegexpEngine(compileRegexp)
	sc := bufio.NewScanner(bytes.NewReader(list))
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
		url := Host + rel
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

// Unchecked lists the resources ValidateTemplate skipped because the
// schema file of their provider and API version is requested in SOURCE
// and not in the folder yet.
func (s *Set) Unchecked() []string { return s.unchecked }

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
		prop, _ := armeval.Path(doc, "definitions", e.definition, "properties", e.property).(map[string]any)
		done := false
		for _, key := range []string{"oneOf", "anyOf"} {
			forms, _ := prop[key].([]any)
			for _, f := range forms {
				items, _ := armeval.Path(f, "items").(map[string]any)
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
	e, _ := armeval.Path(def, "properties", prop, "enum").([]any)
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

func (s *Set) schema(url string) (*jsonschema.Schema, error) {
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

// Validate checks v, named what in errors, against the schema at url.
func (s *Set) Validate(url string, v any, what string) error {
	sch, err := s.schema(url)
	if err != nil {
		return err
	}
	if err := sch.Validate(v); err != nil {
		return fmt.Errorf("%s: %#v", what, err)
	}
	return nil
}

// ValidateTemplate checks a template, its resources and its nested
// templates; where names it in errors.
func (s *Set) ValidateTemplate(tmpl map[string]any, where string) error {
	if err := s.Validate(TemplateSchema, tmpl, where); err != nil {
		return err
	}
	if tmpl["$schema"] != TemplateSchema+"#" {
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
		if err := s.Validate(url, api, what); err != nil {
			return err
		}
		if nested, ok := armeval.Path(r, "properties", "template").(map[string]any); ok {
			if err := s.ValidateTemplate(nested, what+" template"); err != nil {
				return err
			}
		}
	}
	return nil
}

// apiOf checks a resource's template keys, its children's included,
// against ARM's resource base and returns the resource without them: what
// its provider's schema describes.
func (s *Set) apiOf(r map[string]any, what string) (map[string]any, error) {
	if err := s.Validate(Host+"schemas/common/definitions.json#/definitions/ARMResourceBase", r, what); err != nil {
		return nil, err
	}
	api := map[string]any{}
	for k, v := range r {
		if !slices.Contains(templateKeys, k) {
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
