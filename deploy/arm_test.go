package deploy

import (
	"bytes"
	"crypto/sha1"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"strings"
	"unicode"
)

// The checks read the template twice: raw, as Azure receives it, for the
// schemas and the text searches; and resolved, every expression evaluated
// the way ARM would for one deployment, so that each value can be followed
// back to the resource it names. The evaluator knows only the functions the
// template uses and fails on any other, so the template cannot grow a
// value the checks do not see.

const (
	templateFile   = "azuredeploy.json"
	parametersFile = "example.parameters.json"
)

// armScope is where a resolved deployment lands.
type armScope struct {
	subscription, resourceGroup, location string
	// existing stands for the resources outside the template that
	// reference() reads at deployment, by lowercase ID: each as ARM's
	// 'Full' form answers it, its properties under "properties".
	existing map[string]map[string]any
}

// exampleScope stands for the deployment the example parameters describe.
var exampleScope = armScope{
	subscription:  "11111111-2222-3333-4444-555555555555",
	resourceGroup: "opstatus-int-eastus",
	location:      "eastus",
	existing: map[string]map[string]any{
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

// withExisting returns a copy of s in which the existing resource id is
// as given.
func (s armScope) withExisting(id string, r map[string]any) armScope {
	out := s
	out.existing = map[string]map[string]any{}
	for k, v := range s.existing {
		out.existing[k] = v
	}
	out.existing[strings.ToLower(id)] = r
	return out
}

// readJSON decodes a JSON file keeping numbers exact.
func readJSON(path string) (map[string]any, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return decodeJSON(b)
}

func decodeJSON(b []byte) (map[string]any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v map[string]any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// deepCopy copies a decoded JSON value, for tests that edit a template.
func deepCopy(v map[string]any) map[string]any {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	c, err := decodeJSON(b)
	if err != nil {
		panic(err)
	}
	return c
}

// parameterValues reads the values of a deployment parameters file.
func parameterValues(file map[string]any) (map[string]any, error) {
	params, _ := file["parameters"].(map[string]any)
	values := make(map[string]any, len(params))
	for name, p := range params {
		pm, ok := p.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("parameter %s: not an object", name)
		}
		v, ok := pm["value"]
		if !ok {
			return nil, fmt.Errorf("parameter %s: no value (Key Vault references are secrets, which this template takes none of)", name)
		}
		values[name] = v
	}
	return values, nil
}

// resource is one resolved resource of a deployment, nested ones included.
type resource struct {
	Type, APIVersion, Name string
	// ID is the resource's full ID; for an extension resource it sits under
	// the ID of its scope.
	ID string
	// Scope is the full ID of an extension resource's scope, else empty.
	Scope string
	// Body is the resolved resource object.
	Body map[string]any
	// Template numbers the template that declares it: 0 the main one, then
	// each nested template in the order met.
	Template int
}

// deployment is a template resolved with parameter values.
type deployment struct {
	scope     armScope
	params    map[string]any
	variables map[string]any
	resources []resource
	// outputs are the template's raw outputs, which output resolves.
	outputs map[string]any
	eval    *evaluator
	// declared holds, by template number, the lowercase IDs of every
	// resource the template declares, those whose condition is false too:
	// what its dependsOn may name.
	declared []map[string]bool
}

// resolve evaluates a template for one deployment: given parameter values,
// defaults for the others, then variables and every resource, following
// nested deployments into the resource group they target.
func resolve(tmpl map[string]any, given map[string]any, scope armScope) (*deployment, error) {
	e, err := newEvaluator(tmpl, given, scope)
	if err != nil {
		return nil, err
	}
	d := &deployment{scope: scope, params: e.params, variables: map[string]any{}, declared: []map[string]bool{{}}}
	vars, _ := tmpl["variables"].(map[string]any)
	for name := range vars {
		v, err := e.variable(name)
		if err != nil {
			return nil, err
		}
		d.variables[name] = v
	}
	if err := e.resources(tmpl, d); err != nil {
		return nil, err
	}
	d.eval = e
	d.outputs, _ = tmpl["outputs"].(map[string]any)
	return d, nil
}

// output resolves one of the template's outputs.
func (d *deployment) output(name string) (any, error) {
	o, ok := d.outputs[name]
	if !ok {
		return nil, fmt.Errorf("the template has no output %s", name)
	}
	v, err := d.eval.value(path(o, "value"))
	if err != nil {
		return nil, fmt.Errorf("output %s: %w", name, err)
	}
	return v, nil
}

// byType returns the resolved resources of a type.
func (d *deployment) byType(typ string) []resource {
	var out []resource
	for _, r := range d.resources {
		if strings.EqualFold(r.Type, typ) {
			out = append(out, r)
		}
	}
	return out
}

// one returns the only resource of a type.
func (d *deployment) one(typ string) (resource, error) {
	rs := d.byType(typ)
	if len(rs) != 1 {
		return resource{}, fmt.Errorf("%d resources of type %s, want 1", len(rs), typ)
	}
	return rs[0], nil
}

// appSettings returns the Function App's settings by name.
func (d *deployment) appSettings() (map[string]string, error) {
	site, err := d.one("Microsoft.Web/sites")
	if err != nil {
		return nil, err
	}
	list, ok := path(site.Body, "properties", "siteConfig", "appSettings").([]any)
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

// path walks nested objects; nil when a step is missing.
func path(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// evaluator evaluates ARM template expressions in one template's scope.
type evaluator struct {
	// template is the number of the template evaluated (deployment.declared).
	template  int
	scope     armScope
	paramDefs map[string]any
	given     map[string]any
	params    map[string]any
	varDefs   map[string]any
	vars      map[string]any
	busy      map[string]bool
	// copyIndex is the index of the copy of a resource loop being
	// resolved; nil outside one.
	copyIndex *int64
}

func newEvaluator(tmpl map[string]any, given map[string]any, scope armScope) (*evaluator, error) {
	e := &evaluator{
		scope:  scope,
		given:  given,
		params: map[string]any{},
		vars:   map[string]any{},
		busy:   map[string]bool{},
	}
	e.paramDefs, _ = tmpl["parameters"].(map[string]any)
	e.varDefs, _ = tmpl["variables"].(map[string]any)
	for name := range given {
		if _, ok := e.paramDefs[name]; !ok {
			return nil, fmt.Errorf("parameter %s is given but the template declares none of that name", name)
		}
	}
	names := make([]string, 0, len(e.paramDefs))
	for name := range e.paramDefs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if _, err := e.parameter(name); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// parameter returns a parameter's value (given, else its default) after
// the checks ARM makes on it.
func (e *evaluator) parameter(name string) (any, error) {
	if v, ok := e.params[name]; ok {
		return v, nil
	}
	def, ok := e.paramDefs[name].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("parameters('%s'): no such parameter", name)
	}
	key := "parameter " + name
	if e.busy[key] {
		return nil, fmt.Errorf("parameter %s: its default refers to itself", name)
	}
	e.busy[key] = true
	defer delete(e.busy, key)
	v, ok := e.given[name]
	if ok {
		v = normalize(v)
	} else {
		dv, has := def["defaultValue"]
		if !has {
			return nil, fmt.Errorf("parameter %s: no value given and no default", name)
		}
		var err error
		if v, err = e.value(dv); err != nil {
			return nil, fmt.Errorf("parameter %s: %w", name, err)
		}
	}
	if err := checkParameter(name, def, v); err != nil {
		return nil, err
	}
	e.params[name] = v
	return v, nil
}

// checkParameter makes ARM's checks of a parameter value: its type,
// allowed values, bounds and lengths.
func checkParameter(name string, def map[string]any, v any) error {
	typ, _ := def["type"].(string)
	switch strings.ToLower(typ) {
	case "string":
		if _, ok := v.(string); !ok {
			return fmt.Errorf("parameter %s: %v is not a string", name, v)
		}
	case "int":
		if _, ok := v.(int64); !ok {
			return fmt.Errorf("parameter %s: %v is not an int", name, v)
		}
	case "bool":
		if _, ok := v.(bool); !ok {
			return fmt.Errorf("parameter %s: %v is not a bool", name, v)
		}
	case "object", "array":
	default:
		return fmt.Errorf("parameter %s: type %q is not one this template may use", name, typ)
	}
	if allowed, ok := def["allowedValues"].([]any); ok {
		found := false
		for _, a := range allowed {
			if fmt.Sprint(normalize(a)) == fmt.Sprint(v) {
				found = true
			}
		}
		if !found {
			return fmt.Errorf("parameter %s: %v is not one of %v", name, v, allowed)
		}
	}
	if n, ok := v.(int64); ok {
		if lo, ok := normalize(def["minValue"]).(int64); ok && n < lo {
			return fmt.Errorf("parameter %s: %d is under its minValue %d", name, n, lo)
		}
		if hi, ok := normalize(def["maxValue"]).(int64); ok && n > hi {
			return fmt.Errorf("parameter %s: %d is over its maxValue %d", name, n, hi)
		}
	}
	if s, ok := v.(string); ok {
		if lo, ok := normalize(def["minLength"]).(int64); ok && int64(len(s)) < lo {
			return fmt.Errorf("parameter %s: %q is shorter than %d", name, s, lo)
		}
		if hi, ok := normalize(def["maxLength"]).(int64); ok && int64(len(s)) > hi {
			return fmt.Errorf("parameter %s: %q is longer than %d", name, s, hi)
		}
	}
	return nil
}

// variable returns a variable's resolved value.
func (e *evaluator) variable(name string) (any, error) {
	if v, ok := e.vars[name]; ok {
		return v, nil
	}
	raw, ok := e.varDefs[name]
	if !ok {
		return nil, fmt.Errorf("variables('%s'): no such variable", name)
	}
	key := "variable " + name
	if e.busy[key] {
		return nil, fmt.Errorf("variable %s refers to itself", name)
	}
	e.busy[key] = true
	defer delete(e.busy, key)
	v, err := e.value(raw)
	if err != nil {
		return nil, fmt.Errorf("variable %s: %w", name, err)
	}
	e.vars[name] = v
	return v, nil
}

// normalize turns JSON numbers into int64 (the template has no others).
func normalize(v any) any {
	switch n := v.(type) {
	case json.Number:
		if i, err := n.Int64(); err == nil {
			return i
		}
		return n.String()
	case float64:
		return int64(n)
	case int:
		return int64(n)
	}
	return v
}

// value resolves a JSON value: expressions in strings and in object keys.
func (e *evaluator) value(v any) (any, error) {
	switch x := v.(type) {
	case string:
		if len(x) >= 2 && x[0] == '[' && x[len(x)-1] == ']' {
			if strings.HasPrefix(x, "[[") {
				return x[1:], nil
			}
			return e.expression(x[1 : len(x)-1])
		}
		return x, nil
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, item := range x {
			key, err := e.value(k)
			if err != nil {
				return nil, err
			}
			ks, ok := key.(string)
			if !ok {
				return nil, fmt.Errorf("property name %s is not a string", k)
			}
			v, err := e.value(item)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			if v == nil {
				continue // ARM leaves out a property whose value is null()
			}
			out[ks] = v
		}
		return out, nil
	case []any:
		out := make([]any, len(x))
		for i, item := range x {
			var err error
			if out[i], err = e.value(item); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return normalize(v), nil
}

// resources resolves a template's resources into d, child and nested
// deployments' resources included.
func (e *evaluator) resources(tmpl map[string]any, d *deployment) error {
	list, ok := tmpl["resources"].([]any)
	if !ok {
		return fmt.Errorf("resources is not a list")
	}
	for i, item := range list {
		raw, ok := item.(map[string]any)
		if !ok {
			return fmt.Errorf("resources[%d] is not an object", i)
		}
		if err := e.resource(raw, nil, d); err != nil {
			return fmt.Errorf("resources[%d]: %w", i, err)
		}
	}
	return nil
}

// resource resolves one resource and its children. A child's type and name
// continue its parent's.
func (e *evaluator) resource(raw map[string]any, parent *resource, d *deployment) error {
	if c, has := raw["copy"]; has {
		return e.copies(raw, c, parent, d)
	}
	if _, has := raw["subscriptionId"]; has {
		return fmt.Errorf("subscriptionId is not something these checks follow")
	}
	if c, has := raw["condition"]; has {
		v, err := e.value(c)
		if err != nil {
			return fmt.Errorf("condition: %w", err)
		}
		deploy, ok := v.(bool)
		if !ok {
			return fmt.Errorf("condition %v is not a bool", v)
		}
		if !deploy {
			e.declare(raw, parent, d)
			return nil
		}
	}
	body := deepCopy(raw)
	children, _ := body["resources"].([]any)
	delete(body, "resources")
	var nested map[string]any
	if strings.EqualFold(fmt.Sprint(raw["type"]), "Microsoft.Resources/deployments") {
		props, _ := body["properties"].(map[string]any)
		nested, _ = props["template"].(map[string]any)
		delete(props, "template")
	}
	delete(body, "condition")
	v, err := e.value(body)
	if err != nil {
		return err
	}
	resolved := v.(map[string]any)
	if parent != nil {
		typ, _ := resolved["type"].(string)
		name, _ := resolved["name"].(string)
		if strings.Contains(typ, "/") || strings.Contains(name, "/") {
			return fmt.Errorf("child resource %s %s: give its own type and name segment only", typ, name)
		}
		resolved["type"] = parent.Type + "/" + typ
		resolved["name"] = parent.Name + "/" + name
	}
	r, err := e.describe(resolved)
	if err != nil {
		return err
	}
	r.Template = e.template
	d.declared[e.template][strings.ToLower(r.ID)] = true
	d.resources = append(d.resources, r)
	for i, item := range children {
		child, ok := item.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: resources[%d] is not an object", r.Name, i)
		}
		if err := e.resource(child, &r, d); err != nil {
			return fmt.Errorf("%s: resources[%d]: %w", r.Name, i, err)
		}
	}
	if nested != nil {
		if err := e.nested(r, nested, d); err != nil {
			return fmt.Errorf("%s: %w", r.Name, err)
		}
	}
	return nil
}

// copies resolves a resource loop into one resource a copy index, as ARM
// makes them. Only a loop of a template's own resource, whose copyIndex
// calls name no loop, is followed.
func (e *evaluator) copies(raw map[string]any, c any, parent *resource, d *deployment) error {
	spec, ok := c.(map[string]any)
	if !ok || parent != nil || e.copyIndex != nil {
		return fmt.Errorf("copy: only a loop of a template's own resource is something these checks follow")
	}
	if name, _ := spec["name"].(string); name == "" {
		return fmt.Errorf("copy has no name")
	}
	v, err := e.value(spec["count"])
	if err != nil {
		return fmt.Errorf("copy count: %w", err)
	}
	n, ok := v.(int64)
	if !ok || n < 0 || n > 800 {
		return fmt.Errorf("copy count %v is not a whole number from 0 to 800", v)
	}
	one := deepCopy(raw)
	delete(one, "copy")
	defer func() { e.copyIndex = nil }()
	for i := range n {
		e.copyIndex = &i
		if err := e.resource(one, parent, d); err != nil {
			return fmt.Errorf("copy %d: %w", i, err)
		}
	}
	return nil
}

// declare records the ID of a resource whose condition is false: ARM drops
// a dependency on it, but only on a resource the template declares. Its
// children are declared with it. A name that cannot be evaluated declares
// nothing, so a dependency on it shows.
func (e *evaluator) declare(raw map[string]any, parent *resource, d *deployment) {
	head := map[string]any{"apiVersion": raw["apiVersion"]}
	for _, k := range []string{"type", "name", "scope", "resourceGroup"} {
		if v, ok := raw[k]; ok {
			head[k] = v
		}
	}
	v, err := e.value(head)
	if err != nil {
		return
	}
	resolved := v.(map[string]any)
	if parent != nil {
		resolved["type"] = parent.Type + "/" + fmt.Sprint(resolved["type"])
		resolved["name"] = parent.Name + "/" + fmt.Sprint(resolved["name"])
	}
	r, err := e.describe(resolved)
	if err != nil {
		return
	}
	d.declared[e.template][strings.ToLower(r.ID)] = true
	children, _ := raw["resources"].([]any)
	for _, c := range children {
		if child, ok := c.(map[string]any); ok {
			e.declare(child, &r, d)
		}
	}
}

// describe names a resolved resource: its type, API version, full ID and
// scope.
func (e *evaluator) describe(body map[string]any) (resource, error) {
	r := resource{Body: body}
	r.Type, _ = body["type"].(string)
	r.APIVersion, _ = body["apiVersion"].(string)
	r.Name, _ = body["name"].(string)
	if r.Type == "" || r.APIVersion == "" || r.Name == "" {
		return r, fmt.Errorf("a resource needs a type, an apiVersion and a name")
	}
	rg := e.scope.resourceGroup
	if g, ok := body["resourceGroup"].(string); ok {
		rg = g
	}
	if s, ok := body["scope"].(string); ok {
		if !strings.HasPrefix(s, "/") {
			s = fmt.Sprintf("/subscriptions/%s/resourceGroups/%s/providers/%s", e.scope.subscription, rg, s)
		}
		r.Scope = s
		r.ID = s + "/providers/" + typedNames(r.Type, strings.Split(r.Name, "/"))
		return r, nil
	}
	r.ID = fmt.Sprintf("/subscriptions/%s/resourceGroups/%s/providers/%s", e.scope.subscription, rg, typedNames(r.Type, strings.Split(r.Name, "/")))
	return r, nil
}

// typedNames interleaves a type's segments with names:
// Microsoft.Storage/storageAccounts/queueServices + [a default] =
// Microsoft.Storage/storageAccounts/a/queueServices/default.
func typedNames(typ string, names []string) string {
	parts := strings.Split(typ, "/")
	var b strings.Builder
	b.WriteString(parts[0])
	for i, p := range parts[1:] {
		b.WriteString("/" + p + "/")
		if i < len(names) {
			b.WriteString(names[i])
		}
	}
	return b.String()
}

// nested resolves a nested deployment's template in the resource group it
// targets. Only inner scope is followed: with outer scope the nested
// template's functions would run in the parent's resource group.
func (e *evaluator) nested(r resource, tmpl map[string]any, d *deployment) error {
	if scope, _ := path(r.Body, "properties", "expressionEvaluationOptions", "scope").(string); !strings.EqualFold(scope, "inner") {
		return fmt.Errorf("a nested template must have expressionEvaluationOptions.scope inner")
	}
	given := map[string]any{}
	params, _ := path(r.Body, "properties", "parameters").(map[string]any)
	for name, p := range params {
		pm, _ := p.(map[string]any)
		v, ok := pm["value"]
		if !ok {
			return fmt.Errorf("nested parameter %s has no value", name)
		}
		given[name] = v
	}
	scope := e.scope
	if g, ok := r.Body["resourceGroup"].(string); ok {
		scope.resourceGroup = g
	}
	inner, err := newEvaluator(tmpl, given, scope)
	if err != nil {
		return err
	}
	inner.template = len(d.declared)
	d.declared = append(d.declared, map[string]bool{})
	return inner.resources(tmpl, d)
}

// expression evaluates the text of one expression (without its brackets).
func (e *evaluator) expression(src string) (any, error) {
	toks, err := tokenize(src)
	if err != nil {
		return nil, fmt.Errorf("[%s]: %w", src, err)
	}
	p := &parser{toks: toks, e: e}
	v, err := p.expr()
	if err == nil && p.pos != len(p.toks) {
		err = fmt.Errorf("unexpected %q", p.toks[p.pos].text)
	}
	if err != nil {
		return nil, fmt.Errorf("[%s]: %w", src, err)
	}
	if ref, ok := v.(reference); ok {
		return nil, fmt.Errorf("[%s]: reference(%s) is used whole; only its modelled properties can be", src, ref.id)
	}
	return v, nil
}

type token struct {
	kind byte // 'i' identifier, 's' string, 'n' number, or the punctuation itself
	text string
}

func tokenize(src string) ([]token, error) {
	var toks []token
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == ' ' || c == '\t':
			i++
		case strings.IndexByte("(),.[]", c) >= 0:
			toks = append(toks, token{kind: c, text: string(c)})
			i++
		case c == '\'':
			var b strings.Builder
			i++
			for {
				if i >= len(src) {
					return nil, fmt.Errorf("unterminated string")
				}
				if src[i] == '\'' {
					if i+1 < len(src) && src[i+1] == '\'' {
						b.WriteByte('\'')
						i += 2
						continue
					}
					i++
					break
				}
				b.WriteByte(src[i])
				i++
			}
			toks = append(toks, token{kind: 's', text: b.String()})
		case c == '-' || unicode.IsDigit(rune(c)):
			j := i + 1
			for j < len(src) && unicode.IsDigit(rune(src[j])) {
				j++
			}
			toks = append(toks, token{kind: 'n', text: src[i:j]})
			i = j
		case unicode.IsLetter(rune(c)):
			j := i + 1
			for j < len(src) && (unicode.IsLetter(rune(src[j])) || unicode.IsDigit(rune(src[j])) || src[j] == '_') {
				j++
			}
			toks = append(toks, token{kind: 'i', text: src[i:j]})
			i = j
		default:
			return nil, fmt.Errorf("unexpected %q", c)
		}
	}
	return toks, nil
}

type parser struct {
	toks []token
	pos  int
	e    *evaluator
	// skip is set while parsing the branch of an if() that ARM does not
	// evaluate: calls are parsed, not made.
	skip bool
}

func (p *parser) peek(kind byte) bool {
	return p.pos < len(p.toks) && p.toks[p.pos].kind == kind
}

func (p *parser) want(kind byte) error {
	if !p.peek(kind) {
		return fmt.Errorf("expected %q", kind)
	}
	p.pos++
	return nil
}

// expr := primary ( '.' name | '[' expr ']' )*
func (p *parser) expr() (any, error) {
	v, err := p.primary()
	if err != nil {
		return nil, err
	}
	for {
		switch {
		case p.peek('.'):
			p.pos++
			if !p.peek('i') {
				return nil, fmt.Errorf("expected a property name after '.'")
			}
			name := p.toks[p.pos].text
			p.pos++
			if p.skip {
				continue
			}
			if v, err = property(v, name); err != nil {
				return nil, err
			}
		case p.peek('['):
			p.pos++
			idx, err := p.expr()
			if err != nil {
				return nil, err
			}
			if err := p.want(']'); err != nil {
				return nil, err
			}
			if p.skip {
				continue
			}
			if v, err = index(v, idx); err != nil {
				return nil, err
			}
		default:
			return v, nil
		}
	}
}

func (p *parser) primary() (any, error) {
	if p.pos >= len(p.toks) {
		return nil, fmt.Errorf("unexpected end")
	}
	t := p.toks[p.pos]
	p.pos++
	switch t.kind {
	case 's':
		return t.text, nil
	case 'n':
		return strconv.ParseInt(t.text, 10, 64)
	case 'i':
		if err := p.want('('); err != nil {
			return nil, err
		}
		if strings.EqualFold(t.text, "if") && !p.skip {
			return p.ifCall()
		}
		var args []any
		for !p.peek(')') {
			a, err := p.expr()
			if err != nil {
				return nil, err
			}
			args = append(args, a)
			if !p.peek(',') {
				break
			}
			p.pos++
		}
		if err := p.want(')'); err != nil {
			return nil, err
		}
		if p.skip {
			return nil, nil
		}
		return p.e.call(t.text, args)
	}
	return nil, fmt.Errorf("unexpected %q", t.text)
}

// ifCall evaluates if(condition, then, else) after its '(': as ARM does,
// only the branch the condition chooses is evaluated, so the other may
// fail() or read what does not exist.
func (p *parser) ifCall() (any, error) {
	c, err := p.expr()
	if err != nil {
		return nil, err
	}
	cond, ok := c.(bool)
	if !ok {
		return nil, fmt.Errorf("if: the condition %v is not a bool", c)
	}
	var branches [2]any
	for i := range branches {
		if err := p.want(','); err != nil {
			return nil, fmt.Errorf("if takes a condition and two values")
		}
		p.skip = cond == (i == 1)
		branches[i], err = p.expr()
		p.skip = false
		if err != nil {
			return nil, err
		}
	}
	if err := p.want(')'); err != nil {
		return nil, fmt.Errorf("if takes a condition and two values")
	}
	if cond {
		return branches[0], nil
	}
	return branches[1], nil
}

// reference stands for the runtime state of a resource that reference()
// reads: only the properties referenceProperties models can be read.
type reference struct {
	id   string
	path string
}

// referenceProperties are the runtime properties the template may read,
// with what Azure answers for them: an identity's ids stand for themselves
// so that every use of one can be traced to its resource; endpoints are
// built from the resource's name as Azure's public cloud builds them.
var referenceProperties = map[string]func(id, name string) string{
	"Microsoft.ManagedIdentity/userAssignedIdentities clientId":    func(id, _ string) string { return "clientId(" + id + ")" },
	"Microsoft.ManagedIdentity/userAssignedIdentities principalId": func(id, _ string) string { return "principalId(" + id + ")" },
	"Microsoft.Insights/components ConnectionString":               func(id, _ string) string { return "connectionString(" + id + ")" },
	"Microsoft.Storage/storageAccounts primaryEndpoints.blob":      func(_, name string) string { return "https://" + name + ".blob.core.windows.net/" },
	"Microsoft.Storage/storageAccounts primaryEndpoints.table":     func(_, name string) string { return "https://" + name + ".table.core.windows.net/" },
	"Microsoft.DocumentDB/databaseAccounts documentEndpoint":       func(_, name string) string { return "https://" + name + ".documents.azure.com:443/" },
	// A data collection endpoint's metrics ingestion endpoint has a
	// random part and the region in Azure's answer; this form keeps its
	// name, and a rule's immutable ID stands for itself.
	"Microsoft.Insights/dataCollectionEndpoints metricsIngestion.endpoint": func(_, name string) string {
		return "https://" + name + "-a1b2.eastus-1.metrics.ingest.monitor.azure.com"
	},
	"Microsoft.Insights/dataCollectionRules immutableId": func(id, _ string) string { return "immutableId(" + id + ")" },
}

// resourceType splits a full resource ID into its type and last name.
func resourceType(id string) (typ, name string) {
	i := strings.LastIndex(id, "/providers/")
	if i < 0 {
		return "", ""
	}
	parts := strings.Split(id[i+len("/providers/"):], "/")
	if len(parts) < 3 {
		return "", ""
	}
	t := []string{parts[0]}
	for j := 1; j+1 < len(parts); j += 2 {
		t = append(t, parts[j])
		name = parts[j+1]
	}
	return strings.Join(t, "/"), name
}

func property(v any, name string) (any, error) {
	switch x := v.(type) {
	case map[string]any:
		p, ok := x[name]
		if !ok {
			return nil, fmt.Errorf("no property %s", name)
		}
		return p, nil
	case reference:
		p := name
		if x.path != "" {
			p = x.path + "." + name
		}
		typ, rname := resourceType(x.id)
		if f, ok := referenceProperties[typ+" "+p]; ok {
			return f(x.id, rname), nil
		}
		for k := range referenceProperties {
			if strings.HasPrefix(k, typ+" "+p+".") {
				return reference{id: x.id, path: p}, nil
			}
		}
		return nil, fmt.Errorf("reference(%s).%s is not a property these checks model", x.id, p)
	}
	return nil, fmt.Errorf("no property %s on %v", name, v)
}

func index(v, idx any) (any, error) {
	switch x := v.(type) {
	case map[string]any:
		k, ok := idx.(string)
		if !ok {
			return nil, fmt.Errorf("index %v of an object is not a string", idx)
		}
		p, ok := x[k]
		if !ok {
			return nil, fmt.Errorf("no property %q", k)
		}
		return p, nil
	case []any:
		i, ok := idx.(int64)
		if !ok || i < 0 || int(i) >= len(x) {
			return nil, fmt.Errorf("index %v out of range", idx)
		}
		return x[i], nil
	}
	return nil, fmt.Errorf("cannot index %v", v)
}

// call evaluates a template function. Each follows ARM's definition for the
// arguments the template passes; guid is a stable hash of its arguments, not
// ARM's own value, which only has to be unique and repeatable.
func (e *evaluator) call(name string, args []any) (any, error) {
	strs := func() ([]string, error) {
		out := make([]string, len(args))
		for i, a := range args {
			s, ok := a.(string)
			if !ok {
				return nil, fmt.Errorf("%s: argument %d is %v, not a string", name, i+1, a)
			}
			out[i] = s
		}
		return out, nil
	}
	ints := func() ([]int64, error) {
		out := make([]int64, len(args))
		for i, a := range args {
			n, ok := a.(int64)
			if !ok {
				return nil, fmt.Errorf("%s: argument %d is %v, not an int", name, i+1, a)
			}
			out[i] = n
		}
		return out, nil
	}
	switch name {
	case "parameters", "variables":
		s, err := strs()
		if err != nil || len(s) != 1 {
			return nil, fmt.Errorf("%s takes one name", name)
		}
		if name == "parameters" {
			return e.parameter(s[0])
		}
		return e.variable(s[0])
	case "copyIndex":
		if e.copyIndex == nil {
			return nil, fmt.Errorf("copyIndex outside a copy loop")
		}
		n, err := ints()
		if err != nil || len(n) > 1 {
			return nil, fmt.Errorf("copyIndex takes at most an offset; a loop's name is not something these checks follow")
		}
		if len(n) == 1 {
			return *e.copyIndex + n[0], nil
		}
		return *e.copyIndex, nil
	case "length":
		if len(args) != 1 {
			return nil, fmt.Errorf("length takes one argument")
		}
		switch x := args[0].(type) {
		case []any:
			return int64(len(x)), nil
		case string:
			return int64(len(x)), nil
		}
		return nil, fmt.Errorf("length: %v is not an array or a string", args[0])
	case "startsWith":
		s, err := strs()
		if err != nil || len(s) != 2 {
			return nil, fmt.Errorf("startsWith takes two strings")
		}
		// ARM compares without case.
		return strings.HasPrefix(strings.ToLower(s[0]), strings.ToLower(s[1])), nil
	case "resourceGroup":
		return map[string]any{
			"name":     e.scope.resourceGroup,
			"location": e.scope.location,
			"id":       fmt.Sprintf("/subscriptions/%s/resourceGroups/%s", e.scope.subscription, e.scope.resourceGroup),
		}, nil
	case "subscription":
		return map[string]any{
			"subscriptionId": e.scope.subscription,
			"id":             "/subscriptions/" + e.scope.subscription,
		}, nil
	case "resourceId":
		s, err := strs()
		if err != nil {
			return nil, err
		}
		rg := e.scope.resourceGroup
		i := 0
		for i < len(s) && !strings.Contains(s[i], "/") {
			i++
		}
		switch i {
		case 0:
		case 1:
			rg = s[0]
		default:
			return nil, fmt.Errorf("resourceId: a subscription argument is not something these checks follow")
		}
		if i >= len(s)-1 {
			return nil, fmt.Errorf("resourceId: needs a type and names")
		}
		return fmt.Sprintf("/subscriptions/%s/resourceGroups/%s/providers/%s", e.scope.subscription, rg, typedNames(s[i], s[i+1:])), nil
	case "subscriptionResourceId":
		s, err := strs()
		if err != nil || len(s) < 2 || !strings.Contains(s[0], "/") {
			return nil, fmt.Errorf("subscriptionResourceId takes a type and names")
		}
		return fmt.Sprintf("/subscriptions/%s/providers/%s", e.scope.subscription, typedNames(s[0], s[1:])), nil
	case "extensionResourceId":
		s, err := strs()
		if err != nil || len(s) < 3 {
			return nil, fmt.Errorf("extensionResourceId takes a scope, a type and names")
		}
		return s[0] + "/providers/" + typedNames(s[1], s[2:]), nil
	case "reference":
		if len(args) < 1 || len(args) > 3 {
			return nil, fmt.Errorf("reference takes a resource ID, an API version and 'Full'")
		}
		s, err := strs()
		if err != nil {
			return nil, err
		}
		if !strings.HasPrefix(s[0], "/subscriptions/") {
			return nil, fmt.Errorf("reference(%s): give the resource's full ID", s[0])
		}
		if r, ok := e.scope.existing[strings.ToLower(s[0])]; ok {
			if len(s) == 3 && strings.EqualFold(s[2], "Full") {
				return r, nil
			}
			return r["properties"], nil
		}
		if len(s) == 3 {
			return nil, fmt.Errorf("reference(%s, 'Full') of a resource these checks do not model", s[0])
		}
		return reference{id: s[0]}, nil
	case "format":
		if len(args) < 1 {
			return nil, fmt.Errorf("format takes a format string")
		}
		f, ok := args[0].(string)
		if !ok {
			return nil, fmt.Errorf("format: the format is not a string")
		}
		for i, a := range args[1:] {
			s, err := toString(a)
			if err != nil {
				return nil, fmt.Errorf("format: %w", err)
			}
			f = strings.ReplaceAll(f, "{"+strconv.Itoa(i)+"}", s)
		}
		return f, nil
	case "string":
		if len(args) != 1 {
			return nil, fmt.Errorf("string takes one argument")
		}
		return toString(args[0])
	case "min":
		n, err := ints()
		if err != nil || len(n) == 0 {
			return nil, fmt.Errorf("min takes ints")
		}
		m := n[0]
		for _, x := range n[1:] {
			m = min(m, x)
		}
		return m, nil
	case "div", "mul", "add", "greater", "greaterOrEquals":
		n, err := ints()
		if err != nil || len(n) != 2 {
			return nil, fmt.Errorf("%s takes two ints", name)
		}
		switch name {
		case "mul":
			return n[0] * n[1], nil
		case "add":
			return n[0] + n[1], nil
		case "greater":
			return n[0] > n[1], nil
		case "greaterOrEquals":
			return n[0] >= n[1], nil
		}
		if n[1] == 0 {
			return nil, fmt.Errorf("div by zero")
		}
		return n[0] / n[1], nil
	case "empty":
		if len(args) != 1 {
			return nil, fmt.Errorf("empty takes one argument")
		}
		switch x := args[0].(type) {
		case string:
			return x == "", nil
		case []any:
			return len(x) == 0, nil
		case nil:
			return true, nil
		}
		return nil, fmt.Errorf("empty: %v is not a string or an array", args[0])
	case "equals":
		if len(args) != 2 {
			return nil, fmt.Errorf("equals takes two arguments")
		}
		return fmt.Sprint(args[0]) == fmt.Sprint(args[1]), nil
	case "and", "or":
		if len(args) < 2 {
			return nil, fmt.Errorf("%s takes two or more bools", name)
		}
		all, some := true, false
		for _, a := range args {
			b, ok := a.(bool)
			if !ok {
				return nil, fmt.Errorf("%s: %v is not a bool", name, a)
			}
			all = all && b
			some = some || b
		}
		if name == "or" {
			return some, nil
		}
		return all, nil
	case "fail":
		s, err := strs()
		if err != nil || len(s) != 1 {
			return nil, fmt.Errorf("fail takes a message")
		}
		return nil, fmt.Errorf("the deployment fails: %s", s[0])
	case "toLower":
		s, err := strs()
		if err != nil || len(s) != 1 {
			return nil, fmt.Errorf("toLower takes a string")
		}
		return strings.ToLower(s[0]), nil
	case "split":
		s, err := strs()
		if err != nil || len(s) != 2 {
			return nil, fmt.Errorf("split takes a string and a delimiter")
		}
		var out []any
		for _, part := range strings.Split(s[0], s[1]) {
			out = append(out, part)
		}
		return out, nil
	case "lastIndexOf":
		s, err := strs()
		if err != nil || len(s) != 2 {
			return nil, fmt.Errorf("lastIndexOf takes a string and a string to find")
		}
		return int64(strings.LastIndex(s[0], s[1])), nil
	case "substring":
		if len(args) != 3 {
			return nil, fmt.Errorf("substring takes a string, a start and a length")
		}
		s, ok1 := args[0].(string)
		start, ok2 := args[1].(int64)
		n, ok3 := args[2].(int64)
		if !ok1 || !ok2 || !ok3 || start < 0 || n < 0 || start+n > int64(len(s)) {
			return nil, fmt.Errorf("substring(%v, %v, %v): out of range", args[0], args[1], args[2])
		}
		return s[start : start+n], nil
	case "contains":
		if len(args) != 2 {
			return nil, fmt.Errorf("contains takes a container and a value")
		}
		switch c := args[0].(type) {
		case string:
			s, ok := args[1].(string)
			if !ok {
				return nil, fmt.Errorf("contains: %v is not a string", args[1])
			}
			return strings.Contains(c, s), nil
		case map[string]any:
			k, ok := args[1].(string)
			if !ok {
				return nil, fmt.Errorf("contains: %v is not a property name", args[1])
			}
			_, has := c[k]
			return has, nil
		}
		return nil, fmt.Errorf("contains: %v is not a string or an object", args[0])
	case "first", "last":
		if len(args) != 1 {
			return nil, fmt.Errorf("%s takes an array", name)
		}
		l, ok := args[0].([]any)
		if !ok || len(l) == 0 {
			return nil, fmt.Errorf("%s: %v is not an array with items", name, args[0])
		}
		if name == "first" {
			return l[0], nil
		}
		return l[len(l)-1], nil
	case "parseCidr":
		s, err := strs()
		if err != nil || len(s) != 1 {
			return nil, fmt.Errorf("parseCidr takes a CIDR string")
		}
		prefix, err := netip.ParsePrefix(s[0])
		if err != nil {
			return nil, fmt.Errorf("parseCidr: %w", err)
		}
		return map[string]any{"network": prefix.Masked().Addr().String(), "cidr": int64(prefix.Bits())}, nil
	case "createArray":
		return append([]any{}, args...), nil
	case "createObject":
		if len(args)%2 != 0 {
			return nil, fmt.Errorf("createObject takes pairs of names and values")
		}
		out := map[string]any{}
		for i := 0; i < len(args); i += 2 {
			k, ok := args[i].(string)
			if !ok {
				return nil, fmt.Errorf("createObject: name %v is not a string", args[i])
			}
			out[k] = args[i+1]
		}
		return out, nil
	case "concat":
		// ARM concatenates arrays, or strings, not a mix.
		var list []any
		for i, a := range args {
			l, ok := a.([]any)
			if !ok {
				return nil, fmt.Errorf("concat: argument %d is %v; these checks concatenate arrays only", i+1, a)
			}
			list = append(list, l...)
		}
		return append([]any{}, list...), nil
	case "not":
		if len(args) != 1 {
			return nil, fmt.Errorf("not takes one argument")
		}
		b, ok := args[0].(bool)
		if !ok {
			return nil, fmt.Errorf("not: %v is not a bool", args[0])
		}
		return !b, nil
	case "true", "false":
		if len(args) != 0 {
			return nil, fmt.Errorf("%s takes no arguments", name)
		}
		return name == "true", nil
	case "null":
		if len(args) != 0 {
			return nil, fmt.Errorf("null takes no arguments")
		}
		return nil, nil
	case "guid":
		s, err := strs()
		if err != nil || len(s) == 0 {
			return nil, fmt.Errorf("guid takes strings")
		}
		h := sha1.Sum([]byte(strings.Join(s, "\x00")))
		return fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16]), nil
	}
	return nil, fmt.Errorf("function %s is not one these checks evaluate", name)
}

func toString(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case bool:
		return strconv.FormatBool(x), nil
	}
	return "", fmt.Errorf("%v is not a string, int or bool", v)
}
