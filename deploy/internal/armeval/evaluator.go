package armeval

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// evaluator evaluates ARM template expressions in one template's scope.
type evaluator struct {
	// template is the number of the template evaluated (Deployment.Declared).
	template  int
	scope     Scope
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

func newEvaluator(tmpl map[string]any, given map[string]any, scope Scope) (*evaluator, error) {
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
		v = Normalize(v)
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
			if fmt.Sprint(Normalize(a)) == fmt.Sprint(v) {
				found = true
			}
		}
		if !found {
			return fmt.Errorf("parameter %s: %v is not one of %v", name, v, allowed)
		}
	}
	if n, ok := v.(int64); ok {
		if lo, ok := Normalize(def["minValue"]).(int64); ok && n < lo {
			return fmt.Errorf("parameter %s: %d is under its minValue %d", name, n, lo)
		}
		if hi, ok := Normalize(def["maxValue"]).(int64); ok && n > hi {
			return fmt.Errorf("parameter %s: %d is over its maxValue %d", name, n, hi)
		}
	}
	if s, ok := v.(string); ok {
		if lo, ok := Normalize(def["minLength"]).(int64); ok && int64(len(s)) < lo {
			return fmt.Errorf("parameter %s: %q is shorter than %d", name, s, lo)
		}
		if hi, ok := Normalize(def["maxLength"]).(int64); ok && int64(len(s)) > hi {
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

// Normalize turns JSON numbers into int64 (the template has no others).
func Normalize(v any) any {
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
	return Normalize(v), nil
}

// resources resolves a template's resources into d, child and nested
// deployments' resources included.
func (e *evaluator) resources(tmpl map[string]any, d *Deployment) error {
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
func (e *evaluator) resource(raw map[string]any, parent *Resource, d *Deployment) error {
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
	body := DeepCopy(raw)
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
	d.Declared[e.template][strings.ToLower(r.ID)] = true
	d.Resources = append(d.Resources, r)
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
func (e *evaluator) copies(raw map[string]any, c any, parent *Resource, d *Deployment) error {
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
	one := DeepCopy(raw)
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
func (e *evaluator) declare(raw map[string]any, parent *Resource, d *Deployment) {
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
	d.Declared[e.template][strings.ToLower(r.ID)] = true
	children, _ := raw["resources"].([]any)
	for _, c := range children {
		if child, ok := c.(map[string]any); ok {
			e.declare(child, &r, d)
		}
	}
}

// describe names a resolved resource: its type, API version, full ID and
// scope.
func (e *evaluator) describe(body map[string]any) (Resource, error) {
	r := Resource{Body: body}
	r.Type, _ = body["type"].(string)
	r.APIVersion, _ = body["apiVersion"].(string)
	r.Name, _ = body["name"].(string)
	if r.Type == "" || r.APIVersion == "" || r.Name == "" {
		return r, fmt.Errorf("a resource needs a type, an apiVersion and a name")
	}
	rg := e.scope.ResourceGroup
	if g, ok := body["resourceGroup"].(string); ok {
		rg = g
	}
	if s, ok := body["scope"].(string); ok {
		if !strings.HasPrefix(s, "/") {
			s = fmt.Sprintf("/subscriptions/%s/resourceGroups/%s/providers/%s", e.scope.Subscription, rg, s)
		}
		r.Scope = s
		r.ID = s + "/providers/" + typedNames(r.Type, strings.Split(r.Name, "/"))
		return r, nil
	}
	r.ID = fmt.Sprintf("/subscriptions/%s/resourceGroups/%s/providers/%s", e.scope.Subscription, rg, typedNames(r.Type, strings.Split(r.Name, "/")))
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
func (e *evaluator) nested(r Resource, tmpl map[string]any, d *Deployment) error {
	if scope, _ := Path(r.Body, "properties", "expressionEvaluationOptions", "scope").(string); !strings.EqualFold(scope, "inner") {
		return fmt.Errorf("a nested template must have expressionEvaluationOptions.scope inner")
	}
	given := map[string]any{}
	params, _ := Path(r.Body, "properties", "parameters").(map[string]any)
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
		scope.ResourceGroup = g
	}
	inner, err := newEvaluator(tmpl, given, scope)
	if err != nil {
		return err
	}
	inner.template = len(d.Declared)
	d.Declared = append(d.Declared, map[string]bool{})
	return inner.resources(tmpl, d)
}
